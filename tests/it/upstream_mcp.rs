//! The `mcp` backend against real MCP servers (tests/upstreams): the strict
//! PyPI mcp 2.3.0 server and the legacy-only npm sdk 1.32.2 server.

use crate::support::*;
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

/// The strict PyPI server (it requires a bearer token) and a gateway in front of it on the
/// 2026-07-28 revision, with that token.
fn strict_peer_and_gateway() -> (Peer, Gateway) {
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
    (peer, gw)
}

#[test]
fn headerless_modern_client_reaches_strict_server() {
    let (peer, gw) = strict_peer_and_gateway();
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
    const WRONG: &str = "wrong-upstream-credential-7f3a";
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[("AAP_MCP_TOKEN", "right")]);
    let gw = Gateway::start_with(&mcp_backend(
        &[peer.url()],
        "2026-07-28",
        &format!("bearer_token = \"{WRONG}\""),
    ));
    let r = gw.call("aap_inventory_search", search_all());
    assert_eq!(r.status, 502, "{}", r.text());
    // Its own code and message: the agent learns the dealer system refused the gateway, not
    // that it could not be reached.
    assert_eq!(r.error_code(), -32014, "{}", r.text());
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("the dealer system refused the gateway's credentials"),
        "{message}"
    );
    assert!(message.contains("nothing was executed"), "{message}");
    assert!(!message.contains("could not be reached"), "{message}");
    assert!(!r.text().contains(WRONG), "no credentials in errors");
    // The log names the cause (the HTTP status), never the credential; the access line and
    // the request counter carry the distinct outcome.
    let logs = gw.logs();
    assert!(
        logs.contains("backend refused the gateway's credentials") && logs.contains("HTTP 401"),
        "{logs}"
    );
    assert!(!logs.contains(WRONG), "no credentials in the log");
    let access = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["target"] == "access" && l["fields"]["rpc_method"] == "tools/call")
        .unwrap_or_default();
    assert_eq!(access["fields"]["outcome"], "-32014", "{logs}");
    assert_eq!(access["fields"]["status"], 502, "{access}");
    let text = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert!(
        text.lines().any(|l| l.starts_with("aap_requests_total{")
            && l.contains("outcome=\"-32014\"")
            && l.contains("status=\"502\"")
            && l.ends_with(" 1")),
        "{text}"
    );
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
    let up = |port: u16| {
        let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
        let series = format!("aap_upstream_up{{peer=\"127.0.0.1:{port}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(series.as_str()).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {series} in {m}"))
    };
    assert_eq!((up(a.port), up(b.port)), ("1".into(), "1".into()));
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
    assert_eq!((up(a.port), up(b.port)), ("1".into(), "0".into()));
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
    assert_eq!(r.error_code(), -32011);
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
    let l = listener();
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
    assert_eq!(r.error_code(), -32012);
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
    // The new server refuses the legacy revision (-32022) before running
    // anything: the gateway probes again and re-sends the same call.
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_search(&sc);
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_search(&sc);
}

/// The data payloads of an SSE body, in order.
fn sse_messages(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:").map(str::trim_start))
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).unwrap())
        })
        .collect()
}

