//! AAP payloads as they travel from a backend to the client.
//!
//! Most backends build a payload as a `serde_json::Value`. A strict MCP
//! upstream already sends it as JSON text (`structuredContent`), and turning
//! that text into a `Value` only to validate it and write it out again was the
//! largest single cost of a proxied search (a 6 KB answer is ~200 nodes: an
//! `IndexMap` per object, a `String` per key and value). So the upstream's
//! text is kept as [`Payload::Text`] and validated through [`Doc`], a borrowed
//! document that allocates one `Vec` per container and copies no string that
//! has no escapes; the client then receives the upstream's own bytes.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::fmt;

/// A tool result payload: a typed AAP response or an `aap.error`.
#[derive(Debug, Clone)]
pub enum Payload {
    /// Built in memory (embedded dealer, A2A, gateway errors, replays).
    Tree(Value),
    /// JSON text of an object, as a strict MCP upstream sent it.
    Text(Box<RawValue>),
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
    /// The payload as a `Value` (parsed on demand for [`Payload::Text`]:
    /// error paths, idempotency records and tests, never the hot path).
    pub fn to_value(&self) -> Cow<'_, Value> {
        match self {
            Payload::Tree(v) => Cow::Borrowed(v),
            // The text was parsed (as a `Doc`) before it became a payload, so
            // this cannot fail; `Null` keeps it total anyway.
            Payload::Text(raw) => {
                Cow::Owned(serde_json::from_str(raw.get()).unwrap_or(Value::Null))
            }
        }
    }

    pub fn into_value(self) -> Value {
        match self {
            Payload::Tree(v) => v,
            text => text.to_value().into_owned(),
        }
    }
}

/// A JSON document borrowing its strings from the text it was parsed from.
///
/// Parsing is serde_json's (the same grammar, UTF-8, escape and depth checks
/// as everywhere else); an object with a repeated member name is refused,
/// because the client would receive the text and its parser might pick the
/// other member than the one validated.
///
/// ```
/// use aap_gateway::aap::payload::Doc;
/// let text = r#"{"type":"x","n":[1,2.5,"\u00e9"]}"#;
/// let doc = Doc::parse(text).unwrap();
/// assert_eq!(doc.to_value(), serde_json::from_str::<serde_json::Value>(text).unwrap());
/// assert!(Doc::parse(r#"{"a":1,"a":2}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Doc<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Doc<'a>>),
    Object(Vec<(Cow<'a, str>, Doc<'a>)>),
}

impl<'a> Doc<'a> {
    /// Parse one JSON value (trailing whitespace allowed, nothing else).
    pub fn parse(text: &'a str) -> Result<Doc<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The top-level `type` member of an object, if it is a string.
    pub fn type_name(&self) -> Option<&str> {
        match self.member("type")? {
            Doc::String(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    /// A string member of an object member (`error.code` of an `aap.error`).
    pub fn pointer_str(&self, outer: &str, inner: &str) -> Option<&str> {
        match self.member(outer)?.member(inner)? {
            Doc::String(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    /// The first member named `key` of an object.
    pub fn member(&self, key: &str) -> Option<&Doc<'a>> {
        match self {
            Doc::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Whether a number is written with a fraction or exponent but is a
    /// whole number within ±2^53 (`18999.0`): the gateway sends those as
    /// integers (see `upstream::normalize_numbers`), so the text would change.
    pub fn has_integral_float(&self) -> bool {
        match self {
            Doc::Number(n) if !n.is_i64() && !n.is_u64() => n
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0),
            Doc::Array(items) => items.iter().any(Doc::has_integral_float),
            Doc::Object(members) => members.iter().any(|(_, v)| v.has_integral_float()),
            _ => false,
        }
    }

    /// An owned `serde_json::Value` of the same document.
    pub fn to_value(&self) -> Value {
        match self {
            Doc::Null => Value::Null,
            Doc::Bool(b) => Value::Bool(*b),
            Doc::Number(n) => Value::Number(n.clone()),
            Doc::String(s) => Value::String(s.to_string()),
            Doc::Array(items) => Value::Array(items.iter().map(Doc::to_value).collect()),
            Doc::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

/// A string that borrows from the input when it holds no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Doc<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Doc<'de>, E> {
        Ok(Doc::Bool(b))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(n.into()))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(n.into()))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Doc<'de>, E> {
        Number::from_f64(n)
            .map(Doc::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Borrowed(s)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Doc<'de>, E> {
        Ok(Doc::String(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element::<Doc<'de>>()? {
            items.push(item);
        }
        Ok(Doc::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<'de>, A::Error> {
        let mut members: Vec<(Cow<'de, str>, Doc<'de>)> = Vec::with_capacity(8);
        while let Some(Str(key)) = map.next_key::<Str<'de>>()? {
            // Objects here are small (tens of members); a linear scan over
            // the names so far is cheaper than hashing them.
            if members.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom("an object repeats a member name"));
            }
            let value = map.next_value::<Doc<'de>>()?;
            members.push((key, value));
        }
        Ok(Doc::Object(members))
    }
}

/// [`Doc`] as an instance representation for `jsonschema`
/// (`jsonschema::options_for::<DocJson>()`).
pub struct DocJson;

impl jsonschema::json::Json for DocJson {
    type Node<'a> = &'a Doc<'a>;
    type PreparedKey = String;
    type StringBuffer = Option<Doc<'static>>;
    const ACYCLIC: bool = true;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>(
        buffer: &mut Option<Doc<'static>>,
        string: &str,
        f: impl FnOnce(Self::Node<'_>) -> T,
    ) -> T {
        let node = buffer.insert(Doc::String(Cow::Owned(string.to_owned())));
        f(node)
    }
}

impl<'a> jsonschema::json::Node<'a, DocJson> for &'a Doc<'a> {
    type Object = &'a [(Cow<'a, str>, Doc<'a>)];
    type Array = &'a [Doc<'a>];
    type Number = &'a Number;

    fn as_object(&self) -> Option<Self::Object> {
        match self {
            Doc::Object(m) => Some(m.as_slice()),
            _ => None,
        }
    }
    fn as_array(&self) -> Option<Self::Array> {
        match self {
            Doc::Array(items) => Some(items.as_slice()),
            _ => None,
        }
    }
    fn as_string(&self) -> Option<Cow<'a, str>> {
        match self {
            Doc::String(Cow::Borrowed(s)) => Some(Cow::Borrowed(s)),
            Doc::String(Cow::Owned(s)) => Some(Cow::Borrowed(s.as_str())),
            _ => None,
        }
    }
    fn as_number(&self) -> Option<&'a Number> {
        match self {
            Doc::Number(n) => Some(n),
            _ => None,
        }
    }
    fn as_boolean(&self) -> Option<bool> {
        match self {
            Doc::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }
    fn json_type(&self) -> jsonschema::JsonType {
        use jsonschema::JsonType;
        match self {
            Doc::Null => JsonType::Null,
            Doc::Bool(_) => JsonType::Boolean,
            Doc::Number(_) => JsonType::Number,
            Doc::String(_) => JsonType::String,
            Doc::Array(_) => JsonType::Array,
            Doc::Object(_) => JsonType::Object,
        }
    }
    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(Doc::to_value(self))
    }
    fn identity(&self) -> Option<jsonschema::json::NodeIdentity> {
        Some(jsonschema::json::NodeIdentity::new(
            std::ptr::from_ref::<Doc<'a>>(*self) as usize,
        ))
    }
}

impl<'a> jsonschema::json::Object<'a, DocJson> for &'a [(Cow<'a, str>, Doc<'a>)] {
    type Node = &'a Doc<'a>;
    type MemberName = &'a str;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }
    fn get(&self, key: &String) -> Option<&'a Doc<'a>> {
        self.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    fn members(&self) -> Members<'a> {
        Members(self.iter())
    }
}

/// The members of a [`Doc`] object in document order.
pub struct Members<'a>(std::slice::Iter<'a, (Cow<'a, str>, Doc<'a>)>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a Doc<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_ref(), v))
    }
}

