//! Host and URL syntax, one rule set for routing (`Host`, `:authority`, absolute-form targets),
//! publishing (dealer domains), config validation (hosts, URLs, origins) and the lead sinks.
//!
//! Built on the `url` crate (WHATWG host parsing, IDNA, IPv4/IPv6 literals), pure: nothing is
//! resolved. The rules, documented once in docs/configuration.md ("Host names and URLs"):
//! - host names are compared in ASCII lower case (an internationalized name as its `xn--` form);
//! - one trailing dot is ignored (`dealer.example.` is `dealer.example`), two are an error;
//! - a name is labels of letters, digits, `-` and `_` (no label starts or ends with `-`), at
//!   most 63 bytes a label and 253 in all; an IPv4 literal is four decimal numbers, an IPv6
//!   literal is in brackets;
//! - a port is 1 to 65535 written in decimal (at most 5 digits); routing ignores it;
//! - the loopback hosts are `localhost`, `127.0.0.0/8` and `[::1]`.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A host with an optional port, as a `Host` header, an `:authority` or a configured dealer
/// domain carries it: no scheme, user info, path, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Authority {
    /// The normalized host: a lower-case name without its trailing dot, a dotted IPv4
    /// address, or an IPv6 address in brackets.
    pub host: String,
    /// The port when one was written.
    pub port: Option<u16>,
}

impl Authority {
    /// Parse `host[:port]` under the module's rules. The error says what is wrong, without
    /// quoting the input.
    pub fn parse(s: &str) -> Result<Authority, String> {
        let s = s.trim_matches([' ', '\t']);
        if s.is_empty() {
            return Err("the host is empty".into());
        }
        let (host, port) = split_port(s)?;
        let port = match port {
            None => None,
            Some(p) => Some(parse_port(p)?),
        };
        Ok(Authority {
            host: normalize_host(host)?,
            port,
        })
    }

    /// `host[:port]` in normalized form.
    pub fn with_port(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    /// Whether the host is a loopback host (see [`is_loopback_host`]).
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }
}

/// The key a `Host` header, an `:authority` or a configured host name is routed by: the
/// normalized host without its port; `None` when it is not a valid host.
pub fn route_key(s: &str) -> Option<String> {
    Authority::parse(s).ok().map(|a| a.host)
}

/// Whether two authorities (`Host`, `:authority`, an absolute-form target's) name the same
/// host and port; a missing port is `default_port` (the scheme's). Two values that are not
/// valid hosts compare equal only when they are the same text, case aside.
pub fn same_authority(a: &str, b: &str, default_port: u16) -> bool {
    match (Authority::parse(a), Authority::parse(b)) {
        (Ok(x), Ok(y)) => {
            x.host == y.host && x.port.unwrap_or(default_port) == y.port.unwrap_or(default_port)
        }
        _ => a.trim().eq_ignore_ascii_case(b.trim()),
    }
}

/// `localhost`, an address of `127.0.0.0/8` or `::1` (brackets optional), in any case and
/// with or without a trailing dot; never a name that merely starts with one of them.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    if h.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Ok(ip) = h.parse::<Ipv4Addr>() {
        return ip.is_loopback();
    }
    h.strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or(h)
        .parse::<Ipv6Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// A URL a request can be sent to, or published: `http://` or `https://`, a valid host, a port
/// of 1 to 65535, no user info (credentials go in `authorization` keys), no fragment, no
/// whitespace or backslash. The error says what is wrong without quoting the URL (its query may
/// hold a token).
pub fn http_url(s: &str) -> Result<url::Url, String> {
    let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err("not an http:// or https:// URL".into());
    }
    if s.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'\\') {
        return Err("it contains whitespace, a control character or a backslash".into());
    }
    // The authority as written (the WHATWG parser would drop a default port and rewrite the
    // host): checked by the same rules as a `Host` header.
    let rest = &s[lower.find("//").map_or(0, |i| i + 2)..];
    let written = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if written.contains('@') {
        return Err("it carries user info (credentials go in an authorization key)".into());
    }
    if written.is_empty() {
        return Err("it has no host".into());
    }
    let auth = Authority::parse(written)?;
    if auth.port == Some(0) {
        return Err("port 0 cannot be connected to (use 1 to 65535)".into());
    }
    let url = url::Url::parse(s).map_err(|e| format!("not a valid URL ({e})"))?;
    if url.fragment().is_some() {
        return Err("it has a #fragment".into());
    }
    Ok(url)
}

/// An origin (`scheme://host[:port]`, no path) as a browser sends it in `Origin`: normalized
/// (lower-case host, default port dropped) so that comparing strings compares origins.
pub fn origin(s: &str) -> Result<String, String> {
    let rest_at = s
        .find("://")
        .ok_or("is not an origin (scheme://host[:port])")?;
    let tail = &s[rest_at + 3..];
    if tail.is_empty() || tail.contains(['/', '?', '#']) {
        return Err("is not an origin (scheme://host[:port], no path)".into());
    }
    let url = http_url(s)?;
    Ok(url.origin().ascii_serialization())
}

