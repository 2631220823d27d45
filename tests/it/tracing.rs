//! Request traces and log plumbing: spans exported over OTLP/HTTP to a real receiver
//! (tests/upstreams/otlp_receiver.py, PyPI opentelemetry-proto), `traceparent` in and out.
//!
//! A proxied call through a `kind = "mcp"` upstream (the strict PyPI mcp server) yields the
//! server span, its phase spans and a client span per upstream attempt; the upstream sees a
//! `traceparent` naming that client span; no attribute holds arguments, customer values or
//! tokens; sampling ratio 0 exports nothing; the access line carries the trace id; warn lines
//! carry tenant and correlation id; a stderr nobody reads never holds a request. Server spans name
//! the HTTP version (1.1, or 2 over h2c) and the MCP method and tool (rpc.* on the A2A binding).

use crate::support::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";
const UPSTREAM_TOKEN: &str = "upstream-secret-token-77";
const CLIENT_TOKEN: &str = "client-bearer-token-do-not-export";
const COLLECTOR_KEY: &str = "collector-key-secret-31";

/// The OTLP receiver, killed on drop.
struct Receiver {
    port: u16,
    out: PathBuf,
    child: Child,
}

impl Receiver {
    fn start() -> Receiver {
        ensure_upstreams();
        let port = free_port();
        let dir = temp_dir("otlp");
        let out = dir.join("spans.jsonl");
        let child = Command::new(venv_python())
            .arg(repo().join("tests/upstreams/otlp_receiver.py"))
            .arg("--port")
            .arg(port.to_string())
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("receiver.log")).unwrap())
            .spawn()
            .expect("start the OTLP receiver");
        let mut r = Receiver { port, out, child };
        let log = dir.join("receiver.log");
        wait_listening(
            &mut r.child,
            port,
            "OTLP receiver",
            &log,
            Duration::from_secs(20),
        );
        r
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn spans(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["kind"] == "span")
            .collect()
    }

    /// The spans of `trace_id`, once `done` holds for them (at most 15 s).
    fn wait_trace(&self, trace_id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let spans: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace_id)
                .collect();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} incomplete: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn config(peer: &Peer, receiver: &Receiver, ratio: f64) -> String {
    forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [{:?}]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nhealth_check_interval_ms = 500\nbearer_token = \"{UPSTREAM_TOKEN}\"",
        peer.url()
    )) + &format!(
        "\n[telemetry]\nenabled = true\nendpoint = \"http://127.0.0.1:{}/v1/traces\"\nservice_name = \"aap-gateway-test\"\nsampling_ratio = {ratio:?}\nscheduled_delay_ms = 100\nheaders = {{ \"x-collector-key\" = \"{COLLECTOR_KEY}\" }}\n",
        receiver.port
    )
}

fn seen_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn tools_call(name: &str, arguments: Value) -> Value {
    modern("tools/call", json!({"name": name, "arguments": arguments}))
}

fn attrs(span: &Value) -> &serde_json::Map<String, Value> {
    span["attributes"].as_object().unwrap()
}

fn access_lines(gw: &Gateway) -> Vec<Value> {
    gw.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "access")
        .collect()
}

