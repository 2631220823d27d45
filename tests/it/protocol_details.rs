//! Protocol details over real HTTP: JSON-RPC codes outside MCP's reserved
//! range, request ids on early refusals, peer host names resolved late.
//!
//! The gateway's own JSON-RPC codes stay out of the range MCP 2026-07-28
//! reserves, modern requests ignore legacy sessions, early refusals carry
//! the request id, and peer host names are resolved when the backend is
//! built, never while a config is validated.

use crate::support::*;
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

/// MCP 2026-07-28 reserves -32020..-32099 for the codes it defines; the
/// gateway emits only -32020 and -32022 from it.
fn assert_not_reserved(code: i64) {
    assert!(
        !(-32099..=-32020).contains(&code) || code == -32020 || code == -32022,
        "{code} lies in the range MCP reserves for spec-defined codes"
    );
}

fn mcp_backend(peer: &str, extra: &str) -> String {
    forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"{peer}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 500\nrequest_timeout_ms = 1000\nhealth_check_interval_ms = 60000\n{extra}"
    ))
}

fn relay_backend(peer: &str) -> String {
    forwarding_config(&format!(
        "kind = \"relay\"\npeers = [\"{peer}\"]\npath = \"/mcp\"\nconnect_timeout_ms = 500\nrequest_timeout_ms = 2000\nhealth_check_interval_ms = 60000\n"
    ))
    .replace(
        "[tenants.backend]",
        "allowed_origins = [\"https://dealer.example\"]\n\n[tenants.backend]",
    )
}

fn search() -> Value {
    json!({"type": "inventory.search.request", "pagination": {"limit": 1}})
}

/// A peer that accepts connections and never answers.
fn silent_peer() -> (TcpListener, u16) {
    let l = listener();
    let port = l.local_addr().unwrap().port();
    let accept = l.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in accept.incoming() {
            match s {
                Ok(s) => held.push(s),
                Err(_) => break,
            }
        }
    });
    (l, port)
}

/// A peer that answers every request with one fixed JSON-RPC result.
fn answering_peer() -> u16 {
    let l = listener();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(5))).ok();
                if read_request(&mut s).is_none() {
                    return;
                }
                let body = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"public"}}"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                s.write_all(resp.as_bytes()).ok();
            });
        }
    });
    port
}

// ---- JSON-RPC codes ----------------------------------------------------

#[test]
fn upstream_failures_use_codes_outside_the_reserved_range() {
    // Unreachable: 502 -32011.
    let dead = free_port();
    let gw = Gateway::start_with(&mcp_backend(&format!("http://127.0.0.1:{dead}"), ""));
    let r = gw.call("aap_inventory_search", search());
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32011);
    assert_eq!(r.json()["id"], 1, "the request id");
    assert_not_reserved(r.error_code());
    drop(gw);
    // No answer in time: 504 -32012.
    let (_held, port) = silent_peer();
    let gw = Gateway::start_with(&mcp_backend(&format!("http://127.0.0.1:{port}"), ""));
    let r = gw.call("aap_inventory_search", search());
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.error_code(), -32012);
    assert_not_reserved(r.error_code());
    // The relay answers the same way.
    let gw = Gateway::start_with(&relay_backend(&format!("http://127.0.0.1:{dead}")));
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32011);
}

#[test]
fn throttling_is_429_with_its_code_retry_after_and_the_request_id() {
    let cfg = config_with("", "", "").replace(
        "tenant_per_second = 0.0\ntenant_burst = 0",
        "tenant_per_second = 0.01\ntenant_burst = 1",
    );
    let gw = Gateway::start_with(&cfg);
    let body = json!({"jsonrpc": "2.0", "id": "first", "method": "tools/list", "params": {"_meta": meta()}});
    assert_eq!(gw.rpc(&[], &body).status, 200);
    let body = json!({"jsonrpc": "2.0", "id": "req-429", "method": "tools/list", "params": {"_meta": meta()}});
    let r = gw.rpc(&[], &body);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let j = r.json();
    assert_eq!(j["error"]["code"], -32013, "{j}");
    assert_not_reserved(r.error_code());
    assert_eq!(j["id"], "req-429", "the id of a body that was read: {j}");
    assert!(j["error"]["data"]["retry_after_ms"].as_u64().is_some());
    // A notification has no id to give.
    let r = gw.rpc(
        &[],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["id"], Value::Null);
}

// ---- Legacy sessions and modern requests --------------------------------

