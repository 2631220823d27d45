//! The inbound A2A 1.0 binding (`<tenant prefix>/a2a`): its refusals over raw HTTP, every skill
//! through the PyPI a2a-sdk client for each backend kind, and leads retried across bindings.
//!
//! The SDK client runs in tests/it/drivers/a2a_client.py (the upstream peers' venv, a2a-sdk
//! 1.3.0), from an AgentCard the driver constructs; `--card-base` switches it to card resolution.

use crate::support::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

const A2A_PATH: &str = "/aap/3.0.0/demo-toyota/a2a";
const EXT: &str = "https://autoagentprotocol.org/extensions/aap/v3.0";

/// The headers a conforming client sends.
fn activated() -> Vec<(&'static str, &'static str)> {
    vec![
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("A2A-Extensions", EXT),
    ]
}

fn post(gw: &Gateway, headers: &[(&str, &str)], body: &str) -> Resp {
    request(gw.port, "POST", A2A_PATH, headers, body.as_bytes())
}

/// A SendMessage body carrying `data` as the one DataPart.
fn send_message(data: Value, stem: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": "req-1", "method": "SendMessage",
        "params": {
            "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [
                {"data": data, "mediaType": format!("application/vnd.autoagent.{stem}-request+json")}
            ]},
            "configuration": {"acceptedOutputModes": [format!("application/vnd.autoagent.{stem}-response+json")]}
        }
    })
}

/// The JSON-RPC error of an answer that must be one (HTTP 200, A2A style).
fn rpc_error(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert!(j.get("result").is_none(), "{j}");
    j["error"].clone()
}

