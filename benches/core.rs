//! Per-operation cost of the protocol core (criterion):
//! envelope parse, header normalization, argument validation, result shaping,
//! the access log line.
//! Run: `cargo bench --bench core`.

use aap_gateway::aap::arguments::Arguments;
use aap_gateway::aap::contract::check_tool_arguments;
use aap_gateway::aap::payload::Payload;
use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::aap::skill::Skill;
use aap_gateway::access::{line, AccessRecord};
use aap_gateway::json::Doc;
use aap_gateway::mcp::headers::read_mirror_headers;
use aap_gateway::mcp::jsonrpc::result_body;
use aap_gateway::mcp::jsonrpc::{message_from_value, parse_json, parse_message, Message};
use aap_gateway::mcp::result::{tool_message, ToolResult};
use aap_gateway::mcp::revision::{resolve, Revision, VersionContext};
use aap_gateway::mcp::server::{tool_result_value, with_revision_fields, SERVER_VERSION};
use aap_gateway::upstream::mcp::read_json_answer;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use std::hint::black_box;

// The allocator the gateway binary runs with (`src/main.rs`), so buffers the
// size of an answer cost here what they cost there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEARCH: &str = r#"{"jsonrpc":"2.0","id":"search-1","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1.0.0"},"io.modelcontextprotocol/clientCapabilities":{}},"name":"aap_inventory_search","arguments":{"type":"inventory.search.request","filters":{"price_max":35000,"status":["available"]},"pagination":{"limit":20},"sort":{"field":"price","order":"asc"},"privacy":{"anonymous":true}}}}"#;

