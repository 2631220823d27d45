//! Prometheus metrics, exposed on the admin listener at `/metrics`.
//!
//! Labels never carry request values: tenant ids, revisions, skill ids,
//! outcome codes and statuses come from small closed sets. The `tenant` label is bounded too:
//! only tenants `[telemetry] tenant_metrics` names get their own value, the others share
//! `tenant="_other"`; every tenant's own figures stay readable through [`tenant_stats`].

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};

pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub latency: HistogramVec,
    pub upstream_latency: HistogramVec,
    pub filled: IntCounterVec,
    pub conflicts: IntCounterVec,
    pub schema_rejections: IntCounterVec,
    pub throttled: IntCounterVec,
    pub replays: IntCounterVec,
    pub config_generation: IntGauge,
    pub reloads: IntCounterVec,
    pub connections_closed: IntCounterVec,
    pub upstream_up: IntGaugeVec,
    /// `aap_build_info{version,commit}`: always 1; the labels say which build runs.
    build_info: IntGaugeVec,
    /// How many live upstream clients use each peer, so a peer's gauge goes away only when the
    /// last configuration naming it is dropped (a reload builds the new clients before the old
    /// ones go).
    peer_users: Mutex<HashMap<String, usize>>,
    /// `aap_log_lines_dropped_total`: log lines (access lines included) dropped because the
    /// log queue to stderr was full, read at each scrape from the writer's own count.
    log_lines_dropped: IntCounter,
    /// Where the dropped-line count comes from (set by [`count_log_drops_from`]).
    log_drop_source: OnceLock<DropCount>,
    /// `aap_tls_reloads_total` by result (`ok`, `rejected`); see the gateway's `tls`.
    pub tls_reloads: IntCounterVec,
    /// `aap_admin_refusals_total` by reason (`missing_token`, `wrong_token`,
    /// `not_configured`); see the gateway's `admin`.
    pub admin_refusals: IntCounterVec,
    /// Inventory feed health, one series per feed source.
    pub feed: FeedMetrics,
    /// Per configured tenant: its own figures, and whether it has its own `tenant` label. Read
    /// on every request (a shared read lock, as prometheus' own label maps take), written only
    /// when a configuration is installed ([`configure_tenants`]).
    tenants: RwLock<TenantTable>,
}

const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// `metric`, registered in `r`. Definitions are static, so a failure here is a bug the tests
/// catch, never a run-time condition.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    name: &str,
    metric: prometheus::Result<M>,
) -> M {
    let m = metric.unwrap_or_else(|e| panic!("metric {name}: {e}"));
    r.register(Box::new(m.clone()))
        .unwrap_or_else(|e| panic!("register {name}: {e}"));
    m
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(r, name, IntCounterVec::new(Opts::new(name, help), labels))
}

fn histogram(r: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(BUCKETS.to_vec());
    registered(r, name, HistogramVec::new(opts, labels))
}

