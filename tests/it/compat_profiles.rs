//! Host compatibility profiles over real HTTP: what each profile shows in `tools/list`, the
//! nulls it maps to absent before the canonical validation (and the access line's paths), the
//! A2A trailing slash and 404 shapes, and the docs' client compatibility table kept true.

use crate::support::*;
use aap_gateway::aap::compat::PROFILES;
use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::aap::skill::Skill;
use serde_json::{json, Value};

fn with_profiles(profiles: &str) -> Gateway {
    let cfg = config_with("", "", "")
        .replace("host_compat = false", &format!("host_compat = {profiles}"));
    Gateway::start_with(&cfg)
}

fn tools(gw: &Gateway) -> Vec<Value> {
    gw.rpc(&[], &modern("tools/list", json!({}))).json()["result"]["tools"]
        .as_array()
        .unwrap()
        .clone()
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap()
}

/// Every object closed and every property required, anywhere in `s`.
fn assert_strict(s: &Value, at: &str) {
    match s {
        Value::Object(o) => {
            if let Some(Value::Object(props)) = o.get("properties") {
                assert_eq!(o.get("additionalProperties"), Some(&json!(false)), "{at}");
                let req: Vec<&str> = o["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap())
                    .collect();
                assert_eq!(
                    req,
                    props.keys().map(String::as_str).collect::<Vec<_>>(),
                    "{at}"
                );
            }
            for (k, v) in o {
                if !matches!(k.as_str(), "enum" | "const" | "examples" | "default") {
                    assert_strict(v, &format!("{at}/{k}"));
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| assert_strict(v, at)),
        _ => {}
    }
}

#[test]
fn canonical_catalog_is_the_schemas_with_four_hints() {
    let gw = Gateway::start();
    let set = SchemaSet::embedded().unwrap();
    for t in tools(&gw) {
        let skill = Skill::from_tool_name(t["name"].as_str().unwrap()).unwrap();
        assert_eq!(&t["inputSchema"], set.request_doc(skill), "{}", t["name"]);
        let a = &t["annotations"];
        let hints = (
            a["readOnlyHint"].clone(),
            a["destructiveHint"].clone(),
            a["idempotentHint"].clone(),
            a["openWorldHint"].clone(),
        );
        if skill.is_read() {
            assert_eq!(hints, (json!(true), json!(false), json!(true), json!(true)));
        } else {
            assert_eq!(
                hints,
                (json!(false), json!(false), json!(false), json!(true))
            );
        }
    }
}

#[test]
fn openai_strict_shows_strict_schemas_and_maps_nulls_to_absent() {
    let canonical = tools(&Gateway::start());
    let gw = with_profiles("[\"openai-strict\"]");
    let shown = tools(&gw);
    assert_eq!(shown.len(), 5);
    for t in &shown {
        let s = &t["inputSchema"];
        for k in ["anyOf", "allOf", "oneOf", "not", "if", "dependentSchemas"] {
            assert!(s.get(k).is_none(), "{}: root {k}", t["name"]);
        }
        assert_strict(s, t["name"].as_str().unwrap());
        // Output schemas, hints and metadata are untouched.
        let c = tool(&canonical, t["name"].as_str().unwrap());
        assert_eq!(t["outputSchema"], c["outputSchema"]);
        assert_eq!(t["annotations"], c["annotations"]);
    }
    let lead_schema = &tool(&shown, "aap_lead_submit")["inputSchema"];
    // Definitions are inlined (openai-agents refuses a bare $ref), the open Vehicle closed.
    assert!(lead_schema.get("$defs").is_none());
    assert_eq!(
        lead_schema["properties"]["vehicle_of_interest"]["additionalProperties"],
        json!(false)
    );
    assert_eq!(
        lead_schema["properties"]["message"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(
        lead_schema["properties"]["trade_in"]["type"],
        json!(["object", "null"])
    );

    // What a strict model sends: nulls for what it does not use.
    let (err, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request",
               "filters": {"make": ["Toyota"], "vin": null, "query": null, "price_max": null},
               "pagination": {"limit": 2, "skip": null, "cursor": null}, "sort": null, "privacy": null}),
    );
    assert!(!err, "{sc}");
    assert_eq!(sc["type"], "inventory.search.response");
    let mut lead = lead("6f1c2b9e-3d4a-4f5b-8c7d-0e1f2a3b4c5e");
    lead["customer"]["phone"] = Value::Null;
    lead["message"] = Value::Null;
    lead["trade_in"] = Value::Null;
    lead["consent"]["expires_at"] = Value::Null;
    let (err, sc) = gw.call_sc("aap_lead_submit", lead);
    assert!(!err, "{sc}");
    assert_eq!(leads_in(&gw.state), 1);
    // Canonical validation still runs: no identifier at all is refused, and so is a null
    // for a required property.
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "vin": null, "stock": null, "vehicle_id": null}),
    );
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    let mut bad = crate::support::lead("6f1c2b9e-3d4a-4f5b-8c7d-0e1f2a3b4c5f");
    bad["idempotency_key"] = Value::Null;
    let (code, _) = gw.aap_error_code("aap_lead_submit", bad);
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    assert_eq!(leads_in(&gw.state), 1);

    let logs = gw.logs();
    let dropped: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("\"target\":\"access\"") && l.contains("nulls_dropped"))
        .collect();
    assert!(
        dropped.iter().any(|l| l.contains("/filters/vin")
            && l.contains("/pagination/cursor")
            && l.contains("/privacy")),
        "{dropped:?}"
    );
    assert!(dropped.iter().any(|l| l.contains("/customer/phone")));
    assert!(
        !logs.contains("quinn.testbuyer@example.com"),
        "values never logged"
    );
}

