//! The `mcp` backend against real MCP servers (tests/upstreams): the strict
//! PyPI mcp 2.3.0 server and the legacy-only npm sdk 1.32.2 server.

mod common;
use common::*;
use serde_json::{json, Value};

fn mcp_backend(peers: &[String], revision: &str, extra: &str) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [{}]\npath = \"/mcp\"\nrevision = \"{revision}\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nhealth_check_interval_ms = 500\n{extra}",
        list.join(", ")
    ))
}

fn search_all() -> Value {
    json!({"type": "inventory.search.request", "pagination": {"limit": 5}})
}

fn assert_search(sc: &Value) {
    assert_eq!(sc["type"], "inventory.search.response", "{sc}");
    assert_eq!(sc["data"]["total"], 92, "{sc}");
    assert_eq!(sc["data"]["vehicles"].as_array().unwrap().len(), 5);
}

#[test]
fn headerless_modern_client_reaches_strict_server() {
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &[],
        &[("AAP_MCP_TOKEN", "upstream-secret")],
    );
    let gw = Gateway::start_with(&mcp_backend(
        &[peer.url()],
        "2026-07-28",
        "bearer_token = \"upstream-secret\"",
    ));
    // No MCP-Protocol-Version, Mcp-Method, Mcp-Name or Accept: the strict
    // server would answer -32020; the gateway fills them.
    let r = headerless_call(&gw, "aap_inventory_search", search_all());
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let j = r.json();
    assert_eq!(j["result"]["resultType"], "complete");
    assert_eq!(j["result"]["isError"], false);
    assert_search(&j["result"]["structuredContent"]);
    // Every skill, with the full header set too.
    let (err, sc) = gw.call_sc(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert!(!err, "{sc}");
    assert_eq!(sc["type"], "dealer.information.response");
    let (err, sc) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}),
    );
    assert!(!err, "{sc}");
    assert_eq!(sc["data"]["stock"], "DT-1001", "{sc}");
    let (err, sc) = gw.call_sc(
        "aap_inventory_facets",
        json!({"type": "inventory.facets.request"}),
    );
    assert!(!err, "{sc}");
    // Typed upstream errors keep their meaning.
    let (err, sc) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1011"}),
    );
    assert!(err);
    assert_eq!(sc["code"], "VEHICLE_UNAVAILABLE", "{sc}");
    // A lead, then the same key again: one lead upstream.
    let (err, first) = gw.call_sc("aap_lead_submit", lead("k-strict-1"));
    assert!(!err, "{first}");
    let (err, again) = gw.call_sc("aap_lead_submit", lead("k-strict-1"));
    assert!(!err, "{again}");
    assert_eq!(first["data"]["lead_id"], again["data"]["lead_id"]);
    assert_eq!(peer.leads().len(), 1);
}

#[test]
fn wrong_upstream_credential_is_a_502_not_a_leak() {
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[("AAP_MCP_TOKEN", "right")]);
    let gw = Gateway::start_with(&mcp_backend(
        &[peer.url()],
        "2026-07-28",
        "bearer_token = \"wrong\"",
    ));
    let r = gw.call("aap_inventory_search", search_all());
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32031);
    assert!(!r.text().contains("wrong"), "no credentials in errors");
}

#[test]
fn legacy_client_uses_modern_only_upstream() {
    let peer = Peer::start(PeerKind::StrictMcp, &["--modern-only"], &[]);
    // auto: server/discover succeeds, so the upstream is spoken to as modern.
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "auto", ""));
    legacy_handshake(&gw);
    let result = legacy_call(&gw, "aap_inventory_search", search_all());
    assert_eq!(result["isError"], false, "{result}");
    assert_search(&result["structuredContent"]);
    assert!(
        gw.logs().contains("\"revision\":\"2026-07-28\""),
        "auto chose modern: {}",
        gw.logs()
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, result["structuredContent"]);
}

