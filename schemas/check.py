#!/usr/bin/env python3
"""Check the AAP 3.0 JSON Schemas in this directory and the corpus in ../tests/corpus.

Usage: python3 schemas/check.py            (needs `pip install jsonschema`;
       `pip install rfc3986-validator` additionally lets it assert the `uri` format)

Schema checks
  * each *.schema.json is a valid JSON Schema 2020-12 document with $schema, title, description
    and $id == https://autoagentprotocol.org/v3.0/schemas/<file name>
  * the root is an object schema whose `type` property is a string `const` discriminator, and
    `type` is required
  * self-contained: every $ref is `#/$defs/<name>` and resolves inside the file; no $dynamicRef,
    no nested $id; every $defs entry is used
  * every documented property has a description; no description or title looks like an email
    address or a phone number
  * a $defs entry with the same name is byte-for-byte the same in every file (no drift)
  * every request schema has a root `examples` entry, and every root example validates
Corpus checks
  * valid/<stem>/*.json validates against <stem>.schema.json with format assertion on
  * invalid/<stem>/*.json = {instance, expect_path, why}; the instance fails both with and without
    format assertion, and one top-level error's instance location equals expect_path
  * minimum sizes: 3 valid files per request schema, 2 per other schema, 40 invalid files in all
Host-compat check
  * for request schemas with root composition (allOf/anyOf/oneOf/not/if/then/else), the same
    constraints moved under `dependentSchemas.type` give the same verdicts on the whole corpus
"""
from __future__ import annotations

import copy
import json
import pathlib
import re
import sys

try:
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.exceptions import NoSuchResource
except ImportError:  # pragma: no cover
    sys.exit("check.py needs the `jsonschema` package: pip install jsonschema")


def _refuse_retrieval(uri: str):
    """Schemas must be self-contained: never fetch anything over the network."""
    raise NoSuchResource(ref=uri)


OFFLINE = Registry(retrieve=_refuse_retrieval)

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests" / "corpus"
BASE_ID = "https://autoagentprotocol.org/v3.0/schemas/"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
TYPE_RE = re.compile(r"^[a-z_]+(\.[a-z_]+){1,2}$")
REF_RE = re.compile(r"^#/\$defs/([^/]+)$")
EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
PHONE_RE = re.compile(r"\+\d{6,}|\(\d{3}\)\s*\d{3}[-.\s]\d{4}|\b\d{3}[-.]\d{3}[-.]\d{4}\b")
ROOT_COMPOSITION = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")
# Subtrees that only constrain (conditions, alternatives); their `properties` are not documentation.
NON_DOC_KEYS = {"if", "then", "else", "not", "anyOf", "oneOf", "dependentSchemas"}
# dealer.information.request has exactly one valid instance: {"type": "dealer.information.request"}.
MIN_VALID_EXCEPTIONS = {"dealer-information-request": 1}
MIN_INVALID_TOTAL = 40

FORMAT_CHECKER = Draft202012Validator.FORMAT_CHECKER
failures: list[str] = []
broken: set[str] = set()  # schema files whose $refs cannot be resolved offline; their corpus is skipped


def fail(msg: str) -> None:
    failures.append(msg)


def validator_for(schema: dict, formats: bool = True) -> Draft202012Validator:
    return Draft202012Validator(schema, format_checker=FORMAT_CHECKER if formats else None, registry=OFFLINE)


def error_paths(validator: Draft202012Validator, instance, where: str) -> list[tuple[str, str]] | None:
    """(instance location, message) of each top-level error; None when validation itself broke."""
    try:
        return [(pointer(e.absolute_path), e.message) for e in validator.iter_errors(instance)]
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref
        fail(f"{where}: validation aborted: {type(exc).__name__}: {exc}")
        return None


