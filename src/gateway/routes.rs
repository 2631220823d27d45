//! What a generation routes by: its tenant units and the maps made from them (MCP path, A2A path,
//! metadata path, host, SNI name, discovery document → tenant), with what each tenant has claimed.
//!
//! The maps are persistent (`imbl`'s hash array mapped tries): a clone is O(1) and shares every
//! entry, an insert or remove is O(log n). A one-tenant apply clones the running generation's
//! routes, removes the old unit and adds the new one, so its cost does not grow with the number of
//! tenants; copying and rebuilding plain `HashMap`s took 49–84 ms at 10,000 tenants
//! (docs/performance.md, "Platform scale"). A lookup costs a few more nanoseconds than a `std`
//! `HashMap`'s, which the platform bench's spread search does not see.

use super::publish::Published;
use super::tenant::{host_key, RelayTenant, Serve, TenantEndpoint, TenantUnit};
use crate::config::{BackendConfig, TenantConfig};
use imbl::HashMap;
use pingora::tls::sign::CertifiedKey;
use std::sync::Arc;

/// The tenants of one generation and everything requests are routed by.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    /// Every tenant (main config and tenant files), by id.
    pub units: HashMap<String, Arc<TenantUnit>>,
    pub endpoints: HashMap<String, Arc<TenantEndpoint>>,
    /// The same endpoints by their inbound A2A path (`aap_core::a2a::path_for`).
    pub a2a: HashMap<String, Arc<TenantEndpoint>>,
    /// Relay tenants (`kind = "relay"`), by path.
    pub relays: HashMap<String, Arc<RelayTenant>>,
    /// Protected-resource-metadata path → tenant path.
    pub metadata: HashMap<String, String>,
    /// The discovery documents of every tenant with a `public_url`.
    pub published: Published,
    /// Tenant host names (`tenant::host_key`) → the tenant routed there.
    pub hosts: HashMap<String, Arc<TenantUnit>>,
    /// SNI host name → the certificate of the tenant that names it.
    pub certs: HashMap<String, Arc<CertifiedKey>>,
    claims: Claims,
}

impl Routes {
    /// Whether a tenant defined in `origin` (a file name, or "the main
    /// config") could be added: nothing it needs is another tenant's.
    pub fn check(&self, t: &TenantConfig, origin: &str) -> Result<(), String> {
        self.claims.check(t, origin)
    }

    /// Route to `u`, or say what another tenant already has (and change nothing).
    pub fn add(&mut self, u: Arc<TenantUnit>) -> Result<(), String> {
        let t = &u.config;
        self.claims.claim(t, &u.origin())?;
        let auth = match &u.serve {
            Serve::Endpoint(ep) => {
                self.endpoints.insert(t.path.clone(), ep.clone());
                self.a2a.insert(crate::a2a::path_for(&t.path), ep.clone());
                ep.auth.as_ref()
            }
            Serve::Relay(m) => {
                self.relays.insert(t.path.clone(), m.clone());
                m.auth.as_ref()
            }
        };
        if let Some(a) = auth {
            self.metadata.insert(a.metadata_path(), t.path.clone());
        }
        if let Some(docs) = &u.docs {
            self.published
                .add(&t.path, &published_hosts(t), docs.clone());
        }
        for h in routed_hosts(t) {
            self.hosts.insert(h, u.clone());
        }
        if let Some(cert) = &u.cert {
            for n in sni_names(t) {
                self.certs.insert(n, cert.clone());
            }
        }
        self.units.insert(t.id.clone(), u);
        Ok(())
    }

    /// Stop routing to tenant `id`: every entry [`Routes::add`] made for it
    /// and its claims. The unit it had, if any.
    pub fn remove(&mut self, id: &str) -> Option<Arc<TenantUnit>> {
        let u = self.units.remove(id)?;
        let t = &u.config;
        self.claims.release(t, &u.origin());
        let auth = match &u.serve {
            Serve::Endpoint(ep) => {
                self.endpoints.remove(&t.path);
                self.a2a.remove(&crate::a2a::path_for(&t.path));
                ep.auth.as_ref()
            }
            Serve::Relay(m) => {
                self.relays.remove(&t.path);
                m.auth.as_ref()
            }
        };
        if let Some(a) = auth {
            self.metadata.remove(&a.metadata_path());
        }
        if u.docs.is_some() {
            self.published.remove(&t.path, &published_hosts(t), &t.id);
        }
        for h in routed_hosts(t) {
            self.hosts.remove(&h);
        }
        if u.cert.is_some() {
            for n in sni_names(t) {
                self.certs.remove(&n);
            }
        }
        Some(u)
    }
}