#[test]
fn a_proxied_call_yields_the_span_tree_and_propagates_its_client_span() {
    let receiver = Receiver::start();
    let seen = temp_dir("trace-seen").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--seen", &seen_arg],
        &[("AAP_MCP_TOKEN", UPSTREAM_TOKEN)],
    );
    let gw = Gateway::start_with(&config(&peer, &receiver, 1.0));
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    let client_auth = format!("Bearer {CLIENT_TOKEN}");
    let key = uuid::Uuid::new_v4().to_string();
    let r = gw.rpc(
        &[
            ("traceparent", &traceparent),
            ("tracestate", "vendor=opaque-7"),
            ("Authorization", &client_auth),
        ],
        &tools_call("aap_lead_submit", lead(&key)),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["isError"], false, "{}", r.text());
    assert_eq!(r.header("x-correlation-id"), Some(TRACE_ID));

    const PHASES: [&str; 6] = [
        "admission",
        "parse",
        "validation",
        "backend",
        "result_validation",
        "write",
    ];
    let spans = receiver.wait_trace(TRACE_ID, |s| {
        s.iter().any(|s| s["span_kind"] == "SERVER") && s.iter().any(|s| s["span_kind"] == "CLIENT")
    });
    let server = spans.iter().find(|s| s["span_kind"] == "SERVER").unwrap();
    assert_eq!(server["parent_span_id"], PARENT_SPAN, "{server}");
    assert_eq!(server["name"], format!("POST {ENDPOINT}"));
    assert_eq!(server["service"], "aap-gateway-test");
    assert_eq!(server["scope"], "aap-gateway");
    assert_eq!(server["trace_state"], "vendor=opaque-7");
    let a = attrs(server);
    for (k, v) in [
        ("http.request.method", json!("POST")),
        ("http.response.status_code", json!(200)),
        ("http.route", json!(ENDPOINT)),
        ("url.path", json!(ENDPOINT)),
        ("network.protocol.name", json!("http")),
        ("network.protocol.version", json!("1.1")),
        ("mcp.method.name", json!("tools/call")),
        ("gen_ai.tool.name", json!("aap_lead_submit")),
        ("gen_ai.operation.name", json!("execute_tool")),
        ("aap.tenant", json!("demo-toyota")),
        ("aap.skill", json!("lead.submit")),
        ("aap.outcome", json!("ok")),
        ("mcp.protocol.version", json!(MODERN)),
    ] {
        assert_eq!(a.get(k), Some(&v), "{k} in {server}");
    }
    // The MCP semantic conventions replace the generic RPC attributes.
    assert!(
        !a.contains_key("rpc.method") && !a.contains_key("rpc.system"),
        "{server}"
    );
    let server_id = server["span_id"].as_str().unwrap();
    // One child per phase, each inside the server span.
    let by_name: HashMap<&str, &Value> = spans
        .iter()
        .filter(|s| s["span_kind"] == "INTERNAL")
        .map(|s| (s["name"].as_str().unwrap(), s))
        .collect();
    for phase in PHASES {
        let s = by_name
            .get(phase)
            .unwrap_or_else(|| panic!("no {phase} span: {spans:#?}"));
        assert_eq!(s["parent_span_id"], server_id, "{s}");
        assert!(s["start"].as_u64() >= server["start"].as_u64(), "{s}");
        assert!(s["end"].as_u64() <= server["end"].as_u64(), "{s}");
        assert!(s["start"].as_u64() <= s["end"].as_u64(), "{s}");
    }
    assert!(by_name["admission"]["end"].as_u64() <= by_name["parse"]["start"].as_u64());
    assert!(by_name["backend"]["end"].as_u64() <= by_name["write"]["start"].as_u64());
    // The upstream call: a client span under the backend phase.
    let backend_id = by_name["backend"]["span_id"].as_str().unwrap();
    let clients: Vec<&Value> = spans
        .iter()
        .filter(|s| s["span_kind"] == "CLIENT")
        .collect();
    assert_eq!(clients.len(), 1, "{clients:#?}");
    let client = clients[0];
    assert_eq!(client["parent_span_id"], backend_id);
    let a = attrs(client);
    for (k, v) in [
        ("http.request.method", json!("POST")),
        ("http.response.status_code", json!(200)),
        ("url.path", json!("/mcp")),
        ("server.address", json!("127.0.0.1")),
        ("server.port", json!(peer.port)),
        ("mcp.method.name", json!("tools/call")),
    ] {
        assert_eq!(a.get(k), Some(&v), "{k} in {client}");
    }
    assert!(!a.contains_key("rpc.method"), "{client}");
    // The upstream saw a child traceparent naming the client span, and the
    // client's tracestate.
    let call = seen_lines(&seen)
        .into_iter()
        .rfind(|l| l["mcp-method"] == "tools/call")
        .expect("the upstream saw the call");
    assert_eq!(
        call["traceparent"],
        format!("00-{TRACE_ID}-{}-01", client["span_id"].as_str().unwrap()),
        "{call}"
    );
    assert_eq!(call["tracestate"], "vendor=opaque-7");
    // Nothing from the arguments, the customer or any credential is in a
    // span; the export carried the configured header.
    let exported = receiver
        .spans()
        .iter()
        .map(Value::to_string)
        .collect::<String>();
    let l = lead(&key);
    for secret in [
        l["customer"]["first_name"].as_str().unwrap(),
        l["customer"]["last_name"].as_str().unwrap(),
        l["customer"]["email"].as_str().unwrap(),
        l["consent"]["consent_text"].as_str().unwrap(),
        key.as_str(),
        "DT-1001",
        UPSTREAM_TOKEN,
        CLIENT_TOKEN,
        COLLECTOR_KEY,
    ] {
        assert!(
            !exported.contains(secret),
            "{secret:?} exported: {exported}"
        );
    }
    let export = receiver
        .lines()
        .into_iter()
        .find(|l| l["kind"] == "export")
        .unwrap();
    assert_eq!(export["headers"]["x-collector-key"], COLLECTOR_KEY);
    assert_eq!(export["headers"]["content-type"], "application/x-protobuf");
    // The access line's correlation id is the trace id.
    let access = access_lines(&gw);
    assert!(
        access
            .iter()
            .any(|a| a["fields"]["correlation_id"] == TRACE_ID),
        "{access:#?}"
    );
}