#[test]
fn modern_client_uses_legacy_only_upstream_with_sessions() {
    let mut peer = Peer::start(PeerKind::LegacyMcp, &[], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "auto", ""));
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_search(&sc);
    // A header-less modern call too.
    let r = headerless_call(
        &gw,
        "aap_inventory_facets",
        json!({"type": "inventory.facets.request"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["resultType"], "complete");
    // The upstream restarts: its sessions are gone (404); the gateway
    // re-initializes and the client never notices.
    peer.restart();
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_search(&sc);
    let logs = gw.logs();
    assert!(
        logs.contains("upstream MCP revision detected")
            && logs.contains("\"revision\":\"2025-11-25\""),
        "auto chose legacy: {logs}"
    );
    assert!(
        logs.contains("upstream session expired; re-initializing"),
        "404 led to a new session: {logs}"
    );
    // A lead through the legacy upstream, deduplicated by the key.
    let (err, first) = gw.call_sc("aap_lead_submit", lead("k-legacy-1"));
    assert!(!err, "{first}");
    assert_eq!(first["data"]["status"], "received");
    assert_eq!(peer.leads().len(), 1);
}

#[test]
fn legacy_pinned_upstream_with_json_responses() {
    let peer = Peer::start(PeerKind::LegacyMcp, &["--json-response"], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2025-11-25", ""));
    legacy_handshake(&gw);
    let result = legacy_call(&gw, "aap_inventory_search", search_all());
    assert_search(&result["structuredContent"]);
}

#[test]
fn sse_upstream_answers_collapse_to_json() {
    let peer = Peer::start(PeerKind::StrictMcp, &["--sse"], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2026-07-28", ""));
    // JSON-only client.
    let r = gw.rpc(
        &[("Accept", "application/json")],
        &modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": search_all()}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json"),
        "{:?}",
        r.headers
    );
    assert_search(&r.json()["result"]["structuredContent"]);
    // An SSE-only client gets the gateway's own single-event stream.
    let r = gw.rpc(
        &[("Accept", "text/event-stream")],
        &modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": search_all()}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let data = r
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("data:").map(|d| d.trim().to_owned()))
        .unwrap();
    let msg: Value = serde_json::from_str(&data).unwrap();
    assert_search(&msg["result"]["structuredContent"]);
    // Legacy client over the SSE upstream.
    legacy_handshake(&gw);
    let result = legacy_call(
        &gw,
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}),
    );
    assert_eq!(result["structuredContent"]["data"]["stock"], "DT-1001");
}

#[test]
fn reads_route_around_a_killed_peer() {
    let a = Peer::start(PeerKind::StrictMcp, &[], &[]);
    let mut b = Peer::start(PeerKind::StrictMcp, &[], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[a.url(), b.url()], "2026-07-28", ""));
    for _ in 0..4 {
        let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
        assert!(!err, "{sc}");
    }
    b.kill();
    for i in 0..8 {
        let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
        assert!(!err, "call {i} after the kill: {sc}");
        assert_search(&sc);
    }
    // The background TCP health check (every 500 ms) notices too.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let seen = loop {
        let logs = gw.logs();
        if logs.contains("upstream peer health changed")
            && logs.contains(&format!("127.0.0.1:{}", b.port))
        {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(seen, "health check marked the killed peer: {}", gw.logs());
}

#[test]
fn lead_to_dead_upstream_is_502_and_never_duplicated() {
    let port = free_port();
    let gw = Gateway::start_with(&mcp_backend(
        &[format!("http://127.0.0.1:{port}")],
        "2026-07-28",
        "",
    ));
    let r = gw.call("aap_lead_submit", lead("k-dead-1"));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32031);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("nothing was executed"), "{msg}");
    // The upstream comes back; the client retries with the same key.
    let peer = Peer::start_on(PeerKind::StrictMcp, port, &[], &[], None);
    let (err, first) = gw.call_sc("aap_lead_submit", lead("k-dead-1"));
    assert!(!err, "{first}");
    assert_eq!(first["data"]["status"], "received");
    let (err, again) = gw.call_sc("aap_lead_submit", lead("k-dead-1"));
    assert!(!err, "{again}");
    assert_eq!(first["data"]["lead_id"], again["data"]["lead_id"]);
    assert_eq!(peer.leads().len(), 1, "exactly one lead stored upstream");
    // The upstream saw a caller-scoped key, not the client's.
    let key = peer.leads()[0]["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(key.starts_with("gw-"), "{key}");
}

#[test]
fn read_timeout_is_504() {
    // A TCP listener that accepts and never answers.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hold = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().take(4) {
            held.push(s);
        }
        std::thread::sleep(std::time::Duration::from_secs(5));
    });
    let cfg = forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"http://127.0.0.1:{port}\"]\nrevision = \"2026-07-28\"\nrequest_timeout_ms = 600\n"
    ));
    let gw = Gateway::start_with(&cfg);
    let r = gw.call("aap_inventory_search", search_all());
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.error_code(), -32032);
    drop(gw);
    drop(hold);
}

#[test]
fn auto_reprobes_after_the_upstream_changes_era() {
    let port = free_port();
    let mut legacy = Peer::start_on(PeerKind::LegacyMcp, port, &[], &[], None);
    let gw = Gateway::start_with(&mcp_backend(
        &[format!("http://127.0.0.1:{port}")],
        "auto",
        "",
    ));
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    legacy.kill();
    let _modern = Peer::start_on(PeerKind::StrictMcp, port, &["--modern-only"], &[], None);
    // The first call after the swap may be withheld as an invalid answer (a
    // typed tool error, never a wrong success); the next one re-probes.
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    if err {
        assert_eq!(sc["code"], "UPSTREAM_INVALID_RESPONSE", "{sc}");
    }
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_search(&sc);
}
