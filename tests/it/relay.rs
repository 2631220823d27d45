//! `kind = "relay"` against the real strict MCP server: methods forwarded,
//! mirror headers filled, upstream sessions and event streams passed on.
//!
//! The server is PyPI mcp 2.3.0's; every method is forwarded, mirror
//! headers are checked and filled, the upstream's own sessions and event
//! streams pass through.

use crate::support::*;
use serde_json::{json, Value};

fn relay_backend(peers: &[String], extra: &str) -> String {
    let list: Vec<String> = peers.iter().map(|p| format!("{p:?}")).collect();
    forwarding_config(&format!(
        "kind = \"relay\"\npeers = [{}]\npath = \"/mcp\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nhealth_check_interval_ms = 500\n{extra}",
        list.join(", ")
    ))
    .replace(
        "[tenants.backend]",
        "allowed_origins = [\"https://dealer.example\"]\n\n[tenants.backend]",
    )
}

fn seen_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn search_all() -> Value {
    json!({"type": "inventory.search.request", "pagination": {"limit": 5}})
}

#[test]
fn headerless_modern_requests_reach_a_strict_server_with_headers_filled() {
    let seen = temp_dir("relay-seen").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--seen", &seen_arg],
        &[("AAP_MCP_TOKEN", "upstream-secret")],
    );
    let gw = Gateway::start_with(&relay_backend(
        &[peer.url()],
        "bearer_token = \"upstream-secret\"",
    ));
    // The client's own credential is for the gateway: the upstream gets its
    // configured one instead (it would answer 401 to the client's).
    let client_auth = ("Authorization", "Bearer client-own-token");

    let r = gw.rpc(&[client_auth], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    let tools = r.json()["result"]["tools"].as_array().unwrap().clone();
    assert_eq!(tools.len(), 5, "the upstream's catalog, relayed");
    let last = seen_lines(&seen).pop().unwrap();
    assert_eq!(last["mcp-method"], "tools/list", "{last}");
    assert_eq!(last["mcp-protocol-version"], MODERN, "{last}");

    let r = headerless_call(&gw, "aap_inventory_search", search_all());
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(
        j["result"]["structuredContent"]["type"], "inventory.search.response",
        "{j}"
    );
    let last = seen_lines(&seen).pop().unwrap();
    assert_eq!(last["mcp-name"], "aap_inventory_search", "{last}");
    assert_eq!(last["mcp-method"], "tools/call", "{last}");
    let filled = gw.logs();
    assert!(
        filled.contains("Mcp-Name"),
        "filled headers logged: {filled}"
    );

    // Conflicts and unknown versions are refused before the upstream sees them.
    let before = seen_lines(&seen).len();
    let call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": search_all()}),
    );
    let r = gw.rpc(&[("Mcp-Name", "aap_lead_submit")], &call);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error_code(), -32020);
    assert_eq!(r.json()["id"], 1, "the error answers the request's id");
    let r = gw.rpc(&[("MCP-Protocol-Version", "2025-11-25")], &call);
    assert_eq!(r.error_code(), -32020);
    let r = gw.rpc(
        &[("MCP-Protocol-Version", "latest")],
        &legacy("ping", json!({})),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.error_code(), -32022);
    let r = gw.post(&[], "{\"jsonrpc\":\"2.0\",");
    assert_eq!(r.error_code(), -32700);
    let r = gw.rpc(&[("Origin", "https://evil.example")], &call);
    assert_eq!(r.status, 403, "{}", r.text());
    let r = gw.rpc(&[("Origin", "https://dealer.example")], &call);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(seen_lines(&seen).len(), before + 1, "only the allowed call");
    assert!(
        !gw.logs().contains("client-own-token") && !gw.logs().contains("upstream-secret"),
        "no credentials in logs"
    );
}