#[test]
fn the_relay_replaces_the_callers_traceparent_with_its_client_span() {
    let receiver = Receiver::start();
    let seen = temp_dir("trace-seen").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(PeerKind::StrictMcp, &["--seen", &seen_arg], &[]);
    let text = forwarding_config(&format!(
        "kind = \"relay\"\npeers = [{:?}]\npath = \"/mcp\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nhealth_check_interval_ms = 500",
        peer.url()
    )) + &format!(
        "\n[telemetry]\nenabled = true\nendpoint = \"http://127.0.0.1:{}/v1/traces\"\nscheduled_delay_ms = 100\n",
        receiver.port
    );
    let gw = Gateway::start_with(&text);
    let r = gw.rpc(
        &[("traceparent", &format!("00-{TRACE_ID}-{PARENT_SPAN}-01"))],
        &modern("tools/list", json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let spans = receiver.wait_trace(TRACE_ID, |s| {
        s.iter().any(|s| s["span_kind"] == "SERVER") && s.iter().any(|s| s["span_kind"] == "CLIENT")
    });
    let server = spans.iter().find(|s| s["span_kind"] == "SERVER").unwrap();
    assert_eq!(server["parent_span_id"], PARENT_SPAN);
    assert_eq!(
        attrs(server).get("mcp.method.name"),
        Some(&json!("tools/list"))
    );
    let backend = spans.iter().find(|s| s["name"] == "backend").unwrap();
    let client = spans.iter().find(|s| s["span_kind"] == "CLIENT").unwrap();
    assert_eq!(client["parent_span_id"], backend["span_id"]);
    let call = seen_lines(&seen)
        .into_iter()
        .rfind(|l| l["mcp-method"] == "tools/list")
        .expect("the upstream saw the call");
    assert_eq!(
        call["traceparent"],
        format!("00-{TRACE_ID}-{}-01", client["span_id"].as_str().unwrap()),
        "one traceparent, the gateway's: {call}"
    );
}

/// The server span of one call to the embedded demo tenant, sent over HTTP/1.1 or (with curl)
/// over h2c, with `traceparent` naming `trace_id`.
fn server_span_over(
    gw: &Gateway,
    receiver: &Receiver,
    http2: bool,
    trace_id: &str,
    body: &Value,
) -> Value {
    let traceparent = format!("00-{trace_id}-{PARENT_SPAN}-01");
    if http2 {
        let out = Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "--max-time", "20"])
            .args(["-H", "Content-Type: application/json"])
            .args(["-H", "Accept: application/json, text/event-stream"])
            .args(["-H", &format!("traceparent: {traceparent}")])
            .args(["--data", &body.to_string()])
            .arg(format!("http://127.0.0.1:{}{ENDPOINT}", gw.port))
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer: Value = serde_json::from_slice(&out.stdout).expect("a JSON answer");
        assert!(
            answer.get("result").is_some() && answer["result"]["isError"] != true,
            "{answer}"
        );
    } else {
        let r = gw.rpc(&[("traceparent", &traceparent)], body);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let spans = receiver.wait_trace(trace_id, |s| s.iter().any(|s| s["span_kind"] == "SERVER"));
    spans
        .into_iter()
        .find(|s| s["span_kind"] == "SERVER")
        .unwrap_or_default()
}

#[test]
fn spans_name_the_http_version_and_the_mcp_method_and_tool_over_http1_and_http2() {
    let receiver = Receiver::start();
    let text = config_with("", "", "").replace("h2c = false", "h2c = true")
        + &format!(
            "\n[telemetry]\nenabled = true\nendpoint = \"http://127.0.0.1:{}/v1/traces\"\nscheduled_delay_ms = 100\n",
            receiver.port
        );
    let gw = Gateway::start_with(&text);
    let call = tools_call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 1}}),
    );
    let list = modern("tools/list", json!({}));
    for (http2, version, trace_id) in [
        (false, "1.1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1"),
        (true, "2", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2"),
    ] {
        let server = server_span_over(&gw, &receiver, http2, trace_id, &call);
        let a = attrs(&server);
        for (k, v) in [
            ("network.protocol.name", json!("http")),
            ("network.protocol.version", json!(version)),
            ("mcp.method.name", json!("tools/call")),
            ("gen_ai.tool.name", json!("aap_inventory_search")),
            ("gen_ai.operation.name", json!("execute_tool")),
            ("mcp.protocol.version", json!(MODERN)),
            ("aap.skill", json!("inventory.search")),
            ("http.response.status_code", json!(200)),
        ] {
            assert_eq!(a.get(k), Some(&v), "{k} over HTTP/{version}: {server}");
        }
        assert!(!a.contains_key("rpc.method"), "{server}");
        // A method other than tools/call names no tool.
        let id = format!("b{}", &trace_id[1..]);
        let server = server_span_over(&gw, &receiver, http2, &id, &list);
        let a = attrs(&server);
        assert_eq!(a.get("network.protocol.version"), Some(&json!(version)));
        assert_eq!(
            a.get("mcp.method.name"),
            Some(&json!("tools/list")),
            "{server}"
        );
        assert!(!a.contains_key("gen_ai.tool.name"), "{server}");
    }
    // The A2A binding keeps the generic RPC attributes: its methods are not MCP's.
    let id = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3";
    let traceparent = format!("00-{id}-{PARENT_SPAN}-01");
    let body = json!({
        "jsonrpc": "2.0", "id": "req-1", "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [
                {"data": {"type": "inventory.search.request", "pagination": {"limit": 1}},
                 "mediaType": "application/vnd.autoagent.inventory-search-request+json"}
            ]},
            "configuration": {"acceptedOutputModes": ["application/vnd.autoagent.inventory-search-response+json"]}
        }
    });
    let r = request(
        gw.port,
        "POST",
        "/aap/3.0.0/demo-toyota/a2a",
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            (
                "A2A-Extensions",
                "https://autoagentprotocol.org/extensions/aap/v3.0",
            ),
            ("traceparent", &traceparent),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json().get("result").is_some(), "{}", r.text());
    let spans = receiver.wait_trace(id, |s| s.iter().any(|s| s["span_kind"] == "SERVER"));
    let server = spans
        .iter()
        .find(|s| s["span_kind"] == "SERVER")
        .unwrap_or(&Value::Null);
    let a = attrs(server);
    assert_eq!(a.get("rpc.system"), Some(&json!("jsonrpc")), "{server}");
    assert_eq!(a.get("rpc.method"), Some(&json!("SendMessage")), "{server}");
    assert_eq!(a.get("network.protocol.version"), Some(&json!("1.1")));
    assert!(!a.contains_key("mcp.method.name"), "{server}");
}

