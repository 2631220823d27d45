//! What more than one fuzz target needs (included with `mod common;`; not a
//! target itself).

use serde_json::Value;

/// Equal, with floats within a relative 1e-15 (`serde_json` parses floats
/// best-effort; the gateway's `json::Reader` rounds them correctly).
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((k, a), (l, b))| k == l && same(a, b))
        }
        _ => a == b,
    }
}
