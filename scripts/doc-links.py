#!/usr/bin/env python3
"""Check the relative links of README.md and docs/*.md: every linked file
exists and every `#anchor` names a heading of its target (GitHub's slug rule:
lower case, punctuation other than `-` and `_` dropped, spaces to `-`, a
repeated heading gets `-1`, `-2`, ...). Links to other sites are not
fetched. Links inside code blocks and code spans are not links.

Usage: python3 scripts/doc-links.py [FILE.md ...]   (exit 1 on a broken link)

Written by hand because it needs only the standard library and a few lines;
the markdown link checkers on PyPI and npm fetch external URLs as well.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def strip_code(text):
    """The text without fenced blocks and code spans (kept line for line)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, result = {}, set()
    fenced = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def check(md):
    problems = []
    text = strip_code(md.read_text(encoding="utf-8"))
    for lineno, line in enumerate(text.split("\n"), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file_part, _, frag = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            where = f"{md.relative_to(ROOT)}:{lineno}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                problems.append(f"{where}: no heading #{frag} in {dest.relative_to(ROOT)}")
    return problems


def main(args):
    files = [Path(a).resolve() for a in args] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [p for f in files for p in check(f)]
    for p in problems:
        print(p)
    print(f"{len(files)} files checked, {len(problems)} broken links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