/// The host names a tenant is routed by (`hosts`).
fn routed_hosts(t: &TenantConfig) -> Vec<String> {
    t.hosts.iter().filter_map(|h| host_key(h)).collect()
}

/// The domains a tenant's discovery documents are served at the root of:
/// its `publish.hosts`, then its routed host names.
fn published_hosts(t: &TenantConfig) -> Vec<String> {
    let mut at = t.publish.hosts.clone();
    at.extend(
        routed_hosts(t)
            .into_iter()
            .filter(|h| !t.publish.hosts.contains(h)),
    );
    at
}

/// The SNI names a tenant's certificate is chosen for.
fn sni_names(t: &TenantConfig) -> impl Iterator<Item = String> + '_ {
    routed_hosts(t)
        .into_iter()
        .chain(t.publish.hosts.iter().filter_map(|h| host_key(h)))
}

/// What the tenants of one generation have taken: ids, paths (MCP and
/// A2A), routed host names, published domains and document prefixes. A
/// tenant that asks for something another has is refused, naming both.
#[derive(Debug, Clone, Default)]
struct Claims {
    ids: HashMap<String, String>,
    paths: HashMap<String, (String, bool)>,
    hosts: HashMap<String, String>,
    published: HashMap<String, String>,
    prefixes: HashMap<String, String>,
}

impl Claims {
    /// Take what `t` needs, or say what is taken (and take nothing).
    fn claim(&mut self, t: &TenantConfig, origin: &str) -> Result<(), String> {
        self.check(t, origin)?;
        let c = Claim::of(t, origin);
        self.ids.insert(t.id.clone(), c.owner.clone());
        for (p, a2a) in c.paths {
            self.paths.insert(p, (c.owner.clone(), a2a));
        }
        for h in c.hosts {
            self.hosts.insert(h, c.owner.clone());
        }
        for h in c.published {
            self.published.insert(h, c.owner.clone());
        }
        if let Some(p) = c.prefix {
            self.prefixes.insert(p, c.owner);
        }
        Ok(())
    }

    /// Give back what `claim(t, origin)` took (what another owner holds stays).
    fn release(&mut self, t: &TenantConfig, origin: &str) {
        let c = Claim::of(t, origin);
        let mine = |map: &mut HashMap<String, String>, k: &str| {
            if map.get(k) == Some(&c.owner) {
                map.remove(k);
            }
        };
        mine(&mut self.ids, &t.id);
        for h in &c.hosts {
            mine(&mut self.hosts, h);
        }
        for h in &c.published {
            mine(&mut self.published, h);
        }
        if let Some(p) = &c.prefix {
            mine(&mut self.prefixes, p);
        }
        for (p, _) in &c.paths {
            if self.paths.get(p).is_some_and(|(o, _)| *o == c.owner) {
                self.paths.remove(p);
            }
        }
    }

    /// Whether `t` could take what it needs.
    fn check(&self, t: &TenantConfig, origin: &str) -> Result<(), String> {
        let c = Claim::of(t, origin);
        let taken = |map: &HashMap<String, String>, k: &str| map.get(k).cloned();
        if let Some(o) = taken(&self.ids, &t.id) {
            return Err(format!("id: tenant id {:?} is already {o}", t.id));
        }
        for (p, a2a) in &c.paths {
            match self.paths.get(p) {
                Some((o, false)) if !a2a => {
                    return Err(format!("path: {p:?} is already mounted by {o}"))
                }
                Some((o, _)) => {
                    return Err(format!(
                        "path: {p} is both an A2A path (an MCP path with the last segment replaced by a2a) and already a tenant's MCP path ({o} has one of them)"
                    ))
                }
                None => {}
            }
        }
        for h in &c.hosts {
            if let Some(o) = taken(&self.hosts, h).or_else(|| taken(&self.published, h)) {
                return Err(format!("hosts: {h:?} is already {o}'s"));
            }
        }
        for h in &c.published {
            let bare = host_key(h).unwrap_or_default();
            if let Some(o) = taken(&self.published, h).or_else(|| taken(&self.hosts, &bare)) {
                return Err(format!("publish.hosts: {h:?} is already {o}'s"));
            }
        }
        if let Some(p) = &c.prefix {
            if let Some(o) = taken(&self.prefixes, p) {
                return Err(format!(
                    "path: {o} publishes under {p:?}/ (the path without its last segment); give each tenant its own"
                ));
            }
        }
        Ok(())
    }
}

