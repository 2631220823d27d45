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
//! protocol facts, the client's address and user agent, sizes, the outcome
//! code and timings. Nothing from arguments, customers, tokens or proofs has
//! a field here.

use std::io::Write;
use time::OffsetDateTime;

/// The fields of one access log line.
#[derive(Debug)]
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
    pub filled: &'a [&'static str],
    /// Host compatibility: the JSON Pointers of explicit nulls dropped from the arguments
    /// (written only when there are some; paths, never values).
    pub nulls_dropped: &'a [String],
    pub latency_us: u64,
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`.
    pub protocol: &'a str,
    /// The client's (TCP peer's) address; `-` when unknown.
    pub client_address: Option<std::net::IpAddr>,
    /// The `User-Agent`, already cut to a bounded length (`-` when absent).
    pub user_agent: &'a str,
    /// Request body bytes read.
    pub bytes_in: u64,
    /// Answer body bytes (an event stream: the part known when the answer starts).
    pub bytes_out: u64,
}

/// Whether the access line is enabled under the active `AAP_LOG` filter.
pub fn enabled() -> bool {
    tracing::enabled!(target: "access", tracing::Level::INFO)
}

/// `,"name":` as one constant (names are fixed ASCII identifiers), so each member's name is
/// one copy of a literal.
macro_rules! member {
    ($name:literal) => {
        concat!(",\"", $name, "\":").as_bytes()
    };
}

/// The line for `record` at `now`, newline included.
///
/// ```
/// use aap_core::access::{line, AccessRecord};
/// let r = AccessRecord {
///     correlation_id: "c0ffee", tenant: "demo", binding: "mcp", mcp_revision: "2026-07-28",
///     aap_version: "3.0.0", http_method: "POST", rpc_method: "tools/call",
///     skill: "inventory.search", outcome: "ok", status: 200, filled: &["Mcp-Name"], nulls_dropped: &[], latency_us: 412,
///     protocol: "HTTP/2", client_address: Some([192, 0, 2, 7].into()), user_agent: "agent/1.0",
///     bytes_in: 180, bytes_out: 2048,
/// };
/// let at = time::macros::datetime!(2026-12-04 01:27:45.611338 UTC);
/// let v: serde_json::Value = serde_json::from_slice(&line(&r, at)).unwrap();
/// assert_eq!(v["timestamp"], "2026-12-04T01:27:45.611338Z");
/// assert_eq!(v["fields"]["filled"], r#"["Mcp-Name"]"#);
/// assert_eq!(v["target"], "access");
/// assert_eq!(v["fields"]["client_address"], "192.0.2.7");
/// assert_eq!(v["fields"]["protocol"], "HTTP/2");
/// assert_eq!(v["fields"]["bytes_out"], 2048);
/// ```
pub fn line(record: &AccessRecord<'_>, now: OffsetDateTime) -> Vec<u8> {
    // Written by hand: serde's `flatten` and `time`'s format descriptions
    // were a third of this line's cost. Every string goes through the same
    // escaping as `serde_json`, so client-chosen text (the method name)
    // cannot break the line.
    // A tool call's line is about 600 bytes: room for it without a reallocation.
    let mut out = Vec::with_capacity(768);
    out.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(&mut out, now);
    out.extend_from_slice(b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"request\"");
    let text_fields: [(&[u8], &str); 9] = [
        (member!("correlation_id"), record.correlation_id),
        (member!("tenant"), record.tenant),
        (member!("binding"), record.binding),
        (member!("mcp_revision"), record.mcp_revision),
        (member!("aap_version"), record.aap_version),
        (member!("http_method"), record.http_method),
        (member!("rpc_method"), record.rpc_method),
        (member!("skill"), record.skill),
        (member!("outcome"), record.outcome),
    ];
    for (name, value) in text_fields {
        out.extend_from_slice(name);
        crate::json::write_str(&mut out, value);
    }
    out.extend_from_slice(member!("status"));
    out.extend_from_slice(itoa::Buffer::new().format(record.status).as_bytes());
    out.extend_from_slice(member!("filled"));
    list(&mut out, record.filled);
    if !record.nulls_dropped.is_empty() {
        out.extend_from_slice(member!("nulls_dropped"));
        list(&mut out, record.nulls_dropped);
    }
    out.extend_from_slice(member!("latency_us"));
    out.extend_from_slice(itoa::Buffer::new().format(record.latency_us).as_bytes());
    out.extend_from_slice(member!("protocol"));
    crate::json::write_str(&mut out, record.protocol);
    out.extend_from_slice(member!("client_address"));
    match record.client_address {
        // An address's text is digits, letters a–f, `.` and `:`: nothing to escape, and written
        // straight into the line (no string of its own).
        Some(ip) => {
            out.push(b'"');
            address(&mut out, ip);
            out.push(b'"');
        }
        None => crate::json::write_str(&mut out, "-"),
    }
    out.extend_from_slice(member!("user_agent"));
    crate::json::write_str(&mut out, record.user_agent);
    out.extend_from_slice(member!("bytes_in"));
    out.extend_from_slice(itoa::Buffer::new().format(record.bytes_in).as_bytes());
    out.extend_from_slice(member!("bytes_out"));
    out.extend_from_slice(itoa::Buffer::new().format(record.bytes_out).as_bytes());
    out.extend_from_slice(b"},\"target\":\"access\"}\n");
    out
}

