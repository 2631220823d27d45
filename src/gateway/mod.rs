//! Routing and the request pipeline: [`Gateway`] holds the current [`ConfigGeneration`], routes each
//! request to a tenant, runs admission and the endpoint or relay, and ends every answer in `logging`.
//!
//! `generation` builds a generation from a config (the composition root) out of per-tenant
//! units (`tenant`); `tenant_dir` reads tenant files and `tenant_apply` applies them one at a
//! time; `admission` holds the one admission order every tenant kind shares; `mount` is the one
//! serve pipeline (CORS, admission, the binding) for the MCP endpoint, the A2A binding and the
//! relay.

mod admission;
mod cors;
mod generation;
pub mod history;
mod mount;
mod publish;
mod retire;
mod routes;
mod tenant;
mod tenant_apply;
pub mod tenant_dir;

pub use generation::{Changed, ConfigGeneration, TenantFile};
pub use publish::Published;
pub use tenant::{host_key, BuildError, RelayTenant, Serve, TenantUnit};

use crate::config::Config;
use crate::context::RequestCtx;
use crate::exchange::{HttpRequest, HttpResponse};
use crate::platform::Platform;
use crate::telemetry::ServerSpan;
use admission::{head_auth, head_outcome};
use arc_swap::ArcSwap;
use mount::Mount;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tenant::TenantEndpoint;

/// Re-reads the configuration source (the file plus CLI overrides).
pub type ConfigLoader = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

pub struct Gateway {
    runtime: ArcSwap<ConfigGeneration>,
    loader: Option<ConfigLoader>,
    reload_lock: tokio::sync::Mutex<()>,
    /// The TLS listener's per-name certificates, refreshed on every swap.
    sni: std::sync::OnceLock<crate::tls::SniNames>,
    /// The process's registries (the first generation's; every later one shares them).
    platform: Arc<Platform>,
    /// The last reloads, for the admin views.
    history: history::History,
    /// Swapped-out generations, freed on a thread of their own.
    retired: retire::Retired,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("generation", &self.runtime.load().generation)
            .finish()
    }
}

/// Connection-level limits (see `[limits]` in `gateway.toml`).
#[derive(Debug, Clone, Copy)]
pub struct IoLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_body: usize,
}

impl Gateway {
    pub fn new(runtime: ConfigGeneration) -> Gateway {
        crate::metrics::METRICS
            .config_generation
            .set(runtime.generation as i64);
        runtime.configure_metrics(Changed::All);
        let platform = runtime.platform().clone();
        tenant_apply::publish_metrics(&platform.metrics.tenant_files, &runtime);
        Gateway {
            runtime: ArcSwap::from_pointee(runtime),
            loader: None,
            reload_lock: tokio::sync::Mutex::new(()),
            sni: std::sync::OnceLock::new(),
            retired: retire::Retired::new(platform.memory.clone()),
            platform,
            history: history::History::default(),
        }
    }

    pub fn with_loader(mut self, loader: ConfigLoader) -> Gateway {
        self.loader = Some(loader);
        self
    }

    /// Re-read the configuration and swap it in. In-flight requests finish
    /// on the runtime they started with; an invalid config (or a peer name
    /// that does not resolve) is refused and the current one keeps serving.
    pub async fn reload_from_source(&self) -> Result<u64, String> {
        let _one_at_a_time = self.reload_lock.lock().await;
        // Reading the files and building the generation is CPU work as large
        // as the tenant list: it runs below the request workers' priority.
        let result = crate::background::run_low_priority("reload", || {
            let config = self
                .loader
                .as_ref()
                .ok_or_else(|| "no configuration source to reload from".to_string())
                .and_then(|loader| loader())?;
            self.reload_now(config).map_err(|e| e.to_string())
        })
        .unwrap_or_else(|| Err("the reload stopped unexpectedly (see the log)".into()));
        self.history.record(&result, self.current().generation);
        let m = &crate::metrics::METRICS;
        match &result {
            Ok(g) => {
                m.reloads.with_label_values(&["ok"]).inc();
                m.config_generation.set(*g as i64);
                tracing::info!(generation = g, "configuration reloaded");
            }
            Err(e) => {
                m.reloads.with_label_values(&["rejected"]).inc();
                tracing::error!(error = %e, "configuration reload rejected; the previous configuration keeps serving");
            }
        }
        result
    }

