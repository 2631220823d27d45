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
use std::collections::{BTreeMap, HashMap};
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
}

impl Inventory {
    /// Build from vehicles already checked (a feed's [`crate::feed::Parsed`]).
    pub fn new(vehicles: Vec<Value>) -> Inventory {
        let text = vehicles.iter().map(searchable_text).collect();
        let listed = (0..vehicles.len())
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
        Inventory {
            vehicles,
            text,
            listed,
            by_id,
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

    fn filtered<'a>(&'a self, filters: Option<&Map<String, Value>>) -> Vec<&'a Value> {
        self.listed
            .iter()
            .filter(|&&i| matches(&self.vehicles[i], &self.text[i], filters))
            .map(|&i| &self.vehicles[i])
            .collect()
    }

    /// `inventory.search`. A cursor carries an offset into the sorted
    /// results of its query: after the inventory was replaced it pages
    /// through the new inventory from that offset (a consistent page of the
    /// current data; vehicles that moved across the change may be skipped
    /// or repeated, and `total` is the current count).
    pub fn search(&self, req: &Value, paging: &Paging<'_>) -> Value {
        let filters = req.get("filters").and_then(Value::as_object);
        let sort = req.get("sort");
        let mut found = self.filtered(filters);
        sort_vehicles(&mut found, sort);

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
        let total = found.len();
        let page: Vec<Value> = found
            .iter()
            .skip(offset)
            .take(limit)
            .map(|v| (*v).clone())
            .collect();
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
        for (facet, field) in TERM_FACETS {
            let mut counts: BTreeMap<String, (Value, u64)> = BTreeMap::new();
            for v in &found {
                let value = match (field, v.get(field)) {
                    ("vehicle_type", None) => json!("car"),
                    (_, Some(x)) if x.is_string() || x.is_i64() || x.is_u64() => x.clone(),
                    _ => continue,
                };
                let key = value.to_string();
                counts.entry(key).or_insert((value, 0)).1 += 1;
            }
            let mut list: Vec<(Value, u64)> = counts.into_values().collect();
            list.sort_by(|a, b| {
                b.1.cmp(&a.1)
                    .then_with(|| a.0.to_string().cmp(&b.0.to_string()))
            });
            let arr: Vec<Value> = list
                .into_iter()
                .map(|(value, count)| json!({"value": value, "count": count}))
                .collect();
            data.insert(facet.into(), Value::Array(arr));
        }
        for (facet, field) in [
            ("price_range", "price"),
            ("mileage_range", "mileage"),
            ("year_range", "year"),
        ] {
            let nums: Vec<i64> = found
                .iter()
                .filter_map(|v| v.get(field).and_then(Value::as_i64))
                .collect();
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

fn str_eq_any(value: Option<&Value>, wanted: &[Value]) -> bool {
    let Some(value) = value.and_then(Value::as_str) else {
        return false;
    };
    wanted
        .iter()
        .filter_map(Value::as_str)
        .any(|w| w.eq_ignore_ascii_case(value))
}

fn matches(v: &Value, text: &str, filters: Option<&Map<String, Value>>) -> bool {
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

fn sort_vehicles(list: &mut [&Value], sort: Option<&Value>) {
    let field = sort
        .and_then(|s| s.get("field"))
        .and_then(Value::as_str)
        .unwrap_or("stock");
    let desc = sort.and_then(|s| s.get("order")).and_then(Value::as_str) == Some("desc");
    list.sort_by(|a, b| {
        let (x, y) = (a.get(field), b.get(field));
        // Vehicles missing the field sort last whatever the order.
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
    });
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

/// A stable hash of the query a cursor belongs to.
fn query_hash(filters: Option<&Map<String, Value>>, sort: Option<&Value>) -> u64 {
    let canon = crate::digest::canonical_json(&json!({"f": filters, "s": sort}));
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canon.hash(&mut h);
    // DefaultHasher is stable within one build; cursors also carry a MAC.
    h.finish()
}
