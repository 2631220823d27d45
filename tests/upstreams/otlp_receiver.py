"""A small OTLP/HTTP trace receiver for the tracing tests.

Decodes every ``POST /v1/traces`` body as an ``ExportTraceServiceRequest`` (protobuf, from
PyPI ``opentelemetry-proto``) and appends one JSON line per span to ``--out``:

    {"kind": "span", "service": ..., "scope": ..., "trace_id": hex, "span_id": hex,
     "parent_span_id": hex or "", "name": ..., "span_kind": "SERVER"|..., "start": ns, "end": ns,
     "attributes": {key: value}, "status": "UNSET"|"OK"|"ERROR", "trace_state": ...,
     "flags": int}

and, per export request, ``{"kind": "export", "headers": {lowercased name: value}}`` (so a test can
check configured export headers arrive). Answers an empty ``ExportTraceServiceResponse``.

    otlp_receiver.py --port N --out FILE
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

LOCK = threading.Lock()


def any_value(v) -> object:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def span_lines(req: ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in req.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "kind": "span",
                        "service": resource.get("service.name"),
                        "resource": resource,
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "span_kind": Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": {kv.key: any_value(kv.value) for kv in s.attributes},
                        "status": Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                        "trace_state": s.trace_state,
                        "flags": s.flags,
                    }
                )
    return out


class Handler(BaseHTTPRequestHandler):
    out: Path

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        if (self.headers.get("content-encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        req = ExportTraceServiceRequest()
        try:
            req.ParseFromString(body)
        except Exception:  # a body that is not the message: the exporter's bug
            self.send_error(400, "not an ExportTraceServiceRequest")
            return
        lines = [{"kind": "export", "headers": {k.lower(): v for k, v in self.headers.items()}}]
        lines += span_lines(req)
        with LOCK, self.out.open("a", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    Handler.out = args.out
    args.out.touch()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