/// A client that accepts SSE sees the upstream's progress notifications
/// (its own progressToken) streamed before the gateway-validated result; a
/// JSON-only client gets the same call collapsed to one JSON response.
#[test]
fn sse_upstream_streams_progress_to_sse_clients() {
    let peer = Peer::start(PeerKind::StrictMcp, &["--sse"], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2026-07-28", ""));
    let mut call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": search_all()}),
    );
    call["params"]["_meta"]["progressToken"] = json!("tok-7");
    call["id"] = json!("call-1");
    let r = gw.rpc(&[("Accept", "application/json, text/event-stream")], &call);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/event-stream"),
        "{:?}",
        r.headers
    );
    let msgs = sse_messages(&r.text());
    assert!(msgs.len() >= 2, "{msgs:?}");
    let (last, notes) = msgs.split_last().unwrap();
    assert!(!notes.is_empty());
    for n in notes {
        assert_eq!(n["method"], "notifications/progress", "{n}");
        assert_eq!(n["params"]["progressToken"], "tok-7", "{n}");
        assert!(n.get("id").is_none());
    }
    assert_eq!(last["id"], "call-1", "{last}");
    assert_eq!(last["result"]["resultType"], "complete");
    assert_eq!(last["result"]["isError"], false);
    assert_search(&last["result"]["structuredContent"]);
    // JSON only: one JSON response, no notifications.
    let r = gw.rpc(&[("Accept", "application/json")], &call);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    assert_eq!(r.json()["id"], "call-1");
    assert_search(&r.json()["result"]["structuredContent"]);
    // A streamed lead is still exactly one lead, replayed on retry.
    let mut lead_call = modern(
        "tools/call",
        json!({"name": "aap_lead_submit", "arguments": lead("sse-lead-1")}),
    );
    lead_call["params"]["_meta"]["progressToken"] = json!(9);
    let first = gw.rpc(
        &[("Accept", "application/json, text/event-stream")],
        &lead_call,
    );
    let first = sse_messages(&first.text()).pop().unwrap();
    assert_eq!(first["result"]["isError"], false, "{first}");
    let again = gw.rpc(&[("Accept", "application/json")], &lead_call).json();
    assert_eq!(
        first["result"]["structuredContent"]["data"]["lead_id"],
        again["result"]["structuredContent"]["data"]["lead_id"]
    );
    assert_eq!(peer.leads().len(), 1);
}

/// Client `Mcp-Param-*` headers reach the upstream unchanged, beside the
/// standard headers the gateway fills in; an upstream JSON-RPC error keeps
/// its code and message (400 for a modern client, as MCP maps -32602).
#[test]
fn param_headers_pass_through_and_upstream_protocol_errors_keep_their_meaning() {
    let seen = temp_dir("seen").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(PeerKind::StrictMcp, &["--seen", &seen_arg], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2026-07-28", ""));
    let r = gw.rpc(
        &[("Mcp-Param-Region", "north"), ("Mcp-Param-X-Trace", "abc")],
        &modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": search_all()}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let lines = std::fs::read_to_string(&seen).unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["mcp-param-region"], "north", "{last}");
    assert_eq!(last["mcp-param-x-trace"], "abc", "{last}");
    assert_eq!(last["mcp-method"], "tools/call", "{last}");
    assert_eq!(last["mcp-name"], "aap_inventory_search", "{last}");
    assert_eq!(last["mcp-protocol-version"], "2026-07-28", "{last}");

    let mut refused = search_all();
    refused["filters"] = json!({"query": "upstream-protocol-error"});
    let r = headerless_call(&gw, "aap_inventory_search", refused.clone());
    assert_eq!(r.status, 400, "{}", r.text());
    let j = r.json();
    assert_eq!(j["error"]["code"], -32602, "{j}");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refuses the query"),
        "{j}"
    );
    assert_eq!(j["error"]["data"]["field"], "filters.query");
    // A legacy client gets the same error with HTTP 200.
    legacy_handshake(&gw);
    let r = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &legacy(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": refused}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], -32602, "{}", r.text());
}

/// Arguments that passed validation reach the upstream as the client wrote
/// them (spacing and escapes kept), not re-encoded by the gateway.
#[test]
fn arguments_reach_the_upstream_as_the_client_wrote_them() {
    let seen = temp_dir("seen-args").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(PeerKind::StrictMcp, &["--seen", &seen_arg], &[]);
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2026-07-28", ""));
    let args = r#"{ "type" : "inventory.search.request", "filters": {"make": ["\u0054oyota"]}, "pagination": {"limit": 2} }"#;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"_meta":{},"name":"aap_inventory_search","arguments":{args}}}}}"#,
        meta()
    );
    let r = gw.post(&[], &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let vehicles = r.json()["result"]["structuredContent"]["data"]["vehicles"].clone();
    assert_eq!(vehicles.as_array().map(Vec::len), Some(2), "{vehicles}");
    assert!(vehicles
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v["make"] == "Toyota"));
    let lines = std::fs::read_to_string(&seen).unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    let forwarded = last["body"].as_str().unwrap();
    assert!(
        forwarded.contains(&format!(r#""arguments":{args}"#)),
        "{forwarded}"
    );
}

/// The stream is relayed as it happens, not buffered: the first progress
/// event reaches the client while the upstream is still holding its result
/// (it waits for a file the test creates only after reading that event).
#[test]
fn sse_progress_reaches_the_client_before_the_upstream_finishes() {
    let hold = temp_dir("hold").join("release");
    let hold_arg = hold.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--sse", "--hold-until", &hold_arg],
        &[],
    );
    let gw = Gateway::start_with(&mcp_backend(&[peer.url()], "2026-07-28", ""));
    let (mut s, mut got) = open_progress_stream(gw.port, "live");
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    assert!(
        !head.contains("\"result\""),
        "result before release: {head}"
    );
    std::fs::write(&hold, b"go").unwrap();
    let all = read_rest(&mut s, &mut got);
    assert!(all.contains("\"resultType\":\"complete\""), "{all}");
}

/// A loopback HTTP upstream that answers each tools/call with the next of
/// `payloads` as `structuredContent`, written verbatim into the frame.
fn canned_upstream(payloads: Vec<String>) -> (u16, std::thread::JoinHandle<()>) {
    use std::io::Write;
    let l = listener();
    let port = l.local_addr().unwrap().port();
    let serve = std::thread::spawn(move || {
        let mut payloads = payloads.into_iter();
        for stream in l.incoming() {
            let mut s = stream.unwrap();
            let Some((_, body)) = read_request(&mut s) else {
                continue;
            };
            let Some(payload) = payloads.next() else {
                return;
            };
            let req: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(req["method"], "tools/call");
            let text = serde_json::to_string(&payload).unwrap();
            let answer = format!(
                r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{payload},"isError":false,"resultType":"complete"}}}}"#,
                req["id"]
            );
            write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                answer.len()
            )
            .unwrap();
            if payloads.len() == 0 {
                return;
            }
        }
    });
    (port, serve)
}