/// The ErrorInfo of an error's data array (its first entry).
fn error_info(e: &Value) -> &Value {
    let info = &e["data"][0];
    assert_eq!(
        info["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
        "{e}"
    );
    info
}

/// The typed aap.error inside an A2A error (found by `@type`, not position).
fn aap_payload(e: &Value) -> Value {
    e["data"]
        .as_array()
        .unwrap_or_else(|| panic!("data is not an array: {e}"))
        .iter()
        .find(|d| d["@type"] == "https://autoagentprotocol.org/extensions/aap/error")
        .cloned()
        .unwrap_or_else(|| panic!("no aap.error in {e}"))
}

/// The AAP response a success carries.
fn answer(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    let msg = &j["result"]["message"];
    assert_eq!(msg["role"], "ROLE_AGENT", "{j}");
    assert_ne!(msg["messageId"], "m-1");
    msg["parts"][0]["data"].clone()
}

#[test]
fn refusals_over_raw_http() {
    let gw = Gateway::start();
    let search = send_message(
        json!({"type": "inventory.search.request", "pagination": {"limit": 1}}),
        "inventory-search",
    )
    .to_string();

    // A2A-Version: missing (= 0.3), 0.3, and a future one.
    for version in [None, Some("0.3"), Some("2.0")] {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("A2A-Extensions", EXT),
        ];
        if let Some(v) = version {
            h.push(("A2A-Version", v));
        }
        let e = rpc_error(&post(&gw, &h, &search));
        assert_eq!(e["code"], -32009, "{version:?}: {e}");
        assert_eq!(error_info(&e)["reason"], "VERSION_NOT_SUPPORTED");
        assert_eq!(error_info(&e)["domain"], "a2a-protocol.org");
    }

    // The extension: missing, a look-alike, a prefix, another version; each
    // refused with -32008 naming the URI and the header, with its ErrorInfo.
    let near_misses = [
        None,
        Some("https://autoagentprotocol.org/extensions/aap/v1.3"),
        Some("https://autoagentprotocol.org/extensions/aap"),
        Some("https://autoagentprotocol.org/extensions/aap/v3.0/"),
        Some("https://autoagentprotocol.org.evil.example/extensions/aap/v3.0"),
        Some(""),
    ];
    for ext in near_misses {
        let mut h = vec![("Content-Type", "application/json"), ("A2A-Version", "1.0")];
        if let Some(x) = ext {
            h.push(("A2A-Extensions", x));
        }
        let r = post(&gw, &h, &search);
        let e = rpc_error(&r);
        assert_eq!(e["code"], -32008, "{ext:?}: {e}");
        let message = e["message"].as_str().unwrap();
        assert!(
            message.contains(EXT) && message.contains("A2A-Extensions"),
            "{message}"
        );
        let info = error_info(&e);
        assert_eq!(info["domain"], "a2a-protocol.org");
        assert_eq!(info["reason"], "EXTENSION_SUPPORT_REQUIRED");
        assert_eq!(info["metadata"]["extensionUri"], EXT);
        assert_eq!(info["metadata"]["requiredHeader"], "A2A-Extensions");
        assert_eq!(e["data"].as_array().unwrap().len(), 1, "{e}");
        assert_eq!(r.header("a2a-extensions"), None, "nothing was activated");
    }
    // The exact URI as one member of a list, whitespace trimmed, activates.
    let listed = format!("https://example.com/other-ext , {EXT} ");
    let r = post(
        &gw,
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("A2A-Extensions", &listed),
        ],
        &search,
    );
    assert_eq!(answer(&r)["type"], "inventory.search.response");
    assert_eq!(r.header("a2a-extensions"), Some(EXT));
    assert_eq!(r.json()["id"], "req-1");

    // JSON-RPC framing: A2A's codes, the id echoed when it was read.
    let h = activated();
    let cases: [(&str, i64); 7] = [
        ("{not json", -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\"}]",
            -32600,
        ),
        (
            "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"SendMessage\"}",
            -32600,
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"method\":\"SendMessage\",\"params\":{}}",
            -32600,
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"SendMessage\",\"params\":[]}",
            -32600,
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"SendMessage\"}",
            -32700,
        ),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", -32600),
    ];
    for (body, code) in cases {
        let e = rpc_error(&post(&gw, &h, body));
        assert_eq!(e["code"], code, "{body}: {e}");
    }

    // Methods: unknown (including the A2A 0.3 name) → -32601; streaming,
    // tasks and the extended card → -32004; push configs → -32003.
    for (method, code, reason) in [
        ("message/send", -32601, "METHOD_NOT_FOUND"),
        ("tools/call", -32601, "METHOD_NOT_FOUND"),
        ("SendStreamingMessage", -32004, "UNSUPPORTED_OPERATION"),
        ("SubscribeToTask", -32004, "UNSUPPORTED_OPERATION"),
        ("GetTask", -32004, "UNSUPPORTED_OPERATION"),
        ("GetExtendedAgentCard", -32004, "UNSUPPORTED_OPERATION"),
        (
            "CreateTaskPushNotificationConfig",
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": {}});
        let r = post(&gw, &h, &body.to_string());
        let e = rpc_error(&r);
        assert_eq!(e["code"], code, "{method}: {e}");
        assert_eq!(error_info(&e)["reason"], reason);
        assert_eq!(r.json()["id"], 9);
    }

    // HTTP-level refusals keep their status.
    let r = request(gw.port, "GET", A2A_PATH, &[("A2A-Version", "1.0")], b"");
    assert_eq!(r.status, 405, "{}", r.text());
    assert_eq!(r.header("allow"), Some("POST"));
    let r = post(
        &gw,
        &[
            ("Content-Type", "text/plain"),
            ("A2A-Version", "1.0"),
            ("A2A-Extensions", EXT),
        ],
        &search,
    );
    assert_eq!(r.status, 415, "{}", r.text());
    let r = post(
        &gw,
        &[
            ("Accept", "text/event-stream"),
            ("Content-Type", "application/json"),
        ],
        &search,
    );
    assert_eq!(r.status, 406, "{}", r.text());
    // A streaming client (every one sends `Accept: text/event-stream`) asking for
    // SendStreamingMessage gets the UnsupportedOperationError the card's `streaming: false`
    // promises, as the one event of a stream, not an HTTP 406.
    for method in ["SendStreamingMessage", "SubscribeToTask"] {
        let mut body = send_message(
            json!({"type": "dealer.information.request"}),
            "dealer-information",
        );
        body["method"] = json!(method);
        let mut h = activated();
        h.push(("Accept", "text/event-stream"));
        let r = post(&gw, &h, &body.to_string());
        assert_eq!(r.status, 200, "{method}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        let text = r.text();
        let data = text
            .strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("{method}: not one event: {text:?}"));
        let e: Value = serde_json::from_str(data).unwrap();
        assert_eq!(e["id"], "req-1", "{e}");
        assert_eq!(e["error"]["code"], -32004, "{e}");
        assert_eq!(error_info(&e["error"])["reason"], "UNSUPPORTED_OPERATION");
    }
    let r = post(
        &gw,
        &[
            ("Origin", "https://evil.example"),
            ("Content-Type", "application/json"),
        ],
        &search,
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.error_code(), -32600);

    // The message and its one data part.
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = send_message(
            json!({"type": "dealer.information.request"}),
            "dealer-information",
        );
        f(&mut b);
        rpc_error(&post(&gw, &h, &b.to_string()))
    };
    let e = with(&|b| b["params"]["message"]["role"] = json!("ROLE_AGENT"));
    assert_eq!(e["code"], -32602, "{e}");
    let e = with(&|b| {
        b["params"].as_object_mut().unwrap().remove("message");
    });
    assert_eq!(e["code"], -32602, "{e}");
    let e = with(&|b| b["params"]["message"]["messageId"] = json!(""));
    assert_eq!(e["code"], -32602, "{e}");
    // A message without parts is invalid params (A2A: a Message has at least one part).
    let e = with(&|b| b["params"]["message"]["parts"] = json!([]));
    assert_eq!(e["code"], -32602, "{e}");
    assert!(e["message"].as_str().unwrap().contains("parts"), "{e}");
    let e = with(&|b| b["params"]["configuration"] = json!({}));
    assert_eq!(e["code"], -32602, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("acceptedOutputModes"),
        "{e}"
    );
    let e = with(&|b| {
        b["params"]["configuration"]["acceptedOutputModes"] = json!(["application/json"])
    });
    assert_eq!(e["code"], -32005, "{e}");
    assert_eq!(error_info(&e)["reason"], "CONTENT_TYPE_NOT_SUPPORTED");
    let e = with(&|b| b["params"]["message"]["parts"][0]["mediaType"] = json!("application/json"));
    assert_eq!(e["code"], -32005, "{e}");
    let e = with(&|b| b["params"]["message"]["parts"] = json!([{"text": "hello"}]));
    assert_eq!(e["code"], -32005, "{e}");
    let e = with(&|b| {
        let part = b["params"]["message"]["parts"][0].clone();
        b["params"]["message"]["parts"] = json!([part.clone(), part]);
    });
    assert_eq!(e["code"], -32005, "{e}");
    // A text part beside the data part is ignored.
    let mut b = send_message(
        json!({"type": "dealer.information.request"}),
        "dealer-information",
    );
    b["params"]["message"]["parts"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"text": "dealer info please"}));
    assert_eq!(
        answer(&post(&gw, &h, &b.to_string()))["type"],
        "dealer.information.response"
    );

    // AAP errors in A2A's shape: unknown skill (-32004), schema failure
    // (-32602, with a BadRequest), missing consent (-32000).
    let e = rpc_error(&post(
        &gw,
        &h,
        &send_message(
            json!({"type": "service.booking.request"}),
            "service-booking",
        )
        .to_string(),
    ));
    assert_eq!(e["code"], -32004, "{e}");
    assert_eq!(error_info(&e)["domain"], "autoagentprotocol.org");
    assert_eq!(error_info(&e)["reason"], "UNSUPPORTED_SKILL");
    assert_eq!(aap_payload(&e)["code"], "UNSUPPORTED_SKILL");
    let e = rpc_error(&post(
        &gw,
        &h,
        &send_message(
            json!({"type": "inventory.search.request", "filters": {"year_min": "new"}}),
            "inventory-search",
        )
        .to_string(),
    ));
    assert_eq!(e["code"], -32602, "{e}");
    let info = error_info(&e);
    assert_eq!(info["reason"], "SCHEMA_VALIDATION_FAILED");
    assert_eq!(info["metadata"]["code"], "SCHEMA_VALIDATION_FAILED");
    assert_eq!(info["metadata"]["retryable"], "false");
    let aap = aap_payload(&e);
    assert_eq!(aap["type"], "aap.error");
    assert_eq!(info["metadata"]["error_id"], aap["error_id"]);
    let bad = e["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["@type"] == "type.googleapis.com/google.rpc.BadRequest")
        .unwrap_or_else(|| panic!("no BadRequest: {e}"));
    assert_eq!(
        bad["fieldViolations"][0]["field"], "/filters/year_min",
        "{bad}"
    );
    let mut no_consent = lead("a2a-no-consent");
    no_consent.as_object_mut().unwrap().remove("consent");
    let e = rpc_error(&post(
        &gw,
        &h,
        &send_message(no_consent, "lead-submit").to_string(),
    ));
    assert_eq!(e["code"], -32000, "{e}");
    assert_eq!(aap_payload(&e)["code"], "CONTACT_CONSENT_REQUIRED");
    assert_eq!(leads_in(&gw.state), 0, "a refused lead is never stored");
    // inventory.vehicle's media alias (the schema stem) is accepted too, and answered in kind.
    let r = post(
        &gw,
        &h,
        &send_message(
            json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}),
            "inventory-vehicle",
        )
        .to_string(),
    );
    assert_eq!(answer(&r)["data"]["stock"], "DT-1001");
    assert_eq!(
        r.json()["result"]["message"]["parts"][0]["mediaType"],
        "application/vnd.autoagent.inventory-vehicle-response+json"
    );

    // The access log names the binding, the method and the skill.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let logs = gw.logs();
    let line = logs
        .lines()
        .find(|l| {
            l.contains("\"binding\":\"a2a\"")
                && l.contains("\"outcome\":\"CONTACT_CONSENT_REQUIRED\"")
        })
        .unwrap_or_else(|| panic!("no a2a access line:\n{logs}"));
    assert!(
        line.contains("\"rpc_method\":\"SendMessage\"")
            && line.contains("\"skill\":\"lead.submit\""),
        "{line}"
    );
}

