#!/usr/bin/env python3
"""The platform-scale table of issue 22 (driven by benches/platform.sh; see docs/performance.md).

For each tenant count N and each kind (embedded: the demo dealer on N paths; mcp: N kind = "mcp"
tenants against one shared peer, the demo dealer served by another gateway process):
config check time, start to ready (/readyz 200), RSS when ready, RSS after reloads, full reload
by SIGHUP and by POST /reload, /metrics size after one search per tenant, open files; then
search throughput spread over random tenants against one tenant (wrk). The one-tenant apply is
measured by apply.py beside it. Everything is environment-driven:
  BIN NS KINDS RELOADS RELOADS_N1 REPEAT THRU_SECS CONN MEM_GUARD_PCT PACED_RATE PACED_SECS
A paced client (PACED_RATE searches a second over random tenants) runs PACED_SECS on the quiet gateway and again
through the reloads: its p99 beside the one-tenant figure, and what the reloads cost it (p99, max, failures).
"""
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402

BIN = os.environ["BIN"]
NS = [int(x) for x in os.environ.get("NS", "1 2000 10000").split()]
KINDS = os.environ.get("KINDS", "embedded mcp").split()
RELOADS = int(os.environ.get("RELOADS", "5"))          # reloads for "RSS after reloads" at N > 1
RELOADS_N1 = int(os.environ.get("RELOADS_N1", "100"))  # and at N = 1 (RSS over 100 reloads)
REPEAT = int(os.environ.get("REPEAT", "3"))            # timed reloads of each kind
THRU_SECS = int(os.environ.get("THRU_SECS", "5"))
CONN = int(os.environ.get("CONN", "32"))
GUARD = float(os.environ.get("MEM_GUARD_PCT", "80")) / 100
PACED_RATE = int(os.environ.get("PACED_RATE", "200"))
PACED_SECS = float(os.environ.get("PACED_SECS", "5"))
TOKEN = gen.ADMIN_TOKEN
META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
SEARCH = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{' + META + ',"name":"aap_inventory_search",'
          '"arguments":{"type":"inventory.search.request","filters":{"make":["Toyota"],"status":["available"]},'
          '"pagination":{"limit":5},"sort":{"field":"price","order":"asc"}}}}')
PROCS = []


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def mem_available_kb():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def status_kb(pid, key="VmRSS"):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def get(url, token=None, method="GET", timeout=120):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def readyz(admin):
    st, body = get(f"http://{admin}/readyz", timeout=5)
    if st != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def mb(kb):
    return f"{kb / 1024:,.0f} MB" if kb < 1024 * 1024 else f"{kb / 1024 / 1024:.1f} GB"


def secs(x):
    return f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def span(v):
    return secs(v[0]) if len(v) == 1 or abs(max(v) - min(v)) < 0.005 else f"{min(v):.2f}–{max(v):.2f} s"


