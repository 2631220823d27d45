//! `gateway.toml`: the config types, loading and parsing, and the admin token.
//! Defaults live in `defaults`, every check in `validate`; keep error texts there unchanged.
//!
//! Every problem is reported as `<file>: <key>: <problem>` so an operator can
//! go straight to the line.

mod defaults;
mod feed;
mod leads;
mod secret;
mod telemetry;
mod validate;

pub use feed::FeedConfig;
pub use leads::{
    validate_sinks, AdfContentType, AdfEmailSinkConfig, AdfHttpSinkConfig, AdfNetworkConfig,
    LeadSinkConfig, OutboxConfig, SmtpSecurity, WebhookSinkConfig,
};
pub use secret::{with_base_dir, Secret, SecretSource};
pub use telemetry::{TelemetryConfig, TenantMetrics, AUTO_TENANT_LABELS};

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The most header lines the ingress tokenizer holds; `limits.max_headers` is
/// checked against the parsed count and may not exceed this.
pub const MAX_HEADER_LINES: usize = 256;

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub schemas: SchemasConfig,
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
    /// A directory of tenant files (`*.toml`, one tenant each, the keys of
    /// one `[[tenants]]` entry at top level), relative to this file's
    /// directory; watched and applied one file at a time (see
    /// `aap_gateway::gateway::tenant_dir`). Unset: tenants only from `[[tenants]]`.
    #[serde(default)]
    pub tenants_dir: Option<PathBuf>,
    /// Named upstream clusters (`[[clusters]]`), referenced by a forwarding
    /// backend's `cluster = "name"`.
    #[serde(default)]
    pub clusters: Vec<ClusterConfig>,
    /// Request traces over OTLP (off by default).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Directory of the config file; relative paths resolve against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
    #[serde(skip)]
    pub source: PathBuf,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: String,
    pub admin_listen: String,
    #[serde(default = "defaults::default_threads")]
    pub threads: usize,
    #[serde(default = "defaults::default_server_name")]
    pub name: String,
    /// Terminate TLS (rustls) on `listen`. Absent: plaintext HTTP.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Write buffer of each client connection on `listen`, in bytes. A
    /// response whose head and body fit goes out in one write (one TCP
    /// segment burst) instead of two.
    #[serde(default = "defaults::default_write_buffer_bytes")]
    pub write_buffer_bytes: usize,
    /// Serve HTTP/2 with prior knowledge (h2c) on a plaintext `listen`: a
    /// connection that opens with the HTTP/2 preface is served as HTTP/2.
    /// Off: the preface is refused like any non-1.1 request (505). With
    /// `tls`, HTTP/2 is negotiated by ALPN instead and this must stay off.
    #[serde(default)]
    pub h2c: bool,
    /// The token the admin listener's mutating endpoints (`POST /reload`,
    /// `POST /idempotency/resolve`, any other non-GET) require, written in
    /// the config; or read from a file (`admin_token_file`) or an
    /// environment variable (`admin_token_env`). At most one of the three.
    #[serde(default)]
    pub admin_token: Option<Secret>,
    #[serde(default)]
    pub admin_token_file: Option<PathBuf>,
    #[serde(default)]
    pub admin_token_env: Option<String>,
    /// After SIGTERM: seconds the listeners keep serving while `/readyz`
    /// answers 503 (so a load balancer stops sending), before they close.
    #[serde(default)]
    pub shutdown_drain_secs: u64,
    /// After the listeners close: seconds requests in flight get to finish.
    #[serde(default = "defaults::default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
    /// The admin token from whichever source is configured, read when the
    /// config is loaded (and again on every reload, so a rotated file is
    /// picked up). `None`: the mutating admin endpoints are locked (403).
    #[serde(skip)]
    pub admin_secret: Option<Secret>,
}

