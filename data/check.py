#!/usr/bin/env python3
"""Check the invariants of the embedded demo data (stdlib only, Python 3.11+).

Usage: python3 data/check.py [data-dir]   (exit 0 = all invariants hold)
"""
import json, re, sys
from collections import Counter
from datetime import date
from pathlib import Path

DIR = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
VIN_RE = re.compile(r"^[A-HJ-NPR-Z0-9]{17}$")
TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
HHMM_RE = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
PHONE_RE = re.compile(r"^\+1\d{3}555\d{4}$")          # E.164, fictional 555 numbers only
EMAIL_RE = re.compile(r"^[a-z0-9.]+@([a-z0-9-]+\.)*example\.com$")
GOV_RE = re.compile(r"\b(tax|dmv|registration|license|licence|title|government|smog cert)", re.I)
STATUSES = {"available", "intransit", "pending", "sold"}
LISTABLE = {"available", "intransit", "pending"}
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
TR = {**{c: i + 1 for i, c in enumerate("ABCDEFGH")}, **dict(zip("JKLMN", [1, 2, 3, 4, 5])), "P": 7, "R": 9,
      **dict(zip("STUVWXYZ", [2, 3, 4, 5, 6, 7, 8, 9])), **{str(d): d for d in range(10)}}
WEIGHTS = [8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2]

errors: list[str] = []


def check(cond: bool, msg: str) -> None:
    if not cond:
        errors.append(msg)


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_fees(fees, where: str) -> int:
    check(isinstance(fees, list), f"{where}: fees must be an array")
    total = 0
    for f in fees if isinstance(fees, list) else []:
        name, amount = f.get("name"), f.get("amount")
        check(set(f) == {"name", "amount"}, f"{where}: fee has keys other than name/amount: {f}")
        check(isinstance(name, str) and 1 <= len(name) <= 120 and name.strip() != "", f"{where}: bad fee name {name!r}")
        check(is_int(amount) and amount >= 0, f"{where}: bad fee amount {amount!r}")
        check(not (isinstance(name, str) and GOV_RE.search(name)), f"{where}: fee looks like a government charge: {name!r}")
        total += amount if is_int(amount) else 0
    return total


def vin_check_digit_ok(vin: str) -> bool:
    total = sum(TR[c] * w for c, w in zip(vin, WEIGHTS))
    r = total % 11
    return vin[8] == ("X" if r == 10 else str(r))


# ---------------------------------------------------------------- dealer
dealer = json.loads((DIR / "demo-dealer.json").read_text())
check(dealer.get("name") == "Demo Toyota", "dealer: name must be 'Demo Toyota'")
check(set(dealer) <= {"name", "welcome_message", "rooftops"}, "dealer: unexpected top-level keys")
rooftops = dealer.get("rooftops", [])
check(2 <= len(rooftops) <= 3, "dealer: expected two or three rooftops")
roof_names = [r.get("name") for r in rooftops]
check(len(set(roof_names)) == len(roof_names), "dealer: rooftop names must be unique")
for r in rooftops:
    w = f"rooftop {r.get('name')!r}"
    for k in ("name", "legal_name", "website", "geo", "emails", "phones", "address", "schedules",
              "timezone", "notes", "capabilities", "fees"):
        check(k in r, f"{w}: missing {k}")
    check(str(r.get("website", "")).startswith("https://"), f"{w}: website must be https")
    g = r.get("geo", {})
    check(-90 <= g.get("latitude", 999) <= 90 and -180 <= g.get("longitude", 999) <= 180, f"{w}: bad geo")
    for p in r.get("phones", []):
        check(bool(PHONE_RE.match(p.get("value", ""))), f"{w}: phone not a fictional E.164 555 number: {p}")
    for e in r.get("emails", []):
        check(bool(EMAIL_RE.match(e.get("value", ""))), f"{w}: email not under example.com: {e}")
    a = r.get("address", {})
    check(a.get("country") == "US" and a.get("state") == "CA", f"{w}: address must be CA, US")
    for s in r.get("schedules", []):
        hours = s.get("value", {})
        check(set(hours) == set(DAYS), f"{w}: schedule {s.get('name')} must list all seven days")
        for d, h in hours.items():
            if h is not None:
                check(HHMM_RE.match(h.get("open", "")) and HHMM_RE.match(h.get("close", ""))
                      and h["open"] < h["close"], f"{w}: bad hours {d}: {h}")
    check(r.get("timezone") == "America/Los_Angeles", f"{w}: timezone")
    check_fees(r.get("fees", []), w)

# ---------------------------------------------------------------- inventory
inv = json.loads((DIR / "demo-inventory.json").read_text())
check(isinstance(inv, list), "inventory: must be a JSON array")
check(len(inv) >= 72, f"inventory: {len(inv)} vehicles, need >= 72")

