//! The AAP contract: schema corpus, host-compat equivalence, catalog, typed
//! errors, consent, idempotency and quota over real HTTP.

use crate::support::*;
use aap_gateway::aap::schemas::{compile, host_compat_input, SchemaSet};
use serde_json::{json, Value};
use std::path::Path;

fn corpus(kind: &str) -> Vec<(String, String, Value)> {
    let root = repo().join("tests/corpus").join(kind);
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        let stem = dir.file_name().unwrap().to_string_lossy().into_owned();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            out.push((
                stem.clone(),
                f.file_name().unwrap().to_string_lossy().into_owned(),
                v,
            ));
        }
    }
    assert!(!out.is_empty());
    out
}

#[test]
fn valid_corpus_validates() {
    let set = SchemaSet::embedded().unwrap();
    for (stem, file, v) in corpus("valid") {
        assert!(
            set.validate_stem(&stem, &v).is_ok(),
            "{stem}/{file}: {:?}",
            set.validate_stem(&stem, &v)
        );
    }
}

#[test]
fn invalid_corpus_fails_at_the_expected_path() {
    let set = SchemaSet::embedded().unwrap();
    let mut n = 0;
    for (stem, file, case) in corpus("invalid") {
        let errors = set
            .validate_stem(&stem, &case["instance"])
            .expect_err(&format!("{stem}/{file} should fail"));
        let want = case["expect_path"].as_str().unwrap();
        let paths: Vec<&str> = errors.iter().map(|e| e["path"].as_str().unwrap()).collect();
        assert!(
            paths.contains(&want),
            "{stem}/{file}: wanted {want:?} in {paths:?}"
        );
        for e in &errors {
            assert!(
                e["correction"].as_str().is_some_and(|c| !c.is_empty()),
                "{stem}/{file}: every error has a correction"
            );
        }
        n += 1;
    }
    assert!(n >= 40, "only {n} malformed cases");
}

#[test]
fn host_compat_validators_agree_with_canonical() {
    let set = SchemaSet::embedded().unwrap();
    let mut compared = 0;
    for stem in [
        "dealer-information-request",
        "inventory-facets-request",
        "inventory-search-request",
        "inventory-vehicle-request",
        "lead-submit-request",
    ] {
        let canonical = set.doc(stem);
        let moved = host_compat_input(canonical).unwrap();
        for k in ["allOf", "anyOf", "oneOf", "not", "if", "then", "else"] {
            assert!(
                moved.get(k).is_none(),
                "{stem}: root {k} left in host-compat schema"
            );
        }
        let a = compile(canonical).unwrap();
        let b = compile(&moved).unwrap();
        let mut instances: Vec<Value> = corpus("valid")
            .into_iter()
            .filter(|(s, _, _)| s == stem)
            .map(|(_, _, v)| v)
            .collect();
        instances.extend(
            corpus("invalid")
                .into_iter()
                .filter(|(s, _, _)| s == stem)
                .map(|(_, _, c)| c["instance"].clone()),
        );
        // Also every other stem's instances: wrong-type payloads must be rejected the same way.
        instances.extend(corpus("valid").into_iter().map(|(_, _, v)| v));
        for inst in &instances {
            assert_eq!(
                a.is_valid(inst),
                b.is_valid(inst),
                "{stem}: verdicts differ for {inst}"
            );
            compared += 1;
        }
    }
    assert!(compared > 100);
    let no_type = json!({"type": "object", "anyOf": [{"required": ["a"]}]});
    assert!(
        host_compat_input(&no_type).is_err(),
        "refuses when type is not required"
    );
}

