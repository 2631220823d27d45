"""Per-phase CPU breakdown of one process from `perf report --no-children --sort sym --stdio` text.

Reads the report on stdin; each sample line is `  12.34%  [k] symbol` ([k] kernel, [.] user space).
An optional argument, the process's CPU time per request in microseconds, adds a column splitting it.
Each symbol goes to the first phase whose pattern it matches, so the order below matters (an allocator
call inside serde_json code is the allocator's). Inlining moves work into its caller: code that the
compiler inlined into the gateway's own functions counts where it was inlined, so the phases are a
lower bound for the libraries and an upper bound for "other".
"""
import re
import sys

PHASES = [
    ("kernel (syscalls, TCP loopback, scheduler)", None),  # every [k] sample
    ("allocator, memcpy/memmove", r"^(_?mi_|malloc|free|calloc|realloc|cfree|_int_(malloc|free|realloc)|"
     r"__(memmove|memcpy|memset|memcmp|mempcpy)|mem(move|cpy|set|cmp)\b|__rust_(alloc|dealloc|realloc)|"
     r"alloc::raw_vec|<alloc::raw_vec)"),
    ("jsonschema validation", r"jsonschema|referencing::|fancy_regex|regex_automata|regex::"),
    ("HTTP/2 and HPACK", r"\bh2::|hpack|ingress::h2"),
    ("JSON read/write", r"serde_json|serde::|\bryu::|\bitoa::|serde_json_canonicalizer|aap_core::json::|"
     r"core::str::converts::from_utf8"),
    ("pingora upstream client", r"pingora_core::connectors|pingora_core::protocols::http::v1::client|"
     r"pingora_pool|aap_gateway::upstream::"),
    ("HTTP/1 ingress (httparse, the gateway's reader/writer)", r"httparse|aap_gateway::ingress"),
    ("access log and metrics", r"aap_core::access|aap_core::metrics|prometheus::|\btracing|init_logging"),
    ("tokio runtime, mio, timers", r"\btokio::|\bmio::|parking_lot|crossbeam|pingora_timeout"),
    ("other", r""),
]

LINE = re.compile(r"^\s*([\d.]+)%\s+\[(.)\]\s+(.*?)\s*$")


def main() -> None:
    totals = {name: 0.0 for name, _ in PHASES}
    top = {name: [] for name, _ in PHASES}
    compiled = [(name, re.compile(p) if p is not None else None) for name, p in PHASES]
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        pct, space, sym = float(m.group(1)), m.group(2), m.group(3)
        for name, rx in compiled:
            if (rx is None and space == "k") or (rx is not None and space != "k" and rx.search(sym)):
                totals[name] += pct
                top[name].append((pct, sym))
                break
    per_req = float(sys.argv[1]) if len(sys.argv) > 1 else None
    whole = sum(totals.values()) or 1.0
    us = lambda pct: f"{pct / whole * per_req:>8.1f}" if per_req else f"{'-':>8}"
    width = max(len(n) for n, _ in PHASES)
    print(f"{'phase':<{width}}  {'% samples':>9}  {'us/req':>8}  biggest symbols")
    for name, _ in PHASES:
        syms = sorted(top[name], reverse=True)[:3]
        shown = "; ".join(f"{s[:50]} {p:.1f}%" for p, s in syms)
        print(f"{name:<{width}}  {totals[name]:>8.1f}%  {us(totals[name])}  {shown}")
    print(f"{'total':<{width}}  {whole:>8.1f}%  {us(whole)}")


if __name__ == "__main__":
    main()