/// Shortest admin token accepted (a guessable token is no lock).
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;
/// Largest accepted `server.shutdown_drain_secs` and `server.shutdown_grace_secs`.
pub const MAX_SHUTDOWN_SECS: u64 = 600;

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub max_body_bytes: usize,
    pub max_json_depth: usize,
    pub body_read_timeout_ms: u64,
    /// Time allowed for the whole request header to arrive (slowloris guard).
    pub header_read_timeout_ms: u64,
    /// How long an idle keep-alive connection stays open between requests.
    pub idle_timeout_secs: u64,
    /// More request headers than this → 431.
    pub max_headers: usize,
    /// Total request header bytes above this → 431.
    pub max_header_bytes: usize,
    /// Open ingress connections at most (0 = no limit); more → 503 and close.
    pub max_connections: usize,
    /// Open ingress connections per client address at most (0 = no limit);
    /// more → 429 and close.
    pub max_connections_per_ip: usize,
    /// HTTP/2: streams a client may have open at once on one connection
    /// (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused (RST_STREAM).
    pub max_concurrent_streams: u32,
    /// HTTP/2: memory one connection may hold in request bodies, unsent answers and its
    /// receive window; a stream that would go over waits for its turn.
    pub h2_connection_memory_bytes: usize,
    /// HTTP/2: memory reserved for each stream while its request is handled (its body
    /// and answer; a larger answer is counted whole).
    pub h2_stream_memory_bytes: usize,
    /// HTTP/2: memory all connections together may hold; new streams over it are
    /// refused (RST_STREAM REFUSED_STREAM).
    pub h2_memory_bytes: usize,
    /// HTTP/2: streams a client may reset before their answer, past which (and past half
    /// the connection's streams) the connection gets GOAWAY ENHANCE_YOUR_CALM.
    pub h2_max_resets: usize,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    pub dir: PathBuf,
    pub idempotency_ttl_hours: u64,
    /// `local` (durable file + in-process buckets) or `redis` (shared).
    pub backend: StateBackend,
    /// One Redis: `redis://[user:password@]host:port[/db]` or `rediss://…`
    /// (TLS). A Redis Cluster: `redis+cluster://[user:password@]host:port[,host:port…]`
    /// (seed nodes) or `rediss+cluster://…`. May hold a password: a [`Secret`].
    pub redis_url: Option<Secret>,
    /// PEM file of the CA(s) that sign the Redis servers' certificates
    /// (`rediss://`); unset: the system's trust store.
    pub redis_ca_file: Option<PathBuf>,
    /// Time allowed to open a connection to a Redis node (milliseconds).
    pub redis_connect_timeout_ms: u64,
    /// Time allowed for one Redis command or script to answer, retries and
    /// Cluster redirections included (milliseconds).
    pub redis_command_timeout_ms: u64,
    /// After each lead-path write (intent, lead record, result), wait until
    /// this many replicas acknowledge it, so a failover keeps it (0: off).
    pub redis_wait_replicas: u32,
    pub redis_prefix: String,
    /// Redis state: how long a lead claim without a result blocks other
    /// attempts before it counts as interrupted (milliseconds).
    pub claim_lease_ms: u64,
    /// Where leads, their idempotency records and their outbox live:
    /// `sqlite` (one file under `state.dir`) or `postgres` (a fleet).
    pub lead_store: LeadStoreKind,
    /// SQLite database file; default `<state.dir>/leads.sqlite3`.
    pub sqlite_file: Option<PathBuf>,
    /// `postgres://user:password@host:port/db`: a [`Secret`].
    pub postgres_url: Option<Secret>,
    /// Connections to PostgreSQL per instance at most.
    pub postgres_pool_size: u32,
    /// How long an outbox delivery lease lasts (ms): a dead instance's
    /// leased leads are taken by another this long after it leased them.
    pub lead_lease_ms: u64,
    /// How often each tenant's outbox looks for due deliveries (ms) when
    /// nothing wakes it (leads accepted by other instances, lapsed leases).
    pub outbox_poll_ms: u64,
    /// Lead records are kept this long (days), then pruned once every
    /// delivery of theirs is delivered.
    pub lead_retention_days: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LeadStoreKind {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    Local,
    Redis,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct SchemasConfig {
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub id: String,
    pub path: String,
    #[serde(default = "defaults::all_skills")]
    pub skills: Vec<String>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default)]
    pub legacy_sessions: bool,
    #[serde(default = "defaults::default_session_idle")]
    pub session_idle_secs: u64,
    #[serde(default = "defaults::default_page_size")]
    pub tools_page_size: usize,
    /// `true`/`false`, or the host compatibility profiles by name (docs/configuration.md).
    #[serde(default)]
    pub host_compat: crate::aap::compat::HostCompat,
    #[serde(default = "defaults::default_list_ttl")]
    pub list_ttl_ms: u64,
    #[serde(default)]
    pub instructions: Option<String>,
    pub backend: BackendConfig,
    #[serde(default)]
    pub quotas: QuotaConfig,
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
    #[serde(default)]
    pub auth: Option<crate::auth::AuthConfig>,
    /// The exact public URL of this tenant's MCP endpoint (HTTPS; plain
    /// http only on loopback). It is what the discovery documents name and,
    /// with `[tenants.auth]`, the OAuth resource (`auth.resource` may be
    /// left out; when given it must be this URL). Unset: nothing is published.
    #[serde(default)]
    pub public_url: Option<String>,
    /// The dealer identity the discovery documents carry.
    #[serde(default)]
    pub publish: PublishConfig,
    /// `[tenants.tls]`: the certificate served (chosen by SNI) for this
    /// tenant's `hosts`; needs `server.tls`.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Dealer domains that route to this tenant (`Host`, case-insensitive,
    /// port ignored): its MCP path, `/mcp` and its A2A path on that host.
    #[serde(default)]
    pub hosts: Vec<String>,
}

