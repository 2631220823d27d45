//! Where peers are: one socket address of a configured `PeerSpec`. Host names are looked
//! up by the cluster's background task (`upstream::cluster`); no connecting, no balancing here.

use std::net::SocketAddr;

pub use aap_core::peer::PeerSpec;

/// One address of a configured peer: what the client connects to. A peer
/// whose name resolves to several addresses is several of these, sharing
/// `host` (the `Host` header and TLS SNI).
#[derive(Debug, Clone)]
pub struct PeerAddr {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    pub addr: SocketAddr,
}

impl PeerAddr {
    /// The `Host` header's parts: the host, and the port unless it is the scheme's default
    /// (the request writes them itself, so no string is made per request).
    pub(super) fn authority(&self) -> (&str, Option<u16>) {
        if (self.tls && self.port == 443) || (!self.tls && self.port == 80) {
            (&self.host, None)
        } else {
            (&self.host, Some(self.port))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_syntax_is_checked_without_any_lookup() {
        let p = PeerSpec::parse("http://upstream.invalid:8001").unwrap();
        assert_eq!(
            (p.tls, p.host.as_str(), p.port),
            (false, "upstream.invalid", 8001)
        );
        let p = PeerSpec::parse("https://[::1]").unwrap();
        assert_eq!((p.tls, p.bare_host(), p.port), (true, "::1", 443));
        let p = PeerSpec::parse("http://[::1]:8080").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("[::1]", 8080));
        let p = PeerSpec::parse("http://10.0.0.5").unwrap();
        assert_eq!(p.port, 80);
        for bad in [
            "ftp://x",
            "http://",
            "http://a/b",
            "http://a:b",
            "http://a..b",
            "http://-a",
            "http://[zz]:1",
            "http://[::1]x",
            "http://::1:80",
            "http://a b",
        ] {
            assert!(PeerSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
