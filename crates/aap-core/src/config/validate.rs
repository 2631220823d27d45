//! Validation of a parsed `gateway.toml`: one function per table, each error as
//! `<key>: <problem>` (texts are matched by tests and docs: change none). No I/O but file checks.

use super::{
    A2aBackendConfig, AdfEmailSinkConfig, AdfHttpSinkConfig, AdfNetworkConfig, BackendConfig,
    Config, EmbeddedBackendConfig, LeadSinkConfig, LeadStoreKind, McpBackendConfig,
    RateLimitConfig, RelayBackendConfig, SmtpSecurity, StateBackend, TenantConfig, UpstreamKeys,
    MAX_HEADER_LINES, MAX_SHUTDOWN_SECS, UPSTREAM_TIMEOUT_KEYS,
};
use crate::auth::AuthConfig;
use std::collections::HashSet;

/// The refusal of Redis state with the embedded SQLite lead store: each
/// instance would keep its own leads and idempotency records.
pub const LEAD_STORE_SPLIT: &str = "state.lead_store: with state.backend = \"redis\" (several instances) leads must be in a shared store: set state.lead_store = \"postgres\" and state.postgres_url";

/// Names a key of tenant `i`: `tenants[i].<key>`.
type At<'a> = &'a dyn Fn(&str) -> String;

impl Config {
    /// `[server]`, `[limits]`, `[state]`, `[telemetry]`, then each tenant; the first problem
    /// found is the error.
    pub(super) fn validate(&self) -> Result<(), String> {
        self.validate_server()?;
        self.validate_limits()?;
        self.validate_state()?;
        self.telemetry.validate()?;
        self.validate_clusters()?;
        self.validate_tenants()
    }

