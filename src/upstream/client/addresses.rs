//! Where peers are: configured `PeerSpec`s turned into socket addresses, host
//! names looked up before a runtime is built. No connecting, no balancing here.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

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
    pub(super) fn authority(&self) -> String {
        if (self.tls && self.port == 443) || (!self.tls && self.port == 80) {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A peer host name that did not resolve.
#[derive(Debug, Clone)]
pub struct ResolveError {
    /// The name, without IPv6 brackets.
    pub host: String,
    pub why: String,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot resolve {}: {}", self.host, self.why)
    }
}

/// How long one host-name lookup may take when a runtime is built.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The addresses of peer host names, looked up (asynchronously, with
/// tokio's resolver) before a runtime is built at start or reload, so the
/// build itself never waits for DNS. An offline set (for `check` and
/// `catalog`) knows only IP literals: a name gets no addresses, and a
/// client built from it has nothing to connect to.
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    online: bool,
    names: HashMap<(String, u16), Vec<SocketAddr>>,
}

impl Addresses {
    /// No lookups: for commands that validate and never connect.
    pub fn offline() -> Addresses {
        Addresses::default()
    }

    /// Look up every host name among `peers`, concurrently; all addresses
    /// of a name are kept. Fails with a name that does not resolve.
    pub async fn resolve(peers: &[PeerSpec]) -> Result<Addresses, ResolveError> {
        let mut tasks = tokio::task::JoinSet::new();
        let mut asked = std::collections::HashSet::new();
        for p in peers {
            if p.literal().is_some() || !asked.insert((p.bare_host().to_owned(), p.port)) {
                continue;
            }
            let (host, port) = (p.bare_host().to_owned(), p.port);
            tasks.spawn(async move {
                let lookup = tokio::net::lookup_host((host.clone(), port));
                let why = match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Err(_) => format!("no answer within {} s", RESOLVE_TIMEOUT.as_secs()),
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok(found)) => {
                        let mut v: Vec<SocketAddr> = Vec::new();
                        for a in found {
                            if !v.contains(&a) {
                                v.push(a);
                            }
                        }
                        if !v.is_empty() {
                            return Ok(((host, port), v));
                        }
                        "no address".to_owned()
                    }
                };
                Err(ResolveError { host, why })
            });
        }
        let mut names = HashMap::new();
        let mut failed = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok((key, addrs))) => {
                    names.insert(key, addrs);
                }
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(ResolveError {
                        host: String::new(),
                        why: format!("the lookup task failed: {e}"),
                    });
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(Addresses {
                online: true,
                names,
            }),
        }
    }

    /// Add the names `other` looked up (a tenant file resolved on its own).
    pub fn merge(&mut self, other: Addresses) {
        self.online |= other.online;
        self.names.extend(other.names);
    }

    /// The addresses of `peers`, in order, without duplicates. Online, a
    /// name that was not looked up is an error; offline it has none.
    pub fn peers(&self, peers: &[PeerSpec]) -> Result<Vec<PeerAddr>, String> {
        let mut out: Vec<PeerAddr> = Vec::new();
        for p in peers {
            let addrs = match p.literal() {
                Some(a) => vec![a],
                None => match self.names.get(&(p.bare_host().to_owned(), p.port)) {
                    Some(v) => v.clone(),
                    None if self.online => {
                        return Err(format!("{} was not resolved", p.bare_host()))
                    }
                    None => Vec::new(),
                },
            };
            for addr in addrs {
                if out.iter().any(|o| o.addr == addr) {
                    continue;
                }
                out.push(PeerAddr {
                    tls: p.tls,
                    host: p.host.clone(),
                    port: p.port,
                    addr,
                });
            }
        }
        Ok(out)
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
            "http://ex\u{e4}mple.com",
        ] {
            assert!(PeerSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn offline_addresses_know_only_literals() {
        let specs = [
            PeerSpec::parse("http://127.0.0.1:1").unwrap(),
            PeerSpec::parse("http://upstream.invalid:2").unwrap(),
            PeerSpec::parse("http://127.0.0.1:1/").unwrap(),
        ];
        let got = Addresses::offline().peers(&specs).unwrap();
        assert_eq!(
            got.len(),
            1,
            "a name has no address; a duplicate is used once"
        );
        assert_eq!(got[0].addr, "127.0.0.1:1".parse::<SocketAddr>().unwrap());
    }

    #[tokio::test]
    async fn resolution_keeps_every_address_and_names_a_failure() {
        let specs = [PeerSpec::parse("http://localhost:7").unwrap()];
        let a = Addresses::resolve(&specs).await.unwrap();
        let got = a.peers(&specs).unwrap();
        assert!(!got.is_empty());
        assert!(got
            .iter()
            .all(|p| p.addr.ip().is_loopback() && p.host == "localhost"));
        let bad = [PeerSpec::parse("http://nothing.invalid:7").unwrap()];
        let e = Addresses::resolve(&bad).await.unwrap_err();
        assert_eq!(e.host, "nothing.invalid");
        assert!(e
            .to_string()
            .starts_with("cannot resolve nothing.invalid: "));
    }
}
