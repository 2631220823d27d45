//! The official Rust MCP SDK (`rmcp`, from the crates registry) as a client of the real
//! gateway binary over Streamable HTTP.
//!
//! Revision: rmcp 3.11 speaks MCP 2026-07-28, so the client starts with
//! `server/discover` (`ClientLifecycleMode::Discover`, no `initialize`) and
//! sends the standard request headers (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Mcp-Name`) itself; the access log proves the gateway had nothing to fill
//! in. Results are asserted by shape and behaviour, not by demo data values.

use crate::support::*;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{json, Map, Value};

type Client = RunningService<RoleClient, ()>;

const TOOLS: [&str; 5] = [
    "aap_dealer_information",
    "aap_inventory_facets",
    "aap_inventory_search",
    "aap_inventory_vehicle",
    "aap_lead_submit",
];

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}

/// Call a tool; return `(isError, structuredContent)` after checking the
/// result is complete and its one text block carries the same JSON.
async fn call(client: &Client, name: &'static str, arguments: Value) -> (bool, Value) {
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new(name).with_arguments(object(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{name}: tools/call failed: {e}"));
    let sc = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("{name}: no structuredContent"));
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    assert_eq!(texts.len(), 1, "{name}: one text block");
    let text: Value = serde_json::from_str(texts[0]).expect("text block is JSON");
    assert_eq!(text, sc, "{name}: text block equals structuredContent");
    let is_error = result.is_error.expect("isError is always sent");
    assert_eq!(is_error, sc["type"] == "aap.error", "{name}: {sc}");
    (is_error, sc)
}

#[test]
fn rmcp_client_uses_every_tool() {
    // rmcp's reqwest is built with `rustls-no-provider` (the gateway's feature choice): the
    // process needs a default provider even for plain HTTP.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let gw = Gateway::start();
    let url = format!("http://127.0.0.1:{}{ENDPOINT}", gw.port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let transport = StreamableHttpClientTransport::from_uri(url.as_str());
        let client: Client = ()
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("server/discover with rmcp");
        let info = client.peer_info().expect("server info after discover");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
        assert!(info.capabilities.tools.is_some(), "tools capability");

        // The five tools, each with object input and output schemas.
        let tools = client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort();
        assert_eq!(names, TOOLS);
        for t in &tools {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            assert!(t.output_schema.is_some(), "{}: outputSchema", t.name);
            let read_only = t.annotations.as_ref().and_then(|a| a.read_only_hint);
            assert_eq!(read_only, Some(t.name != "aap_lead_submit"), "{}", t.name);
        }

        // Every read tool.
        let (err, sc) = call(
            &client,
            "aap_dealer_information",
            json!({"type": "dealer.information.request"}),
        )
        .await;
        assert!(!err, "{sc}");
        assert_eq!(sc["type"], "dealer.information.response");
        assert!(!sc["data"]["rooftops"].as_array().unwrap().is_empty());

        let (err, sc) = call(
            &client,
            "aap_inventory_facets",
            json!({"type": "inventory.facets.request"}),
        )
        .await;
        assert!(!err, "{sc}");
        assert_eq!(sc["type"], "inventory.facets.response");
        let makes = sc["data"]["makes"].as_array().expect("makes facet");
        assert!(!makes.is_empty());
        let make = makes[0]["value"].as_str().unwrap().to_owned();

        // Search for a make the facets reported; every hit has that make.
        let (err, sc) = call(
            &client,
            "aap_inventory_search",
            json!({"type": "inventory.search.request", "filters": {"make": [make]},
                   "sort": {"field": "price", "order": "asc"}, "pagination": {"limit": 5}}),
        )
        .await;
        assert!(!err, "{sc}");
        assert_eq!(sc["type"], "inventory.search.response");
        let hits = sc["data"]["vehicles"].as_array().expect("vehicles");
        assert!(!hits.is_empty() && hits.len() <= 5, "{sc}");
        assert!(hits.iter().all(|v| v["make"] == json!(make)));
        let prices: Vec<i64> = hits.iter().filter_map(|v| v["price"].as_i64()).collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "sorted by price");

        // Vehicle detail of the first hit, by its stock number.
        let hit = &hits[0];
        let (err, sc) = call(
            &client,
            "aap_inventory_vehicle",
            json!({"type": "inventory.vehicle.request", "stock": hit["stock"]}),
        )
        .await;
        assert!(!err, "{sc}");
        assert_eq!(sc["type"], "inventory.vehicle.response");
        assert_eq!(sc["data"]["stock"], hit["stock"]);
        assert_eq!(sc["data"]["vin"], hit["vin"]);

        // A consented lead, sent twice with one idempotency key: one lead.
        let key = uuid::Uuid::new_v4().to_string();
        let (err, first) = call(&client, "aap_lead_submit", lead(&key)).await;
        assert!(!err, "{first}");
        assert_eq!(first["type"], "lead.submit.response");
        let lead_id = first["data"]["lead_id"]
            .as_str()
            .expect("lead_id")
            .to_owned();
        let (err, again) = call(&client, "aap_lead_submit", lead(&key)).await;
        assert!(!err, "{again}");
        assert_eq!(
            again["data"]["lead_id"],
            json!(lead_id),
            "same key → same lead"
        );
        assert_eq!(leads_in(&gw.state), 1, "exactly one lead stored");

        // A bad call: a typed aap.error in a completed result, not a
        // protocol error.
        let (err, sc) = call(
            &client,
            "aap_inventory_search",
            json!({"type": "inventory.search.request", "pagination": {"limit": "ten"}}),
        )
        .await;
        assert!(err, "{sc}");
        assert_eq!(sc["type"], "aap.error");
        assert_eq!(sc["code"], "SCHEMA_VALIDATION_FAILED");
        assert_eq!(sc["retryable"], false);
        let errors = sc["details"]["errors"].as_array().expect("field errors");
        assert!(
            errors.iter().any(|e| e["path"] == "/pagination/limit"),
            "{sc}"
        );

        client.cancel().await.expect("close the client");
    });

    // rmcp sent the mirror headers itself on every request it made.
    let logs = gw.logs();
    let mut requests = 0;
    for line in logs.lines().filter(|l| l.contains("\"target\":\"access\"")) {
        let rec: Value = serde_json::from_str(line).expect("access log line is JSON");
        let fields = rec.get("fields").unwrap_or(&rec);
        if fields["rpc_method"] == "-" {
            continue;
        }
        requests += 1;
        assert_eq!(fields["mcp_revision"], "2026-07-28", "{line}");
        assert_eq!(
            fields["filled"], "[]",
            "rmcp omitted a mirror header: {line}"
        );
    }
    assert!(
        requests >= 9,
        "saw {requests} MCP requests in the access log"
    );
}