/// The process-wide metrics (definitions are static, so construction
/// cannot fail at run time once it has succeeded in tests).
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let r = Registry::new();
    let name = "aap_config_generation";
    let config_generation = registered(
        &r,
        name,
        IntGauge::new(name, "Generation of the configuration being served"),
    );
    let upstream_up = gauge(
        &r,
        "aap_upstream_up",
        "Upstream peer health: 1 reachable, 0 failing (health check or a refused connection)",
        &["peer"],
    );
    let name = "aap_log_lines_dropped_total";
    let log_lines_dropped = registered(
        &r,
        name,
        IntCounter::new(
            name,
            "Log lines (access lines included) dropped because stderr was slower than the gateway",
        ),
    );
    Metrics {
        build_info: gauge(
            &r,
            "aap_build_info",
            "The running build: always 1, labelled with the version and the commit it was built from",
            &["version", "commit"],
        ),
        peer_users: Mutex::default(),
        log_lines_dropped,
        log_drop_source: OnceLock::new(),
        tls_reloads: counter(
            &r,
            "aap_tls_reloads_total",
            "TLS certificate/key reload attempts by result",
            &["result"],
        ),
        admin_refusals: counter(
            &r,
            "aap_admin_refusals_total",
            "Mutating admin requests refused, by reason",
            &["reason"],
        ),
        feed: FeedMetrics::new(&r),
        tenants: RwLock::default(),
        upstream_up,
        requests: counter(
            &r,
            "aap_requests_total",
            "Requests by tenant, binding, MCP revision, skill, outcome code and HTTP status",
            &[
                "tenant", "binding", "revision", "skill", "outcome", "status",
            ],
        ),
        latency: histogram(
            &r,
            "aap_request_duration_seconds",
            "Time in the gateway per request, including the backend",
            &["tenant"],
        ),
        upstream_latency: histogram(
            &r,
            "aap_upstream_duration_seconds",
            "Backend call time",
            &["tenant", "backend", "skill"],
        ),
        filled: counter(
            &r,
            "aap_header_normalizations_total",
            "Mirror headers the gateway derived because the client omitted them",
            &["tenant", "header"],
        ),
        conflicts: counter(
            &r,
            "aap_header_conflicts_total",
            "Requests rejected with HeaderMismatch (-32020)",
            &["tenant"],
        ),
        schema_rejections: counter(
            &r,
            "aap_schema_rejections_total",
            "Tool calls rejected by argument validation",
            &["tenant", "skill", "code"],
        ),
        throttled: counter(
            &r,
            "aap_throttled_total",
            "Requests refused by HTTP rate limits or skill quotas",
            &["tenant", "kind"],
        ),
        replays: counter(
            &r,
            "aap_idempotent_replays_total",
            "Lead submissions answered from the idempotency store",
            &["tenant"],
        ),
        reloads: counter(
            &r,
            "aap_config_reloads_total",
            "Configuration reload attempts by result",
            &["result"],
        ),
        connections_closed: counter(
            &r,
            "aap_connections_closed_total",
            "Client connections the gateway closed on a connection-level limit",
            &["reason"],
        ),
        config_generation,
        registry: r,
    }
});

/// Reasons [`connection_closed`] is called with, exported at 0 from start.
pub const CONNECTION_CLOSE_REASONS: [&str; 5] = [
    "header_timeout",
    "idle_timeout",
    "write_timeout",
    "connection_limit",
    "client_connection_limit",
];

/// Exports every counter whose label set is known up front at 0, and
/// `aap_build_info{version,commit} 1`, before the first request. A counter
/// that appears only at its first increment starts at 1, so `increase()` and
/// `rate()` never see that first event (a first rejected reload would not fire
/// `AapConfigReloadRejected`). Called once at start; later calls change nothing.
pub fn prime(version: &str, commit: &str) {
    let m = &*METRICS;
    for result in ["ok", "rejected"] {
        m.reloads.with_label_values(&[result]).inc_by(0);
    }
    for reason in CONNECTION_CLOSE_REASONS {
        m.connections_closed.with_label_values(&[reason]).inc_by(0);
    }
    for reason in ["missing_token", "wrong_token", "not_configured"] {
        m.admin_refusals.with_label_values(&[reason]).inc_by(0);
    }
    m.build_info.with_label_values(&[version, commit]).set(1);
}

/// Count a connection closed by the gateway (e.g. `header_timeout`).
pub fn connection_closed(reason: &'static str) {
    METRICS
        .connections_closed
        .with_label_values(&[reason])
        .inc();
}

/// A client starts using `peer`: it is presumed up until a check says not.
pub fn peer_added(peer: &str) {
    let mut users = METRICS.peer_users.lock().unwrap_or_else(|e| e.into_inner());
    let n = users.entry(peer.to_owned()).or_insert(0);
    if *n == 0 {
        METRICS.upstream_up.with_label_values(&[peer]).set(1);
    }
    *n += 1;
}

/// A client using `peer` was dropped (config reload or shutdown).
pub fn peer_removed(peer: &str) {
    let mut users = METRICS.peer_users.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = users.get_mut(peer) {
        *n -= 1;
        if *n == 0 {
            users.remove(peer);
            let _ = METRICS.upstream_up.remove_label_values(&[peer]);
        }
    }
}

/// A health transition of `peer`.
pub fn peer_health(peer: &str, up: bool) {
    METRICS
        .upstream_up
        .with_label_values(&[peer])
        .set(i64::from(up));
}

/// Where the dropped-line count comes from (the log writer's counter).
type DropCount = Box<dyn Fn() -> u64 + Send + Sync>;

/// Export the log writer's dropped-line count as
/// `aap_log_lines_dropped_total` (once per process; later calls are ignored).
pub fn count_log_drops_from(read: impl Fn() -> u64 + Send + Sync + 'static) {
    let _ = METRICS.log_drop_source.set(Box::new(read));
}