/// What one tenant asks for.
struct Claim {
    owner: String,
    /// (path, is an A2A path)
    paths: Vec<(String, bool)>,
    hosts: Vec<String>,
    published: Vec<String>,
    prefix: Option<String>,
}

impl Claim {
    fn of(t: &TenantConfig, origin: &str) -> Claim {
        let relay = matches!(t.backend, BackendConfig::Relay(_));
        let mut paths = vec![(t.path.clone(), false)];
        if !relay {
            paths.push((crate::a2a::path_for(&t.path), true));
        }
        Claim {
            owner: format!("tenant {} ({origin})", t.id),
            paths,
            hosts: routed_hosts(t),
            published: t
                .publish
                .hosts
                .iter()
                .map(|h| crate::host::host_table_key(h))
                .collect(),
            prefix: (t.public_url.is_some() && !relay)
                .then(|| crate::host::prefix_of(&t.path).to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Routes;
    use crate::config::Config;
    use crate::gateway::ConfigGeneration;
    use std::collections::BTreeSet;

    /// A tenant of kind "mcp" (no file, no network: `check`'s offline clients)
    /// on its own path and host, published at its own domain.
    fn tenant(id: &str) -> String {
        format!(
            r#"
[[tenants]]
id = "{id}"
path = "/aap/3.0.0/{id}/mcp"
hosts = ["mcp.{id}.example"]
public_url = "https://mcp.{id}.example/aap/3.0.0/{id}/mcp"
skills = ["dealer.information", "inventory.search"]
[tenants.publish]
hosts = ["www.{id}.example"]
[tenants.backend]
kind = "mcp"
peers = ["http://127.0.0.1:9"]
path = "/mcp"
"#
        )
    }

    fn routes_of(ids: &[&str], state: &std::path::Path) -> Routes {
        let mut text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n[state]\ndir = {:?}\n",
            state.display().to_string()
        );
        for id in ids {
            text.push_str(&tenant(id));
        }
        let config = Config::parse(&text, &state.join("gateway.toml")).expect("a valid config");
        ConfigGeneration::build(config, 1)
            .expect("it builds")
            .routes
            .clone()
    }

    /// Every key of every map, so two `Routes` can be compared.
    fn keys(r: &Routes) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut put = |map: &str, k: &String| {
            out.insert(format!("{map}:{k}"));
        };
        r.units.keys().for_each(|k| put("unit", k));
        r.endpoints.keys().for_each(|k| put("endpoint", k));
        r.a2a.keys().for_each(|k| put("a2a", k));
        r.relays.keys().for_each(|k| put("relay", k));
        r.metadata.keys().for_each(|k| put("metadata", k));
        r.hosts.keys().for_each(|k| put("host", k));
        r.certs.keys().for_each(|k| put("cert", k));
        r.claims.ids.keys().for_each(|k| put("claim-id", k));
        r.claims.paths.keys().for_each(|k| put("claim-path", k));
        r.claims.hosts.keys().for_each(|k| put("claim-host", k));
        r.claims
            .published
            .keys()
            .for_each(|k| put("claim-published", k));
        r.claims
            .prefixes
            .keys()
            .for_each(|k| put("claim-prefix", k));
        for id in ["a", "b", "c"] {
            if r.published.tenant(id).is_some() {
                out.insert(format!("published:{id}"));
            }
        }
        out
    }

    #[test]
    fn remove_undoes_add_and_leaves_the_others_as_built_without_it() {
        let dir = std::env::temp_dir().join(format!("aap-routes-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let all = routes_of(&["a", "b", "c"], &dir);
        let without_b = routes_of(&["a", "c"], &dir);
        assert!(keys(&all).len() > keys(&without_b).len());

        let mut r = all.clone();
        let b = r.remove("b").expect("b was routed");
        assert_eq!(
            keys(&r),
            keys(&without_b),
            "removing b leaves what a build without b has"
        );
        assert!(
            all.units.contains_key("b") && all.endpoints.contains_key("/aap/3.0.0/b/mcp"),
            "the generation it was cloned from still routes b"
        );
        assert!(r.remove("b").is_none(), "nothing left to remove");

        // What b held is free again: the same unit is added back as it was.
        r.add(b.clone()).expect("b's claims were released");
        assert_eq!(keys(&r), keys(&all));
        let again = r.add(b).expect_err("b is routed already");
        assert!(again.contains("already"), "{again}");
        assert_eq!(keys(&r), keys(&all), "a refused add changes nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
