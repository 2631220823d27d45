//! Hop-by-hop header fields (RFC 9110 §7.6.1): those that belong to one connection, and those a
//! message's `Connection` field names. What the relay and the pass-through keep off the next hop.

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