    pub fn current(&self) -> Arc<ConfigGeneration> {
        self.runtime.load_full()
    }

    /// The process's registries (every generation of this gateway shares them).
    pub fn platform(&self) -> &Arc<Platform> {
        &self.platform
    }

    /// The last reloads (`GET /admin/reloads`).
    pub fn history(&self) -> &history::History {
        &self.history
    }

    /// Serve the tenants' certificates (`[tenants.tls]`) on the TLS
    /// listener through `names`, from now on and after every swap.
    pub fn serve_certificates(&self, names: crate::tls::SniNames) {
        names.store(Arc::new(self.current().routes.certs.clone()));
        let _ = self.sni.set(names);
    }

    /// Publish a new generation: requests that start from now on use it;
    /// those in flight finish on the one they started with. The metrics
    /// learn its tenants (added or removed by the config or a tenant file).
    fn swap(&self, rt: ConfigGeneration, changed: Changed<'_>) {
        crate::metrics::METRICS
            .config_generation
            .set(rt.generation as i64);
        rt.configure_metrics(changed);
        tenant_apply::publish_metrics(&self.platform.metrics.tenant_files, &rt);
        if let Some(names) = self.sni.get() {
            names.store(Arc::new(rt.routes.certs.clone()));
        }
        self.retired.retire(self.runtime.swap(Arc::new(rt)));
    }

    pub fn max_body_bytes(&self) -> usize {
        self.runtime.load().config.limits.max_body_bytes
    }

