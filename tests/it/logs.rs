//! Log hygiene: after traffic carrying known secrets and customer values, the
//! log holds none of them, yet one structured line per request.

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
        // The line is written before the answer leaves.
        let logs = gw.logs();
        assert_eq!(access_lines(&logs), expected, "AAP_LOG={filter}:\n{logs}");
    }
}
