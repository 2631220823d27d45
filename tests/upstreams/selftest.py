#!/usr/bin/env python3
"""Self-test of the upstream peers over plain HTTP (urllib), run by selftest.sh in the venv.

Starts every peer variant on free loopback ports with temporary lead files, checks the wire
behaviour the gateway's forwarding tests rely on, validates every AAP payload against
schemas/*.schema.json (format assertion on), stops the peers and prints
``upstreams-selftest: N passed, N failed``. Exit status 1 if anything failed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCHEMAS = {p.name[: -len(".schema.json")]: json.loads(p.read_text()) for p in (REPO / "schemas").glob("*.schema.json")}
VALIDATORS = {k: Draft202012Validator(v, format_checker=FormatChecker()) for k, v in SCHEMAS.items()}
EXT_URI = "https://autoagentprotocol.org/extensions/aap/v3.0"
ERR_TAG = "https://autoagentprotocol.org/extensions/aap/error"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TOOLS = ["aap_dealer_information", "aap_inventory_facets", "aap_inventory_search", "aap_inventory_vehicle", "aap_lead_submit"]
SOLD_STOCK = "DT-1011"

PASSED = 0
FAILED = 0


def check(name: str, cond: bool, detail: Any = "") -> bool:
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print(f"  PASS {name}")
    else:
        FAILED += 1
        text = detail if isinstance(detail, str) else json.dumps(detail)[:600]
        print(f"  FAIL {name}: {text}")
    return cond


def schema_errors(stem: str, instance: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"[:200] for e in VALIDATORS[stem].iter_errors(instance)]


def check_schema(name: str, stem: str, instance: Any) -> bool:
    errs = schema_errors(stem, instance)
    return check(f"{name} validates {stem}.schema.json", not errs, errs[:5])


# ------------------------------------------------------------------------------------- HTTP
class Resp:
    def __init__(self, status: int, headers: Any, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def ctype(self) -> str:
        return (self.headers.get("content-type") or "").split(";")[0].strip()

    def json(self) -> Any:
        return json.loads(self.body)

    def sse_messages(self) -> list[dict[str, Any]]:
        out = []
        for block in self.body.decode().replace("\r\n", "\n").split("\n\n"):
            data = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
            if data and "".join(data).strip():
                out.append(json.loads("\n".join(data)))
        return out

    def rpc(self) -> dict[str, Any]:
        """The JSON-RPC response, from a JSON body or the last message of an SSE body."""
        if self.ctype == "text/event-stream":
            msgs = [m for m in self.sse_messages() if "id" in m and ("result" in m or "error" in m)]
            return msgs[-1]
        return self.json()


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 20) -> Resp:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Resp(r.status, r.headers, r.read())
    except urllib.error.HTTPError as e:
        return Resp(e.code, e.headers, e.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------- peers
class Peer:
    def __init__(self, name: str, argv: list[str], port: int, leads: Path, env: dict[str, str] | None = None):
        self.name, self.port, self.leads = name, port, leads
        self.log = leads.with_suffix(".log")
        self.proc = subprocess.Popen(
            argv,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 60) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                time.sleep(0.2)
        return False

    def lead_lines(self) -> int:
        if not self.leads.exists():
            return 0
        return sum(1 for line in self.leads.read_text().splitlines() if line.strip())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# ------------------------------------------------------------------------------------- payloads
# One consent time for the whole run: a retry must send the identical payload, and a time taken
# per call would differ whenever the two calls straddle a second boundary (IDEMPOTENCY_CONFLICT).
GRANTED_AT = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def lead_request(key: str, message: str = "Is this car still available for a test drive?") -> dict[str, Any]:
    granted = GRANTED_AT
    return {
        "type": "lead.submit.request",
        "customer": {"first_name": "Alex", "last_name": "Sample", "email": "alex.sample@example.com", "preferred_contact": "email"},
        "consent": {
            "granted_at": granted,
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may contact me by email about this inquiry.",
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": "upstreams-selftest"},
        "idempotency_key": key,
        "vehicle_of_interest": {"stock": "DT-1001"},
        "message": message,
    }


SEARCH = {
    "type": "inventory.search.request",
    "filters": {"make": ["Toyota"], "status": ["available"], "price_min": 20000, "price_max": 45000, "body": ["suv"]},
    "sort": {"field": "price", "order": "asc"},
    "pagination": {"limit": 5, "skip": 1},
}


def check_search_semantics(name: str, data: dict[str, Any]) -> None:
    vs = data.get("vehicles", [])
    ok = bool(vs) and all(
        v.get("make") == "Toyota" and v.get("status") == "available" and v.get("body") == "suv" and 20000 <= v.get("price", -1) <= 45000
        for v in vs
    )
    check(f"{name}: filters make/status/body/price_min/price_max honoured", ok, [(v.get("stock"), v.get("make"), v.get("body"), v.get("price")) for v in vs])
    prices = [v.get("price") for v in vs]
    check(f"{name}: sorted by price asc", prices == sorted(prices), prices)
    check(f"{name}: skip/limit echoed (skip 1, limit 5, <=5 vehicles)", data.get("skip") == 1 and data.get("limit") == 5 and len(vs) <= 5, {k: data.get(k) for k in ("skip", "limit", "total")})


# ------------------------------------------------------------------------------------- MCP helpers
def modern_headers(method: str, name: str | None = None, *, pv: bool = True, mname: bool = True, mmethod: bool = True) -> dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if pv:
        h["MCP-Protocol-Version"] = MODERN
    if mmethod:
        h["Mcp-Method"] = method
    if name is not None and mname:
        h["Mcp-Name"] = name
    return h


def modern_body(method: str, params: dict[str, Any] | None = None, rid: Any = 1, progress: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "upstreams-selftest", "version": "1.0.0"},
    }
    if progress:
        meta["progressToken"] = progress
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"_meta": meta, **(params or {})}}


def call_tool_modern(url: str, tool: str, args: Any, **kw: Any) -> Resp:
    return http("POST", url, modern_body("tools/call", {"name": tool, "arguments": args}, progress=kw.pop("progress", None)), modern_headers("tools/call", tool), **kw)


def tool_result_checks(name: str, resp: Resp, stem: str, expect_error: str | None = None, modern: bool = True) -> dict[str, Any] | None:
    try:
        msg = resp.rpc()
    except Exception as e:  # noqa: BLE001
        check(f"{name}: JSON-RPC response", False, f"{e}: {resp.body[:300]!r}")
        return None
    result = msg.get("result")
    if not check(f"{name}: HTTP 200 with a result", resp.status == 200 and isinstance(result, dict), msg):
        return None
    sc = result.get("structuredContent")
    text = next((c.get("text") for c in result.get("content", []) if c.get("type") == "text"), None)
    check(f"{name}: text content equals structuredContent", text is not None and json.loads(text) == sc, text and text[:200])
    if modern:
        check(f"{name}: resultType complete", result.get("resultType") == "complete", result.get("resultType"))
    if expect_error:
        check(f"{name}: isError true, aap.error {expect_error}", result.get("isError") is True and sc.get("type") == "aap.error" and sc.get("code") == expect_error, sc)
        check_schema(name, "error", sc)
    else:
        check(f"{name}: isError false", result.get("isError") is False, result.get("isError"))
        check_schema(name, stem, sc)
    return sc


# ------------------------------------------------------------------------------------- suites
def test_strict(url: str, peer: Peer) -> None:
    print(f"[strict-mcp] {url}")
    args = {"type": "inventory.search.request", "pagination": {"limit": 2}}
    r = http("POST", url, modern_body("tools/call", {"name": "aap_inventory_search", "arguments": args}), modern_headers("tools/call", "aap_inventory_search", mname=False))
    check("modern tools/call without Mcp-Name -> 400 -32020", r.status == 400 and r.json().get("error", {}).get("code") == -32020, (r.status, r.body[:200]))
    r = http("POST", url, modern_body("tools/call", {"name": "aap_inventory_search", "arguments": args}), modern_headers("tools/call", "aap_inventory_search", mmethod=False))
    check("modern tools/call without Mcp-Method -> 400 -32020", r.status == 400 and r.json().get("error", {}).get("code") == -32020, (r.status, r.body[:200]))
    r = http("POST", url, modern_body("tools/call", {"name": "aap_inventory_search", "arguments": args}), modern_headers("tools/call", "aap_inventory_search", pv=False))
    check("modern tools/call without MCP-Protocol-Version -> 400 -32020", r.status == 400 and r.json().get("error", {}).get("code") == -32020, (r.status, r.body[:200]))
    h = modern_headers("tools/call", "aap_inventory_facets")
    r = http("POST", url, modern_body("tools/call", {"name": "aap_inventory_search", "arguments": args}), h)
    check("modern tools/call with conflicting Mcp-Name -> 400 -32020", r.status == 400 and r.json().get("error", {}).get("code") == -32020, (r.status, r.body[:200]))
    b = modern_body("server/discover")
    b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "1900-01-01"
    hh = modern_headers("server/discover")
    hh["MCP-Protocol-Version"] = "1900-01-01"
    r = http("POST", url, b, hh)
    check("unsupported modern version -> 400 -32022 with supported list", r.status == 400 and r.json().get("error", {}).get("code") == -32022 and MODERN in r.json()["error"].get("data", {}).get("supported", []), r.body[:300])

    r = http("POST", url, modern_body("server/discover"), modern_headers("server/discover"))
    res = r.json().get("result", {}) if r.status == 200 else {}
    check("server/discover: supportedVersions, tools capability, ttlMs, cacheScope", MODERN in res.get("supportedVersions", []) and "tools" in res.get("capabilities", {}) and isinstance(res.get("ttlMs"), int) and res.get("cacheScope") in ("public", "private"), r.body[:300])

    r = http("POST", url, modern_body("tools/list"), modern_headers("tools/list"))
    res = r.json().get("result", {}) if r.status == 200 else {}
    tools = res.get("tools", [])
    check("tools/list: the five AAP tools in canonical order", [t.get("name") for t in tools] == TOOLS, [t.get("name") for t in tools])
    check("tools/list: ttlMs and cacheScope", isinstance(res.get("ttlMs"), int) and res.get("cacheScope") in ("public", "private"), {k: res.get(k) for k in ("ttlMs", "cacheScope")})
    by = {t["name"]: t for t in tools}
    if "aap_inventory_search" in by:
        t = by["aap_inventory_search"]
        check("tools/list: inputSchema is the canonical request schema", t.get("inputSchema") == SCHEMAS["inventory-search-request"], "differs")
        try:
            Draft202012Validator.check_schema(t.get("outputSchema"))
            ok = True
        except Exception as e:  # noqa: BLE001
            ok = str(e)[:200]
        check("tools/list: outputSchema is a valid 2020-12 schema", ok is True, ok)
        caps = (t.get("_meta") or {}).get("autoagentprotocol.org/aap", {}).get("capabilities")
        check_schema("search tool _meta capabilities", "inventory-capabilities", caps)
        lead_ann = by.get("aap_lead_submit", {}).get("annotations", {})
        check("lead tool annotations readOnly false / destructive false / idempotent false", lead_ann.get("readOnlyHint") is False and lead_ann.get("destructiveHint") is False and lead_ann.get("idempotentHint") is False, lead_ann)

    r = call_tool_modern(url, "aap_inventory_search", SEARCH)
    check("modern search: application/json (default JSON mode)", r.ctype == "application/json", r.ctype)
    sc = tool_result_checks("modern search", r, "inventory-search-response")
    if sc:
        check_search_semantics("modern search", sc["data"])
        first_vin = next((v["vin"] for v in sc["data"]["vehicles"] if "vin" in v), None)
        if first_vin:
            tool_result_checks("modern vehicle by vin", call_tool_modern(url, "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": first_vin}), "inventory-vehicle-response")
    full = tool_result_checks("modern search, all listed", call_tool_modern(url, "aap_inventory_search", {"type": "inventory.search.request", "pagination": {"limit": 100}}), "inventory-search-response")
    if full:
        statuses = {v["status"] for v in full["data"]["vehicles"]}
        check("search never lists sold units (total 92 of 100)", full["data"]["total"] == 92 and statuses <= {"available", "intransit", "pending"}, (full["data"]["total"], statuses))
    tool_result_checks("modern facets", call_tool_modern(url, "aap_inventory_facets", {"type": "inventory.facets.request", "filters": {"make": ["Toyota"]}}), "inventory-facets-response")
    tool_result_checks("modern dealer information", call_tool_modern(url, "aap_dealer_information", {"type": "dealer.information.request"}), "dealer-information-response")
    tool_result_checks("modern vehicle by vehicle_id (no VIN, in transit)", call_tool_modern(url, "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vehicle_id": "veh_0042"}), "inventory-vehicle-response")
    tool_result_checks("modern vehicle sold -> VEHICLE_UNAVAILABLE", call_tool_modern(url, "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "stock": SOLD_STOCK}), "", expect_error="VEHICLE_UNAVAILABLE")
    tool_result_checks("modern vehicle unknown -> VEHICLE_NOT_FOUND", call_tool_modern(url, "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "stock": "NOPE-1"}), "", expect_error="VEHICLE_NOT_FOUND")
    sc = tool_result_checks("modern search with unknown filter -> SCHEMA_VALIDATION_FAILED", call_tool_modern(url, "aap_inventory_search", {"type": "inventory.search.request", "filters": {"colour": ["red"]}}), "", expect_error="SCHEMA_VALIDATION_FAILED")
    if sc:
        check("validation error lists details.errors[] with instanceLocation", any(e.get("instanceLocation") == "/filters" for e in sc.get("details", {}).get("errors", [])), sc.get("details"))
    tool_result_checks("modern search with a cursor -> INVALID_CURSOR (skip/limit only)", call_tool_modern(url, "aap_inventory_search", {"type": "inventory.search.request", "pagination": {"cursor": "abc"}}), "", expect_error="INVALID_CURSOR")
    r = call_tool_modern(url, "aap_no_such_tool", {})
    check("unknown tool -> JSON-RPC error (not a tool result)", "error" in r.rpc() and r.rpc()["error"].get("code") == -32602, r.body[:200])

    key = str(uuid.uuid4())
    a = tool_result_checks("modern lead submit", call_tool_modern(url, "aap_lead_submit", lead_request(key)), "lead-submit-response")
    b = tool_result_checks("modern lead retry (same key)", call_tool_modern(url, "aap_lead_submit", lead_request(key)), "lead-submit-response")
    if a and b:
        check("lead: status received, retry returns the same lead_id", "data" in a and "data" in b and a["data"]["status"] == "received" and a["data"]["lead_id"] == b["data"]["lead_id"], (a.get("data"), b.get("data") or b.get("code")))
    check("lead: exactly one JSONL line for two submissions", peer.lead_lines() == 1, peer.lead_lines())
    tool_result_checks("modern lead same key, other payload -> IDEMPOTENCY_CONFLICT", call_tool_modern(url, "aap_lead_submit", lead_request(key, "different")), "", expect_error="IDEMPOTENCY_CONFLICT")
    check("lead: conflict appends nothing", peer.lead_lines() == 1, peer.lead_lines())
    rec = json.loads(peer.leads.read_text().splitlines()[0])
    check("lead log record carries idempotency_key, request and response", rec.get("idempotency_key") == key and rec.get("request", {}).get("type") == "lead.submit.request" and rec.get("response", {}).get("data", {}).get("lead_id") == a["data"]["lead_id"] if a else False, list(rec))

    # Legacy era on the same endpoint (stateless by default).
    lh = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "upstreams-selftest", "version": "1"}}}
    r = http("POST", url, init, lh)
    check("legacy initialize -> 2025-11-25, no Mcp-Session-Id (stateless)", r.status == 200 and r.rpc().get("result", {}).get("protocolVersion") == LEGACY and r.headers.get("mcp-session-id") is None, (r.status, r.body[:200]))
    lh2 = {**lh, "MCP-Protocol-Version": LEGACY}
    r = http("POST", url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, lh2)
    check("legacy notifications/initialized -> 202", r.status == 202, r.status)
    r = http("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "aap_inventory_search", "arguments": SEARCH}}, lh2)
    sc = tool_result_checks("legacy search on strict server", r, "inventory-search-response", modern=False)
    if sc:
        check_search_semantics("legacy search on strict server", sc["data"])


def test_strict_sse(url: str) -> None:
    print(f"[strict-mcp --sse] {url}")
    r = call_tool_modern(url, "aap_inventory_search", SEARCH)
    check("--sse: tools/call answered as text/event-stream", r.status == 200 and r.ctype == "text/event-stream", (r.status, r.ctype))
    check("--sse: stream carries a ': ping' keep-alive before the response", b": ping" in r.body, r.body[:120])
    sc = tool_result_checks("--sse search", r, "inventory-search-response")
    if sc:
        check_search_semantics("--sse search", sc["data"])
    r = call_tool_modern(url, "aap_inventory_vehicle", {"type": "inventory.vehicle.request", "stock": SOLD_STOCK}, progress="p-1")
    msgs = r.sse_messages() if r.ctype == "text/event-stream" else []
    check("--sse with progressToken: notifications/progress precede the response", len(msgs) >= 2 and msgs[0].get("method") == "notifications/progress" and msgs[0]["params"].get("progressToken") == "p-1", msgs[:1])
    tool_result_checks("--sse vehicle sold", r, "", expect_error="VEHICLE_UNAVAILABLE")
    h = modern_headers("tools/call", "aap_inventory_search")
    h["Accept"] = "application/json"
    r = http("POST", url, modern_body("tools/call", {"name": "aap_inventory_search", "arguments": SEARCH}), h)
    check("--sse: Accept without text/event-stream -> 406 (SDK SSE mode)", r.status == 406, r.status)
    r = http("POST", url, modern_body("tools/list"), modern_headers("tools/list"))
    check("--sse: fast tools/list still answered as JSON (SDK defers SSE)", r.status == 200 and r.ctype == "application/json", (r.status, r.ctype))


def test_strict_modern_only(url: str, token: str) -> None:
    print(f"[strict-mcp --modern-only, AAP_MCP_TOKEN] {url}")
    auth = {"Authorization": f"Bearer {token}"}
    r = http("POST", url, modern_body("tools/list"), modern_headers("tools/list"))
    check("AAP_MCP_TOKEN: no Authorization -> 401 with WWW-Authenticate", r.status == 401 and "bearer" in (r.headers.get("www-authenticate") or "").lower(), (r.status, dict(r.headers)))
    r = http("POST", url, modern_body("tools/list"), {**modern_headers("tools/list"), "Authorization": "Bearer wrong"})
    check("AAP_MCP_TOKEN: wrong token -> 401", r.status == 401, r.status)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = http("POST", url, init, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **auth})
    err = r.json().get("error", {}) if r.ctype == "application/json" else {}
    check("--modern-only: initialize -> 400 -32022, data.supported [2026-07-28]", r.status == 400 and err.get("code") == -32022 and err.get("data", {}).get("supported") == [MODERN], r.body[:300])
    r = http("GET", url, None, {"Accept": "text/event-stream", **auth})
    check("--modern-only: GET -> 405 Allow: POST", r.status == 405 and r.headers.get("allow") == "POST", (r.status, r.headers.get("allow")))
    r = http("POST", url, modern_body("tools/call", {"name": "aap_dealer_information", "arguments": {"type": "dealer.information.request"}}), {**modern_headers("tools/call", "aap_dealer_information"), **auth})
    tool_result_checks("--modern-only: modern call with token", r, "dealer-information-response")


def test_legacy(url: str, peer: Peer) -> None:
    print(f"[legacy-mcp] {url}")
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "upstreams-selftest", "version": "1"}}}
    r = http("POST", url, init, base)
    sid = r.headers.get("mcp-session-id")
    res = r.rpc().get("result", {}) if r.status == 200 else {}
    check("initialize -> 200, protocolVersion 2025-11-25, Mcp-Session-Id issued", r.status == 200 and res.get("protocolVersion") == LEGACY and bool(sid), (r.status, r.body[:200]))
    check("initialize: tools capability, listChanged false", res.get("capabilities", {}).get("tools") == {"listChanged": False}, res.get("capabilities"))
    sh = {**base, "Mcp-Session-Id": sid or "", "MCP-Protocol-Version": LEGACY}
    r = http("POST", url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sh)
    check("notifications/initialized -> 202", r.status == 202, r.status)
    r = http("POST", url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, sh)
    tools = r.rpc().get("result", {}).get("tools", []) if r.status == 200 else []
    check("tools/list with session: the five AAP tools, canonical input schemas", [t["name"] for t in tools] == TOOLS and tools[2].get("inputSchema") == SCHEMAS["inventory-search-request"], [t.get("name") for t in tools])
    r = http("POST", url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "aap_inventory_search", "arguments": SEARCH}}, sh)
    check("tools/call answered as SSE (SDK default)", r.ctype == "text/event-stream", r.ctype)
    sc = tool_result_checks("legacy search", r, "inventory-search-response", modern=False)
    if sc:
        check_search_semantics("legacy search", sc["data"])
    r = http("POST", url, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "aap_inventory_vehicle", "arguments": {"type": "inventory.vehicle.request", "stock": SOLD_STOCK}}}, sh)
    tool_result_checks("legacy vehicle sold", r, "", expect_error="VEHICLE_UNAVAILABLE", modern=False)
    r = http("POST", url, {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "aap_inventory_vehicle", "arguments": {"type": "inventory.vehicle.request", "vin": "JTDACAAU0S3000000"}}}, sh)
    tool_result_checks("legacy vehicle unknown", r, "", expect_error="VEHICLE_NOT_FOUND", modern=False)
    key = str(uuid.uuid4())
    a = tool_result_checks("legacy lead", http("POST", url, {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "aap_lead_submit", "arguments": lead_request(key)}}, sh), "lead-submit-response", modern=False)
    b = tool_result_checks("legacy lead retry", http("POST", url, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "aap_lead_submit", "arguments": lead_request(key)}}, sh), "lead-submit-response", modern=False)
    if a and b:
        check("legacy lead: same lead_id on retry, one JSONL line", "data" in a and "data" in b and a["data"]["lead_id"] == b["data"]["lead_id"] and peer.lead_lines() == 1, (a.get("data"), b.get("data") or b.get("code"), peer.lead_lines()))
    r = http("POST", url, {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "aap_dealer_information", "arguments": {"type": "dealer.information.request"}}}, {**base, "MCP-Protocol-Version": LEGACY})
    check("tools/call without Mcp-Session-Id -> 400", r.status == 400, (r.status, r.body[:200]))
    r = http("POST", url, {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, {**sh, "Mcp-Session-Id": "no-such-session"})
    check("unknown Mcp-Session-Id -> 404", r.status == 404, (r.status, r.body[:200]))
    r = http("POST", url, modern_body("server/discover"), modern_headers("server/discover"))
    body = r.json() if r.ctype == "application/json" else {}
    check("2026-07-28 probe -> 400 with a non-modern error (legacy-only signal)", r.status == 400 and body.get("error", {}).get("code") not in (-32020, -32021, -32022), (r.status, r.body[:200]))
    r = http("DELETE", url, None, {"Mcp-Session-Id": sid or "", "MCP-Protocol-Version": LEGACY})
    check("DELETE session -> 200", r.status == 200, r.status)
    r = http("POST", url, {"jsonrpc": "2.0", "id": 10, "method": "tools/list"}, sh)
    check("deleted session -> 404", r.status == 404, r.status)


def a2a_body(payload: Any, media: str | None, accepted: list[str] | None, rid: str = "r1", method: str = "SendMessage", role: str = "ROLE_USER") -> dict[str, Any]:
    part: dict[str, Any] = {"data": payload}
    if media:
        part["mediaType"] = media
    params: dict[str, Any] = {"message": {"messageId": f"m-{uuid.uuid4()}", "role": role, "parts": [part]}}
    if accepted is not None:
        params["configuration"] = {"acceptedOutputModes": accepted}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def mt(x: str, kind: str) -> str:
    return f"application/vnd.autoagent.{x}-{kind}+json"


def a2a_send(url: str, payload: Any, x: str, headers: dict[str, str], **kw: Any) -> Resp:
    return http("POST", url, a2a_body(payload, mt(x, "request"), [mt(x, "response")], **kw), headers)


def aap_error_from(name: str, body: dict[str, Any], code: str, rpc_code: int) -> None:
    err = body.get("error", {})
    data = err.get("data")
    check(f"{name}: JSON-RPC error {rpc_code}", err.get("code") == rpc_code, err)
    if not check(f"{name}: error.data is an array", isinstance(data, list), data):
        return
    info = data[0] if data else {}
    check(f"{name}: data[0] is ErrorInfo domain autoagentprotocol.org, reason {code}, string metadata", info.get("@type") == "type.googleapis.com/google.rpc.ErrorInfo" and info.get("domain") == "autoagentprotocol.org" and info.get("reason") == code and all(isinstance(v, str) for v in info.get("metadata", {}).values()) and info.get("metadata", {}).get("code") == code, info)
    typed = [d for d in data if d.get("@type") == ERR_TAG]
    if check(f"{name}: typed aap.error entry tagged {ERR_TAG}", len(typed) == 1 and typed[0].get("type") == "aap.error" and typed[0].get("code") == code, data):
        check_schema(name, "error", typed[0])


def test_a2a(base: str, peer: Peer, token: str) -> None:
    print(f"[a2a-agent, AAP_A2A_TOKEN] {base}")
    r = http("GET", f"{base}/.well-known/agent-card.json")
    card = r.json() if r.status == 200 else {}
    exts = card.get("capabilities", {}).get("extensions", [])
    aap = [e for e in exts if e.get("uri") == EXT_URI]
    check("card served (no credential needed)", r.status == 200, r.status)
    check("card: AAP extension v3.0 declared once with required true", len(aap) == 1 and aap[0].get("required") is True, exts)
    ifaces = card.get("supportedInterfaces", [])
    check("card: JSONRPC supportedInterfaces entry, protocolVersion 1.0", bool(ifaces) and ifaces[0].get("protocolBinding") == "JSONRPC" and ifaces[0].get("protocolVersion") == "1.0", ifaces)
    check("card: five AAP skills with tags", [s.get("id") for s in card.get("skills", [])] == ["dealer.information", "inventory.facets", "inventory.search", "inventory.vehicle", "lead.submit"] and all(s.get("tags") for s in card.get("skills", [])), [s.get("id") for s in card.get("skills", [])])
    check("card: bearer security scheme declared", "bearer" in card.get("securitySchemes", {}), card.get("securitySchemes"))
    url = ifaces[0]["url"] if ifaces else f"{base}/a2a"

    hdr = {"Content-Type": "application/json", "A2A-Version": "1.0", "A2A-Extensions": EXT_URI, "Authorization": f"Bearer {token}"}
    r = a2a_send(url, SEARCH, "inventory-search", {k: v for k, v in hdr.items() if k != "Authorization"})
    check("AAP_A2A_TOKEN: no Authorization -> HTTP 401 + WWW-Authenticate", r.status == 401 and "bearer" in (r.headers.get("www-authenticate") or "").lower(), (r.status, r.body[:200]))
    r = a2a_send(url, SEARCH, "inventory-search", {**hdr, "Authorization": "Bearer nope"})
    check("AAP_A2A_TOKEN: wrong token -> 401", r.status == 401, r.status)

    r = a2a_send(url, SEARCH, "inventory-search", {k: v for k, v in hdr.items() if k != "A2A-Extensions"})
    err = r.json().get("error", {})
    info = (err.get("data") or [{}])[0]
    check("no A2A-Extensions -> -32008", err.get("code") == -32008, err)
    check("-32008 message names the URI and A2A-Extensions", EXT_URI in err.get("message", "") and "A2A-Extensions" in err.get("message", ""), err.get("message"))
    check("-32008 ErrorInfo a2a-protocol.org/EXTENSION_SUPPORT_REQUIRED with extensionUri+requiredHeader", info.get("domain") == "a2a-protocol.org" and info.get("reason") == "EXTENSION_SUPPORT_REQUIRED" and info.get("metadata") == {"extensionUri": EXT_URI, "requiredHeader": "A2A-Extensions"}, info)
    r = a2a_send(url, SEARCH, "inventory-search", {**hdr, "A2A-Extensions": EXT_URI + "x"})
    check("look-alike extension URI -> -32008", r.json().get("error", {}).get("code") == -32008, r.body[:200])
    r = a2a_send(url, SEARCH, "inventory-search", {k: v for k, v in hdr.items() if k != "A2A-Version"})
    check("no A2A-Version (= 0.3) -> -32009", r.json().get("error", {}).get("code") == -32009, r.body[:200])
    r = a2a_send(url, SEARCH, "inventory-search", {**hdr, "A2A-Version": "2.0"})
    check("A2A-Version 2.0 -> -32009", r.json().get("error", {}).get("code") == -32009, r.body[:200])

    body = a2a_body(SEARCH, mt("inventory-search", "request"), [mt("inventory-search", "response")])
    r = http("POST", url, body, {**hdr, "A2A-Extensions": f"https://example.com/other, {EXT_URI}"})
    res = r.json().get("result", {})
    msg = res.get("message", {})
    parts = msg.get("parts", [])
    check("search -> result.message, ROLE_AGENT, new messageId, no kind", "task" not in res and msg.get("role") == "ROLE_AGENT" and msg.get("messageId") not in (None, body["params"]["message"]["messageId"]) and "kind" not in msg, r.body[:300])
    if check("search: one data part with mediaType inventory-search-response", len(parts) == 1 and parts[0].get("mediaType") == mt("inventory-search", "response") and isinstance(parts[0].get("data"), dict), parts[:1]):
        data = parts[0]["data"]
        check_schema("a2a search result.message.parts[0].data", "inventory-search-response", data)
        check_search_semantics("a2a search", data.get("data", {}))
        check("a2a: numbers arrive as protobuf doubles (SDK behaviour, e.g. total 5.0)", isinstance(data["data"]["total"], float), type(data["data"]["total"]).__name__)

    for skill, x, payload in [
        ("dealer-information", "dealer-information", {"type": "dealer.information.request"}),
        ("inventory-facets", "inventory-facets", {"type": "inventory.facets.request", "filters": {"body": ["truck"]}}),
        ("inventory-vehicle", "vehicle-detail", {"type": "inventory.vehicle.request", "stock": "DT-1001"}),
    ]:
        r = a2a_send(url, payload, x, hdr)
        p = (r.json().get("result", {}).get("message", {}).get("parts") or [{}])[0]
        check(f"a2a {skill}: mediaType {x}-response", p.get("mediaType") == mt(x, "response"), p.get("mediaType"))
        check_schema(f"a2a {skill}", f"{skill}-response", p.get("data"))

    aap_error_from("a2a vehicle sold", a2a_send(url, {"type": "inventory.vehicle.request", "stock": SOLD_STOCK}, "vehicle-detail", hdr).json(), "VEHICLE_UNAVAILABLE", -32000)
    aap_error_from("a2a vehicle unknown", a2a_send(url, {"type": "inventory.vehicle.request", "vin": "JTDACAAU0S3000000"}, "vehicle-detail", hdr).json(), "VEHICLE_NOT_FOUND", -32000)
    bad = a2a_send(url, {"type": "inventory.search.request", "filters": {"year_min": "new"}}, "inventory-search", hdr).json()
    aap_error_from("a2a schema violation", bad, "SCHEMA_VALIDATION_FAILED", -32602)
    check("a2a schema violation: BadRequest fieldViolations entry", any(d.get("@type") == "type.googleapis.com/google.rpc.BadRequest" and d.get("fieldViolations") for d in bad.get("error", {}).get("data", [])), bad.get("error", {}).get("data"))
    aap_error_from("a2a unknown skill", a2a_send(url, {"type": "service.booking.request"}, "inventory-search", hdr).json(), "UNSUPPORTED_SKILL", -32004)
    r = http("POST", url, a2a_body(SEARCH, "application/json", [mt("inventory-search", "response")]), hdr)
    check("a2a wrong request mediaType -> -32005", r.json().get("error", {}).get("code") == -32005, r.body[:200])
    r = http("POST", url, a2a_body(SEARCH, mt("inventory-search", "request"), ["application/json"]), hdr)
    check("a2a unsatisfiable acceptedOutputModes -> -32005", r.json().get("error", {}).get("code") == -32005, r.body[:200])
    r = http("POST", url, a2a_body(SEARCH, mt("inventory-search", "request"), None), hdr)
    check("a2a missing acceptedOutputModes -> -32602", r.json().get("error", {}).get("code") == -32602, r.body[:200])
    r = http("POST", url, a2a_body(SEARCH, mt("inventory-search", "request"), [mt("inventory-search", "response")], role="ROLE_AGENT"), hdr)
    check("a2a role ROLE_AGENT in request -> -32602", r.json().get("error", {}).get("code") == -32602, r.body[:200])
    r = http("POST", url, a2a_body(SEARCH, mt("inventory-search", "request"), [mt("inventory-search", "response")], method="message/send"), hdr)
    check("a2a v0.3 method message/send -> -32601", r.json().get("error", {}).get("code") == -32601, r.body[:200])
    r = http("POST", url, a2a_body(SEARCH, mt("inventory-search", "request"), [mt("inventory-search", "response")], method="GetTask"), hdr)
    check("a2a GetTask -> -32004 (SendMessage only)", r.json().get("error", {}).get("code") == -32004, r.body[:200])

    key = str(uuid.uuid4())
    outs = []
    for _ in range(2):
        r = a2a_send(url, lead_request(key), "lead-submit", hdr)
        p = (r.json().get("result", {}).get("message", {}).get("parts") or [{}])[0]
        check_schema("a2a lead", "lead-submit-response", p.get("data"))
        outs.append(p.get("data") or {})
    check("a2a lead: received, same lead_id on retry, one JSONL line", outs[0].get("data", {}).get("status") == "received" and outs[0].get("data", {}).get("lead_id") == outs[1].get("data", {}).get("lead_id") and peer.lead_lines() == 1, (outs, peer.lead_lines()))
    rec = json.loads(peer.leads.read_text().splitlines()[0]) if peer.lead_lines() else {}
    check("a2a lead log: integers restored from protobuf doubles, caller bearer", rec.get("caller") == "bearer" and "20000.0" not in json.dumps(rec), rec.get("caller"))
    aap_error_from("a2a lead same key other payload", a2a_send(url, lead_request(key, "other"), "lead-submit", hdr).json(), "IDEMPOTENCY_CONFLICT", -32000)


def test_a2a_task_mode(base: str) -> None:
    print(f"[a2a-agent --task-mode] {base}")
    url = f"{base}/a2a"
    hdr = {"Content-Type": "application/json", "A2A-Version": "1.0", "A2A-Extensions": EXT_URI}
    r = a2a_send(url, {"type": "dealer.information.request"}, "dealer-information", hdr)
    res = r.json().get("result", {})
    check("--task-mode: result.task (no result.message)", "task" in res and "message" not in res, r.body[:300])
    art = (res.get("task", {}).get("artifacts") or [{}])[0]
    check("--task-mode: task completed, AAP payload in an artifact", res.get("task", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED" and (art.get("parts") or [{}])[0].get("data", {}).get("type") == "dealer.information.response", res.get("task", {}).get("status"))


def main() -> int:
    vpy = sys.executable
    node = os.environ.get("NODE", "node")
    tmp = Path(tempfile.mkdtemp(prefix="aap-upstreams-selftest-"))
    mcp_token, a2a_token = f"mcp-{uuid.uuid4().hex}", f"a2a-{uuid.uuid4().hex}"
    specs = {
        "strict": ([vpy, str(HERE / "strict_mcp_server.py")], {}),
        "strict-sse": ([vpy, str(HERE / "strict_mcp_server.py"), "--sse"], {}),
        "strict-modern": ([vpy, str(HERE / "strict_mcp_server.py"), "--modern-only"], {"AAP_MCP_TOKEN": mcp_token}),
        "legacy": ([node, str(HERE / "legacy_mcp_server.mjs")], {}),
        "a2a": ([vpy, str(HERE / "a2a_agent.py")], {"AAP_A2A_TOKEN": a2a_token}),
        "a2a-task": ([vpy, str(HERE / "a2a_agent.py"), "--task-mode"], {}),
    }
    peers: dict[str, Peer] = {}
    try:
        for name, (argv, env) in specs.items():
            port = free_port()
            leads = tmp / f"{name}-leads.jsonl"
            peers[name] = Peer(name, argv + ["--port", str(port), "--leads", str(leads)], port, leads, env)
        for name, p in peers.items():
            if not check(f"{name} peer started on 127.0.0.1:{p.port}", p.wait_ready(), p.log.read_text()[-2000:] if p.log.exists() else "no log"):
                continue
        url = lambda n, path="/mcp": f"http://127.0.0.1:{peers[n].port}{path}"  # noqa: E731
        suites = [
            (lambda: test_strict(url("strict"), peers["strict"])),
            (lambda: test_strict_sse(url("strict-sse"))),
            (lambda: test_strict_modern_only(url("strict-modern"), mcp_token)),
            (lambda: test_legacy(url("legacy"), peers["legacy"])),
            (lambda: test_a2a(url("a2a", ""), peers["a2a"], a2a_token)),
            (lambda: test_a2a_task_mode(url("a2a-task", ""))),
        ]
        for suite in suites:
            try:
                suite()
            except Exception:  # noqa: BLE001
                check("suite ran to completion", False, traceback.format_exc()[-1500:])
    finally:
        for p in peers.values():
            p.stop()
    if FAILED:
        print(f"peer logs kept in {tmp}")
        for p in peers.values():
            print(f"--- {p.name} log (tail) ---\n{p.log.read_text()[-1500:] if p.log.exists() else ''}")
    print(f"upstreams-selftest: {PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