    /// (max header count, max total header bytes).
    pub fn header_limits(&self) -> (usize, usize) {
        let l = &self.runtime.load().config.limits;
        (l.max_headers, l.max_header_bytes)
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.runtime.load().config.limits.body_read_timeout_ms)
    }

    /// The connection-level limits the ingress applies, read once per request.
    pub fn io_limits(&self) -> IoLimits {
        let l = &self.runtime.load().config.limits;
        IoLimits {
            header_timeout: Duration::from_millis(l.header_read_timeout_ms),
            idle_timeout: Duration::from_secs(l.idle_timeout_secs),
            body_timeout: Duration::from_millis(l.body_read_timeout_ms),
            max_body: l.max_body_bytes,
        }
    }

    /// Handle one request end to end and log it: `new_ctx`, `route`, then
    /// admission and the tenant's endpoint or relay, then `logging` (see
    /// `aap_core::context` for the phases). For a caller that writes the
    /// answer itself, [`Gateway::handle_traced`] logs after the write instead.
    pub async fn handle(&self, req: HttpRequest) -> HttpResponse {
        let (resp, answered) = self.handle_traced(req).await;
        answered.unwritten();
        resp
    }

    /// [`Gateway::handle`] without its last phase: the answer, and what the
    /// transport calls [`Answered::written`] on once the answer is written.
    pub async fn handle_traced(&self, req: HttpRequest) -> (HttpResponse, Answered) {
        let mut ctx = RequestCtx::of_request(&req);
        crate::telemetry::start(&mut ctx, &req);
        let rt = self.runtime.load_full();
        let metadata_of = |path: &String| {
            rt.routes
                .endpoints
                .get(path)
                .map(|ep| (ep.tenant.as_str(), ep.auth.as_ref()))
                .or_else(|| {
                    rt.routes
                        .relays
                        .get(path)
                        .map(|m| (m.tenant.as_str(), m.auth.as_ref()))
                })
        };
        let mut route = None;
        let target = target(&rt, &req);
        // On a tenant's own host only that tenant's documents and metadata.
        let host_unit = match target {
            Target::Host(u) => Some(u),
            _ => None,
        };
        let resp = match target {
            Target::Endpoint(ep) => {
                route = Some(ep.path.as_str());
                mount::serve(Mount::Mcp(&ep.endpoint, &ep.mcp), &req, &mut ctx).await
            }
            Target::Relay(m) => {
                route = Some(req.path.as_str());
                mount::serve(Mount::Relay(m, &rt), &req, &mut ctx).await
            }
            Target::A2a(ep) => {
                route = Some(req.path.as_str());
                mount::serve(Mount::A2a(ep), &req, &mut ctx).await
            }
            Target::Host(_) | Target::Path => {
                let metadata = rt
                    .routes
                    .metadata
                    .get(&req.path)
                    .filter(|p| host_unit.is_none_or(|u| &u.config.path == *p))
                    .and_then(metadata_of);
                let docs = rt
                    .routes
                    .published
                    .route(&req)
                    .filter(|(d, _)| host_unit.is_none_or(|u| d.tenant == u.id()));
                if let Some((tenant, auth)) = metadata {
                    ctx.tenant = Some(tenant.to_owned());
                    ctx.outcome = "metadata".into();
                    // Public (a browser client is pointed at it): any origin may read it.
                    match (auth, req.method.as_str()) {
                        (Some(a), "GET" | "HEAD") => cors::public(
                            HttpResponse::json(200, &a.metadata())
                                .with_header("cache-control", "max-age=300"),
                        ),
                        (Some(_), "OPTIONS") => {
                            ctx.outcome = "preflight".into();
                            cors::public_preflight().with_header("allow", "GET, HEAD, OPTIONS")
                        }
                        _ => HttpResponse::json(405, &json!({"error": "method_not_allowed"}))
                            .with_header("allow", "GET, HEAD, OPTIONS"),
                    }
                } else if let Some((docs, kind)) = docs {
                    publish::serve(docs, kind, &req, &mut ctx)
                } else {
                    ctx.outcome = "no_route".into();
                    not_found(&rt, &req)
                }
            }
        };
        finish(ctx, resp, route)
    }

    /// For a request with `Expect: 100-continue`: the answer to send at
    /// once, instead of `100 Continue`, when the head alone already decides
    /// a refusal — unknown path (404), Origin (403), HTTP method (405),
    /// `Content-Type` (415), `Accept` (406), a missing or invalid token
    /// (401/403) — in the admission order of [`Gateway::handle`]. `None`
    /// means the body is wanted. Rate limits are not applied here (that
    /// would take a token twice); scope checks that need the tool name wait
    /// for the body. Logged and counted like any other answer, once the
    /// transport calls [`Answered::written`].
    pub async fn answer_before_body(&self, req: &HttpRequest) -> Option<(HttpResponse, Answered)> {
        let mut ctx = RequestCtx::of_request(req);
        crate::telemetry::start(&mut ctx, req);
        let rt = self.runtime.load_full();
        let mount = match target(&rt, req) {
            Target::Endpoint(ep) => Mount::Mcp(&ep.endpoint, &ep.mcp),
            Target::Relay(m) => Mount::Relay(m, &rt),
            Target::A2a(ep) => Mount::A2a(ep),
            // Documents and metadata read no body worth refusing early; the
            // full pipeline decides (404 included).
            Target::Host(_) => return None,
            Target::Path
                if rt.routes.metadata.contains_key(&req.path)
                    || rt.routes.published.route(req).is_some() =>
            {
                return None
            }
            Target::Path => {
                ctx.outcome = "no_route".into();
                let resp = not_found(&rt, req);
                return Some(finish(ctx, resp, None));
            }
        };
        if let Mount::A2a(_) = mount {
            ctx.binding = "a2a";
        }
        ctx.tenant = Some(mount.tenant().to_owned());
        let err = match mount.head(req) {
            Some(e) => e,
            None => head_auth(mount.auth(), req).await?,
        };
        ctx.outcome = head_outcome(&err);
        let resp = mount.cors().decorate(req, mount.refuse_early(&err, req));
        Some(finish(ctx, resp, Some(&req.path)))
    }

    /// Build a new runtime and swap it in atomically. Nothing waits for
    /// DNS: a new cluster resolves its names in the background.
    pub async fn reload(&self, config: Config) -> Result<u64, BuildError> {
        self.reload_now(config)
    }

    /// [`Gateway::reload`], on the calling thread.
    fn reload_now(&self, config: Config) -> Result<u64, BuildError> {
        let dir = tenant_dir::read(&config).map_err(BuildError)?;
        let current = self.runtime.load_full();
        let generation = current.generation + 1;
        if config.server.listen != current.config.server.listen
            || config.server.admin_listen != current.config.server.admin_listen
        {
            tracing::warn!(
                "listen addresses cannot change on reload; restart (or upgrade) to move them"
            );
        }
        let rt =
            ConfigGeneration::build_with(config, dir, generation, Some(&current), &self.platform)
                .inspect_err(|_| self.platform.outboxes.discard_staged())?;
        self.swap(rt, Changed::All);
        // The tenants' lead outboxes take the new sinks only now.
        self.platform.outboxes.commit_staged();
        // The previous generation is freed here unless a request still
        // holds it (then by the `retire` thread), and what the build parsed
        // is given back to the system too.
        drop(current);
        if !self.retired.free_unreferenced() {
            self.platform.memory.release_freed();
        }
        Ok(generation)
    }
}

