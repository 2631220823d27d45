//! Hostile input over real HTTP: every case gets a clear error, the gateway
//! never panics or hangs, and it keeps serving afterwards.

use crate::support::*;
use serde_json::json;

fn head(extra: &str, len: usize) -> String {
    format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n{extra}Content-Length: {len}\r\n\r\n")
}

fn send(gw: &Gateway, extra_headers: &str, body: &[u8]) -> Option<Resp> {
    let mut req = head(extra_headers, body.len()).into_bytes();
    req.extend_from_slice(body);
    raw(gw.port, &req).ok()
}

#[test]
fn hostile_bodies_get_clear_errors() {
    let gw = Gateway::start();
    let valid = modern("tools/list", json!({})).to_string();
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_obj = format!("{}{}", "{\"a\":".repeat(5_000), "}".repeat(5_000));
    let truncated = &valid[..valid.len() / 2];
    let cases: Vec<(&str, Vec<u8>, u16, i64)> = vec![
        ("empty", b"".to_vec(), 400, -32700),
        ("truncated", truncated.as_bytes().to_vec(), 400, -32700),
        ("deep arrays", deep.into_bytes(), 400, -32700),
        ("deep objects", deep_obj.into_bytes(), 400, -32700),
        ("duplicate keys", br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#.to_vec(), 400, -32700),
        // `params.arguments` is read apart from the envelope, as strictly.
        ("duplicate key in arguments", br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"aap_inventory_search","arguments":{"type":"inventory.search.request","type":"x"}}}"#.to_vec(), 400, -32700),
        ("arguments twice", br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"aap_inventory_search","arguments":{},"arguments":{}}}"#.to_vec(), 400, -32700),
        ("lone surrogate in arguments", br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"aap_inventory_search","arguments":{"type":"\ud800"}}}"#.to_vec(), 400, -32700),
        ("invalid utf-8", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/\xc3\x28list\"}".to_vec(), 400, -32700),
        ("NUL byte", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\0\"}".to_vec(), 400, -32700),
        ("escaped NUL in method", br#"{"jsonrpc":"2.0","id":1,"method":"tools/list\u0000","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#.to_vec(), 404, -32601),
        ("batch", format!("[{valid},{valid}]").into_bytes(), 400, -32600),
        ("jsonrpc 1.0", br#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("jsonrpc number", br#"{"jsonrpc":2.0,"id":1,"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("id null", br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("id float", br#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("id object", br#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("id array", br#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("id bool", br#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#.to_vec(), 400, -32600),
        ("number overflow", br#"{"jsonrpc":"2.0","id":1e999,"method":"tools/list"}"#.to_vec(), 400, -32700),
        ("scalar", b"42".to_vec(), 400, -32600),
        ("params string", br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":"x"}"#.to_vec(), 400, -32600),
    ];
    for (what, body, status, code) in cases {
        let r = send(&gw, "", &body).unwrap_or_else(|| panic!("{what}: no response"));
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert_eq!(r.error_code(), code, "{what}");
        assert!(
            !r.text().contains("panicked") && !r.text().contains("src/"),
            "{what}: internals leaked"
        );
    }
    // Ids of every allowed type are echoed exactly.
    for id in [
        json!("a-string"),
        json!(0),
        json!(-7),
        json!(9007199254740993u64),
        json!(""),
    ] {
        let mut b = modern("tools/list", json!({}));
        b["id"] = id.clone();
        let r = gw.rpc(&[], &b);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["id"], id);
    }
    assert_eq!(
        gw.rpc(&[], &modern("tools/list", json!({}))).status,
        200,
        "still serving"
    );
}

#[test]
fn hostile_headers_get_clear_errors() {
    let gw = Gateway::start();
    let valid = modern("tools/list", json!({})).to_string();
    // CRLF injection in a header value cannot smuggle a header: the request
    // line framing breaks instead, and the server answers or closes.
    let r = send(
        &gw,
        "Mcp-Method: tools/list\r\nX-Injected: 1\r\n",
        valid.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "a real second header is just a header");
    let r = send(
        &gw,
        "Mcp-Method: tools/list\rX-Evil: 1\r\n",
        valid.as_bytes(),
    );
    assert!(r.as_ref().map(|r| r.status >= 400).unwrap_or(true), "{r:?}");
    // Very long values.
    let long = "a".repeat(8000);
    let r = send(&gw, &format!("Mcp-Method: {long}\r\n"), valid.as_bytes()).unwrap();
    assert_eq!((r.status, r.error_code()), (400, -32020));
    let r = send(
        &gw,
        &format!("Mcp-Name: =?base64?{}?=\r\n", "QUFB".repeat(2000)),
        valid.as_bytes(),
    )
    .unwrap();
    assert_eq!((r.status, r.error_code()), (400, -32020));
    // Control and non-ASCII bytes in mirror headers.
    let mut req = head("Mcp-Method: tools/\x01list\r\n", valid.len()).into_bytes();
    req.extend_from_slice(valid.as_bytes());
    let r = raw(gw.port, &req);
    assert!(r.as_ref().map(|r| r.status == 400).unwrap_or(true), "{r:?}");
    let mut req = head("Mcp-Method: tools/l\u{e9}st\r\n", valid.len()).into_bytes();
    req.extend_from_slice(valid.as_bytes());
    let r = raw(gw.port, &req).unwrap();
    assert_eq!((r.status, r.error_code()), (400, -32020));
    // Content-Length that lies (shorter than the body is fine; longer hangs
    // only until the read timeout, which the limits test covers).
    let r = send(&gw, "MCP-Protocol-Version: \r\n", valid.as_bytes()).unwrap();
    assert!(r.status == 400, "{}", r.text());
    assert_eq!(
        gw.rpc(&[], &modern("tools/list", json!({}))).status,
        200,
        "still serving"
    );
}
