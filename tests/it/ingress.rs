//! MCP ingress rules over real HTTP against the real binary: discovery,
//! headers, media types, Origin, versions, legacy sessions, startup errors.

use crate::support::*;
use serde_json::{json, Value};

const H_ALL: [(&str, &str); 2] = [
    ("MCP-Protocol-Version", MODERN),
    ("Mcp-Method", "tools/list"),
];

fn search_args() -> Value {
    json!({"type": "inventory.search.request", "pagination": {"limit": 1}})
}

#[test]
fn discover_result_fields() {
    let gw = Gateway::start();
    let r = gw.rpc(
        &[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "server/discover"),
        ],
        &modern("server/discover", json!({})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let res = &r.json()["result"];
    assert_eq!(res["supportedVersions"], json!([MODERN, LEGACY]));
    assert!(res["capabilities"]["tools"].is_object());
    assert_eq!(res["resultType"], "complete");
    assert!(res["ttlMs"].as_u64().is_some());
    assert_eq!(res["cacheScope"], "public");
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "aap-gateway"
    );
}

#[test]
fn omitted_headers_are_derived_each_and_all() {
    let gw = Gateway::start();
    let body = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": search_args()}),
    );
    let full = [
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "aap_inventory_search"),
    ];
    for omit in 0..4 {
        // omit == 3 drops all three.
        let headers: Vec<(&str, &str)> = full
            .iter()
            .enumerate()
            .filter(|(i, _)| omit != 3 && *i != omit)
            .map(|(_, h)| *h)
            .collect();
        let r = gw.rpc(&headers, &body);
        assert_eq!(r.status, 200, "omit {omit}: {}", r.text());
        let res = &r.json()["result"];
        assert_eq!(res["isError"], false, "omit {omit}: {res}");
        assert_eq!(
            res["structuredContent"]["type"],
            "inventory.search.response"
        );
    }
}

#[test]
fn tools_list_is_complete_and_deterministic() {
    let gw = Gateway::start();
    let a = gw.rpc(&H_ALL, &modern("tools/list", json!({}))).json();
    let b = gw.rpc(&[], &modern("tools/list", json!({}))).json();
    assert_eq!(a["result"]["tools"], b["result"]["tools"]);
    let names: Vec<&str> = a["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "aap_dealer_information",
            "aap_inventory_facets",
            "aap_inventory_search",
            "aap_inventory_vehicle",
            "aap_lead_submit"
        ]
    );
    assert_eq!(a["result"]["resultType"], "complete");
    assert_eq!(a["result"]["cacheScope"], "public");
    assert!(a["result"]["ttlMs"].is_u64());
    assert!(a["result"].get("nextCursor").is_none());
}

#[test]
fn tools_list_pages_with_next_cursor() {
    let gw = Gateway::start_with(
        &config_with("", "", "").replace("tools_page_size = 50", "tools_page_size = 2"),
    );
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = gw.rpc(&[], &modern("tools/list", params)).json();
        for t in r["result"]["tools"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_owned());
        }
        assert_eq!(r["result"]["cacheScope"], "public");
        match r["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(names.len(), 5, "{names:?}");
    let bad = gw.rpc(&[], &modern("tools/list", json!({"cursor": "bogus"})));
    assert_eq!(bad.error_code(), -32602);
}

