//! AAP payloads as they travel from a backend to the client.
//!
//! Most backends build a payload as a `serde_json::Value`. A strict MCP
//! upstream already sends it as JSON text (`structuredContent`), and turning
//! that text into a `Value` only to validate it and write it out again was the
//! largest single cost of a proxied search (a 6 KB answer is ~200 nodes: an
//! `IndexMap` per object, a `String` per key and value). So the upstream's
//! text is read once into a [`Doc`] (flat nodes over the text), validated as
//! that, and the client receives the upstream's own bytes.

use crate::json::Doc;
use serde_json::Value;
use std::borrow::Cow;

/// A tool result payload: a typed AAP response or an `aap.error`.
#[derive(Debug, Clone)]
pub enum Payload {
    /// Built in memory (embedded dealer, A2A, gateway errors, replays).
    Tree(Value),
    /// Read from a strict MCP upstream's `structuredContent`: parsed, and
    /// written on as the upstream's own text.
    Doc(Doc),
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Payload::Tree(v)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.to_value() == other.to_value()
    }
}

impl Payload {
    /// The payload as a `Value` (built on demand for [`Payload::Doc`]:
    /// error paths, idempotency records and tests, never the hot path).
    pub fn to_value(&self) -> Cow<'_, Value> {
        match self {
            Payload::Tree(v) => Cow::Borrowed(v),
            Payload::Doc(doc) => Cow::Owned(doc.to_value()),
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Payload::Tree(v) => v,
            doc => doc.to_value().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aap::schemas::SchemaSet;
    use crate::aap::skill::Skill;
    use serde_json::json;

    #[test]
    fn payload_text_and_tree_compare_by_value() {
        let text = Payload::Doc(Doc::parse(r#"{ "type" : "x" }"#).unwrap());
        assert_eq!(text, Payload::Tree(json!({"type": "x"})));
        assert_eq!(text.into_value(), json!({"type": "x"}));
    }

    /// The `Doc` validators must agree with the `Value` validators on every
    /// instance: valid answers, each kind of violation, and `aap.error`.
    #[test]
    fn doc_validation_agrees_with_value_validation() {
        let schemas = SchemaSet::embedded().unwrap();
        let vehicle = json!({"vin":"JTDACAAU2H3400137","stock":"DT-1","year":2024,"make":"Toyota","model":"Camry","condition":"new","status":"available","price":31000,"fees":[{"name":"Documentation fee","amount":85}],"updated_at":"2026-11-20T17:00:00Z"});
        let search = json!({"type":"inventory.search.response","data":{"total":1,"vehicles":[vehicle],"limit":20}});
        assert!(schemas
            .validate_result(Skill::InventorySearch, &search)
            .is_ok());
        let mut cases = vec![search.clone()];
        let mut edit = |f: &dyn Fn(&mut Value)| {
            let mut v = search.clone();
            f(&mut v);
            cases.push(v);
        };
        edit(&|v| v["data"]["vehicles"][0]["year"] = json!("2024"));
        edit(&|v| v["data"]["vehicles"][0]["updated_at"] = json!("yesterday"));
        edit(&|v| v["data"]["vehicles"][0]["vin"] = json!("short"));
        edit(&|v| v["data"]["vehicles"][0]["price"] = json!(-5));
        edit(&|v| v["data"]["vehicles"][0]["status"] = json!("stolen"));
        edit(&|v| v["data"]["vehicles"][0]["unexpected"] = json!(1));
        edit(&|v| {
            v["data"].as_object_mut().unwrap().remove("vehicles");
        });
        edit(&|v| v["data"]["vehicles"] = json!({}));
        edit(&|v| v["data"]["total"] = json!(1.5));
        edit(&|v| v["type"] = json!("inventory.vehicle.response"));
        cases.push(json!({}));
        cases.push(json!({"type":"aap.error","code":"NOT_FOUND","message":"m"}));
        cases.push(crate::aap::error::aap_error(
            crate::aap::error::ErrorCode::VehicleNotFound,
            "no such vehicle",
            None,
        ));
        let mut held = 0;
        for case in &cases {
            let text = case.to_string();
            let doc = Doc::parse(&text).unwrap();
            let by_value = schemas
                .validate_result(Skill::InventorySearch, case)
                .is_ok();
            assert_eq!(
                schemas.result_holds(Skill::InventorySearch, &doc),
                by_value,
                "{case}"
            );
            held += usize::from(by_value);
        }
        // Both outcomes occur, so the agreement is not vacuous.
        assert!(held >= 2 && held < cases.len(), "{held} of {}", cases.len());
    }
}
