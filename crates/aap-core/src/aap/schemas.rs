//! The AAP 3.0 JSON Schemas: embedded at build time, optionally loaded from a
//! directory, compiled once into validators.

use super::error::{field_error, ERROR_TYPE};
use super::skill::Skill;
use crate::json::{Doc, DocJson};
use jsonschema::error::ValidationErrorKind;
use jsonschema::Validator;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub const SCHEMA_BASE_URL: &str = "https://autoagentprotocol.org/v3.0/schemas/";
pub const AAP_RELEASE: &str = "3.0.0";

macro_rules! embed {
    ($($stem:literal),* $(,)?) => {
        &[$(($stem, include_str!(concat!("../../../../schemas/", $stem, ".schema.json")))),*]
    };
}

/// Every schema the gateway ships, by file stem.
pub const EMBEDDED: &[(&str, &str)] = embed!(
    "dealer-information-request",
    "dealer-information-response",
    "inventory-facets-request",
    "inventory-facets-response",
    "inventory-search-request",
    "inventory-search-response",
    "inventory-vehicle-request",
    "inventory-vehicle-response",
    "lead-submit-request",
    "lead-submit-response",
    "error",
    "inventory-capabilities",
);

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("schema {stem}: {problem}")]
    Invalid { stem: String, problem: String },
    #[error("schema directory {dir}: {problem}")]
    Io { dir: String, problem: String },
}

/// Source documents plus their compiled validators.
pub struct SchemaSet {
    docs: BTreeMap<String, Value>,
    validators: BTreeMap<String, Validator>,
    /// The request and result schemas again, for instances held as a
    /// [`Doc`] (tool arguments, upstream answers that pass through as text):
    /// per skill in [`Skill::ALL`]'s order, its request and its response.
    doc_requests: Vec<Validator<DocJson>>,
    doc_responses: Vec<Validator<DocJson>>,
    doc_error: Validator<DocJson>,
}

impl std::fmt::Debug for SchemaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaSet")
            .field("stems", &self.docs.keys())
            .finish()
    }
}

/// Compile a self-contained 2020-12 schema; remote references are refused
/// because the crate is built without network resolvers.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// [`compile`] for [`Doc`] instances.
fn compile_for_docs(schema: &Value) -> Result<Validator<DocJson>, String> {
    jsonschema::options_for::<DocJson>()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| e.to_string())
}

impl SchemaSet {
    /// The schemas compiled into the binary.
    pub fn embedded() -> Result<SchemaSet, SchemaError> {
        let mut docs = BTreeMap::new();
        for (stem, text) in EMBEDDED {
            let doc: Value = serde_json::from_str(text).map_err(|e| SchemaError::Invalid {
                stem: stem.to_string(),
                problem: e.to_string(),
            })?;
            docs.insert(stem.to_string(), doc);
        }
        Self::from_docs(docs)
    }

    /// Load `<stem>.schema.json` for every required stem from `dir`.
    pub fn from_dir(dir: &Path) -> Result<SchemaSet, SchemaError> {
        let mut docs = BTreeMap::new();
        for (stem, _) in EMBEDDED {
            let path = dir.join(format!("{stem}.schema.json"));
            let text = std::fs::read_to_string(&path).map_err(|e| SchemaError::Io {
                dir: dir.display().to_string(),
                problem: format!("cannot read {}: {e}", path.display()),
            })?;
            let doc: Value = serde_json::from_str(&text).map_err(|e| SchemaError::Invalid {
                stem: stem.to_string(),
                problem: e.to_string(),
            })?;
            docs.insert(stem.to_string(), doc);
        }
        Self::from_docs(docs)
    }