/// Where a request goes, by its `Host` and path.
enum Target<'a> {
    Endpoint(&'a Arc<TenantEndpoint>),
    Relay(&'a Arc<RelayTenant>),
    A2a(&'a Arc<TenantEndpoint>),
    /// A tenant's own host (its `hosts`), on a path that is none of its
    /// MCP or A2A paths: only its metadata and documents, else 404.
    Host(&'a TenantUnit),
    /// No tenant route by path: metadata, documents, or 404.
    Path,
}

/// Route a request. A `Host` (port and case ignored) that one tenant lists
/// in `hosts` goes to that tenant only: its MCP path or `/mcp` reach its
/// endpoint (or relay), its A2A path or `/a2a` its A2A binding. Any other
/// host is routed by path alone.
fn target<'a>(rt: &'a ConfigGeneration, req: &HttpRequest) -> Target<'a> {
    let on_host = (!rt.routes.hosts.is_empty())
        .then(|| req.header_str("host").and_then(host_key))
        .flatten()
        .and_then(|h| rt.routes.hosts.get(&h));
    if let Some(u) = on_host {
        let p = req.path.as_str();
        return match &u.serve {
            Serve::Endpoint(e) if p == e.path || p == "/mcp" => Target::Endpoint(e),
            Serve::Endpoint(e)
                if p == "/a2a"
                    || p == "/a2a/"
                    || rt
                        .routes
                        .a2a
                        .get(p.strip_suffix('/').unwrap_or(p))
                        .is_some_and(|a| Arc::ptr_eq(a, e)) =>
            {
                Target::A2a(e)
            }
            Serve::Relay(m) if p == u.config.path || p == "/mcp" => Target::Relay(m),
            _ => Target::Host(u),
        };
    }
    if let Some(e) = rt.routes.endpoints.get(&req.path) {
        Target::Endpoint(e)
    } else if let Some(m) = rt.routes.relays.get(&req.path) {
        Target::Relay(m)
    } else if let Some(e) = rt.routes.a2a.get(&req.path) {
        Target::A2a(e)
    } else if let Some(e) = req
        .path
        .strip_suffix('/')
        .and_then(|p| rt.routes.a2a.get(p))
    {
        // An A2A client that appends a slash to the interface URL.
        Target::A2a(e)
    } else {
        Target::Path
    }
}

/// Stamp the correlation id on an answer and hold its `logging` for after the
/// write: every answer of [`Gateway::handle`] and [`Gateway::answer_before_body`]
/// ends here. `route` is the tenant's mounted path the server span names.
fn finish(ctx: RequestCtx, resp: HttpResponse, route: Option<&str>) -> (HttpResponse, Answered) {
    let resp = resp.with_header("x-correlation-id", ctx.correlation_id.clone());
    let span = ServerSpan::of(&ctx, resp.status, route);
    let mut answered = Answered {
        status: resp.status,
        bytes_out: resp.body.len() as u64,
        logged: false,
        ctx,
        span,
    };
    // A streamed answer (an event stream) may stay open for long: its line is
    // written when it starts, as before, and its span when it ends.
    if resp.stream.is_some() {
        answered.log_line();
    }
    (resp, answered)
}

/// An answer made and not yet written: its `logging` phase (the access line and
/// `aap_requests_total`) and its server span wait for the write, as Pingora runs
/// `logging` after the response, so neither delays the answer (at a dealer's
/// sparse traffic the line's formatting and the log writer's wake-up sat on the
/// critical path of every call). Dropped without [`Answered::written`], the
/// request is still logged and its span exported.
pub struct Answered {
    ctx: RequestCtx,
    status: u16,
    bytes_out: u64,
    logged: bool,
    span: Option<ServerSpan>,
}

impl Answered {
    /// The answer is written (or its write failed): log and count it once, and
    /// end its server span with the `write` phase from `write_started`.
    pub fn written(mut self, write_started: std::time::Instant) {
        self.log(Some(write_started));
    }

    /// No transport writes this answer (the caller keeps it): log and count it
    /// once and export its span without a `write` phase.
    pub fn unwritten(mut self) {
        self.log(None);
    }

    fn log_line(&mut self) {
        if !std::mem::replace(&mut self.logged, true) {
            self.ctx.logging(self.status, self.bytes_out);
        }
    }

    fn log(&mut self, write_started: Option<std::time::Instant>) {
        self.log_line();
        match (self.span.take(), write_started) {
            (Some(span), Some(start)) => span.written(start),
            (Some(span), None) => span.export(),
            (None, _) => {}
        }
    }
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.log(None);
    }
}