    /// `[[clusters]]`: names unique, peers and settings as for inline peers.
    fn validate_clusters(&self) -> Result<(), String> {
        let mut names = HashSet::new();
        for (i, c) in self.clusters.iter().enumerate() {
            let at = |k: &str| format!("clusters[{i}].{k}");
            let valid = !c.name.is_empty()
                && c.name.len() <= 64
                && c.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                return Err(format!(
                    "{}: 1 to 64 characters of letters, digits, '-', '_' and '.'",
                    at("name")
                ));
            }
            if !names.insert(c.name.as_str()) {
                return Err(format!(
                    "{}: cluster {:?} is defined twice",
                    at("name"),
                    c.name
                ));
            }
            check_peers(&|k: &str| at(k.trim_start_matches("backend.")), &c.peers)?;
            check_timeouts(
                &|k: &str| at(k.trim_start_matches("backend.")),
                [
                    ("connect_timeout_ms", Some(c.connect_timeout_ms)),
                    ("request_timeout_ms", Some(c.request_timeout_ms)),
                    ("health_check_interval_ms", Some(c.health_check_interval_ms)),
                ],
            )?;
            if !(1..=100_000).contains(&c.pool_size) {
                return Err(format!("{}: must be between 1 and 100000", at("pool_size")));
            }
            if !(1..=3_600).contains(&c.pool_idle_timeout_secs) {
                return Err(format!(
                    "{}: must be between 1 and 3600 seconds",
                    at("pool_idle_timeout_secs")
                ));
            }
            if !(1..=86_400).contains(&c.dns_refresh_secs) {
                return Err(format!(
                    "{}: must be between 1 and 86400 seconds",
                    at("dns_refresh_secs")
                ));
            }
        }
        Ok(())
    }

    /// `[server]`.
    fn validate_server(&self) -> Result<(), String> {
        check_addr("server.listen", &self.server.listen)?;
        check_addr("server.admin_listen", &self.server.admin_listen)?;
        if self.server.h2c && self.server.tls.is_some() {
            return Err("server.h2c: only for a plaintext listener; with server.tls, HTTP/2 is negotiated by ALPN".into());
        }
        if let Some(tls) = &self.server.tls {
            for (k, p) in [("cert_file", &tls.cert_file), ("key_file", &tls.key_file)] {
                if !self.resolve(p).is_file() {
                    return Err(format!(
                        "server.tls.{k}: file {} does not exist",
                        self.resolve(p).display()
                    ));
                }
            }
        }
        for (k, v) in [
            (
                "server.shutdown_drain_secs",
                self.server.shutdown_drain_secs,
            ),
            (
                "server.shutdown_grace_secs",
                self.server.shutdown_grace_secs,
            ),
        ] {
            if v > MAX_SHUTDOWN_SECS {
                return Err(format!("{k}: must be between 0 and {MAX_SHUTDOWN_SECS}"));
            }
        }
        if self.server.threads == 0 || self.server.threads > 256 {
            return Err("server.threads: must be between 1 and 256".into());
        }
        if !(1_460..=1_048_576).contains(&self.server.write_buffer_bytes) {
            return Err("server.write_buffer_bytes: must be between 1460 and 1048576".into());
        }
        Ok(())
    }

    /// `[limits]`.
    fn validate_limits(&self) -> Result<(), String> {
        let l = &self.limits;
        if l.max_body_bytes == 0 || l.max_body_bytes > 16 * 1024 * 1024 {
            return Err("limits.max_body_bytes: must be between 1 and 16777216".into());
        }
        if !(2..=256).contains(&l.max_json_depth) {
            return Err("limits.max_json_depth: must be between 2 and 256".into());
        }
        if l.body_read_timeout_ms == 0 {
            return Err("limits.body_read_timeout_ms: must be positive".into());
        }
        if l.header_read_timeout_ms == 0 {
            return Err("limits.header_read_timeout_ms: must be positive".into());
        }
        if !(1..=3600).contains(&l.idle_timeout_secs) {
            return Err("limits.idle_timeout_secs: must be between 1 and 3600".into());
        }
        if l.max_headers == 0 || l.max_header_bytes < 1024 {
            return Err("limits.max_headers / limits.max_header_bytes: need max_headers >= 1 and max_header_bytes >= 1024".into());
        }
        if l.max_headers > MAX_HEADER_LINES {
            return Err(format!("limits.max_headers: at most {}", MAX_HEADER_LINES));
        }
        if !(1..=1000).contains(&l.max_concurrent_streams) {
            return Err("limits.max_concurrent_streams: must be between 1 and 1000".into());
        }
        if !((16 << 10)..=(16 << 20)).contains(&l.h2_stream_memory_bytes) {
            return Err("limits.h2_stream_memory_bytes: must be between 16384 and 16777216".into());
        }
        if l.h2_connection_memory_bytes < 2 * l.h2_stream_memory_bytes
            || l.h2_connection_memory_bytes > 1 << 30
        {
            return Err("limits.h2_connection_memory_bytes: must be at least twice limits.h2_stream_memory_bytes and at most 1073741824".into());
        }
        if l.h2_memory_bytes < l.h2_connection_memory_bytes {
            return Err(
                "limits.h2_memory_bytes: must be at least limits.h2_connection_memory_bytes".into(),
            );
        }
        if !(1..=1_000_000).contains(&l.h2_max_resets) {
            return Err("limits.h2_max_resets: must be between 1 and 1000000".into());
        }
        Ok(())
    }

    /// `[state]`.
    fn validate_state(&self) -> Result<(), String> {
        if self.state.idempotency_ttl_hours < 24 {
            return Err("state.idempotency_ttl_hours: must be at least 24 (AAP requires leads be deduplicated for at least 24 hours)".into());
        }
        if self.state.backend == StateBackend::Redis && self.state.redis_url.is_none() {
            return Err("state.redis_url: required when state.backend = \"redis\"".into());
        }
        if let Some(url) = &self.state.redis_url {
            let url = url.expose();
            let scheme = url.split_once("://").map(|(s, _)| s);
            if !matches!(
                scheme,
                Some("redis" | "rediss" | "redis+cluster" | "rediss+cluster")
            ) {
                // The URL is never quoted: it may hold a password.
                return Err("state.redis_url: must start with redis://, rediss://, redis+cluster:// or rediss+cluster://".into());
            }
        }
        if let Some(ca) = &self.state.redis_ca_file {
            let tls = self
                .state
                .redis_url
                .as_ref()
                .is_some_and(|u| u.expose().starts_with("rediss"));
            if !tls {
                return Err("state.redis_ca_file: only used with a rediss:// or rediss+cluster:// redis_url".into());
            }
            if !self.resolve(ca).is_file() {
                return Err(format!(
                    "state.redis_ca_file: file {} does not exist",
                    self.resolve(ca).display()
                ));
            }
        }
        for (k, v) in [
            (
                "state.redis_connect_timeout_ms",
                self.state.redis_connect_timeout_ms,
            ),
            (
                "state.redis_command_timeout_ms",
                self.state.redis_command_timeout_ms,
            ),
        ] {
            if !(1..=600_000).contains(&v) {
                return Err(format!("{k}: must be between 1 and 600000 milliseconds"));
            }
        }
        if self.state.redis_wait_replicas > 16 {
            return Err("state.redis_wait_replicas: must be between 0 and 16".into());
        }
        if self.state.redis_prefix.contains(['{', '}']) {
            return Err(
                "state.redis_prefix: must not contain { or } (the gateway adds its own hash tags)"
                    .into(),
            );
        }
        if self.state.claim_lease_ms < 100 {
            return Err("state.claim_lease_ms: must be at least 100".into());
        }
        self.validate_lead_store()
    }

    /// `[state]`'s lead store keys.
    fn validate_lead_store(&self) -> Result<(), String> {
        let s = &self.state;
        // Redis holds counters only: leads and their idempotency records
        // must be in one store every instance shares.
        if s.backend == StateBackend::Redis && s.lead_store == LeadStoreKind::Sqlite {
            return Err(LEAD_STORE_SPLIT.into());
        }
        match (s.lead_store, &s.postgres_url) {
            (LeadStoreKind::Postgres, None) => {
                return Err(
                    "state.postgres_url: required when state.lead_store = \"postgres\"".into(),
                )
            }
            (LeadStoreKind::Sqlite, Some(_)) => {
                return Err(
                    "state.postgres_url: only used with state.lead_store = \"postgres\"".into(),
                )
            }
            (_, Some(url)) => {
                let scheme = url.expose().split_once("://").map(|(s, _)| s);
                if !matches!(scheme, Some("postgres" | "postgresql")) {
                    // Never quoted: it may hold a password.
                    return Err(
                        "state.postgres_url: must start with postgres:// or postgresql://".into(),
                    );
                }
            }
            _ => {}
        }
        if !(1..=256).contains(&s.postgres_pool_size) {
            return Err("state.postgres_pool_size: must be between 1 and 256".into());
        }
        if !(100..=3_600_000).contains(&s.lead_lease_ms) {
            return Err("state.lead_lease_ms: must be between 100 and 3600000".into());
        }
        if !(10..=600_000).contains(&s.outbox_poll_ms) {
            return Err("state.outbox_poll_ms: must be between 10 and 600000".into());
        }
        if !(1..=36_500).contains(&s.lead_retention_days) {
            return Err("state.lead_retention_days: must be between 1 and 36500".into());
        }
        Ok(())
    }

    /// `[[tenants]]`: at least one; ids and paths unique.
    fn validate_tenants(&self) -> Result<(), String> {
        if self.tenants.is_empty() && self.tenants_dir.is_none() {
            return Err(
                "tenants: at least one [[tenants]] entry is required (or a tenants_dir)".into(),
            );
        }
        if let Some(d) = self.tenants_dir_path() {
            if !d.is_dir() {
                return Err(format!("tenants_dir: {} is not a directory", d.display()));
            }
        }
        let mut ids = HashSet::new();
        let mut paths = HashSet::new();
        let mut published = Published::default();
        for (i, t) in self.tenants.iter().enumerate() {
            let at = |k: &str| format!("tenants[{i}].{k}");
            validate_mount(&at, t, &mut ids, &mut paths)?;
            validate_tenant(&at, t)?;
            validate_publish(&at, t, &mut published)?;
            validate_hosts(&at, t, &mut published)?;
            validate_rate_limit(&at, &t.rate_limit)?;
            if let Some(a) = &t.auth {
                self.validate_auth(&at, t, a)?;
            }
            self.validate_backend(&at, t)?;
            self.validate_tenant_tls(&at, t)?;
        }
        Ok(())
    }

    /// One tenant on its own (a tenant file): every check of `[[tenants]]`
    /// but the ones across tenants.
    pub(super) fn validate_tenant_alone(&self, at: At<'_>, t: &TenantConfig) -> Result<(), String> {
        validate_mount(at, t, &mut HashSet::new(), &mut HashSet::new())?;
        validate_tenant(at, t)?;
        validate_publish(at, t, &mut Published::default())?;
        validate_hosts(at, t, &mut Published::default())?;
        validate_rate_limit(at, &t.rate_limit)?;
        if let Some(a) = &t.auth {
            self.validate_auth(at, t, a)?;
        }
        self.validate_backend(at, t)?;
        self.validate_tenant_tls(at, t)
    }

    /// `[tenants.tls]`: both files exist, `server.tls` is on, and the
    /// tenant names the hosts the certificate is for.
    fn validate_tenant_tls(&self, at: At<'_>, t: &TenantConfig) -> Result<(), String> {
        let Some(tls) = &t.tls else { return Ok(()) };
        if self.server.tls.is_none() {
            return Err(format!(
                "{}: needs server.tls (the listener must terminate TLS)",
                at("tls")
            ));
        }
        if t.hosts.is_empty() && t.publish.hosts.is_empty() {
            return Err(format!(
                "{}: name the host names it serves in hosts (or publish.hosts)",
                at("tls")
            ));
        }
        for (k, p) in [("cert_file", &tls.cert_file), ("key_file", &tls.key_file)] {
            if !self.resolve(p).is_file() {
                return Err(format!(
                    "{}: file {} does not exist",
                    at(&format!("tls.{k}")),
                    self.resolve(p).display()
                ));
            }
        }
        Ok(())
    }

    /// `[tenants.auth]`.
    fn validate_auth(&self, at: At<'_>, t: &TenantConfig, a: &AuthConfig) -> Result<(), String> {
        // `Config::parse` filled whichever of the two was left out.
        if a.resource.is_empty() {
            return Err(format!(
                "{}: required with [tenants.auth] (it is the OAuth resource; auth.resource may be left out)",
                at("public_url")
            ));
        }
        if t.public_url.as_deref() != Some(a.resource.as_str()) {
            return Err(format!(
                "{}: must equal public_url (one public URL per tenant; leave auth.resource out)",
                at("auth.resource")
            ));
        }
        if !(a.resource.starts_with("https://") || a.resource.starts_with("http://")) {
            return Err(format!(
                "{}: must be the absolute public URL of this endpoint",
                at("auth.resource")
            ));
        }
        if !a.resource.ends_with(&t.path) {
            return Err(format!(
                "{}: must end with the tenant path {}",
                at("auth.resource"),
                t.path
            ));
        }
        if a.authorization_servers.is_empty() {
            return Err(format!(
                "{}: name at least one authorization server",
                at("auth.authorization_servers")
            ));
        }
        for skill in a.tool_scopes.keys() {
            if crate::aap::skill::Skill::from_id(skill).is_none() {
                return Err(format!(
                    "{}: unknown skill {skill:?}",
                    at("auth.tool_scopes")
                ));
            }
        }
        match (&a.jwks_file, &a.jwks_url) {
            (Some(f), None) if !self.resolve(f).is_file() => {
                return Err(format!(
                    "{}: file {} does not exist",
                    at("auth.jwks_file"),
                    self.resolve(f).display()
                ));
            }
            (Some(_), None) => {}
            (None, Some(u)) if crate::host::http_url(u).is_err() => {
                return Err(format!("{}: must be an http(s) URL", at("auth.jwks_url")));
            }
            (None, Some(_)) => {}
            _ => {
                return Err(format!(
                    "{}: set exactly one of jwks_file and jwks_url",
                    at("auth")
                ))
            }
        }
        Ok(())
    }

    /// `[tenants.backend]`, by kind.
    fn validate_backend(&self, at: At<'_>, t: &TenantConfig) -> Result<(), String> {
        match &t.backend {
            BackendConfig::Embedded(e) => self.validate_embedded(at, e),
            BackendConfig::Mcp(m) => {
                self.validate_upstream(at, t)?;
                validate_mcp(at, m)
            }
            BackendConfig::Relay(r) => {
                self.validate_upstream(at, t)?;
                validate_relay(at, t, r)
            }
            BackendConfig::A2a(a) => {
                self.validate_upstream(at, t)?;
                validate_a2a(at, a)
            }
        }
    }

    /// A forwarding backend's `cluster`, or its inline `peers` and
    /// connection keys (never both).
    fn validate_upstream(&self, at: At<'_>, t: &TenantConfig) -> Result<(), String> {
        let Some(UpstreamKeys {
            peers,
            cluster,
            timeouts,
        }) = t.backend.upstream_keys()
        else {
            return Ok(());
        };
        let keys = UPSTREAM_TIMEOUT_KEYS;
        match cluster {
            Some(name) => {
                if !self.clusters.iter().any(|c| &c.name == name) {
                    return Err(format!(
                        "{}: tenant {} names cluster {name:?}, which no [[clusters]] entry defines",
                        at("backend.cluster"),
                        t.id
                    ));
                }
                if !peers.is_empty() {
                    return Err(format!(
                        "{}: set peers in the cluster {name:?}, not beside cluster",
                        at("backend.peers")
                    ));
                }
                if let Some((k, _)) = keys.iter().zip(timeouts).find(|(_, v)| v.is_some()) {
                    return Err(format!(
                        "{}: set it in the cluster {name:?}, not beside cluster",
                        at(&format!("backend.{k}"))
                    ));
                }
                Ok(())
            }
            None => {
                check_peers(at, peers)?;
                check_timeouts(at, std::array::from_fn(|i| (keys[i], timeouts[i])))
            }
        }
    }

    /// `[tenants.backend]` with `kind = "embedded"`.
    fn validate_embedded(&self, at: At<'_>, e: &EmbeddedBackendConfig) -> Result<(), String> {
        if e.default_limit == 0 || e.max_limit == 0 || e.default_limit > e.max_limit {
            return Err(format!(
                "{}: need 1 <= default_limit <= max_limit",
                at("backend")
            ));
        }
        if e.max_limit > 1000 {
            return Err(format!("{}: at most 1000", at("backend.max_limit")));
        }
        if e.cursor_ttl_secs == 0 {
            return Err(format!(
                "{}: must be positive",
                at("backend.cursor_ttl_secs")
            ));
        }
        if let Some(secret) = &e.cursor_secret {
            if is_placeholder_secret(secret.expose()) {
                return Err(format!(
                    "{}: still the example's placeholder; set a long random secret shared by every instance (e.g. the output of `openssl rand -hex 32`, from {{ env = \"...\" }} or {{ file = \"...\" }})",
                    at("backend.cursor_secret")
                ));
            }
        }
        let feed_at = |k: &str| {
            if k.is_empty() {
                at("backend.feed")
            } else {
                at(&format!("backend.feed.{k}"))
            }
        };
        let mut files = vec![("dealer", &e.dealer)];
        match (&e.inventory, &e.feed) {
            (Some(p), None) => files.push(("inventory", p)),
            (None, Some(f)) => {
                f.check(&feed_at)?;
                if let Some(p) = &f.file {
                    files.push(("feed.file", p));
                }
                if let Some(ca) = &f.ca_file {
                    files.push(("feed.ca_file", ca));
                }
            }
            _ => {
                return Err(format!(
                    "{}: set exactly one of inventory (a JSON file) and [tenants.backend.feed]",
                    at("backend.inventory")
                ))
            }
        }
        for (k, p) in files {
            let full = self.resolve(p);
            if !full.is_file() {
                return Err(format!(
                    "{}: file {} does not exist",
                    at(&format!("backend.{k}")),
                    full.display()
                ));
            }
        }
        // The ADF sinks' own keys (the sink list as a whole: names, kinds, is
        // checked with the outbox).
        for (i, sink) in e.sinks.iter().enumerate() {
            let at_sink = |k: &str| at(&format!("backend.sinks[{i}].{k}"));
            match sink {
                LeadSinkConfig::AdfHttp(c) => self.validate_adf_http(&at_sink, c)?,
                LeadSinkConfig::AdfEmail(c) => self.validate_adf_email(&at_sink, c)?,
                LeadSinkConfig::Webhook(_) => {}
            }
        }
        super::validate_sinks(&e.sinks, &at("backend.sinks"))?;
        e.outbox.validate(&at("backend.outbox"))
    }

    /// `[[tenants.backend.sinks]]` with `kind = "adf_http"`.
    fn validate_adf_http(&self, at: At<'_>, c: &AdfHttpSinkConfig) -> Result<(), String> {
        // The URL is never quoted: its query may hold a token.
        if let Err(e) = crate::host::http_url(&c.url) {
            return Err(format!("{}: the URL cannot be used: {e}", at("url")));
        }
        if let Some(a) = &c.authorization {
            if a.expose().is_empty()
                || !a
                    .expose()
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
            {
                return Err(format!(
                    "{}: must be a non-empty header value of printable ASCII",
                    at("authorization")
                ));
            }
        }
        check_sink_timeout(at, c.timeout_ms)?;
        self.check_sink_ca(at, c.ca_file.as_deref())?;
        check_network(at, c.network.as_ref())
    }

    /// `[[tenants.backend.sinks]]` with `kind = "adf_email"`.
    fn validate_adf_email(&self, at: At<'_>, c: &AdfEmailSinkConfig) -> Result<(), String> {
        if c.host.is_empty()
            || c.host.contains("://")
            || c.host
                .contains(|ch: char| ch.is_whitespace() || ch == '/' || ch == '@')
        {
            return Err(format!(
                "{}: must be a host name or IP address (no scheme, port or path)",
                at("host")
            ));
        }
        if c.port == 0 {
            return Err(format!("{}: must be 1-65535", at("port")));
        }
        match (&c.username, &c.password) {
            (Some(_), None) => {
                return Err(format!("{}: is required with username", at("password")))
            }
            (None, Some(_)) => {
                return Err(format!("{}: is required with password", at("username")))
            }
            (Some(u), Some(p)) => {
                if u.is_empty() || p.expose().is_empty() {
                    return Err(format!(
                        "{}: username and password must not be empty",
                        at("username")
                    ));
                }
                // Credentials in clear text only to a relay on this machine.
                if c.security == SmtpSecurity::None && !is_loopback_host(&c.host) {
                    return Err(format!(
                        "{}: \"none\" would send the password unencrypted; use starttls or tls, or a relay on loopback",
                        at("security")
                    ));
                }
            }
            (None, None) => {}
        }
        if !is_mailbox(&c.from) {
            return Err(format!(
                "{}: must be an e-mail address (addr@host or Name <addr@host>)",
                at("from")
            ));
        }
        if c.to.is_empty() {
            return Err(format!("{}: needs at least one address", at("to")));
        }
        for (j, to) in c.to.iter().enumerate() {
            if !is_mailbox(to) {
                return Err(format!(
                    "{}: must be an e-mail address (addr@host or Name <addr@host>)",
                    at(&format!("to[{j}]"))
                ));
            }
        }
        check_sink_timeout(at, c.timeout_ms)?;
        self.check_sink_ca(at, c.ca_file.as_deref())?;
        check_network(at, c.network.as_ref())
    }

    fn check_sink_ca(&self, at: At<'_>, ca: Option<&std::path::Path>) -> Result<(), String> {
        match ca {
            Some(p) if !self.resolve(p).is_file() => Err(format!(
                "{}: file {} does not exist",
                at("ca_file"),
                self.resolve(p).display()
            )),
            _ => Ok(()),
        }
    }
}