/// The text exposition of every metric.
pub fn render() -> String {
    let m = &*METRICS;
    if let Some(read) = m.log_drop_source.get() {
        // The writer's count only grows; the counter follows it.
        let (now, shown) = (read(), m.log_lines_dropped.get());
        if now > shown {
            m.log_lines_dropped.inc_by(now - shown);
        }
    }
    let mut buf = Vec::new();
    let _ = TextEncoder::new().encode(&METRICS.registry.gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// Record one finished request (called only by `RequestCtx::logging`, with
/// the same record the access line is written from).
pub fn record(r: &crate::access::AccessRecord<'_>, seconds: f64) {
    let m = &*METRICS;
    let guard = METRICS.tenants.read().unwrap_or_else(|e| e.into_inner());
    let own = guard.get(r.tenant);
    if let Some((stats, _)) = own {
        stats.count(r, seconds);
    }
    let tenant = match own {
        Some((_, true)) => r.tenant,
        Some((_, false)) => OTHER_TENANTS,
        // Not a configured tenant: "-" (no route) or one a reload just removed.
        None if r.tenant == "-" => "-",
        None => OTHER_TENANTS,
    };
    let skill = r.skill;
    m.requests
        .with_label_values(&[
            tenant,
            r.binding,
            r.mcp_revision,
            skill,
            r.outcome,
            itoa::Buffer::new().format(r.status),
        ])
        .inc();
    m.latency.with_label_values(&[tenant]).observe(seconds);
    for h in r.filled {
        m.filled.with_label_values(&[tenant, h]).inc();
    }
    match r.outcome {
        "-32020" => m.conflicts.with_label_values(&[tenant]).inc(),
        "replay" => m.replays.with_label_values(&[tenant]).inc(),
        "throttled" => m.throttled.with_label_values(&[tenant, "http"]).inc(),
        "RATE_LIMITED" => m
            .throttled
            .with_label_values(&[tenant, "skill_quota"])
            .inc(),
        code @ ("SCHEMA_VALIDATION_FAILED"
        | "MISSING_REQUIRED_FIELD"
        | "UNSUPPORTED_FILTER"
        | "INVALID_CONDITION"
        | "INVALID_CONSENT"
        | "CONTACT_CONSENT_REQUIRED") => m
            .schema_rejections
            .with_label_values(&[tenant, skill, code])
            .inc(),
        _ => {}
    }
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    registered(r, name, IntGaugeVec::new(Opts::new(name, help), labels))
}

/// Inventory feed health, one series per feed source (a file path or a URL
/// without its query); see `aap_gateway::upstream::inventory::source`.
pub struct FeedMetrics {
    /// Loads by result: `ok`, `refused` (rejected share or row drop), `failed`
    /// (unreadable, unparsable or unreachable).
    pub loads: IntCounterVec,
    /// The last successful check: a load, or a 304 confirming the version served.
    pub last_success: IntGaugeVec,
    pub last_load: IntGaugeVec,
    pub last_check: IntGaugeVec,
    pub vehicles: IntGaugeVec,
    pub rejected: IntGaugeVec,
    pub duplicates: IntGaugeVec,
    pub stale_after: IntGaugeVec,
}

impl FeedMetrics {
    fn new(r: &Registry) -> FeedMetrics {
        FeedMetrics {
        loads: counter(
            r,
            "aap_feed_loads_total",
            "Inventory feed loads by source and result (ok, refused, failed)",
            &["source", "result"],
        ),
        last_success: gauge(
            r,
            "aap_feed_last_success_timestamp_seconds",
            "Unix time of the source's last successful check: a load, or a 304 Not Modified for the inventory served",
            &["source"],
        ),
        last_load: gauge(
            r,
            "aap_feed_last_load_timestamp_seconds",
            "Unix time the source's current inventory was loaded",
            &["source"],
        ),
        last_check: gauge(
            r,
            "aap_feed_last_check_timestamp_seconds",
            "Unix time the source was last reached (changed or not)",
            &["source"],
        ),
        vehicles: gauge(
            r,
            "aap_feed_vehicles",
            "Vehicles in the inventory the source serves",
            &["source"],
        ),
        rejected: gauge(
            r,
            "aap_feed_rows_rejected",
            "Rows rejected in the source's last parsed feed",
            &["source"],
        ),
        duplicates: gauge(
            r,
            "aap_feed_rows_duplicate",
            "Duplicate rows skipped in the source's last parsed feed",
            &["source"],
        ),
        stale_after: gauge(
            r,
            "aap_feed_stale_after_seconds",
            "The source's stale_after_secs: a source without a successful check for longer is reported stale",
            &["source"],
        ),
    }
    }
}

/// The `tenant` label value of every tenant without a label of its own.
pub const OTHER_TENANTS: &str = "_other";

/// Per configured tenant: its own figures, and whether it has its own `tenant` label. Hashed
/// with foldhash, not std's SipHash: the keys are the configuration's tenant ids (a request
/// only looks one up, never adds one), so chosen colliding keys cannot fill it, and every
/// request looks its tenant up.
type TenantTable = foldhash::HashMap<String, (Arc<TenantStats>, bool)>;

/// One tenant's request figures since it was configured (kept across reloads that keep it).
#[derive(Debug, Default)]
pub struct TenantStats {
    requests: AtomicU64,
    client_errors: AtomicU64,
    server_errors: AtomicU64,
    throttled: AtomicU64,
    tool_calls: AtomicU64,
    duration_us: AtomicU64,
}

impl TenantStats {
    fn count(&self, r: &crate::access::AccessRecord<'_>, seconds: f64) {
        self.requests.fetch_add(1, Relaxed);
        match r.status {
            400..=499 => self.client_errors.fetch_add(1, Relaxed),
            500..=599 => self.server_errors.fetch_add(1, Relaxed),
            _ => 0,
        };
        if matches!(r.outcome, "throttled" | "RATE_LIMITED") {
            self.throttled.fetch_add(1, Relaxed);
        }
        if r.skill != "-" {
            self.tool_calls.fetch_add(1, Relaxed);
        }
        self.duration_us.fetch_add((seconds * 1e6) as u64, Relaxed);
    }

    /// The figures as a JSON object (what the admin endpoints answer).
    pub fn to_json(&self, tenant: &str) -> serde_json::Value {
        let requests = self.requests.load(Relaxed);
        let us = self.duration_us.load(Relaxed);
        serde_json::json!({
            "tenant": tenant,
            "requests": requests,
            "client_errors": self.client_errors.load(Relaxed),
            "server_errors": self.server_errors.load(Relaxed),
            "throttled": self.throttled.load(Relaxed),
            "tool_calls": self.tool_calls.load(Relaxed),
            "mean_duration_ms": if requests == 0 { 0.0 } else { us as f64 / requests as f64 / 1000.0 },
        })
    }

    fn get(&self, by: TopBy) -> u64 {
        match by {
            TopBy::Requests => self.requests.load(Relaxed),
            TopBy::Errors => self.server_errors.load(Relaxed),
            TopBy::ClientErrors => self.client_errors.load(Relaxed),
            TopBy::Throttled => self.throttled.load(Relaxed),
            TopBy::Duration => self.duration_us.load(Relaxed),
        }
    }
}

/// What `GET /admin/tenants/top?by=` ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopBy {
    Requests,
    Errors,
    ClientErrors,
    Throttled,
    Duration,
}

impl TopBy {
    pub const NAMES: &'static str = "requests, server_errors, client_errors, throttled, duration";
    pub fn parse(s: &str) -> Option<TopBy> {
        Some(match s {
            "requests" => TopBy::Requests,
            "server_errors" | "errors" => TopBy::Errors,
            "client_errors" => TopBy::ClientErrors,
            "throttled" => TopBy::Throttled,
            "duration" => TopBy::Duration,
            _ => return None,
        })
    }
}

/// Install the tenants of a new configuration: each keeps its figures if it was configured
/// before, gets its own `tenant` label if `labelled(id)` says so; tenants no longer
/// configured are forgotten (and their labelled series removed), so the table and
/// `/metrics` stay as large as the configuration, never larger.
pub fn configure_tenants<'a>(
    ids: impl IntoIterator<Item = &'a str>,
    labelled: impl Fn(&str) -> bool,
) {
    let mut table = METRICS.tenants.write().unwrap_or_else(|e| e.into_inner());
    let mut next = TenantTable::default();
    let mut lost = false;
    for id in ids {
        let label = labelled(id);
        let stats = match table.remove(id) {
            Some((s, was)) => {
                lost |= was && !label;
                s
            }
            None => Arc::default(),
        };
        next.insert(id.to_owned(), (stats, label));
    }
    // What is left was removed from the configuration.
    lost |= table.values().any(|(_, was)| *was);
    *table = next;
    drop(table);
    if lost {
        reset_tenant_series();
    }
}