/// The 404 of a path no route serves, in the shape of the binding the path looks like: an
/// A2A JSON-RPC error for a path whose last segment is `a2a`, else the gateway's JSON error.
/// A trailing slash after a tenant's MCP path names that exact path (the client's own path
/// is never echoed).
fn not_found(rt: &ConfigGeneration, req: &HttpRequest) -> HttpResponse {
    let path = req.path.as_str();
    let bare = path.strip_suffix('/').unwrap_or(path);
    if bare.rsplit('/').next() == Some(crate::a2a::PATH_SEGMENT) {
        let id = crate::mcp::jsonrpc::request_id(&req.body, rt.config.limits.max_json_depth);
        return HttpResponse::json(
            404,
            &json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": -32600,
                    "message": "No A2A endpoint is mounted at this path; a tenant's A2A path is its MCP path with the last segment replaced by a2a (see its Agent Card)"
                }
            }),
        );
    }
    let mcp = if bare == path {
        None
    } else {
        rt.routes
            .endpoints
            .get(bare)
            .map(|e| e.path.as_str())
            .or_else(|| rt.routes.relays.get(bare).map(|_| bare))
    };
    let message = match mcp {
        Some(p) => format!(
            "No MCP endpoint is mounted at this path; the MCP endpoint is {p} (without the trailing slash)"
        ),
        None => "No MCP endpoint is mounted at this path".to_owned(),
    };
    HttpResponse::json(404, &json!({ "error": "not_found", "message": message }))
}