/// One delivery attempt may take from 1 ms to 5 minutes.
fn check_sink_timeout(at: At<'_>, ms: u64) -> Result<(), String> {
    if ms == 0 || ms > 300_000 {
        return Err(format!("{}: must be 1-300000", at("timeout_ms")));
    }
    Ok(())
}

fn check_network(at: At<'_>, n: Option<&AdfNetworkConfig>) -> Result<(), String> {
    let Some(n) = n else { return Ok(()) };
    if n.name.trim().is_empty() {
        return Err(format!("{}: must not be empty", at("network.name")));
    }
    if let Some(u) = &n.url {
        if !is_http_url(u) {
            return Err(format!(
                "{}: must be an absolute http:// or https:// URL",
                at("network.url")
            ));
        }
    }
    Ok(())
}

/// `http[s]://host…` with a non-empty host and no whitespace.
fn is_http_url(u: &str) -> bool {
    crate::host::http_url(u).is_ok()
}

fn is_loopback_host(h: &str) -> bool {
    crate::host::is_loopback_host(h)
}

/// `addr@host` or `Display Name <addr@host>`, with no line break anywhere
/// (the value ends up in a mail header).
fn is_mailbox(s: &str) -> bool {
    if s.contains(['\r', '\n']) {
        return false;
    }
    let s = s.trim();
    let addr = match s.rfind('<') {
        Some(open) if s.ends_with('>') => &s[open + 1..s.len() - 1],
        Some(_) => return false,
        None => s,
    };
    email_address::EmailAddress::parse_with_options(
        addr,
        email_address::Options::default().with_required_tld(),
    )
    .is_ok()
        && !addr.contains(['<', '>'])
}

