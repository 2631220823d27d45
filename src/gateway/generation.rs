//! The composition root: a [`ConfigGeneration`] is everything built from one config — the shared
//! state, schemas, catalogs, one [`TenantUnit`] per tenant and the routing maps made from them.

use super::routes::Routes;
use super::tenant::{self, BuildError};
use super::tenant_dir;
use crate::aap::catalog::CatalogInterner;
use crate::aap::schemas::SchemaSet;
use crate::config::StateBackend;
use crate::config::{Config, TenantConfig};
use crate::file_stamp::Stamp;
use crate::platform::Platform;
use crate::state::redis::{RedisOptions, RedisState};
use crate::state::SharedState;
use imbl::OrdMap;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything derived from one config generation.
#[derive(Debug)]
pub struct ConfigGeneration {
    pub config: Arc<Config>,
    pub state: Arc<dyn SharedState>,
    /// The lead store (leads, idempotency records, outbox): `state` reaches
    /// its idempotency records; embedded tenants record their leads in it.
    pub store: Arc<dyn crate::store::LeadStore>,
    pub schemas: Arc<SchemaSet>,
    /// The shared settings every tenant was built against (`tenant::shared_key`).
    shared_key: String,
    /// One catalog (and its serialized tools/list pages) per distinct shape,
    /// shared by the tenants of this generation and, while the shared
    /// settings stay, of the next (a tenant file applied on its own too).
    catalogs: Arc<Mutex<CatalogInterner>>,
    /// The process's registries this generation was built from (`run`'s
    /// online platform, or an offline one for `check`, `catalog` and tests):
    /// what a tenant file applied later uses too.
    platform: Arc<Platform>,
    /// The files of `tenants_dir` this generation has seen, by file name.
    pub files: OrdMap<String, TenantFile>,
    /// Every tenant and what requests are routed by.
    pub routes: Routes,
    pub generation: u64,
}

/// One file of `tenants_dir` as last read.
#[derive(Debug, Clone)]
pub struct TenantFile {
    pub stamp: Stamp,
    /// The tenant serving from it (its id): the file's current version, or
    /// the previous one when the current was refused.
    pub tenant: Option<String>,
    /// Why the current version was refused.
    pub error: Option<String>,
}

impl ConfigGeneration {
    /// Build without connecting or looking up any host name (for `check`
    /// and `catalog`): on an offline platform of its own.
    pub fn build(config: Config, generation: u64) -> Result<ConfigGeneration, BuildError> {
        Self::build_from(config, generation, None, &Platform::offline())
    }

    /// Build for `run`, before the server starts, on the process's
    /// `platform`. Host names are resolved in the background by each
    /// cluster (`upstream::cluster`), never here.
    pub fn start(
        config: Config,
        generation: u64,
        platform: &Arc<Platform>,
    ) -> Result<ConfigGeneration, BuildError> {
        Self::build_from(config, generation, None, platform)
    }

    /// Build from the config alone (its `tenants_dir` read here); see
    /// [`ConfigGeneration::build_with`].
    pub fn build_from(
        config: Config,
        generation: u64,
        previous: Option<&ConfigGeneration>,
        platform: &Arc<Platform>,
    ) -> Result<ConfigGeneration, BuildError> {
        let dir = tenant_dir::read(&config).map_err(BuildError)?;
        Self::build_with(config, dir, generation, previous, platform)
    }

