//! The ingress rule table, run in process: each row is one request through `Gateway::handle` on a
//! real `ConfigGeneration` (shipped config, embedded dealer, local state), no sockets.
//!
//! A row names the request (HTTP method, headers, body) and what must come back: the HTTP
//! status, the JSON-RPC error code or a result, and the access-log outcome that `RequestCtx`
//! carries. The same rules run over real sockets in `ingress`, `hostile` and `protocol_details`;
//! this table is the cheap place to add one.

use aap_gateway::config::Config;
use aap_gateway::exchange::{HttpRequest, HttpResponse};
use aap_gateway::gateway::{ConfigGeneration, Gateway};
use serde_json::{json, Value};
use std::path::Path;

const EP: &str = "/aap/3.0.0/demo-toyota/mcp";
const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

/// The shipped `gateway.toml`, with its state in a fresh directory.
fn gateway() -> (Gateway, std::path::PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = Config::load(&root.join("gateway.toml")).expect("the shipped config loads");
    let dir = std::env::temp_dir().join(format!("aapgw-pipeline-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    config.state.dir = dir.clone();
    let generation = ConfigGeneration::build(config, 1).expect("the shipped config builds");
    (Gateway::new(generation), dir)
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn modern(method: &str, mut params: Value) -> String {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
}

fn search() -> String {
    modern(
        "tools/call",
        json!({"name": "aap_inventory_search",
               "arguments": {"type": "inventory.search.request", "pagination": {"limit": 2}}}),
    )
}

/// What a row expects back.
enum Want {
    /// A JSON-RPC result (and, for tools/call, `isError`).
    Result { is_error: Option<bool> },
    /// A JSON-RPC error with this code.
    Error(i64),
    /// A body that is not JSON-RPC (404 on an unknown path, 204 on DELETE).
    Plain,
}

struct Row {
    name: &'static str,
    method: &'static str,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    body: String,
    status: u16,
    want: Want,
}

const JSON: (&str, &str) = ("content-type", "application/json");
const ACCEPT_BOTH: (&str, &str) = ("accept", "application/json, text/event-stream");

fn rows() -> Vec<Row> {
    let r = |name, method, path, headers, body: String, status, want| Row {
        name,
        method,
        path,
        headers,
        body,
        status,
        want,
    };
    vec![
        // Routing.
        r("unknown path", "POST", "/nope", &[JSON], search(), 404, Want::Plain),
        // The head: Origin, method, media types.
        r("Origin not allowed", "POST", EP, &[JSON, ("origin", "https://evil.example")], search(), 403, Want::Error(-32600)),
        r("allowed Origin", "POST", EP, &[JSON, ("origin", "https://www.demo-toyota.example")], search(), 200, Want::Result { is_error: Some(false) }),
        r("GET is not served", "GET", EP, &[], String::new(), 405, Want::Error(-32600)),
        r("PUT is not served", "PUT", EP, &[JSON], search(), 405, Want::Error(-32600)),
        r("Content-Type text/plain", "POST", EP, &[("content-type", "text/plain")], search(), 415, Want::Error(-32600)),
        r("no Content-Type", "POST", EP, &[], search(), 415, Want::Error(-32600)),
        r("Accept image/png", "POST", EP, &[JSON, ("accept", "image/png")], search(), 406, Want::Error(-32600)),
        r("Accept both", "POST", EP, &[JSON, ACCEPT_BOTH], search(), 200, Want::Result { is_error: Some(false) }),
        // The envelope.
        r("not JSON", "POST", EP, &[JSON], "{\"jsonrpc\":".into(), 400, Want::Error(-32700)),
        r("a batch", "POST", EP, &[JSON], format!("[{}]", search()), 400, Want::Error(-32600)),
        r("no jsonrpc member", "POST", EP, &[JSON], json!({"id": 1, "method": "ping"}).to_string(), 400, Want::Error(-32600)),
        r("a repeated member name", "POST", EP, &[JSON], "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"method\":\"tools/list\"}".into(), 400, Want::Error(-32700)),
        // Revisions and methods.
        r("modern discover", "POST", EP, &[JSON], modern("server/discover", json!({})), 200, Want::Result { is_error: None }),
        r("modern unknown method is 404", "POST", EP, &[JSON], modern("no/such", json!({})), 404, Want::Error(-32601)),
        r("legacy unknown method is 200", "POST", EP, &[JSON, ("mcp-protocol-version", LEGACY)],
          json!({"jsonrpc": "2.0", "id": 1, "method": "no/such"}).to_string(), 200, Want::Error(-32601)),
        r("unsupported version", "POST", EP, &[JSON, ("mcp-protocol-version", "2099-01-01")],
          json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string(), 400, Want::Error(-32022)),
        r("legacy initialize", "POST", EP, &[JSON],
          json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string(),
          200, Want::Result { is_error: None }),
        // Mirror headers: omitted ones are filled, supplied ones must match.
        r("no mirror headers", "POST", EP, &[JSON], search(), 200, Want::Result { is_error: Some(false) }),
        r("all mirror headers", "POST", EP, &[JSON, ("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "aap_inventory_search")], search(), 200, Want::Result { is_error: Some(false) }),
        r("Mcp-Method disagrees", "POST", EP, &[JSON, ("mcp-method", "tools/list")], search(), 400, Want::Error(-32020)),
        r("Mcp-Name disagrees", "POST", EP, &[JSON, ("mcp-name", "aap_lead_submit")], search(), 400, Want::Error(-32020)),
        r("version header disagrees with _meta", "POST", EP, &[JSON, ("mcp-protocol-version", LEGACY)], search(), 400, Want::Error(-32020)),
        // Tools.
        r("unknown tool", "POST", EP, &[JSON], modern("tools/call", json!({"name": "aap_nope", "arguments": {}})), 200, Want::Error(-32602)),
        r("arguments that break the schema", "POST", EP, &[JSON],
          modern("tools/call", json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "filters": {"colour": ["red"]}}})),
          200, Want::Result { is_error: Some(true) }),
        r("tools/list", "POST", EP, &[JSON], modern("tools/list", json!({})), 200, Want::Result { is_error: None }),
        r("tools/list with a cursor it never gave", "POST", EP, &[JSON], modern("tools/list", json!({"cursor": "bm9wZQ"})), 200, Want::Error(-32602)),
    ]
}

fn request(row: &Row) -> HttpRequest {
    HttpRequest {
        method: row.method.into(),
        path: row.path.into(),
        query: None,
        headers: row
            .headers
            .iter()
            .map(|(n, v)| (*n, v.as_bytes()))
            .collect(),
        body: row.body.clone().into(),
        peer_ip: Some("127.0.0.1".parse().expect("an address")),
        version: Default::default(),
    }
}

fn body_json(resp: &HttpResponse) -> Value {
    let text = std::str::from_utf8(&resp.body).unwrap_or("");
    // An SSE answer carries one `data:` line with the message.
    let text = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or(text);
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[test]
fn ingress_rule_table_in_process() {
    let (gw, dir) = gateway();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut failures = Vec::new();
    for row in rows() {
        let resp = rt.block_on(gw.handle(request(&row)));
        let body = body_json(&resp);
        let mut wrong = Vec::new();
        if resp.status != row.status {
            wrong.push(format!("status {} (want {})", resp.status, row.status));
        }
        if resp.header("x-correlation-id").is_none() {
            wrong.push("no X-Correlation-Id".into());
        }
        match row.want {
            Want::Plain => {
                if body.get("jsonrpc").is_some() {
                    wrong.push("a JSON-RPC body".into());
                }
            }
            Want::Error(code) => {
                if body["error"]["code"] != code {
                    wrong.push(format!(
                        "error code {} (want {code})",
                        body["error"]["code"]
                    ));
                }
                if body.get("result").is_some() {
                    wrong.push("a result beside the error".into());
                }
            }
            Want::Result { is_error } => {
                if body.get("result").is_none() {
                    wrong.push(format!("no result: {body}"));
                }
                if let Some(e) = is_error {
                    if body["result"]["isError"] != e {
                        wrong.push(format!("isError {} (want {e})", body["result"]["isError"]));
                    }
                }
            }
        }
        if !wrong.is_empty() {
            failures.push(format!("{}: {}", row.name, wrong.join("; ")));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "rows that failed:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_request_id_answers_every_refusal_that_read_the_body() {
    // Refusals decided from the head still carry the id of a valid envelope.
    let (gw, dir) = gateway();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for headers in [
        &[("content-type", "text/plain")][..],
        &[JSON, ("origin", "https://evil.example")][..],
        &[JSON, ("accept", "image/png")][..],
    ] {
        let row = Row {
            name: "id",
            method: "POST",
            path: EP,
            headers,
            body: search(),
            status: 0,
            want: Want::Plain,
        };
        let resp = rt.block_on(gw.handle(request(&row)));
        assert_eq!(body_json(&resp)["id"], 7, "{headers:?}: {}", resp.status);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