/// A tenant's `id` and `path`, unique across tenants.
fn validate_mount(
    at: At<'_>,
    t: &TenantConfig,
    ids: &mut HashSet<String>,
    paths: &mut HashSet<String>,
) -> Result<(), String> {
    if t.id.is_empty()
        || !t
            .id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "{}: must be non-empty lowercase letters, digits and '-'",
            at("id")
        ));
    }
    if !ids.insert(t.id.clone()) {
        return Err(format!("{}: duplicate tenant id {:?}", at("id"), t.id));
    }
    if !t.path.starts_with('/') || t.path.contains(['?', '#', ' ']) || t.path.ends_with('/') {
        return Err(format!("{}: must be an absolute path like /aap/3.0.0/<tenant>/mcp, without query or trailing slash", at("path")));
    }
    if !paths.insert(t.path.clone()) {
        return Err(format!(
            "{}: path {:?} is mounted twice",
            at("path"),
            t.path
        ));
    }
    Ok(())
}

/// What earlier tenants publish: dealer domains and document prefixes;
/// and the host names tenants are routed by.
#[derive(Default)]
struct Published {
    hosts: HashSet<String>,
    prefixes: HashSet<String>,
    routed: HashSet<String>,
}

/// `hosts`: host names (no port: routing ignores it), unique across tenants.
fn validate_hosts(at: At<'_>, t: &TenantConfig, seen: &mut Published) -> Result<(), String> {
    for h in &t.hosts {
        let key = match crate::host::Authority::parse(h) {
            Ok(a) if a.port.is_none() => a.host,
            _ => {
                return Err(format!(
                "{}: {h:?} is not a host name (like mcp.dealer.example; no scheme, port or path)",
                at("hosts")
            ))
            }
        };
        if !seen.routed.insert(key) {
            return Err(format!("{}: {h:?} routes to another tenant", at("hosts")));
        }
    }
    Ok(())
}