def search_each(listen, n, sample=None):
    """One search per tenant on a keep-alive connection (creates each tenant's series)."""
    import http.client
    c = http.client.HTTPConnection(listen, timeout=30)
    bad = 0
    for i in (range(n) if sample is None else sample):
        c.request("POST", f"/aap/3.0.0/dealer-{i}/mcp", SEARCH, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        bad += r.status != 200
    c.close()
    return bad


class Paced(multiprocessing.Process):
    """PACED_RATE searches a second over random tenants on one keep-alive connection, in a process of its own (the
    bench's own polling must not delay it through a shared GIL). Each latency is taken from the request's scheduled
    time, so a stall counts for every request it delays (no coordinated omission)."""

    def __init__(self, listen, n):
        super().__init__(daemon=True)
        self.listen, self.n = listen, n
        self.halt = multiprocessing.Event()
        self.out = multiprocessing.Queue()

    def run(self):
        import http.client
        import random
        lat, failed = [], 0
        c, interval, due = None, 1.0 / PACED_RATE, time.monotonic()
        while not self.halt.is_set():
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            try:
                if c is None:
                    c = http.client.HTTPConnection(self.listen, timeout=30)
                c.request("POST", f"/aap/3.0.0/dealer-{random.randrange(self.n)}/mcp", SEARCH,
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                body = json.loads(r.read() or b"{}")
                ok = r.status == 200 and body.get("result", {}).get("isError") is False
            except (OSError, ValueError, http.client.HTTPException):
                ok, c = False, None
            lat.append(time.monotonic() - due)
            failed += not ok
            due += interval
        lat.sort()
        lat = lat or [0.0]
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        self.out.put({"sent": len(lat), "failed": failed, "p50_ms": round(pick(0.5), 2),
                      "p99_ms": round(pick(0.99), 2), "max_ms": round(lat[-1] * 1000, 2)})

    def finish(self):
        self.halt.set()
        result = self.out.get(timeout=60)
        self.join()
        return result


def paced_for(listen, n, secs):
    c = Paced(listen, n)
    c.start()
    time.sleep(secs)
    return c.finish()


def wrk(listen, n, random_tenants, pid, work):
    lua = os.path.join(work, "w.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        f.write("wrk.body = " + json.dumps(SEARCH) + "\n")
        if random_tenants:
            f.write("function init(a) math.randomseed(os.time() + tonumber(tostring({}):match(\"0x(%x+)\") or \"0\", 16)) end\n")
            f.write(f"function request() return wrk.format(nil, \"/aap/3.0.0/dealer-\" .. math.random(0, {n - 1}) .. \"/mcp\") end\n")
    t0 = cpu_ticks(pid)
    out = subprocess.run(["wrk", "-t2", f"-c{CONN}", f"-d{THRU_SECS}s", "-s", lua,
                          f"http://{listen}/aap/3.0.0/dealer-0/mcp"], capture_output=True, text=True).stdout
    t1 = cpu_ticks(pid)
    import re
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    us = (t1 - t0) * 1e6 / os.sysconf("SC_CLK_TCK") / max(reqs, 1)
    return rps, us, int(bad.group(1)) if bad else 0


def measure(kind, n, work, peer):
    listen, admin = f"127.0.0.1:{port()}", f"127.0.0.1:{port()}"
    state = os.path.join(work, f"state-{kind}-{n}")
    cfg = os.path.join(work, f"{kind}-{n}.toml")
    with open(cfg, "w") as f:
        f.write(gen.config(kind, n, listen, admin, state, peer))
    row = {"kind": kind, "n": n}
    t = time.monotonic()
    r = subprocess.run([BIN, "check", "--config", cfg], capture_output=True, text=True)
    row["check"] = secs(time.monotonic() - t) if r.returncode == 0 else f"exit {r.returncode}"
    limit = mem_available_kb() * GUARD
    t = time.monotonic()
    p = subprocess.Popen([BIN, "--config", cfg], stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"log-{kind}-{n}"), "w"))
    PROCS.append(p)
    ready = None
    while p.poll() is None:
        ready = readyz(admin)
        if ready:
            break
        if status_kb(p.pid) > limit:
            stop(p)
            row["start"] = f"stopped: RSS over {mb(limit)} (MEM_GUARD_PCT)"
            return row
        time.sleep(0.02)
    if not ready:
        row["start"] = f"exit {p.returncode}"
        return row
    row["start"] = secs(time.monotonic() - t)
    time.sleep(1)
    row["rss"] = status_kb(p.pid)
    row["fds"] = fds(p.pid)
    # The paced client on the quiet gateway, then through the reloads.
    row["paced_quiet"] = paced_for(listen, n, PACED_SECS)
    paced = Paced(listen, n)
    paced.start()
    # Reloads: REPEAT timed SIGHUPs (ready again with the next generation), REPEAT timed POST /reload.
    hup, post, samples = [], [], [row["rss"]]
    gen_now = ready.get("config_generation", 0)
    total = RELOADS_N1 if n == 1 else RELOADS
    for k in range(max(total, 2 * REPEAT)):
        t = time.monotonic()
        if k % 2 == 0:
            p.send_signal(signal.SIGHUP)
            while True:
                rz = readyz(admin)
                if rz and rz.get("config_generation", 0) > gen_now:
                    gen_now = rz["config_generation"]
                    break
                if p.poll() is not None or time.monotonic() - t > 600:
                    break
                time.sleep(0.02)  # every 20 ms: a readyz poll is admin work the paced client would wait behind
            (hup.append(time.monotonic() - t) if len(hup) < REPEAT else None)
        else:
            st, body = get(f"http://{admin}/reload", TOKEN, "POST", timeout=600)
            if st != 200:
                row["reload_error"] = body[:200].decode(errors="replace")
            gen_now = max(gen_now, json.loads(body or b"{}").get("config_generation", gen_now))
            (post.append(time.monotonic() - t) if len(post) < REPEAT else None)
        samples.append(status_kb(p.pid))
    row["paced_reload"] = paced.finish()
    # Settled: a retired generation is freed once its last request lets go (checked every 50 ms).
    time.sleep(2)
    row["rss_settled"] = status_kb(p.pid)
    row["reloads"] = max(total, 2 * REPEAT)
    row["rss_reloads"] = samples[-1]
    row["rss_reload_max"] = max(samples)
    row["rss_reload_first"] = samples[1]
    row["hup"], row["post"] = span(hup), span(post)
    # One search per tenant (every tenant's series exist), then /metrics.
    sample = None if n <= 10000 else range(0, n, max(1, n // 10000))
    row["search_errors"] = search_each(listen, n, sample)
    st, body = get(f"http://{admin}/metrics")
    row["metrics"] = len(body)
    row["fds_after"] = fds(p.pid)
    row["rss_loaded"] = status_kb(p.pid)
    if n > 1:
        one = wrk(listen, n, False, p.pid, work)
        spread = wrk(listen, n, True, p.pid, work)
        row["thru"] = (one, spread)
    stop(p)
    return row


def main():
    work = tempfile.mkdtemp(prefix="aap-platform-")
    peer = None
    if "mcp" in KINDS:
        # The shared peer: the gateway's own embedded demo tenant on another listener.
        up, upa = port(), port()
        upcfg = os.path.join(work, "peer.toml")
        with open(upcfg, "w") as f:
            f.write(gen.config("embedded", 1, f"127.0.0.1:{up}", f"127.0.0.1:{upa}", os.path.join(work, "peer")))
        with open(upcfg) as f:
            text = f.read().replace("/aap/3.0.0/dealer-0/mcp", "/aap/3.0.0/demo-toyota/mcp")
        with open(upcfg, "w") as f:
            f.write(text)
        pp = subprocess.Popen([BIN, "--config", upcfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        PROCS.append(pp)
        for _ in range(200):
            if readyz(f"127.0.0.1:{upa}"):
                break
            time.sleep(0.05)
        peer = f"http://127.0.0.1:{up}"
    rows = []
    try:
        print(f"# binary {BIN}; one-tenant apply: benches/platform/apply.py", flush=True)
        for kind in KINDS:
            for n in NS:
                t = time.monotonic()
                row = measure(kind, n, work, peer)
                row["wall"] = time.monotonic() - t
                rows.append(row)
                print("# " + json.dumps(row), flush=True)
    finally:
        for p in PROCS:
            stop(p)
        subprocess.run(["rm", "-rf", work])
    print()
    print("| kind | tenants | config check | start to ready | RSS when ready | RSS after reloads | full reload (SIGHUP / POST /reload) | `/metrics` size | open files |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = {r["kind"]: r for r in rows if r["n"] == 1}
    for r in rows:
        if "rss" not in r:
            print(f"| {r['kind']} | {r['n']:,} | {r['check']} | {r['start']} | | | | | |")
            continue
        after = (f"{mb(r['rss_reloads'])} after {r['reloads']}, {mb(r['rss_settled'])} 2 s later "
                 f"(max {mb(r['rss_reload_max'])})")
        print(f"| {r['kind']} | {r['n']:,} | {r['check']} | {r['start']} | {mb(r['rss'])} | {after} | "
              f"{r['hup']} / {r['post']} | {r['metrics'] / 1024:,.0f} KB | {r['fds']} |")
    print()
    print(f"Paced client, {PACED_RATE} searches/s over random tenants (latency from the scheduled send time):")
    print()
    print("| kind | tenants | p50 / p99 quiet | p99 quiet vs one tenant | during the full reloads: p99 / max | failed |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "paced_quiet" not in r:
            continue
        q, d, b = r["paced_quiet"], r["paced_reload"], base.get(r["kind"], {}).get("paced_quiet")
        vs = f"{q['p99_ms'] / b['p99_ms']:.2f}×" if b and b["p99_ms"] > 0 else "–"
        print(f"| {r['kind']} | {r['n']:,} | {q['p50_ms']:.1f} / {q['p99_ms']:.1f} ms | {vs} | "
              f"{d['p99_ms']:.1f} / {d['max_ms']:.1f} ms over {r['reloads']} reloads | {q['failed'] + d['failed']} of {q['sent'] + d['sent']} |")
    print()
    for r in rows:
        b = base.get(r["kind"])
        if r["n"] > 1 and b and "rss" in r and "rss" in b:
            per = (r["rss"] - b["rss"]) / (r["n"] - 1)
            print(f"{r['kind']} × {r['n']:,}: {per:,.0f} KB per tenant above the one-tenant baseline when ready "
                  f"({(r['rss_loaded'] - b['rss_loaded']) / (r['n'] - 1):,.0f} KB after one search each); "
                  f"open files after one search each {r['fds_after']}; failed searches {r['search_errors']}")
        if "thru" in r:
            (o_rps, o_us, o_bad), (s_rps, s_us, s_bad) = r["thru"]
            print(f"{r['kind']} × {r['n']:,}: search {o_rps:,.0f} req/s on one tenant ({o_us:.0f} µs gateway CPU/req), "
                  f"{s_rps:,.0f} req/s over random tenants ({s_us:.0f} µs) → {s_rps / o_rps:.2f}×; non-2xx {o_bad}/{s_bad}")
        if r["n"] == 1 and "rss" in r:
            print(f"{r['kind']} × 1: RSS over {r['reloads']} reloads: {mb(r['rss'])} ready, {mb(r['rss_reload_first'])} after the first, "
                  f"{mb(r['rss_reloads'])} after the last, max {mb(r['rss_reload_max'])}")
        if "rss_settled" in r:
            print(f"{r['kind']} × {r['n']:,}: RSS {mb(r['rss'])} ready, {mb(r['rss_settled'])} 2 s after the last of "
                  f"{r['reloads']} reloads: {100 * (r['rss_settled'] - r['rss']) / r['rss']:+.1f} %")
        print(f"{r['kind']} × {r['n']:,}: measured in {r['wall']:.0f} s")


if __name__ == "__main__":
    main()
