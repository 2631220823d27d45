#!/usr/bin/env python3
"""Resolve every file, function, type and test that docs/architecture-rules.md names.

A pointer is a backticked token of one of these forms (see "How to read the table" there):
`path.rs`, `path.rs::name`, `path.rs::tests::name`, `tests/it/m.rs::test`, `::test` (same
file as the pointer before it), `Type::method`, `mod/file.rs::function`. A path without a
leading `crates/`, `src/` or `tests/` is in the core crate (`crates/aap-core/src/`). Exits 1
and lists every pointer that does not resolve.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture-rules.md"
CORE = "crates/aap-core/src/"

def rust_files():
    for base in ("src", "crates", "tests", "benches", "fuzz"):
        yield from (ROOT / base).rglob("*.rs")

SOURCES = {p: p.read_text(encoding="utf-8", errors="replace") for p in rust_files() if "target" not in p.parts}

def resolve_path(p: str):
    for cand in (p, CORE + p):
        f = ROOT / cand
        if f.is_file():
            return f
    return None

def defines(text: str, name: str) -> bool:
    pat = rf"\b(fn|struct|enum|trait|type|const|static|mod|macro_rules!)\s+{re.escape(name)}\b"
    return re.search(pat, text) is not None

def defines_py(text: str, name: str) -> bool:
    return re.search(rf"\bdef\s+{re.escape(name)}\b", text) is not None

def anywhere(name: str) -> bool:
    return any(defines(t, name) for t in SOURCES.values())

def type_has(tname: str, method: str) -> bool:
    if not anywhere(tname):
        return False
    for t in SOURCES.values():
        if re.search(rf"\bimpl\b[^{{;]*\b{re.escape(tname)}\b", t) and defines(t, method):
            return True
        # A field (`RequestCtx::binding`).
        if re.search(rf"\bstruct\s+{re.escape(tname)}\b", t) and re.search(rf"\bpub(\([\w:]+\))?\s+{re.escape(method)}\s*:", t):
            return True
        # A variant (`Failure::RateLimited`) or an associated item in a trait.
        if re.search(rf"\benum\s+{re.escape(tname)}\b", t) and re.search(rf"\b{re.escape(method)}\b", t):
            return True
    return False

def find_named(name: str):
    """A bare file name (`baseline-gateway.yml`): anywhere in the repository."""
    for f in ROOT.rglob(name):
        if "target" not in f.parts and ".git" not in f.parts and "node_modules" not in f.parts:
            return f
    return None

def check(token: str, last_file):
    """(ok, file this token names or None); ok is None when the token is not a pointer."""
    # The legend's placeholders (`A::b`, `m::f`) and single letters are not pointers.
    if re.fullmatch(r"\w::\w", token):
        return None, None
    m = re.fullmatch(r"([\w.-]+\.(?:yml|json|py|mjs|sh))", token)
    if m:
        f = find_named(m.group(1))
        return f is not None, f
    m = re.fullmatch(r"(tests/sdk/python/[\w.]+\.py)::(\w+)::(\w+)", token)
    if m:
        f = ROOT / m.group(1)
        shared = ROOT / "tests/sdk/python/aap_e2e.py"
        if not f.is_file():
            return False, None
        text = f.read_text(encoding="utf-8")
        # The test methods are defined once in aap_e2e.py (`ClientScenario`).
        ok = re.search(rf"class\s+{m.group(2)}\b", text) is not None and (
            defines_py(text, m.group(3)) or defines_py(shared.read_text(encoding="utf-8"), m.group(3)))
        return ok, f
    m = re.fullmatch(r"([\w./-]+\.(?:rs|py|mjs|sh|yml|toml|json|md))((?:::[\w]+)*)", token)
    if m:
        f = resolve_path(m.group(1))
        if f is None:
            return False, None
        names = [n for n in m.group(2).split("::") if n]
        if names and names[0] == "tests":
            names = names[1:]
        text = f.read_text(encoding="utf-8", errors="replace")
        for n in names[-1:]:
            if f.suffix == ".rs" and not defines(text, n):
                return False, f
            if f.suffix != ".rs" and n not in text:
                return False, f
        return True, f
    m = re.fullmatch(r"::(\w+)", token)
    if m and last_file is not None:
        return defines(last_file.read_text(encoding="utf-8", errors="replace"), m.group(1)), last_file
    m = re.fullmatch(r"([A-Z]\w*)::([a-z_]\w*)", token)
    if m:
        return type_has(m.group(1), m.group(2)), None
    m = re.fullmatch(r"([a-z_]\w*)::([a-z_]\w*)", token)
    if m:
        # `m::f`: a free function `f` in module file `m`.
        files = [p for p in SOURCES if p.stem == m.group(1) or (p.name == "mod.rs" and p.parent.name == m.group(1))]
        return any(defines(SOURCES[p], m.group(2)) for p in files), None
    return None, None  # not a pointer

def main() -> int:
    stale = []
    checked = 0
    last_file = None
    for lineno, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        for token in re.findall(r"`([^`\s]+)`", line):
            token = token.rstrip(",.;")
            ok, f = check(token, last_file)
            if ok is None:
                continue
            checked += 1
            if f is not None:
                last_file = f
            if not ok:
                stale.append(f"docs/architecture-rules.md:{lineno}: `{token}` does not resolve")
    for s in stale:
        print(s)
    print(f"rules table: {checked} pointers checked, {len(stale)} stale")
    return 1 if stale else 0

if __name__ == "__main__":
    sys.exit(main())