/// An address as its `Display` text. An IPv4 address (the usual client) is its four octets
/// written with `itoa`: `Display` through `core::fmt` was most of the line's cost. IPv6 keeps
/// `Display`, whose RFC 5952 shortening (and IPv4-mapped form) is not worth repeating here.
fn address(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(digits.format(octet).as_bytes());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// [`list_text`] of `names` as a JSON string. Names that are printable ASCII other than `"`
/// and `\` (every mirror header name) read the same under `Debug` and need no JSON escape
/// apart from their quotes, so they are written straight into the line; any other name takes
/// the general path (`Debug`, then JSON escaping) and gives the same bytes.
fn list<S: AsRef<str>>(out: &mut Vec<u8>, names: &[S]) {
    let plain = |name: &S| {
        name.as_ref()
            .bytes()
            .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    };
    if !names.iter().all(plain) {
        crate::json::write_str(out, &list_text(names));
        return;
    }
    out.extend_from_slice(b"\"[");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"\\\"");
        out.extend_from_slice(name.as_ref().as_bytes());
        out.extend_from_slice(b"\\\"");
    }
    out.extend_from_slice(b"]\"");
}

/// `["Mcp-Method", "Mcp-Name"]`: the list as `Debug` prints it, which is
/// what tracing's JSON format shows for a list field.
fn list_text<S: AsRef<str>>(names: &[S]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(2 + names.len() * 24);
    text.push('[');
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        // Writing to a String cannot fail.
        let _ = write!(text, "{:?}", name.as_ref());
    }
    text.push(']');
    text
}

