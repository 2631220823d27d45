//! Inventory feeds, parsed without I/O: a dealer's CSV, XML or JSON export becomes AAP vehicles
//! checked against the listing schema, with a report of rows loaded, rejected and deduplicated.
//!
//! The caller (the gateway's feed sources) reads the bytes and decides when to call
//! [`parse`]; [`judge`] says whether the result may replace the inventory being served.
//!
//! Rules (docs/configuration.md, "Inventory feeds"):
//! - Only mapped AAP fields are taken from a row; every other column stays behind.
//! - A row is rejected when a value cannot be converted (a price that is not a number) or when
//!   the vehicle would fail `inventory-vehicle-response.schema.json` as a listing. The reason
//!   names the row, the row's stock number or VIN, and the field, never the value.
//! - Duplicates: **the first row wins**. A later row sharing a VIN, a stock number or a
//!   vehicle_id with an earlier loaded row is skipped and reported as a duplicate.
//! - Defaults: `status` absent means `available`; `updated_at` absent means the load time;
//!   a row with a `price` and no `fees` gets `fees: []` (the dealer states the price includes
//!   every mandatory fee, as AAP requires).
//! - A status outside `available`/`intransit`/`pending` (for example `sold`) is loaded as an
//!   out-of-stock vehicle: never listed, and a lookup answers `VEHICLE_UNAVAILABLE`.

mod csv;
mod xml;

use crate::aap::schemas::SchemaSet;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Statuses that may appear in inventory results; anything else is out of stock.
pub const LISTED: [&str; 3] = ["available", "intransit", "pending"];

/// The document format of a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A header row, then one vehicle per row.
    Csv,
    /// `<listings>` holding one `<listing>` element per vehicle.
    Xml,
    /// A JSON array of AAP vehicle objects (the format of `inventory = "…json"`).
    Json,
}

/// How a feed's columns (CSV) or elements (XML) become AAP vehicle fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mapping {
    /// AAP field → the column or element that holds it. A field not named
    /// here is read from a column or element of its own name, when present.
    pub columns: BTreeMap<String, String>,
    /// Separator of the items of a list field (`photos`, `features`, `fees`)
    /// held in one cell. Never the CSV delimiter.
    pub list_separator: String,
    /// Per AAP field, source value → AAP value (keys compared case-insensitively).
    pub values: BTreeMap<String, BTreeMap<String, String>>,
    /// CSV field delimiter (one ASCII character).
    pub delimiter: u8,
    /// XML: the element holding one vehicle.
    pub listing_element: String,
    /// The feed's character encoding; anything but UTF-8 is transcoded to
    /// UTF-8 before parsing (a UTF-8 byte order mark still wins).
    pub encoding: &'static encoding_rs::Encoding,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            columns: BTreeMap::new(),
            list_separator: "|".into(),
            values: BTreeMap::new(),
            delimiter: b',',
            listing_element: "listing".into(),
            encoding: encoding_rs::UTF_8,
        }
    }
}

/// How a field's text becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Trimmed text.
    Text,
    /// Upper-cased text without spaces (VIN).
    Vin,
    /// Lower-cased text (closed vocabularies: condition, status, vehicle_type).
    Word,
    /// A whole number; `$`, `USD`, thousands separators and units are dropped; decimals round.
    Int,
    /// A number.
    Number,
    /// yes/no, true/false, y/n, 1/0.
    Bool,
    /// Items split on `list_separator`.
    List,
    /// `name:amount` items split on `list_separator` (DealerFee list).
    Fees,
}

/// Every AAP vehicle field a feed may fill, with its conversion.
pub const FIELDS: &[&str] = &[
    "vin",
    "stock",
    "vehicle_id",
    "dealer_id",
    "year",
    "make",
    "model",
    "trim",
    "vehicle_type",
    "condition",
    "status",
    "rooftop",
    "msrp",
    "price",
    "list_price",
    "fees",
    "mileage",
    "body",
    "transmission",
    "driveline",
    "engine",
    "fuel",
    "city_mpg",
    "highway_mpg",
    "electric_range_mi",
    "battery_kwh",
    "motor_power_hp",
    "displacement_cc",
    "dc_fast_charge",
    "charge_port",
    "exterior_color",
    "interior_color",
    "features",
    "photos",
    "vdp_url",
    "description",
    "notes",
    "inventory_date",
    "updated_at",
];

