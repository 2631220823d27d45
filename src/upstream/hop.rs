//! Hop-by-hop header fields (RFC 9110 §7.6.1): those that belong to one connection, and those a
//! message's `Connection` field names. What the relay and the pass-through keep off the next hop.

use crate::exchange::FieldText;
use crate::upstream::client::Fields;

/// Fields that belong to one connection, in either direction. `Proxy-*` fields (such as
/// `Proxy-Authorization` and `Proxy-Connection`) are for the proxy they reach, never passed on.
const FIELDS: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Whether the field `name` (any case) stays on its hop.
///
/// ```
/// use aap_gateway::upstream::hop::is_hop_by_hop;
/// assert!(is_hop_by_hop("Keep-Alive") && is_hop_by_hop("proxy-authorization"));
/// assert!(!is_hop_by_hop("content-type"));
/// ```
pub fn is_hop_by_hop(name: &str) -> bool {
    FIELDS.iter().any(|h| name.eq_ignore_ascii_case(h))
        || name
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("proxy-"))
}

/// The field names a message's `Connection` values list (lowercased): hop-by-hop as well.
///
/// ```
/// use aap_gateway::upstream::hop::connection_options;
/// let values = [&b"keep-alive, X-Secret"[..], &b" ,close"[..]];
/// assert_eq!(connection_options(values.into_iter()), ["keep-alive", "x-secret", "close"]);
/// ```
pub fn connection_options<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<String> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .filter_map(|t| std::str::from_utf8(t).ok())
        .map(|t| t.trim_matches([' ', '\t']).to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Fields a proxy never passes on as they came, in either direction: the hop-by-hop ones, and
/// `Host` and `Content-Length`, which the next hop's writer sets itself.
pub fn stays_behind(name: &str) -> bool {
    is_hop_by_hop(name)
        || name.eq_ignore_ascii_case("host")
        || name.eq_ignore_ascii_case("content-length")
}

/// An upstream answer's fields that a proxy passes on to its client: none that is hop-by-hop,
/// none that the answer's own `Connection` names, and neither `Host` nor `Content-Length`
/// (the client-side writer frames the answer itself). Order is kept; names come lowercased
/// (as the upstream client reads them), and only the fields passed on are copied.
///
/// ```
/// use aap_gateway::upstream::client::Fields;
/// use aap_gateway::upstream::hop::passed_on_answer_fields;
/// let kept = passed_on_answer_fields(&Fields::from_pairs([
///     ("Connection", "X-Up-Secret"), ("x-up-secret", "1"), ("Keep-Alive", "timeout=5"),
///     ("Content-Length", "2"), ("Content-Type", "text/plain"),
/// ]));
/// assert_eq!(kept, [("content-type".into(), "text/plain".into())]);
/// ```
pub fn passed_on_answer_fields(fields: &Fields) -> Vec<(FieldText, FieldText)> {
    let named = connection_options(
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .map(|(_, v)| v.as_bytes()),
    );
    fields
        .iter()
        .filter(|(n, _)| !stays_behind(n) && !named.iter().any(|o| n.eq_ignore_ascii_case(o)))
        .map(|(n, v)| (n.to_owned().into(), v.to_owned().into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_response_headers_stay_behind() {
        let up = |n: &str, v: &str| -> (FieldText, FieldText) {
            (n.to_owned().into(), v.to_owned().into())
        };
        let kept = passed_on_answer_fields(&Fields::from_pairs([
            ("Connection", "x-up-secret"),
            ("X-Up-Secret", "1"),
            ("transfer-encoding", "chunked"),
            ("Proxy-Agent", "up"),
            ("content-type", "application/json"),
            ("mcp-session-id", "abc"),
        ]));
        assert_eq!(
            kept,
            [
                up("content-type", "application/json"),
                up("mcp-session-id", "abc")
            ]
        );
    }
}
