//! The dealer's inventory as served: one immutable [`Inventory`] (vehicles plus what search needs,
//! computed once per load) answering facets, search and vehicle detail; `source` keeps it fresh.
//!
//! An inventory never changes once built: a new feed builds a new one and the source swaps it
//! in whole (`arc_swap`), so a request sees one inventory from start to end.

pub mod source;

use crate::aap::cursor::{CursorCodec, CursorError, CursorState};
use crate::aap::error::{aap_error, ErrorCode};
use crate::aap::skill::Skill;
use crate::clock::now_unix_ms;
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

pub use crate::feed::LISTED;

/// String-array filters matched case-insensitively against a vehicle field.
pub const TERM_FILTERS: [(&str, &str); 12] = [
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
];

pub const SCALAR_FILTERS: [&str; 9] = [
    "year_min",
    "year_max",
    "price_min",
    "price_max",
    "mileage_max",
    "vin",
    "stock",
    "query",
    "vehicle_type",
];

/// Term facets: (facet name, vehicle field).
pub const TERM_FACETS: [(&str, &str); 14] = [
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
];

pub const SORT_FIELDS: [&str; 9] = [
    "price",
    "list_price",
    "msrp",
    "mileage",
    "year",
    "make",
    "model",
    "stock",
    "updated_at",
];

/// The fields free-text `query` looks in.
const SEARCHABLE: [&str; 14] = [
    "year",
    "make",
    "model",
    "trim",
    "body",
    "fuel",
    "driveline",
    "transmission",
    "engine",
    "exterior_color",
    "interior_color",
    "condition",
    "description",
    "vehicle_type",
];

/// How search pages: the tenant's limits and cursor key.
#[derive(Debug)]
pub struct Paging<'a> {
    pub default_limit: usize,
    pub max_limit: usize,
    pub cursor: &'a CursorCodec,
}