/// Install one tenant's change, in O(1): `removed` leaves, then `added` (its id and whether
/// it gets its own label) is configured; every other tenant keeps its figures and label. A
/// tenant removed and added under the same id keeps its figures. The caller uses
/// [`configure_tenants`] instead when the change flips other tenants' labels
/// (`tenant_metrics = "auto"` crossing its threshold).
pub fn retenant(removed: Option<&str>, added: Option<(&str, bool)>) {
    let mut table = METRICS.tenants.write().unwrap_or_else(|e| e.into_inner());
    let gone = removed.and_then(|id| table.remove(id).map(|entry| (id, entry)));
    let mut lost = false;
    let mut kept = None;
    if let Some((id, (stats, was))) = gone {
        if added.is_some_and(|(a, _)| a == id) {
            kept = Some((stats, was));
        } else {
            lost |= was;
        }
    }
    if let Some((id, label)) = added {
        let (stats, was) = kept
            .or_else(|| table.remove(id))
            .unwrap_or_else(|| (Arc::default(), false));
        lost |= was && !label;
        table.insert(id.to_owned(), (stats, label));
    }
    drop(table);
    if lost {
        reset_tenant_series();
    }
}

/// Clear every series that has a `tenant` label, so a tenant that lost its own label (removed,
/// or no longer named by `tenant_metrics`) leaves nothing behind. The prometheus crate can
/// only remove a series by its full label set, which the gateway does not keep, so the
/// vectors are reset as a whole: Prometheus' `rate()` and `increase()` read a reset as a
/// counter restart, like a process restart, and lose nothing.
fn reset_tenant_series() {
    let m = &*METRICS;
    for c in [
        &m.requests,
        &m.filled,
        &m.conflicts,
        &m.schema_rejections,
        &m.throttled,
        &m.replays,
    ] {
        c.reset();
    }
    m.latency.reset();
    m.upstream_latency.reset();
}