/// `[tenants.publish]`: who the dealer is and where its discovery documents
/// are served (see docs/publish.md).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PublishConfig {
    /// Display name of the dealer (Agent Card `name`, llms.txt title).
    /// Default: the tenant id.
    pub name: Option<String>,
    /// One-line description; default: generated from the name and skills.
    pub description: Option<String>,
    /// Dealer domains (`www.dealer.example`, optionally `:port`): a request
    /// whose `Host` is one of them gets the documents at the well-known
    /// paths (`/.well-known/agent-card.json`, `/llms.txt`, `/poppy.json`).
    pub hosts: Vec<String>,
    /// The organization operating the agent (Agent Card `provider`); both
    /// or neither.
    pub provider_name: Option<String>,
    pub provider_url: Option<String>,
}

/// HTTP-level token buckets (0 = off). Over budget → 429 + Retry-After.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    /// Sustained requests per second for the whole tenant.
    pub tenant_per_second: f64,
    /// Burst size for the tenant bucket (default: one second's worth, min 1).
    pub tenant_burst: u64,
    /// Sustained requests per second for one caller (token subject, else client IP).
    pub caller_per_second: f64,
    pub caller_burst: u64,
}

/// `[[clusters]]`: one set of upstream peers and the connection settings
/// every tenant that names it shares (one pool, one health check).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub name: String,
    pub peers: Vec<String>,
    #[serde(default = "defaults::default_connect_timeout")]
    pub connect_timeout_ms: u64,
    #[serde(default = "defaults::default_request_timeout")]
    pub request_timeout_ms: u64,
    #[serde(default = "defaults::default_health_interval")]
    pub health_check_interval_ms: u64,
    /// Idle keep-alive connections kept per peer address.
    #[serde(default = "defaults::default_pool_size")]
    pub pool_size: usize,
    /// How long an idle pooled connection is kept.
    #[serde(default = "defaults::default_pool_idle")]
    pub pool_idle_timeout_secs: u64,
    /// How often the peers' host names are looked up again.
    #[serde(default = "defaults::default_dns_refresh")]
    pub dns_refresh_secs: u64,
}

impl ClusterConfig {
    /// A cluster of `peers` with every connection setting at its default (what a
    /// `[[clusters]]` entry that names only `name` and `peers` gets).
    pub fn with_defaults(name: String, peers: Vec<String>) -> ClusterConfig {
        ClusterConfig {
            name,
            peers,
            connect_timeout_ms: defaults::default_connect_timeout(),
            request_timeout_ms: defaults::default_request_timeout(),
            health_check_interval_ms: defaults::default_health_interval(),
            pool_size: defaults::default_pool_size(),
            pool_idle_timeout_secs: defaults::default_pool_idle(),
            dns_refresh_secs: defaults::default_dns_refresh(),
        }
    }
}

/// Where a forwarding backend sends: a `[[clusters]]` entry, or the
/// backend's own inline `peers` and connection keys (an unnamed cluster).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Upstream {
    Named(String),
    Inline(ClusterConfig),
}

/// A forwarding backend's upstream keys as written: its `cluster`, or its inline `peers` and
/// connection timeouts (in [`UPSTREAM_TIMEOUT_KEYS`] order).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamKeys<'a> {
    pub peers: &'a [String],
    pub cluster: Option<&'a String>,
    pub timeouts: [Option<u64>; 3],
}

/// The connection keys a forwarding backend may set inline, or its cluster sets.
pub const UPSTREAM_TIMEOUT_KEYS: [&str; 3] = [
    "connect_timeout_ms",
    "request_timeout_ms",
    "health_check_interval_ms",
];