/// Vehicles and their precomputed search text, immutable once built.
#[derive(Debug, Default)]
pub struct Inventory {
    vehicles: Vec<Value>,
    /// Lower-cased searchable text of each vehicle (same index).
    text: Vec<String>,
    /// Indices of the vehicles that may be listed, in feed order.
    listed: Vec<usize>,
    /// (`vin` | `stock` | `vehicle_id`, id) → index.
    by_id: HashMap<(&'static str, String), usize>,
    /// For each of [`SORT_FIELDS`], the listed vehicles in ascending and in descending order
    /// (a search walks one instead of sorting: a sort of 50,000 listings took ~100 ms).
    orders: Vec<SortOrders>,
    /// For each of [`TERM_FACETS`], its distinct values and each vehicle's value id, so facet
    /// counts are array increments (counting `Value`s took ~1 s at 50,000 listings).
    facet_ids: Vec<FacetIds>,
    /// For each of [`TERM_FILTERS`] (then `vehicle_type`, `car` when absent), the distinct
    /// string values and each vehicle's value id: a term filter is decided once per distinct
    /// value, then checked per vehicle as one table lookup.
    term_ids: Vec<FacetIds>,
    /// `year`, `price`, `mileage` of each vehicle (whole numbers only).
    nums: [Vec<Option<i64>>; 3],
}

/// The numeric fields bounds and range facets read, in [`Inventory::nums`] order.
const NUM_FIELDS: [&str; 3] = ["year", "price", "mileage"];

/// A vehicle's value of one sort field, prepared once so the per-load sorts compare keys
/// instead of walking `Value`s (`Other`: compared as `compare_values` does, from the `Value`).
#[derive(Debug)]
enum SortKey {
    Missing,
    Num(f64),
    /// Lower-cased (the case-insensitive order of `compare_values`).
    Str(Box<str>),
    Other,
}

fn sort_key_of(v: Option<&Value>) -> SortKey {
    match v {
        None => SortKey::Missing,
        Some(Value::Number(n)) => SortKey::Num(n.as_f64().unwrap_or(0.0)),
        Some(Value::String(s)) => SortKey::Str(s.chars().flat_map(char::to_lowercase).collect()),
        Some(_) => SortKey::Other,
    }
}

/// The listed vehicles (indices) in one sort field's two orders.
#[derive(Debug, Default)]
struct SortOrders {
    asc: Vec<u32>,
    desc: Vec<u32>,
}

/// One term facet's distinct values, and per vehicle the id of its value (`NONE`: none).
#[derive(Debug, Default)]
struct FacetIds {
    values: Vec<Value>,
    /// The values' `to_string()` forms: the tie-break of equal counts.
    keys: Vec<String>,
    of_vehicle: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Inventory {
    /// Build from vehicles already checked (a feed's [`crate::feed::Parsed`]).
    pub fn new(vehicles: Vec<Value>) -> Inventory {
        let text = vehicles.iter().map(searchable_text).collect();
        let listed: Vec<usize> = (0..vehicles.len())
            .filter(|&i| is_listed(&vehicles[i]))
            .collect();
        let mut by_id = HashMap::with_capacity(vehicles.len() * 2);
        for (i, v) in vehicles.iter().enumerate() {
            for key in ["vin", "stock", "vehicle_id"] {
                if let Some(id) = v.get(key).and_then(Value::as_str) {
                    by_id.entry((key, id.to_owned())).or_insert(i);
                }
            }
        }
        let stock_keys = sort_keys(&vehicles, "stock");
        let orders = SORT_FIELDS
            .iter()
            .map(|field| {
                let keys = sort_keys(&vehicles, field);
                let order = |desc| sort_listed(&vehicles, &listed, &keys, &stock_keys, field, desc);
                SortOrders {
                    asc: order(false),
                    desc: order(true),
                }
            })
            .collect();
        let term_ids = TERM_FILTERS
            .iter()
            .map(|(_, field)| *field)
            .chain(["vehicle_type"])
            .map(|field| {
                let mut ids = FacetIds::default();
                let mut seen: HashMap<&str, u32> = HashMap::new();
                for v in &vehicles {
                    let value = match (field, v.get(field)) {
                        ("vehicle_type", None) => Some("car"),
                        (_, x) => x.and_then(Value::as_str),
                    };
                    let id = match value {
                        None => NONE,
                        Some(value) => *seen.entry(value).or_insert_with(|| {
                            ids.keys.push(value.to_owned());
                            (ids.keys.len() - 1) as u32
                        }),
                    };
                    ids.of_vehicle.push(id);
                }
                ids
            })
            .collect();
        let nums = NUM_FIELDS.map(|field| {
            vehicles
                .iter()
                .map(|v| v.get(field).and_then(Value::as_i64))
                .collect()
        });
        let facet_ids = TERM_FACETS
            .iter()
            .map(|(_, field)| {
                let mut ids = FacetIds::default();
                let mut seen: HashMap<String, u32> = HashMap::new();
                for v in &vehicles {
                    let id = match facet_value(v, field) {
                        None => NONE,
                        Some(value) => {
                            let key = value.to_string();
                            *seen.entry(key.clone()).or_insert_with(|| {
                                ids.values.push(value);
                                ids.keys.push(key);
                                (ids.values.len() - 1) as u32
                            })
                        }
                    };
                    ids.of_vehicle.push(id);
                }
                ids
            })
            .collect();
        Inventory {
            vehicles,
            text,
            listed,
            by_id,
            orders,
            facet_ids,
            term_ids,
            nums,
        }
    }

    /// Every vehicle (listed or not).
    pub fn len(&self) -> usize {
        self.vehicles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.vehicles.is_empty()
    }

    /// The vehicle whose `key` (`vin`, `stock`, `vehicle_id`) is `id`.
    pub fn find(&self, key: &str, id: &str) -> Option<&Value> {
        let key: &'static str = match key {
            "vin" => "vin",
            "stock" => "stock",
            "vehicle_id" => "vehicle_id",
            _ => return None,
        };
        self.by_id
            .get(&(key, id.to_owned()))
            .map(|&i| &self.vehicles[i])
    }

    fn filtered(&self, filters: Option<&Map<String, Value>>) -> Vec<usize> {
        let m = Matcher::new(self, filters);
        self.listed
            .iter()
            .copied()
            .filter(|&i| m.matches(i))
            .collect()
    }

