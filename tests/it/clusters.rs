//! Named upstream clusters over real HTTP: many tenants on one cluster share one pool (seen in
//! `/metrics`), background DNS with readiness detail, `check` offline, reloads keep the pool.

use crate::support::*;
use serde_json::{json, Value};

const TOKEN: &str = "upstream-secret";

/// `n` `kind = "mcp"` tenants `dealer-<i>` on cluster `name`, whose
/// `[[clusters]]` entry lists `peers`.
fn cluster_config(name: &str, peers: &[String], n: usize, extra_tenant: &str) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    let mut out = format!(
        r#"[server]
listen = "127.0.0.1:8080"
admin_listen = "127.0.0.1:9090"
threads = 2
admin_token_env = "AAP_ADMIN_TOKEN"

[state]
dir = "var"

[[clusters]]
name = "{name}"
peers = [{}]
connect_timeout_ms = 1000
request_timeout_ms = 8000
health_check_interval_ms = 500
dns_refresh_secs = 1
"#,
        list.join(", ")
    );
    for i in 0..n {
        out.push_str(&format!(
            "\n[[tenants]]\nid = \"dealer-{i}\"\npath = \"/aap/3.0.0/dealer-{i}/mcp\"\n{extra_tenant}\n[tenants.backend]\nkind = \"mcp\"\ncluster = \"{name}\"\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nbearer_token = \"{TOKEN}\"\n"
        ));
    }
    out
}

/// A modern `dealer.information` call on tenant `i`.
fn dealer_info(gw: &Gateway, i: usize) -> Resp {
    let name = "aap_dealer_information";
    let body = modern(
        "tools/call",
        json!({"name": name, "arguments": {"type": "dealer.information.request"}}),
    );
    request(
        gw.port,
        "POST",
        &format!("/aap/3.0.0/dealer-{i}/mcp"),
        &[
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", name),
        ],
        body.to_string().as_bytes(),
    )
}

fn metrics(gw: &Gateway) -> String {
    request(gw.admin, "GET", "/metrics", &[], b"").text()
}

/// The value of the series `family{cluster="name"}` (`None`: no such series).
fn series(text: &str, family: &str, cluster: &str) -> Option<f64> {
    let prefix = format!("{family}{{cluster=\"{cluster}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Every cluster label of `family`.
fn clusters_of(text: &str, family: &str) -> Vec<String> {
    let prefix = format!("{family}{{cluster=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| l.split('"').next())
        .map(str::to_owned)
        .collect()
}

fn readyz(gw: &Gateway) -> Value {
    request(gw.admin, "GET", "/readyz", &[], b"").json()
}

fn run_cmd(cmd: &[&str], args: &[&str], config: &std::path::Path) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_aap-gateway");
    let (program, pre) = cmd.split_first().unwrap_or((&bin, &[]));
    std::process::Command::new(program)
        .args(pre)
        .args((!cmd.is_empty()).then_some(bin))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap()
}

#[test]
fn fifty_tenants_on_one_cluster_share_one_pool_and_a_reload_keeps_it() {
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[("AAP_MCP_TOKEN", TOKEN)]);
    let gw = Gateway::start_with(&cluster_config("dealers", &[peer.url()], 50, ""));
    for i in 0..50 {
        let r = dealer_info(&gw, i);
        assert_eq!(r.status, 200, "tenant {i}: {}", r.text());
        let j = r.json();
        assert_eq!(j["result"]["isError"], false, "tenant {i}: {j}");
        assert_eq!(
            j["result"]["structuredContent"]["type"], "dealer.information.response",
            "{j}"
        );
    }
    let m = metrics(&gw);
    // One cluster, one client: every cluster family has exactly one series.
    assert_eq!(
        clusters_of(&m, "aap_upstream_cluster_peers"),
        vec!["dealers"],
        "{m}"
    );
    assert_eq!(
        series(&m, "aap_upstream_cluster_peers", "dealers"),
        Some(1.0)
    );
    assert_eq!(
        series(&m, "aap_upstream_cluster_ready", "dealers"),
        Some(1.0)
    );
    let opened = series(
        &m,
        "aap_upstream_cluster_connections_opened_total",
        "dealers",
    )
    .expect("the pool's counter");
    let reused = series(
        &m,
        "aap_upstream_cluster_connections_reused_total",
        "dealers",
    )
    .expect("the pool's counter");
    // 50 tenants, one after another: the connections come from one pool
    // (bounded by the gateway's concurrency, not by the tenant count).
    assert!((1.0..=4.0).contains(&opened), "opened {opened}\n{m}");
    assert!(opened + reused >= 50.0, "{opened} + {reused}");

    // A reload that keeps the cluster (one tenant more) keeps its client:
    // the counters go on, and the next calls use the pooled connections.
    std::fs::write(&gw.config, cluster_config("dealers", &[peer.url()], 51, "")).unwrap();
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    for i in [0, 25, 50] {
        let r = dealer_info(&gw, i);
        assert_eq!(r.status, 200, "tenant {i}: {}", r.text());
    }
    let m = metrics(&gw);
    assert_eq!(
        series(
            &m,
            "aap_upstream_cluster_connections_opened_total",
            "dealers"
        ),
        Some(opened),
        "no new connection after the reload\n{m}"
    );
    assert!(
        series(
            &m,
            "aap_upstream_cluster_connections_reused_total",
            "dealers"
        )
        .is_some_and(|r| r >= reused + 3.0),
        "{m}"
    );

    // A reload that changes the cluster's settings builds a new client: its
    // pool opens a connection of its own (the series continues: the label is
    // the cluster's name).
    let changed = cluster_config("dealers", &[peer.url()], 51, "")
        .replace("request_timeout_ms = 8000", "request_timeout_ms = 7000");
    std::fs::write(&gw.config, changed).unwrap();
    assert_eq!(gw.reload().status, 200);
    let r = dealer_info(&gw, 3);
    assert_eq!(r.status, 200, "{}", r.text());
    let m = metrics(&gw);
    assert_eq!(
        series(
            &m,
            "aap_upstream_cluster_connections_opened_total",
            "dealers"
        ),
        Some(opened + 1.0),
        "a new pool for new settings\n{m}"
    );
}

#[test]
fn inline_peers_with_identical_settings_share_one_cluster() {
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[("AAP_MCP_TOKEN", TOKEN)]);
    let inline = cluster_config("x", &[peer.url()], 3, "")
        .replace("cluster = \"x\"", &format!("peers = [{:?}]", peer.url()));
    let gw = Gateway::start_with(&inline);
    for i in 0..3 {
        assert_eq!(dealer_info(&gw, i).status, 200);
    }
    let m = metrics(&gw);
    let names = clusters_of(&m, "aap_upstream_cluster_peers");
    // One inline cluster for all three (the named cluster "x", used by no
    // tenant, builds no client).
    assert_eq!(names.len(), 1, "{m}");
    assert!(names[0].starts_with("inline-"), "{names:?}");
}