impl BackendConfig {
    /// The upstream keys of a forwarding backend (`None` for `embedded`).
    pub fn upstream_keys(&self) -> Option<UpstreamKeys<'_>> {
        let (peers, cluster, timeouts) = match self {
            BackendConfig::Embedded(_) => return None,
            BackendConfig::Mcp(m) => (
                &m.peers,
                &m.cluster,
                [
                    m.connect_timeout_ms,
                    m.request_timeout_ms,
                    m.health_check_interval_ms,
                ],
            ),
            BackendConfig::A2a(a) => (
                &a.peers,
                &a.cluster,
                [
                    a.connect_timeout_ms,
                    a.request_timeout_ms,
                    a.health_check_interval_ms,
                ],
            ),
            BackendConfig::Relay(x) => (
                &x.peers,
                &x.cluster,
                [
                    x.connect_timeout_ms,
                    x.request_timeout_ms,
                    x.health_check_interval_ms,
                ],
            ),
        };
        Some(UpstreamKeys {
            peers,
            cluster: cluster.as_ref(),
            timeouts,
        })
    }

    /// The upstream a forwarding backend names (`None` for `embedded`).
    pub fn upstream(&self) -> Option<Upstream> {
        let k = self.upstream_keys()?;
        let [c, r, h] = k.timeouts;
        Some(match k.cluster {
            Some(name) => Upstream::Named(name.clone()),
            None => {
                let mut inline = ClusterConfig::with_defaults(String::new(), k.peers.to_vec());
                inline.connect_timeout_ms = c.unwrap_or(inline.connect_timeout_ms);
                inline.request_timeout_ms = r.unwrap_or(inline.request_timeout_ms);
                inline.health_check_interval_ms = h.unwrap_or(inline.health_check_interval_ms);
                Upstream::Inline(inline)
            }
        })
    }
}

