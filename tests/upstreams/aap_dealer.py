"""Shared AAP 3.0 dealer logic for the Python upstream test peers.

Used by ``strict_mcp_server.py`` (PyPI ``mcp``) and ``a2a_agent.py`` (PyPI ``a2a-sdk``).
The Node peer (``node/aap_dealer.mjs``) implements the same rules; keep them in step.

It serves the five AAP skills from the demo data files of the repository
(``data/demo-dealer.json``, ``data/demo-inventory.json``), validates every request
against ``schemas/<stem>-request.schema.json`` and every answer against the matching
response schema (or ``error.schema.json``) before returning it, and appends accepted
leads to a JSONL file.

Wire-independent: ``Dealer.execute(skill_id, request)`` returns either the typed
response ``{"type": "<skill>.response", "data": {...}}`` or an ``aap.error`` payload.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SKILLS_FILE = HERE / "aap_skills.json"

log = logging.getLogger("aap-upstream")

LISTED = ("available", "intransit", "pending")

# String-array filters matched case-insensitively: (filter key, vehicle field).
TERM_FILTERS = [
    ("make", "make"),
    ("model", "model"),
    ("trim", "trim"),
    ("condition", "condition"),
    ("transmission", "transmission"),
    ("fuel", "fuel"),
    ("driveline", "driveline"),
    ("body", "body"),
    ("exterior_color", "exterior_color"),
    ("interior_color", "interior_color"),
    ("rooftops", "rooftop"),
    ("status", "status"),
]
SCALAR_FILTERS = ["year_min", "year_max", "price_min", "price_max", "mileage_max", "vin", "stock", "query", "vehicle_type"]
TERM_FACETS = [
    ("makes", "make"),
    ("models", "model"),
    ("trims", "trim"),
    ("years", "year"),
    ("conditions", "condition"),
    ("transmissions", "transmission"),
    ("fuels", "fuel"),
    ("drivelines", "driveline"),
    ("bodies", "body"),
    ("exterior_colors", "exterior_color"),
    ("interior_colors", "interior_color"),
    ("rooftops", "rooftop"),
    ("statuses", "status"),
    ("vehicle_types", "vehicle_type"),
]
RANGE_FACETS = [("price_range", "price"), ("mileage_range", "mileage"), ("year_range", "year")]
SORT_FIELDS = ["price", "list_price", "msrp", "mileage", "year", "make", "model", "stock", "updated_at"]
SEARCH_TEXT_FIELDS = [
    "year", "make", "model", "trim", "body", "fuel", "driveline", "transmission", "engine",
    "exterior_color", "interior_color", "condition", "description", "vehicle_type",
]
DEFAULT_LIMIT = 20
MAX_LIMIT = 100

AAP_META_KEY = "autoagentprotocol.org/aap"


def load_skills() -> dict[str, Any]:
    with SKILLS_FILE.open(encoding="utf-8") as f:
        return json.load(f)


SKILLS = load_skills()
SKILL_BY_ID = {s["id"]: s for s in SKILLS["skills"]}
SKILL_BY_TOOL = {s["tool"]: s for s in SKILLS["skills"]}
EXTENSION_URI: str = SKILLS["extension_uri"]
ERROR_TYPE_TAG: str = SKILLS["error_type_tag"]
SCHEMA_BASE_URL: str = SKILLS["schema_base_url"]
AAP_RELEASE: str = SKILLS["aap_release"]


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def integralize(value: Any) -> Any:
    """Turn integral floats back into ints (``18080.0`` -> ``18080``), recursively.

    google.protobuf.Value (used by a2a-sdk for DataPart.data) has only doubles, so every JSON
    number that crossed the A2A SDK is a float. Every AAP integer field is integral.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integralize(v) for v in value]
    if isinstance(value, dict):
        return {k: integralize(v) for k, v in value.items()}
    return value


def json_pointer(path: Any) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "".join("/" + p for p in parts)