/// `public_url` and `[tenants.publish]`: an exact HTTPS URL (plain http
/// only on loopback) ending with the tenant path; dealer domains and
/// document prefixes not shared with another tenant.
fn validate_publish(at: At<'_>, t: &TenantConfig, seen: &mut Published) -> Result<(), String> {
    let p = &t.publish;
    if p.provider_name.is_some() != p.provider_url.is_some() {
        return Err(format!(
            "{}: set both provider_name and provider_url, or neither",
            at("publish")
        ));
    }
    if let Some(u) = &p.provider_url {
        if crate::host::check_public_url(u).is_err() {
            return Err(format!(
                "{}: must be an https URL (http only on loopback)",
                at("publish.provider_url")
            ));
        }
    }
    for (k, v) in [("name", &p.name), ("description", &p.description)] {
        if v.as_deref()
            .is_some_and(|v| v.trim().is_empty() || v.contains(['\n', '\r']))
        {
            return Err(format!(
                "{}: must be one non-empty line",
                at(&format!("publish.{k}"))
            ));
        }
    }
    let Some(url) = &t.public_url else {
        if !p.hosts.is_empty() {
            return Err(format!(
                "{}: set public_url first (the documents name it)",
                at("publish.hosts")
            ));
        }
        return Ok(());
    };
    crate::host::check_public_url(url).map_err(|e| format!("{}: {e}", at("public_url")))?;
    if !url.ends_with(&t.path) {
        return Err(format!(
            "{}: must end with the tenant path {}",
            at("public_url"),
            t.path
        ));
    }
    if matches!(t.backend, super::BackendConfig::Relay(_)) && !p.hosts.is_empty() {
        return Err(format!(
            "{}: a relay tenant publishes no discovery documents (it has no AAP contract to describe)",
            at("publish.hosts")
        ));
    }
    for h in &p.hosts {
        if !crate::host::is_host(h) {
            return Err(format!(
                "{}: {h:?} is not a host name (like www.dealer.example, optionally :port; no scheme or path)",
                at("publish.hosts")
            ));
        }
        if !seen.hosts.insert(crate::host::host_table_key(h)) {
            return Err(format!(
                "{}: {h:?} is published by another tenant",
                at("publish.hosts")
            ));
        }
    }
    let prefix = crate::host::prefix_of(&t.path);
    if !matches!(t.backend, super::BackendConfig::Relay(_))
        && !seen.prefixes.insert(prefix.to_owned())
    {
        return Err(format!(
            "{}: another tenant publishes under {prefix:?}/ (the path without its last segment); give each tenant its own",
            at("path")
        ));
    }
    Ok(())
}