#[test]
fn catalog_shape() {
    let gw = Gateway::start();
    let tools = gw.rpc(&[], &modern("tools/list", json!({}))).json()["result"]["tools"].clone();
    let set = SchemaSet::embedded().unwrap();
    for t in tools.as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["inputSchema"]["type"], "object", "{name}");
        assert!(
            t["inputSchema"]["required"]
                .as_array()
                .unwrap()
                .contains(&json!("type")),
            "{name}"
        );
        assert_eq!(t["outputSchema"]["type"], "object");
        assert!(t["description"].as_str().unwrap().len() > 80);
        let a = &t["annotations"];
        assert_eq!(a["openWorldHint"], true);
        let aap = &t["_meta"]["autoagentprotocol.org/aap"];
        assert_eq!(aap["version"], "3.0.0");
        assert!(aap["request_schema"]
            .as_str()
            .unwrap()
            .starts_with("https://autoagentprotocol.org/v3.0/schemas/"));
        // The published schemas compile on their own: self-contained.
        let out = compile(&t["outputSchema"]).unwrap();
        let inp = compile(&t["inputSchema"]).unwrap();
        let _ = inp;
        let err = json!({"type":"aap.error","error_id":"e1","code":"INTERNAL_ERROR","message":"m","retryable":true,"created_at":"2026-01-01T00:00:00Z"});
        assert!(out.is_valid(&err), "{name}: output union accepts aap.error");
        if name == "aap_lead_submit" {
            assert_eq!(
                (
                    a["readOnlyHint"].clone(),
                    a["destructiveHint"].clone(),
                    a["idempotentHint"].clone()
                ),
                (json!(false), json!(false), json!(false))
            );
            assert!(
                t["description"].as_str().unwrap().contains("24 hours"),
                "states the retention window"
            );
        } else {
            assert_eq!(a["readOnlyHint"], true, "{name}");
        }
        if name == "aap_inventory_search" {
            let caps = &aap["capabilities"];
            assert!(
                set.validate_stem("inventory-capabilities", caps).is_ok(),
                "{caps}"
            );
        } else {
            assert!(aap.get("capabilities").is_none());
        }
    }
}

#[test]
fn host_compat_catalog_and_cli() {
    let cfg = config_with("", "", "").replace("host_compat = false", "host_compat = true");
    let dir = temp_dir("catalog");
    let path = dir.join("gw.toml");
    std::fs::write(&path, &cfg).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["catalog", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cat: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tools = cat["demo-toyota"]["tools"].as_array().unwrap();
    let vehicle = tools
        .iter()
        .find(|t| t["name"] == "aap_inventory_vehicle")
        .unwrap();
    assert!(vehicle["inputSchema"].get("anyOf").is_none());
    assert!(vehicle["inputSchema"]["dependentSchemas"]["type"]["anyOf"].is_array());
    // The served catalog equals the printed one.
    let gw = Gateway::start_with(&cfg);
    let served = gw.rpc(&[], &modern("tools/list", json!({}))).json()["result"]["tools"].clone();
    assert_eq!(&served, &cat["demo-toyota"]["tools"]);
    // Validation stays canonical in host-compat mode.
    let (err, sc) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request"}),
    );
    assert!(err);
    assert_eq!(sc["code"], "SCHEMA_VALIDATION_FAILED");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn typed_errors_for_bad_arguments() {
    let gw = Gateway::start();
    let (code, sc) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "filters": {"price_max": "cheap"}}),
    );
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    let errs = sc["details"]["errors"].as_array().unwrap();
    assert!(errs.iter().any(|e| e["path"] == "/filters/price_max"
        && e["correction"].as_str().unwrap().contains("integer")));
    assert!(!sc.to_string().contains("cheap"), "never echo values");
    assert_eq!(sc["retryable"], false);
    let (code, _) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "filters": {"horsepower_min": 300}}),
    );
    assert_eq!(code, "UNSUPPORTED_FILTER");
    let (code, sc) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.vehicle.request", "vin": "JTDACAAU2H3400137"}),
    );
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(sc["details"]["errors"][0]["path"], "/type");
    let (code, _) = gw.aap_error_code("aap_inventory_search", json!(["not", "an", "object"]));
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "vin": "ZZZZZZZZZZZZZZZZZ"}),
    );
    assert_eq!(code, "VEHICLE_NOT_FOUND");
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1034"}),
    );
    assert_eq!(code, "VEHICLE_UNAVAILABLE");
    let (code, sc) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"cursor": "forged.cursor"}}),
    );
    assert_eq!(code, "INVALID_CURSOR");
    assert_eq!(sc["details"]["errors"][0]["path"], "/pagination/cursor");
    let (code, _) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "filters": {"query": "x".repeat(201)}}),
    );
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
}