/// (host, port) of `host[:port]`; an IPv6 literal keeps its brackets.
/// `Ok` for an absolute `https` URL, or `http` on a loopback host ; no
/// user info, query or fragment.
pub fn check_public_url(url: &str) -> Result<(), String> {
    let u = http_url(url).map_err(|e| format!("must be an absolute https URL ({e})"))?;
    if u.query().is_some() || url.contains('?') {
        return Err("must be an absolute https URL without user info, query or fragment".into());
    }
    match u.scheme() {
        "https" => Ok(()),
        _ if u.host_str().is_some_and(is_loopback_host) => Ok(()),
        _ => Err(
            "must use https (plain http is accepted only on localhost, 127.0.0.0/8 and [::1])"
                .into(),
        ),
    }
}

/// A host name or address, optionally with `:port`: what a `Host` header
/// carries (no scheme, path or user info), by the rules above.
pub fn is_host(h: &str) -> bool {
    Authority::parse(h).is_ok()
}

/// The key a configured dealer domain is stored under in a host table: its normalized
/// `host[:port]` (lower case, no trailing dot).
pub fn host_table_key(configured: &str) -> String {
    match Authority::parse(configured) {
        Ok(a) => a.with_port(),
        Err(_) => configured.trim().to_ascii_lowercase(),
    }
}

/// The keys a request's `Host` is looked up by in a table of [`host_table_key`]s, in order: the
/// whole header normalized (an entry equal to it, port included), then, when it has a port, its
/// host alone (an entry without a port names the domain on any port). An entry with a port never
/// equals the second key, so one table serves both.
///
/// ```
/// use aap_core::host::{host_lookup_keys, host_table_key};
/// let (whole, bare) = host_lookup_keys("WWW.D.example.:443");
/// assert_eq!(whole, "www.d.example:443");
/// assert_eq!(bare.as_deref(), Some(host_table_key("www.d.example").as_str()));
/// ```
pub fn host_lookup_keys(host_header: &str) -> (String, Option<String>) {
    match Authority::parse(host_header) {
        Ok(a) => (a.with_port(), a.port.is_some().then(|| a.host.clone())),
        Err(_) => (host_header.trim().to_ascii_lowercase(), None),
    }
}

/// The tenant prefix: the MCP path without its last segment
/// (`/aap/3.0.0/demo-toyota/mcp` → `/aap/3.0.0/demo-toyota`; `/mcp` → ``).
pub fn prefix_of(path: &str) -> &str {
    &path[..path.rfind('/').unwrap_or(0)]
}

fn split_port(s: &str) -> Result<(&str, Option<&str>), String> {
    if s.starts_with('[') {
        let close = s.find(']').ok_or("an IPv6 address is not closed by ']'")?;
        let tail = &s[close + 1..];
        match tail.strip_prefix(':') {
            Some(p) => Ok((&s[..=close], Some(p))),
            None if tail.is_empty() => Ok((s, None)),
            None => Err("unexpected characters after an IPv6 address".into()),
        }
    } else {
        Ok(match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        })
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err("the port must be 1 to 5 decimal digits".into());
    }
    p.parse::<u16>()
        .map_err(|_| "the port is out of range (0 to 65535)".into())
}

/// The normalized form of a host (see the module rules).
fn normalize_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let inner = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or("");
        let ip: Ipv6Addr = inner.parse().map_err(|_| "not a valid IPv6 address")?;
        return Ok(format!("[{ip}]"));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() {
        return Err("the host is empty".into());
    }
    if name.contains(['[', ']', ':', '%', '/', '@', '\\']) {
        return Err("the host has a character a host name cannot have".into());
    }
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        return Ok(ip.to_string());
    }
    // The WHATWG host parser: IDNA (lower case, `xn--` labels) and its IPv4 forms.
    match url::Host::parse(name) {
        Ok(url::Host::Domain(d)) => {
            if is_name(&d) {
                Ok(d)
            } else {
                Err(
                    "the host name must be labels of letters, digits, '-' and '_' (1 to 63 each, 253 in all)"
                        .into(),
                )
            }
        }
        // `1.2.3`, `0x7f.1`: numbers a resolver would read as an address, written otherwise.
        Ok(_) => Err("an IPv4 address must be written as four decimal numbers".into()),
        Err(e) => Err(format!("not a valid host ({e})")),
    }
}