#[test]
fn nulls_are_refused_without_a_profile_and_dropped_with_null_as_absent() {
    let args = json!({"type": "inventory.vehicle.request", "stock": "DT-1001", "vin": null, "vehicle_id": null});
    let gw = Gateway::start();
    let (code, _) = gw.aap_error_code("aap_inventory_vehicle", args.clone());
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");
    assert!(!gw.logs().contains("nulls_dropped"));

    let gw = with_profiles("\"null-as-absent\"");
    let c = tools(&Gateway::start());
    // The catalog is the canonical one.
    assert_eq!(tools(&gw), c);
    let (err, sc) = gw.call_sc("aap_inventory_vehicle", args);
    assert!(!err, "{sc}");
    assert_eq!(sc["type"], "inventory.vehicle.response");
    let logs = gw.logs_containing("nulls_dropped");
    assert!(
        logs.lines()
            .any(|l| l.contains("nulls_dropped") && l.contains(r#"[\"/vin\", \"/vehicle_id\"]"#)),
        "{logs}"
    );
}

#[test]
fn no_type_arrays_and_config_errors() {
    let gw = with_profiles("[\"no-type-arrays\"]");
    let shown = tools(&gw);
    let text = tool(&shown, "aap_lead_submit")["inputSchema"].to_string();
    assert!(!text.contains(r#""type":["#), "{text}");
    assert!(text.contains(r#"{"type":"null"}"#));
    // Nulls are not this profile's business: still refused.
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "DT-1001", "vin": null}),
    );
    assert_eq!(code, "SCHEMA_VALIDATION_FAILED");

    for (value, says) in [
        ("[\"strict\"]", "unknown host_compat profile"),
        ("[\"openai-strict\", \"dependent-schemas\"]", "name one of"),
    ] {
        let cfg = config_with("", "", "")
            .replace("host_compat = false", &format!("host_compat = {value}"));
        let dir = temp_dir("compat-cfg");
        let path = dir.join("gw.toml");
        std::fs::write(&path, &cfg).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["catalog", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says) && err.contains("host_compat"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }
}

#[test]
fn a2a_trailing_slash_and_404_shapes() {
    let gw = Gateway::start();
    let body = json!({
        "jsonrpc": "2.0", "id": "req-1", "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [
            {"data": {"type": "dealer.information.request"},
             "mediaType": "application/vnd.autoagent.dealer-information-request+json"}]},
                   "configuration": {"acceptedOutputModes": ["application/vnd.autoagent.dealer-information-response+json"]}}
    })
    .to_string();
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        (
            "A2A-Extensions",
            "https://autoagentprotocol.org/extensions/aap/v3.0",
        ),
    ];
    let exact = request(
        gw.port,
        "POST",
        "/aap/3.0.0/demo-toyota/a2a",
        &headers,
        body.as_bytes(),
    );
    let slash = request(
        gw.port,
        "POST",
        "/aap/3.0.0/demo-toyota/a2a/",
        &headers,
        body.as_bytes(),
    );
    assert_eq!(exact.status, 200);
    assert_eq!(slash.status, 200, "{}", slash.text());
    assert!(slash.json().get("result").is_some(), "{}", slash.text());
    assert_eq!(
        slash.json()["result"]["message"]["parts"][0]["data"]["type"],
        exact.json()["result"]["message"]["parts"][0]["data"]["type"]
    );

    // An A2A path no tenant serves: an A2A JSON-RPC error, not the MCP wording.
    let none = request(
        gw.port,
        "POST",
        "/aap/3.0.0/nobody/a2a/",
        &headers,
        body.as_bytes(),
    );
    assert_eq!(none.status, 404);
    let j = none.json();
    assert_eq!(j["jsonrpc"], "2.0");
    assert_eq!(j["id"], "req-1");
    let msg = j["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("No A2A endpoint") && !msg.contains("No MCP endpoint"),
        "{msg}"
    );

    // The MCP path with a slash: 404 naming the exact path.
    let mcp = request(
        gw.port,
        "POST",
        "/aap/3.0.0/demo-toyota/mcp/",
        &[("Content-Type", "application/json")],
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    assert_eq!(mcp.status, 404);
    let msg = mcp.json()["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("/aap/3.0.0/demo-toyota/mcp (without the trailing slash)"),
        "{msg}"
    );
    // Any other path keeps the plain answer.
    let other = request(
        gw.port,
        "POST",
        "/nowhere",
        &[("Content-Type", "application/json")],
        b"{}",
    );
    assert_eq!(other.status, 404);
    assert_eq!(
        other.json()["message"],
        "No MCP endpoint is mounted at this path"
    );
}

/// docs/protocol.md "Client compatibility": every row's profile is a real profile (or
/// `none`), and every test it names exists.
#[test]
fn client_compatibility_table_is_true() {
    let doc = std::fs::read_to_string(repo().join("docs/protocol.md")).unwrap();
    let section = doc
        .split("### Client compatibility")
        .nth(1)
        .expect("docs/protocol.md has a Client compatibility section");
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with("| client"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(rows.len() >= 7, "{rows:?}");
    let mut seen = std::collections::BTreeSet::new();
    for row in &rows {
        assert_eq!(row.len(), 5, "{row:?}");
        let profile = row[3].trim_matches('`');
        assert!(
            profile == "none" || PROFILES.contains(&profile),
            "unknown profile in {row:?}"
        );
        seen.insert(profile.to_owned());
        let test = row[4].split('`').nth(1).expect("a test in backquotes");
        let (file, name) = test.split_once("::").unwrap_or((test, ""));
        let text = std::fs::read_to_string(repo().join(file))
            .unwrap_or_else(|_| panic!("{file} named by {row:?} does not exist"));
        if !name.is_empty() {
            let found = [
                format!("def {name}("),
                format!("class {name}("),
                format!("fn {name}("),
            ]
            .iter()
            .any(|p| text.contains(p.as_str()));
            assert!(found, "{name} not in {file}");
        }
    }
    for p in PROFILES {
        assert!(seen.contains(p), "profile {p} has no row in the table");
    }
}