#[test]
fn expired_cursor() {
    let gw = Gateway::start_with(
        &config_with("", "", "").replace("cursor_ttl_secs = 900", "cursor_ttl_secs = 1"),
    );
    let (_, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 2}}),
    );
    let cursor = sc["data"]["next_cursor"].as_str().unwrap().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let (code, sc) = gw.aap_error_code(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 2, "cursor": cursor}}),
    );
    assert_eq!(code, "CURSOR_EXPIRED");
    assert!(sc["details"]["errors"][0]["correction"]
        .as_str()
        .unwrap()
        .contains("cursor"));
}

#[test]
fn consent_is_enforced_and_nothing_is_sent() {
    let gw = Gateway::start();
    let mut no_consent = lead("k-consent-1");
    no_consent.as_object_mut().unwrap().remove("consent");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", no_consent).0,
        "CONTACT_CONSENT_REQUIRED"
    );
    let mut bad_scope = lead("k-consent-2");
    bad_scope["consent"]["scope"] = json!(["marketing"]);
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", bad_scope).0,
        "INVALID_CONSENT"
    );
    let mut expired = lead("k-consent-3");
    expired["consent"]["expires_at"] = json!("2020-01-01T00:00:00Z");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", expired).0,
        "INVALID_CONSENT"
    );
    let mut future = lead("k-consent-4");
    future["consent"]["granted_at"] = json!("2099-01-01T00:00:00Z");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", future).0,
        "INVALID_CONSENT"
    );
    let mut wrong_channel = lead("k-consent-5");
    wrong_channel["consent"]["allowed_channels"] = json!(["sms"]);
    let (code, sc) = gw.aap_error_code("aap_lead_submit", wrong_channel);
    assert_eq!(code, "CONTACT_CONSENT_REQUIRED");
    assert!(
        !sc.to_string().contains("quinn"),
        "no customer values in errors: {sc}"
    );
    let mut no_key = lead("x");
    no_key.as_object_mut().unwrap().remove("idempotency_key");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", no_key).0,
        "MISSING_REQUIRED_FIELD"
    );
    let mut bad_condition = lead("k-consent-6");
    bad_condition["vehicle_of_interest"]["condition"] = json!("good");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", bad_condition).0,
        "INVALID_CONDITION"
    );
    let mut sold = lead("k-consent-7");
    sold["vehicle_of_interest"] = json!({"stock": "DT-1034"});
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", sold).0,
        "VEHICLE_UNAVAILABLE"
    );
    assert_eq!(leads_in(&gw.state), 0, "no rejected lead may be stored");
    let (err, sc) = gw.call_sc("aap_lead_submit", lead("k-consent-ok"));
    assert!(!err, "{sc}");
    assert_eq!(leads_in(&gw.state), 1);
}

#[test]
fn concurrent_duplicates_send_one_lead() {
    let gw = Gateway::start();
    let key = uuid::Uuid::new_v4().to_string();
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|_| s.spawn(|| gw.call_sc("aap_lead_submit", lead(&key))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .map(|(err, sc)| {
                assert!(!err, "{sc}");
                sc
            })
            .collect()
    });
    assert!(
        results.iter().all(|r| r == &results[0]),
        "all 50 results identical"
    );
    assert_eq!(results[0]["data"]["status"], "received");
    assert_eq!(leads_in(&gw.state), 1, "exactly one lead stored");
    // Same key, different payload → conflict, nothing stored.
    let mut other = lead(&key);
    other["message"] = json!("a different enquiry");
    let (code, _) = gw.aap_error_code("aap_lead_submit", other);
    assert_eq!(code, "IDEMPOTENCY_CONFLICT");
    assert_eq!(leads_in(&gw.state), 1);
}