    fn from_docs(docs: BTreeMap<String, Value>) -> Result<SchemaSet, SchemaError> {
        let mut validators = BTreeMap::new();
        for (stem, doc) in &docs {
            check_self_contained(stem, doc)?;
            let invalid = |problem| SchemaError::Invalid {
                stem: stem.clone(),
                problem,
            };
            validators.insert(stem.clone(), compile(doc).map_err(invalid)?);
        }
        // Requests and results are also validated as a `Doc`
        // (`request_holds`, `result_holds`); other stems only as a `Value`.
        let for_docs = |stem: &str| -> Result<Validator<DocJson>, SchemaError> {
            let invalid = |problem| SchemaError::Invalid {
                stem: stem.to_owned(),
                problem,
            };
            compile_for_docs(docs.get(stem).ok_or_else(|| invalid("missing".into()))?)
                .map_err(invalid)
        };
        let doc_requests = Skill::ALL
            .iter()
            .map(|&s| for_docs(&Self::request_stem(s)))
            .collect::<Result<_, _>>()?;
        let doc_responses = Skill::ALL
            .iter()
            .map(|&s| for_docs(&Self::response_stem(s)))
            .collect::<Result<_, _>>()?;
        let doc_error = for_docs("error")?;
        Ok(SchemaSet {
            docs,
            validators,
            doc_requests,
            doc_responses,
            doc_error,
        })
    }

    pub fn doc(&self, stem: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.docs.get(stem).unwrap_or(&NULL)
    }

    fn validator(&self, stem: &str) -> Option<&Validator> {
        self.validators.get(stem)
    }

    pub fn request_stem(skill: Skill) -> String {
        format!("{}-request", skill.schema_stem())
    }
    pub fn response_stem(skill: Skill) -> String {
        format!("{}-response", skill.schema_stem())
    }

    pub fn request_doc(&self, skill: Skill) -> &Value {
        self.doc(&Self::request_stem(skill))
    }
    pub fn response_doc(&self, skill: Skill) -> &Value {
        self.doc(&Self::response_stem(skill))
    }

    /// Validate a request; `Err` carries every violation as field errors.
    pub fn validate_request(&self, skill: Skill, instance: &Value) -> Result<(), Vec<Value>> {
        self.validate_stem(&Self::request_stem(skill), instance)
    }

    /// [`SchemaSet::validate_request`] for a borrowed document: only
    /// whether it holds (details come from the `Value` path).
    pub fn request_holds(&self, skill: Skill, instance: &Doc) -> bool {
        skill_index(skill)
            .and_then(|i| self.doc_requests.get(i))
            .is_some_and(|v| v.is_valid(instance.root()))
    }

    /// Validate a backend answer against the output union: the skill's
    /// response type, or `aap.error`.
    pub fn validate_result(&self, skill: Skill, instance: &Value) -> Result<(), Vec<Value>> {
        if instance.get("type").and_then(Value::as_str) == Some(ERROR_TYPE) {
            self.validate_stem("error", instance)
        } else {
            self.validate_stem(&Self::response_stem(skill), instance)
        }
    }

    /// [`SchemaSet::validate_result`] for a borrowed document: only whether
    /// it holds (the details of a failure come from the `Value` path, which
    /// is the cold one).
    pub fn result_holds(&self, skill: Skill, instance: &Doc) -> bool {
        let check = if instance.type_name() == Some(ERROR_TYPE) {
            Some(&self.doc_error)
        } else {
            skill_index(skill).and_then(|i| self.doc_responses.get(i))
        };
        check.is_some_and(|v| v.is_valid(instance.root()))
    }

    pub fn validate_stem(&self, stem: &str, instance: &Value) -> Result<(), Vec<Value>> {
        let Some(v) = self.validator(stem) else {
            return Err(vec![field_error("", "schema", "no schema loaded", stem)]);
        };
        if v.is_valid(instance) {
            return Ok(());
        }
        Err(v.iter_errors(instance).map(|e| describe(&e)).collect())
    }
}

fn skill_index(skill: Skill) -> Option<usize> {
    Skill::ALL.iter().position(|s| *s == skill)
}