/// Run the a2a-sdk driver against the gateway's A2A endpoint.
/// Run the a2a-sdk driver with the client made the way an agent makes it: the SDK
/// resolves the tenant's Agent Card (`<prefix>/.well-known/agent-card.json`)
/// and follows the A2A interface the card names.
fn drive_from_card(gw: &Gateway, calls: &Value) -> Vec<Value> {
    let base = format!(
        "http://127.0.0.1:{}{}",
        gw.port,
        A2A_PATH.trim_end_matches("/a2a")
    );
    drive_with(
        &[
            "--card-base",
            &base,
            "--card-path",
            "/.well-known/agent-card.json",
        ],
        calls,
    )
}

fn drive_with(args: &[&str], calls: &Value) -> Vec<Value> {
    ensure_upstreams();
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo().join("tests/it/drivers/a2a_client.py"))
        .args(args);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the a2a-sdk driver");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(calls.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("driver output is not JSON ({e}): {text}"))
}

fn call(data: Value, media: &str) -> Value {
    json!({"data": data, "media": media})
}

/// The AAP payload of a driver outcome that must be a success.
fn ok_payload(outcome: &Value) -> Value {
    assert_eq!(outcome["ok"], true, "{outcome}");
    let part = &outcome["message"]["parts"][0];
    assert!(
        part["mediaType"]
            .as_str()
            .unwrap()
            .ends_with("-response+json"),
        "{part}"
    );
    assert_eq!(outcome["message"]["role"], "ROLE_AGENT");
    assert_eq!(outcome["sent"]["a2a-version"], "1.0");
    assert_eq!(outcome["sent"]["a2a-extensions"], EXT);
    part["data"].clone()
}

