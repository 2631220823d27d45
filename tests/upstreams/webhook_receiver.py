"""A lead webhook receiver for the outbox tests (tests/it/outbox.rs); Python standard library only.

Every ``POST`` (other than ``/_control``) is recorded as one JSON line appended to ``--out``
*when it arrives*, before it is answered:

    {"lead_id": <the body's lead_id>, "idempotency_key": <header>, "content_type": ...,
     "answered": <status it is about to get>, "body": <the parsed JSON body>}

then answered after ``delay_ms`` with the status of the current mode: ``ok`` → 200,
``unavailable`` → 503, ``reject`` → 400. ``POST /_control`` with ``{"mode": ..., "delay_ms": N}``
switches mode and delay at run time. "Down" is the process stopped (the test kills it and
starts it again on the same port and file).

    webhook_receiver.py --port N --out FILE [--mode ok|unavailable|reject] [--delay-ms N]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"mode": "ok", "delay_ms": 0}
STATUS = {"ok": 200, "unavailable": 503, "reject": 400}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    out = ""

    def log_message(self, *args):  # keep stderr quiet
        pass

    def reply(self, status: int, body: bytes = b"{}") -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if self.path == "/_control":
            ctl = json.loads(raw or b"{}")
            with LOCK:
                if ctl.get("mode") in STATUS:
                    STATE["mode"] = ctl["mode"]
                if "delay_ms" in ctl:
                    STATE["delay_ms"] = int(ctl["delay_ms"])
            self.reply(200, json.dumps(STATE).encode())
            return
        with LOCK:
            mode, delay = STATE["mode"], STATE["delay_ms"]
        status = STATUS[mode]
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        line = {
            "lead_id": body.get("lead_id") if isinstance(body, dict) else None,
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "content_type": self.headers.get("Content-Type"),
            "answered": status,
            "body": body,
        }
        with LOCK:
            with open(self.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if delay:
            time.sleep(delay / 1000)
        self.reply(status)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=sorted(STATUS), default="ok")
    ap.add_argument("--delay-ms", type=int, default=0)
    a = ap.parse_args()
    STATE["mode"], STATE["delay_ms"] = a.mode, a.delay_ms
    Handler.out = a.out
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