/// A tenant's own keys: skills, origins, paging and sessions.
fn validate_tenant(at: At<'_>, t: &TenantConfig) -> Result<(), String> {
    if t.skills.is_empty() {
        return Err(format!("{}: list at least one skill", at("skills")));
    }
    for s in &t.skills {
        if crate::aap::skill::Skill::from_id(s).is_none() {
            return Err(format!("{}: unknown skill {s:?} (known: dealer.information, inventory.facets, inventory.search, inventory.vehicle, lead.submit)", at("skills")));
        }
    }
    for o in &t.allowed_origins {
        if !is_origin(o) {
            return Err(format!(
                "{}: {o:?} is not an origin (scheme://host[:port], no path)",
                at("allowed_origins")
            ));
        }
    }
    if t.tools_page_size == 0 {
        return Err(format!("{}: must be at least 1", at("tools_page_size")));
    }
    if t.session_idle_secs == 0 {
        return Err(format!("{}: must be positive", at("session_idle_secs")));
    }
    Ok(())
}

/// `[tenants.rate_limit]`.
fn validate_rate_limit(at: At<'_>, r: &RateLimitConfig) -> Result<(), String> {
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    if !ok(r.tenant_per_second) || !ok(r.caller_per_second) {
        return Err(format!(
            "{}: rates must be finite and >= 0",
            at("rate_limit")
        ));
    }
    Ok(())
}

/// `[tenants.backend]` with `kind = "mcp"`.
fn validate_mcp(at: At<'_>, m: &McpBackendConfig) -> Result<(), String> {
    check_forwarding(
        at,
        &[("path", &m.path)],
        m.bearer_token.as_ref().map(super::Secret::expose),
    )?;
    if !matches!(m.revision.as_str(), "2026-07-28" | "2025-11-25" | "auto") {
        return Err(format!(
            "{}: {:?} is not one of \"2026-07-28\", \"2025-11-25\", \"auto\"",
            at("backend.revision"),
            m.revision
        ));
    }
    Ok(())
}

/// `[tenants.backend]` with `kind = "relay"`.
fn validate_relay(at: At<'_>, t: &TenantConfig, r: &RelayBackendConfig) -> Result<(), String> {
    check_forwarding(
        at,
        &[("path", &r.path)],
        r.bearer_token.as_ref().map(super::Secret::expose),
    )?;
    if t.legacy_sessions {
        return Err(format!(
            "{}: a relay passes the upstream's own sessions through; remove legacy_sessions",
            at("legacy_sessions")
        ));
    }
    Ok(())
}

/// `[tenants.backend]` with `kind = "a2a"`.
fn validate_a2a(at: At<'_>, a: &A2aBackendConfig) -> Result<(), String> {
    check_forwarding(
        at,
        &[("path", &a.path), ("card_path", &a.card_path)],
        a.bearer_token.as_ref().map(super::Secret::expose),
    )?;
    if let Some(u) = &a.extension_uri {
        if !(u.starts_with("https://") || u.starts_with("http://")) || u.contains([',', ' ']) {
            return Err(format!(
                "{}: must be the exact absolute extension URI the agent declares",
                at("backend.extension_uri")
            ));
        }
    }
    Ok(())
}

/// `peers` (of a backend or a cluster): at least one, syntax only, no
/// duplicates. Names are resolved in the background, never here.
fn check_peers(at: &dyn Fn(&str) -> String, peers: &[String]) -> Result<(), String> {
    if peers.is_empty() {
        return Err(format!(
            "{}: list at least one peer like \"http://127.0.0.1:8001\"",
            at("backend.peers")
        ));
    }
    let mut seen = HashSet::new();
    for p in peers {
        let spec =
            crate::peer::PeerSpec::parse(p).map_err(|e| format!("{}: {e}", at("backend.peers")))?;
        if !seen.insert((spec.host.to_ascii_lowercase(), spec.port)) {
            return Err(format!("{}: {p:?} is listed twice", at("backend.peers")));
        }
    }
    Ok(())
}

/// Connection timeouts: 1–600000 ms when set.
fn check_timeouts(
    at: &dyn Fn(&str) -> String,
    timeouts: [(&str, Option<u64>); 3],
) -> Result<(), String> {
    for (key, v) in timeouts {
        if v.is_some_and(|v| v == 0 || v > 600_000) {
            return Err(format!(
                "{}: must be between 1 and 600000 milliseconds",
                at(&format!("backend.{key}"))
            ));
        }
    }
    Ok(())
}