    /// Build a runtime from the config and the tenant files read from its
    /// `tenants_dir`. On reload, `previous` lends what must outlive a
    /// config generation: the shared state, and every tenant whose
    /// fingerprint is unchanged (whole); a changed tenant keeps its backend
    /// (lead log, cursor key) and legacy sessions when those are unchanged.
    /// Upstream clients come from `platform`'s clusters, which keep a
    /// cluster's client while its settings stay; no host name is looked up here.
    ///
    /// A main-config tenant that fails fails the build (the caller discards
    /// what the build staged in the lead outboxes); a tenant file that fails
    /// is refused alone (its previous version, if any, keeps serving, and
    /// the outbox policy its build staged is discarded).
    pub fn build_with(
        config: Config,
        dir: Vec<tenant_dir::FileRead>,
        generation: u64,
        previous: Option<&ConfigGeneration>,
        platform: &Arc<Platform>,
    ) -> Result<ConfigGeneration, BuildError> {
        let digest = schemas_digest(&config);
        let schemas = match previous {
            Some(p) if schemas_digest(&p.config) == digest => p.schemas.clone(),
            _ => Arc::new(
                match &config.schemas.dir {
                    Some(dir) => SchemaSet::from_dir(&config.resolve(dir)),
                    None => SchemaSet::embedded(),
                }
                .map_err(|e| BuildError(format!("schemas: {e}")))?,
            ),
        };
        let state_dir = config.state_dir();
        let state_key = |c: &Config| {
            format!(
                "{:?}|{:?}|{:?}|{}|{:?}|{}|{}|{}",
                c.state_dir(),
                c.state.backend,
                c.state.redis_url,
                c.state.redis_prefix,
                c.state.redis_ca_file.as_ref().map(|p| c.resolve(p)),
                c.state.redis_connect_timeout_ms,
                c.state.redis_command_timeout_ms,
                c.state.redis_wait_replicas,
            )
        };
        let _ = &state_dir;
        let state_key = |c: &Config| {
            format!(
                "{}|{}|{}",
                state_key(c),
                crate::store::store_key(c),
                c.state.claim_lease_ms
            )
        };
        let reuse_state = previous.filter(|p| state_key(&p.config) == state_key(&config));
        let (state, store): (Arc<dyn SharedState>, Arc<dyn crate::store::LeadStore>) =
            match reuse_state {
                Some(p) => (p.state.clone(), p.store.clone()),
                None => {
                    // Counters (token buckets) stay in process or on Redis;
                    // idempotency records live in the lead store.
                    let counters: Arc<dyn SharedState> = match config.state.backend {
                        StateBackend::Local => Arc::new(crate::store::LocalCounters::default()),
                        StateBackend::Redis => Arc::new(
                            RedisState::new(&RedisOptions::from_config(&config))
                                .map_err(BuildError)?,
                        ),
                    };
                    let store_metrics = &platform.metrics.store;
                    let store = crate::store::open(&config, &platform.locks, store_metrics)
                        .map_err(|e| BuildError(format!("state: {e}")))?;
                    let state = Arc::new(crate::store::StoreState {
                        store: store.clone(),
                        counters,
                        lease: Duration::from_millis(config.state.claim_lease_ms),
                        metrics: store_metrics.clone(),
                    });
                    (state as Arc<dyn SharedState>, store)
                }
            };
        let key = tenant::shared_key(&config, &digest);
        // The catalogs of the previous generation while the shared settings
        // (schemas, idempotency TTL) stay: kept and rebuilt tenants share.
        let catalogs = match previous {
            Some(p) if p.shared_key == key => {
                let c = p.catalogs.clone();
                c.lock().unwrap_or_else(|e| e.into_inner()).prune();
                c
            }
            _ => Arc::default(),
        };
        let shared = tenant::Shared {
            config: &config,
            schemas: &schemas,
            state: &state,
            store: &store,
            state_kept: reuse_state.is_some(),
            key: &key,
            platform,
            catalogs: &catalogs,
        };
        let before = |id: &str| previous.and_then(|p| p.routes.units.get(id));
        let mut routes = Routes::default();
        for t in &config.tenants {
            let origin = "the main config";
            let tenant_error = |e: String| BuildError(format!("tenant {}: {e}", t.id));
            routes.check(t, origin).map_err(tenant_error)?;
            let unit = tenant::build(t.clone(), None, &shared, before(&t.id))?;
            routes.add(unit).map_err(tenant_error)?;
        }
        let mut files = OrdMap::new();
        for f in dir {
            // What served from this file so far (kept if the new version is refused).
            let old = previous
                .and_then(|p| p.files.get(&f.name))
                .and_then(|e| e.tenant.as_deref())
                .and_then(before)
                .filter(|u| u.file.as_deref() == Some(f.name.as_str()));
            let built = f.result.and_then(|t| {
                routes.check(&t, &f.name)?;
                let prior = before(&t.id).filter(|u| u.file.as_deref() == Some(f.name.as_str()));
                let id = t.id.clone();
                tenant::build(t, Some(f.name.clone()), &shared, prior).map_err(|e| {
                    // Its previous version (if any) keeps its sinks.
                    platform.outboxes.discard_staged_of(&id);
                    e.0
                })
            });
            let entry = match built {
                Ok(unit) => {
                    let id = unit.id().to_owned();
                    routes
                        .add(unit)
                        .map_err(|e| BuildError(format!("{}: {e}", f.name)))?;
                    TenantFile {
                        stamp: f.stamp,
                        tenant: Some(id),
                        error: None,
                    }
                }
                Err(e) => {
                    tenant_dir::log_refused(&f.name, &e, old.is_some());
                    let kept = old.filter(|u| routes.add((*u).clone()).is_ok());
                    TenantFile {
                        stamp: f.stamp,
                        tenant: kept.map(|u| u.id().to_owned()),
                        error: Some(e),
                    }
                }
            };
            files.insert(f.name, entry);
        }
        Ok(ConfigGeneration {
            config: Arc::new(config),
            state,
            store,
            schemas,
            shared_key: key,
            catalogs,
            platform: platform.clone(),
            files,
            routes,
            generation,
        })
    }