    /// The listed vehicles in the order a search's `sort` asks for, or `None` for a field
    /// without a precomputed order (sorted per request then).
    fn sorted(&self, sort: Option<&Value>) -> Option<&[u32]> {
        let (field, desc) = sort_key(sort);
        let at = SORT_FIELDS.iter().position(|f| *f == field)?;
        let o = self.orders.get(at)?;
        Some(if desc { &o.desc } else { &o.asc })
    }

    /// `inventory.search`. A cursor carries an offset into the sorted
    /// results of its query: after the inventory was replaced it pages
    /// through the new inventory from that offset (a consistent page of the
    /// current data; vehicles that moved across the change may be skipped
    /// or repeated, and `total` is the current count).
    pub fn search(&self, req: &Value, paging: &Paging<'_>) -> Value {
        let filters = req.get("filters").and_then(Value::as_object);
        let sort = req.get("sort");

        let pagination = req.get("pagination");
        let requested_limit = pagination
            .and_then(|p| p.get("limit"))
            .and_then(Value::as_u64)
            .map(|l| l as usize);
        let query_hash = query_hash(filters, sort);
        let (offset, limit) = match pagination.and_then(|p| p.get("cursor")).and_then(Value::as_str) {
            Some(token) => match paging.cursor.decode(token, query_hash, now_unix_ms()) {
                Ok(st) => (st.offset, requested_limit.unwrap_or(st.limit)),
                Err(CursorError::Expired) => {
                    return aap_error(
                        ErrorCode::CursorExpired,
                        "The pagination cursor has expired. Repeat the search without a cursor to start again.",
                        Some(json!({"errors": [crate::aap::error::field_error(
                            "/pagination/cursor", "cursor", "cursor expired",
                            &format!("drop pagination.cursor and repeat the search; cursors live {} seconds", paging.cursor.ttl_ms() / 1000))]})),
                    )
                }
                Err(CursorError::Invalid) => {
                    return aap_error(
                        ErrorCode::InvalidCursor,
                        "The pagination cursor is not valid for this search.",
                        Some(json!({"errors": [crate::aap::error::field_error(
                            "/pagination/cursor", "cursor", "cursor not issued for these filters and sort",
                            "send next_cursor exactly as returned, with unchanged filters and sort")]})),
                    )
                }
            },
            None => (
                pagination
                    .and_then(|p| p.get("skip"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0) as usize,
                requested_limit.unwrap_or(paging.default_limit),
            ),
        };
        let limit = limit.clamp(1, paging.max_limit);
        // Walk the precomputed order, counting every match and keeping the page's.
        let mut total = 0usize;
        let mut page: Vec<Value> = Vec::with_capacity(limit.min(64));
        let mut take = |i: usize| {
            if total >= offset && page.len() < limit {
                page.push(self.vehicles[i].clone());
            }
            total += 1;
        };
        // A field without a precomputed order (not one of the schema's sort fields) is
        // ordered here, by the same rule.
        let order: std::borrow::Cow<'_, [u32]> = match self.sorted(sort) {
            Some(order) => order.into(),
            None => {
                let (field, desc) = sort_key(sort);
                let keys = sort_keys(&self.vehicles, field);
                let stock_keys = sort_keys(&self.vehicles, "stock");
                sort_listed(
                    &self.vehicles,
                    &self.listed,
                    &keys,
                    &stock_keys,
                    field,
                    desc,
                )
                .into()
            }
        };
        let m = Matcher::new(self, filters);
        for &i in order.iter() {
            let i = i as usize;
            if m.matches(i) {
                take(i);
            }
        }
        let mut data = Map::new();
        data.insert("total".into(), json!(total));
        data.insert("vehicles".into(), Value::Array(page));
        data.insert("skip".into(), json!(offset));
        data.insert("limit".into(), json!(limit));
        if offset.saturating_add(limit) < total {
            let st = CursorState {
                offset: offset + limit,
                limit,
                query_hash,
                issued_ms: now_unix_ms(),
            };
            data.insert("next_cursor".into(), json!(paging.cursor.encode(&st)));
        }
        json!({"type": Skill::InventorySearch.response_type(), "data": data})
    }

