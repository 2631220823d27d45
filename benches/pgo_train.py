"""The training load of a profile-guided build (scripts/build-pgo.sh): a mix of calls a dealer's
gateway serves, sent to instrumented gateways so that their counts say which code is hot.

The mix weighs each kind of call roughly as production would: searches most, then vehicle
lookups, facets, dealer information, discovery and tools/list, the legacy revision's handshake
and calls, a few consented leads (each a real lead in the training gateway's store) and a few
refusals (malformed JSON, an unknown tool, a wrong media type), so that their paths are trained
too rather than laid out as never run. Standard library only: any Python 3 runs it.

  python3 benches/pgo_train.py --full PORT [--relay PORT] [--passthrough PORT] [--seconds 20]
"""

import argparse
import http.client
import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

PATH = "/aap/3.0.0/demo-toyota/mcp"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "aap-pgo-train", "version": "1.0.0"},
}
GRANTED = (datetime.now(timezone.utc) - timedelta(minutes=1)).replace(microsecond=0)


def modern(method, params=None, rid=1):
    params = dict(params or {})
    params["_meta"] = META
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def call(name, arguments):
    return modern("tools/call", {"name": name, "arguments": arguments})


def searches():
    makes = [["Toyota"], ["Toyota", "Lexus"]]
    sorts = [{"field": "price", "order": "asc"}, {"field": "year", "order": "desc"}]
    for i, limit in enumerate((5, 1, 20, 100)):
        yield call("aap_inventory_search", {
            "type": "inventory.search.request",
            "filters": {"make": makes[i % 2], "status": ["available"]},
            "pagination": {"limit": limit},
            "sort": sorts[i % 2],
        })
    yield call("aap_inventory_search", {"type": "inventory.search.request"})


def lead():
    return call("aap_lead_submit", {
        "type": "lead.submit.request",
        "customer": {"first_name": "Quinn", "last_name": "Trainer", "email": "quinn.trainer@example.com",
                     "preferred_contact": "email"},
        "consent": {
            "granted_at": GRANTED.isoformat().replace("+00:00", "Z"),
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may contact me by email about this enquiry.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": {"stock": "DT-1001"},
        "source_agent": {"name": "aap-pgo-train"},
        "idempotency_key": str(uuid.uuid4()),
    })


JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def mix():
    """(weight, expected status, headers, body) of the modern calls; bodies as bytes."""
    out = [(8, 200, {}, json.dumps(b).encode()) for b in searches()]
    out.append((6, 200, {}, json.dumps(call("aap_inventory_vehicle", {
        "type": "inventory.vehicle.request", "stock": "DT-1001"})).encode()))
    out.append((4, 200, {}, json.dumps(call("aap_inventory_facets", {
        "type": "inventory.facets.request", "filters": {"make": ["Toyota"]}})).encode()))
    out.append((3, 200, {}, json.dumps(call("aap_dealer_information", {
        "type": "dealer.information.request"})).encode()))
    out.append((3, 200, {}, json.dumps(modern("server/discover")).encode()))
    out.append((3, 200, {"Mcp-Method": "tools/list"}, json.dumps(modern("tools/list")).encode()))
    out.append((2, 200, {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                         "Mcp-Name": "aap_inventory_search"}, json.dumps(next(searches())).encode()))
    # Refusals: a truncated body, an unknown tool (answered in JSON-RPC), a wrong media type.
    out.append((1, 400, {}, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'))
    out.append((1, 200, {}, json.dumps(call("aap_no_such_tool", {})).encode()))
    out.append((1, 415, {"Content-Type": "text/plain"}, json.dumps(modern("tools/list")).encode()))
    return [(status, h, b) for w, status, h, b in out for _ in range(w)]


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def post(self, headers, body):
        h = dict(JSON)
        h.update(headers)
        for attempt in range(2):
            try:
                self.conn.request("POST", PATH, body=body, headers=h)
                r = self.conn.getresponse()
                data = r.read()
                return r.status, r.headers, data
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def legacy_session(client):
    """The 2025-11-25 handshake, then calls in that session."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "aap-pgo-train", "version": "1.0.0"}}}
    status, headers, _ = client.post({}, json.dumps(init).encode())
    if status != 200:
        return 0
    h = {"MCP-Protocol-Version": LEGACY}
    sid = headers.get("Mcp-Session-Id")  # when the tenant issues sessions
    if sid:
        h["Mcp-Session-Id"] = sid
    client.post(h, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
    n = 2
    for rid, body in enumerate(searches(), start=2):
        body = {"jsonrpc": "2.0", "id": rid, "method": body["method"],
                "params": {k: v for k, v in body["params"].items() if k != "_meta"}}
        client.post(h, json.dumps(body).encode())
        n += 1
    client.post(h, json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/list"}).encode())
    return n + 1


def check(port, calls):
    """Each distinct call once: the answers the mix expects, or the training would teach the
    build the wrong paths (a refused search trains the refusal, not the search)."""
    client = Client(port)
    for status, headers, body in {(s, tuple(h.items()), b) for s, h, b in calls}:
        got, _, data = client.post(dict(headers), body)
        if got != status:
            raise SystemExit(f"pgo training: port {port} answered {got}, not {status}: {data[:200]!r}")


def check_full(port):
    """The lead and the legacy session on the validating gateway."""
    client = Client(port)
    status, _, data = client.post({}, json.dumps(lead()).encode())
    if status != 200 or b'"isError":false' not in data:
        raise SystemExit(f"pgo training: a lead was not accepted: {status} {data[:300]!r}")
    if legacy_session(client) == 0:
        raise SystemExit("pgo training: the 2025-11-25 handshake failed")


def worker(port, until, calls, leads, counts, errors):
    client = Client(port)
    done = 0
    i = 0
    while time.monotonic() < until:
        _, headers, body = calls[i % len(calls)]
        i += 1
        try:
            client.post(headers, body)
            done += 1
            if leads and i % 400 == 0:
                client.post({}, json.dumps(lead()).encode())
                done += 1
            if i % 250 == 0:
                done += legacy_session(client)
        except (http.client.HTTPException, OSError):
            errors.append(port)
            break
    counts.append(done)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", type=int, required=True, help="port of a gateway whose tenant validates calls")
    ap.add_argument("--relay", type=int, help="port of a relay tenant in front of the same upstream")
    ap.add_argument("--passthrough", type=int, help="port of an `aap-gateway passthrough`")
    ap.add_argument("--seconds", type=float, default=20, help="how long to send (default 20)")
    ap.add_argument("--threads", type=int, default=4, help="connections per gateway (default 4)")
    args = ap.parse_args()
    calls = mix()
    # The relay and the pass-through forward whatever they get: the modern calls without
    # mirror headers, the same for both.
    plain = [c for c in calls if c[0] == 200 and not c[1]]
    for port, c in [(args.full, calls)] + [(p, plain) for p in (args.relay, args.passthrough) if p]:
        check(port, c)
    check_full(args.full)
    until = time.monotonic() + args.seconds
    counts, errors, threads = [], [], []
    targets = [(args.full, calls, True)]
    targets += [(p, plain, False) for p in (args.relay, args.passthrough) if p]
    for port, c, leads in targets:
        for _ in range(args.threads):
            t = threading.Thread(target=worker, args=(port, until, c, leads, counts, errors))
            t.start()
            threads.append(t)
    for t in threads:
        t.join()
    print(f"pgo training: {sum(counts)} requests to {len(targets)} gateway(s) in {args.seconds:.0f} s")
    if errors:
        raise SystemExit(f"pgo training: connections failed on ports {sorted(set(errors))}")


if __name__ == "__main__":
    main()