impl Config {
    /// The cluster settings a forwarding backend uses: its named cluster, or
    /// its inline settings (`None` for `embedded`, or a name that is not
    /// defined, which validation refuses).
    pub fn cluster_of(&self, b: &BackendConfig) -> Option<ClusterConfig> {
        match b.upstream()? {
            Upstream::Named(n) => self.clusters.iter().find(|c| c.name == n).cloned(),
            Upstream::Inline(c) => Some(c),
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum BackendConfig {
    /// Boxed: the largest variant by far (feed, sinks, outbox settings).
    Embedded(Box<EmbeddedBackendConfig>),
    /// A strict MCP server (2026-07-28 and/or 2025-11-25) serving the AAP tools.
    Mcp(McpBackendConfig),
    /// An A2A 1.0 agent serving the AAP extension.
    A2a(A2aBackendConfig),
    /// Any MCP server, relayed transparently (every method, GET streams,
    /// DELETE, sessions); the gateway only normalizes headers and admits.
    Relay(RelayBackendConfig),
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelayBackendConfig {
    /// `http[s]://host:port` of each upstream instance (round robin; a
    /// session stays on the instance that issued it).
    #[serde(default)]
    pub peers: Vec<String>,
    /// A `[[clusters]]` name, instead of `peers` and the connection keys.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The MCP endpoint path on every peer.
    #[serde(default = "defaults::default_mcp_path")]
    pub path: String,
    /// Unset: 2000 (or the cluster's).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// Time allowed for the response head, and between two chunks of a
    /// streamed POST answer (GET event streams may idle indefinitely).
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    #[serde(default)]
    pub health_check_interval_ms: Option<u64>,
    /// The upstream's own credential (sent as `Authorization: Bearer`); the
    /// client's credential is never forwarded.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
}

/// A strict MCP upstream.
///
/// The connection keys (`peers`, `cluster`, the three timeouts, `bearer_token`) are written out in each
/// forwarding backend's table (relay, mcp, a2a) rather than shared through `#[serde(flatten)]`: serde
/// cannot combine `flatten` with `deny_unknown_fields`, and a misspelt key in a backend table must be
/// refused. They are read in one place, [`BackendConfig::upstream_keys`].
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpBackendConfig {
    /// `http[s]://host:port` of each upstream instance (round robin).
    #[serde(default)]
    pub peers: Vec<String>,
    /// A `[[clusters]]` name, instead of `peers` and the connection keys.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The MCP endpoint path on every peer.
    #[serde(default = "defaults::default_mcp_path")]
    pub path: String,
    /// `"2026-07-28"`, `"2025-11-25"` or `"auto"` (probe, then fall back).
    #[serde(default = "defaults::default_revision")]
    pub revision: String,
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    #[serde(default)]
    pub health_check_interval_ms: Option<u64>,
    /// The upstream's own credential (sent as `Authorization: Bearer`).
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// Inventory capabilities to advertise (inventory-capabilities schema).
    #[serde(default)]
    pub capabilities: Option<serde_json::Value>,
    /// `"scoped"` or `"client"`: how `idempotency_key` is forwarded.
    #[serde(default)]
    pub lead_key: crate::backend::LeadKeyMode,
    /// The upstream deduplicates leads by `idempotency_key` (AAP requires
    /// 24 h), so a lead interrupted by a gateway crash may be resent.
    #[serde(default)]
    pub dedupes_leads: bool,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct A2aBackendConfig {
    #[serde(default)]
    pub peers: Vec<String>,
    /// A `[[clusters]]` name, instead of `peers` and the connection keys.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The JSON-RPC interface path on every peer.
    #[serde(default = "defaults::default_a2a_path")]
    pub path: String,
    /// Where the Agent Card is read when `extension_uri` is not set.
    #[serde(default = "defaults::default_card_path")]
    pub card_path: String,
    /// Exact AAP extension URI for `A2A-Extensions`; default: from the card.
    #[serde(default)]
    pub extension_uri: Option<String>,
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    #[serde(default)]
    pub health_check_interval_ms: Option<u64>,
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    #[serde(default)]
    pub capabilities: Option<serde_json::Value>,
    #[serde(default)]
    pub lead_key: crate::backend::LeadKeyMode,
    #[serde(default)]
    pub dedupes_leads: bool,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedBackendConfig {
    /// A JSON array of AAP vehicles (the same as a `feed` with
    /// `format = "json"` and `file`). Exactly one of `inventory` and `feed`.
    #[serde(default)]
    pub inventory: Option<PathBuf>,
    /// `[tenants.backend.feed]`: the inventory from a CSV, XML or JSON feed.
    #[serde(default)]
    pub feed: Option<FeedConfig>,
    pub dealer: PathBuf,
    /// The file store's leads file, imported into the lead store once.
    /// Default: `<state.dir>/<tenant id>/leads.jsonl`.
    #[serde(default)]
    pub leads_file: Option<PathBuf>,
    #[serde(default = "defaults::default_limit")]
    pub default_limit: usize,
    #[serde(default = "defaults::max_limit")]
    pub max_limit: usize,
    #[serde(default = "defaults::cursor_ttl")]
    pub cursor_ttl_secs: u64,
    /// Signing key for cursors; set it when several instances serve one tenant.
    #[serde(default)]
    pub cursor_secret: Option<Secret>,
    /// Where accepted leads are delivered (`[[tenants.backend.sinks]]`);
    /// none: leads are only recorded in the leads file.
    #[serde(default)]
    pub sinks: Vec<LeadSinkConfig>,
    /// Retry and dead-letter policy of the durable outbox that delivers
    /// leads to `sinks` (`[tenants.backend.outbox]`).
    #[serde(default)]
    pub outbox: OutboxConfig,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaConfig {
    /// Leads one caller may submit per hour (0 disables the quota).
    pub lead_submit_per_hour: u64,
}

/// The JSON Schema of `gateway.toml`, generated from [`Config`] and the types it holds (their
/// doc comments become descriptions): what `aap-gateway schema config` prints and
/// `docs/gateway.schema.json` ships, for editors that validate TOML against a schema. It checks
/// shape only (keys, types, enumerations); `check` still applies every rule of `validate`.
pub fn json_schema() -> serde_json::Value {
    titled(
        schemars::schema_for!(Config),
        "aap-gateway configuration (gateway.toml)",
    )
}

/// The JSON Schema of one tenant file of `tenants_dir` (the keys of one `[[tenants]]` entry at
/// top level): `aap-gateway schema tenant`, shipped as `docs/tenant.schema.json`.
pub fn tenant_json_schema() -> serde_json::Value {
    titled(
        schemars::schema_for!(TenantConfig),
        "aap-gateway tenant file (tenants_dir/*.toml)",
    )
}

fn titled(schema: schemars::Schema, title: &str) -> serde_json::Value {
    let mut v = schema.to_value();
    if let Some(o) = v.as_object_mut() {
        o.insert("title".into(), serde_json::Value::from(title));
    }
    v
}

/// Large enough for a search page of 20 vehicles (head and body, ~13 KB).
pub const DEFAULT_WRITE_BUFFER_BYTES: usize = 16_384;

#[derive(Debug, thiserror::Error)]
#[error("config error in {file}: {problem}")]
pub struct ConfigError {
    pub file: String,
    pub problem: String,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        // Secrets given as `{ file = … }` / `{ env = … }` are read here, on
        // every load and reload (see `secret`).
        let mut cfg: Config =
            with_base_dir(&base_dir, || toml::from_str(text)).map_err(|e| ConfigError {
                file: file.clone(),
                problem: toml_problem(&e, text),
            })?;
        cfg.source = path.to_path_buf();
        cfg.unify_public_urls();
        cfg.base_dir = base_dir;
        cfg.validate().map_err(|problem| ConfigError {
            file: file.clone(),
            problem,
        })?;
        cfg.server.admin_secret = cfg
            .read_admin_token()
            .map_err(|problem| ConfigError { file, problem })?;
        Ok(cfg)
    }

    /// One tenant file of `tenants_dir`: the keys of one `[[tenants]]`
    /// entry at top level. Secrets and relative paths resolve against this
    /// (the main) config's directory, like every path of the config. The
    /// tenant is checked on its own (its keys named without a prefix, e.g.
    /// `skills: …`); conflicts with other tenants (id, path, hosts) are the
    /// caller's to check. Errors never quote a secret.
    pub fn parse_tenant_file(&self, text: &str) -> Result<TenantConfig, String> {
        let mut t: TenantConfig = with_base_dir(&self.base_dir, || toml::from_str(text))
            .map_err(|e| toml_problem(&e, text))?;
        unify_public_url(&mut t);
        self.validate_tenant_alone(&|k: &str| k.to_owned(), &t)?;
        Ok(t)
    }

    /// The tenants directory, resolved against the config's directory.
    pub fn tenants_dir_path(&self) -> Option<PathBuf> {
        self.tenants_dir.as_deref().map(|d| self.resolve(d))
    }

    /// One public URL per tenant: `auth.resource` left out takes
    /// `public_url`, and `public_url` left out takes `auth.resource`
    /// (a difference between the two, both given, is a validation error).
    fn unify_public_urls(&mut self) {
        for t in &mut self.tenants {
            unify_public_url(t);
        }
    }

    /// Resolve a path from the config against the config's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The admin token from `server.admin_token`, `admin_token_file` or
    /// `admin_token_env`. A named variable that is unset or empty gives
    /// `None` (the mutating admin endpoints stay locked, and say how to
    /// unlock them); a named file that cannot be read is an error. Errors
    /// never contain the token.
    fn read_admin_token(&self) -> Result<Option<Secret>, String> {
        let s = &self.server;
        let sources = [
            s.admin_token.is_some(),
            s.admin_token_file.is_some(),
            s.admin_token_env.is_some(),
        ];
        if sources.iter().filter(|set| **set).count() > 1 {
            return Err("server.admin_token, server.admin_token_file, server.admin_token_env: set at most one".into());
        }
        let (key, value) = if let Some(t) = &s.admin_token {
            ("server.admin_token", t.expose().to_owned())
        } else if let Some(f) = &s.admin_token_file {
            let path = self.resolve(f);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                format!(
                    "server.admin_token_file: cannot read {}: {e}",
                    path.display()
                )
            })?;
            // A trailing newline (echo, editors, Kubernetes secrets made
            // from files) is not part of the token.
            ("server.admin_token_file", text.trim().to_owned())
        } else if let Some(var) = &s.admin_token_env {
            if var.is_empty() || var.contains(['=', '\0']) {
                return Err(
                    "server.admin_token_env: must be the name of an environment variable".into(),
                );
            }
            match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => ("server.admin_token_env", v.trim().to_owned()),
                Ok(_) | Err(std::env::VarError::NotPresent) => return Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!(
                        "server.admin_token_env: the variable {var} is not valid UTF-8"
                    ))
                }
            }
        } else {
            return Ok(None);
        };
        if value.chars().count() < MIN_ADMIN_TOKEN_CHARS {
            return Err(format!(
                "{key}: the admin token must be at least {MIN_ADMIN_TOKEN_CHARS} characters"
            ));
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{key}: the admin token must not contain spaces or control characters (it is sent as `Authorization: Bearer <token>`)"
            ));
        }
        Ok(Some(Secret::new(value)))
    }

    pub fn state_dir(&self) -> PathBuf {
        self.resolve(&self.state.dir)
    }
}