/// A legacy session stays on the peer that issued it, and its negotiated
/// version fills an omitted `MCP-Protocol-Version`.
#[test]
fn legacy_sessions_pass_through_with_affinity_and_the_negotiated_version() {
    let dir = temp_dir("relay-sessions");
    let seen: Vec<_> = (0..2).map(|i| dir.join(format!("seen{i}.jsonl"))).collect();
    let args: Vec<String> = seen.iter().map(|p| p.display().to_string()).collect();
    let peers: Vec<Peer> = args
        .iter()
        .map(|a| {
            Peer::start(
                PeerKind::StrictMcp,
                &["--legacy-sessions", "--seen", a],
                &[],
            )
        })
        .collect();
    let urls: Vec<String> = peers.iter().map(Peer::url).collect();
    let gw = Gateway::start_with(&relay_backend(&urls, ""));
    let accept = ("Accept", "application/json, text/event-stream");
    let r = gw.rpc(
        &[accept],
        &legacy(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "relay-test", "version": "1"}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r
        .header("mcp-session-id")
        .expect("the upstream's session id is passed back")
        .to_owned();
    let home = seen
        .iter()
        .position(|p| !seen_lines(p).is_empty())
        .expect("one peer saw the handshake");
    let r = gw.rpc(
        &[("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", LEGACY)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    // Round robin would send every other request to the wrong peer (404).
    for _ in 0..6 {
        let r = gw.rpc(
            &[("Mcp-Session-Id", &sid), accept],
            &legacy(
                "tools/call",
                json!({"name": "aap_inventory_search", "arguments": search_all()}),
            ),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let text = r.text();
        assert!(text.contains("inventory.search.response"), "{text}");
    }
    let lines = seen_lines(&seen[home]);
    assert_eq!(lines.len(), 8, "all on the issuing peer: {lines:?}");
    assert!(seen_lines(&seen[1 - home]).is_empty());
    let filled = lines.last().unwrap();
    assert_eq!(filled["mcp-protocol-version"], LEGACY, "{filled}");
    // DELETE ends the upstream session; the id is then unknown upstream.
    let r = request(
        gw.port,
        "DELETE",
        ENDPOINT,
        &[("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", LEGACY)],
        b"",
    );
    assert!((200..300).contains(&r.status), "{} {}", r.status, r.text());
    let r = gw.rpc(
        &[
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", LEGACY),
            accept,
        ],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 404, "{}", r.text());
}

/// Progress events reach the client while the upstream still holds its
/// result (it waits for a file written only after the first event arrived).
#[test]
fn event_streams_are_relayed_as_they_happen() {
    let hold = temp_dir("relay-hold").join("release");
    let hold_arg = hold.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--sse", "--hold-until", &hold_arg],
        &[],
    );
    let gw = Gateway::start_with(&relay_backend(&[peer.url()], ""));
    let (mut s, mut got) = open_progress_stream(gw.port, "relay-live");
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    assert!(
        !head.contains("\"result\""),
        "result before release: {head}"
    );
    std::fs::write(&hold, b"go").unwrap();
    let all = read_rest(&mut s, &mut got);
    assert!(all.contains("inventory.search.response"), "{all}");
}

#[test]
fn an_unreachable_upstream_is_a_typed_502() {
    let port = free_port();
    let gw = Gateway::start_with(&relay_backend(&[format!("http://127.0.0.1:{port}")], ""));
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32011);
    // The gateway keeps serving and answers the same way again.
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 502);
    let r = request(gw.port, "PUT", ENDPOINT, &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST, GET, DELETE"));
}

/// Hop-by-hop fields of the upstream's answer, and those its `Connection` names, stay on the
/// upstream's hop (RFC 9110 §7.6.1); its end-to-end fields reach the client.
#[test]
fn the_upstreams_hop_by_hop_fields_stay_on_its_hop() {
    let (up, heads) = recording_upstream();
    let gw = Gateway::start_with(&relay_backend(&[format!("http://127.0.0.1:{up}")], ""));
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"ok");
    assert_eq!(r.header("x-kept"), Some("yes"));
    for gone in ["x-up-secret", "keep-alive", "proxy-agent"] {
        assert_eq!(r.header(gone), None, "{gone} reached the client: {r:?}");
    }
    let head = heads
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    assert!(head.starts_with("POST /mcp HTTP/1.1\r\n"), "{head}");
}