/// RFC 3339 in UTC with microseconds (`2026-12-04T01:27:45.611338Z`), as
/// tracing-subscriber writes it. `time` allows years outside 0..=9999;
/// they are clamped rather than breaking the fixed width.
fn timestamp(out: &mut Vec<u8>, now: OffsetDateTime) {
    let (year, month, day) = now.to_calendar_date();
    let (hour, minute, second, micro) = now.to_hms_micro();
    let year = year.clamp(0, 9999) as u32;
    let parts = [
        (year, 4, b'-'),
        (u32::from(u8::from(month)), 2, b'-'),
        (u32::from(day), 2, b'T'),
        (u32::from(hour), 2, b':'),
        (u32::from(minute), 2, b':'),
        (u32::from(second), 2, b'.'),
        (micro, 6, b'Z'),
    ];
    for (value, width, after) in parts {
        let mut buf = [b'0'; 6];
        let mut v = value;
        for slot in buf[..width].iter_mut().rev() {
            *slot = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out.extend_from_slice(&buf[..width]);
        out.push(after);
    }
}

/// Where access lines go instead of stderr (the gateway's bounded log
/// queue, so a slow stderr never blocks a worker); set once at start.
type LineWriter = Box<dyn Fn(&[u8]) + Send + Sync>;
static WRITER: std::sync::OnceLock<LineWriter> = std::sync::OnceLock::new();

/// Send every later access line to `write` (one call per whole line).
/// Only the first call counts.
pub fn write_lines_to(write: impl Fn(&[u8]) + Send + Sync + 'static) {
    let _ = WRITER.set(Box::new(write));
}

/// Write the access line for `record` to the log writer (stderr unless
/// [`write_lines_to`] named another), when enabled.
pub fn log(record: &AccessRecord<'_>) {
    if !enabled() {
        return;
    }
    let bytes = line(record, OffsetDateTime::now_utc());
    match WRITER.get() {
        Some(write) => write(&bytes),
        // One write per line, so concurrent lines never interleave; a closed
        // stderr must not fail the request.
        None => {
            let _ = std::io::stderr().lock().write_all(&bytes);
        }
    }
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
            nulls_dropped: &[],
            latency_us: 7,
            protocol: "HTTP/1.1",
            client_address: Some(std::net::IpAddr::from([127, 0, 0, 1])),
            user_agent: "agent\"}\n/1.0",
            bytes_in: 120,
            bytes_out: 345,
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
                "latency_us",
                "protocol",
                "client_address",
                "user_agent",
                "bytes_in",
                "bytes_out"
            ]
        );
        assert_eq!(v["fields"]["client_address"], "127.0.0.1");
        assert_eq!(v["fields"]["user_agent"], "agent\"}\n/1.0");
        assert_eq!(v["fields"]["bytes_in"], 120);
        assert_eq!(v["fields"]["bytes_out"], 345);
        assert_eq!(v["fields"]["filled"], "[]");
        assert_eq!(v["fields"]["status"], 200);
    }

    #[test]
    fn timestamps_match_the_rfc3339_format_of_the_time_crate() {
        use time::macros::format_description;
        let reference = format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        );
        // Uneven steps over about nine years: every field rolls over, leap days included.
        let mut nanos: i128 = 0;
        for step in 0..5_000i128 {
            nanos += 7_919_000_123_457 * (step % 13 + 1) + step * 999_999_001;
            let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap();
            let mut ours = Vec::new();
            timestamp(&mut ours, at);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                at.format(reference).unwrap()
            );
        }
        let mut ours = Vec::new();
        timestamp(
            &mut ours,
            time::macros::datetime!(2028-02-29 23:59:59.999999 UTC),
        );
        assert_eq!(ours, b"2028-02-29T23:59:59.999999Z");
    }

    #[test]
    fn filled_headers_read_as_their_debug_list() {
        for names in [
            &[][..],
            &["Mcp-Name"],
            &["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"],
        ] {
            assert_eq!(list_text(names), format!("{names:?}"));
        }
    }

    #[test]
    fn the_line_keeps_its_exact_bytes() {
        let bytes = line(
            &record(&["Mcp-Method", "Mcp-Name"], "tools/call"),
            OffsetDateTime::UNIX_EPOCH,
        );
        let expected = concat!(
            r#"{"timestamp":"1970-01-01T00:00:00.000000Z","level":"INFO","fields":{"message":"request","#,
            r#""correlation_id":"4bf92f3577b34da6a3ce929d0e0e4736","tenant":"demo-toyota","binding":"mcp","#,
            r#""mcp_revision":"-","aap_version":"3.0.0","http_method":"POST","rpc_method":"tools/call","#,
            r#""skill":"-","outcome":"-32601","status":200,"filled":"[\"Mcp-Method\", \"Mcp-Name\"]","#,
            r#""latency_us":7,"protocol":"HTTP/1.1","client_address":"127.0.0.1","#,
            r#""user_agent":"agent\"}\n/1.0","bytes_in":120,"bytes_out":345},"target":"access"}"#,
            "\n"
        );
        assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    }

    #[test]
    fn lists_and_addresses_are_written_as_debug_and_display_give_them() {
        let names: [&[&str]; 6] = [
            &[],
            &["Mcp-Name"],
            &["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"],
            &["/filters/make/0", "/a b/~1c"],
            &[
                "/q\"uote",
                "/back\\slash",
                "/tab\t",
                "/nl\n",
                "/\u{7f}",
                "/caf\u{e9}",
            ],
            &["/ok", "/\u{301}combining", "/'single'"],
        ];
        for names in names {
            let mut ours = Vec::new();
            list(&mut ours, names);
            let mut reference = Vec::new();
            crate::json::write_str(&mut reference, &format!("{names:?}"));
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(reference).unwrap()
            );
        }
        let addresses: [std::net::IpAddr; 7] = [
            [127, 0, 0, 1].into(),
            [0, 0, 0, 0].into(),
            [255, 255, 255, 255].into(),
            [10, 200, 3, 45].into(),
            "::1".parse().unwrap(),
            "2001:db8::8a2e:370:7334".parse().unwrap(),
            "::ffff:192.0.2.7".parse().unwrap(),
        ];
        for ip in addresses {
            let mut ours = Vec::new();
            address(&mut ours, ip);
            assert_eq!(String::from_utf8(ours).unwrap(), ip.to_string());
        }
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