/// Every skill through the SDK client, then an AAP error and a call
/// without the extension; `leads` counts the leads the backend stored.
fn every_skill_through_the_sdk(gw: &Gateway, leads: &dyn Fn() -> usize, key: &str) {
    let calls = json!([
        call(json!({"type": "dealer.information.request"}), "dealer-information"),
        call(json!({"type": "inventory.facets.request"}), "inventory-facets"),
        call(
            json!({"type": "inventory.search.request", "filters": {"make": ["Toyota"]}, "sort": {"field": "price", "order": "asc"}, "pagination": {"limit": 3}}),
            "inventory-search"
        ),
        call(json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}), "vehicle-detail"),
        call(lead(key), "lead-submit"),
        call(lead(key), "lead-submit"),
        call(json!({"type": "inventory.vehicle.request", "stock": "DT-1011"}), "vehicle-detail"),
        {"data": {"type": "dealer.information.request"}, "media": "dealer-information", "extension": false},
    ]);
    let out = drive_from_card(gw, &calls);
    // The SDK followed the interface the card names: this tenant's A2A path.
    let a2a_url = format!("http://127.0.0.1:{}{A2A_PATH}", gw.port);
    assert_eq!(out[0]["url"], a2a_url.as_str(), "{}", out[0]);
    assert_eq!(out.len(), 8, "{out:?}");
    assert_eq!(ok_payload(&out[0])["type"], "dealer.information.response");
    assert_eq!(ok_payload(&out[1])["type"], "inventory.facets.response");
    let search = ok_payload(&out[2]);
    assert_eq!(search["type"], "inventory.search.response", "{search}");
    let vehicles = search["data"]["vehicles"].as_array().unwrap();
    assert!(!vehicles.is_empty() && vehicles.len() <= 3, "{search}");
    assert!(vehicles.iter().all(|v| v["make"] == "Toyota"), "{search}");
    let vehicle = ok_payload(&out[3]);
    assert_eq!(vehicle["type"], "inventory.vehicle.response");
    assert_eq!(vehicle["data"]["stock"], "DT-1001");
    let first = ok_payload(&out[4]);
    assert_eq!(first["type"], "lead.submit.response", "{first}");
    let again = ok_payload(&out[5]);
    assert_eq!(first["data"]["lead_id"], again["data"]["lead_id"]);
    assert_eq!(leads(), 1, "one lead for two sends with one key");
    // An AAP error: the SDK raises a generic error for -32000 (it keeps no
    // details); the raw error holds the typed payload.
    let unavailable = &out[6];
    assert_eq!(unavailable["ok"], false, "{unavailable}");
    assert_eq!(unavailable["raw"]["code"], -32000);
    assert_eq!(
        aap_payload(&unavailable["raw"])["code"],
        "VEHICLE_UNAVAILABLE"
    );
    // Without the extension: the SDK's own ExtensionSupportRequiredError,
    // with the ErrorInfo metadata it keeps.
    let refused = &out[7];
    assert_eq!(
        refused["sdk_error"], "ExtensionSupportRequiredError",
        "{refused}"
    );
    assert_eq!(refused["sdk_data"]["extensionUri"], EXT);
    assert_eq!(refused["sdk_data"]["requiredHeader"], "A2A-Extensions");
    assert!(refused["sent"].get("a2a-extensions").is_none(), "{refused}");
}