impl<'a> jsonschema::json::Array<'a, DocJson> for &'a [Doc<'a>] {
    type Node = &'a Doc<'a>;
    type ElementsIter = std::slice::Iter<'a, Doc<'a>>;

    fn len(&self) -> usize {
        <[_]>::len(self)
    }
    fn elements(&self) -> Self::ElementsIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aap::schemas::SchemaSet;
    use crate::aap::skill::Skill;
    use serde_json::json;

    #[test]
    fn parses_like_serde_json_and_borrows_plain_strings() {
        let texts = [
            r#"{"type":"x","a":[1,-2,3.5,1e3,18446744073709551615,-9223372036854775808],"b":{"c":null,"d":true,"e":false}}"#,
            r#"{"q":"quote \" backslash \\ slash \/ newline \n tab \t \u00e9 \ud83d\ude97"}"#,
            "  {\n  \"pretty\" : [ ] ,\n \"o\" : { } }\n",
            r#"[]"#,
            r#""just a string""#,
        ];
        for t in texts {
            let doc = Doc::parse(t).unwrap();
            assert_eq!(
                doc.to_value(),
                serde_json::from_str::<Value>(t).unwrap(),
                "{t}"
            );
        }
        let doc = Doc::parse(r#"{"plain":"abc","esc":"a\nb"}"#).unwrap();
        assert!(matches!(
            doc.member("plain"),
            Some(Doc::String(Cow::Borrowed("abc")))
        ));
        assert!(matches!(doc.member("esc"), Some(Doc::String(Cow::Owned(s))) if s == "a\nb"));
    }

    #[test]
    fn refuses_what_serde_json_refuses_and_repeated_names() {
        for bad in [
            r#"{"a":1,"a":1}"#,
            r#"{"v":[{"x":1,"y":2,"x":3}]}"#,
            r#"{"a":1"#,
            r#"{"a":1} trailing"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":01}"#,
            r#"{"a":NaN}"#,
            r#"{"a":1e400}"#,
            "{\"a\":\"raw \u{1} control\"}",
            &format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        ] {
            assert!(Doc::parse(bad).is_err(), "{bad}");
        }
        // Same name in sibling objects is fine.
        assert!(Doc::parse(r#"{"a":{"x":1},"b":{"x":2}}"#).is_ok());
    }

    #[test]
    fn integral_floats_are_found_anywhere() {
        for (t, expect) in [
            (r#"{"p":18999}"#, false),
            (r#"{"p":18999.5}"#, false),
            (r#"{"p":18999.0}"#, true),
            (r#"{"v":[{"fees":[{"amount":8.5e1}]}]}"#, true),
            (r#"{"p":1e300}"#, false),
            (r#"{"p":-0.0}"#, true),
        ] {
            assert_eq!(Doc::parse(t).unwrap().has_integral_float(), expect, "{t}");
        }
    }

    #[test]
    fn payload_text_and_tree_compare_by_value() {
        let text = Payload::Text(RawValue::from_string(r#"{ "type" : "x" }"#.into()).unwrap());
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