fn benches(c: &mut Criterion) {
    c.bench_function("envelope parse (search tools/call)", |b| {
        b.iter(|| parse_message(black_box(SEARCH.as_bytes()), 32))
    });
    // Before arguments were read apart: the whole body as one `Value`.
    c.bench_function(
        "envelope parse into one Value, arguments included (baseline)",
        |b| {
            b.iter(|| {
                message_from_value(parse_json(black_box(SEARCH.as_bytes()), 32).expect("valid"))
            })
        },
    );
    let message = parse_message(SEARCH.as_bytes(), 32).expect("valid");
    let headers: Vec<(String, Vec<u8>)> = vec![
        ("content-type".into(), b"application/json".to_vec()),
        (
            "accept".into(),
            b"application/json, text/event-stream".to_vec(),
        ),
        (
            "mcp-name".into(),
            b"=?base64?YWFwX2ludmVudG9yeV9zZWFyY2g=?=".to_vec(),
        ),
    ];
    c.bench_function(
        "header normalization (omitted version+method, sentinel name)",
        |b| {
            b.iter(|| {
                let mirror =
                    read_mirror_headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
                        .expect("ok");
                let ctx = VersionContext {
                    headers: &mirror,
                    session_version: None,
                };
                black_box(resolve(black_box(&message), &ctx).expect("resolves"))
            })
        },
    );
    let schemas = SchemaSet::embedded().expect("schemas");
    let args = json!({"type":"inventory.search.request","filters":{"price_max":35000,"status":["available"]},"pagination":{"limit":20},"sort":{"field":"price","order":"asc"}});
    c.bench_function("argument validation (search)", |b| {
        b.iter(|| schemas.validate_request(Skill::InventorySearch, black_box(&args)))
    });
    let Message::Request {
        arguments: Some(args_doc),
        ..
    } = &message
    else {
        panic!("the search envelope has arguments");
    };
    c.bench_function(
        "argument check as the gateway runs it (the Doc read from the envelope)",
        |b| {
            b.iter(|| {
                let args = Arguments::new(black_box(args_doc));
                assert!(check_tool_arguments(&schemas, Skill::InventorySearch, &args).is_none());
            })
        },
    );
    let vehicles: Vec<serde_json::Value> = (0..20)
        .map(|i| json!({"vin":"JTDACAAU2H3400137","stock":format!("DT-{i}"),"year":2024,"make":"Toyota","model":"Camry","condition":"new","status":"available","price":31000,"fees":[{"name":"Documentation fee","amount":85}],"updated_at":"2026-11-20T17:00:00Z"}))
        .collect();
    let payload = json!({"type":"inventory.search.response","data":{"total":20,"vehicles":vehicles,"limit":20}});
    c.bench_function("result validation (search, 20 vehicles)", |b| {
        b.iter(|| schemas.validate_result(Skill::InventorySearch, black_box(&payload)))
    });
    // Baseline: the tools/call response built as a `Value` and serialized
    // (the payload is written three times); the gateway writes it with
    // `tool_message` (once, plus one escaped copy for the text block).
    let id = json!("search-1");
    c.bench_function(
        "result shaping + serialization via Value (baseline, search, 20 vehicles)",
        |b| {
            b.iter(|| {
                let r = result_body(
                    &id,
                    with_revision_fields(
                        Revision::Modern,
                        tool_result_value(black_box(payload.clone()), false),
                        "aap-gateway",
                    ),
                );
                serde_json::to_vec(&r).expect("serializes")
            })
        },
    );
    c.bench_function(
        "result shaping + serialization, tool_message (search, 20 vehicles)",
        |b| {
            b.iter(|| {
                let r = ToolResult {
                    payload: black_box(payload.clone()).into(),
                    is_error: false,
                };
                tool_message(&id, Revision::Modern, "aap-gateway", SERVER_VERSION, &r)
            })
        },
    );
    // A strict MCP upstream's answer arrives as a JSON-RPC frame carrying
    // the payload twice (structured and as the text block). From those
    // bytes to the client's: what a `serde_json` reading costs (baseline:
    // the frame into a `Value`, the payload validated and written), against
    // what the gateway does (`json::Reader`: the text block skipped, the
    // payload read once into a `Doc`, validated as that, its text written).
    let text = serde_json::to_string(&payload).expect("serializes");
    let frame = format!(
        r#"{{"jsonrpc":"2.0","id":"aapgw-1","result":{{"content":[{{"type":"text","text":{}}}],"structuredContent":{text},"isError":false,"resultType":"complete"}}}}"#,
        serde_json::to_string(&text).expect("serializes")
    );
    c.bench_function(
        "upstream answer to client bytes via serde_json Value (baseline, 20 vehicles)",
        |b| b.iter(|| answer_via_value(&schemas, &id, black_box(&frame))),
    );
    c.bench_function(
        "upstream answer to client bytes via json::Reader and Doc (20 vehicles)",
        |b| {
            let frame = bytes::Bytes::from(frame.clone());
            b.iter(|| answer_as_the_gateway_does(&schemas, &id, black_box(&frame)))
        },
    );
    c.bench_function(
        "upstream answer frame read by serde_json into a Value (20 vehicles)",
        |b| {
            b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&frame)).expect("parses"))
        },
    );
    c.bench_function(
        "upstream answer frame read by json::Reader (20 vehicles)",
        |b| {
            let frame = bytes::Bytes::from(frame.clone());
            b.iter(|| read_json_answer(black_box(&frame), 200).expect("reads"))
        },
    );
    c.bench_function("parse upstream payload into a Value (20 vehicles)", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&text)).expect("parses"))
    });
    c.bench_function("parse upstream payload into a Doc (20 vehicles)", |b| {
        b.iter(|| Doc::parse(black_box(&text)).map(|d| d.has_integral_float()))
    });
    let doc = Doc::parse(&text).expect("parses");
    c.bench_function("result validation of a Doc (search, 20 vehicles)", |b| {
        b.iter(|| schemas.result_holds(Skill::InventorySearch, black_box(&doc)))
    });
    demo_answer(c, &schemas, &id);
    let record = AccessRecord {
        correlation_id: "4bf92f3577b34da6a3ce929d0e0e4736",
        tenant: "demo-toyota",
        binding: "mcp",
        mcp_revision: "2026-07-28",
        aap_version: "3.0.0",
        http_method: "POST",
        rpc_method: "tools/call",
        skill: "inventory.search",
        outcome: "ok",
        status: 200,
        filled: &["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"],
        nulls_dropped: &[],
        latency_us: 412,
        protocol: "HTTP/1.1",
        client_address: Some(std::net::IpAddr::from([192, 0, 2, 7])),
        user_agent: "agent/1.0",
        bytes_in: 180,
        bytes_out: 2048,
    };
    c.bench_function("access log line", |b| {
        b.iter(|| line(black_box(&record), time::OffsetDateTime::now_utc()))
    });
}

