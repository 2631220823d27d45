//! `[telemetry]`: where and how request traces are exported (OTLP), off by default.
//! The exporter lives in the gateway crate (`src/telemetry.rs`); this is the table and its checks.

use super::Secret;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The one OTLP protocol this build exports with.
pub const HTTP_PROTOBUF: &str = "http/protobuf";

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export traces. Off: no spans, no `traceparent` sent upstream.
    #[serde(default)]
    pub enabled: bool,
    /// The OTLP/HTTP traces URL, e.g. `http://otel-collector:4318/v1/traces`.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// `http/protobuf` (the only protocol this build speaks).
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// The `service.name` resource attribute.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// Share of new traces recorded, 0.0..=1.0 (parent-based: a request
    /// whose `traceparent` says sampled, or not, follows its parent).
    #[serde(default = "default_ratio")]
    pub sampling_ratio: f64,
    /// Headers sent with every export (e.g. an API key); values are secrets.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// Time limit of one export request, milliseconds.
    #[serde(default = "default_export_timeout_ms")]
    pub export_timeout_ms: u64,
    /// Longest wait before queued spans are exported, milliseconds.
    #[serde(default = "default_scheduled_delay_ms")]
    pub scheduled_delay_ms: u64,
    /// Spans held for export; further spans are dropped while it is full.
    #[serde(default = "default_queue_size")]
    pub queue_size: usize,
    /// Most spans in one export request (at most `queue_size`).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Which tenants get their own `tenant` label on `/metrics` (the rest are counted under
    /// `tenant="_other"`): `"auto"` (default: every tenant while the config has at most
    /// [`AUTO_TENANT_LABELS`] tenants, none beyond), `"all"`, `"none"`, or a list of tenant ids.
    #[serde(default)]
    pub tenant_metrics: TenantMetrics,
}

/// Up to this many tenants, `tenant_metrics = "auto"` labels every tenant.
pub const AUTO_TENANT_LABELS: usize = 100;

/// `telemetry.tenant_metrics`: a mode name or a list of tenant ids.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum TenantMetrics {
    Mode(String),
    Only(Vec<String>),
}

impl Default for TenantMetrics {
    fn default() -> Self {
        TenantMetrics::Mode("auto".into())
    }
}

impl TenantMetrics {
    /// Whether tenant `id` gets its own label in a config of `tenants` tenants.
    pub fn labels(&self, id: &str, tenants: usize) -> bool {
        match self {
            TenantMetrics::Mode(m) => match m.as_str() {
                "all" => true,
                "auto" => tenants <= AUTO_TENANT_LABELS,
                _ => false,
            },
            TenantMetrics::Only(ids) => ids.iter().any(|t| t == id),
        }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            enabled: false,
            endpoint: default_endpoint(),
            protocol: default_protocol(),
            service_name: default_service_name(),
            sampling_ratio: default_ratio(),
            headers: BTreeMap::new(),
            export_timeout_ms: default_export_timeout_ms(),
            scheduled_delay_ms: default_scheduled_delay_ms(),
            queue_size: default_queue_size(),
            batch_size: default_batch_size(),
            tenant_metrics: TenantMetrics::default(),
        }
    }
}

fn default_endpoint() -> String {
    "http://127.0.0.1:4318/v1/traces".into()
}
fn default_protocol() -> String {
    HTTP_PROTOBUF.into()
}
fn default_service_name() -> String {
    "aap-gateway".into()
}
fn default_ratio() -> f64 {
    1.0
}
fn default_export_timeout_ms() -> u64 {
    10_000
}
fn default_scheduled_delay_ms() -> u64 {
    5_000
}
fn default_queue_size() -> usize {
    2_048
}
fn default_batch_size() -> usize {
    512
}

