//! The admin listener's read-only JSON views for the console and `aap-gateway admin`: status,
//! tenants, feeds, clusters, the reload history and the configuration with secrets redacted.

use super::log_level::LogLevel;
use crate::exchange::HttpResponse;
use crate::gateway::{ConfigGeneration, Gateway};
use crate::platform::Platform;
use serde_json::{json, Value};

/// What a redacted secret is shown as.
pub const REDACTED: &str = "<redacted>";

/// The config keys whose value is a `Secret` (`aap_core::config`): each is
/// shown as [`REDACTED`] however it is written (inline, `{ file }`,
/// `{ env }`). Every value of a `headers` table is one too
/// (`[telemetry.otlp] headers`). A unit test below fails when a `Secret`
/// field is added to the config without its key here.
const SECRET_KEYS: &[&str] = &[
    "admin_token",
    "authorization",
    "bearer_token",
    "cursor_secret",
    "password",
    "redis_url",
    "postgres_url",
];

/// `GET /admin/…` views; `None` for a path that is not one of them.
pub fn answer(
    method: &str,
    path: &str,
    gateway: &Gateway,
    log_level: &LogLevel,
) -> Option<HttpResponse> {
    let rt = &*gateway.current();
    let (status, body) = match (method, path) {
        ("GET", "/admin/status") => (200, status(gateway, rt, log_level)),
        ("GET", "/admin/reloads") => (200, json!({"reloads": gateway.history().list()})),
        ("GET", "/admin/tenants") => (200, tenants(rt)),
        ("GET", "/admin/feeds") => (200, feeds(rt)),
        ("GET", "/admin/clusters") => (200, clusters(gateway.platform())),
        ("GET", "/admin/config") => config(rt),
        (
            _,
            "/admin/status" | "/admin/reloads" | "/admin/tenants" | "/admin/feeds"
            | "/admin/clusters" | "/admin/config",
        ) => (
            405,
            json!({"error": "method_not_allowed", "message": "this view answers GET only"}),
        ),
        _ => return None,
    };
    Some(HttpResponse::json(status, &body))
}

fn status(gateway: &Gateway, rt: &ConfigGeneration, log_level: &LogLevel) -> Value {
    let (feeds, not_ready) = super::feed_readiness(rt);
    let platform = gateway.platform();
    let clusters = platform.clusters.status();
    let reloads = gateway.history().list();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "commit": option_env!("AAP_BUILD_COMMIT").unwrap_or("unknown"),
        "pid": std::process::id(),
        "uptime_secs": platform.started.elapsed().as_secs(),
        "config_generation": rt.generation,
        "config_file": rt.config.source.display().to_string(),
        "tenants": rt.routes.units.len(),
        "tenants_not_ready": not_ready,
        "feeds": feeds.len(),
        "clusters": clusters.len(),
        "clusters_not_ready": clusters.iter().filter(|c| !c.ready).count(),
        "draining": crate::shutdown::draining(),
        "last_reload": reloads.first(),
        "log_filter": super::log_level::get(log_level).1.get("filter").cloned(),
    })
}

/// Every tenant being served with its figures (requests, errors,
/// throttled: requests refused by a quota, i.e. budget spent).
fn tenants(rt: &ConfigGeneration) -> Value {
    let mut list: Vec<Value> = rt
        .tenants()
        .into_iter()
        .map(|t| {
            let mut v =
                crate::metrics::tenant_stats(&t.id).unwrap_or_else(|| json!({"tenant": t.id}));
            v["path"] = json!(t.path);
            v
        })
        .collect();
    list.sort_by(|a, b| a["tenant"].as_str().cmp(&b["tenant"].as_str()));
    json!({"tenants": list})
}

fn feeds(rt: &ConfigGeneration) -> Value {
    let (feeds, not_ready) = super::feed_readiness(rt);
    json!({"feeds": feeds, "not_ready": not_ready})
}

