#!/usr/bin/env python3
"""One-tenant apply on a platform (driven by benches/platform.sh; see docs/performance.md).

A gateway serves N embedded tenants: dealer-0 in the main config, the other N - 1 as files of its
`tenants_dir`. While a client loop searches dealer-0 without pause, one tenant file is added,
changed (its skills) and removed, each written aside and renamed into place. Per step: the apply
time the gateway logs (`elapsed_ms` of "tenant file applied" / "tenant file removed": building the
one tenant and swapping the generation, without the directory poll), and the time until a client
sees the change (includes the poll, `--tenants-watch-ms`). Then the failed requests of the loop.
Environment: BIN, NS (tenant counts, default "2000 10000"), WATCH_MS (default 100).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402
from run import get, port, readyz, stop  # noqa: E402

BIN = os.environ["BIN"]
NS = [int(x) for x in os.environ.get("NS", "2000 10000").split()]
WATCH_MS = int(os.environ.get("WATCH_MS", "100"))
META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'


def as_file(block):
    """A `[[tenants]]` block of the generated config as a tenant file (its keys at top level)."""
    return block.replace("[[tenants]]\n", "", 1).replace("[tenants.", "[")


def put(d, name, text):
    tmp = os.path.join(d, "." + name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(d, name))


def rpc(listen, tid, method, params):
    body = '{"jsonrpc":"2.0","id":1,"method":"%s","params":{%s%s}}' % (
        method, META, "," + params if params else "")
    req = urllib.request.Request(f"http://{listen}/aap/3.0.0/{tid}/mcp", data=body.encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return 0, None


def tools(listen, tid):
    st, j = rpc(listen, tid, "tools/list", "")
    return len(j["result"]["tools"]) if st == 200 and j and "result" in j else st


def wait_until(ok, within=60):
    t = time.monotonic()
    while not ok():
        if time.monotonic() - t > within:
            return None
        time.sleep(0.002)
    return time.monotonic() - t


def measure(n, work):
    listen, admin = f"127.0.0.1:{port()}", f"127.0.0.1:{port()}"
    d = os.path.join(work, f"tenants-{n}")
    os.makedirs(d)
    for i in range(1, n):
        put(d, f"dealer-{i}.toml", as_file(gen.tenant_block("embedded", i, listen=listen)))
    cfg = os.path.join(work, f"apply-{n}.toml")
    with open(cfg, "w") as f:
        f.write(f'tenants_dir = "{d}"\n' + gen.config("embedded", 1, listen, admin, os.path.join(work, f"state-{n}")))
    log = os.path.join(work, f"apply-{n}.log")
    p = subprocess.Popen([BIN, "--config", cfg, "--tenants-watch-ms", str(WATCH_MS)],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        if wait_until(lambda: (readyz(admin) or {}).get("tenants") == n, within=600) is None:
            return {"n": n, "error": "not ready"}
        sent, failed, halt = [0], [0], threading.Event()

        def loop():
            search = '"name":"aap_inventory_search","arguments":{"type":"inventory.search.request","pagination":{"limit":5}}'
            while not halt.is_set():
                st, j = rpc(listen, "dealer-0", "tools/call", search)
                sent[0] += 1
                if st != 200 or not j or j.get("result", {}).get("isError") is not False:
                    failed[0] += 1

        th = threading.Thread(target=loop)
        th.start()
        new = as_file(gen.tenant_block("embedded", n, listen=listen))
        steps = {}
        put(d, f"dealer-{n}.toml", new)
        steps["add"] = wait_until(lambda: tools(listen, f"dealer-{n}") == 5)
        # The shipped tenant lists all five skills; the change keeps two.
        changed = re.sub(r'(?m)^skills = .*$', 'skills = ["dealer.information", "inventory.search"]', new, count=1)
        put(d, f"dealer-{n}.toml", changed)
        steps["change"] = wait_until(lambda: tools(listen, f"dealer-{n}") == 2)
        os.remove(os.path.join(d, f"dealer-{n}.toml"))
        steps["remove"] = wait_until(lambda: tools(listen, f"dealer-{n}") == 404)
        time.sleep(0.3)
        halt.set()
        th.join()
        text = open(log).read()
        applied = [float(x) for x in re.findall(r'elapsed_ms[=":]+\s*([0-9.]+)', text)]
        return {"n": n, "seen_s": steps, "apply_ms": applied, "sent": sent[0], "failed": failed[0]}
    finally:
        stop(p)


def main():
    work = tempfile.mkdtemp(prefix="aap-apply-")
    try:
        for n in NS:
            r = measure(n, work)
            print("# " + json.dumps(r), flush=True)
            if "apply_ms" in r:
                ms = ", ".join(f"{x:.1f} ms" for x in r["apply_ms"])
                seen = ", ".join(f"{k} {v * 1000:.0f} ms" if v is not None else f"{k} not seen" for k, v in r["seen_s"].items())
                print(f"embedded × {n:,}: one-tenant apply (add, change, remove) {ms} as logged; seen by a client "
                      f"after {seen} (poll every {WATCH_MS} ms); loop on another tenant: {r['failed']} failed of {r['sent']}")
            else:
                print(f"embedded × {n:,}: {r}")
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