/// A config whose tenant publishes its Agent Card at the gateway's own
/// port, so the SDK client resolves the card and follows its A2A interface.
fn published(cfg: &str) -> String {
    let url =
        format!("public_url = \"http://127.0.0.1:{PORT_MARKER}/aap/3.0.0/demo-toyota/mcp\"\n");
    let kept: String = cfg
        .lines()
        .filter(|l| !l.starts_with("public_url = "))
        .map(|l| format!("{l}\n"))
        .collect();
    kept.replacen("[tenants.backend]", &format!("{url}[tenants.backend]"), 1)
}

#[test]
fn sdk_client_every_skill_embedded() {
    let gw = Gateway::start_with(&published(&config_with("", "", "")));
    every_skill_through_the_sdk(&gw, &|| leads_in(&gw.state), "a2a-sdk-embedded-1");
}

fn strict_mcp() -> (Peer, Gateway) {
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &[],
        &[("AAP_MCP_TOKEN", "upstream-secret")],
    );
    let gw = Gateway::start_with(&published(&forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"{}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nbearer_token = \"upstream-secret\"\nrequest_timeout_ms = 8000\n",
        peer.url()
    ))));
    (peer, gw)
}

#[test]
fn sdk_client_every_skill_strict_mcp_upstream() {
    let (peer, gw) = strict_mcp();
    every_skill_through_the_sdk(&gw, &|| peer.leads().len(), "a2a-sdk-mcp-1");
}