#[test]
fn sampling_ratio_zero_exports_nothing_but_a_sampled_parent() {
    let receiver = Receiver::start();
    let seen = temp_dir("trace-seen").join("seen.jsonl");
    let seen_arg = seen.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--seen", &seen_arg],
        &[("AAP_MCP_TOKEN", UPSTREAM_TOKEN)],
    );
    let gw = Gateway::start_with(&config(&peer, &receiver, 0.0));
    let search = json!({"type": "inventory.search.request", "pagination": {"limit": 2}});
    // No traceparent, and an unsampled one: neither is recorded.
    let fresh = gw.rpc(&[], &tools_call("aap_inventory_search", search.clone()));
    assert_eq!(fresh.status, 200, "{}", fresh.text());
    let fresh_id = fresh.header("x-correlation-id").unwrap().to_owned();
    let unsampled_id = "0af7651916cd43dd8448eb211c80319c";
    let r = gw.rpc(
        &[(
            "traceparent",
            &format!("00-{unsampled_id}-b7ad6b7169203331-00"),
        )],
        &tools_call("aap_inventory_search", search.clone()),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // The upstream still gets the trace, marked not sampled.
    let calls: Vec<Value> = seen_lines(&seen)
        .into_iter()
        .filter(|l| l["mcp-method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for (call, id) in calls.iter().zip([fresh_id.as_str(), unsampled_id]) {
        let tp = call["traceparent"].as_str().unwrap();
        assert!(
            tp.starts_with(&format!("00-{id}-")) && tp.ends_with("-00"),
            "{tp}"
        );
    }
    // A parent that says sampled is followed (parent-based sampling); once
    // its spans are in, nothing else has arrived.
    let sampled_id = "5b8efff798038103d269b633813fc60c";
    let r = gw.rpc(
        &[(
            "traceparent",
            &format!("00-{sampled_id}-eee19b7ec3c1b174-01"),
        )],
        &tools_call("aap_inventory_search", search),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    receiver.wait_trace(sampled_id, |s| {
        s.iter().any(|s| s["span_kind"] == "SERVER") && s.iter().any(|s| s["span_kind"] == "CLIENT")
    });
    std::thread::sleep(Duration::from_millis(300));
    let others: Vec<Value> = receiver
        .spans()
        .into_iter()
        .filter(|s| s["trace_id"] != sampled_id)
        .collect();
    assert!(others.is_empty(), "unsampled spans exported: {others:#?}");
}

#[test]
fn the_access_line_carries_the_trace_id_with_tracing_off() {
    let gw = Gateway::start();
    let tp = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    let r = gw.rpc(&[("traceparent", &tp)], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-correlation-id"), Some(TRACE_ID));
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    let fresh = r.header("x-correlation-id").unwrap().to_owned();
    assert_eq!(fresh.len(), 32);
    assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));
    let access = access_lines(&gw);
    let ids: Vec<&str> = access
        .iter()
        .map(|a| a["fields"]["correlation_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&TRACE_ID) && ids.contains(&fresh.as_str()),
        "{ids:?}"
    );
}

#[test]
fn an_upstream_failure_is_logged_with_tenant_and_correlation_id() {
    let mut peer = Peer::start(PeerKind::StrictMcp, &[], &[]);
    let text = forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [{:?}]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 500\nrequest_timeout_ms = 2000\nhealth_check_interval_ms = 60000",
        peer.url()
    ));
    let gw = Gateway::start_with(&text);
    peer.kill();
    let r = gw.call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    let id = r.header("x-correlation-id").unwrap().to_owned();
    let logs = gw.logs();
    let warn = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["level"] == "WARN" && v["fields"]["message"] == "backend unavailable")
        .unwrap_or_else(|| panic!("no backend warning: {logs}"));
    assert_eq!(warn["fields"]["tenant"], "demo-toyota", "{warn}");
    assert_eq!(warn["fields"]["correlation_id"], id.as_str(), "{warn}");
}

