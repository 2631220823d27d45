//! Argument validation of the five AAP tools against the compiled schemas
//! (plus the consent rules), on arbitrary JSON arguments.
//!
//! Byte 0 picks the tool (low bits) and whether the matching `"type"` is
//! forced into an object (bit 3), so the fuzzer reaches the schema checks
//! instead of stopping at a wrong `type`. The rest is the arguments' JSON,
//! parsed with the gateway's own strict parser. The gateway's own entry
//! (`check_tool_arguments`, on a document) must decide as the `Value` check.
#![no_main]

use aap_gateway::aap::arguments::Arguments;
use aap_gateway::aap::contract::{check_arguments, check_tool_arguments};
use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::aap::skill::Skill;
use aap_gateway::json::Doc;
use aap_gateway::mcp::jsonrpc::parse_json;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::LazyLock;

static SCHEMAS: LazyLock<SchemaSet> =
    LazyLock::new(|| SchemaSet::embedded().expect("embedded schemas compile"));
/// Every request schema's text: vocabulary a correction may legitimately name.
static SCHEMA_TEXT: LazyLock<String> = LazyLock::new(|| {
    Skill::ALL
        .iter()
        .map(|s| SCHEMAS.request_doc(*s).to_string())
        .collect()
});

/// Object keys and string values anywhere in `v`.
fn strings<'a>(v: &'a Value, keys: &mut Vec<&'a str>, values: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                keys.push(k);
                strings(c, keys, values);
            }
        }
        Value::Array(a) => a.iter().for_each(|c| strings(c, keys, values)),
        Value::String(s) => values.push(s),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, json)) = data.split_first() else {
        return;
    };
    let skill = Skill::ALL[usize::from(control & 7) % Skill::ALL.len()];
    let Ok(mut args) = parse_json(json, 32) else {
        return;
    };
    if control & 8 != 0 {
        if let Some(obj) = args.as_object_mut() {
            obj.insert("type".into(), Value::from(skill.request_type()));
        }
    }
    let schemas = &*SCHEMAS;
    let verdict = check_arguments(schemas, skill, &args);
    // The gateway's path (a document, a `Value` only when needed) decides
    // exactly as the `Value` path does.
    let doc = Doc::parse(&args.to_string()).expect("a Value's text reads back");
    let fast = check_tool_arguments(schemas, skill, &Arguments::new(&doc));
    assert_eq!(
        fast.as_ref().map(|r| r.outcome.as_str()),
        verdict.as_ref().map(|r| r.outcome.as_str()),
        "document and Value checks disagree"
    );
    match verdict {
        None => {
            // Accepted arguments are schema-valid and of the tool's type.
            assert!(
                schemas.validate_request(skill, &args).is_ok(),
                "accepted arguments fail the schema"
            );
            assert_eq!(args["type"], skill.request_type());
        }
        Some(rejection) => {
            // Every rejection is a well-formed, typed aap.error.
            assert!(rejection.is_error, "a rejection must be an error");
            let payload = rejection.payload.to_value();
            if let Err(errors) = schemas.validate_stem("error", &payload) {
                panic!("rejection is not a valid aap.error: {errors:?}");
            }
            assert_eq!(payload["code"].as_str(), Some(rejection.outcome.as_str()));
            for e in payload["details"]["errors"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let path = e["path"].as_str().expect("field errors name a path");
                assert!(path.is_empty() || path.starts_with('/'), "JSON Pointer");
            }
            // Details never echo a value the client sent. Checked for values
            // with a non-ASCII character the gateway's own texts never use,
            // so a value that merely repeats fixed wording is no false alarm;
            // property names may be named, and so may schema vocabulary.
            let details = serde_json::to_string(&payload["details"]).expect("payload serializes");
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            strings(&args, &mut keys, &mut values);
            for v in values {
                let marked = v.chars().any(|c| !c.is_ascii() && !"§—…→".contains(c));
                if !marked
                    || v.chars().count() < 4
                    || keys.iter().any(|k| k.contains(v))
                    || SCHEMA_TEXT.contains(v)
                {
                    continue;
                }
                let escaped = Value::from(v).to_string();
                let escaped = &escaped[1..escaped.len() - 1];
                assert!(
                    !details.contains(escaped),
                    "details echo a client value: {details}"
                );
            }
        }
    }
});