def aap_error(
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    retryable: bool | None = None,
) -> dict[str, Any]:
    err: dict[str, Any] = {
        "type": "aap.error",
        "error_id": f"err_{uuid.uuid4().hex}",
        "code": code,
        "message": message,
        "retryable": retryable if retryable is not None else code in ("RATE_LIMITED", "INTERNAL_ERROR", "UPSTREAM_UNAVAILABLE"),
        "created_at": now_rfc3339(),
    }
    if details is not None:
        err["details"] = details
    return err


def field_error(location: str, keyword: str, error: str, correction: str | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"instanceLocation": location, "keyword": keyword, "error": error}
    if correction:
        e["correction"] = correction
    return e


def is_error(payload: dict[str, Any]) -> bool:
    return isinstance(payload, dict) and payload.get("type") == "aap.error"


# Keywords whose jsonschema message names only schema keys, never instance values.
_NAME_ONLY_KEYWORDS = {"required", "additionalProperties", "dependentRequired", "unevaluatedProperties"}


def _describe(err: Any) -> str:
    """A validation message free of customer values (only schema facts and key names)."""
    kw = err.validator
    if kw in _NAME_ONLY_KEYWORDS:
        return str(err.message)
    if kw in ("anyOf", "oneOf", "allOf", "not", "if", "then", "else"):
        return f"the value does not satisfy the {kw} constraint"
    expected = json.dumps(err.validator_value, ensure_ascii=False)
    if len(expected) > 160:
        expected = expected[:157] + "..."
    return f"{kw} {expected} is not satisfied"


@dataclass
class SchemaSet:
    docs: dict[str, dict[str, Any]]
    validators: dict[str, Draft202012Validator]

    @classmethod
    def load(cls, schema_dir: Path) -> SchemaSet:
        docs: dict[str, dict[str, Any]] = {}
        validators: dict[str, Draft202012Validator] = {}
        fc = FormatChecker()
        for path in sorted(schema_dir.glob("*.schema.json")):
            stem = path.name[: -len(".schema.json")]
            with path.open(encoding="utf-8") as f:
                doc = json.load(f)
            Draft202012Validator.check_schema(doc)
            docs[stem] = doc
            validators[stem] = Draft202012Validator(doc, format_checker=fc)
        for need in ["error", "inventory-capabilities"] + [
            f"{s['stem']}-{kind}" for s in SKILLS["skills"] for kind in ("request", "response")
        ]:
            if need not in docs:
                raise SystemExit(f"schema {need}.schema.json missing in {schema_dir}")
        return cls(docs, validators)

    def errors(self, stem: str, instance: Any) -> list[dict[str, Any]]:
        out = []
        for err in sorted(self.validators[stem].iter_errors(instance), key=lambda e: list(e.absolute_path)):
            out.append(field_error(json_pointer(err.absolute_path), str(err.validator), _describe(err)))
        return out

    def output_schema(self, skill: dict[str, Any]) -> dict[str, Any]:
        """Self-contained union of the typed response and aap.error, defs hoisted to the root."""
        defs: dict[str, Any] = {}

        def strip(doc: dict[str, Any], name: str) -> None:
            body = copy.deepcopy(doc)
            body.pop("$schema", None)
            body.pop("$id", None)
            for k, v in body.pop("$defs", {}).items():
                if k in defs and defs[k] != v:
                    raise SystemExit(f"definition {k} differs between schemas")
                defs[k] = v
            defs[name] = body

        response_name = f"{skill['stem']}-response"
        strip(self.docs[response_name], response_name)
        strip(self.docs["error"], "aap-error")
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{SCHEMA_BASE_URL}{skill['stem']}-result.schema.json",
            "type": "object",
            "description": f"Either a {skill['id']}.response payload or an aap.error payload (then isError is true).",
            "anyOf": [{"$ref": f"#/$defs/{response_name}"}, {"$ref": "#/$defs/aap-error"}],
            "$defs": defs,
        }