#[test]
fn upstream_text_is_validated_in_place_and_passed_on() {
    // The upstream's structuredContent reaches the client as its own text
    // once it parses and validates (see `aap::payload`); a repeated member
    // name, a schema violation and a decimal-written whole number are each
    // handled as documented.
    let vehicle = r#"{"vin":"JTDACAAU2H3400137","stock":"DT-\"1\"","year":2024,"make":"Toyota","model":"Camry","condition":"new","status":"available","price":PRICE,"fees":[{"name":"Doc fee \u00e9","amount":85}],"updated_at":"2026-11-20T17:00:00Z"}"#;
    let search = |price: &str, extra: &str| {
        format!(
            "{{\n  \"type\" : \"inventory.search.response\",\n  \"data\" : {{\"total\":1,{extra}\"vehicles\":[{}],\"limit\":20}}\n}}",
            vehicle.replace("PRICE", price)
        )
    };
    let payloads = vec![
        search("31000", ""),
        search("31000", "\"total\":2,"),
        search("\"cheap\"", ""),
        search("31000.0", ""),
    ];
    let (port, serve) = canned_upstream(payloads.clone());
    let gw = Gateway::start_with(&forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"http://127.0.0.1:{port}\"]\nrevision = \"2026-07-28\"\nrequest_timeout_ms = 5000\n"
    )));
    // 1. Pretty-printed, with escapes: passed on, both forms agree.
    let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
    assert!(!err, "{sc}");
    assert_eq!(sc, serde_json::from_str::<Value>(&payloads[0]).unwrap());
    assert_eq!(sc["data"]["vehicles"][0]["stock"], "DT-\"1\"");
    // 2. A repeated member name: refused, never forwarded.
    let (code, sc) = gw.aap_error_code("aap_inventory_search", search_all());
    assert_eq!(code, "UPSTREAM_INVALID_RESPONSE", "{sc}");
    assert!(gw.logs().contains("unique member names"));
    // 3. A schema violation: refused, logged by location only.
    let (code, sc) = gw.aap_error_code("aap_inventory_search", search_all());
    assert_eq!(code, "UPSTREAM_INVALID_RESPONSE", "{sc}");
    assert!(gw.logs().contains("backend result failed its schema"));
    assert!(!gw.logs().contains("cheap"), "no upstream values in logs");
    // 4. 31000.0 reaches the client as the integer 31000 in both forms.
    let r = gw.call("aap_inventory_search", search_all());
    let j = r.json();
    assert_eq!(
        j["result"]["structuredContent"]["data"]["vehicles"][0]["price"],
        json!(31000)
    );
    let text = j["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("\"price\":31000,") && !text.contains("31000.0"),
        "{text}"
    );
    serve.join().unwrap();
}