#[test]
fn successful_call_shape() {
    let gw = Gateway::start();
    let r = gw.call(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    let res = &r.json()["result"];
    assert_eq!(res["isError"], false);
    assert_eq!(res["resultType"], "complete");
    assert_eq!(res["content"].as_array().unwrap().len(), 1);
    assert_eq!(res["content"][0]["type"], "text");
    let text: Value = serde_json::from_str(res["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, res["structuredContent"]);
    assert_eq!(
        res["structuredContent"]["type"],
        "dealer.information.response"
    );
}

#[test]
fn content_type_and_method_rules() {
    let gw = Gateway::start();
    let body = modern("tools/list", json!({})).to_string();
    let r = gw.post_raw(&[("Content-Type", "text/plain")], body.as_bytes());
    assert_eq!(r.status, 415);
    let r = gw.post_raw(&[], body.as_bytes());
    assert_eq!(r.status, 415);
    let r = gw.post_raw(
        &[("Content-Type", "application/json; charset=utf-8")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200);
    for m in ["GET", "DELETE", "PUT"] {
        let r = request(
            gw.port,
            m,
            ENDPOINT,
            &[("Accept", "text/event-stream")],
            b"",
        );
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("POST"), "{m}");
    }
    let r = request(
        gw.port,
        "POST",
        "/not/mounted",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(r.status, 404);
}

#[test]
fn accept_negotiation() {
    let gw = Gateway::start();
    let body = modern("tools/list", json!({})).to_string();
    let cases: [(Option<&str>, u16, &str); 8] = [
        (None, 200, "application/json"),
        (Some("*/*"), 200, "application/json"),
        (Some("application/json"), 200, "application/json"),
        (
            Some("application/json, text/event-stream"),
            200,
            "application/json",
        ),
        (Some("text/event-stream"), 200, "text/event-stream"),
        (
            Some("application/json;q=0, text/event-stream"),
            200,
            "text/event-stream",
        ),
        (Some("text/html"), 406, "application/json"),
        (Some("application/json;q=0"), 406, "application/json"),
    ];
    for (accept, status, ctype) in cases {
        let mut h = vec![("Content-Type", "application/json")];
        if let Some(a) = accept {
            h.push(("Accept", a));
        }
        let r = gw.post_raw(&h, body.as_bytes());
        assert_eq!(r.status, status, "Accept {accept:?}: {}", r.text());
        assert!(
            r.header("content-type").unwrap().starts_with(ctype),
            "Accept {accept:?}"
        );
        if ctype == "text/event-stream" {
            let t = r.text();
            let data = t
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .expect("an SSE data line");
            let msg: Value = serde_json::from_str(data).unwrap();
            assert_eq!(msg["result"]["tools"].as_array().unwrap().len(), 5);
        }
    }
}

#[test]
fn origin_allow_deny_absent() {
    let gw = Gateway::start();
    let body = modern("tools/list", json!({}));
    assert_eq!(gw.rpc(&[], &body).status, 200);
    assert_eq!(
        gw.rpc(&[("Origin", "http://localhost:3000")], &body).status,
        200
    );
    let r = gw.rpc(&[("Origin", "https://evil.example")], &body);
    assert_eq!(r.status, 403);
    assert!(r.json()["error"].is_object());
    assert_eq!(gw.rpc(&[("Origin", "null")], &body).status, 403);
}

/// A valid tools/list body padded to exactly `len` bytes.
fn padded(len: usize) -> String {
    let base = modern("tools/list", json!({})).to_string();
    let mut body = modern("tools/list", json!({}));
    body["params"]["_meta"]["x-pad"] = json!("");
    let empty_len = body.to_string().len();
    assert!(empty_len <= len && base.len() < len);
    body["params"]["_meta"]["x-pad"] = json!("a".repeat(len - empty_len));
    let s = body.to_string();
    assert_eq!(s.len(), len);
    s
}

#[test]
fn body_limit_at_64k_boundary() {
    let gw = Gateway::start();
    let ok = gw.post(&[], &padded(65_536));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let big = gw.post(&[], &padded(65_537));
    assert_eq!(big.status, 413, "{}", big.text());
    // Chunked framing (no Content-Length) is counted as it arrives.
    let body = padded(65_537);
    let mut raw_req = format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").into_bytes();
    for chunk in body.as_bytes().chunks(16_000) {
        raw_req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw_req.extend_from_slice(chunk);
        raw_req.extend_from_slice(b"\r\n");
    }
    raw_req.extend_from_slice(b"0\r\n\r\n");
    let r = raw(gw.port, &raw_req).unwrap();
    assert_eq!(r.status, 413);
    // The gateway keeps serving.
    assert_eq!(gw.post(&[], &padded(1000)).status, 200);
}

#[test]
fn malformed_json_and_envelopes() {
    let gw = Gateway::start();
    let cases: [(&str, i64); 6] = [
        ("{\"jsonrpc\":\"2.0\",", -32700),
        ("not json", -32700),
        ("[]", -32600),
        ("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]", -32600),
        ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"tools/list\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"method\":\"server/discover\"}", -32700),
    ];
    for (body, code) in cases {
        let r = gw.post(&[("MCP-Protocol-Version", MODERN)], body);
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.error_code(), code, "{body}");
    }
}

#[test]
fn header_conflicts_are_400_header_mismatch() {
    let gw = Gateway::start();
    let call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": search_args()}),
    );
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("Mcp-Method", "tools/list")],
        vec![("Mcp-Method", "TOOLS/CALL")],
        vec![("MCP-Protocol-Version", LEGACY)],
        vec![("Mcp-Name", "aap_inventory_vehicle")],
        vec![("Mcp-Name", "AAP_INVENTORY_SEARCH")],
        vec![("Mcp-Method", "tools/call"), ("mcp-method", "tools/call")],
        vec![
            ("Mcp-Name", "aap_inventory_search"),
            ("MCP-NAME", "aap_inventory_search"),
        ],
        vec![
            ("MCP-Protocol-Version", MODERN),
            ("mcp-protocol-version", MODERN),
        ],
        vec![("Mcp-Name", "=?base64?!!!not-base64?=")],
    ];
    for headers in cases {
        let r = gw.rpc(&headers, &call);
        assert_eq!(r.status, 400, "{headers:?}: {}", r.text());
        assert_eq!(r.error_code(), -32020, "{headers:?}");
    }
    // Header names are case-insensitive: odd casing of a matching value is fine.
    let r = gw.rpc(
        &[
            ("mCp-MeThOd", "tools/call"),
            ("MCP-NAME", "aap_inventory_search"),
        ],
        &call,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn sentinel_decoding() {
    let gw = Gateway::start();
    let call = |name: &str, header: &str| {
        gw.rpc(
            &[("Mcp-Name", header)],
            &modern("tools/call", json!({"name": name, "arguments": {}})),
        )
    };
    // An encoded real tool name decodes and matches.
    let r = gw.rpc(
        &[("Mcp-Name", "=?base64?YWFwX2ludmVudG9yeV9zZWFyY2g=?=")],
        &modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": search_args()}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["isError"], false);
    // Non-ASCII name: header matches after decoding, so the answer is the
    // unknown-tool protocol error, not a header mismatch.
    let r = call("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?=");
    assert_eq!((r.status, r.error_code()), (200, -32602), "{}", r.text());
    // A literal value that looks like the sentinel travels encoded.
    let r = call("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
    assert_eq!(r.error_code(), -32602, "{}", r.text());
    // Uppercase markers are a literal, not an encoding.
    let r = call("=?BASE64?YWJj?=", "=?BASE64?YWJj?=");
    assert_eq!(r.error_code(), -32602, "{}", r.text());
    let r = call("abc", "=?BASE64?YWJj?=");
    assert_eq!((r.status, r.error_code()), (400, -32020));
    // Valid Base64 that is not UTF-8.
    let r = call("abc", "=?base64?/w==?=");
    assert_eq!((r.status, r.error_code()), (400, -32020));
}

#[test]
fn versions_unsupported_unresolvable_and_meta() {
    let gw = Gateway::start();
    let r = gw.rpc(
        &[("MCP-Protocol-Version", "1900-01-01")],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["code"], -32022);
    assert_eq!(e["data"]["supported"], json!([MODERN, LEGACY]));
    assert_eq!(e["data"]["requested"], "1900-01-01");
    let mut body = modern("tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let r = gw.rpc(&[], &body);
    assert_eq!((r.status, r.error_code()), (400, -32022));
    assert_eq!(r.json()["error"]["data"]["requested"], "2099-01-01");
    // Neither body, header nor session: never guessed.
    let r = gw.rpc(&[], &legacy("tools/list", json!({})));
    assert_eq!((r.status, r.error_code()), (400, -32022));
    // Modern header without the required _meta keys.
    let r = gw.rpc(
        &[("MCP-Protocol-Version", MODERN)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!((r.status, r.error_code()), (400, -32602));
    let mut body = modern("tools/list", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let r = gw.rpc(&[], &body);
    assert_eq!((r.status, r.error_code()), (400, -32602));
    // clientInfo is optional.
    let mut body = modern("tools/list", json!({}));
    body["params"]["_meta"]
        .as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientInfo");
    assert_eq!(gw.rpc(&[], &body).status, 200);
}

#[test]
fn unknown_method_and_tool() {
    let gw = Gateway::start();
    let r = gw.rpc(&[], &modern("prompts/list", json!({})));
    assert_eq!((r.status, r.error_code()), (404, -32601));
    let r = gw.rpc(&[], &modern("ping", json!({})));
    assert_eq!((r.status, r.error_code()), (404, -32601));
    let r = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &legacy("prompts/list", json!({})),
    );
    assert_eq!(
        (r.status, r.error_code()),
        (200, -32601),
        "legacy must not see a session-style 404"
    );
    let r = gw.rpc(
        &[],
        &modern(
            "tools/call",
            json!({"name": "aap_does_not_exist", "arguments": {}}),
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.error_code(), -32602);
    assert!(
        r.json().get("result").is_none(),
        "an unknown tool is a protocol error"
    );
}

#[test]
fn legacy_handshake_stateless() {
    let gw = Gateway::start();
    let init = legacy(
        "initialize",
        json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let r = gw.rpc(&[], &init);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("mcp-session-id").is_none(), "stateless by default");
    let res = &r.json()["result"];
    assert_eq!(res["protocolVersion"], LEGACY);
    assert_eq!(res["serverInfo"]["name"], "aap-gateway");
    assert!(res["capabilities"]["tools"].is_object());
    assert!(res.get("resultType").is_none());
    let n = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(n.status, 202);
    assert!(n.body.is_empty());
    let l = gw
        .rpc(
            &[("MCP-Protocol-Version", LEGACY)],
            &legacy("tools/list", json!({})),
        )
        .json();
    assert_eq!(l["result"]["tools"].as_array().unwrap().len(), 5);
    assert!(l["result"].get("resultType").is_none());
    // Legacy and modern results carry the same content, minus resultType.
    let args = json!({"type": "inventory.vehicle.request", "stock": "DT-1001"});
    let leg = gw
        .rpc(
            &[("MCP-Protocol-Version", LEGACY)],
            &legacy(
                "tools/call",
                json!({"name": "aap_inventory_vehicle", "arguments": args}),
            ),
        )
        .json();
    let modn = gw.call("aap_inventory_vehicle", args).json();
    assert!(leg["result"].get("resultType").is_none());
    assert_eq!(
        leg["result"]["structuredContent"],
        modn["result"]["structuredContent"]
    );
    assert_eq!(leg["result"]["content"], modn["result"]["content"]);
    // A stray session id is ignored when sessions are off.
    let r = gw.rpc(
        &[
            ("MCP-Protocol-Version", LEGACY),
            ("Mcp-Session-Id", "made-up"),
        ],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 200);
    // Modern notifications are accepted and dropped.
    let n = gw.rpc(
        &[],
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}),
    );
    assert_eq!(n.status, 202);
}

#[test]
fn legacy_sessions_when_enabled() {
    let gw = Gateway::start_with(
        &config_with("", "", "").replace("legacy_sessions = false", "legacy_sessions = true"),
    );
    let init = legacy(
        "initialize",
        json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let r = gw.rpc(&[], &init);
    let sid = r
        .header("mcp-session-id")
        .expect("session issued")
        .to_owned();
    assert!(sid.len() >= 32 && sid.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    // Version comes from this client's own session when the header is omitted.
    let ok = gw.rpc(
        &[("Mcp-Session-Id", &sid)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(ok.json()["result"].get("resultType").is_none());
    // A conflicting header is still a conflict.
    let r = gw.rpc(
        &[("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", MODERN)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.error_code(), -32020);
    // No session and no version: never borrowed from another client.
    let r = gw.rpc(&[], &legacy("tools/list", json!({})));
    assert_eq!((r.status, r.error_code()), (400, -32022));
    // A version but no session where sessions are required.
    let r = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 400);
    // Unknown session → 404.
    let r = gw.rpc(
        &[
            ("Mcp-Session-Id", "0123456789abcdef0123456789abcdef"),
            ("MCP-Protocol-Version", LEGACY),
        ],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 404);
    // Modern requests ignore sessions entirely.
    assert_eq!(gw.rpc(&[], &modern("tools/list", json!({}))).status, 200);
    // DELETE ends it; afterwards 404.
    let d = request(
        gw.port,
        "DELETE",
        ENDPOINT,
        &[("Mcp-Session-Id", &sid)],
        b"",
    );
    assert_eq!(d.status, 204);
    let r = gw.rpc(
        &[("Mcp-Session-Id", &sid)],
        &legacy("tools/list", json!({})),
    );
    assert_eq!(r.status, 404);
    let g = request(gw.port, "GET", ENDPOINT, &[], b"");
    assert_eq!((g.status, g.header("allow")), (405, Some("POST, DELETE")));
}

#[test]
fn config_errors_exit_nonzero_naming_file_and_key() {
    let dir = temp_dir("badcfg");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        config_with("", "", "").replace("max_body_bytes = 65536", "max_body_bytes = 0"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&path)
        .arg("check")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("limits.max_body_bytes"),
        "{err}"
    );
    std::fs::write(&path, "[server]\nlisten = 5\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("listen"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_port_in_use_exits_2_naming_the_listener() {
    // Something else already listens on the ingress port: the gateway must
    // stop at once with a clear message naming the address and the key, not
    // keep running with a dead port (nor wait out Pingora's 30 s of bind
    // retries, which only a graceful upgrade needs).
    let taken = listener();
    let addr = taken.local_addr().unwrap().to_string();
    let state = temp_dir("taken");
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with("", "", "")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&config)
        .arg("--listen")
        .arg(&addr)
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--state-dir")
        .arg(&state)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("the gateway kept running with its port taken");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("cannot listen on {addr} (server.listen)")),
        "the message names the address and the key: {err}"
    );
    drop(taken);
    std::fs::remove_dir_all(state).ok();
}
