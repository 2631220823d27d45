//! The embedded demo dealer: inventory, facets, vehicle detail and durable
//! lead intake from local files, so the gateway is useful out of the box.

use crate::aap::cursor::{CursorCodec, CursorError, CursorState};
use crate::aap::error::{aap_error, ErrorCode};
use crate::aap::payload::Payload;
use crate::aap::skill::Skill;
use crate::backend::{Backend, BackendError, SkillCall};
use crate::clock::{now_rfc3339, now_unix_ms};
use crate::state::{LeadRecorded, SharedState};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// Statuses that may appear in inventory results; anything else is out of stock.
const LISTED: [&str; 3] = ["available", "intransit", "pending"];

/// String-array filters matched case-insensitively against a vehicle field.
const TERM_FILTERS: [(&str, &str); 12] = [
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

const SCALAR_FILTERS: [&str; 9] = [
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
const TERM_FACETS: [(&str, &str); 14] = [
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

const SORT_FIELDS: [&str; 9] = [
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

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub inventory: PathBuf,
    pub dealer: PathBuf,
    pub leads_file: PathBuf,
    /// `state.dir`: the leads file is opened only once this process holds
    /// its lock (see `state::lock`).
    pub state_dir: PathBuf,
    /// Shared state (Redis): leads are recorded there, atomically with the
    /// completion of their idempotency claim; the leads file is a local copy.
    pub shared: Option<Arc<dyn SharedState>>,
    /// The tenant's lead outbox (`[[tenants.backend.sinks]]` configured):
    /// each accepted lead's line names the sinks it is owed to, and the
    /// outbox delivers it once the line is durable.
    pub outbox: Option<Arc<crate::leads::outbox::TenantOutbox>>,
    pub default_limit: usize,
    pub max_limit: usize,
    pub cursor: CursorCodec,
}

#[derive(Debug)]
pub struct EmbeddedDealer {
    dealer: Value,
    vehicles: Vec<Value>,
    default_limit: usize,
    max_limit: usize,
    cursor: CursorCodec,
    leads: Arc<LeadLog>,
    shared: Option<Arc<dyn SharedState>>,
    outbox: Option<Arc<crate::leads::outbox::TenantOutbox>>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
}

fn load_json(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::File {
        path: path.display().to_string(),
        problem: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| LoadError::File {
        path: path.display().to_string(),
        problem: format!("invalid JSON: {e}"),
    })
}

impl EmbeddedDealer {
    pub fn load(cfg: EmbeddedConfig) -> Result<EmbeddedDealer, LoadError> {
        let dealer = load_json(&cfg.dealer)?;
        if !dealer.is_object() {
            return Err(LoadError::File {
                path: cfg.dealer.display().to_string(),
                problem: "expected the dealer information object".into(),
            });
        }
        let vehicles = match load_json(&cfg.inventory)? {
            Value::Array(v) => v,
            _ => {
                return Err(LoadError::File {
                    path: cfg.inventory.display().to_string(),
                    problem: "expected a JSON array of vehicles".into(),
                })
            }
        };
        let mut seen = std::collections::HashSet::new();
        for (i, v) in vehicles.iter().enumerate() {
            for key in ["vin", "stock", "vehicle_id"] {
                if let Some(id) = v.get(key).and_then(Value::as_str) {
                    if !seen.insert((key, id.to_owned())) {
                        return Err(LoadError::File {
                            path: cfg.inventory.display().to_string(),
                            problem: format!("vehicle [{i}]: duplicate {key}"),
                        });
                    }
                }
            }
        }
        let leads =
            LeadLog::new(&cfg.leads_file, &cfg.state_dir).map_err(|problem| LoadError::File {
                path: cfg.leads_file.display().to_string(),
                problem,
            })?;
        Ok(EmbeddedDealer {
            dealer,
            vehicles,
            default_limit: cfg.default_limit,
            max_limit: cfg.max_limit,
            cursor: cfg.cursor,
            leads: Arc::new(leads),
            shared: cfg.shared,
            outbox: cfg.outbox,
        })
    }

    fn dealer_name(&self) -> &str {
        self.dealer
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("Dealer")
    }

    fn dealer_phone(&self) -> Option<&str> {
        self.dealer
            .pointer("/rooftops/0/phones/0/value")
            .and_then(Value::as_str)
    }

    fn listed(&self) -> impl Iterator<Item = &Value> {
        self.vehicles.iter().filter(|v| is_listed(v))
    }

    fn filtered<'a>(&'a self, filters: Option<&'a Map<String, Value>>) -> Vec<&'a Value> {
        self.listed().filter(|v| matches(v, filters)).collect()
    }

    fn search(&self, req: &Value) -> Value {
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
            Some(token) => match self.cursor.decode(token, query_hash, now_unix_ms()) {
                Ok(st) => (st.offset, requested_limit.unwrap_or(st.limit)),
                Err(CursorError::Expired) => {
                    return aap_error(
                        ErrorCode::CursorExpired,
                        "The pagination cursor has expired. Repeat the search without a cursor to start again.",
                        Some(json!({"errors": [crate::aap::error::field_error(
                            "/pagination/cursor", "cursor", "cursor expired",
                            &format!("drop pagination.cursor and repeat the search; cursors live {} seconds", self.cursor.ttl_ms() / 1000))]})),
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
                requested_limit.unwrap_or(self.default_limit),
            ),
        };
        let limit = limit.clamp(1, self.max_limit);
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
        if offset + limit < total {
            let st = CursorState {
                offset: offset + limit,
                limit,
                query_hash,
                issued_ms: now_unix_ms(),
            };
            data.insert("next_cursor".into(), json!(self.cursor.encode(&st)));
        }
        json!({"type": Skill::InventorySearch.response_type(), "data": data})
    }

    fn facets(&self, req: &Value) -> Value {
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

    fn vehicle(&self, req: &Value) -> Value {
        let ids: Vec<(&str, &str)> = ["vin", "stock", "vehicle_id"]
            .into_iter()
            .filter_map(|k| req.get(k).and_then(Value::as_str).map(|v| (k, v)))
            .collect();
        let found = self.vehicles.iter().find(|v| {
            !ids.is_empty()
                && ids
                    .iter()
                    .all(|(k, id)| v.get(*k).and_then(Value::as_str) == Some(*id))
        });
        match found {
            None => aap_error(
                ErrorCode::VehicleNotFound,
                "No vehicle in this dealer's inventory matches the identifiers sent.",
                Some(json!({"errors": [crate::aap::error::field_error(
                    &format!("/{}", ids.first().map(|(k, _)| *k).unwrap_or("vin")), "inventory",
                    "no listing matches", "search inventory with aap_inventory_search and use a vin, stock or vehicle_id it returns")]})),
            ),
            Some(v) if !is_listed(v) => aap_error(
                ErrorCode::VehicleUnavailable,
                "This vehicle is no longer available.",
                Some(json!({"errors": [crate::aap::error::field_error(
                    &format!("/{}", ids.first().map(|(k, _)| *k).unwrap_or("vin")), "status",
                    "the vehicle has left inventory", "search for similar vehicles with aap_inventory_search")]})),
            ),
            Some(v) => {
                json!({"type": Skill::InventoryVehicle.response_type(), "data": v})
            }
        }
    }

    async fn lead(&self, call: &SkillCall<'_>) -> Result<Value, BackendError> {
        // The leads file belongs to the process holding the state lock; an
        // upgraded process waits (bounded) for the old one to let go.
        let log = match self.leads.file().await {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(tenant = call.tenant, correlation_id = %call.forward.correlation_id, error = %e, "leads file unavailable; lead refused");
                return Ok(aap_error(
                    ErrorCode::InternalError,
                    "The lead could not be recorded safely; nothing was sent. Retry with the same idempotency_key.",
                    None,
                ));
            }
        };
        if self.shared.is_none() {
            if let Some(previous) = call.idempotency_ref.and_then(|r| log.response_for(r)) {
                return Ok(previous);
            }
        }
        // A lead about a unit that has left stock cannot be honoured.
        let mut listing = None;
        if let Some(voi) = call.request.value().get("vehicle_of_interest") {
            let unit = ["vin", "stock", "vehicle_id"].into_iter().find_map(|k| {
                let id = voi.get(k).and_then(Value::as_str)?;
                self.vehicles
                    .iter()
                    .find(|v| v.get(k).and_then(Value::as_str) == Some(id))
            });
            listing = unit.cloned();
            if let Some(unit) = unit {
                if !is_listed(unit) {
                    return Ok(aap_error(
                        ErrorCode::VehicleUnavailable,
                        "The vehicle of interest is no longer available; no lead was recorded.",
                        Some(json!({"errors": [crate::aap::error::field_error(
                            "/vehicle_of_interest", "status", "the vehicle has left inventory",
                            "choose an available vehicle from aap_inventory_search, or omit vehicle_of_interest")]})),
                    ));
                }
            }
        }
        let lead_id = format!("lead_{}", uuid::Uuid::now_v7().simple());
        let mut data = Map::new();
        data.insert("lead_id".into(), json!(lead_id));
        data.insert("status".into(), json!("received"));
        if call.request.value().get("appointment").is_some() {
            data.insert(
                "appointment".into(),
                json!({"appointment_id": format!("appt_{}", uuid::Uuid::now_v7().simple()), "status": "requested"}),
            );
        }
        let mut dealer = Map::new();
        dealer.insert("name".into(), json!(self.dealer_name()));
        if let Some(p) = self.dealer_phone() {
            dealer.insert("phone".into(), json!(p));
        }
        data.insert("dealer".into(), Value::Object(dealer));
        let response = json!({
            "type": Skill::LeadSubmit.response_type(),
            "data": data,
            "message": format!("{} received this inquiry. A sales advisor will follow up only through the channels the buyer allowed.", self.dealer_name()),
        });
        let mut record = json!({
            "lead_id": lead_id,
            "tenant": call.tenant,
            "received_at": now_rfc3339(),
            "idempotency_ref": call.idempotency_ref,
            "request": call.request.value(),
            "response": response,
        });
        // With sinks: the line is the outbox's enqueue (see `leads::outbox`).
        let sinks = self
            .outbox
            .as_ref()
            .map(|o| o.sink_names())
            .unwrap_or_default();
        if !sinks.is_empty() {
            record["dealer"] = self.dealer.clone();
            record["vehicle"] = listing.unwrap_or(Value::Null);
            record["sinks"] = json!(sinks);
        }
        if let Some(state) = &self.shared {
            return self
                .record_shared(state.as_ref(), log, call, record, response, &sinks)
                .await;
        }
        let r = call.idempotency_ref.map(str::to_owned);
        let stored = response.clone();
        let line = record.clone();
        tokio::task::spawn_blocking(move || log.append(&line, r, stored))
            .await
            .map_err(|e| BackendError::Unavailable(format!("lead writer stopped: {e}")))?
            .map_err(BackendError::Unavailable)?;
        self.enqueue(record, &sinks);
        Ok(response)
    }

    /// The lead's line is durable: hand it to the outbox (when it has sinks).
    fn enqueue(&self, record: Value, sinks: &[String]) {
        let Some(outbox) = &self.outbox else { return };
        if sinks.is_empty() {
            return;
        }
        match serde_json::from_value::<crate::leads::Lead>(record) {
            Ok(lead) => outbox.enqueued(lead, sinks),
            // Unreachable: the record is built above with every field.
            Err(e) => tracing::error!(error = %e, "lead record does not make a Lead"),
        }
    }

    /// Shared state: the lead is recorded in the store in the same step that
    /// completes its claim, so an instance that dies before that step leaves
    /// nothing recorded (a retry records it once), and one that dies after
    /// leaves a result every instance replays. The leads file gets a copy.
    async fn record_shared(
        &self,
        state: &dyn SharedState,
        log: Arc<LeadFile>,
        call: &SkillCall<'_>,
        record: Value,
        response: Value,
        sinks: &[String],
    ) -> Result<Value, BackendError> {
        let (Some(r), Some(claim)) = (call.idempotency_ref, call.claim) else {
            return Err(BackendError::Unavailable(
                "a lead on shared state needs its idempotency claim".into(),
            ));
        };
        match state
            .record_lead(call.tenant, r, claim, &record, &response)
            .await
        {
            Ok(LeadRecorded::Recorded) => {
                let line = record.clone();
                let copy =
                    tokio::task::spawn_blocking(move || log.append(&line, None, Value::Null))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r);
                match copy {
                    Ok(()) => self.enqueue(record, sinks),
                    Err(e) => {
                        tracing::error!(tenant = call.tenant, correlation_id = %call.forward.correlation_id, error = %e, undelivered = !sinks.is_empty(), "lead recorded in shared state; local leads file copy failed (with sinks: the lead is not in this instance's outbox)");
                    }
                }
                Ok(response)
            }
            Ok(LeadRecorded::Replay(previous)) => Ok(previous),
            Ok(LeadRecorded::Lost) => Ok(crate::aap::error::in_flight_error()),
            Err(e) => Err(BackendError::Unavailable(e.to_string())),
        }
    }
}

impl EmbeddedDealer {
    async fn answer(&self, call: SkillCall<'_>) -> Result<Value, BackendError> {
        Ok(match call.skill {
            Skill::DealerInformation => json!({
                "type": Skill::DealerInformation.response_type(),
                "data": self.dealer,
            }),
            Skill::InventoryFacets => self.facets(call.request.value()),
            Skill::InventorySearch => self.search(call.request.value()),
            Skill::InventoryVehicle => self.vehicle(call.request.value()),
            Skill::LeadSubmit => return self.lead(&call).await,
        })
    }
}

#[async_trait]
impl Backend for EmbeddedDealer {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    async fn call(&self, call: SkillCall<'_>) -> Result<Payload, BackendError> {
        self.answer(call).await.map(Payload::Tree)
    }

    fn capabilities(&self) -> Value {
        let mut filters: Vec<&str> = TERM_FILTERS.iter().map(|(f, _)| *f).collect();
        for f in SCALAR_FILTERS {
            if !filters.contains(&f) {
                filters.push(f);
            }
        }
        json!({
            "type": "inventory.capabilities",
            "filters": filters,
            "sort_fields": SORT_FIELDS,
            "facets": TERM_FACETS.iter().map(|(f, _)| *f).chain(["price_range", "mileage_range", "year_range"]).collect::<Vec<_>>(),
            "vehicle_types": ["car", "motorcycle"],
            "statuses": LISTED,
            "conditions": ["new", "used", "cpo"],
            "pagination": {
                "default_limit": self.default_limit,
                "max_limit": self.max_limit,
                "cursor": true,
                "cursor_ttl_ms": self.cursor.ttl_ms(),
            }
        })
    }

    fn dedupes_leads(&self) -> bool {
        true
    }
}

fn is_listed(v: &Value) -> bool {
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

fn matches(v: &Value, filters: Option<&Map<String, Value>>) -> bool {
    let Some(f) = filters else { return true };
    for (filter, field) in TERM_FILTERS {
        if let Some(Value::Array(wanted)) = f.get(filter) {
            if !str_eq_any(v.get(field), wanted) {
                return false;
            }
        }
    }
    if let Some(Value::Array(wanted)) = f.get("vehicle_type") {
        let vt = v.get("vehicle_type").cloned().unwrap_or(json!("car"));
        if !str_eq_any(Some(&vt), wanted) {
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
        let hay = searchable_text(v);
        if !q
            .split_whitespace()
            .map(str::to_lowercase)
            .all(|token| hay.contains(&token))
        {
            return false;
        }
    }
    true
}

fn searchable_text(v: &Value) -> String {
    let mut s = String::new();
    for k in [
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
    ] {
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
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(_), None) => std::cmp::Ordering::Less,
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

fn compare_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap_or(0.0)
            .partial_cmp(&y.as_f64().unwrap_or(0.0))
            .unwrap_or(std::cmp::Ordering::Equal),
        (Value::String(x), Value::String(y)) => x.to_lowercase().cmp(&y.to_lowercase()),
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

/// Append-only, fsync'd lead log, indexed by idempotency reference; opened
/// on first use, once this process holds the state lock.
#[derive(Debug)]
struct LeadLog {
    path: PathBuf,
    state_dir: PathBuf,
    file: OnceCell<Arc<LeadFile>>,
}

#[derive(Debug)]
struct LeadFile {
    file: Mutex<File>,
    by_ref: Mutex<HashMap<String, Value>>,
}

impl LeadLog {
    /// Nothing is opened or created here (offline commands load the dealer).
    fn new(path: &Path, state_dir: &Path) -> Result<LeadLog, String> {
        if path.is_dir() {
            return Err("is a directory".into());
        }
        Ok(LeadLog {
            path: path.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            file: OnceCell::new(),
        })
    }

    async fn file(&self) -> Result<Arc<LeadFile>, String> {
        self.file
            .get_or_try_init(|| async {
                crate::state::lock::ready(&self.state_dir, crate::state::lock::UPGRADE_WAIT)
                    .await?;
                let path = self.path.clone();
                tokio::task::spawn_blocking(move || LeadFile::open(&path).map(Arc::new))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{}: {e}", self.path.display()))
            })
            .await
            .cloned()
    }
}

impl LeadFile {
    fn open(path: &Path) -> Result<LeadFile, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create directory: {e}"))?;
        }
        let mut by_ref = HashMap::new();
        if path.exists() {
            let f = File::open(path).map_err(|e| e.to_string())?;
            for line in BufReader::new(f).lines() {
                let line = line.map_err(|e| e.to_string())?;
                if line.trim().is_empty() {
                    continue;
                }
                // A torn last line (crash mid-write) is skipped, never fatal.
                let Ok(rec) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if let (Some(r), Some(resp)) = (
                    rec.get("idempotency_ref").and_then(Value::as_str),
                    rec.get("response"),
                ) {
                    by_ref.insert(r.to_owned(), resp.clone());
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open for append: {e}"))?;
        Ok(LeadFile {
            file: Mutex::new(file),
            by_ref: Mutex::new(by_ref),
        })
    }

    fn response_for(&self, r: &str) -> Option<Value> {
        self.by_ref
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(r)
            .cloned()
    }

    fn append(&self, record: &Value, r: Option<String>, response: Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(record).map_err(|e| e.to_string())?;
        line.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        f.write_all(&line)
            .map_err(|e| format!("lead log write failed: {e}"))?;
        f.sync_data()
            .map_err(|e| format!("lead log fsync failed: {e}"))?;
        drop(f);
        if let Some(r) = r {
            self.by_ref
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(r, response);
        }
        Ok(())
    }
}