#[test]
fn a_stderr_nobody_reads_never_holds_a_request_and_drops_are_counted() {
    // The gateway's stderr is a pipe this test never reads: once the pipe
    // (64 KiB) and the 16-line queue are full, lines are dropped, and
    // requests are still answered.
    let state = temp_dir("state");
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with("", "", "")).unwrap();
    let (port, admin) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{admin}"))
        .arg("--state-dir")
        .arg(&state)
        .env("AAP_LOG_QUEUE_LINES", "16")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _unread = child.stderr.take();
    let deadline = Instant::now() + Duration::from_secs(20);
    while try_request(admin, "GET", "/readyz", &[], b"")
        .map(|r| r.status)
        .ok()
        != Some(200)
    {
        assert!(Instant::now() < deadline, "gateway not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let body = modern("tools/list", json!({})).to_string();
    for i in 0..600 {
        let r = request(
            port,
            "POST",
            ENDPOINT,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    let metrics = request(admin, "GET", "/metrics", &[], b"").text();
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("aap_log_lines_dropped_total "))
        .unwrap_or_else(|| panic!("no aap_log_lines_dropped_total: {metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(dropped > 0, "{metrics}");
    child.kill().ok();
    child.wait().ok();
    std::fs::remove_dir_all(&state).ok();
}