#[test]
fn a_name_that_does_not_resolve_is_not_ready_and_a_reload_to_a_resolving_name_recovers() {
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[("AAP_MCP_TOKEN", TOKEN)]);
    // `.invalid` never resolves (RFC 6761); the gateway starts anyway.
    let text = cluster_config(
        "later",
        &[format!("http://peer.invalid:{}", peer.port)],
        2,
        "",
    );
    let gw = Gateway::start_with(&text);
    let r = dealer_info(&gw, 0);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        r.error_code(),
        -32011,
        "the typed upstream-unavailable error"
    );
    let ready = readyz(&gw);
    assert_eq!(ready["status"], "ready", "{ready}");
    let waiting = ready["clusters_not_ready"].as_array().expect("detail");
    assert_eq!(waiting.len(), 1, "{ready}");
    assert_eq!(waiting[0]["cluster"], "later");
    assert!(
        waiting[0]["reason"]
            .as_str()
            .unwrap()
            .contains("cannot resolve peer.invalid"),
        "{ready}"
    );
    // Resolution keeps retrying in the background.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let m = metrics(&gw);
    assert!(
        series(&m, "aap_upstream_cluster_dns_failures_total", "later").is_some_and(|n| n >= 2.0),
        "{m}"
    );
    assert_eq!(series(&m, "aap_upstream_cluster_ready", "later"), Some(0.0));
    // Point the cluster at a name that resolves (localhost, from /etc/hosts).
    std::fs::write(&gw.config, text.replace("peer.invalid", "localhost")).unwrap();
    assert_eq!(gw.reload().status, 200);
    let r = dealer_info(&gw, 1);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["isError"], false);
    let ready = readyz(&gw);
    assert!(ready.get("clusters_not_ready").is_none(), "{ready}");
}

#[test]
fn check_needs_no_network_and_names_are_never_looked_up() {
    let dir = temp_dir("clusters-check");
    let path = dir.join("gw.toml");
    let text = cluster_config(
        "far",
        &[
            "http://peer.invalid:8001".into(),
            "https://also.invalid".into(),
        ],
        3,
        "",
    );
    std::fs::write(&path, &text).unwrap();
    let out = run_cmd(&[], &["check"], &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // In a network namespace of its own (no interface but a down loopback).
    let unshare = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if unshare {
        let out = run_cmd(&["unshare", "-rn"], &["check"], &path);
        assert!(
            out.status.success(),
            "check without a network: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("unshare -rn is not available here: the offline check ran with the network");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_unknown_cluster_or_peers_beside_a_cluster_are_config_errors_naming_the_tenant() {
    let dir = temp_dir("clusters-errors");
    let path = dir.join("gw.toml");
    let base = cluster_config("known", &["http://127.0.0.1:1".into()], 2, "");
    let cases = [
        (
            // Only the second tenant names an unknown cluster.
            base.replacen("cluster = \"known\"", "cluster = \"nope\"", 2)
                .replacen("cluster = \"nope\"", "cluster = \"known\"", 1),
            "tenants[1].backend.cluster: tenant dealer-1 names cluster \"nope\", which no [[clusters]] entry defines",
        ),
        (
            base.replacen(
                "cluster = \"known\"",
                "cluster = \"known\"\npeers = [\"http://127.0.0.1:2\"]",
                1,
            ),
            "tenants[0].backend.peers: set peers in the cluster \"known\", not beside cluster",
        ),
        (
            base.replacen(
                "cluster = \"known\"",
                "cluster = \"known\"\nrequest_timeout_ms = 5",
                1,
            ),
            "tenants[0].backend.request_timeout_ms: set it in the cluster \"known\"",
        ),
        (
            base.replace("dns_refresh_secs = 1", "dns_refresh_secs = 0"),
            "clusters[0].dns_refresh_secs: must be between 1 and 86400 seconds",
        ),
        (
            format!("{base}\n[[clusters]]\nname = \"known\"\npeers = [\"http://127.0.0.1:3\"]\n"),
            "clusters[1].name: cluster \"known\" is defined twice",
        ),
        (
            base.replace("peers = [\"http://127.0.0.1:1\"]", "peers = [\"ftp://x\"]"),
            "clusters[0].peers:",
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&path, &text).unwrap();
        let out = run_cmd(&[], &["check"], &path);
        assert_eq!(out.status.code(), Some(2), "{want}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "want {want:?}, got {err}");
    }
    std::fs::remove_dir_all(dir).ok();
}
