//! Test support shared by the schema tests and the `schema_doc` fuzz target (which includes this
//! file by path): addressing the values of an example by path, and the values edits put there.

use serde_json::{json, Value};

/// The values of `value` (itself included) as paths of member names and indices.
pub fn paths(value: &Value, at: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (name, child) in map {
                at.push(Value::String(name.clone()));
                paths(child, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push(json!(i));
                paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// The value at `path` (as [`paths`] gives it) in `value`.
pub fn at_path<'v>(value: &'v mut Value, path: &[Value]) -> Option<&'v mut Value> {
    let mut at = value;
    for step in path {
        at = match step {
            Value::String(name) => at.get_mut(name.as_str())?,
            Value::Number(i) => at.get_mut(usize::try_from(i.as_u64()?).ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// JSON texts an edit puts in place of a value: every type, numbers at the schemas' bounds and
/// past what `u64`/`i64` hold, whole numbers spelled as fractions, the enum values and formats the
/// AAP schemas use, and near misses of them.
pub const SCALARS: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "-0.0",
    "1",
    "-1",
    "0.5",
    "1.0",
    "1e2",
    "100.5",
    "1900",
    "2101",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e300",
    "{}",
    "[]",
    "[\"a\",\"a\"]",
    "\"\"",
    "\"x\"",
    "\"\\u00e9\\\"x\"",
    "\"available\"",
    "\"sold\"",
    "\"new\"",
    "\"used\"",
    "\"excellent\"",
    "\"car\"",
    "\"motorcycle\"",
    "\"USD\"",
    "\"2026-11-20T17:00:00Z\"",
    "\"2026-11-20\"",
    "\"https://example.com/a\"",
    "\"https://exa mple.com\"",
    "\"JTDACAAU2H3400137\"",
    "\"JTDACAAU2H340013I\"",
    "\"+14155550100\"",
    "\"09:30\"",
    "\"a@example.com\"",
    "\"inventory.search.response\"",
    "\"aap.error\"",
];