    /// `inventory.facets`.
    pub fn facets(&self, req: &Value) -> Value {
        let filters = req.get("filters").and_then(Value::as_object);
        let found = self.filtered(filters);
        let mut data = Map::new();
        for ((facet, _), ids) in TERM_FACETS.iter().zip(&self.facet_ids) {
            let mut counts = vec![0u64; ids.values.len()];
            for &i in &found {
                if let Some(c) = counts.get_mut(ids.of_vehicle[i] as usize) {
                    *c += 1;
                }
            }
            let mut list: Vec<(usize, u64)> = counts
                .into_iter()
                .enumerate()
                .filter(|(_, n)| *n > 0)
                .collect();
            list.sort_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| ids.keys[a.0].cmp(&ids.keys[b.0]))
            });
            let arr: Vec<Value> = list
                .into_iter()
                .map(|(id, count)| json!({"value": ids.values[id], "count": count}))
                .collect();
            data.insert((*facet).into(), Value::Array(arr));
        }
        for (facet, at) in [("price_range", 1), ("mileage_range", 2), ("year_range", 0)] {
            let nums: Vec<i64> = found.iter().filter_map(|&i| self.nums[at][i]).collect();
            if let (Some(min), Some(max)) = (nums.iter().min(), nums.iter().max()) {
                data.insert(facet.into(), json!({"min": min, "max": max}));
            }
        }
        json!({"type": Skill::InventoryFacets.response_type(), "data": data})
    }

    /// `inventory.vehicle`: the vehicle every given identifier names.
    pub fn vehicle(&self, req: &Value) -> Value {
        let ids: Vec<(&str, &str)> = ["vin", "stock", "vehicle_id"]
            .into_iter()
            .filter_map(|k| req.get(k).and_then(Value::as_str).map(|v| (k, v)))
            .collect();
        let found = ids
            .first()
            .and_then(|(k, id)| self.find(k, id))
            .filter(|v| {
                ids.iter()
                    .all(|(k, id)| v.get(*k).and_then(Value::as_str) == Some(*id))
            });
        let at = format!("/{}", ids.first().map(|(k, _)| *k).unwrap_or("vin"));
        match found {
            None => aap_error(
                ErrorCode::VehicleNotFound,
                "No vehicle in this dealer's inventory matches the identifiers sent.",
                Some(json!({"errors": [crate::aap::error::field_error(
                    &at, "inventory",
                    "no listing matches", "search inventory with aap_inventory_search and use a vin, stock or vehicle_id it returns")]})),
            ),
            Some(v) if !is_listed(v) => aap_error(
                ErrorCode::VehicleUnavailable,
                "This vehicle is no longer available.",
                Some(json!({"errors": [crate::aap::error::field_error(
                    &at, "status",
                    "the vehicle has left inventory", "search for similar vehicles with aap_inventory_search")]})),
            ),
            Some(v) => {
                json!({"type": Skill::InventoryVehicle.response_type(), "data": v})
            }
        }
    }
}

pub fn is_listed(v: &Value) -> bool {
    v.get("status")
        .and_then(Value::as_str)
        .is_some_and(|s| LISTED.contains(&s))
}

/// A search's filters, prepared once per request against one inventory: each term filter
/// becomes a table of the distinct values it admits, each bound a number, the query its
/// lower-cased tokens. Semantics: a term filter admits a vehicle whose field is a string equal
/// (ASCII case-insensitively) to one of the wanted strings; a bound rejects a vehicle without
/// the field; `vin` and `stock` match exactly; every query token must occur in the vehicle's text.
struct Matcher<'a> {
    inv: &'a Inventory,
    /// (index into `term_ids`, admitted value ids).
    terms: Vec<(usize, Vec<bool>)>,
    /// (index into `nums`, bound, is a minimum).
    bounds: Vec<(usize, i64, bool)>,
    ids: Vec<(&'static str, &'a str)>,
    query: Vec<String>,
}

