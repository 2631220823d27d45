#!/usr/bin/env python3
"""Module cycles in the two crates: for each module, the graph of its child modules (an edge
a → b when code under a names a path under b, through `crate::`, `super::` or `self::`), and
every cycle of it. Exit 1 when a crate has one (`--report` only prints them).
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = {"aap-gateway": ROOT / "src", "aap-core": ROOT / "crates/aap-core/src"}
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::\w+)*)::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", re.S)

def module_of(root: Path, f: Path):
    parts = list(f.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts

def modules(root: Path):
    mods = {}
    for f in root.rglob("*.rs"):
        mods[tuple(module_of(root, f))] = f
    return mods

def strip(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # Unit tests may reach anywhere; they are not the module's dependencies.
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", text)
    return text[: cut.start()] if cut else text

def targets(text: str, here: list):
    """Absolute module paths named from the module `here`."""
    out = []
    def absolute(head, rest):
        segs = [s for s in rest.split("::") if s]
        if head == "crate":
            return segs
        base = list(here)
        if head == "super":
            base = base[:-1]
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
        return base + segs
    for m in GROUP.finditer(text):
        prefix = absolute(m.group(1), m.group(2))
        for item in re.split(r",(?![^{]*\})", m.group(3)):
            first = re.match(r"\s*(\w+)", item)
            if first and first.group(1) != "self":
                out.append(prefix + [first.group(1)])
            else:
                out.append(prefix)
    for m in PATH.finditer(text):
        out.append(absolute(m.group(1), m.group(2)))
    return out

def cycles_of(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out

def main() -> int:
    found = 0
    for name, root in CRATES.items():
        mods = modules(root)
        known = set(mods)
        graphs = defaultdict(lambda: defaultdict(set))
        why = {}
        for here, f in mods.items():
            for t in targets(strip(f.read_text(encoding="utf-8")), list(here)):
                # The longest prefix of the path that is a module of this crate.
                while t and tuple(t) not in known:
                    t = t[:-1]
                if not t:
                    continue
                d = 0
                while d < min(len(here), len(t)) and here[d] == t[d]:
                    d += 1
                if d < len(here) and d < len(t):
                    graphs[tuple(here[:d])][here[d]].add(t[d])
                    why.setdefault((tuple(here[:d]), here[d], t[d]), (f.relative_to(ROOT), "::".join(t)))
        for parent, edges in sorted(graphs.items()):
            for comp in cycles_of(edges):
                found += 1
                where = "::".join(parent) or "crate root"
                print(f"{name}: cycle under {where}: {{{', '.join(comp)}}}")
                for a in comp:
                    for b in sorted(edges[a] & set(comp)):
                        src, target = why[(parent, a, b)]
                        print(f"    {a} -> {b}  (e.g. {src} names {target})")
    print(f"module cycles: {found}")
    return 1 if found and "--report" not in sys.argv else 0

if __name__ == "__main__":
    sys.exit(main())
