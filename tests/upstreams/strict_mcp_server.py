#!/usr/bin/env python3
"""Strict MCP upstream peer for aap-gateway tests, built on PyPI ``mcp==2.3.0``.

Serves the five AAP 3.0 tools (aap_dealer_information, aap_inventory_facets,
aap_inventory_search, aap_inventory_vehicle, aap_lead_submit) from the repository's
demo data over Streamable HTTP at ``/mcp``, for both MCP eras:

* 2026-07-28 (modern, stateless): the SDK's ``_streamable_http_modern.handle_modern_request``.
  The SDK routes a POST there when its ``MCP-Protocol-Version`` header names a
  non-handshake revision, and then requires ``Mcp-Method`` / ``Mcp-Name`` to be present
  and equal to the body (``mcp.shared.inbound.classify_inbound_request``: 400 + -32020).
* 2025-11-25 (legacy): ``initialize`` + ``notifications/initialized``; stateless by
  default (no ``Mcp-Session-Id``), SDK sessions with ``--legacy-sessions``.

Strictness the SDK does not provide is added by ``StrictIngress`` (an ASGI middleware
in front of the SDK app): a request whose body carries modern ``_meta`` but whose
``MCP-Protocol-Version`` header is missing (the SDK would silently serve it as a
legacy 2025-03-26 request) or names a handshake revision gets HTTP 400 + -32020.
``--modern-only`` refuses every legacy message (the SDK offers no switch to refuse
``initialize``), and ``AAP_MCP_TOKEN`` (env) makes every request need
``Authorization: Bearer <token>``.

Test hooks: ``--seen FILE`` appends, per POST whose body arrived, the ``Mcp-*``,
``traceparent`` and ``tracestate`` request headers it received and the body as text under ``body`` (one JSON object a line) so tests
can check what the gateway forwarded; a search whose
``filters.query`` is ``upstream-protocol-error`` is refused with JSON-RPC -32602, so
tests can check that an upstream protocol error reaches the client as such;
``--hold-until FILE`` (with ``--sse``) holds the result after the first progress
notification until FILE exists, so a test can see that the stream is not buffered.

    strict_mcp_server.py --port N --leads FILE [--sse] [--modern-only] [--legacy-sessions] [--seen FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aap_dealer  # noqa: E402
import anyio  # noqa: E402
import mcp.server._streamable_http_modern as sdk_modern  # noqa: E402
import mcp_types as types  # noqa: E402
import uvicorn  # noqa: E402
from mcp.server.caching import CacheHint  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS  # noqa: E402

log = logging.getLogger("strict-mcp")

MCP_PATH = "/mcp"
HEADER_MISMATCH = -32020
UNSUPPORTED_PROTOCOL_VERSION = -32022
MAX_BODY = 4 * 1024 * 1024
PV_META = "io.modelcontextprotocol/protocolVersion"


def build_server(dealer: aap_dealer.Dealer, sse: bool, hold: Path | None = None, delay_ms: int = 0) -> Server:
    tools_wire = aap_dealer.tool_catalog(dealer.schemas)
    tools = [types.Tool.model_validate(t) for t in tools_wire]
    input_schemas = {t["name"]: t["inputSchema"] for t in tools_wire}

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools, ttl_ms=60_000, cache_scope="public")

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        skill = aap_dealer.SKILL_BY_TOOL.get(params.name)
        if skill is None:
            raise MCPError(-32602, f"Unknown tool: {params.name}")
        filters = (params.arguments or {}).get("filters") or {}
        if isinstance(filters, dict) and filters.get("query") == "upstream-protocol-error":
            raise MCPError(-32602, "Invalid params: this upstream refuses the query", {"field": "filters.query"})
        if delay_ms:
            # A slow dealer system (--delay-ms): every tool call takes this long.
            await anyio.sleep(delay_ms / 1000)
        if sse:
            meta = ctx.meta or {}
            if meta.get("progress_token", meta.get("progressToken")) is not None:
                # A request-scoped notification makes the SDK commit text/event-stream at once.
                await ctx.session.report_progress(0, 1, f"{params.name}: working")
                if hold is not None:
                    # Test hook: answer only once the test has seen the first event.
                    for _ in range(400):
                        if hold.exists():
                            break
                        await anyio.sleep(0.05)
            else:
                # No progress token: outlast the (patched, short) SSE deferral window so the
                # SDK commits SSE and sends ": ping" keep-alives before the final response.
                await anyio.sleep(sdk_modern._SSE_PING_INTERVAL * 2.5)
        payload = dealer.execute(skill["id"], params.arguments if params.arguments is not None else {})
        if sse:
            await ctx.session.report_progress(1, 1, f"{params.name}: done")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload,
            is_error=aap_dealer.is_error(payload),
        )

    return Server(
        "aap-upstream-strict-mcp",
        version="1.0.0",
        title="AAP strict MCP upstream (test peer)",
        instructions="Demo Toyota AAP 3.0 tools (test peer for aap-gateway).",
        cache_hints={"server/discover": CacheHint(ttl_ms=60_000, scope="public")},
        get_tool_input_schema=input_schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _json_response(status: int, body: Any, extra_headers: list[tuple[bytes, bytes]] | None = None):
    raw = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
    headers = [(b"content-type", b"application/json")] if body is not None else []
    headers += [(b"content-length", str(len(raw)).encode())] + (extra_headers or [])

    async def respond(send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": raw})

    return respond


def _rpc_error(req_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req_id, "error": err}


class StrictIngress:
    """ASGI middleware: the strictness mcp 2.3.0 leaves to the application."""

    def __init__(self, app: Any, *, modern_only: bool, token: str | None, seen: Path | None = None):
        self.app = app
        self.modern_only = modern_only
        self.token = token
        self.seen = seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != MCP_PATH:
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))

        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            await _json_response(
                401,
                _rpc_error(None, -32001, "Unauthorized: a valid Bearer token is required"),
                [(b"www-authenticate", b'Bearer realm="aap-upstream", error="invalid_token"')],
            )(send)
            return

        pv = headers.get("mcp-protocol-version")
        legacy_header = pv is None or pv in HANDSHAKE_PROTOCOL_VERSIONS
        if scope["method"] != "POST":
            if self.modern_only:
                await _json_response(405, None, [(b"allow", b"POST")])(send)
                return
            await self.app(scope, receive, send)
            return

        chunks: list[bytes] = []
        size = 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                await _json_response(413, _rpc_error(None, -32600, "Request body too large"))(send)
                return
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        if self.seen is not None:
            mirror = {
                k: v for k, v in headers.items() if k.startswith("mcp-") or k in ("traceparent", "tracestate")
            }
            mirror["body"] = body.decode("utf-8", "replace")
            with self.seen.open("a", encoding="utf-8") as f:
                f.write(json.dumps(mirror) + "\n")
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None

        req_id = decoded.get("id") if isinstance(decoded, dict) else None
        method = decoded.get("method") if isinstance(decoded, dict) else None
        params = decoded.get("params") if isinstance(decoded, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        body_version = meta.get(PV_META) if isinstance(meta, dict) else None

        if self.modern_only and legacy_header:
            requested = pv
            if requested is None and method == "initialize" and isinstance(params, dict):
                requested = params.get("protocolVersion")
            if requested is None and isinstance(body_version, str):
                requested = body_version
            if requested is None or requested in HANDSHAKE_PROTOCOL_VERSIONS:
                await _json_response(
                    400,
                    _rpc_error(
                        req_id,
                        UNSUPPORTED_PROTOCOL_VERSION,
                        "Unsupported protocol version: this server speaks MCP 2026-07-28 only "
                        "(no initialize handshake; send MCP-Protocol-Version, Mcp-Method and Mcp-Name)",
                        {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested or ""},
                    ),
                )(send)
                return

        if isinstance(body_version, str) and method != "initialize" and legacy_header:
            # The SDK routes on the header only: without this check a modern body with a
            # missing (or handshake-era) MCP-Protocol-Version would be served as legacy.
            what = "is missing" if pv is None else f"({pv}) does not match the body's {body_version}"
            await _json_response(
                400,
                _rpc_error(req_id, HEADER_MISMATCH, f"MCP-Protocol-Version header {what}; a 2026-07-28 request must send MCP-Protocol-Version, Mcp-Method and Mcp-Name"),
            )(send)
            return

        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--leads", type=Path, required=True, help="JSONL file that accepted leads are appended to")
    ap.add_argument("--sse", action="store_true", help="answer tools/call with request-scoped SSE (SDK SSE mode; Accept must list text/event-stream)")
    ap.add_argument("--sse-keepalive", type=float, default=0.05, help="with --sse: SDK SSE deferral/keep-alive interval in seconds (default 0.05)")
    ap.add_argument("--modern-only", action="store_true", help="refuse legacy (initialize-era) traffic with 400 -32022 / 405")
    ap.add_argument("--legacy-sessions", action="store_true", help="legacy path: SDK stateful sessions (Mcp-Session-Id) instead of stateless")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--schemas-dir", type=Path, default=None)
    ap.add_argument("--hold-until", type=Path, default=None, help="with --sse and a progress token: after the first progress notification, wait (at most 20 s) until this file exists")
    ap.add_argument("--seen", type=Path, default=None, help="append the Mcp-*, traceparent and tracestate headers and the body of every POST to this JSONL file")
    ap.add_argument("--delay-ms", type=int, default=0, help="answer every tools/call this many milliseconds late (a slow upstream)")
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    if args.sse:
        # The SDK only commits text/event-stream when the handler emits a notification or
        # after _SSE_PING_INTERVAL (15 s) of silence; shorten that window for tests.
        sdk_modern._SSE_PING_INTERVAL = args.sse_keepalive

    dealer = aap_dealer.Dealer(args.leads, args.data_dir, args.schemas_dir, peer="strict-mcp")
    server = build_server(dealer, sse=args.sse, hold=args.hold_until, delay_ms=args.delay_ms)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=not args.sse,
        stateless_http=not args.legacy_sessions,
        host=args.host,
    )
    token = os.environ.get("AAP_MCP_TOKEN") or None
    wrapped = StrictIngress(app, modern_only=args.modern_only, token=token, seen=args.seen)
    print(
        f"strict-mcp: listening on http://{args.host}:{args.port}{MCP_PATH} "
        f"(mcp 2.3.0; {'SSE' if args.sse else 'JSON'} responses; "
        f"{'modern-only' if args.modern_only else 'dual-era'}; leads -> {args.leads}"
        f"{'; bearer token required' if token else ''})",
        flush=True,
    )
    uvicorn.run(wrapped, host=args.host, port=args.port, log_level=args.log_level, lifespan="on")


if __name__ == "__main__":
    main()