/// Checks shared by the forwarding kinds; `at` names the key.
fn check_forwarding(
    at: &dyn Fn(&str) -> String,
    paths: &[(&str, &str)],
    bearer: Option<&str>,
) -> Result<(), String> {
    for (key, path) in paths {
        if !path.starts_with('/') || path.contains(['#', ' ']) {
            return Err(format!(
                "{}: must be an absolute path like /mcp",
                at(&format!("backend.{key}"))
            ));
        }
    }
    if let Some(t) = bearer {
        if t.is_empty() || !t.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(format!(
                "{}: must be a non-empty token of visible ASCII characters",
                at("backend.bearer_token")
            ));
        }
    }
    Ok(())
}

/// A secret still set to the placeholder the shipped examples and comments
/// show (`change-me`, `replace-with-…`): every copy of the example would
/// share it, so it signs nothing.
fn is_placeholder_secret(v: &str) -> bool {
    let v = v.trim().to_ascii_lowercase();
    v.contains("change-me") || v.contains("changeme") || v.starts_with("replace-with")
}

fn check_addr(key: &str, v: &str) -> Result<(), String> {
    let addr = v
        .parse::<std::net::SocketAddr>()
        .map_err(|_| format!("{key}: {v:?} is not an address like 127.0.0.1:8080"))?;
    // Port 0 binds a port nobody is told about: /readyz and clients could
    // never find the listener.
    if addr.port() == 0 {
        return Err(format!("{key}: {v:?} has port 0; pick a port"));
    }
    Ok(())
}