/// `Config::unify_public_urls` for one tenant.
fn unify_public_url(t: &mut TenantConfig) {
    let Some(a) = t.auth.as_mut() else { return };
    match (&t.public_url, a.resource.is_empty()) {
        (Some(u), true) => a.resource = u.clone(),
        (None, false) => t.public_url = Some(a.resource.clone()),
        _ => {}
    }
}

/// A TOML error as `<problem>`, without the quoted source line when that
/// line holds a secret (the token itself must not reach a log).
fn toml_problem(e: &toml::de::Error, text: &str) -> String {
    let full = e.to_string().trim_end().to_string();
    let span = e
        .span()
        .and_then(|s| Some((text.get(..s.start)?, text.get(s.start..)?)));
    if e.message().starts_with(secret::SECRET_ERROR_MARK) {
        // A `{ file = … }` / `{ env = … }` reference that could not be read:
        // the message names the file or variable, never a value.
        let Some((before, from)) = span else {
            return e.message().to_owned();
        };
        let (line_no, key) = secret_key_at(before, from);
        return format!("TOML parse error at line {line_no}: {key}: {}", e.message());
    }
    let Some((before, _)) = span else {
        return full;
    };
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line.trim_start().split(['=', ' ']).next().unwrap_or("");
    const SECRET_KEYS: &[&str] = &[
        "admin_token",
        "bearer_token",
        "cursor_secret",
        "redis_url",
        "postgres_url",
        "headers",
        "authorization",
    ];
    // Every value under `[telemetry.headers]` is a secret too.
    let in_secret_table = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .is_some_and(|t| t.replace(' ', "") == "[telemetry.headers]");
    if SECRET_KEYS.contains(&key) || in_secret_table {
        let line_no = before.matches('\n').count() + 1;
        // The message may quote the value too (serde's "invalid type: ...").
        format!(
            "TOML parse error at line {line_no}: {key} must be a quoted string, {{ file = \"path\" }} or {{ env = \"VARIABLE\" }} (the line is not shown: it holds a secret)"
        )
    } else {
        full
    }
}