/// Voluntary context switches of every thread of process `pid`, by thread name.
fn wakeups(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let n = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push((name.trim().to_owned(), n));
    }
    out
}

/// An idle gateway does not tick: after calls through an MCP upstream (connects, pooled
/// connections, the peers' health checks) no thread of the process wakes on a short fixed
/// period. Pingora's `pingora_timeout` timer thread, started by the first timed connect, woke
/// 100 times a second for the life of the process.
#[test]
fn an_idle_gateway_with_an_upstream_does_not_tick() {
    let (_peer, gw) = strict_peer_and_gateway();
    for _ in 0..3 {
        let (err, sc) = gw.call_sc("aap_inventory_search", search_all());
        assert!(!err, "{sc}");
    }
    let pid = gw.child.as_ref().unwrap().id();
    let before = wakeups(pid);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let after = wakeups(pid);
    let names: Vec<&str> = after.iter().map(|(n, _)| n.as_str()).collect();
    assert!(!names.contains(&"Timer thread"), "{names:?}");
    let woke: u64 =
        after.iter().map(|(_, n)| n).sum::<u64>() - before.iter().map(|(_, n)| n).sum::<u64>();
    // Health checks every 500 ms, the tenant-directory watch, the allocator's collector and
    // the outbox poll: a handful a second. A 10 ms tick alone would be 200.
    assert!(woke < 80, "{woke} wake-ups in 2 s idle: {after:?}");
}

/// An upstream that answers each request (read to its Content-Length) with the next of
/// `answers`, raw bytes as they are, then closes the connection.
fn raw_upstream(answers: Vec<&'static str>) -> u16 {
    use std::io::Write;
    let l = listener();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut answers = answers.into_iter();
        for stream in l.incoming() {
            let Ok(mut s) = stream else { return };
            if read_request(&mut s).is_none() {
                continue;
            }
            let Some(answer) = answers.next() else { return };
            s.write_all(answer.as_bytes()).ok();
        }
    });
    port
}

/// An upstream answer the gateway cannot delimit (RFC 9112 §6.3) fails the call as a dropped
/// connection does: 504, -32012, and nothing of the answer in the client's error.
#[test]
fn an_upstream_answer_that_cannot_be_delimited_is_a_504() {
    let answers = vec![
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nsecret",
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n6\nsecret\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"secret\"",
        "HTTP/1.1 2OO OK\r\nContent-Type: application/json\r\n\r\nsecret",
    ];
    let port = raw_upstream(answers.clone());
    let cfg = forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"http://127.0.0.1:{port}\"]\nrevision = \"2026-07-28\"\nrequest_timeout_ms = 3000\n"
    ));
    let gw = Gateway::start_with(&cfg);
    for answer in &answers {
        let r = gw.call("aap_inventory_search", search_all());
        assert_eq!(r.status, 504, "{answer:?}: {}", r.text());
        assert_eq!(r.error_code(), -32012, "{answer:?}");
        assert!(!r.text().contains("secret"), "{}", r.text());
    }
}
