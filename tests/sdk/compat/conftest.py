"""Start the real gateway once for the compatibility-profile tests.

One gateway, four tenants over the same embedded demo dealer (data/), built from the shipped
gateway.toml with only `id`, `path` and `host_compat` changed:

    demo-toyota     host_compat = false               (the canonical catalog)
    compat-strict   host_compat = ["openai-strict"]
    compat-nulls    host_compat = ["null-as-absent"]
    compat-notypes  host_compat = ["no-type-arrays"]

The binary is $AAP_GATEWAY_BIN (default target/release/aap-gateway); its log is kept in the
temporary directory and printed when a test fails to start it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

TENANTS = {
    "demo-toyota": "false",
    "compat-strict": '["openai-strict"]',
    "compat-nulls": '["null-as-absent"]',
    "compat-notypes": '["no-type-arrays"]',
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(base: str) -> str:
    head, sep, tenant = base.partition("[[tenants]]")
    assert sep, "gateway.toml has no [[tenants]] table"
    # The discovery documents are not under test: no public_url, no [tenants.publish].
    tenant = re.sub(r"(?m)^public_url = .*\n", "", tenant)
    tenant = tenant.split("\n[tenants.publish]")[0] + "\n"
    # Relative paths resolve against the config file's directory: point them at the repo.
    tenant = tenant.replace('"data/', f'"{REPO}/data/')
    out = [head]
    for tid, compat in TENANTS.items():
        t = tenant.replace('id = "demo-toyota"', f'id = "{tid}"', 1)
        t = t.replace('path = "/aap/3.0.0/demo-toyota/mcp"', f'path = "/aap/3.0.0/{tid}/mcp"', 1)
        t = t.replace("host_compat = false", f"host_compat = {compat}", 1)
        assert f'id = "{tid}"' in t and f"host_compat = {compat}" in t
        out.append(sep + t)
    return "".join(out)


class Gateway:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log

    def url(self, tenant: str) -> str:
        return f"http://127.0.0.1:{self.port}/aap/3.0.0/{tenant}/mcp"

    def access_lines(self) -> list[str]:
        # The log writer batches lines (a few ms) and a line follows its answer's write, so the
        # log is read until it stops growing (at most 2 s) rather than once.
        text, deadline = self.log.read_text(errors="replace"), time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.05)
            again = self.log.read_text(errors="replace")
            if again == text:
                break
            text = again
        return [l for l in text.splitlines() if '"target":"access"' in l]


@pytest.fixture(scope="session")
def gateway() -> Gateway:
    binary = Path(os.environ.get("AAP_GATEWAY_BIN", REPO / "target/release/aap-gateway"))
    if not binary.is_file():
        pytest.fail(f"gateway binary not found: {binary} (cargo build --release)")
    work = Path(tempfile.mkdtemp(prefix="aap-compat-"))
    config = work / "gateway.toml"
    config.write_text(_config((REPO / "gateway.toml").read_text()))
    port, admin = _free_port(), _free_port()
    log = work / "gateway.log"
    env = dict(os.environ, AAP_LOG="info")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "--config", str(config), "--listen", f"127.0.0.1:{port}",
             "--admin-listen", f"127.0.0.1:{admin}", "--state-dir", str(work / "state")],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"gateway exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gateway not ready after 60 s:\n{log.read_text()[-4000:]}")
            time.sleep(0.2)
        yield Gateway(port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