fn is_origin(o: &str) -> bool {
    crate::host::origin(o).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigError, DEFAULT_WRITE_BUFFER_BYTES};
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/nonexistent/gw.toml"))
    }

    #[test]
    fn write_buffer_defaults_and_bounds() {
        let shipped = include_str!("../../../../gateway.toml");
        let line = "write_buffer_bytes = 16384\n";
        let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../gateway.toml");
        let parse = |text: &str| Config::parse(text, &at);
        assert!(shipped.contains(line), "gateway.toml documents the option");
        let cfg = parse(&shipped.replace(line, "")).expect("defaults");
        assert_eq!(cfg.server.write_buffer_bytes, DEFAULT_WRITE_BUFFER_BYTES);
        let cfg = parse(&shipped.replace(line, "write_buffer_bytes = 65536\n")).expect("in range");
        assert_eq!(cfg.server.write_buffer_bytes, 65_536);
        for bad in [0, 1459, 1_048_577] {
            let text = shipped.replace(line, &format!("write_buffer_bytes = {bad}\n"));
            let e = parse(&text).unwrap_err();
            assert!(
                e.to_string().contains("server.write_buffer_bytes"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn redis_state_needs_a_shared_lead_store() {
        let shipped = include_str!("../../../../gateway.toml");
        let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../gateway.toml");
        let parse = |text: &str| Config::parse(text, &at);
        let redis = shipped.replace(
            "backend = \"local\"\n",
            "backend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379/\"\n",
        );
        assert_ne!(redis, shipped);
        // Redis counters with each instance's own SQLite: refused, naming the key.
        let e = parse(&redis).unwrap_err().to_string();
        assert!(e.contains(LEAD_STORE_SPLIT), "{e}");
        assert!(e.contains("state.lead_store") && e.contains("state.postgres_url"));
        // Leads on PostgreSQL: accepted.
        let pg = redis.replace(
            "lead_store = \"sqlite\"\n",
            "lead_store = \"postgres\"\npostgres_url = \"postgres://gw@127.0.0.1/leads\"\n",
        );
        assert_ne!(pg, redis);
        let cfg = parse(&pg).expect("redis counters, postgres leads");
        assert_eq!(cfg.state.backend, StateBackend::Redis);
        assert_eq!(cfg.state.lead_store, LeadStoreKind::Postgres);
        // One instance: SQLite, and also PostgreSQL with local counters.
        parse(shipped).expect("local, sqlite");
        parse(&shipped.replace(
            "lead_store = \"sqlite\"\n",
            "lead_store = \"postgres\"\npostgres_url = \"postgres://gw@127.0.0.1/leads\"\n",
        ))
        .expect("local, postgres");
    }

    #[test]
    fn http2_keys() {
        let shipped = include_str!("../../../../gateway.toml");
        let at = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../gateway.toml");
        let parse = |text: &str| Config::parse(text, &at);
        let cfg = parse(shipped).expect("shipped");
        assert!(!cfg.server.h2c);
        assert_eq!(cfg.limits.max_concurrent_streams, 100);
        let on = parse(&shipped.replace("h2c = false", "h2c = true")).expect("h2c");
        assert!(on.server.h2c);
        for bad in ["0", "1001"] {
            let text = shipped.replace(
                "max_concurrent_streams = 100",
                &format!("max_concurrent_streams = {bad}"),
            );
            let e = parse(&text).unwrap_err();
            assert!(
                e.to_string().contains("limits.max_concurrent_streams"),
                "{e}"
            );
        }
        for (from, to, key) in [
            (
                "max_concurrent_streams = 100",
                "max_concurrent_streams = 100\nh2_stream_memory_bytes = 1000",
                "h2_stream_memory_bytes",
            ),
            (
                "max_concurrent_streams = 100",
                "max_concurrent_streams = 100\nh2_connection_memory_bytes = 100000",
                "h2_connection_memory_bytes",
            ),
            (
                "max_concurrent_streams = 100",
                "max_concurrent_streams = 100\nh2_memory_bytes = 1048576",
                "h2_memory_bytes",
            ),
            (
                "max_concurrent_streams = 100",
                "max_concurrent_streams = 100\nh2_max_resets = 0",
                "h2_max_resets",
            ),
        ] {
            let e = parse(&shipped.replace(from, to)).unwrap_err();
            assert!(e.to_string().contains(&format!("limits.{key}")), "{e}");
        }
        let tls = shipped.replace(
            "h2c = false",
            "h2c = true\ntls = { cert_file = \"c.pem\", key_file = \"k.pem\" }",
        );
        let e = parse(&tls).unwrap_err();
        assert!(e.to_string().contains("server.h2c"), "{e}");
    }

    #[test]
    fn forwarding_errors_name_the_key() {
        let head = "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n[[tenants]]\nid = \"t\"\npath = \"/t/mcp\"\n[tenants.backend]\n";
        for (body, key) in [
            ("kind = \"mcp\"\npeers = []\n", "tenants[0].backend.peers"),
            (
                "kind = \"mcp\"\npeers = [\"ftp://x\"]\n",
                "tenants[0].backend.peers",
            ),
            (
                "kind = \"mcp\"\npeers = [\"http://127.0.0.1:1\"]\nrevision = \"2024\"\n",
                "tenants[0].backend.revision",
            ),
            (
                "kind = \"mcp\"\npeers = [\"http://127.0.0.1:1\"]\nrequest_timeout_ms = 0\n",
                "tenants[0].backend.request_timeout_ms",
            ),
            (
                "kind = \"a2a\"\npeers = [\"http://127.0.0.1:1\"]\nextension_uri = \"aap\"\n",
                "tenants[0].backend.extension_uri",
            ),
            (
                "kind = \"a2a\"\npeers = [\"http://127.0.0.1:1\"]\npath = \"a2a\"\n",
                "tenants[0].backend.path",
            ),
            ("kind = \"relay\"\npeers = []\n", "tenants[0].backend.peers"),
            (
                "kind = \"relay\"\npeers = [\"http://127.0.0.1:1\"]\nrevision = \"auto\"\n",
                "revision",
            ),
        ] {
            let e = parse(&format!("{head}{body}")).unwrap_err().to_string();
            assert!(e.contains(key), "{body}: {e}");
        }
    }

    #[test]
    fn adf_sink_errors_name_the_key() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data");
        let head = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n[[tenants]]\nid = \"t\"\npath = \"/t/mcp\"\n[tenants.backend]\nkind = \"embedded\"\ninventory = \"{}\"\ndealer = \"{}\"\n[[tenants.backend.sinks]]\n",
            data.join("demo-inventory.json").display(),
            data.join("demo-dealer.json").display()
        );
        let http = "kind = \"adf_http\"\nname = \"crm\"\n";
        let mail = "kind = \"adf_email\"\nname = \"inbox\"\nhost = \"smtp.example.com\"\nfrom = \"Gateway <leads@dealer.example>\"\n";
        let good = [
            format!("{http}url = \"https://crm.example/adf\"\ncontent_type = \"text/xml\"\n[tenants.backend.sinks.network]\nname = \"Lead Net\"\n"),
            format!("{mail}to = [\"crm@dealer.example\"]\nusername = \"u\"\npassword = \"p\"\n"),
            format!("{mail}to = [\"crm@dealer.example\"]\nsecurity = \"tls\"\nport = 465\n"),
        ];
        for body in good {
            let c = parse(&format!("{head}{body}")).unwrap_or_else(|e| panic!("{body}: {e}"));
            match &c.tenants[0].backend {
                BackendConfig::Embedded(e) => assert_eq!(e.sinks.len(), 1),
                _ => panic!("embedded"),
            }
        }
        for (body, key) in [
            (format!("{http}url = \"ftp://crm.example\"\n"), "tenants[0].backend.sinks[0].url"),
            (format!("{http}url = \"https://\"\n"), "sinks[0].url"),
            (format!("{http}url = \"https://x\"\ntimeout_ms = 0\n"), "sinks[0].timeout_ms"),
            (format!("{http}url = \"https://x\"\nca_file = \"/nonexistent/ca.pem\"\n"), "sinks[0].ca_file"),
            (format!("{http}url = \"https://x\"\nauthorization = \"a\\nb\"\n"), "sinks[0].authorization"),
            (format!("{http}url = \"https://x\"\ncontent_type = \"text/html\"\n"), "unknown variant `text/html`"),
            ("kind = \"adf_http\"\nname = \"\"\nurl = \"https://x\"\n".to_string(), "sinks[0].name"),
            (format!("{mail}to = []\n"), "sinks[0].to"),
            (format!("{mail}to = [\"not-an-address\"]\n"), "sinks[0].to[0]"),
            (format!("{mail}to = [\"a@b.example\"]\npassword = \"p\"\n"), "sinks[0].username"),
            (format!("{mail}to = [\"a@b.example\"]\nusername = \"u\"\n"), "sinks[0].password"),
            (format!("{mail}to = [\"a@b.example\"]\nusername = \"u\"\npassword = \"p\"\nsecurity = \"none\"\n"), "sinks[0].security"),
            (format!("{mail}to = [\"a@b.example\"]\nport = 0\n"), "sinks[0].port"),
            ("kind = \"adf_email\"\nname = \"m\"\nhost = \"smtp://x\"\nfrom = \"a@b.example\"\nto = [\"a@b.example\"]\n".to_string(), "sinks[0].host"),
            ("kind = \"adf_email\"\nname = \"m\"\nhost = \"x\"\nfrom = \"a@b.example\\r\\nBcc: c@d.example\"\nto = [\"a@b.example\"]\n".to_string(), "sinks[0].from"),
        ] {
            let e = parse(&format!("{head}{body}")).unwrap_err().to_string();
            assert!(e.contains(key), "{body}: {e}");
        }
        // Plain SMTP with credentials is fine to a relay on loopback.
        let body = "kind = \"adf_email\"\nname = \"m\"\nhost = \"127.0.0.1\"\nfrom = \"a@b.example\"\nto = [\"a@b.example\"]\nsecurity = \"none\"\nusername = \"u\"\npassword = \"p\"\n";
        parse(&format!("{head}{body}")).unwrap_or_else(|e| panic!("{e}"));
    }
}