def capabilities() -> dict[str, Any]:
    filters = [f for f, _ in TERM_FILTERS] + [f for f in SCALAR_FILTERS if f not in {t for t, _ in TERM_FILTERS}]
    return {
        "type": "inventory.capabilities",
        "filters": filters,
        "sort_fields": SORT_FIELDS,
        "facets": [f for f, _ in TERM_FACETS] + [f for f, _ in RANGE_FACETS],
        "vehicle_types": ["car", "motorcycle"],
        "statuses": list(LISTED),
        "conditions": ["new", "used", "cpo"],
        "pagination": {"default_limit": DEFAULT_LIMIT, "max_limit": MAX_LIMIT, "cursor": False},
    }


def tool_catalog(schemas: SchemaSet) -> list[dict[str, Any]]:
    """The MCP tools (wire form, camelCase keys) in canonical skill order."""
    tools = []
    for s in SKILLS["skills"]:
        if s["read"]:
            annotations = {"title": s["title"], "readOnlyHint": True, "openWorldHint": True}
        else:
            annotations = {
                "title": s["title"],
                "readOnlyHint": False,
                "destructiveHint": False,
                "idempotentHint": False,
                "openWorldHint": True,
            }
        aap: dict[str, Any] = {
            "version": AAP_RELEASE,
            "skill": s["id"],
            "request_type": f"{s['id']}.request",
            "response_type": f"{s['id']}.response",
            "request_schema": f"{SCHEMA_BASE_URL}{s['stem']}-request.schema.json",
            "response_schema": f"{SCHEMA_BASE_URL}{s['stem']}-response.schema.json",
            "error_schema": f"{SCHEMA_BASE_URL}error.schema.json",
        }
        if s["id"] == "inventory.search":
            aap["capabilities"] = capabilities()
        tools.append(
            {
                "name": s["tool"],
                "title": s["title"],
                "description": s["description"],
                "inputSchema": copy.deepcopy(schemas.docs[f"{s['stem']}-request"]),
                "outputSchema": schemas.output_schema(s),
                "annotations": annotations,
                "_meta": {AAP_META_KEY: aap},
            }
        )
    return tools


def _is_listed(v: dict[str, Any]) -> bool:
    return v.get("status") in LISTED


def _str_eq_any(value: Any, wanted: list[Any]) -> bool:
    if not isinstance(value, str):
        return False
    lv = value.lower()
    return any(isinstance(w, str) and w.lower() == lv for w in wanted)


def _searchable_text(v: dict[str, Any]) -> str:
    parts = []
    for k in SEARCH_TEXT_FIELDS:
        x = v.get(k)
        if isinstance(x, bool) or x is None:
            continue
        if isinstance(x, str | int | float):
            parts.append(str(x))
    for f in v.get("features") or []:
        if isinstance(f, str):
            parts.append(f)
    return " ".join(parts).lower()


def _matches(v: dict[str, Any], f: dict[str, Any] | None) -> bool:
    if not f:
        return True
    for key, field in TERM_FILTERS:
        wanted = f.get(key)
        if isinstance(wanted, list) and not _str_eq_any(v.get(field), wanted):
            return False
    vt = f.get("vehicle_type")
    if isinstance(vt, list) and not _str_eq_any(v.get("vehicle_type", "car"), vt):
        return False
    for key, field, is_min in [
        ("year_min", "year", True),
        ("year_max", "year", False),
        ("price_min", "price", True),
        ("price_max", "price", False),
        ("mileage_max", "mileage", False),
    ]:
        bound = f.get(key)
        if bound is None:
            continue
        x = v.get(field)
        if not isinstance(x, int | float) or isinstance(x, bool):
            return False  # vehicles without the field never match a bound on it
        if is_min and x < bound:
            return False
        if not is_min and x > bound:
            return False
    for key in ("vin", "stock"):
        want = f.get(key)
        if want is not None and v.get(key) != want:
            return False
    q = f.get("query")
    if isinstance(q, str) and q.strip():
        hay = _searchable_text(v)
        if not all(tok.lower() in hay for tok in q.split()):
            return False
    return True