/// The answer `benches/load.sh` measures: the embedded demo dealer's five
/// cheapest available Toyotas (31 members each, photo and page URLs,
/// prose), where the vehicles above are narrow synthetic ones. Read, validate
/// and write it the way the gateway does, each step on its own and then as
/// one, against the same steps through `serde_json::Value`.
fn demo_answer(c: &mut Criterion, schemas: &SchemaSet, id: &serde_json::Value) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/demo-inventory.json");
    let inventory: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(path).expect("demo inventory")).expect("parses");
    let mut matching: Vec<&serde_json::Value> = inventory
        .iter()
        .filter(|v| v["make"] == "Toyota" && v["status"] == "available")
        .collect();
    matching.sort_by_key(|v| v["price"].as_i64());
    let five: Vec<&serde_json::Value> = matching.iter().take(5).copied().collect();
    let payload = json!({"type": "inventory.search.response", "data": {
        "total": matching.len(), "vehicles": five, "skip": 0, "limit": 5,
        "next_cursor": "eyJvIjo1LCJsIjo1fQ.L02yRDwca0BoVbKNxNBmuA"}});
    let text = serde_json::to_string(&payload).expect("serializes");
    let frame = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":{}}}],"structuredContent":{text}}}}}"#,
        serde_json::to_string(&text).expect("serializes")
    );
    let mut group = c.benchmark_group("demo search answer (5 vehicles, 12.8 KB frame)");
    group.bench_function("frame read by serde_json into a Value (baseline)", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&frame)).expect("parses"))
    });
    group.bench_function("frame read by json::Reader", |b| {
        let frame = bytes::Bytes::from(frame.clone());
        b.iter(|| read_json_answer(black_box(&frame), 200).expect("reads"))
    });
    let doc = Doc::parse(&text).expect("parses");
    group.bench_function("result validation of a Value (baseline)", |b| {
        b.iter(|| schemas.validate_result(Skill::InventorySearch, black_box(&payload)))
    });
    group.bench_function("result validation of a Doc", |b| {
        b.iter(|| schemas.result_holds(Skill::InventorySearch, black_box(&doc)))
    });
    group.bench_function("answer written by tool_message from the Doc", |b| {
        b.iter_batched(
            || ToolResult {
                payload: Payload::Doc(doc.clone()),
                is_error: false,
            },
            |r| tool_message(id, Revision::Modern, "aap-gateway", SERVER_VERSION, &r),
            criterion::BatchSize::SmallInput,
        )
    });
    group.bench_function(
        "frame to client bytes via serde_json Value (baseline)",
        |b| b.iter(|| answer_via_value(schemas, id, black_box(&frame))),
    );
    group.bench_function("frame to client bytes as the gateway does it", |b| {
        let frame = bytes::Bytes::from(frame.clone());
        b.iter(|| answer_as_the_gateway_does(schemas, id, black_box(&frame)))
    });
    group.finish();
}

/// An upstream search answer to the client's bytes through `serde_json`:
/// the frame into a `Value`, the payload validated, the answer written.
fn answer_via_value(schemas: &SchemaSet, id: &serde_json::Value, frame: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_str(frame).expect("parses");
    let payload = v["result"]["structuredContent"].take();
    assert!(schemas
        .validate_result(Skill::InventorySearch, &payload)
        .is_ok());
    let r = ToolResult {
        payload: payload.into(),
        is_error: false,
    };
    tool_message(id, Revision::Modern, "aap-gateway", SERVER_VERSION, &r)
}

/// The same, as the gateway does it: `json::Reader` reads the frame (the
/// payload into a `Doc`), the `Doc` is validated and its text written.
/// `frame` is the upstream client's answer buffer, which the document shares.
fn answer_as_the_gateway_does(
    schemas: &SchemaSet,
    id: &serde_json::Value,
    frame: &bytes::Bytes,
) -> Vec<u8> {
    let payload = read_json_answer(frame, 200).expect("reads");
    let Payload::Doc(doc) = &payload else {
        panic!("not read as a document")
    };
    assert!(!doc.has_integral_float());
    assert!(schemas.result_holds(Skill::InventorySearch, doc));
    let r = ToolResult {
        payload,
        is_error: false,
    };
    tool_message(id, Revision::Modern, "aap-gateway", SERVER_VERSION, &r)
}

criterion_group!(core, benches);
criterion_main!(core);