/// The line number and key of the secret reference an error points at.
/// `from` is the text from the error's span on: the reference itself, or
/// (inside a table the deserializer buffers, such as `[tenants.backend]`)
/// the table's header: then the first line of that table holding a
/// `{ file = … }` or `{ env = … }` reference.
fn secret_key_at(before: &str, from: &str) -> (usize, String) {
    let first_line = before.matches('\n').count() + 1;
    // The span's own line may start before it: `key = { file = … }`.
    let own = &before[before.rfind('\n').map_or(0, |i| i + 1)..];
    if let Some((k, _)) = own.split_once('=') {
        let k = k.trim();
        if !k.is_empty() && !k.starts_with(['[', '{', '#']) {
            return (first_line, k.to_owned());
        }
    }
    for (n, line) in from.lines().enumerate() {
        if n > 0 && line.trim_start().starts_with('[') {
            break;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim_start();
        if v.starts_with('{') && (v.contains("file") || v.contains("env")) {
            return (first_line + n, k.trim().to_owned());
        }
    }
    (first_line, "a secret".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/nonexistent/gw.toml"))
    }

    #[test]
    fn the_admin_token_is_never_in_debug_output_or_errors() {
        let head = "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n";
        let tail = "[[tenants]]\nid = \"t\"\npath = \"/t/mcp\"\n[tenants.backend]\nkind = \"mcp\"\npeers = [\"http://127.0.0.1:1\"]\n";
        let ok = parse(&format!(
            "{head}admin_token = \"s3cret-admin-token-xyz\"\n{tail}"
        ))
        .unwrap();
        assert_eq!(
            ok.server.admin_secret.as_ref().map(Secret::expose),
            Some("s3cret-admin-token-xyz")
        );
        let debug = format!("{ok:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("[redacted]"));
        for bad in [
            "admin_token = \"s3cret\"\n",
            "admin_token = \"s3cret with spaces inside\"\n",
            "admin_token = 12345678901234567890123\n",
            "admin_token = \"s3cret-unterminated\n",
        ] {
            let e = parse(&format!("{head}{bad}{tail}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("admin_token"), "{e}");
            assert!(!e.contains("s3cret") && !e.contains("1234567890123"), "{e}");
        }
        // An unset variable locks the endpoints (no error); no source: the same.
        let unset = parse(&format!(
            "{head}admin_token_env = \"AAP_TEST_SURELY_UNSET_VARIABLE\"\n{tail}"
        ))
        .unwrap();
        assert!(unset.server.admin_secret.is_none());
        assert!(parse(&format!("{head}{tail}"))
            .unwrap()
            .server
            .admin_secret
            .is_none());
        let e = parse(&format!("{head}shutdown_drain_secs = 601\n{tail}")).unwrap_err();
        assert!(e.to_string().contains("server.shutdown_drain_secs"), "{e}");
    }

    #[test]
    fn every_secret_key_takes_the_file_and_env_forms() {
        let d = std::env::temp_dir().join(format!("aapgw-cfg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(d.join("secrets")).unwrap();
        std::fs::write(
            d.join("secrets/redis.url"),
            "redis://:pw-in-file@127.0.0.1:6379/\n",
        )
        .unwrap();
        std::fs::write(d.join("secrets/cursor"), "cursor-key-in-file\n").unwrap();
        std::fs::write(d.join("i.json"), "[]").unwrap();
        std::fs::write(d.join("d.json"), "{}").unwrap();
        std::env::set_var("AAP_CFG_TEST_UPSTREAM", "upstream-token-in-env");
        std::env::set_var("AAP_CFG_TEST_ADMIN", "admin-token-in-env-0123456789");
        let text = |redis: &str, bearer: &str| {
            format!(
                "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\nadmin_token = {{ env = \"AAP_CFG_TEST_ADMIN\" }}\n\
                 [state]\nbackend = \"redis\"\nredis_url = {redis}\nlead_store = \"postgres\"\npostgres_url = \"postgres://gw@127.0.0.1/leads\"\n\
                 [[tenants]]\nid = \"e\"\npath = \"/e/mcp\"\n[tenants.backend]\nkind = \"embedded\"\ninventory = \"i.json\"\ndealer = \"d.json\"\ncursor_secret = {{ file = \"secrets/cursor\" }}\n\
                 [[tenants]]\nid = \"m\"\npath = \"/m/mcp\"\n[tenants.backend]\nkind = \"mcp\"\npeers = [\"http://127.0.0.1:1\"]\nbearer_token = {bearer}\n\
                 [[tenants]]\nid = \"a\"\npath = \"/a/mcp\"\n[tenants.backend]\nkind = \"a2a\"\npeers = [\"http://127.0.0.1:1\"]\nbearer_token = \"inline-a2a-token\"\n\
                 [[tenants]]\nid = \"r\"\npath = \"/r/mcp\"\n[tenants.backend]\nkind = \"relay\"\npeers = [\"http://127.0.0.1:1\"]\nbearer_token = {bearer}\n"
            )
        };
        let path = d.join("gw.toml");
        let cfg = Config::parse(
            &text(
                "{ file = \"secrets/redis.url\" }",
                "{ env = \"AAP_CFG_TEST_UPSTREAM\" }",
            ),
            &path,
        )
        .unwrap();
        assert_eq!(
            cfg.state.redis_url.as_ref().map(Secret::expose),
            Some("redis://:pw-in-file@127.0.0.1:6379/")
        );
        assert_eq!(
            cfg.server.admin_secret.as_ref().map(Secret::expose),
            Some("admin-token-in-env-0123456789")
        );
        let bearer = |i: usize| match &cfg.tenants[i].backend {
            BackendConfig::Mcp(m) => m.bearer_token.clone(),
            BackendConfig::A2a(a) => a.bearer_token.clone(),
            BackendConfig::Relay(r) => r.bearer_token.clone(),
            BackendConfig::Embedded(e) => e.cursor_secret.clone(),
        };
        assert_eq!(bearer(0).unwrap().expose(), "cursor-key-in-file");
        assert_eq!(bearer(1).unwrap().expose(), "upstream-token-in-env");
        assert_eq!(bearer(2).unwrap().expose(), "inline-a2a-token");
        assert_eq!(bearer(3).unwrap().expose(), "upstream-token-in-env");
        let debug = format!("{cfg:?}");
        for value in [
            "pw-in-file",
            "cursor-key-in-file",
            "upstream-token-in-env",
            "inline-a2a-token",
            "admin-token-in-env",
        ] {
            assert!(!debug.contains(value), "{value} in {debug}");
        }
        assert!(debug.contains("AAP_CFG_TEST_UPSTREAM") && debug.contains("redis.url"));
        // A missing file and an unset variable are load errors that name the
        // key and the file or variable, and print no value.
        let e = Config::parse(&text("{ file = \"secrets/nope\" }", "\"x\""), &path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("redis_url") && e.contains("secrets/nope") && e.contains("no such file"),
            "{e}"
        );
        let e = Config::parse(
            &text(
                "\"redis://127.0.0.1/\"",
                "{ env = \"AAP_CFG_TEST_SURELY_UNSET\" }",
            ),
            &path,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("bearer_token")
                && e.contains("AAP_CFG_TEST_SURELY_UNSET")
                && e.contains("not set"),
            "{e}"
        );
        // A value that fails validation is not echoed either.
        let e = Config::parse(
            &text("\"redis://127.0.0.1/\"", "\"bad token with spaces\""),
            &path,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bearer_token") && !e.contains("spaces"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn errors_name_file_and_key() {
        let e = parse("[server]\nlisten = \"nope\"\nadmin_listen = \"127.0.0.1:1\"\n").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("/nonexistent/gw.toml") && text.contains("server.listen"),
            "{text}"
        );
        let e =
            parse("[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\ntypo = 1\n")
                .unwrap_err();
        assert!(e.to_string().contains("typo"), "{e}");
    }

    #[test]
    fn example_configs_parse() {
        for (name, text) in [
            (
                "upstream-mcp.toml",
                include_str!("../../../../examples/upstream-mcp.toml"),
            ),
            (
                "upstream-a2a.toml",
                include_str!("../../../../examples/upstream-a2a.toml"),
            ),
            (
                "upstream-relay.toml",
                include_str!("../../../../examples/upstream-relay.toml"),
            ),
        ] {
            let cfg = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(matches!(
                cfg.tenants[0].backend,
                BackendConfig::Mcp(_) | BackendConfig::A2a(_) | BackendConfig::Relay(_)
            ));
        }
    }
}
