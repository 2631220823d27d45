//! Upstream peer addresses as written in the config (`http[s]://host[:port]`), checked for syntax only.
//! Resolution and connection pooling belong to the gateway's HTTP client, never to this crate.

use std::net::SocketAddr;

/// One configured peer: `http://host:port` or `https://host:port`, as
/// written (the host is not resolved here; see [`Addresses`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerSpec {
    pub tls: bool,
    /// As written; an IPv6 literal keeps its brackets.
    pub host: String,
    pub port: u16,
}

impl PeerSpec {
    /// Parse `http[s]://host[:port]` (no path). Syntax only: nothing is
    /// looked up, so validating a config works offline and never blocks.
    pub fn parse(url: &str) -> Result<PeerSpec, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(format!("{url:?} must start with http:// or https://"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '?', '#', ' ', '@']) {
            return Err(format!(
                "{url:?} must be scheme://host[:port] without a path (set the path separately)"
            ));
        }
        // `[v6]` or `[v6]:port`, else `host` or `host:port`.
        let split = match rest.find(']') {
            Some(end) if rest.starts_with('[') => {
                let tail = &rest[end + 1..];
                match tail.strip_prefix(':') {
                    Some(p) => Some((&rest[..=end], p)),
                    None if tail.is_empty() => None,
                    None => return Err(format!("{url:?}: invalid port")),
                }
            }
            _ => rest.rsplit_once(':'),
        };
        let (host, port) = match split {
            Some((h, p)) => match p.parse::<u16>() {
                Ok(p) => (h.to_owned(), p),
                Err(_) => return Err(format!("{url:?}: invalid port")),
            },
            None => (rest.to_owned(), if tls { 443 } else { 80 }),
        };
        let spec = PeerSpec { tls, host, port };
        if let Some(inner) = spec.host.strip_prefix('[') {
            let ok = inner
                .strip_suffix(']')
                .is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok());
            if !ok {
                return Err(format!("{url:?}: invalid IPv6 address"));
            }
        } else if !is_host_name(&spec.host) {
            return Err(format!(
                "{url:?}: the host must be an IP address or a DNS name (letters, digits, '-', '.')"
            ));
        }
        Ok(spec)
    }

    /// The host without IPv6 brackets, as a resolver or SNI wants it.
    pub fn bare_host(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }

    /// The address of an IP-literal host (no lookup needed).
    pub fn literal(&self) -> Option<SocketAddr> {
        let ip: std::net::IpAddr = self.bare_host().parse().ok()?;
        Some(SocketAddr::new(ip, self.port))
    }
}

/// A host name or IPv4 literal by the rules of `crate::host` (one rule set for every host).
fn is_host_name(h: &str) -> bool {
    crate::host::Authority::parse(h).is_ok_and(|a| !a.host.starts_with('['))
}