def pointer(path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def walk(node, path=""):
    """Yield (json_pointer, node) for every dict/list in a schema document."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, (dict, list)):
                yield from walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for idx, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield from walk(v, f"{path}/{idx}")


def documented_properties(node, path="", skip=False):
    """Yield (path, subschema) for each property declared outside condition/alternative subtrees."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict) and not skip:
            for name, sub in props.items():
                yield f"{path}/properties/{name}", sub
        for k, v in node.items():
            if k == "properties" and isinstance(v, dict):
                for name, sub in v.items():
                    yield from documented_properties(sub, f"{path}/properties/{name}", skip)
            elif k in ("examples", "const", "enum", "default"):
                continue
            else:
                yield from documented_properties(v, f"{path}/{k}", skip or k in NON_DOC_KEYS)
    elif isinstance(node, list):
        for idx, v in enumerate(node):
            yield from documented_properties(v, f"{path}/{idx}", skip)


def check_schema(name: str, schema: dict) -> None:
    stem = name[: -len(".schema.json")]
    try:
        Draft202012Validator.check_schema(schema)
    except Exception as exc:  # noqa: BLE001
        fail(f"{name}: not a valid 2020-12 schema: {exc}")
    if schema.get("$schema") != DRAFT:
        fail(f"{name}: $schema must be {DRAFT}")
    if schema.get("$id") != BASE_ID + name:
        fail(f"{name}: $id must be {BASE_ID + name}, got {schema.get('$id')}")
    for key in ("title", "description"):
        if not isinstance(schema.get(key), str) or not schema[key].strip():
            fail(f"{name}: missing root {key}")
    if schema.get("type") != "object":
        fail(f"{name}: root type must be object")
    tprop = schema.get("properties", {}).get("type", {})
    const = tprop.get("const")
    if not isinstance(const, str) or not TYPE_RE.match(const):
        fail(f"{name}: properties.type must be a const discriminator, got {tprop!r}")
    if "type" not in schema.get("required", []):
        fail(f"{name}: `type` must be required")

    defs = schema.get("$defs", {})
    used: set[str] = set()
    for path, node in walk(schema):
        if not isinstance(node, dict):
            continue
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in node:
                fail(f"{name}{path}: {kw} is not allowed")
        if path and "$id" in node and not path.endswith("/properties"):
            fail(f"{name}{path}: nested $id is not allowed")
        ref = node.get("$ref")
        if ref is None:
            continue
        m = REF_RE.match(ref) if isinstance(ref, str) else None
        if not m:
            fail(f"{name}{path}: $ref {ref!r} is not of the form #/$defs/<name>")
            broken.add(name)
        elif m.group(1) not in defs:
            fail(f"{name}{path}: $ref {ref!r} does not resolve inside the file")
            broken.add(name)
        else:
            used.add(m.group(1))
    for unused in sorted(set(defs) - used):
        fail(f"{name}: $defs/{unused} is never referenced")

    for path, sub in documented_properties(schema):
        if not isinstance(sub, dict) or not str(sub.get("description", "")).strip():
            fail(f"{name}{path}: property has no description")
    for path, node in walk(schema):
        if not isinstance(node, dict):
            continue
        for key in ("description", "title"):
            text = node.get(key)
            hit = isinstance(text, str) and (EMAIL_RE.search(text) or PHONE_RE.search(text))
            if hit:
                fail(f"{name}{path}/{key}: looks like it contains contact data: {hit.group(0)!r}")

    examples = schema.get("examples")
    if stem.endswith("-request") and not examples:
        fail(f"{name}: request schemas need a root `examples` entry")
    if name in broken:
        return
    validator = validator_for(schema)
    for idx, example in enumerate(examples or []):
        for path, message in error_paths(validator, example, f"{name}: examples[{idx}]") or []:
            fail(f"{name}: examples[{idx}] does not validate at '{path}': {message[:160]}")


def check_shared_defs(schemas: dict[str, dict]) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for name, schema in schemas.items():
        for dname, body in schema.get("$defs", {}).items():
            text = json.dumps(body, sort_keys=True)
            if dname in seen and seen[dname][1] != text:
                fail(f"$defs/{dname} differs between {seen[dname][0]} and {name}")
            seen.setdefault(dname, (name, text))


def relocate_root_composition(schema: dict) -> dict | None:
    """The host-compat transform: move root composition under dependentSchemas.type."""
    moved = {k: schema[k] for k in ROOT_COMPOSITION if k in schema}
    if not moved:
        return None
    out = {k: copy.deepcopy(v) for k, v in schema.items() if k not in moved}
    out.setdefault("dependentSchemas", {})["type"] = copy.deepcopy(moved)
    return out


def load_json(path: pathlib.Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001
        fail(f"{path}: not valid JSON: {exc}")
        return None


def check_corpus(schemas: dict[str, dict]) -> dict[str, tuple[int, int]]:
    counts: dict[str, tuple[int, int]] = {}
    stems = {n[: -len(".schema.json")]: s for n, s in schemas.items()}
    for kind in ("valid", "invalid"):
        for d in sorted((CORPUS / kind).iterdir()) if (CORPUS / kind).is_dir() else []:
            if d.name not in stems:
                fail(f"corpus/{kind}/{d.name}: no schema {d.name}.schema.json")
    total_invalid = 0
    for stem, schema in sorted(stems.items()):
        if stem + ".schema.json" in broken:
            fail(f"corpus for {stem}: skipped, the schema's $refs do not resolve offline")
            continue
        strict = validator_for(schema)
        lax = validator_for(schema, formats=False)
        compat_schema = relocate_root_composition(schema) if stem.endswith("-request") else None
        compat = validator_for(compat_schema) if compat_schema else None

        valid_files = sorted((CORPUS / "valid" / stem).glob("*.json"))
        for f in valid_files:
            inst = load_json(f)
            where = f"valid/{stem}/{f.name}"
            errs = error_paths(strict, inst, where)
            for path, message in errs or []:
                fail(f"{where}: fails at '{path}': {message[:160]}")
            if compat and errs == [] and error_paths(compat, inst, where + " (host-compat)"):
                fail(f"{where}: rejected by the dependentSchemas.type (host-compat) form")

        invalid_files = sorted((CORPUS / "invalid" / stem).glob("*.json"))
        total_invalid += len(invalid_files)
        for f in invalid_files:
            case = load_json(f)
            if not isinstance(case, dict) or set(case) != {"instance", "expect_path", "why"}:
                fail(f"invalid/{stem}/{f.name}: must be exactly {{instance, expect_path, why}}")
                continue
            inst, want = case["instance"], case["expect_path"]
            for label, validator in (("with formats", strict), ("without formats", lax)) + (
                (("host-compat", compat),) if compat else ()
            ):
                errs = error_paths(validator, inst, f"invalid/{stem}/{f.name} ({label})")
                if errs is None:
                    continue
                paths = [p for p, _ in errs]
                if not paths:
                    fail(f"invalid/{stem}/{f.name}: unexpectedly valid ({label})")
                elif want not in paths:
                    fail(f"invalid/{stem}/{f.name}: no error at '{want}' ({label}); got {sorted(set(paths))}")

        need = MIN_VALID_EXCEPTIONS.get(stem, 3 if stem.endswith("-request") else 2)
        if len(valid_files) < need:
            fail(f"corpus/valid/{stem}: {len(valid_files)} files, need at least {need}")
        if not invalid_files:
            fail(f"corpus/invalid/{stem}: no invalid cases")
        counts[stem] = (len(valid_files), len(invalid_files))
    if total_invalid < MIN_INVALID_TOTAL:
        fail(f"corpus/invalid: {total_invalid} cases, need at least {MIN_INVALID_TOTAL}")
    return counts


def main() -> int:
    files = sorted(HERE.glob("*.schema.json"))
    if not files:
        print(f"no *.schema.json files in {HERE}")
        return 1
    schemas: dict[str, dict] = {}
    for f in files:
        data = load_json(f)
        if isinstance(data, dict):
            schemas[f.name] = data
            check_schema(f.name, data)
    check_shared_defs(schemas)
    counts = check_corpus(schemas)

    used_formats = sorted(
        {n["format"] for s in schemas.values() for _, n in walk(s) if isinstance(n, dict) and isinstance(n.get("format"), str)}
    )
    unchecked = [f for f in used_formats if f not in FORMAT_CHECKER.checkers]
    print(f"schemas: {len(schemas)}  formats used: {', '.join(used_formats)}"
          + (f"  (not asserted here: {', '.join(unchecked)})" if unchecked else "  (all asserted)"))
    for stem, (nv, ni) in counts.items():
        compat = " +host-compat" if stem.endswith("-request") and relocate_root_composition(schemas[stem + ".schema.json"]) else ""
        print(f"  {stem:32s} valid {nv:3d}  invalid {ni:3d}{compat}")
    print(f"corpus: {sum(v for v, _ in counts.values())} valid, {sum(i for _, i in counts.values())} invalid")
    if failures:
        print(f"\nFAILED ({len(failures)}):")
        for msg in failures:
            print("  - " + msg)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