/// Refuse schemas that would need a fetch: every `$ref` must be local.
fn check_self_contained(stem: &str, doc: &Value) -> Result<(), SchemaError> {
    fn walk(v: &Value, bad: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    if k == "$ref" || k == "$dynamicRef" {
                        if let Some(r) = child.as_str() {
                            if !r.starts_with('#') {
                                bad.push(r.to_owned());
                            }
                        }
                    }
                    walk(child, bad);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, bad)),
            _ => {}
        }
    }
    if doc.get("$schema").and_then(Value::as_str)
        != Some("https://json-schema.org/draft/2020-12/schema")
    {
        return Err(SchemaError::Invalid {
            stem: stem.into(),
            problem: "\"$schema\" must be https://json-schema.org/draft/2020-12/schema".into(),
        });
    }
    if doc.get("$id").and_then(Value::as_str).is_none() {
        return Err(SchemaError::Invalid {
            stem: stem.into(),
            problem: "missing \"$id\"".into(),
        });
    }
    let mut bad = Vec::new();
    walk(doc, &mut bad);
    if let Some(r) = bad.first() {
        return Err(SchemaError::Invalid {
            stem: stem.into(),
            problem: format!("non-local $ref {r:?}; schemas must be self-contained"),
        });
    }
    Ok(())
}

/// Turn one validation error into a field error that names the path, the
/// rule and a correction — never the offending value.
fn describe(e: &jsonschema::ValidationError<'_>) -> Value {
    let path = e.instance_path().to_string();
    let keyword = e.kind().keyword().to_string();
    let (error, correction): (String, String) = match e.kind() {
        ValidationErrorKind::Type { kind } => (
            format!("wrong type; expected {}", type_names(kind)),
            format!("send {} at {}", type_names(kind), display_path(&path)),
        ),
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or("?");
            (
                format!("missing required property \"{name}\""),
                format!("add \"{name}\" to {}", display_path(&path)),
            )
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let names: Vec<String> = unexpected.iter().map(|n| safe_key(n)).collect();
            (
                format!("properties not allowed here: {}", names.join(", ")),
                format!(
                    "remove {} from {}; only the properties in the tool's inputSchema are accepted",
                    names.join(", "),
                    display_path(&path)
                ),
            )
        }
        ValidationErrorKind::Enum { options } => (
            "value is not one of the allowed values".into(),
            format!("use one of {}", short_json(options)),
        ),
        ValidationErrorKind::Constant { expected_value } => (
            "value does not equal the required constant".into(),
            format!("use {}", short_json(expected_value)),
        ),
        ValidationErrorKind::MaxLength { limit } => (
            format!("string longer than {limit} characters"),
            format!("shorten it to at most {limit} characters"),
        ),
        ValidationErrorKind::MinLength { limit } => (
            format!("string shorter than {limit} characters"),
            format!("send at least {limit} characters"),
        ),
        ValidationErrorKind::Maximum { limit } => (
            format!("number above the maximum {limit}"),
            format!("use a value no greater than {limit}"),
        ),
        ValidationErrorKind::Minimum { limit } => (
            format!("number below the minimum {limit}"),
            format!("use a value no less than {limit}"),
        ),
        ValidationErrorKind::MaxItems { limit } => (
            format!("more than {limit} items"),
            format!("send at most {limit} items"),
        ),
        ValidationErrorKind::MinItems { limit } => (
            format!("fewer than {limit} items"),
            format!("send at least {limit} items"),
        ),
        ValidationErrorKind::UniqueItems => (
            "items are not unique".into(),
            "remove repeated items".into(),
        ),
        ValidationErrorKind::Pattern { pattern } => (
            "string does not match the required pattern".into(),
            format!("match the pattern {pattern}"),
        ),
        ValidationErrorKind::Format { format } => (
            format!("string is not a valid {format}"),
            format!("send a valid {format} value"),
        ),
        ValidationErrorKind::AnyOf { .. } => (
            "none of the allowed alternatives matched".into(),
            "supply one of the alternatives the schema lists (for example one identifier, or one contact channel)".into(),
        ),
        ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::OneOfMultipleValid { .. } => (
            "exactly one alternative must match".into(),
            "supply exactly one of the alternatives the schema lists".into(),
        ),
        ValidationErrorKind::Not { .. } => (
            "a forbidden combination of properties was sent".into(),
            "send only one of the mutually exclusive properties".into(),
        ),
        ValidationErrorKind::FalseSchema => (
            "no value is allowed here".into(),
            format!("remove {}", display_path(&path)),
        ),
        _ => (
            format!("violates the \"{keyword}\" rule"),
            "check the tool's inputSchema for this location".into(),
        ),
    };
    field_error(&path, &keyword, &error, &correction)
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "the arguments object".into()
    } else {
        path.to_string()
    }
}

