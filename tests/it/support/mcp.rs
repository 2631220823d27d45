//! MCP request builders: the endpoint and versions, modern and legacy bodies,
//! tools/call helpers on [`Gateway`], the consented lead, progress streams.

use super::http::{request, Resp};
use super::process::Gateway;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// The MCP endpoint of the shipped config's tenant `demo-toyota`.
pub const ENDPOINT: &str = "/aap/3.0.0/demo-toyota/mcp";
/// The modern MCP revision (`_meta`, no handshake) and the legacy one.
pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";

/// The head of an MCP POST to [`ENDPOINT`] at `authority` (`host:port`) for an HTTP/2 client:
/// a JSON body, a JSON or SSE answer.
pub fn h2_mcp_post(authority: &str) -> http::request::Builder {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://{authority}{ENDPOINT}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
}

/// Requests to [`ENDPOINT`] on a started gateway.
impl Gateway {
    pub fn post(&self, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut h: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        request(self.port, "POST", ENDPOINT, &h, body.as_bytes())
    }

    /// POST with only the given headers (no default Content-Type).
    pub fn post_raw(&self, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        request(self.port, "POST", ENDPOINT, headers, body)
    }

    pub fn rpc(&self, headers: &[(&str, &str)], body: &Value) -> Resp {
        self.post(headers, &body.to_string())
    }

    /// Modern tools/call with full standard headers.
    pub fn call(&self, name: &str, arguments: Value) -> Resp {
        self.rpc(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", name),
            ],
            &modern("tools/call", json!({"name": name, "arguments": arguments})),
        )
    }

    /// The `aap.error` code of a call that must fail, and the payload.
    pub fn aap_error_code(&self, name: &str, arguments: Value) -> (String, Value) {
        let (is_err, sc) = self.call_sc(name, arguments);
        assert!(is_err, "{sc}");
        let code = sc["code"]
            .as_str()
            .expect("an aap.error has a code")
            .to_owned();
        (code, sc)
    }

    /// A modern tools/call that must complete: whether it is an error, and its
    /// structuredContent (checked equal to the text block).
    pub fn call_sc(&self, name: &str, arguments: Value) -> (bool, Value) {
        let r = self.call(name, arguments);
        assert_eq!(r.status, 200, "{}", r.text());
        let j = r.json();
        let result = &j["result"];
        assert_eq!(result["resultType"], "complete", "{j}");
        let sc = result["structuredContent"].clone();
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, sc, "text block must equal structuredContent");
        let is_error = result["isError"].as_bool().unwrap();
        assert_eq!(
            is_error,
            sc["type"] == "aap.error",
            "isError must agree with the payload"
        );
        (is_error, sc)
    }
}

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "aap-gateway-tests", "version": "1.0.0"}
    })
}

/// A modern request body with `_meta`.
pub fn modern(method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

pub fn legacy(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

/// A consented lead with a fresh idempotency key.
pub fn lead(key: &str) -> Value {
    // One consent time per test process: a retry must resend the identical
    // payload, even when the two calls straddle a second boundary.
    static GRANTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let granted = GRANTED
        .get_or_init(|| {
            (time::OffsetDateTime::now_utc() - time::Duration::minutes(1))
                .replace_nanosecond(0)
                .unwrap()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        })
        .clone();
    json!({
        "type": "lead.submit.request",
        "customer": {"first_name": "Quinn", "last_name": "Testbuyer", "email": "quinn.testbuyer@example.com", "preferred_contact": "email"},
        "consent": {
            "granted_at": granted,
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may contact me by email about this enquiry.",
            "scope": ["lead_submission"]
        },
        "vehicle_of_interest": {"stock": "DT-1001"},
        "source_agent": {"name": "aap-gateway-tests"},
        "idempotency_key": key
    })
}

pub fn leads_in(state: &Path) -> usize {
    super::stored_leads(state, "demo-toyota").len()
}

/// Legacy handshake through the gateway; returns the negotiated session id
/// (if the tenant issues one).
pub fn legacy_handshake(gw: &Gateway) -> Option<String> {
    let r = gw.rpc(
        &[("Accept", "application/json, text/event-stream")],
        &legacy(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "legacy-test", "version": "1"}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["protocolVersion"], LEGACY);
    let sid = r.header("mcp-session-id").map(str::to_owned);
    let r = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    sid
}

/// A legacy tools/call (2025-11-25 header, no `_meta`); returns the result.
pub fn legacy_call(gw: &Gateway, name: &str, arguments: Value) -> Value {
    let r = gw.rpc(
        &[
            ("MCP-Protocol-Version", LEGACY),
            ("Accept", "application/json, text/event-stream"),
        ],
        &legacy("tools/call", json!({"name": name, "arguments": arguments})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert!(
        j["result"].get("resultType").is_none(),
        "legacy results carry no resultType: {j}"
    );
    j["result"].clone()
}

/// A modern tools/call with `_meta` but none of the mirror headers.
pub fn headerless_call(gw: &Gateway, name: &str, arguments: Value) -> Resp {
    gw.rpc(
        &[],
        &modern("tools/call", json!({"name": name, "arguments": arguments})),
    )
}

/// POST a modern search carrying `_meta.progressToken = token`, accepting
/// SSE, on a fresh `Connection: close` connection, and read until the first
/// `notifications/progress` event arrived (for upstreams that hold their
/// result after it). Returns the connection and what was read so far.
pub fn open_progress_stream(port: u16, token: &str) -> (TcpStream, Vec<u8>) {
    let mut call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 5}}}),
    );
    call["params"]["_meta"]["progressToken"] = json!(token);
    let body = call.to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        s,
        "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("notifications/progress") {
        let n = s
            .read(&mut buf)
            .expect("first event while the upstream holds");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    (s, got)
}
