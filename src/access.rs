//! The access log: one JSON line per request on stderr.
//!
//! Every other log event goes through `tracing`. This one is written
//! directly because it runs on every request, and tracing-subscriber's JSON
//! formatter (a field visitor, a `fmt::Write` adaptor that re-checks UTF-8
//! for every token, a fresh `String` per `Display` field) cost about a tenth
//! of a relayed request's CPU in `benches/load.sh`. The line has the shape
//! tracing-subscriber's JSON format gives an event with target `access`, so
//! log pipelines see one schema, and `AAP_LOG` still decides whether it is
//! written (`AAP_LOG=info,access=off` turns it off).
//!
//! What goes in is fixed by [`AccessRecord`]: identifiers, route and
//! protocol facts, the outcome code and timings. Nothing from arguments,
//! customers, tokens or proofs has a field here.

use serde::Serialize;
use std::io::Write;
use time::format_description::FormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// RFC 3339 in UTC with microseconds, as tracing-subscriber writes it.
const TIMESTAMP: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

/// The fields of one access log line.
#[derive(Debug, Serialize)]
pub struct AccessRecord<'a> {
    pub correlation_id: &'a str,
    pub tenant: &'a str,
    pub binding: &'a str,
    pub mcp_revision: &'a str,
    pub aap_version: &'a str,
    pub http_method: &'a str,
    pub rpc_method: &'a str,
    pub skill: &'a str,
    pub outcome: &'a str,
    pub status: u16,
    /// The mirror headers the gateway filled in, written as a list in text
    /// (`["Mcp-Method", "Mcp-Name"]`), as the tracing format has it.
    #[serde(serialize_with = "as_list_text")]
    pub filled: &'a [&'static str],
    pub latency_us: u64,
}

fn as_list_text<S: serde::Serializer>(v: &&[&'static str], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:?}"))
}

#[derive(Serialize)]
struct Line<'a> {
    timestamp: &'a str,
    level: &'static str,
    fields: Fields<'a>,
    target: &'static str,
}

#[derive(Serialize)]
struct Fields<'a> {
    message: &'static str,
    #[serde(flatten)]
    record: &'a AccessRecord<'a>,
}

/// Whether the access line is enabled under the active `AAP_LOG` filter.
pub fn enabled() -> bool {
    tracing::enabled!(target: "access", tracing::Level::INFO)
}

/// The line for `record` at `now`, newline included.
///
/// ```
/// use aap_gateway::access::{line, AccessRecord};
/// let r = AccessRecord {
///     correlation_id: "c0ffee", tenant: "demo", binding: "mcp", mcp_revision: "2026-07-28",
///     aap_version: "3.0.0", http_method: "POST", rpc_method: "tools/call",
///     skill: "inventory.search", outcome: "ok", status: 200, filled: &["Mcp-Name"], latency_us: 412,
/// };
/// let at = time::macros::datetime!(2026-12-04 01:27:45.611338 UTC);
/// let v: serde_json::Value = serde_json::from_slice(&line(&r, at)).unwrap();
/// assert_eq!(v["timestamp"], "2026-12-04T01:27:45.611338Z");
/// assert_eq!(v["fields"]["filled"], r#"["Mcp-Name"]"#);
/// assert_eq!(v["target"], "access");
/// ```
pub fn line(record: &AccessRecord<'_>, now: OffsetDateTime) -> Vec<u8> {
    // A format failure would need a year outside 0..=9999; log the line
    // without a time rather than not at all.
    let timestamp = now.format(TIMESTAMP).unwrap_or_default();
    let mut out = Vec::with_capacity(512);
    let line = Line {
        timestamp: &timestamp,
        level: "INFO",
        fields: Fields {
            message: "request",
            record,
        },
        target: "access",
    };
    // Only `&str` and integer fields: serialization cannot fail.
    if serde_json::to_writer(&mut out, &line).is_ok() {
        out.push(b'\n');
    } else {
        out.clear();
    }
    out
}

/// Write the access line for `record` to stderr, when enabled.
pub fn log(record: &AccessRecord<'_>) {
    if !enabled() {
        return;
    }
    let bytes = line(record, OffsetDateTime::now_utc());
    // One write per line, so concurrent lines never interleave; a closed
    // stderr must not fail the request.
    let _ = std::io::stderr().lock().write_all(&bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn record<'a>(filled: &'a [&'static str], method: &'a str) -> AccessRecord<'a> {
        AccessRecord {
            correlation_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            tenant: "demo-toyota",
            binding: "mcp",
            mcp_revision: "-",
            aap_version: "3.0.0",
            http_method: "POST",
            rpc_method: method,
            skill: "-",
            outcome: "-32601",
            status: 200,
            filled,
            latency_us: 7,
        }
    }

    #[test]
    fn the_line_is_one_json_object_in_the_tracing_shape() {
        let at = OffsetDateTime::from_unix_timestamp_nanos(1_764_811_665_000_001_000).unwrap();
        let bytes = line(&record(&[], "tools/list"), at);
        assert_eq!(bytes.last(), Some(&b'\n'));
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["timestamp", "level", "fields", "target"]);
        assert_eq!(v["timestamp"], "2025-12-04T01:27:45.000001Z");
        assert_eq!(v["level"], "INFO");
        let fields: Vec<&str> = v["fields"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            fields,
            [
                "message",
                "correlation_id",
                "tenant",
                "binding",
                "mcp_revision",
                "aap_version",
                "http_method",
                "rpc_method",
                "skill",
                "outcome",
                "status",
                "filled",
                "latency_us"
            ]
        );
        assert_eq!(v["fields"]["filled"], "[]");
        assert_eq!(v["fields"]["status"], 200);
    }

    #[test]
    fn client_chosen_text_cannot_break_the_line() {
        // A JSON-RPC method name is the client's; quotes, newlines and
        // control characters stay inside one escaped string.
        let hostile = "tools/call\"}\n{\"forged\":true,\u{0007}";
        let at = OffsetDateTime::UNIX_EPOCH;
        let bytes = line(&record(&["Mcp-Method", "Mcp-Name"], hostile), at);
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["fields"]["rpc_method"], hostile);
        assert_eq!(v["fields"]["filled"], r#"["Mcp-Method", "Mcp-Name"]"#);
        assert!(v.get("forged").is_none());
    }
}
