//! Default values of `gateway.toml` keys left out: the serde `default` functions
//! and the `Default` of tables that may be omitted. No checks here (see `validate`).

use super::{
    LeadStoreKind, LimitsConfig, QuotaConfig, StateBackend, StateConfig, DEFAULT_WRITE_BUFFER_BYTES,
};
use std::path::PathBuf;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body_bytes: 65_536,
            max_json_depth: 32,
            body_read_timeout_ms: 10_000,
            header_read_timeout_ms: 10_000,
            idle_timeout_secs: 60,
            max_headers: 100,
            max_header_bytes: 16_384,
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            max_concurrent_streams: 100,
            h2_connection_memory_bytes: 8 << 20,
            h2_stream_memory_bytes: 64 << 10,
            h2_memory_bytes: 256 << 20,
            h2_max_resets: 100,
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: PathBuf::from("var"),
            idempotency_ttl_hours: 24,
            backend: StateBackend::Local,
            redis_url: None,
            redis_ca_file: None,
            redis_connect_timeout_ms: 2_000,
            redis_command_timeout_ms: 2_000,
            redis_wait_replicas: 0,
            redis_prefix: "aapgw:".into(),
            claim_lease_ms: crate::state::DEFAULT_CLAIM_LEASE_MS,
            lead_store: LeadStoreKind::Sqlite,
            sqlite_file: None,
            postgres_url: None,
            postgres_pool_size: 8,
            lead_lease_ms: 60_000,
            outbox_poll_ms: 1_000,
            lead_retention_days: 365,
        }
    }
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            lead_submit_per_hour: 30,
        }
    }
}

pub(super) fn default_mcp_path() -> String {
    "/mcp".into()
}
pub(super) fn default_a2a_path() -> String {
    "/a2a".into()
}
pub(super) fn default_card_path() -> String {
    "/.well-known/agent-card.json".into()
}
pub(super) fn default_revision() -> String {
    "auto".into()
}
pub(super) fn default_connect_timeout() -> u64 {
    2_000
}
pub(super) fn default_request_timeout() -> u64 {
    10_000
}
pub(super) fn default_health_interval() -> u64 {
    2_000
}
pub(super) fn default_pool_size() -> usize {
    128
}
pub(super) fn default_pool_idle() -> u64 {
    30
}
pub(super) fn default_dns_refresh() -> u64 {
    30
}

pub(super) fn default_write_buffer_bytes() -> usize {
    DEFAULT_WRITE_BUFFER_BYTES
}

pub(super) fn default_shutdown_grace() -> u64 {
    5
}

pub(super) fn default_threads() -> usize {
    2
}
pub(super) fn default_server_name() -> String {
    "aap-gateway".into()
}
pub(super) fn all_skills() -> Vec<String> {
    crate::aap::skill::Skill::ALL
        .iter()
        .map(|s| s.id().to_string())
        .collect()
}
pub(super) fn default_session_idle() -> u64 {
    1800
}
pub(super) fn default_page_size() -> usize {
    50
}
pub(super) fn default_list_ttl() -> u64 {
    300_000
}
pub(super) fn default_limit() -> usize {
    20
}
pub(super) fn max_limit() -> usize {
    100
}
pub(super) fn cursor_ttl() -> u64 {
    900
}
