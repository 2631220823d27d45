//! Log hygiene: after traffic carrying known secrets and customer values, the
//! log holds none of them, yet one structured line per request, with the
//! connection's facts (client address, protocol, user agent, sizes).

use crate::support::*;
use serde_json::{json, Value};

const SECRET_TOKEN: &str = "eyJsecret-token-value-do-not-log.abc.def";
const NAME: &str = "Zebulon";
const EMAIL: &str = "zebulon.secret@example.com";
const PHONE: &str = "+14155550199";
const CONSENT: &str = "I-consent-verbatim-text-marker";

#[test]
fn logs_hold_no_tokens_or_customer_values() {
    let gw = Gateway::start();
    let mut l = lead(&uuid::Uuid::new_v4().to_string());
    l["customer"] = json!({"first_name": NAME, "last_name": "Secretson", "email": EMAIL, "phone": PHONE, "preferred_contact": "email"});
    l["consent"]["consent_text"] = json!(CONSENT);
    let auth = format!("Bearer {SECRET_TOKEN}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Mcp-Name", "aap_lead_submit"),
    ];
    let ok = gw.rpc(
        &headers,
        &modern(
            "tools/call",
            json!({"name": "aap_lead_submit", "arguments": l.clone()}),
        ),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    // Failing calls with the same values: schema error, consent error, conflict.
    let mut bad = l.clone();
    bad["customer"]["phone"] = json!("not-a-phone-zebulon");
    gw.rpc(
        &headers,
        &modern(
            "tools/call",
            json!({"name": "aap_lead_submit", "arguments": bad}),
        ),
    );
    let mut conflict = l.clone();
    conflict["message"] = json!(format!("{NAME} wants a call at {PHONE}"));
    gw.rpc(
        &headers,
        &modern(
            "tools/call",
            json!({"name": "aap_lead_submit", "arguments": conflict}),
        ),
    );
    gw.post(
        &[("Authorization", &auth)],
        &format!("{{\"broken json {EMAIL}"),
    );
    let logs = gw.logs();
    for secret in [SECRET_TOKEN, NAME, EMAIL, PHONE, CONSENT, "zebulon"] {
        assert!(
            !logs.to_lowercase().contains(&secret.to_lowercase()),
            "log leaks {secret:?}:\n{logs}"
        );
    }
    let access: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "access")
        .collect();
    assert!(access.len() >= 4, "one access line per request:\n{logs}");
    let first = &access[0]["fields"];
    for key in [
        "correlation_id",
        "tenant",
        "binding",
        "mcp_revision",
        "aap_version",
        "skill",
        "outcome",
        "latency_us",
    ] {
        assert!(first.get(key).is_some(), "access log lacks {key}: {first}");
    }
    assert_eq!(first["skill"], "lead.submit");
}

#[test]
fn traceparent_becomes_the_correlation_id() {
    let gw = Gateway::start();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = gw.rpc(&[("traceparent", tp)], &modern("tools/list", json!({})));
    assert_eq!(
        r.header("x-correlation-id"),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert!(gw.logs().contains("4bf92f3577b34da6a3ce929d0e0e4736"));
    let r = gw.rpc(
        &[("traceparent", "garbage")],
        &modern("tools/list", json!({})),
    );
    assert_eq!(r.header("x-correlation-id").unwrap().len(), 32);
}

#[test]
fn aap_log_filters_the_access_line_like_any_other_target() {
    let access_lines = |logs: &str| {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "access")
            .count()
    };
    for (filter, expected) in [("info", 1), ("info,access=off", 0), ("warn", 0)] {
        let state = temp_dir("logfilter");
        let config = state.join("gateway.toml");
        std::fs::write(&config, config_with("", "", "")).unwrap();
        let gw = Gateway::launch_with_env(config, state, &[], &[("AAP_LOG", filter)]);
        let r = gw.rpc(&[], &modern("tools/list", json!({})));
        assert_eq!(r.status, 200, "{}", r.text());
        // The line follows the answer's write; `logs` waits until the log stops growing.
        let logs = gw.logs();
        assert_eq!(access_lines(&logs), expected, "AAP_LOG={filter}:\n{logs}");
    }
}

/// The access line of the request with correlation id `id`.
fn access_line(gw: &Gateway, id: &str) -> Value {
    gw.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["target"] == "access" && v["fields"]["correlation_id"] == id)
        .map(|v| v["fields"].clone())
        .unwrap_or_else(|| panic!("no access line for {id}:\n{}", gw.logs()))
}