impl<'a> Matcher<'a> {
    fn new(inv: &'a Inventory, filters: Option<&'a Map<String, Value>>) -> Matcher<'a> {
        let mut m = Matcher {
            inv,
            terms: Vec::new(),
            bounds: Vec::new(),
            ids: Vec::new(),
            query: Vec::new(),
        };
        let Some(f) = filters else { return m };
        let names = TERM_FILTERS
            .iter()
            .map(|(filter, _)| *filter)
            .chain(["vehicle_type"]);
        for (at, filter) in names.enumerate() {
            if let Some(Value::Array(wanted)) = f.get(filter) {
                let admitted = inv.term_ids[at]
                    .keys
                    .iter()
                    .map(|value| {
                        wanted
                            .iter()
                            .filter_map(Value::as_str)
                            .any(|w| w.eq_ignore_ascii_case(value))
                    })
                    .collect();
                m.terms.push((at, admitted));
            }
        }
        for (filter, at, is_min) in [
            ("year_min", 0, true),
            ("year_max", 0, false),
            ("price_min", 1, true),
            ("price_max", 1, false),
            ("mileage_max", 2, false),
        ] {
            if let Some(b) = f.get(filter).and_then(Value::as_i64) {
                m.bounds.push((at, b, is_min));
            }
        }
        for key in ["vin", "stock"] {
            if let Some(want) = f.get(key).and_then(Value::as_str) {
                m.ids.push((key, want));
            }
        }
        if let Some(q) = f.get("query").and_then(Value::as_str) {
            m.query = q.split_whitespace().map(str::to_lowercase).collect();
        }
        m
    }

    fn matches(&self, i: usize) -> bool {
        let inv = self.inv;
        self.terms.iter().all(|(at, admitted)| {
            admitted
                .get(inv.term_ids[*at].of_vehicle[i] as usize)
                .copied()
                .unwrap_or(false)
        }) && self
            .bounds
            .iter()
            .all(|&(at, b, is_min)| match inv.nums[at][i] {
                // Vehicles without the field never match a bound on it.
                None => false,
                Some(x) => {
                    if is_min {
                        x >= b
                    } else {
                        x <= b
                    }
                }
            })
            && self
                .ids
                .iter()
                .all(|(key, want)| inv.vehicles[i].get(*key).and_then(Value::as_str) == Some(*want))
            && self.query.iter().all(|t| inv.text[i].contains(t.as_str()))
    }
}

fn searchable_text(v: &Value) -> String {
    let mut s = String::new();
    for k in SEARCHABLE {
        match v.get(k) {
            Some(Value::String(x)) => s.push_str(x),
            Some(Value::Number(n)) => s.push_str(&n.to_string()),
            _ => continue,
        }
        s.push(' ');
    }
    if let Some(Value::Array(features)) = v.get("features") {
        for f in features.iter().filter_map(Value::as_str) {
            s.push_str(f);
            s.push(' ');
        }
    }
    s.to_lowercase()
}

/// The field and direction of a search's `sort` (default: stock, ascending).
fn sort_key(sort: Option<&Value>) -> (&str, bool) {
    let field = sort
        .and_then(|s| s.get("field"))
        .and_then(Value::as_str)
        .unwrap_or("stock");
    let desc = sort.and_then(|s| s.get("order")).and_then(Value::as_str) == Some("desc");
    (field, desc)
}

/// Every vehicle's [`SortKey`] for `field`.
fn sort_keys(vehicles: &[Value], field: &str) -> Vec<SortKey> {
    vehicles.iter().map(|v| sort_key_of(v.get(field))).collect()
}