fn kind_of(field: &str) -> Kind {
    match field {
        "vin" => Kind::Vin,
        "vehicle_type" | "condition" | "status" => Kind::Word,
        "year" | "msrp" | "price" | "list_price" | "mileage" | "city_mpg" | "highway_mpg"
        | "motor_power_hp" | "displacement_cc" => Kind::Int,
        "electric_range_mi" | "battery_kwh" => Kind::Number,
        "dc_fast_charge" => Kind::Bool,
        "features" | "photos" => Kind::List,
        "fees" => Kind::Fees,
        _ => Kind::Text,
    }
}

/// One field as the source holds it: a cell's text, or (XML) the texts of
/// child elements.
#[derive(Debug, Clone)]
enum Raw {
    Text(String),
    Items(Vec<String>),
}

/// A source row: one slot per entry of [`FIELDS`].
type Row = Vec<Option<Raw>>;

/// A row skipped because one of its fields is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// 1-based: the first vehicle of the feed is row 1 (CSV: the first line after the header).
    pub row: usize,
    /// `stock <n>` or `vin <v>` when the row has one (identifiers, never other values).
    pub id: Option<String>,
    /// The AAP field at fault.
    pub field: String,
    /// What is wrong, without the value.
    pub problem: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(
                f,
                "row {} ({id}): {}: {}",
                self.row, self.field, self.problem
            ),
            None => write!(f, "row {}: {}: {}", self.row, self.field, self.problem),
        }
    }
}

/// A row skipped because an earlier row already holds its VIN, stock or vehicle_id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub row: usize,
    /// The row that was kept (the first one).
    pub kept_row: usize,
    /// `vin`, `stock` or `vehicle_id`.
    pub key: &'static str,
    pub id: String,
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "row {}: duplicate {} {} (row {} kept)",
            self.row, self.key, self.id, self.kept_row
        )
    }
}

/// What one parse found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Vehicle rows in the feed (loaded + rejected + duplicates).
    pub rows: usize,
    pub loaded: usize,
    pub rejected: Vec<Rejected>,
    pub duplicates: Vec<Duplicate>,
}

/// The vehicles of a feed and its report.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    pub vehicles: Vec<Value>,
    pub report: Report,
}

/// The feed as a whole could not be read: nothing of it may be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedError {
    #[error("not a {format} feed: {problem}")]
    Syntax {
        format: &'static str,
        problem: String,
    },
    #[error("the mapping does not fit the feed: {0}")]
    Mapping(String),
}

/// When a parsed feed may replace the inventory being served.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// Refuse a feed whose rejected rows exceed this share of its rows (0..=1).
    pub max_reject_share: f64,
    /// Refuse a feed that loads fewer vehicles than the inventory it would
    /// replace by more than this share (0..=1; 1 disables the check).
    pub max_drop_share: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_reject_share: 0.2,
            max_drop_share: 0.2,
        }
    }
}

/// Why a parsed feed is not served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("{rejected} of {rows} rows rejected, more than the allowed share {max}")]
    TooManyRejected {
        rejected: usize,
        rows: usize,
        max: f64,
    },
    #[error("{loaded} vehicles where {previous} were served: a drop of more than the allowed share {max}")]
    TooLarge {
        previous: usize,
        loaded: usize,
        max: f64,
    },
    #[error("the feed has rows but none could be loaded")]
    NothingLoaded,
}

impl Refusal {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::TooManyRejected { .. } => "rejected_share",
            Refusal::TooLarge { .. } => "row_drop",
            Refusal::NothingLoaded => "nothing_loaded",
        }
    }
}

