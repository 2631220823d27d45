//! The gateway's validation of a document (`SchemaSet::request_holds`, `result_holds`: `jsonschema`
//! through the `Doc` adapter, over the schemas with their object `allOf`s merged, the path every
//! call takes) against the schemas as written on the `serde_json::Value` (`validate_request`,
//! `validate_result`: the reference, and the path that reports the details), for every skill's
//! request and result (the error schema included).
//!
//! Byte 0, bit 0 picks the mode. Clear: the rest is a JSON text, read with `Doc::parse`, and
//! decided as every skill's request and result. Set: byte 1 picks a valid example (from
//! `tests/corpus/valid`) and the rest is a list of edits to it, three bytes each (what, where,
//! with what), so the fuzzer reaches deep into a schema instead of stopping at a missing `type`;
//! the edited example is decided as its own kind, as every result (an `aap.error` is a result
//! of any skill) and as one other. Both paths must give the same answer.
#![no_main]

use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::aap::skill::Skill;
use aap_gateway::json::Doc;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::LazyLock;

// `paths`, `at_path` and the values edits put in (shared with aap-core's schema tests).
#[path = "../../crates/aap-core/src/aap/corpus_edits.rs"]
mod corpus_edits;
use corpus_edits::{at_path, paths, SCALARS};

static SCHEMAS: LazyLock<SchemaSet> =
    LazyLock::new(|| SchemaSet::embedded().expect("embedded schemas compile"));

/// Every skill's request and result, with the stem of the example kind each decides.
static DECIDERS: LazyLock<Vec<(String, Skill, bool)>> = LazyLock::new(|| {
    let mut all = Vec::new();
    for skill in Skill::ALL {
        all.push((SchemaSet::request_stem(skill), skill, true));
        all.push((SchemaSet::response_stem(skill), skill, false));
    }
    all
});

macro_rules! examples {
    ($($stem:literal / $file:literal),* $(,)?) => {
        &[$(($stem, include_str!(concat!("../../tests/corpus/valid/", $stem, "/", $file)))),*]
    };
}

const EXAMPLES: &[(&str, &str)] = examples!(
    "inventory-search-response" / "v1.1-inventory-search-response.adapted.json",
    "inventory-search-response" / "with-facets-free-fees.json",
    "inventory-search-response" / "cursor-page.json",
    "inventory-vehicle-response" / "v1.1-vehicle-detail-response.adapted.json",
    "inventory-vehicle-response" / "motorcycle.json",
    "dealer-information-response" / "v1.1-dealer-information-response.with-fees.json",
    "inventory-facets-response" / "with-vehicle-types.json",
    "lead-submit-response" / "v1.1-lead-submit-response.proposed.json",
    "inventory-search-request" / "v1.1-inventory-search-request.json",
    "inventory-vehicle-request" / "all-identifiers.json",
    "inventory-facets-request" / "v3-filters.json",
    "dealer-information-request" / "v1.1-dealer-information-request.json",
    "lead-submit-request" / "v1.1-lead-submit-request.appointment.adapted.json",
    "lead-submit-request" / "trade-in-appraisal.json",
    "error" / "draft-2.0-validation.payload.json",
);

/// The document path and the `Value` path decide `value` (read as `doc`) alike.
fn agree(stem: &str, skill: Skill, request: bool, doc: &Doc, value: &Value) {
    let (on_doc, on_value) = if request {
        (
            SCHEMAS.request_holds(skill, doc),
            SCHEMAS.validate_request(skill, value).is_ok(),
        )
    } else {
        (
            SCHEMAS.result_holds(skill, doc),
            SCHEMAS.validate_result(skill, value).is_ok(),
        )
    };
    assert_eq!(
        on_doc, on_value,
        "the Doc path against the Value path, {stem}"
    );
}