#[test]
fn sdk_client_every_skill_a2a_upstream() {
    let peer = Peer::start(PeerKind::A2a, &[], &[("AAP_A2A_TOKEN", "a2a-secret")]);
    let gw = Gateway::start_with(&published(&forwarding_config(&format!(
        "kind = \"a2a\"\npeers = [\"{}\"]\npath = \"/a2a\"\nbearer_token = \"a2a-secret\"\nrequest_timeout_ms = 8000\n",
        peer.url()
    ))));
    every_skill_through_the_sdk(&gw, &|| peer.leads().len(), "a2a-sdk-a2a-1");
}

/// A lead over A2A, retried with the same key over MCP (and the other way
/// round): one lead, one id; a changed payload with a used key is an
/// IDEMPOTENCY_CONFLICT on both bindings.
fn cross_binding_retry(gw: &Gateway, leads: &dyn Fn() -> usize) {
    let h = activated();
    let first = answer(&post(
        gw,
        &h,
        &send_message(lead("xb-1"), "lead-submit").to_string(),
    ));
    assert_eq!(first["type"], "lead.submit.response", "{first}");
    let (err, over_mcp) = gw.call_sc("aap_lead_submit", lead("xb-1"));
    assert!(!err, "{over_mcp}");
    assert_eq!(over_mcp["data"]["lead_id"], first["data"]["lead_id"]);
    assert_eq!(leads(), 1, "the MCP retry sent no second lead");
    // MCP first, then A2A.
    let (err, second) = gw.call_sc("aap_lead_submit", lead("xb-2"));
    assert!(!err, "{second}");
    let over_a2a = answer(&post(
        gw,
        &h,
        &send_message(lead("xb-2"), "lead-submit").to_string(),
    ));
    assert_eq!(over_a2a["data"]["lead_id"], second["data"]["lead_id"]);
    assert_ne!(second["data"]["lead_id"], first["data"]["lead_id"]);
    assert_eq!(leads(), 2);
    // The same key with another payload: a conflict on both bindings.
    let mut changed = lead("xb-1");
    changed["customer"]["first_name"] = json!("Robin");
    let e = rpc_error(&post(
        gw,
        &h,
        &send_message(changed.clone(), "lead-submit").to_string(),
    ));
    assert_eq!(e["code"], -32000, "{e}");
    assert_eq!(error_info(&e)["reason"], "IDEMPOTENCY_CONFLICT");
    assert_eq!(aap_payload(&e)["retryable"], false);
    let (code, _) = gw.aap_error_code("aap_lead_submit", changed);
    assert_eq!(code, "IDEMPOTENCY_CONFLICT");
    assert_eq!(leads(), 2, "a conflict sends nothing");
}

#[test]
fn cross_binding_lead_retry_embedded() {
    let gw = Gateway::start();
    cross_binding_retry(&gw, &|| leads_in(&gw.state));
}