/// Whether `report` may replace an inventory of `previous` vehicles (`None`: nothing served yet).
pub fn judge(report: &Report, previous: Option<usize>, policy: &Policy) -> Result<(), Refusal> {
    if report.rows > 0 && report.loaded == 0 {
        return Err(Refusal::NothingLoaded);
    }
    let rejected = report.rejected.len();
    if report.rows > 0 && rejected as f64 > policy.max_reject_share * report.rows as f64 {
        return Err(Refusal::TooManyRejected {
            rejected,
            rows: report.rows,
            max: policy.max_reject_share,
        });
    }
    if let Some(prev) = previous {
        if (report.loaded as f64) < prev as f64 * (1.0 - policy.max_drop_share) {
            return Err(Refusal::TooLarge {
                previous: prev,
                loaded: report.loaded,
                max: policy.max_drop_share,
            });
        }
    }
    Ok(())
}

/// Parse a feed. `now` (RFC 3339) is the `updated_at` of rows that carry none.
pub fn parse(
    format: Format,
    mapping: &Mapping,
    bytes: &[u8],
    schemas: &SchemaSet,
    now: &str,
) -> Result<Parsed, FeedError> {
    let mut b = Builder::new(mapping, schemas, now);
    // A Windows DMS export in Windows-1252 (`Citro\xebn`) becomes UTF-8 text
    // first; every single-byte encoding decodes every byte, so nothing fails
    // here. UTF-8 feeds are read as they are (no copy).
    let transcoded;
    let bytes = if mapping.encoding == encoding_rs::UTF_8 {
        bytes
    } else {
        let (text, _, _) = mapping.encoding.decode(bytes);
        transcoded = text.into_owned().into_bytes();
        transcoded.as_slice()
    };
    match format {
        Format::Csv => csv::read(bytes, mapping, &mut b)?,
        Format::Xml => xml::read(bytes, mapping, &mut b)?,
        Format::Json => read_json(bytes, &mut b)?,
    }
    Ok(b.finish())
}

/// A JSON array of vehicle objects: no mapping, the same checks.
fn read_json(bytes: &[u8], b: &mut Builder<'_>) -> Result<(), FeedError> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| FeedError::Syntax {
        format: "JSON",
        problem: e.to_string(),
    })?;
    let Value::Array(items) = doc else {
        return Err(FeedError::Syntax {
            format: "JSON",
            problem: "expected an array of vehicle objects".into(),
        });
    };
    for item in items {
        let row = b.next_row();
        match item {
            Value::Object(mut m) => {
                if !m.contains_key("status") {
                    m.insert("status".into(), Value::from("available"));
                }
                b.accept(row, m)
            }
            _ => b.reject(row, None, "(row)", "not a JSON object"),
        }
    }
    Ok(())
}

/// Collects vehicles: converts, validates and deduplicates each row.
struct Builder<'a> {
    mapping: &'a Mapping,
    schemas: &'a SchemaSet,
    now: &'a str,
    out: Parsed,
    /// (key, id) → the row that holds it.
    seen: HashMap<(&'static str, String), usize>,
}

impl<'a> Builder<'a> {
    fn new(mapping: &'a Mapping, schemas: &'a SchemaSet, now: &'a str) -> Self {
        Builder {
            mapping,
            schemas,
            now,
            out: Parsed::default(),
            seen: HashMap::new(),
        }
    }

    /// Count a row; returns its 1-based number.
    fn next_row(&mut self) -> usize {
        self.out.report.rows += 1;
        self.out.report.rows
    }

    fn reject(&mut self, row: usize, id: Option<String>, field: &str, problem: &str) {
        self.out.report.rejected.push(Rejected {
            row,
            id,
            field: field.to_owned(),
            problem: problem.to_owned(),
        });
    }