#[test]
fn kill_and_restart_keeps_lead_and_idempotency() {
    let gw = Gateway::start();
    let key = uuid::Uuid::new_v4().to_string();
    let (_, first) = gw.call_sc("aap_lead_submit", lead(&key));
    assert_eq!(leads_in(&gw.state), 1);
    let state = gw.state.clone();
    let gw = gw.restart();
    assert_eq!(leads_in(&state), 1, "the accepted lead survived kill -9");
    let (err, again) = gw.call_sc("aap_lead_submit", lead(&key));
    assert!(!err);
    assert_eq!(
        again, first,
        "replay after restart returns the original result"
    );
    assert_eq!(leads_in(&state), 1, "and sends nothing twice");
    let mut other = lead(&key);
    other["message"] = json!("changed");
    assert_eq!(
        gw.aap_error_code("aap_lead_submit", other).0,
        "IDEMPOTENCY_CONFLICT"
    );
}

#[test]
fn skill_quota_is_rate_limited_result() {
    let gw = Gateway::start_with(
        &config_with("", "", "").replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 2"),
    );
    for i in 0..2 {
        let (err, sc) = gw.call_sc("aap_lead_submit", lead(&format!("quota-{i}")));
        assert!(!err, "{sc}");
    }
    let (code, sc) = gw.aap_error_code("aap_lead_submit", lead("quota-3"));
    assert_eq!(code, "RATE_LIMITED");
    assert_eq!(sc["retryable"], true);
    assert!(sc["details"]["retry_after_ms"].as_u64().unwrap() > 0);
    // A replay of an accepted lead is not a new lead and is not throttled.
    let (err, _) = gw.call_sc("aap_lead_submit", lead("quota-0"));
    assert!(!err);
    assert_eq!(leads_in(&gw.state), 2);
}

#[test]
fn backend_results_are_validated() {
    // A dealer profile whose name is not a string fails the response schema; the embedded
    // backend serves the file as it is, so the gateway's result check is what stops it. (An
    // inventory row that fails the listing schema never gets this far: the feed loader
    // rejects it at load, tests/it/feeds.rs.)
    let dir = temp_dir("baddealer");
    let mut dealer: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("data/demo-dealer.json")).unwrap(),
    )
    .unwrap();
    dealer["name"] = json!(42);
    let dealer_path = dir.join("dealer.json");
    std::fs::write(&dealer_path, serde_json::to_string(&dealer).unwrap()).unwrap();
    let cfg = config_with("", "", "").replace(
        &format!("{:?}", repo().join("data/demo-dealer.json")),
        &format!("{:?}", dealer_path),
    );
    assert!(cfg.contains(&format!("{:?}", dealer_path)), "{cfg}");
    let gw = Gateway::start_with(&cfg);
    let (code, sc) = gw.aap_error_code(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert_eq!(code, "UPSTREAM_INVALID_RESPONSE");
    assert!(sc.get("details").is_none(), "no internals leak");
    let (err, _) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1001"}),
    );
    assert!(!err, "valid results still pass");
    assert!(gw.logs().contains("backend result failed its schema"));
    std::fs::remove_dir_all(Path::new(&dir)).ok();
}

#[test]
fn schemas_load_from_a_configured_directory() {
    let dir = temp_dir("schemas");
    for f in std::fs::read_dir(repo().join("schemas")).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "json") {
            std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
        }
    }
    let cfg = config_with("", "", "").replace("# dir = \"schemas\"", &format!("dir = {dir:?}"));
    let gw = Gateway::start_with(&cfg);
    let (err, _) = gw.call_sc(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert!(!err);
    drop(gw);
    // A pinned copy that needs a remote fetch is refused at start.
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("error.schema.json")).unwrap())
            .unwrap();
    doc["properties"]["details"] = json!({"$ref": "https://example.com/remote.schema.json"});
    std::fs::write(dir.join("error.schema.json"), doc.to_string()).unwrap();
    let path = dir.join("gw.toml");
    std::fs::write(&path, &cfg).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("error") && e.contains("self-contained"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}