/// A property name is structural, but it is client input: echo it only when
/// it looks like an identifier.
fn safe_key(name: &str) -> String {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@' | '$'));
    if ok {
        format!("\"{name}\"")
    } else {
        "(an unrecognised property)".into()
    }
}

fn short_json(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        format!("{}…", &s[..s.floor_char_boundary(300)])
    } else {
        s
    }
}

fn type_names(kind: &jsonschema::error::TypeKind) -> String {
    match kind {
        jsonschema::error::TypeKind::Single(t) => t.to_string(),
        jsonschema::error::TypeKind::Multiple(set) => {
            let names: Vec<String> = set.iter().map(|t| t.to_string()).collect();
            names.join(" or ")
        }
    }
}

/// Host compatibility: move root-level composition and conditional keywords
/// of an input schema under `dependentSchemas.type`. Because `type` is a
/// required property, the moved constraints still apply to every object
/// that can be valid. Refuses when `type` is not required.
pub fn host_compat_input(schema: &Value) -> Result<Value, String> {
    const MOVED: [&str; 7] = ["allOf", "anyOf", "oneOf", "not", "if", "then", "else"];
    let mut out = schema.clone();
    let Some(obj) = out.as_object_mut() else {
        return Err("input schema is not an object".into());
    };
    let requires_type = obj
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|v| v == "type"));
    if !requires_type {
        return Err("host-compat needs the request schema to require \"type\"".into());
    }
    let mut moved = serde_json::Map::new();
    for k in MOVED {
        if let Some(v) = obj.remove(k) {
            moved.insert(k.to_string(), v);
        }
    }
    if moved.is_empty() {
        return Ok(out);
    }
    let deps = obj.entry("dependentSchemas").or_insert_with(|| json!({}));
    let Some(deps) = deps.as_object_mut() else {
        return Err("dependentSchemas is not an object".into());
    };
    let slot = match deps.remove("type") {
        // Keep an existing dependent schema for `type` by conjoining it.
        Some(existing) => json!({ "allOf": [existing, Value::Object(moved)] }),
        None => Value::Object(moved),
    };
    deps.insert("type".into(), slot);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_schemas_compile() {
        let set = SchemaSet::embedded().expect("embedded schemas compile");
        for skill in Skill::ALL {
            assert!(set.request_doc(skill).is_object());
            assert!(set.response_doc(skill).is_object());
        }
    }

    #[test]
    fn host_compat_refuses_without_required_type() {
        let s = json!({"type":"object","anyOf":[{"required":["a"]}]});
        assert!(host_compat_input(&s).is_err());
        let s = json!({"type":"object","required":["type"],"anyOf":[{"required":["a"]}]});
        let t = host_compat_input(&s).unwrap();
        assert!(t.get("anyOf").is_none());
        assert!(t["dependentSchemas"]["type"]["anyOf"].is_array());
    }

    #[test]
    fn details_never_echo_values() {
        let set = SchemaSet::embedded().unwrap();
        let secret = "super-secret-value@example.com";
        let req = json!({"type":"inventory.search.request","filters":{"price_max": secret, "query": secret.repeat(20)}});
        let errs = set
            .validate_request(Skill::InventorySearch, &req)
            .unwrap_err();
        let text = serde_json::to_string(&errs).unwrap();
        assert!(!text.contains("super-secret"), "{text}");
        assert!(text.contains("/filters/price_max"));
    }
}
