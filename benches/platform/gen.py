#!/usr/bin/env python3
"""N-tenant configs for benches/platform.sh (see docs/performance.md, "Platform scale").

  gen.py embedded N OUT.toml [--listen A --admin B --state DIR]
      N copies of the shipped demo tenant (gateway.toml), each on its own path
      /aap/3.0.0/dealer-I/mcp, all reading the same data files.
  gen.py mcp N OUT.toml --peer http://127.0.0.1:PORT [--peer-path P] ...
      N `kind = "mcp"` tenants against one shared upstream peer (the demo tenant
      served by another gateway, or tests/upstreams/strict_mcp_server.py).
  gen.py tenant-file embedded|mcp I OUT.toml [--peer ...]
      One tenant alone, as a tenant directory file would hold it.
Tenant ids are dealer-0 .. dealer-(N-1); quotas are off so the bench measures the data path.
"""
import argparse
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ADMIN_TOKEN = "platform-bench-admin-token"


def demo_parts():
    """The shipped gateway.toml split into its global tables and its one [[tenants]] block."""
    s = open(os.path.join(ROOT, "gateway.toml")).read()
    s = s.replace('"data/', '"' + ROOT + '/data/')
    i = s.index("[[tenants]]")
    return s[:i], s[i:]


def tenant_block(kind, i, peer=None, peer_path="/aap/3.0.0/demo-toyota/mcp", listen="127.0.0.1:8080"):
    _, t = demo_parts()
    tid = f"dealer-{i}"
    t = t.replace('id = "demo-toyota"', f'id = "{tid}"')
    t = t.replace("/aap/3.0.0/demo-toyota/mcp", f"/aap/3.0.0/{tid}/mcp")
    t = re.sub(r'public_url = "http://127.0.0.1:\d+', f'public_url = "http://{listen}', t)
    t = t.replace('name = "Demo Toyota"', f'name = "Dealer {i}"')
    t = t.replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0")
    if kind == "mcp":
        a = t.index("[tenants.backend]")
        b = t.index("[tenants.rate_limit]")
        t = (t[:a] + "[tenants.backend]\nkind = \"mcp\"\n"
             f'peers = ["{peer}"]\npath = "{peer_path}"\nrevision = "2026-07-28"\n\n' + t[b:])
    return t


def config(kind, n, listen, admin, state, peer=None, peer_path=None):
    head, _ = demo_parts()
    head = re.sub(r'(?m)^listen = ".*"$', f'listen = "{listen}"', head)
    head = re.sub(r'(?m)^admin_listen = ".*"$', f'admin_listen = "{admin}"', head)
    head = re.sub(r'(?m)^admin_token_env = ".*"$', f'admin_token = "{ADMIN_TOKEN}"', head)
    head = re.sub(r'(?m)^dir = "var"$', f'dir = "{state}"', head)
    kw = {"peer": peer, "listen": listen}
    if peer_path:
        kw["peer_path"] = peer_path
    return head + "\n".join(tenant_block(kind, i, **kw) for i in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["embedded", "mcp", "tenant-file"])
    ap.add_argument("n")
    ap.add_argument("out")
    ap.add_argument("file_kind", nargs="?", default="embedded")
    ap.add_argument("--listen", default="127.0.0.1:8080")
    ap.add_argument("--admin", default="127.0.0.1:9090")
    ap.add_argument("--state", default="var")
    ap.add_argument("--peer")
    ap.add_argument("--peer-path")
    a = ap.parse_args()
    if a.kind == "mcp" and not a.peer:
        ap.error("mcp needs --peer")
    if a.kind == "tenant-file":
        kw = {"peer": a.peer, "listen": a.listen}
        if a.peer_path:
            kw["peer_path"] = a.peer_path
        text = tenant_block(a.file_kind, int(a.n), **kw)
    else:
        text = config(a.kind, int(a.n), a.listen, a.admin, a.state, a.peer, a.peer_path)
    open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
