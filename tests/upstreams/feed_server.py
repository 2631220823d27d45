#!/usr/bin/env python3
"""A dealer's feed endpoint for tests/it/feeds.rs: serves one file over HTTP with an ETag
(the SHA-256 of the bytes) and Last-Modified, answers 304 to a matching If-None-Match, and
requires `Authorization` when --auth is given. Each request is logged to --log as
`<status> <if-none-match or ->`.

With --huge BYTES, a file `<--file>.mode` holding `huge` or `huge-declared` switches the answer
to a generated body of BYTES (CSV rows, written 64 KiB at a time, never held in memory): without
a Content-Length (`huge`) or with one (`huge-declared`). The bytes actually written before the
client hung up are logged as `sent <mode> <n>`.

    python3 feed_server.py --port 8099 --file inventory.csv --log requests.log [--auth "Bearer x"]
"""
import argparse
import email.utils
import hashlib
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def record(self, status):
        with open(args.log, "a") as f:
            f.write("%d %s\n" % (status, self.headers.get("If-None-Match", "-")))

    def huge(self, mode):
        self.record(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        if mode == "huge-declared":
            self.send_header("Content-Length", str(args.huge))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        row = b"VIN,Stock #,Year,Make\n" + b"1HGCM82633A004352,S1,2020,Honda\n" * 2047
        piece = (row * (65536 // len(row) + 1))[:65536]
        sent = 0
        try:
            while sent < args.huge:
                n = min(len(piece), args.huge - sent)
                self.wfile.write(piece[:n])
                sent += n
        except (BrokenPipeError, ConnectionResetError):
            pass
        with open(args.log, "a") as f:
            f.write("sent %s %d\n" % (mode, sent))
        self.close_connection = True

    def do_GET(self):
        mode = ""
        if args.huge:
            try:
                with open(args.file + ".mode") as f:
                    mode = f.read().strip()
            except FileNotFoundError:
                pass
        if mode in ("huge", "huge-declared"):
            return self.huge(mode)
        if args.auth and self.headers.get("Authorization") != args.auth:
            self.record(401)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(args.file, "rb") as f:
            body = f.read()
        etag = '"%s"' % hashlib.sha256(body).hexdigest()[:32]
        if self.headers.get("If-None-Match") == etag:
            self.record(304)
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.record(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(os.path.getmtime(args.file), usegmt=True))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--auth")
    p.add_argument("--huge", type=int, default=0)
    args = p.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