#[test]
fn cross_binding_lead_retry_strict_mcp_upstream() {
    let (peer, gw) = strict_mcp();
    cross_binding_retry(&gw, &|| peer.leads().len());
}

const RESOURCE: &str = "https://gw.test/aap/3.0.0/demo-toyota/mcp";
const ISSUER: &str = "https://issuer.test";

fn token(sub: &str, scope: &str) -> String {
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let claims = json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "scope": scope, "exp": now + 300, "iat": now});
    let pem = std::fs::read(repo().join("tests/keys/rsa-1.pem")).unwrap();
    let mut h = Header::new(Algorithm::RS256);
    h.kid = Some("rsa-1".into());
    encode(&h, &claims, &EncodingKey::from_rsa_pem(&pem).unwrap()).unwrap()
}

/// With OAuth on, the A2A binding takes the same tokens and scopes as MCP,
/// and a key is scoped by verified caller: the same caller's MCP retry
/// returns its lead, another caller's same key is a lead of its own.
#[test]
fn auth_and_caller_scoped_keys_across_bindings() {
    let auth = format!(
        "[tenants.auth]\nmode = \"required\"\nresource = \"{RESOURCE}\"\nissuer = \"{ISSUER}\"\nauthorization_servers = [\"{ISSUER}\"]\nscopes_supported = [\"inventory:read\", \"leads:write\"]\njwks_file = {:?}\n[tenants.auth.tool_scopes]\n\"lead.submit\" = [\"leads:write\"]\n",
        repo().join("tests/keys/jwks.json")
    );
    let gw = Gateway::start_with(&config_with(&auth, "", ""));
    let body = send_message(lead("scoped-1"), "lead-submit").to_string();
    // No token: 401 with the tenant's challenge, before any state is touched.
    let r = post(&gw, &activated(), &body);
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(
        r.header("www-authenticate").unwrap().starts_with("Bearer"),
        "{:?}",
        r.headers
    );
    assert_eq!(r.error_code(), -32600);
    // A token without leads:write: 403 for the lead, reads pass.
    let reader = format!("Bearer {}", token("agent-r", "inventory:read"));
    let mut h = activated();
    h.push(("Authorization", reader.as_str()));
    let r = post(&gw, &h, &body);
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .contains("insufficient_scope"));
    let r = post(
        &gw,
        &h,
        &send_message(
            json!({"type": "dealer.information.request"}),
            "dealer-information",
        )
        .to_string(),
    );
    assert_eq!(answer(&r)["type"], "dealer.information.response");
    assert_eq!(leads_in(&gw.state), 0);
    // Caller A over A2A, then over MCP with the same key: one lead.
    let a = format!("Bearer {}", token("agent-a", "inventory:read leads:write"));
    let mut ha = activated();
    ha.push(("Authorization", a.as_str()));
    let first = answer(&post(&gw, &ha, &body));
    let mcp = modern(
        "tools/call",
        json!({"name": "aap_lead_submit", "arguments": lead("scoped-1")}),
    );
    let r = gw.rpc(&[("Authorization", a.as_str())], &mcp);
    assert_eq!(r.status, 200, "{}", r.text());
    let retried = &r.json()["result"]["structuredContent"];
    assert_eq!(
        retried["data"]["lead_id"], first["data"]["lead_id"],
        "{retried}"
    );
    assert_eq!(leads_in(&gw.state), 1);
    // Caller B, same key over MCP: its own lead, not A's.
    let b = format!("Bearer {}", token("agent-b", "inventory:read leads:write"));
    let r = gw.rpc(&[("Authorization", b.as_str())], &mcp);
    assert_eq!(r.status, 200, "{}", r.text());
    let other = &r.json()["result"]["structuredContent"];
    assert_eq!(other["type"], "lead.submit.response", "{other}");
    assert_ne!(other["data"]["lead_id"], first["data"]["lead_id"]);
    assert_eq!(leads_in(&gw.state), 2);
}