impl TelemetryConfig {
    /// Checked whether or not `enabled` is set, so a table that is wrong
    /// is found before someone turns it on.
    pub fn validate(&self) -> Result<(), String> {
        let k = |key: &str| format!("telemetry.{key}");
        let url = self.endpoint.as_str();
        if url.starts_with("https://") {
            // The exporter's HTTP client is built without TLS (no second
            // TLS stack in the binary); a collector or agent beside the
            // gateway forwards over TLS.
            return Err(format!(
                "{}: https:// is not supported; export to an OpenTelemetry Collector or agent on the same host or network over http:// and let it forward over TLS",
                k("endpoint")
            ));
        }
        let authority = url
            .strip_prefix("http://")
            .map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
        if authority.is_none_or(|a| a.is_empty() || a.contains('@'))
            || url
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(format!(
                "{}: {:?} is not an http:// URL with a host (e.g. http://otel-collector:4318/v1/traces)",
                k("endpoint"),
                self.endpoint
            ));
        }
        if self.protocol != HTTP_PROTOBUF {
            return Err(format!(
                "{}: {:?} is not supported; this build exports OTLP over {HTTP_PROTOBUF} only (use a collector's OTLP/HTTP receiver, port 4318)",
                k("protocol"),
                self.protocol
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(format!("{}: must not be empty", k("service_name")));
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(format!(
                "{}: must be between 0.0 and 1.0",
                k("sampling_ratio")
            ));
        }
        for (name, value) in &self.headers {
            if !crate::exchange::is_token(name) {
                return Err(format!(
                    "{}: {name:?} is not an HTTP header name",
                    k("headers")
                ));
            }
            if value
                .expose()
                .bytes()
                .any(|b| b.is_ascii_control() && b != b'\t')
            {
                // The value is a secret: name the header only.
                return Err(format!(
                    "{}.{name}: the value holds a control character",
                    k("headers")
                ));
            }
        }
        for (key, v) in [
            ("export_timeout_ms", self.export_timeout_ms),
            ("scheduled_delay_ms", self.scheduled_delay_ms),
        ] {
            if !(1..=600_000).contains(&v) {
                return Err(format!("{}: must be between 1 and 600000", k(key)));
            }
        }
        if !(1..=1_000_000).contains(&self.queue_size) {
            return Err(format!(
                "{}: must be between 1 and 1000000",
                k("queue_size")
            ));
        }
        match &self.tenant_metrics {
            TenantMetrics::Mode(m) if !["auto", "all", "none"].contains(&m.as_str()) => {
                return Err(format!(
                    "{}: {m:?} is not one of \"auto\", \"all\", \"none\" or a list of tenant ids",
                    k("tenant_metrics")
                ));
            }
            TenantMetrics::Only(ids) => {
                if let Some(bad) = ids.iter().find(|id| {
                    id.is_empty()
                        || !id
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                }) {
                    return Err(format!(
                        "{}: {bad:?} is not a tenant id (lowercase letters, digits and '-')",
                        k("tenant_metrics")
                    ));
                }
            }
            TenantMetrics::Mode(_) => {}
        }
        if self.batch_size == 0 || self.batch_size > self.queue_size {
            return Err(format!(
                "{}: must be between 1 and telemetry.queue_size ({})",
                k("batch_size"),
                self.queue_size
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<TelemetryConfig, String> {
        let t: TelemetryConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        t.validate().map(|()| t)
    }

    #[test]
    fn off_by_default_and_the_defaults_are_valid() {
        let t = parsed("").unwrap();
        let d = TelemetryConfig::default();
        assert!(!t.enabled);
        assert_eq!(
            (
                t.endpoint,
                t.protocol,
                t.sampling_ratio,
                t.queue_size,
                t.batch_size
            ),
            (
                d.endpoint,
                d.protocol,
                d.sampling_ratio,
                d.queue_size,
                d.batch_size
            )
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (text, expect) in [
            (
                "endpoint = \"otel:4318\"",
                "telemetry.endpoint: \"otel:4318\" is not",
            ),
            ("endpoint = \"http:///v1/traces\"", "telemetry.endpoint"),
            (
                "endpoint = \"https://otel:4318/v1/traces\"",
                "telemetry.endpoint: https:// is not supported",
            ),
            (
                "protocol = \"grpc\"",
                "telemetry.protocol: \"grpc\" is not supported",
            ),
            (
                "sampling_ratio = 1.5",
                "telemetry.sampling_ratio: must be between",
            ),
            ("sampling_ratio = -0.1", "telemetry.sampling_ratio"),
            (
                "service_name = \" \"",
                "telemetry.service_name: must not be empty",
            ),
            ("queue_size = 0", "telemetry.queue_size"),
            (
                "batch_size = 10\nqueue_size = 5",
                "telemetry.batch_size: must be between 1 and telemetry.queue_size (5)",
            ),
            ("export_timeout_ms = 0", "telemetry.export_timeout_ms"),
            (
                "tenant_metrics = \"some\"",
                "telemetry.tenant_metrics: \"some\" is not one of",
            ),
            (
                "tenant_metrics = [\"Demo\"]",
                "telemetry.tenant_metrics: \"Demo\" is not a tenant id",
            ),
            (
                "headers = { \"a b\" = \"x\" }",
                "telemetry.headers: \"a b\" is not an HTTP header name",
            ),
        ] {
            let e = parsed(text).unwrap_err();
            assert!(e.contains(expect), "{text}: {e}");
        }
        assert!(parsed("sampler = 1").unwrap_err().contains("unknown field"));
    }

    #[test]
    fn tenant_labels_follow_the_mode_or_the_list() {
        let auto = parsed("").unwrap().tenant_metrics;
        assert!(auto.labels("a", 1) && auto.labels("a", AUTO_TENANT_LABELS));
        assert!(!auto.labels("a", AUTO_TENANT_LABELS + 1));
        let all = parsed("tenant_metrics = \"all\"").unwrap().tenant_metrics;
        assert!(all.labels("a", 10_000));
        let none = parsed("tenant_metrics = \"none\"").unwrap().tenant_metrics;
        assert!(!none.labels("a", 1));
        let some = parsed("tenant_metrics = [\"a\", \"b-2\"]")
            .unwrap()
            .tenant_metrics;
        assert!(some.labels("b-2", 10_000) && !some.labels("c", 1));
    }

    #[test]
    fn header_values_are_never_printed() {
        let e = parsed("headers = { \"x-api-key\" = \"s3cr3t\\u0001\" }").unwrap_err();
        assert!(e.contains("telemetry.headers.x-api-key"), "{e}");
        assert!(!e.contains("s3cr3t"));
        let t = parsed("headers = { \"x-api-key\" = \"s3cr3t\" }").unwrap();
        // A syntax error on a header line does not quote the line.
        let head = "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n";
        for bad in [
            "[telemetry]\nheaders = { \"x-api-key\" = \"s3cr3t }\n",
            "[telemetry.headers]\nx-api-key = \"s3cr3t\n",
        ] {
            let e = super::super::Config::parse(
                &format!("{head}{bad}"),
                std::path::Path::new("/nonexistent/gw.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(!e.contains("s3cr3t"), "{e}");
        }
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert_eq!(t.headers["x-api-key"].expose(), "s3cr3t");
    }
}