/// The `listed` vehicles in search order: by `field` (`keys`; vehicles missing it last whatever
/// the direction), then by stock ascending (`stock_keys`); the sort is stable, so feed order
/// decides among the rest.
fn sort_listed(
    vehicles: &[Value],
    listed: &[usize],
    keys: &[SortKey],
    stock_keys: &[SortKey],
    field: &str,
    desc: bool,
) -> Vec<u32> {
    let mut list = listed.to_vec();
    list.sort_by(|&a, &b| {
        let (va, vb) = (&vehicles[a], &vehicles[b]);
        let primary = match (&keys[a], &keys[b]) {
            (SortKey::Missing, SortKey::Missing) => Ordering::Equal,
            (SortKey::Missing, _) => Ordering::Greater,
            (_, SortKey::Missing) => Ordering::Less,
            (x, y) => {
                let o = compare_keys(x, y, va.get(field), vb.get(field));
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        primary.then_with(|| {
            compare_keys(
                &stock_keys[a],
                &stock_keys[b],
                va.get("stock"),
                vb.get("stock"),
            )
        })
    });
    list.into_iter().map(|i| i as u32).collect()
}

/// A vehicle's value for a term facet (`vehicle_type` defaults to `car`); only strings and
/// whole numbers are counted.
fn facet_value(v: &Value, field: &str) -> Option<Value> {
    match (field, v.get(field)) {
        ("vehicle_type", None) => Some(json!("car")),
        (_, Some(x)) if x.is_string() || x.is_i64() || x.is_u64() => Some(x.clone()),
        _ => None,
    }
}

fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap_or(0.0)
            .partial_cmp(&y.as_f64().unwrap_or(0.0))
            .unwrap_or(Ordering::Equal),
        // Case-insensitive without allocating (this runs n·log n times per search).
        (Value::String(x), Value::String(y)) => x
            .chars()
            .flat_map(char::to_lowercase)
            .cmp(y.chars().flat_map(char::to_lowercase)),
        _ => a.to_string().cmp(&b.to_string()),
    }
}