    /// The AAP field a source column or element feeds, if any.
    fn source_names(&self) -> Vec<(usize, String)> {
        FIELDS
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name = self
                    .mapping
                    .columns
                    .get(*f)
                    .cloned()
                    .unwrap_or_else(|| (*f).to_owned());
                (i, name)
            })
            .collect()
    }

    /// Convert a mapped row and hand it on.
    fn row(&mut self, row_no: usize, row: Row) {
        let mut m = Map::new();
        let id = row_id_raw(&row);
        for (i, raw) in row.into_iter().enumerate() {
            let Some(raw) = raw else { continue };
            let field = FIELDS[i];
            match convert(field, raw, self.mapping) {
                Ok(Some(v)) => {
                    m.insert(field.to_owned(), v);
                }
                Ok(None) => {}
                Err(problem) => return self.reject(row_no, id, field, problem),
            }
        }
        if !m.contains_key("status") {
            m.insert("status".into(), Value::from("available"));
        }
        self.accept(row_no, m)
    }

    /// Defaults, schema check, duplicate check.
    fn accept(&mut self, row: usize, mut m: Map<String, Value>) {
        let id = row_id(&m);
        if !["vin", "stock", "vehicle_id"].iter().any(|k| {
            m.get(*k)
                .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        }) {
            return self.reject(
                row,
                id,
                "vin",
                "no vin, stock or vehicle_id identifies the vehicle",
            );
        }
        if !m.contains_key("updated_at") {
            m.insert("updated_at".into(), Value::from(self.now));
        }
        if m.contains_key("price") && !m.contains_key("fees") {
            m.insert("fees".into(), Value::Array(Vec::new()));
        }
        // Out-of-stock rows are checked as listings too (with a listed
        // status), so every other field is held to the same rules.
        let status = m.get("status").cloned();
        let unlisted = match status.as_ref().and_then(Value::as_str) {
            Some(s) => !LISTED.contains(&s),
            None => true,
        };
        if unlisted {
            if status
                .as_ref()
                .is_none_or(|s| s.as_str().is_none_or(str::is_empty))
            {
                return self.reject(row, id, "status", "must be a non-empty string");
            }
            m.insert("status".into(), Value::from("available"));
        }
        let mut doc = Value::Object(Map::from_iter([
            ("type".to_owned(), Value::from("inventory.vehicle.response")),
            ("data".to_owned(), Value::Object(m)),
        ]));
        if let Err(errors) = self
            .schemas
            .validate_stem("inventory-vehicle-response", &doc)
        {
            let (field, problem) = first_problem(&errors);
            return self.reject(row, id, &field, &problem);
        }
        let Some(Value::Object(mut m)) = doc.get_mut("data").map(Value::take) else {
            return self.reject(row, id, "(row)", "not an object");
        };
        if unlisted {
            if let Some(s) = status {
                m.insert("status".into(), s);
            }
        }
        for key in ["vin", "stock", "vehicle_id"] {
            if let Some(v) = m.get(key).and_then(Value::as_str) {
                if let Some(&kept_row) = self.seen.get(&(key, v.to_owned())) {
                    self.out.report.duplicates.push(Duplicate {
                        row,
                        kept_row,
                        key,
                        id: v.to_owned(),
                    });
                    return;
                }
            }
        }
        for key in ["vin", "stock", "vehicle_id"] {
            if let Some(v) = m.get(key).and_then(Value::as_str) {
                self.seen.insert((key, v.to_owned()), row);
            }
        }
        self.out.report.loaded += 1;
        self.out.vehicles.push(Value::Object(m));
    }

    fn finish(self) -> Parsed {
        self.out
    }
}

/// `stock <n>` or `vin <v>` of a converted row.
fn row_id(m: &Map<String, Value>) -> Option<String> {
    for key in ["stock", "vin", "vehicle_id"] {
        if let Some(v) = m.get(key).and_then(Value::as_str) {
            if !v.is_empty() {
                return Some(format!("{key} {}", clip(v)));
            }
        }
    }
    None
}

/// The same from the source texts (a row rejected before conversion).
fn row_id_raw(row: &Row) -> Option<String> {
    for key in ["stock", "vin", "vehicle_id"] {
        let i = FIELDS.iter().position(|f| *f == key)?;
        if let Some(Raw::Text(t)) = &row[i] {
            let t = t.trim();
            if !t.is_empty() {
                return Some(format!("{key} {}", clip(t)));
            }
        }
    }
    None
}

