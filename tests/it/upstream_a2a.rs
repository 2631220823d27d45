//! The `a2a` backend against the real A2A 1.0 agent from tests/upstreams:
//! the round trip, extension URI and token checks, a killed agent.
//!
//! The agent (PyPI a2a-sdk 1.3.0, tests/upstreams/a2a_agent.py) requires
//! `A2A-Version`, `A2A-Extensions` with the exact AAP URI, and (here) its
//! own Bearer token.

use crate::support::*;
use serde_json::{json, Value};

const TOKEN: &str = "a2a-upstream-secret";

fn a2a_backend(peer: &Peer, extra: &str) -> String {
    forwarding_config(&format!(
        "kind = \"a2a\"\npeers = [\"{}\"]\npath = \"/a2a\"\nbearer_token = \"{TOKEN}\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\n{extra}",
        peer.url()
    ))
}

fn agent(args: &[&str]) -> Peer {
    Peer::start(PeerKind::A2a, args, &[("AAP_A2A_TOKEN", TOKEN)])
}

#[test]
fn search_vehicle_lead_round_trip() {
    let peer = agent(&[]);
    // No extension_uri: the gateway reads it from the Agent Card.
    let gw = Gateway::start_with(&a2a_backend(&peer, ""));
    let (err, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 3}, "sort": {"field": "price", "order": "asc"}}),
    );
    assert!(!err, "{sc}");
    assert_eq!(sc["type"], "inventory.search.response");
    // The agent sends doubles (92.0); the gateway hands out integers.
    assert!(sc["data"]["total"].is_u64(), "{}", sc["data"]["total"]);
    assert_eq!(sc["data"]["total"], 92);
    let vs = sc["data"]["vehicles"].as_array().unwrap();
    assert_eq!(vs.len(), 3);
    assert!(
        vs[0]["price"].is_i64() || vs[0]["price"].is_u64(),
        "{}",
        vs[0]
    );
    // A header-less modern client works the same way.
    let r = headerless_call(
        &gw,
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let sc = &r.json()["result"]["structuredContent"];
    assert_eq!(sc["type"], "inventory.vehicle.response", "{sc}");
    assert_eq!(sc["data"]["stock"], "DT-1001");
    // dealer.information and facets.
    let (err, sc) = gw.call_sc(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert!(!err, "{sc}");
    let (err, _) = gw.call_sc(
        "aap_inventory_facets",
        json!({"type": "inventory.facets.request"}),
    );
    assert!(!err);
    // An AAP error from the agent (array-form error.data) stays typed.
    let (err, sc) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1011"}),
    );
    assert!(err);
    assert_eq!(sc["code"], "VEHICLE_UNAVAILABLE", "{sc}");
    // A lead, and a retry with the same key: one lead at the agent.
    let (err, first) = gw.call_sc("aap_lead_submit", lead("k-a2a-1"));
    assert!(!err, "{first}");
    assert_eq!(first["data"]["status"], "received");
    let (err, again) = gw.call_sc("aap_lead_submit", lead("k-a2a-1"));
    assert!(!err, "{again}");
    assert_eq!(first["data"]["lead_id"], again["data"]["lead_id"]);
    let leads = peer.leads();
    assert_eq!(leads.len(), 1);
    // The agent saw the gateway's own credential, never a client token.
    assert_eq!(leads[0]["caller"], "bearer");
}

#[test]
fn configured_extension_uri_and_legacy_client() {
    let peer = agent(&["--int-numbers"]);
    let gw = Gateway::start_with(&a2a_backend(
        &peer,
        "extension_uri = \"https://autoagentprotocol.org/extensions/aap/v3.0\"",
    ));
    legacy_handshake(&gw);
    let result = legacy_call(
        &gw,
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "filters": {"make": ["Toyota"]}}),
    );
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        result["structuredContent"]["data"]["total"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn wrong_extension_uri_is_an_invalid_response() {
    let peer = agent(&[]);
    let gw = Gateway::start_with(&a2a_backend(
        &peer,
        "extension_uri = \"https://autoagentprotocol.org/extensions/aap/v9.9\"",
    ));
    let (err, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert!(err);
    assert_eq!(sc["code"], "UPSTREAM_INVALID_RESPONSE", "{sc}");
}

#[test]
fn task_answer_is_upstream_invalid_response() {
    let peer = agent(&["--task-mode"]);
    let gw = Gateway::start_with(&a2a_backend(&peer, ""));
    let (err, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert!(err);
    assert_eq!(sc["type"], "aap.error");
    assert_eq!(sc["code"], "UPSTREAM_INVALID_RESPONSE", "{sc}");
}

#[test]
fn missing_upstream_token_is_502() {
    let peer = agent(&[]);
    let cfg = forwarding_config(&format!(
        "kind = \"a2a\"\npeers = [\"{}\"]\nextension_uri = \"https://autoagentprotocol.org/extensions/aap/v3.0\"\n",
        peer.url()
    ));
    let gw = Gateway::start_with(&cfg);
    // The client's own Authorization header is never forwarded.
    let r = gw.rpc(
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        &modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request"}}),
        ),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    // The agent refused the gateway's (missing) credential: said so, with its own code.
    assert_eq!(r.error_code(), -32014, "{}", r.text());
    assert!(
        r.text()
            .contains("the dealer system refused the gateway's credentials"),
        "{}",
        r.text()
    );
    let _: Value = r.json();
}

#[test]
fn wrong_upstream_token_is_a_credential_refusal_not_a_leak() {
    const WRONG: &str = "wrong-a2a-credential-51c9";
    let peer = agent(&[]);
    let cfg = a2a_backend(&peer, "").replace(TOKEN, WRONG);
    let gw = Gateway::start_with(&cfg);
    let r = gw.call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.error_code(), -32014, "{}", r.text());
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("the dealer system refused the gateway's credentials"),
        "{message}"
    );
    assert!(!r.text().contains(WRONG), "no credentials in errors");
    let logs = gw.logs();
    assert!(
        logs.contains("backend refused the gateway's credentials")
            && logs.contains("refused the gateway's credential (HTTP 401)"),
        "{logs}"
    );
    assert!(!logs.contains(WRONG), "no credentials in the log");
}

#[test]
fn two_agents_one_killed_reads_continue() {
    let a = agent(&[]);
    let mut b = agent(&[]);
    let cfg = forwarding_config(&format!(
        "kind = \"a2a\"\npeers = [\"{}\", \"{}\"]\nbearer_token = \"{TOKEN}\"\nhealth_check_interval_ms = 500\n",
        a.url(),
        b.url()
    ));
    let gw = Gateway::start_with(&cfg);
    let search = json!({"type": "inventory.search.request", "pagination": {"limit": 2}});
    for _ in 0..3 {
        let (err, sc) = gw.call_sc("aap_inventory_search", search.clone());
        assert!(!err, "{sc}");
    }
    b.kill();
    for i in 0..6 {
        let (err, sc) = gw.call_sc("aap_inventory_search", search.clone());
        assert!(!err, "call {i} after the kill: {sc}");
        assert_eq!(sc["data"]["total"], 92);
    }
}