/// The `tenant` label value for `tenant` (itself, `_other`, or `-` for no tenant).
pub fn tenant_label(tenant: &str) -> &str {
    let table = METRICS.tenants.read().unwrap_or_else(|e| e.into_inner());
    match table.get(tenant) {
        Some((_, true)) => tenant,
        _ if tenant == "-" => "-",
        _ => OTHER_TENANTS,
    }
}

/// One configured tenant's figures (`None`: no such tenant).
pub fn tenant_stats(tenant: &str) -> Option<serde_json::Value> {
    let table = METRICS.tenants.read().unwrap_or_else(|e| e.into_inner());
    table.get(tenant).map(|(s, _)| s.to_json(tenant))
}

/// The `n` tenants with the highest figure `by` (ties by id), and how many are configured.
pub fn top_tenants(by: TopBy, n: usize) -> (Vec<serde_json::Value>, usize) {
    let table = METRICS.tenants.read().unwrap_or_else(|e| e.into_inner());
    let mut all: Vec<(u64, &String, &Arc<TenantStats>)> = table
        .iter()
        .map(|(id, (s, _))| (s.get(by), id, s))
        .collect();
    let total = all.len();
    let n = n.min(total);
    if n < total {
        // Partial selection, not a full sort: O(tenants) per call.
        all.select_nth_unstable_by(n, |a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        all.truncate(n);
    }
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    (
        all.into_iter().map(|(_, id, s)| s.to_json(id)).collect(),
        total,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_tenant_changes_keep_the_others() {
        configure_tenants(["rt-a", "rt-b"], |id| id == "rt-a");
        assert_eq!(tenant_label("rt-a"), "rt-a");
        assert_eq!(tenant_label("rt-b"), OTHER_TENANTS);
        retenant(Some("rt-b"), None);
        assert!(tenant_stats("rt-b").is_none());
        assert_eq!(tenant_label("rt-a"), "rt-a");
        retenant(None, Some(("rt-c", true)));
        assert_eq!(tenant_label("rt-c"), "rt-c");
        retenant(Some("rt-a"), Some(("rt-a", false)));
        assert_eq!(tenant_label("rt-a"), OTHER_TENANTS);
        assert!(tenant_stats("rt-a").is_some());
        retenant(Some("rt-c"), Some(("rt-d", false)));
        assert!(tenant_stats("rt-c").is_none());
        assert_eq!(tenant_label("rt-d"), OTHER_TENANTS);
        assert_eq!(top_tenants(TopBy::Requests, 10).1, 2);
    }
}
