"""What one client connection costs the gateway in RSS, HTTP/1.1 and HTTP/2: idle, busy and abusive.

Run by benches/connections.sh (which builds the binary and picks the Python with the `h2` package).
For each scenario a fresh gateway (h2c on, connection limits off) is started, warmed up, and CONNS
connections are put in that state; the scenario's cost is (peak RSS while they are held - RSS before)
/ CONNS, from /proc/PID/status VmRSS sampled every 50 ms.

  idle      one request answered, then nothing (a keep-alive connection between requests)
  busy      a request always in flight (HTTP/1.1: one at a time; HTTP/2: 10 streams), answers read
  abusive   HTTP/1.1: 100 pipelined requests whose answers are never read;
            HTTP/2: 100 streams with a zero receive window (answers never sent), never read
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings

REPO = Path(__file__).resolve().parent.parent
BIN = os.environ.get("BIN", str(REPO / "target/release/aap-gateway"))
CONNS = int(os.environ.get("CONNS", "100"))
HOLD = float(os.environ.get("HOLD", "4"))
PATH = "/aap/3.0.0/demo-toyota/mcp"


def body(limit: int) -> bytes:
    return json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "aap_inventory_search",
                   "arguments": {"type": "inventory.search.request", "pagination": {"limit": limit}},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
    }).encode()


SMALL = body(1)
LARGE = body(100)
HEADERS = [("content-type", "application/json"), ("accept", "application/json, text/event-stream"),
           ("mcp-protocol-version", "2026-07-28")]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Gateway:
    def __init__(self, work: Path):
        self.port, admin = free_port(), free_port()
        cfg = (REPO / "gateway.toml").read_text()
        cfg = cfg.replace("h2c = false", "h2c = true").replace('"data/', f'"{REPO}/data/')
        cfg = cfg.replace("max_connections_per_ip = 1000", "max_connections_per_ip = 0")
        cfg = cfg.replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0")
        (work / "gw.toml").write_text(cfg)
        self.proc = subprocess.Popen(
            [BIN, "--config", str(work / "gw.toml"), "--listen", f"127.0.0.1:{self.port}",
             "--admin-listen", f"127.0.0.1:{admin}", "--state-dir", str(work / "state")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("gateway did not start")

    def stop(self):
        self.proc.send_signal(2)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def h1_request(data: bytes) -> bytes:
    head = f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data)}\r\n"
    head += "".join(f"{n}: {v}\r\n" for n, v in HEADERS)
    return head.encode() + b"\r\n" + data


async def h1_read_answer(r: asyncio.StreamReader):
    head = await r.readuntil(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    await r.readexactly(n)


async def h1_idle(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(h1_request(SMALL))
    await h1_read_answer(r)
    await stop.wait()
    w.close()


async def h1_busy(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    while not stop.is_set():
        w.write(h1_request(LARGE))
        await h1_read_answer(r)
    w.close()


async def h1_abusive(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(h1_request(LARGE) * 100)
    await stop.wait()
    w.close()


class H2:
    def __init__(self, r, w, window=None):
        self.r, self.w = r, w
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.c.initiate_connection()
        if window is not None:
            self.c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.done = {}
        self.w.write(self.c.data_to_send())

    def send(self, data: bytes) -> int:
        sid = self.c.get_next_available_stream_id()
        hdrs = [(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", PATH)]
        self.c.send_headers(sid, hdrs + HEADERS + [("content-length", str(len(data)))])
        self.c.send_data(sid, data, end_stream=True)
        self.w.write(self.c.data_to_send())
        return sid

    async def pump(self, read=True):
        data = await self.r.read(65536)
        if not data:
            raise ConnectionError
        for ev in self.c.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and read:
                self.c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            if isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                self.done[ev.stream_id] = True
        self.w.write(self.c.data_to_send())


async def h2_idle(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    c = H2(r, w)
    sid = c.send(SMALL)
    while sid not in c.done:
        await c.pump()
    await stop.wait()
    w.close()


async def h2_busy(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    c = H2(r, w)
    live = {c.send(LARGE) for _ in range(10)}
    while not stop.is_set():
        await c.pump()
        for sid in [s for s in live if s in c.done]:
            live.discard(sid)
            live.add(c.send(LARGE))
    w.close()


async def h2_abusive(port, stop):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    c = H2(r, w, window=0)
    for _ in range(100):
        c.send(LARGE)
    await stop.wait()
    w.close()


async def run(port: int, pid: int, scenario) -> tuple[int, int]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(scenario(port, stop)) for _ in range(CONNS)]
    peak = 0
    end = time.monotonic() + HOLD
    while time.monotonic() < end:
        await asyncio.sleep(0.05)
        peak = max(peak, rss_kib(pid))
    stop.set()
    await asyncio.wait(tasks, timeout=10)
    return peak, sum(1 for t in tasks if t.done() and t.exception() is not None)


def measure(name, scenario) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory() as d:
        gw = Gateway(Path(d))
        try:
            # Warm-up: a few answers of each size over both protocols.
            async def warmup():
                stop = asyncio.Event()
                stop.set()
                for _ in range(20):
                    await h1_idle(gw.port, stop)
                    await h2_idle(gw.port, stop)
                r, w = await asyncio.open_connection("127.0.0.1", gw.port)
                for _ in range(20):
                    w.write(h1_request(LARGE))
                    await h1_read_answer(r)
                w.close()
            asyncio.run(warmup())
            time.sleep(0.5)
            before = rss_kib(gw.proc.pid)
            peak, failed = asyncio.run(run(gw.port, gw.proc.pid, scenario))
            return before, peak, failed
        finally:
            gw.stop()


def main():
    rows = []
    for proto, cases in (("HTTP/1.1", (("idle", h1_idle), ("busy", h1_busy), ("abusive", h1_abusive))),
                         ("HTTP/2", (("idle", h2_idle), ("busy", h2_busy), ("abusive", h2_abusive)))):
        for name, fn in cases:
            before, peak, failed = measure(name, fn)
            per = (peak - before) / CONNS
            rows.append((proto, name, before, peak, per, failed))
            print(f"{proto:8} {name:8} RSS {before} -> {peak} KiB: {per:.1f} KiB per connection"
                  f"{f' ({failed} connections failed)' if failed else ''}", file=sys.stderr, flush=True)
    print(f"\n{CONNS} connections per scenario, each held {HOLD:.0f} s (peak RSS):\n")
    print("| protocol | connection | RSS before (KiB) | peak RSS (KiB) | per connection (KiB) |")
    print("|---|---|---|---|---|")
    for proto, name, before, peak, per, _ in rows:
        print(f"| {proto} | {name} | {before} | {peak} | {per:.1f} |")


if __name__ == "__main__":
    main()
