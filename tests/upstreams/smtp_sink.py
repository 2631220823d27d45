"""A real SMTP server (PyPI ``aiosmtpd``) for the ADF e-mail sink tests.

Stores every accepted message as one JSON file in ``--out`` (``000001.json``, ... written
atomically, in arrival order):

    {"seq": n, "mail_from": "...", "rcpt_tos": [...], "data": the raw message (text),
     "tls": true when the session ran over TLS (STARTTLS or implicit), "login": the AUTH user or null,
     "subject", "message_id", "content_type": headers as parsed by Python's ``email`` package,
     "body": the message body with its transfer encoding undone (quoted-printable, base64)}

Options:
    --tls-cert/--tls-key   offer STARTTLS with this certificate; STARTTLS is then required
    --implicit-tls         TLS from the first byte instead (SMTPS) with the same certificate
    --auth USER:PASSWORD   require AUTH (PLAIN/LOGIN) with these credentials
    --reject CODE          answer every DATA with this reply code (e.g. 451 or 554)

    smtp_sink.py --port N --out DIR [options]
"""

from __future__ import annotations

import argparse
import email
import email.policy
import json
import os
import ssl
import threading
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

LOCK = threading.Lock()
COUNT = {"n": 0}


class Store:
    def __init__(self, out: Path, reject: int | None):
        self.out = out
        self.reject = reject

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        if self.reject:
            return f"{self.reject} refused by test sink"
        with LOCK:
            COUNT["n"] += 1
            seq = COUNT["n"]
        login = session.auth_data if session.authenticated else None
        raw = envelope.original_content or b""
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        record = {
            "seq": seq,
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "data": envelope.content.decode("utf-8", errors="replace")
            if isinstance(envelope.content, bytes)
            else envelope.content,
            "tls": session.ssl is not None,
            "login": login,
            "subject": str(msg["subject"] or ""),
            "message_id": str(msg["message-id"] or ""),
            "content_type": msg.get_content_type(),
            "body": msg.get_content() if not msg.is_multipart() else "",
        }
        tmp = self.out / f".{seq:06d}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.out / f"{seq:06d}.json")
        return "250 OK"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--implicit-tls", action="store_true")
    ap.add_argument("--auth")
    ap.add_argument("--reject", type=int)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    kwargs: dict = {"hostname": "127.0.0.1", "port": a.port}
    ctx = None
    if a.tls_cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
    if ctx is not None and a.implicit_tls:
        kwargs["ssl_context"] = ctx
    elif ctx is not None:
        kwargs["tls_context"] = ctx
        kwargs["require_starttls"] = True
    if a.auth:
        user, _, password = a.auth.partition(":")

        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = (
                isinstance(auth_data, LoginPassword)
                and auth_data.login.decode() == user
                and auth_data.password.decode() == password
            )
            return AuthResult(success=ok, auth_data=user if ok else None)

        kwargs["authenticator"] = authenticator
        kwargs["auth_required"] = True
        # Plain sessions may authenticate only when the test asks for no TLS at all.
        kwargs["auth_require_tls"] = ctx is not None
    controller = Controller(Store(a.out, a.reject), **kwargs)
    controller.start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
