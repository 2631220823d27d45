#!/usr/bin/env python3
"""Drives a running aap-gateway container over real HTTP (stdlib only).

    drive.py first   --mcp URL --lead-file F
    drive.py admin   --admin URL --token T --replays N
    drive.py restart --mcp URL --lead-file F

`first` (from the host, through the published port): MCP server/discover,
tools/list, an aap_inventory_search call and an aap_lead_submit, then the same
lead again (same lead_id). Writes the lead's idempotency key, consent time and
lead_id to the lead file.

`admin` (run inside the container's network namespace: the admin listener is
on its loopback only): /readyz and /healthz answer 200, /metrics counts N
idempotent replays, POST /reload is 401 without the admin token and 200 with
it (the token came from AAP_ADMIN_TOKEN).

`restart` (a new container on the same state volume): the lead retried once
more still answers with the same lead_id, so the idempotency record lived on
the volume, not in the container.

Prints one line per check and exits 1 on the first failure.
"""

import argparse
import datetime
import json
import sys
import urllib.error
import urllib.request
import uuid

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "aap-image-test", "version": "1.0.0"},
}
TOOLS = [
    "aap_dealer_information",
    "aap_inventory_facets",
    "aap_inventory_search",
    "aap_inventory_vehicle",
    "aap_lead_submit",
]


class Failure(Exception):
    pass


def check(cond, what, detail=""):
    if not cond:
        raise Failure(f"{what}: {detail}" if detail else what)
    print(f"  ok   {what}")


def http(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def rpc(mcp, rid, method, params, extra_headers=None):
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    headers.update(extra_headers or {})
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": dict(params, _meta=META)}
    status, _, text = http("POST", mcp, body, headers)
    if status != 200:
        raise Failure(f"{method}: HTTP {status}: {text[:300]}")
    j = json.loads(text)
    if "result" not in j:
        raise Failure(f"{method}: no result: {text[:300]}")
    return j["result"]


def call(mcp, rid, name, arguments):
    """A tools/call; returns (isError, structuredContent) after checking the text block mirrors it."""
    res = rpc(mcp, rid, "tools/call", {"name": name, "arguments": arguments}, {"Mcp-Name": name})
    sc = res.get("structuredContent")
    text = json.loads(res["content"][0]["text"])
    if text != sc:
        raise Failure(f"{name}: text block differs from structuredContent")
    return res.get("isError"), sc


def lead(key, granted_at):
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Casey",
            "last_name": "Imagetest",
            "email": "casey.imagetest@example.com",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": granted_at,
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may e-mail me about this vehicle.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": {"stock": "DT-1001"},
        "source_agent": {"name": "aap-image-test"},
        "idempotency_key": key,
    }


def replays(admin):
    status, _, text = http("GET", admin + "/metrics")
    if status != 200:
        raise Failure(f"GET /metrics: HTTP {status}")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("aap_idempotent_replays_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def first(a):
    d = rpc(a.mcp, 1, "server/discover", {})
    check(d.get("resultType") == "complete", "server/discover completes", json.dumps(d)[:200])
    info = d.get("_meta", {}).get("io.modelcontextprotocol/serverInfo", {})
    check(info.get("name") == "aap-gateway", "serverInfo.name is aap-gateway (shipped config)", str(info))
    check(MODERN in d.get("supportedVersions", []), f"{MODERN} is supported")
    check(isinstance(d.get("capabilities", {}).get("tools"), dict), "tools capability advertised")

    tl = rpc(a.mcp, 2, "tools/list", {})
    names = [t["name"] for t in tl.get("tools", [])]
    check(names == TOOLS, "tools/list lists the five AAP tools in order", str(names))

    err, sc = call(
        a.mcp,
        3,
        "aap_inventory_search",
        {
            "type": "inventory.search.request",
            "filters": {"make": ["Toyota"], "price_max": 35000, "status": ["available"]},
            "sort": {"field": "price", "order": "asc"},
            "pagination": {"limit": 3},
        },
    )
    check(err is False, "aap_inventory_search is not an error", json.dumps(sc)[:300])
    vs = sc["data"]["vehicles"]
    check(1 <= len(vs) <= 3, "search returns 1..3 vehicles", str(len(vs)))
    check(all(v["make"] == "Toyota" for v in vs), "every vehicle is a Toyota")
    prices = [v["price"] for v in vs]
    check(all(p is not None and p <= 35000 for p in prices), "every price is at most 35000", str(prices))
    check(prices == sorted(prices), "cheapest first", str(prices))
    check(sc["data"]["total"] >= len(vs), "total covers the page")

    key = str(uuid.uuid4())
    granted = (
        datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(minutes=1)
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    err, sc = call(a.mcp, 4, "aap_lead_submit", lead(key, granted))
    check(err is False, "aap_lead_submit is accepted", json.dumps(sc)[:300])
    lead_id = sc["data"]["lead_id"]
    check(isinstance(lead_id, str) and lead_id.startswith("lead_"), "a lead_id is issued", str(lead_id))
    err, again = call(a.mcp, 5, "aap_lead_submit", lead(key, granted))
    check(err is False, "the retried lead is accepted", json.dumps(again)[:300])
    check(again["data"]["lead_id"] == lead_id, "the retry answers with the same lead_id")

    with open(a.lead_file, "w") as f:
        json.dump({"key": key, "granted_at": granted, "lead_id": lead_id}, f)


def admin(a):
    status, _, _ = http("GET", a.admin + "/readyz")
    check(status == 200, "GET /readyz is 200", str(status))
    status, _, _ = http("GET", a.admin + "/healthz")
    check(status == 200, "GET /healthz is 200", str(status))
    n = replays(a.admin)
    check(n == a.replays, f"/metrics counts {a.replays} idempotent replay(s)", str(n))
    status, _, text = http("POST", a.admin + "/reload")
    check(status == 401, "POST /reload without the token is 401", f"{status} {text[:200]}")
    status, _, text = http("POST", a.admin + "/reload", headers={"Authorization": "Bearer " + a.token})
    check(status == 200, "POST /reload with AAP_ADMIN_TOKEN is 200", f"{status} {text[:200]}")


def restart(a):
    with open(a.lead_file) as f:
        saved = json.load(f)
    err, sc = call(a.mcp, 6, "aap_lead_submit", lead(saved["key"], saved["granted_at"]))
    check(err is False, "the lead retried after the restart is accepted", json.dumps(sc)[:300])
    check(
        sc["data"]["lead_id"] == saved["lead_id"],
        "the same lead_id after the restart (idempotency record on the volume)",
        f'{sc["data"]["lead_id"]} != {saved["lead_id"]}',
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["first", "admin", "restart"])
    p.add_argument("--mcp")
    p.add_argument("--admin")
    p.add_argument("--token", default="")
    p.add_argument("--replays", type=float, default=0)
    p.add_argument("--lead-file")
    a = p.parse_args()
    try:
        {"first": first, "admin": admin, "restart": restart}[a.phase](a)
    except (Failure, KeyError, TypeError, ValueError, OSError) as e:
        print(f"  FAIL {type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
