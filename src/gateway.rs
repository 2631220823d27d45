//! The gateway runtime: built from a [`Config`], routes requests to tenant
//! endpoints, writes one access-log line per request.

use crate::aap::catalog::{self, CatalogOptions};
use crate::aap::contract::{Contract, ContractConfig};
use crate::aap::cursor::CursorCodec;
use crate::aap::schemas::{SchemaSet, AAP_RELEASE};
use crate::aap::skill::Skill;
use crate::config::{BackendConfig, Config};
use crate::http::{HttpRequest, HttpResponse};
use crate::mcp::server::{CallerCtx, Endpoint, Outcome};
use crate::mcp::session::SessionStore;
use crate::state::local::LocalState;
use crate::state::{Bucket, SharedState};
use crate::upstream::embedded::{EmbeddedConfig, EmbeddedDealer};
use crate::upstream::Backend;
use arc_swap::ArcSwap;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything derived from one config generation.
#[derive(Debug)]
pub struct Runtime {
    pub config: Config,
    pub endpoints: HashMap<String, Arc<Endpoint>>,
    pub generation: u64,
}

#[derive(Debug)]
pub struct Gateway {
    runtime: ArcSwap<Runtime>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BuildError(pub String);

impl Runtime {
    pub fn build(config: Config, generation: u64) -> Result<Runtime, BuildError> {
        let schemas = Arc::new(
            match &config.schemas.dir {
                Some(dir) => SchemaSet::from_dir(&config.resolve(dir)),
                None => SchemaSet::embedded(),
            }
            .map_err(|e| BuildError(format!("schemas: {e}")))?,
        );
        let state_dir = config.state_dir();
        let state: Arc<dyn SharedState> = Arc::new(
            LocalState::open(&state_dir.join("idempotency.jsonl"))
                .map_err(|e| BuildError(format!("state: {e}")))?,
        );
        let idempotency_ttl = Duration::from_secs(config.state.idempotency_ttl_hours * 3600);
        let mut endpoints = HashMap::new();
        for t in &config.tenants {
            let err = |m: String| BuildError(format!("tenant {}: {m}", t.id));
            let backend: Arc<dyn Backend> = match &t.backend {
                BackendConfig::Embedded(e) => {
                    let key = match &e.cursor_secret {
                        Some(s) => s.as_bytes().to_vec(),
                        None => [
                            uuid::Uuid::new_v4().into_bytes(),
                            uuid::Uuid::new_v4().into_bytes(),
                        ]
                        .concat(),
                    };
                    let leads_file = e
                        .leads_file
                        .as_ref()
                        .map(|p| config.resolve(p))
                        .unwrap_or_else(|| state_dir.join(&t.id).join("leads.jsonl"));
                    Arc::new(
                        EmbeddedDealer::load(EmbeddedConfig {
                            inventory: config.resolve(&e.inventory),
                            dealer: config.resolve(&e.dealer),
                            leads_file,
                            default_limit: e.default_limit,
                            max_limit: e.max_limit,
                            cursor: CursorCodec::new(&key, e.cursor_ttl_secs * 1000),
                        })
                        .map_err(|e| err(e.to_string()))?,
                    )
                }
            };
            let skills: Vec<Skill> = t.skills.iter().filter_map(|s| Skill::from_id(s)).collect();
            let capabilities = backend.capabilities();
            if let Err(errors) = schemas.validate_stem("inventory-capabilities", &capabilities) {
                return Err(err(format!(
                    "inventory capabilities do not match their schema: {}",
                    Value::from(errors)
                )));
            }
            let opts = CatalogOptions {
                host_compat: t.host_compat,
                idempotency_ttl,
            };
            let tools =
                catalog::build(&schemas, &skills, Some(&capabilities), &opts).map_err(err)?;
            let mut quotas = Vec::new();
            if t.quotas.lead_submit_per_hour > 0 {
                quotas.push((
                    Skill::LeadSubmit,
                    Bucket {
                        capacity: t.quotas.lead_submit_per_hour,
                        per: Duration::from_secs(3600),
                    },
                ));
            }
            let contract = Contract {
                cfg: ContractConfig {
                    tenant: t.id.clone(),
                    idempotency_ttl,
                    quotas,
                },
                schemas: schemas.clone(),
                backend,
                state: state.clone(),
            };
            let endpoint = Endpoint {
                tenant: t.id.clone(),
                path: t.path.clone(),
                allowed_origins: t.allowed_origins.clone(),
                sessions: t.legacy_sessions.then(|| {
                    Arc::new(SessionStore::new(
                        Duration::from_secs(t.session_idle_secs),
                        100_000,
                    ))
                }),
                tools,
                page_size: t.tools_page_size,
                list_ttl_ms: t.list_ttl_ms,
                instructions: t.instructions.clone(),
                contract,
                server_name: config.server.name.clone(),
                max_body_bytes: config.limits.max_body_bytes,
                max_json_depth: config.limits.max_json_depth,
            };
            endpoints.insert(t.path.clone(), Arc::new(endpoint));
        }
        Ok(Runtime {
            config,
            endpoints,
            generation,
        })
    }
}

impl Gateway {
    pub fn new(runtime: Runtime) -> Gateway {
        Gateway {
            runtime: ArcSwap::from_pointee(runtime),
        }
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        self.runtime.load_full()
    }