/// Each upstream cluster: ready, peers, and every `aap_upstream_cluster_*`
/// series labelled with it.
fn clusters(platform: &Platform) -> Value {
    let mut by_name: std::collections::BTreeMap<String, serde_json::Map<String, Value>> =
        std::collections::BTreeMap::new();
    for c in platform.clusters.status() {
        let e = by_name.entry(c.name.clone()).or_default();
        e.insert("cluster".into(), json!(c.name));
        e.insert("ready".into(), json!(c.ready));
        e.insert("peers".into(), json!(c.peers));
        e.insert("reason".into(), json!(c.reason));
    }
    for family in platform.metrics.cluster.families() {
        let Some(short) = family.name().strip_prefix("aap_upstream_cluster_") else {
            continue;
        };
        for m in family.get_metric() {
            let Some(name) = m
                .get_label()
                .iter()
                .find(|l| l.name() == "cluster")
                .map(|l| l.value().to_owned())
            else {
                continue;
            };
            let value = match family.get_field_type() {
                prometheus::proto::MetricType::COUNTER => m.get_counter().get_value(),
                prometheus::proto::MetricType::GAUGE => m.get_gauge().get_value(),
                _ => continue,
            };
            if let Some(e) = by_name.get_mut(&name) {
                e.insert(short.to_owned(), json!(value));
            }
        }
    }
    json!({"clusters": by_name.into_values().collect::<Vec<_>>()})
}

/// `GET /admin/config`: the configuration file being served, parsed, as
/// JSON, with every secret shown as [`REDACTED`]. Tenant files of
/// `tenants_dir` are listed by name (their tables live in their own files).
fn config(rt: &ConfigGeneration) -> (u16, Value) {
    let path = &rt.config.source;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return (
                500,
                json!({"error": "unreadable", "message": format!("cannot read {}: {}", path.display(), e.kind())}),
            )
        }
    };
    let mut value: toml::Value = match toml::from_str(&text) {
        Ok(v) => v,
        Err(_) => {
            return (
                409,
                json!({"error": "changed", "message": "the file no longer parses (edited since the last reload); reload to see the error"}),
            )
        }
    };
    redact(&mut value, false);
    let mut files: Vec<&String> = rt.files.keys().collect();
    files.sort();
    (
        200,
        json!({
            "config_file": path.display().to_string(),
            "config_generation": rt.generation,
            "config": value,
            "tenant_files": files,
        }),
    )
}

/// Replace every secret in `v` by [`REDACTED`]; `all` when every value
/// below is one (a `headers` table).
fn redact(v: &mut toml::Value, all: bool) {
    match v {
        toml::Value::Table(t) => {
            for (k, item) in t.iter_mut() {
                if all || SECRET_KEYS.contains(&k.as_str()) {
                    *item = toml::Value::String(REDACTED.into());
                } else {
                    redact(item, k == "headers");
                }
            }
        }
        toml::Value::Array(a) => {
            for item in a {
                redact(item, all);
            }
        }
        other if all => *other = toml::Value::String(REDACTED.into()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_any_form_are_redacted() {
        let mut v: toml::Value = toml::from_str(
            r#"
[server]
admin_token = "s3cret-inline-token-value"
listen = "127.0.0.1:8080"
[state]
redis_url = { env = "REDIS_URL" }
[[tenants]]
id = "a"
[tenants.backend]
bearer_token = { file = "tok" }
[telemetry.otlp]
headers = { "x-api-key" = "k-123", other = { env = "X" } }
"#,
        )
        .unwrap();
        redact(&mut v, false);
        let s = serde_json::to_string(&v).unwrap();
        for leaked in ["s3cret", "REDIS_URL", "\"tok\"", "k-123", "\"X\""] {
            assert!(!s.contains(leaked), "{leaked} in {s}");
        }
        assert!(s.contains("127.0.0.1:8080"));
        assert_eq!(v["server"]["admin_token"].as_str(), Some(REDACTED));
        assert_eq!(
            v["telemetry"]["otlp"]["headers"]["x-api-key"].as_str(),
            Some(REDACTED)
        );
    }

    /// Every `Secret` field of the config is in `SECRET_KEYS`.
    #[test]
    fn every_secret_field_is_listed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/aap-core/src/config");
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                let line = line.trim();
                if !line.starts_with("pub ") || !line.contains("Secret") || line.contains("fn ") {
                    continue;
                }
                let Some((name, ty)) = line.trim_start_matches("pub ").split_once(':') else {
                    continue;
                };
                if ty.contains("BTreeMap<String, Secret>") {
                    assert_eq!(
                        name, "headers",
                        "a map of secrets other than headers: {line}"
                    );
                } else if ty.contains("Secret>") || ty.trim() == "Secret," {
                    assert!(
                        SECRET_KEYS.contains(&name) || name == "admin_secret",
                        "{name} holds a Secret but is not in SECRET_KEYS"
                    );
                }
            }
        }
    }
}