#[test]
fn a_modern_request_ignores_an_unknown_session_id() {
    let cfg = config_with("", "", "").replace("legacy_sessions = false", "legacy_sessions = true");
    let gw = Gateway::start_with(&cfg);
    let stale = ("Mcp-Session-Id", "no-such-session");
    let modern_header = ("MCP-Protocol-Version", MODERN);
    // A modern notification: modern MCP has no protocol sessions.
    let r = gw.rpc(
        &[stale, modern_header],
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    // A modern request (header and body) is served.
    let r = gw.rpc(&[stale, modern_header], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    // A request declared modern by its header only is judged as a modern
    // request (its _meta keys are missing), not as a legacy session.
    let r = gw.rpc(
        &[stale, modern_header],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}),
    );
    assert_eq!((r.status, r.error_code()), (400, -32602), "{}", r.text());
    // The 2025-11-25 lifecycle keeps its 404 for an unknown session.
    let r = gw.rpc(
        &[stale, ("MCP-Protocol-Version", LEGACY)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!((r.status, r.error_code()), (404, -32001), "{}", r.text());
    assert_eq!(r.json()["id"], 7);
}

// ---- Request ids on early answers ---------------------------------------

#[test]
fn early_refusals_carry_the_request_id_when_the_body_was_read() {
    let gw = Gateway::start();
    let body = json!({"jsonrpc": "2.0", "id": "abc-1", "method": "tools/list", "params": {"_meta": meta()}}).to_string();
    let b = body.as_bytes();
    // 415: Content-Type is not JSON.
    let r = gw.post_raw(&[("Content-Type", "text/plain")], b);
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(r.json()["id"], "abc-1", "{}", r.text());
    // 406: Accept admits neither JSON nor SSE.
    let r = gw.post_raw(
        &[
            ("Content-Type", "application/json"),
            ("Accept", "text/html"),
        ],
        b,
    );
    assert_eq!(r.status, 406, "{}", r.text());
    assert_eq!(r.json()["id"], "abc-1");
    // 403: Origin not allowed.
    let r = gw.post_raw(
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://evil.example"),
        ],
        b,
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["id"], "abc-1");
    // 405: a method other than POST, with a body.
    let r = request(
        gw.port,
        "PUT",
        ENDPOINT,
        &[("Content-Type", "application/json")],
        b,
    );
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.json()["id"], "abc-1");
    // An integer id comes back as the same integer.
    let int_body = body.replace("\"abc-1\"", "42");
    let r = gw.post_raw(&[("Content-Type", "text/plain")], int_body.as_bytes());
    assert_eq!(r.json()["id"], 42);
    // No id to give: a body that is not a valid request keeps null, and
    // the check that wins is the same (415 before the parse error).
    for bad in [
        "{not json",
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#,
    ] {
        let r = gw.post_raw(&[("Content-Type", "text/plain")], bad.as_bytes());
        assert_eq!(r.status, 415, "{bad}");
        assert_eq!(r.json()["id"], Value::Null, "{bad}");
    }
}

#[test]
fn relay_early_refusals_carry_the_request_id() {
    let gw = Gateway::start_with(&relay_backend(&format!("http://127.0.0.1:{}", free_port())));
    let body =
        json!({"jsonrpc": "2.0", "id": "r-9", "method": "tools/list", "params": {"_meta": meta()}})
            .to_string();
    let r = gw.post_raw(&[("Content-Type", "text/plain")], body.as_bytes());
    assert_eq!(r.status, 415, "{}", r.text());
    assert_eq!(r.json()["id"], "r-9");
    let r = gw.post_raw(
        &[
            ("Content-Type", "application/json"),
            ("Accept", "image/png"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 406, "{}", r.text());
    assert_eq!(r.json()["id"], "r-9");
    let r = gw.post_raw(
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://evil.example"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["id"], "r-9");
}

// ---- Peer host names: syntax at validation, resolution at build ---------

fn run_cmd(
    args: &[&str],
    config: &std::path::Path,
    state: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn check_is_offline_and_refuses_a_peer_syntax_error() {
    // `.invalid` never resolves (RFC 6761).
    let dir = temp_dir("dns");
    let path = dir.join("gw.toml");
    std::fs::write(&path, mcp_backend("http://upstream.invalid:8001", "")).unwrap();
    let out = run_cmd(&["check"], &path, &dir);
    assert!(
        out.status.success(),
        "check validates syntax only: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A syntax error is still refused by check.
    std::fs::write(&path, mcp_backend("http://upstream..invalid:8001", "")).unwrap();
    let out = run_cmd(&["check"], &path, &dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("backend.peers"), "{err}");
    // `run` does not wait for DNS: it starts, and the cluster whose name
    // does not resolve is reported in /readyz (see tests/it/clusters.rs).
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_host_name_that_resolves_works_end_to_end_and_a_failed_reload_keeps_serving() {
    let port = answering_peer();
    let gw = Gateway::start_with(&relay_backend(&format!("http://localhost:{port}")));
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["tools"], json!([]));
    // A reload naming a peer that does not resolve is applied (names are
    // resolved in the background, never by a reload); its requests get the
    // typed upstream-unavailable error until the name resolves.
    let cfg = std::fs::read_to_string(&gw.config).unwrap();
    std::fs::write(
        &gw.config,
        cfg.replace(&format!("localhost:{port}"), "gone.invalid:80"),
    )
    .unwrap();
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 502, "{}", r.text());
    std::fs::write(&gw.config, cfg).unwrap();
    assert_eq!(gw.reload().status, 200);
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
}