seen = {"vin": Counter(), "stock": Counter(), "vehicle_id": Counter()}
for v in inv:
    w = f"vehicle {v.get('vehicle_id') or v.get('stock') or v.get('vin')}"
    for k in seen:
        if k in v:
            seen[k][v[k]] += 1
    check(is_int(v.get("year")) and 2016 <= v["year"] <= 2026, f"{w}: year out of 2016-2026")
    for k in ("stock", "vehicle_id", "year", "make", "model", "trim", "condition", "status", "rooftop",
              "list_price", "mileage", "body", "transmission", "driveline", "engine", "fuel", "exterior_color",
              "interior_color", "features", "photos", "vdp_url", "inventory_date", "updated_at", "vehicle_type"):
        check(k in v, f"{w}: missing {k}")
    if "vin" in v:
        check(bool(VIN_RE.match(v["vin"])), f"{w}: VIN {v['vin']!r} fails ^[A-HJ-NPR-Z0-9]{{17}}$")
        check(VIN_RE.match(v["vin"]) is not None and vin_check_digit_ok(v["vin"]), f"{w}: VIN check digit wrong")
    else:
        check(v.get("status") == "intransit" and bool(v.get("notes")), f"{w}: VIN-less units must be intransit with notes")
    check(v.get("condition") in {"new", "used", "cpo"}, f"{w}: bad condition")
    check(v.get("status") in STATUSES, f"{w}: bad status {v.get('status')!r}")
    check(v.get("rooftop") in roof_names, f"{w}: rooftop {v.get('rooftop')!r} not in demo-dealer.json")
    check(v.get("vehicle_type") in {"car", "motorcycle"}, f"{w}: bad vehicle_type")
    for k in ("msrp", "list_price", "price", "mileage", "city_mpg", "highway_mpg"):
        if k in v:
            check(is_int(v[k]) and v[k] >= 0, f"{w}: {k} must be a non-negative integer")
    if "price" in v:
        check("fees" in v, f"{w}: priced vehicle must carry fees")
        total = check_fees(v.get("fees", []), w)
        check(is_int(v["price"]) and total <= v["price"], f"{w}: fees sum {total} exceeds price {v['price']}")
    elif "fees" in v:
        check_fees(v["fees"], w)
    if v.get("condition") == "new":
        check(v.get("mileage", 0) < 50, f"{w}: new vehicle with mileage >= 50")
    if v.get("fuel") == "bev":
        check("city_mpg" not in v and "highway_mpg" not in v, f"{w}: bev must not carry mpg")
        check("electric_range_mi" in v, f"{w}: bev needs electric_range_mi")
    elif v.get("vehicle_type") == "car":
        check("city_mpg" in v and "highway_mpg" in v, f"{w}: combustion/hybrid car needs mpg")
    if v.get("fuel") == "phev":
        check("electric_range_mi" in v, f"{w}: phev needs electric_range_mi")
    check(isinstance(v.get("features"), list) and 3 <= len(v["features"]) <= 6, f"{w}: need 3-6 features")
    ph = v.get("photos", [])
    check(1 <= len(ph) <= 3 and all(p.startswith("https://cdn.demo-toyota.example/") for p in ph), f"{w}: bad photos")
    check(v.get("vdp_url") == f"https://www.demo-toyota.example/inventory/{v.get('stock')}", f"{w}: bad vdp_url")
    ua, idt = v.get("updated_at", ""), v.get("inventory_date", "")
    check(bool(TS_RE.match(ua)) and ua.startswith("2026-11-"), f"{w}: updated_at {ua!r} not RFC 3339 Z in 2026-11")
    check(bool(DATE_RE.match(idt)), f"{w}: inventory_date {idt!r} not YYYY-MM-DD")
    if TS_RE.match(ua) and DATE_RE.match(idt):
        check(date.fromisoformat(idt) <= date.fromisoformat(ua[:10]), f"{w}: inventory_date after updated_at")

for k, c in seen.items():
    dups = [x for x, n in c.items() if n > 1]
    check(not dups, f"inventory: duplicate {k}: {dups}")
check(len(seen["stock"]) == len(inv) and len(seen["vehicle_id"]) == len(inv), "inventory: every vehicle needs stock and vehicle_id")

by_make = Counter(v.get("make") for v in inv)
by_status = Counter(v.get("status") for v in inv)
by_cond = Counter(v.get("condition") for v in inv)
check(len(by_make) >= 4, "inventory: need >= 4 makes")
check(by_make.most_common(1)[0][0] == "Toyota" and by_make["Toyota"] * 2 > len(inv), "inventory: Toyota must be the majority")
check(by_status["sold"] >= 6, f"inventory: {by_status['sold']} sold units, need >= 6")
check(sum(1 for v in inv if "vin" not in v and v.get("status") == "intransit") >= 2, "inventory: need >= 2 VIN-less intransit units")
check(sum(1 for v in inv if "price" not in v and "list_price" in v and v.get("condition") == "used") >= 2,
      "inventory: need >= 2 used units with list_price and no price")
check(sum(1 for v in inv if v.get("vehicle_type") == "motorcycle") >= 1, "inventory: need a motorcycle")
for field, want in (("condition", {"new", "used", "cpo"}),
                    ("fuel", {"gas", "hybrid", "phev", "bev", "diesel"}),
                    ("driveline", {"fwd", "rwd", "awd", "4wd"}),
                    ("body", {"sedan", "suv", "truck", "hatchback", "minivan", "coupe", "wagon"})):
    have = {v.get(field) for v in inv}
    check(want <= have, f"inventory: {field} values missing: {sorted(want - have)}")

if errors:
    print(f"FAIL: {len(errors)} problem(s)")
    for e in errors:
        print("  -", e)
    sys.exit(1)

listable = [v for v in inv if v["status"] in LISTABLE]
fmt = lambda c: ", ".join(f"{k}={n}" for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
print(f"OK: {len(inv)} vehicles ({len(listable)} listable, {by_status['sold']} sold), {len(rooftops)} rooftops")
print("  by make:      ", fmt(by_make))
print("  by status:    ", fmt(by_status))
print("  by condition: ", fmt(by_cond))
print("  by rooftop:   ", fmt(Counter(v["rooftop"] for v in inv)))
print("  by fuel:      ", fmt(Counter(v["fuel"] for v in inv)))
print("  by body:      ", fmt(Counter(v["body"] for v in inv)))
print("  no VIN:", sum("vin" not in v for v in inv), " no price:", sum("price" not in v for v in inv),
      " motorcycles:", sum(v["vehicle_type"] == "motorcycle" for v in inv))