/// [`compare_values`] on prepared keys; other combinations compare the `Value`s themselves.
fn compare_keys(a: &SortKey, b: &SortKey, va: Option<&Value>, vb: Option<&Value>) -> Ordering {
    match (a, b) {
        (SortKey::Num(x), SortKey::Num(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (SortKey::Str(x), SortKey::Str(y)) => x.cmp(y),
        _ => compare_values(va.unwrap_or(&Value::Null), vb.unwrap_or(&Value::Null)),
    }
}

/// A stable hash of the query a cursor belongs to.
fn query_hash(filters: Option<&Map<String, Value>>, sort: Option<&Value>) -> u64 {
    let canon = crate::digest::canonical_json(&json!({"f": filters, "s": sort}));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canon.hash(&mut h);
    // DefaultHasher is stable within one build; cursors also carry a MAC.
    h.finish()
}

#[cfg(test)]
mod tests {
    //! The precomputed orders, term tables and numeric columns must answer exactly as the
    //! straightforward per-request filter and sort they replaced (kept here as the reference).
    use super::*;

    fn str_eq_any(value: Option<&Value>, wanted: &[Value]) -> bool {
        let Some(value) = value.and_then(Value::as_str) else {
            return false;
        };
        wanted
            .iter()
            .filter_map(Value::as_str)
            .any(|w| w.eq_ignore_ascii_case(value))
    }
    fn reference_matches(v: &Value, text: &str, filters: Option<&Map<String, Value>>) -> bool {
        let Some(f) = filters else { return true };
        for (filter, field) in TERM_FILTERS {
            if let Some(Value::Array(wanted)) = f.get(filter) {
                if !str_eq_any(v.get(field), wanted) {
                    return false;
                }
            }
        }
        if let Some(Value::Array(wanted)) = f.get("vehicle_type") {
            let car = json!("car");
            let vt = v.get("vehicle_type").unwrap_or(&car);
            if !str_eq_any(Some(vt), wanted) {
                return false;
            }
        }
        let num = |k: &str| v.get(k).and_then(Value::as_i64);
        let bound = |k: &str| f.get(k).and_then(Value::as_i64);
        let checks: [(&str, &str, bool); 5] = [
            ("year_min", "year", true),
            ("year_max", "year", false),
            ("price_min", "price", true),
            ("price_max", "price", false),
            ("mileage_max", "mileage", false),
        ];
        for (filter, field, is_min) in checks {
            if let Some(b) = bound(filter) {
                match num(field) {
                    // Vehicles without the field never match a bound on it.
                    None => return false,
                    Some(x) if is_min && x < b => return false,
                    Some(x) if !is_min && x > b => return false,
                    _ => {}
                }
            }
        }
        for key in ["vin", "stock"] {
            if let Some(want) = f.get(key).and_then(Value::as_str) {
                if v.get(key).and_then(Value::as_str) != Some(want) {
                    return false;
                }
            }
        }
        if let Some(q) = f.get("query").and_then(Value::as_str) {
            if !q
                .split_whitespace()
                .map(str::to_lowercase)
                .all(|token| text.contains(&token))
            {
                return false;
            }
        }
        true
    }

    /// The reference search order, on `Value`s: by `field` (vehicles missing it last whatever the direction), then by stock
    /// ascending; a stable sort keeps feed order among the rest.
    fn order_by(a: &Value, b: &Value, field: &str, desc: bool) -> Ordering {
        let (x, y) = (a.get(field), b.get(field));
        let primary = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => {
                let o = compare_values(x, y);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        primary.then_with(|| {
            compare_values(
                a.get("stock").unwrap_or(&Value::Null),
                b.get("stock").unwrap_or(&Value::Null),
            )
        })
    }

    fn inventory() -> Inventory {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/demo-inventory.json"),
        )
        .expect("demo inventory");
        let mut vehicles: Vec<Value> = serde_json::from_str(&text).expect("json");
        // Mixed cases and gaps, so case-insensitive order, ties and missing fields are exercised.
        for (i, v) in vehicles.iter_mut().enumerate() {
            if i % 3 == 0 {
                if let Some(m) = v.get("make").and_then(Value::as_str).map(str::to_uppercase) {
                    v["make"] = json!(m);
                }
            }
            if i % 4 == 1 {
                if let Some(o) = v.as_object_mut() {
                    o.remove("mileage");
                    o.remove("trim");
                }
            }
            if i % 5 == 2 {
                v["price"] = json!(20_000);
            }
        }
        Inventory::new(vehicles)
    }

    #[test]
    fn search_and_facets_answer_as_the_reference_filter_and_sort() {
        let inv = inventory();
        assert!(inv.listed.len() > 10, "the demo data has listings");
        let codec = CursorCodec::new(b"test-cursor-key-0123456789abcdef", 900_000);
        let paging = Paging {
            default_limit: 20,
            max_limit: 1000,
            cursor: &codec,
        };
        let filters = [
            json!(null),
            json!({"make": ["toyota", "HONDA"]}),
            json!({"condition": ["used"], "price_max": 30000}),
            json!({"year_min": 2022, "mileage_max": 30000}),
            json!({"query": "awd"}),
            json!({"vehicle_type": ["car"], "trim": ["xle", "LE"]}),
            json!({"stock": "DT-1001"}),
        ];
        for f in &filters {
            let fm = f.as_object();
            let reference: Vec<usize> = inv
                .listed
                .iter()
                .copied()
                .filter(|&i| reference_matches(&inv.vehicles[i], &inv.text[i], fm))
                .collect();
            // "trim" has no precomputed order: the per-request path.
            for field in SORT_FIELDS.into_iter().chain(["trim"]) {
                for desc in [false, true] {
                    let mut want = reference.clone();
                    want.sort_by(|&a, &b| {
                        order_by(&inv.vehicles[a], &inv.vehicles[b], field, desc)
                    });
                    let want: Vec<&Value> = want.iter().map(|&i| &inv.vehicles[i]).collect();
                    let mut req = json!({"type": "inventory.search.request", "pagination": {"limit": 1000},
                        "sort": {"field": field, "order": if desc { "desc" } else { "asc" }}});
                    if !f.is_null() {
                        req["filters"] = f.clone();
                    }
                    let got = inv.search(&req, &paging);
                    let got: Vec<&Value> = got["data"]["vehicles"]
                        .as_array()
                        .map(|a| a.iter().collect())
                        .unwrap_or_default();
                    assert_eq!(got, want, "filters {f}, sort {field} desc={desc}");
                }
            }
            // Facets count exactly the reference's matches.
            let mut req = json!({"type": "inventory.facets.request"});
            if !f.is_null() {
                req["filters"] = f.clone();
            }
            let facets = inv.facets(&req);
            let makes: u64 = facets["data"]["makes"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e["count"].as_u64()).sum())
                .unwrap_or(0);
            let with_make = reference
                .iter()
                .filter(|&&i| inv.vehicles[i].get("make").is_some())
                .count() as u64;
            assert_eq!(makes, with_make, "filters {f}");
        }
    }
}