const NAMES: &[&str] = &[
    "type",
    "data",
    "vehicles",
    "total",
    "vin",
    "stock",
    "status",
    "price",
    "fees",
    "photos",
    "updated_at",
    "condition",
    "next_cursor",
    "filters",
    "customer",
    "email",
    "phone",
    "consent",
    "vehicle_id",
    "zz_unknown",
    "error",
    "code",
    "message",
    "fields",
    "amount",
    "name",
];
const CHARS: &[char] = &[
    'a', 'Z', '9', ' ', '-', ':', 'T', '%', '/', '?', '#', '+', '.', '@', 'é', '€', '🚗', '"',
    '\\', '\n', '\u{a0}', 'I',
];

/// One edit, three bytes: `what` picks the kind, `place` the value it applies to, `arg` the
/// name, value, length or character it uses.
fn edit(value: &mut Value, what: u8, place: u8, arg: u8) {
    let mut all = Vec::new();
    paths(value, &mut Vec::new(), &mut all);
    let path = all[usize::from(place) % all.len()].clone();
    let scalar: Value =
        serde_json::from_str(SCALARS[usize::from(arg) % SCALARS.len()]).expect("scalar parses");
    let donor = all
        .get(usize::from(arg) % all.len())
        .and_then(|p| at_path(value, p))
        .map(|d| d.clone())
        .unwrap_or(Value::Null);
    let Some(target) = at_path(value, &path) else {
        return;
    };
    let c = CHARS[usize::from(arg) % CHARS.len()];
    match what % 10 {
        0 => {
            if let Value::Object(map) = target {
                if let Some(name) = map.keys().nth(usize::from(arg) % map.len().max(1)).cloned() {
                    map.shift_remove(&name);
                }
            }
        }
        1 => {
            if let Value::Object(map) = target {
                map.insert(NAMES[usize::from(arg) % NAMES.len()].to_owned(), donor);
            }
        }
        2 => *target = scalar,
        3 => *target = donor,
        // A string of `arg` (times eight, for the longer bounds) copies of a character.
        4 => {
            let n = if what & 0x80 != 0 {
                usize::from(arg) * 8
            } else {
                usize::from(arg)
            };
            *target = Value::String(std::iter::repeat_n(c, n).collect());
        }
        5 | 6 => {
            if let Value::String(s) = target {
                let mut chars: Vec<char> = s.chars().collect();
                let at = usize::from(what >> 4) % (chars.len() + 1);
                match what % 3 {
                    0 if at < chars.len() => chars[at] = c,
                    1 => chars.insert(at, c),
                    _ => chars.truncate(at),
                }
                *s = chars.into_iter().collect();
            }
        }
        7 => {
            if let Value::Number(n) = target {
                let f = n.as_f64().unwrap_or(0.0) + (f64::from(arg) - 128.0) / 4.0;
                *target = json!(f);
            }
        }
        8 => {
            if let Value::Array(items) = target {
                if !items.is_empty() {
                    let i = usize::from(arg) % items.len();
                    if what & 0x40 != 0 {
                        let copy = items[i].clone();
                        items.push(copy);
                    } else {
                        items.remove(i);
                    }
                }
            }
        }
        _ => match target {
            Value::Array(items) => items.clear(),
            Value::Object(map) => map.clear(),
            _ => {}
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let deciders = &*DECIDERS;
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    if control & 1 == 0 {
        let Ok(text) = std::str::from_utf8(rest) else {
            return;
        };
        let Ok(doc) = Doc::parse(text) else {
            return;
        };
        let value = doc.to_value();
        for (stem, skill, request) in deciders {
            agree(stem, *skill, *request, &doc, &value);
        }
        return;
    }
    let Some((&pick, edits)) = rest.split_first() else {
        return;
    };
    let (stem, text) = EXAMPLES[usize::from(pick) % EXAMPLES.len()];
    let mut value: Value = serde_json::from_str(text).expect("example parses");
    for e in edits.chunks_exact(3).take(16) {
        edit(&mut value, e[0], e[1], e[2]);
    }
    let text = serde_json::to_string(&value).expect("serializes");
    let Ok(doc) = Doc::parse(&text) else {
        return;
    };
    let other = usize::from(control >> 1) % deciders.len();
    for (i, (name, skill, request)) in deciders.iter().enumerate() {
        if name == stem || (stem == "error" && !request) || i == other {
            agree(name, *skill, *request, &doc, &value);
        }
    }
});