    pub fn max_body_bytes(&self) -> usize {
        self.runtime.load().config.limits.max_body_bytes
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.runtime.load().config.limits.body_read_timeout_ms)
    }

    /// Handle one request end to end and log it.
    pub async fn handle(&self, req: HttpRequest) -> HttpResponse {
        let started = Instant::now();
        let rt = self.runtime.load_full();
        let correlation = correlation_id(&req);
        let mut out = Outcome::default();
        let (tenant, resp) = match rt.endpoints.get(&req.path) {
            Some(ep) => {
                let caller = CallerCtx {
                    scope: "anonymous",
                    private: false,
                };
                let resp = ep.handle(&req, &caller, &mut out).await;
                (Some(ep.tenant.as_str()), resp)
            }
            None => {
                out.outcome = "no_route".into();
                (None, not_found())
            }
        };
        let resp = resp.with_header("x-correlation-id", correlation.clone());
        tracing::info!(
            target: "access",
            correlation_id = %correlation,
            tenant = tenant.unwrap_or("-"),
            binding = "mcp",
            mcp_revision = out.revision.unwrap_or("-"),
            aap_version = AAP_RELEASE,
            http_method = %req.method,
            rpc_method = out.method.as_deref().unwrap_or("-"),
            skill = out.skill.unwrap_or("-"),
            outcome = %out.outcome,
            status = resp.status,
            filled = ?out.filled,
            latency_us = started.elapsed().as_micros() as u64,
            "request"
        );
        resp
    }

    /// Build a new runtime from a config and swap it in atomically.
    pub fn reload(&self, config: Config) -> Result<u64, BuildError> {
        let generation = self.runtime.load().generation + 1;
        let rt = Runtime::build(config, generation)?;
        self.runtime.store(Arc::new(rt));
        Ok(generation)
    }
}

fn not_found() -> HttpResponse {
    HttpResponse::json(
        404,
        &json!({
            "error": "not_found",
            "message": "No MCP endpoint is mounted at this path"
        }),
    )
}

/// Use the trace id of a valid W3C `traceparent`, else mint one.
fn correlation_id(req: &HttpRequest) -> String {
    if let Some(tp) = req.header_str("traceparent") {
        let parts: Vec<&str> = tp.trim().split('-').collect();
        if parts.len() == 4
            && parts[1].len() == 32
            && parts[1].bytes().all(|b| b.is_ascii_hexdigit())
            && parts[1] != "00000000000000000000000000000000"
        {
            return parts[1].to_ascii_lowercase();
        }
    }
    uuid::Uuid::new_v4().simple().to_string()
}