/// A relay tenant has no contract, so no A2A binding; a config where one
/// tenant's A2A path is another tenant's path is refused.
#[test]
fn relay_tenants_have_no_a2a_binding_and_paths_must_not_collide() {
    let dead = free_port();
    let gw = Gateway::start_with(&forwarding_config(&format!(
        "kind = \"relay\"\npeers = [\"http://127.0.0.1:{dead}\"]\npath = \"/mcp\"\nconnect_timeout_ms = 500\nrequest_timeout_ms = 2000\nhealth_check_interval_ms = 60000\n"
    )));
    let body = send_message(
        json!({"type": "dealer.information.request"}),
        "dealer-information",
    );
    let r = post(&gw, &activated(), &body.to_string());
    assert_eq!(r.status, 404, "{}", r.text());
    drop(gw);

    let base = config_with("", "", "");
    let second = &base[base.find("[[tenants]]").unwrap()..];
    let clash = format!(
        "{base}\n{}",
        second
            .replace("id = \"demo-toyota\"", "id = \"demo-lexus\"")
            // Unpublished, so the only clash is the A2A path.
            .lines()
            .filter(|l| !l.starts_with("public_url = "))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("/aap/3.0.0/demo-toyota/mcp\"", &format!("{A2A_PATH}\""))
    );
    let dir = temp_dir("a2a-clash");
    let path = dir.join("gw.toml");
    std::fs::write(&path, clash).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(A2A_PATH) && e.contains("already a tenant's MCP path"),
        "{e}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// Both bindings draw on one caller budget; an A2A client over it gets 429
/// with `Retry-After` and the AAP `RATE_LIMITED` error, never a code from
/// the range A2A reserves.
#[test]
fn one_caller_budget_for_both_bindings() {
    let cfg = config_with("", "", "").replace(
        "caller_per_second = 0.0\ncaller_burst = 0",
        "caller_per_second = 0.05\ncaller_burst = 2",
    );
    let gw = Gateway::start_with(&cfg);
    let (err, _) = gw.call_sc(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert!(!err);
    let body = send_message(
        json!({"type": "dealer.information.request"}),
        "dealer-information",
    )
    .to_string();
    assert_eq!(
        answer(&post(&gw, &activated(), &body))["type"],
        "dealer.information.response"
    );
    let r = post(&gw, &activated(), &body);
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    let e = &r.json()["error"];
    assert_eq!(e["code"], -32000, "{e}");
    assert_eq!(r.json()["id"], "req-1");
    assert_eq!(error_info(e)["reason"], "RATE_LIMITED");
    assert_eq!(error_info(e)["metadata"]["retryable"], "true");
    let aap = aap_payload(e);
    assert_eq!(aap["code"], "RATE_LIMITED");
    assert!(
        aap["details"]["retry_after_ms"].as_u64().unwrap() > 0,
        "{aap}"
    );
    // And the MCP side is out of budget too.
    assert_eq!(
        gw.call(
            "aap_dealer_information",
            json!({"type": "dealer.information.request"})
        )
        .status,
        429
    );
}

/// With `Expect: 100-continue`, the A2A path's head-decided refusals come at
/// once (no body sent); an acceptable head gets `100 Continue`.
#[test]
fn expect_100_continue_on_the_a2a_path() {
    use std::io::Read;
    let gw = Gateway::start();
    let head = |extra: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        write!(
            s,
            "POST {A2A_PATH} HTTP/1.1\r\nHost: x\r\n{extra}Expect: 100-continue\r\nContent-Length: 50\r\n\r\n"
        )
        .unwrap();
        let mut buf = [0u8; 2048];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let refused = head("Content-Type: text/plain\r\n");
    assert!(refused.starts_with("HTTP/1.1 415"), "{refused}");
    assert!(refused.contains("-32600"), "{refused}");
    let refused = head("Content-Type: application/json\r\nOrigin: https://evil.example\r\n");
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    let go_on = head("Content-Type: application/json\r\nA2A-Version: 1.0\r\n");
    assert!(go_on.starts_with("HTTP/1.1 100"), "{go_on}");
}