    /// The shared settings this generation's tenants were built against.
    pub(super) fn shared(&self) -> tenant::Shared<'_> {
        tenant::Shared {
            config: &self.config,
            schemas: &self.schemas,
            state: &self.state,
            store: &self.store,
            state_kept: true,
            key: &self.shared_key,
            platform: &self.platform,
            catalogs: &self.catalogs,
        }
    }

    /// The process's registries this generation was built from.
    pub fn platform(&self) -> &Arc<Platform> {
        &self.platform
    }

    /// The next generation: the same shared parts with `routes` and `files`
    /// (a one-tenant apply's, made from this generation's).
    pub(super) fn with_routes(
        &self,
        routes: Routes,
        files: OrdMap<String, TenantFile>,
    ) -> ConfigGeneration {
        ConfigGeneration {
            config: self.config.clone(),
            state: self.state.clone(),
            store: self.store.clone(),
            schemas: self.schemas.clone(),
            shared_key: self.shared_key.clone(),
            catalogs: self.catalogs.clone(),
            platform: self.platform.clone(),
            files,
            routes,
            generation: self.generation + 1,
        }
    }

    /// Every tenant's config, main-config tenants first (in order), then
    /// the tenant files' (by file name).
    pub fn tenants(&self) -> Vec<&TenantConfig> {
        let mut out: Vec<&TenantConfig> = self.config.tenants.iter().collect();
        out.extend(
            self.files
                .values()
                .filter_map(|f| f.tenant.as_deref())
                .filter_map(|id| self.routes.units.get(id))
                .map(|u| &u.config),
        );
        out
    }

    /// The tenant files refused (name, problem), in name order.
    pub fn refused_files(&self) -> Vec<(&str, &str)> {
        self.files
            .iter()
            .filter_map(|(n, f)| f.error.as_deref().map(|e| (n.as_str(), e)))
            .collect()
    }

    /// Tell the metrics which tenants this generation serves (main-config
    /// tenants and tenant files alike) and which of them get their own
    /// `tenant` label (`[telemetry] tenant_metrics`), when it is installed.
    pub fn configure_metrics(&self, changed: Changed<'_>) {
        let tm = &self.config.telemetry.tenant_metrics;
        let n = self.routes.units.len();
        if let Changed::One { removed, added } = changed {
            // The tenant count before the change, and whether the change
            // flips the label of tenants it does not name.
            let before = n + usize::from(removed.is_some()) - usize::from(added.is_some());
            if tm.labels("", before) == tm.labels("", n) {
                crate::metrics::retenant(removed, added.map(|id| (id, tm.labels(id, n))));
                return;
            }
        }
        crate::metrics::configure_tenants(self.routes.units.keys().map(String::as_str), |id| {
            tm.labels(id, n)
        });
    }
}

/// What a new generation changed, for the metrics' tenant table.
#[derive(Debug, Clone, Copy)]
pub enum Changed<'a> {
    /// Anything (a full build or reload).
    All,
    /// At most one tenant: `removed` left, then `added` came (a tenant file applied).
    One {
        removed: Option<&'a str>,
        added: Option<&'a str>,
    },
}

/// A digest of the schema set in use: the embedded copies, or the files of
/// `schemas.dir` (so a reload notices schema files replaced in place).
fn schemas_digest(config: &Config) -> String {
    let Some(dir) = &config.schemas.dir else {
        return "embedded".to_owned();
    };
    let dir = config.resolve(dir);
    let mut h = Sha256::new();
    h.update(dir.display().to_string().as_bytes());
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    names.sort();
    for p in names {
        h.update(p.display().to_string().as_bytes());
        h.update(std::fs::read(&p).unwrap_or_default());
    }
    hex::encode(h.finalize())
}