/// Labels of `[a-z0-9_-]`, none empty, none starting or ending with `-`, 63 bytes each,
/// 253 in all (the input is already lower case).
fn is_name(d: &str) -> bool {
    d.len() <= 253
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_https_or_loopback() {
        for ok in [
            "https://api.example.com/a/mcp",
            "http://127.0.0.1:8080/a/mcp",
            "http://localhost/a/mcp",
            "http://[::1]:9/a/mcp",
        ] {
            assert!(check_public_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://api.example.com/a/mcp",
            "http://localhost.evil.com/a/mcp",
            "http://127.0.0.1.evil.com/a/mcp",
            "https://user@api.example.com/a/mcp",
            "https://api.example.com/a/mcp?x=1",
            "ftp://api.example.com/a",
            "api.example.com/a",
            "https:///a",
        ] {
            assert!(check_public_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_match_with_or_without_port() {
        let host_matches = |configured: &str, header: &str| {
            let key = host_table_key(configured);
            let (whole, bare) = host_lookup_keys(header);
            key == whole || bare.as_deref() == Some(key.as_str())
        };
        assert!(host_matches("www.d.example", "WWW.D.example:443"));
        assert!(host_matches(" WWW.d.example ", "www.d.example"));
        assert!(host_matches("[::1]", "[::1]:8080"));
        assert!(!host_matches("[::1]:80", "[::1]"));
        assert!(host_matches("www.d.example:8443", "www.d.example:8443"));
        assert!(!host_matches("www.d.example:8443", "www.d.example"));
        assert!(!host_matches("d.example", "www.d.example"));
        assert!(is_host("[::1]:80") && is_host("d.example") && !is_host("d.example/x"));
        assert!(!is_host("https://d.example") && !is_host("a b"));
    }

    #[test]
    fn a_tenant_prefix_is_its_mcp_path_without_the_last_segment() {
        assert_eq!(prefix_of("/aap/3.0.0/demo/mcp"), "/aap/3.0.0/demo");
        assert_eq!(prefix_of("/mcp"), "");
    }

    #[test]
    fn authorities_fold_case_and_drop_one_trailing_dot() {
        let a = Authority::parse("MCP.Dealer.Example.:8443").unwrap();
        assert_eq!(a.host, "mcp.dealer.example");
        assert_eq!(a.port, Some(8443));
        assert_eq!(
            route_key("mcp.dealer.example.").as_deref(),
            Some("mcp.dealer.example")
        );
        assert_eq!(
            route_key("_srv.dealer.example").as_deref(),
            Some("_srv.dealer.example")
        );
        assert_eq!(route_key("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(route_key("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(
            route_key("b\u{fc}cher.example").as_deref(),
            Some("xn--bcher-kva.example")
        );
        for bad in [
            "",
            ".",
            "a..",
            "a..b",
            "-a.example",
            "a-.example",
            "a b",
            "a:99999",
            "a:",
            "a:x",
            "[::1",
            "[zz]",
            "[::1]x",
            "1.2.3",
            "0x7f.0.0.1",
            "a/b",
            "u@a",
            "a%41",
        ] {
            assert!(Authority::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn authorities_compare_by_host_and_effective_port() {
        assert!(same_authority("A.example.", "a.example:80", 80));
        assert!(same_authority("a.example:443", "a.example", 443));
        assert!(!same_authority("a.example", "b.example", 80));
        assert!(!same_authority("a.example:8080", "a.example", 80));
    }

    #[test]
    fn loopback_hosts_are_exactly_localhost_127_8_and_v6_one() {
        for l in [
            "localhost",
            "LOCALHOST.",
            "127.0.0.1",
            "127.1.2.3",
            "[::1]",
            "::1",
        ] {
            assert!(is_loopback_host(l), "{l}");
        }
        for n in [
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1",
            "[::2]",
        ] {
            assert!(!is_loopback_host(n), "{n}");
        }
    }

    #[test]
    fn urls_that_can_never_work_are_refused() {
        for bad in [
            "http://:99999/adf",
            "http://[::1/adf",
            "http:///adf",
            "http://a:0/adf",
            "http://a:65536/",
            "http://u:p@a.example/",
            "ftp://a.example/",
            "http:/a.example/",
            "http://a.example/x#frag",
            "http://a\\b/",
            "http://a .example/",
        ] {
            assert!(http_url(bad).is_err(), "{bad:?} accepted");
        }
        let u = http_url("https://CRM.Example:8443/adf?key=1").unwrap();
        assert_eq!(u.host_str(), Some("crm.example"));
        assert_eq!(u.port(), Some(8443));
        assert!(http_url("http://[::1]:9/adf").is_ok());
    }

    #[test]
    fn origins_are_normalized_as_browsers_send_them() {
        assert_eq!(
            origin("https://App.Example:443").unwrap(),
            "https://app.example"
        );
        assert_eq!(
            origin("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        assert!(origin("https://app.example/path").is_err());
        assert!(origin("app.example").is_err());
    }
}