#[test]
fn access_lines_carry_client_address_protocol_user_agent_and_sizes() {
    let gw = Gateway::start_with(&config_with("", "", "").replace("h2c = false", "h2c = true"));
    let body = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 2}}}),
    )
    .to_string();
    // HTTP/1.1, with a user agent far longer than the line keeps (and not all ASCII).
    let long_agent = format!("agent-\u{e9}{}", "x".repeat(600));
    let id1 = "11111111111111111111111111111111";
    let tp1 = format!("00-{id1}-00f067aa0ba902b7-01");
    let r = request(
        gw.port,
        "POST",
        ENDPOINT,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("traceparent", &tp1),
            ("User-Agent", &long_agent),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let a = access_line(&gw, id1);
    assert_eq!(a["protocol"], "HTTP/1.1", "{a}");
    assert_eq!(a["client_address"], "127.0.0.1", "{a}");
    let agent = a["user_agent"].as_str().unwrap_or_default();
    assert!(agent.len() <= 256 && agent.len() >= 250, "{a}");
    assert!(long_agent.starts_with(agent), "a prefix of the header: {a}");
    assert_eq!(a["bytes_in"], body.len(), "{a}");
    assert_eq!(a["bytes_out"], r.body.len(), "{a}");
    assert_eq!(a["rpc_method"], "tools/call");

    // HTTP/2 (h2c, curl with prior knowledge).
    let id2 = "22222222222222222222222222222222";
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", "--max-time", "20"])
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", "Accept: application/json, text/event-stream"])
        .args(["-H", &format!("traceparent: 00-{id2}-00f067aa0ba902b7-01")])
        .args(["-A", "curl-h2-test/1.0"])
        .args(["--data", &body])
        .arg(format!("http://127.0.0.1:{}{ENDPOINT}", gw.port))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = access_line(&gw, id2);
    assert_eq!(a["protocol"], "HTTP/2", "{a}");
    assert_eq!(a["client_address"], "127.0.0.1", "{a}");
    assert_eq!(a["user_agent"], "curl-h2-test/1.0", "{a}");
    assert_eq!(a["bytes_in"], body.len(), "{a}");
    assert_eq!(a["bytes_out"], out.stdout.len(), "{a}");
    assert_eq!(a["status"], 200);

    // No user agent, and a refusal on the head alone: nothing read, the error body counted.
    let id3 = "33333333333333333333333333333333";
    let tp3 = format!("00-{id3}-00f067aa0ba902b7-01");
    let r = request(gw.port, "GET", ENDPOINT, &[("traceparent", &tp3)], b"");
    assert_eq!(r.status, 405, "{}", r.text());
    let a = access_line(&gw, id3);
    assert_eq!(a["user_agent"], "-", "{a}");
    assert_eq!(a["bytes_in"], 0, "{a}");
    assert_eq!(a["bytes_out"], r.body.len(), "{a}");
}

/// A refusal that the request head decides logs its HTTP status as the access line's outcome, on
/// the MCP and the A2A binding alike: the same name whichever layer refuses it.
#[test]
fn head_refusals_log_their_status_on_every_binding() {
    let gw = Gateway::start();
    let a2a = "/aap/3.0.0/demo-toyota/a2a";
    let body = modern("tools/list", json!({})).to_string();
    let json_ct = ("Content-Type", "application/json");
    let evil = ("Origin", "https://evil.example");
    // (HTTP method, path, headers, the answer's status, the binding)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: [Case; 6] = [
        ("POST", ENDPOINT, vec![json_ct, evil], 403, "mcp"),
        ("GET", ENDPOINT, vec![], 405, "mcp"),
        (
            "POST",
            ENDPOINT,
            vec![("Content-Type", "text/plain")],
            415,
            "mcp",
        ),
        (
            "POST",
            ENDPOINT,
            vec![json_ct, ("Accept", "text/html")],
            406,
            "mcp",
        ),
        ("POST", a2a, vec![json_ct, evil], 403, "a2a"),
        (
            "POST",
            a2a,
            vec![("Content-Type", "text/plain")],
            415,
            "a2a",
        ),
    ];
    for (method, path, headers, status, _) in &cases {
        let r = request(gw.port, method, path, headers, body.as_bytes());
        assert_eq!(
            r.status,
            *status,
            "{method} {path} {headers:?}: {}",
            r.text()
        );
    }
    let logged = |logs: &str, status: u16, binding: &str| {
        logs.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| {
                v["fields"]["message"] == "request"
                    && v["fields"]["status"] == status
                    && v["fields"]["binding"] == binding
                    && v["fields"]["outcome"]
                        .as_str()
                        .and_then(|o| o.parse::<u16>().ok())
                        == Some(status)
            })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let logs = gw.logs();
        let missing: Vec<_> = cases
            .iter()
            .filter(|(.., status, binding)| !logged(&logs, *status, binding))
            .map(|(m, p, h, s, _)| format!("{m} {p} {h:?} → {s}"))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no access line with the status as outcome for {missing:?}:\n{logs}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