/// An identifier as shown in a reason: at most 64 characters, no control characters.
fn clip(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The field and problem of the first schema violation (`/data/<field>/…`).
fn first_problem(errors: &[Value]) -> (String, String) {
    let Some(e) = errors.first() else {
        return ("(row)".into(), "fails the listing schema".into());
    };
    let path = e.get("path").and_then(Value::as_str).unwrap_or("");
    let field = path
        .strip_prefix("/data/")
        .and_then(|p| p.split('/').next())
        .filter(|f| !f.is_empty())
        .unwrap_or("(row)")
        .to_owned();
    let problem = e
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("fails the listing schema")
        .to_owned();
    (field, problem)
}

/// One source value → its JSON form; `Ok(None)` for an empty value.
fn convert(field: &str, raw: Raw, mapping: &Mapping) -> Result<Option<Value>, &'static str> {
    let map = mapping.values.get(field);
    let mapped = |t: &str| -> String {
        let t = t.trim();
        map.and_then(|m| {
            m.iter()
                .find(|(k, _)| k.trim().eq_ignore_ascii_case(t))
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(|| t.to_owned())
    };
    let items = |raw: Raw| -> Vec<String> {
        match raw {
            Raw::Items(v) => v
                .iter()
                .map(|t| mapped(t))
                .filter(|t| !t.is_empty())
                .collect(),
            Raw::Text(t) => t
                .split(mapping.list_separator.as_str())
                .map(mapped)
                .filter(|t| !t.is_empty())
                .collect(),
        }
    };
    let kind = kind_of(field);
    if matches!(kind, Kind::List) {
        let v = items(raw);
        return Ok((!v.is_empty()).then(|| Value::from(v)));
    }
    if matches!(kind, Kind::Fees) {
        let mut fees = Vec::new();
        for item in items(raw) {
            let (name, amount) = item
                .rsplit_once(':')
                .ok_or("each fee must be written name:amount")?;
            let amount = whole_number(amount).ok_or("a fee amount is not a whole number")?;
            fees.push(serde_json::json!({"name": name.trim(), "amount": amount}));
        }
        return Ok(Some(Value::Array(fees)));
    }
    let text = match raw {
        Raw::Text(t) => mapped(&t),
        Raw::Items(v) => mapped(&v.join(" ")),
    };
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(match kind {
        Kind::Text => Value::from(text),
        Kind::Vin => Value::from(text.replace(' ', "").to_ascii_uppercase()),
        Kind::Word => Value::from(text.to_lowercase()),
        Kind::Int => Value::from(whole_number(&text).ok_or("not a whole number")?),
        Kind::Number => {
            let n = number(&text).ok_or("not a number")?;
            serde_json::Number::from_f64(n)
                .map(Value::Number)
                .ok_or("not a number")?
        }
        Kind::Bool => match text.to_ascii_lowercase().as_str() {
            "yes" | "y" | "true" | "1" => Value::Bool(true),
            "no" | "n" | "false" | "0" => Value::Bool(false),
            _ => return Err("not yes/no, true/false or 1/0"),
        },
        Kind::List | Kind::Fees => return Err("not a list"),
    }))
}

/// A number as dealers write it: `$18,995`, `18995.00`, `USD 18 995`,
/// `29,840 mi`. Currency marks, thousands separators (`,`, `_`, spaces) and a
/// trailing unit word are dropped. Hand-written: no crate parses this mix, and
/// the rules must stay this narrow (a `,` is never a decimal mark).
fn number(text: &str) -> Option<f64> {
    let mut s = text.trim();
    for prefix in ["USD", "US$", "$"] {
        if let Some(rest) = s.strip_prefix(prefix) {
            s = rest.trim_start();
        }
    }
    for suffix in ["USD", "miles", "mi", "mpg", "kwh", "kWh", "hp", "cc"] {
        if let Some(rest) = s.strip_suffix(suffix) {
            s = rest.trim_end();
            break;
        }
    }
    let cleaned: String = s
        .chars()
        .filter(|c| !matches!(c, ',' | '_' | ' ' | '\u{a0}'))
        .collect();
    if cleaned.is_empty()
        || !cleaned
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
    {
        return None;
    }
    let n: f64 = cleaned.parse().ok()?;
    n.is_finite().then_some(n)
}

/// [`number`], rounded to a whole number (prices are whole dollars; `18995.50` → 18996).
fn whole_number(text: &str) -> Option<i64> {
    let n = number(text)?;
    if n.abs() > 1e15 {
        return None;
    }
    Some(n.round() as i64)
}

#[cfg(test)]
mod tests;