def _sort_key_value(x: Any) -> Any:
    if isinstance(x, str):
        return (1, x.lower())
    if isinstance(x, bool):
        return (2, str(x))
    if isinstance(x, int | float):
        return (0, x)
    return (3, json.dumps(x, sort_keys=True))


def _sorted(vehicles: list[dict[str, Any]], sort: dict[str, Any] | None) -> list[dict[str, Any]]:
    field = (sort or {}).get("field", "stock")
    desc = (sort or {}).get("order") == "desc"
    # Stable multi-pass sort: tie-break by stock ascending, then by the field (missing last).
    out = sorted(vehicles, key=lambda v: _sort_key_value(v.get("stock")))
    present = [v for v in out if field in v and v[field] is not None]
    missing = [v for v in out if not (field in v and v[field] is not None)]
    # reverse=True keeps equal elements in their (stock) order: Python's sort is stable.
    present.sort(key=lambda v: _sort_key_value(v[field]), reverse=desc)
    return present + missing


class LeadLog:
    """Append-only JSONL lead log, indexed by idempotency_key (rebuilt on start)."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self.by_key: dict[str, dict[str, Any]] = {}
        self.count = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with path.open(encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue  # a torn last line is skipped, never fatal
                    self.count += 1
                    key = rec.get("idempotency_key")
                    if isinstance(key, str):
                        self.by_key[key] = rec

    def lookup(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            return self.by_key.get(key)

    def append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self.lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self.count += 1
            self.by_key[record["idempotency_key"]] = record


def _parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class Dealer:
    def __init__(
        self,
        leads_path: Path,
        data_dir: Path | None = None,
        schema_dir: Path | None = None,
        peer: str = "upstream",
    ):
        data_dir = data_dir or REPO / "data"
        schema_dir = schema_dir or REPO / "schemas"
        with (data_dir / "demo-dealer.json").open(encoding="utf-8") as f:
            self.dealer = json.load(f)
        with (data_dir / "demo-inventory.json").open(encoding="utf-8") as f:
            self.vehicles: list[dict[str, Any]] = json.load(f)
        self.schemas = SchemaSet.load(schema_dir)
        self.leads = LeadLog(leads_path)
        self.peer = peer

    # ----------------------------------------------------------------------------- helpers
    def dealer_name(self) -> str:
        return str(self.dealer.get("name") or "Dealer")

    def dealer_phone(self) -> str | None:
        for r in self.dealer.get("rooftops") or []:
            for p in r.get("phones") or []:
                if isinstance(p.get("value"), str):
                    return p["value"]
        return None

    def listed(self) -> list[dict[str, Any]]:
        return [v for v in self.vehicles if _is_listed(v)]

    def filtered(self, filters: dict[str, Any] | None) -> list[dict[str, Any]]:
        return [v for v in self.listed() if _matches(v, filters)]

    # ----------------------------------------------------------------------------- entry
    def execute(self, skill_id: str, request: Any, caller: str | None = None) -> dict[str, Any]:
        """Validate, execute and validate the answer. Returns a typed response or aap.error."""
        skill = SKILL_BY_ID.get(skill_id)
        if skill is None:
            return aap_error("UNSUPPORTED_SKILL", f"This dealer does not implement the skill {skill_id!r}.")
        expected_type = f"{skill_id}.request"
        if isinstance(request, dict) and request.get("type") != expected_type:
            return aap_error(
                "SCHEMA_VALIDATION_FAILED",
                f"The payload type does not match the skill {skill_id}.",
                {"errors": [field_error("/type", "const", f"must be {expected_type}", f"send type {expected_type!r} for {skill['tool']}")]},
            )
        errors = self.schemas.errors(f"{skill['stem']}-request", request)
        if errors:
            return aap_error(
                "SCHEMA_VALIDATION_FAILED",
                f"The {skill_id} request failed validation with {len(errors)} error(s).",
                {"errors": errors},
            )
        try:
            if skill_id == "dealer.information":
                result = {"type": "dealer.information.response", "data": copy.deepcopy(self.dealer)}
            elif skill_id == "inventory.facets":
                result = self.facets(request)
            elif skill_id == "inventory.search":
                result = self.search(request)
            elif skill_id == "inventory.vehicle":
                result = self.vehicle(request)
            else:
                result = self.lead(request, caller)
        except Exception:  # pragma: no cover - defensive
            log.exception("skill %s failed", skill_id)
            return aap_error("INTERNAL_ERROR", "The dealer system failed to process the request.")
        stem = "error" if is_error(result) else f"{skill['stem']}-response"
        out_errors = self.schemas.errors(stem, result)
        if out_errors:
            log.error("answer for %s fails %s.schema.json: %s", skill_id, stem, out_errors)
            return aap_error("INTERNAL_ERROR", "The dealer system produced an invalid answer.")
        return result

    # ----------------------------------------------------------------------------- skills
    def search(self, req: dict[str, Any]) -> dict[str, Any]:
        pagination = req.get("pagination") or {}
        if "cursor" in pagination:
            return aap_error(
                "INVALID_CURSOR",
                "This dealer does not issue pagination cursors; use pagination.skip and pagination.limit.",
                {"errors": [field_error("/pagination/cursor", "cursor", "cursors are not supported by this dealer", "drop pagination.cursor and page with pagination.skip")]},
            )
        found = _sorted(self.filtered(req.get("filters")), req.get("sort"))
        skip = int(pagination.get("skip", 0))
        limit = max(1, min(int(pagination.get("limit", DEFAULT_LIMIT)), MAX_LIMIT))
        page = [copy.deepcopy(v) for v in found[skip : skip + limit]]
        return {
            "type": "inventory.search.response",
            "data": {"total": len(found), "vehicles": page, "skip": skip, "limit": limit},
        }

    def facets(self, req: dict[str, Any]) -> dict[str, Any]:
        found = self.filtered(req.get("filters"))
        data: dict[str, Any] = {}
        for facet, field in TERM_FACETS:
            counts: dict[str, list[Any]] = {}
            for v in found:
                value = v.get(field)
                if field == "vehicle_type" and value is None:
                    value = "car"
                if isinstance(value, bool) or not isinstance(value, str | int):
                    continue
                key = json.dumps(value)
                counts.setdefault(key, [value, 0])[1] += 1
            items = sorted(counts.values(), key=lambda vc: (-vc[1], json.dumps(vc[0])))
            data[facet] = [{"value": value, "count": count} for value, count in items]
        for facet, field in RANGE_FACETS:
            nums = [v[field] for v in found if isinstance(v.get(field), int) and not isinstance(v.get(field), bool)]
            if nums:
                data[facet] = {"min": min(nums), "max": max(nums)}
        return {"type": "inventory.facets.response", "data": data}

    def vehicle(self, req: dict[str, Any]) -> dict[str, Any]:
        ids = [(k, req[k]) for k in ("vin", "stock", "vehicle_id") if isinstance(req.get(k), str)]
        first = ids[0][0] if ids else "vin"
        found = next((v for v in self.vehicles if ids and all(v.get(k) == want for k, want in ids)), None)
        if found is None:
            return aap_error(
                "VEHICLE_NOT_FOUND",
                "No vehicle in this dealer's inventory matches the identifiers sent.",
                {"errors": [field_error(f"/{first}", "inventory", "no listing matches", "search inventory with aap_inventory_search and use a vin, stock or vehicle_id it returns")]},
            )
        if not _is_listed(found):
            return aap_error(
                "VEHICLE_UNAVAILABLE",
                "This vehicle is no longer available.",
                {"errors": [field_error(f"/{first}", "status", "the vehicle has left inventory", "search for similar vehicles with aap_inventory_search")]},
            )
        return {"type": "inventory.vehicle.response", "data": copy.deepcopy(found)}

    def lead(self, req: dict[str, Any], caller: str | None) -> dict[str, Any]:
        key = req["idempotency_key"]
        fingerprint = hashlib.sha256(canonical_json(req).encode("utf-8")).hexdigest()
        previous = self.leads.lookup(key)
        if previous is not None:
            if previous.get("fingerprint") != fingerprint:
                return aap_error(
                    "IDEMPOTENCY_CONFLICT",
                    "This idempotency_key was already used for a different lead.",
                    {"errors": [field_error("/idempotency_key", "idempotency", "key reused with a different payload", "use a new idempotency_key for a new lead; reuse a key only to retry the identical request")]},
                )
            return copy.deepcopy(previous["response"])

        consent = req["consent"]
        now = datetime.now(timezone.utc)
        expires = _parse_ts(consent.get("expires_at"))
        if expires is not None and expires <= now:
            return aap_error(
                "INVALID_CONSENT",
                "The contact consent has expired; no lead was recorded.",
                {"errors": [field_error("/consent/expires_at", "consent", "consent expired", "ask the buyer for consent again and send a fresh ConsentGrant")]},
            )
        granted = _parse_ts(consent.get("granted_at"))
        if granted is not None and granted > now + timedelta(minutes=5):
            return aap_error(
                "INVALID_CONSENT",
                "The consent grant time lies in the future; no lead was recorded.",
                {"errors": [field_error("/consent/granted_at", "consent", "granted_at is in the future", "send the time the buyer actually granted consent")]},
            )
        preferred = req["customer"].get("preferred_contact")
        allowed = consent.get("allowed_channels") or []
        if preferred in ("email", "phone", "sms") and preferred not in allowed:
            return aap_error(
                "CONTACT_CONSENT_REQUIRED",
                "The preferred contact channel is not covered by the buyer's consent; no lead was recorded.",
                {"errors": [field_error("/customer/preferred_contact", "consent", "channel not in consent.allowed_channels", "choose a granted channel or obtain consent for this one")]},
            )
        voi = req.get("vehicle_of_interest")
        if isinstance(voi, dict):
            unit = None
            for k in ("vin", "stock", "vehicle_id"):
                if isinstance(voi.get(k), str):
                    unit = next((v for v in self.vehicles if v.get(k) == voi[k]), None)
                    if unit is not None:
                        break
            if unit is not None and not _is_listed(unit):
                return aap_error(
                    "VEHICLE_UNAVAILABLE",
                    "The vehicle of interest is no longer available; no lead was recorded.",
                    {"errors": [field_error("/vehicle_of_interest", "status", "the vehicle has left inventory", "choose an available vehicle from aap_inventory_search, or omit vehicle_of_interest")]},
                )

        lead_id = f"lead_{uuid.uuid4().hex}"
        data: dict[str, Any] = {"lead_id": lead_id, "status": "received"}
        if req.get("appointment") is not None:
            data["appointment"] = {"appointment_id": f"appt_{uuid.uuid4().hex}", "status": "requested"}
        dealer: dict[str, Any] = {"name": self.dealer_name()}
        if (phone := self.dealer_phone()) is not None:
            dealer["phone"] = phone
        data["dealer"] = dealer
        response = {
            "type": "lead.submit.response",
            "data": data,
            "message": f"{self.dealer_name()} received this inquiry. A sales advisor will follow up only through the channels the buyer allowed.",
        }
        self.leads.append(
            {
                "lead_id": lead_id,
                "received_at": now_rfc3339(),
                "peer": self.peer,
                "caller": caller,
                "idempotency_key": key,
                "fingerprint": fingerprint,
                "request": req,
                "response": response,
            }
        )
        return response
