"""A local HTTP receiver for lead-delivery tests (ADF posts, JSON webhooks).

Stores every request to a non-control path as one JSON file in ``--out`` (``000001.json``,
``000002.json``, ... written atomically, in arrival order):

    {"seq": n, "method": "POST", "path": "/adf", "headers": {lowercased name: value},
     "body": text (UTF-8, or "" when not UTF-8), "body_b64": base64 of the raw body,
     "status": the status it was answered with}

Answers ``--status`` (default 200) with an empty body; a test switches the answer at run time
(for outage and rejection tests) through the control path, which is never stored:

    POST /__control   {"status": 503}            answer 503 from now on
    POST /__control   {"delay_ms": 2000}         wait before answering (timeouts)
    GET  /__control   {"status": n, "delay_ms": n, "received": n}

    http_sink.py --port N --out DIR [--status 200]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LOCK = threading.Lock()
STATE = {"status": 200, "delay_ms": 0, "received": 0}
OUT: Path


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the files are the record
        pass

    def _body(self) -> bytes:
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _answer(self, status: int, body: bytes = b"", ctype: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _control(self, method: str) -> None:
        if method == "POST":
            try:
                change = json.loads(self._body() or b"{}")
            except ValueError:
                self._answer(400, b"control body must be JSON")
                return
            with LOCK:
                for k in ("status", "delay_ms"):
                    if k in change:
                        STATE[k] = int(change[k])
        with LOCK:
            snap = dict(STATE)
        self._answer(200, json.dumps(snap).encode(), "application/json")

    def _store(self, method: str) -> None:
        body = self._body()
        with LOCK:
            status, delay = STATE["status"], STATE["delay_ms"]
            STATE["received"] += 1
            seq = STATE["received"]
        if delay:
            time.sleep(delay / 1000)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        record = {
            "seq": seq,
            "method": method,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": text,
            "body_b64": base64.b64encode(body).decode(),
            "status": status,
        }
        tmp = OUT / f".{seq:06d}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, OUT / f"{seq:06d}.json")
        self._answer(status)

    def _dispatch(self, method: str) -> None:
        if self.path.split("?")[0] == "/__control":
            self._control(method)
        else:
            self._store(method)

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def do_PUT(self):  # noqa: N802
        self._dispatch("PUT")

    def do_GET(self):  # noqa: N802
        self._dispatch("GET")


def main() -> None:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--status", type=int, default=200)
    a = ap.parse_args()
    OUT = a.out
    OUT.mkdir(parents=True, exist_ok=True)
    STATE["status"] = a.status
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
