//! Host compatibility profiles: how a tenant's tool input schemas are shown to clients that
//! bend JSON Schema or MCP, and how such a client's arguments are normalized before validation.
//!
//! A profile never changes what the server accepts: every call is still validated against the
//! canonical AAP request schema. `openai-strict` and `null-as-absent` only turn an explicit
//! `null` for an optional property that the canonical schema does not let be null into an
//! absent property first ([`drop_nulls`]); the catalog shown to the client is rewritten by
//! [`input_schema`]. Output schemas are never rewritten: the clients covered validate
//! `structuredContent` with a complete JSON Schema validator, or do not read it at all.

use super::schemas::host_compat_input;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The adaptations a tenant's `host_compat` names (all off: the canonical catalog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "Spec")]
pub struct HostCompat {
    /// `dependent-schemas` (what `host_compat = true` has always meant): root composition
    /// moved under `dependentSchemas.type`.
    pub dependent_schemas: bool,
    /// `openai-strict`: every input schema passes OpenAI's strict-mode rules.
    pub openai_strict: bool,
    /// `null-as-absent`: an explicit `null` for an optional non-nullable property is dropped.
    pub null_as_absent: bool,
    /// `no-type-arrays`: `type: [X, "null"]` written as `anyOf`.
    pub no_type_arrays: bool,
}

/// The profile names, as the config and the docs spell them.
pub const PROFILES: [&str; 4] = [
    "dependent-schemas",
    "openai-strict",
    "null-as-absent",
    "no-type-arrays",
];

/// What the config may say: a boolean (`true` = `["dependent-schemas"]`), one profile name or
/// a list of them.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Spec {
    Flag(bool),
    One(String),
    Many(Vec<String>),
}

impl TryFrom<Spec> for HostCompat {
    type Error = String;
    fn try_from(spec: Spec) -> Result<HostCompat, String> {
        let names = match spec {
            Spec::Flag(on) => {
                return Ok(HostCompat {
                    dependent_schemas: on,
                    ..HostCompat::default()
                })
            }
            Spec::One(name) => vec![name],
            Spec::Many(names) => names,
        };
        HostCompat::from_names(&names)
    }
}

impl HostCompat {
    /// The profiles named in `names`; an unknown name or a contradictory pair is an error.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<HostCompat, String> {
        let mut hc = HostCompat::default();
        for name in names {
            let slot = match name.as_ref() {
                "dependent-schemas" => &mut hc.dependent_schemas,
                "openai-strict" => &mut hc.openai_strict,
                "null-as-absent" => &mut hc.null_as_absent,
                "no-type-arrays" => &mut hc.no_type_arrays,
                other => {
                    let shown: String = other.chars().take(40).collect();
                    return Err(format!(
                        "unknown host_compat profile {shown:?}; use true, false or a list of {}",
                        PROFILES.map(|p| format!("\"{p}\"")).join(", ")
                    ));
                }
            };
            *slot = true;
        }
        if hc.openai_strict && hc.dependent_schemas {
            return Err("host_compat: \"openai-strict\" already removes root composition (strict mode refuses dependentSchemas too); name one of \"openai-strict\" and \"dependent-schemas\"".into());
        }
        Ok(hc)
    }

    /// True when no profile is on (the canonical catalog).
    pub fn is_canonical(&self) -> bool {
        *self == HostCompat::default()
    }

    /// True when a client's explicit nulls are mapped to absent before validation.
    pub fn drops_nulls(&self) -> bool {
        self.openai_strict || self.null_as_absent
    }

    /// The profile names that are on, in [`PROFILES`] order (for keys and messages).
    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.dependent_schemas,
            self.openai_strict,
            self.null_as_absent,
            self.no_type_arrays,
        ];
        PROFILES
            .iter()
            .zip(on)
            .filter_map(|(n, on)| on.then_some(*n))
            .collect()
    }
}

/// The input schema a client of `hc` is shown for the canonical request schema `canonical`.
pub fn input_schema(canonical: &Value, hc: &HostCompat) -> Result<Value, String> {
    let mut out = if hc.dependent_schemas {
        host_compat_input(canonical)?
    } else {
        canonical.clone()
    };
    if hc.openai_strict {
        // openai-agents refuses any bare `$ref` in strict conversion: inline the definitions
        // (they are not recursive), then apply the strict rules.
        if let Some(Value::Object(defs)) = out.as_object_mut().and_then(|o| o.remove("$defs")) {
            inline_refs(&mut out, &defs, 0)?;
        }
        strict_node(&mut out, true);
    }
    if hc.no_type_arrays {
        no_type_arrays(&mut out);
    }
    Ok(out)
}

/// Replace every `{"$ref": "#/$defs/X", …siblings}` with definition X, the siblings
/// (a description at the use site) taking precedence.
fn inline_refs(node: &mut Value, defs: &Map<String, Value>, depth: usize) -> Result<(), String> {
    if depth > 32 {
        return Err("input schema definitions nest too deep to inline".into());
    }
    match node {
        Value::Object(obj) => {
            if let Some(r) = obj.remove("$ref") {
                let name = r
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .ok_or_else(|| format!("cannot inline the reference {r}"))?;
                let mut def = defs
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("no definition {name:?} to inline"))?;
                inline_refs(&mut def, defs, depth + 1)?;
                if let Value::Object(d) = def {
                    for (k, v) in d {
                        obj.entry(k).or_insert(v);
                    }
                }
            }
            for (k, v) in obj.iter_mut() {
                if !DATA_KEYS.contains(&k.as_str()) {
                    inline_refs(v, defs, depth + 1)?;
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                inline_refs(v, defs, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Keywords that only constrain (they add no property or type): OpenAI's strict mode has no
/// place for them, and the server checks them on the canonical schema anyway.
const CONSTRAINT_ONLY: [&str; 8] = [
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependentRequired",
    "examples",
];

/// A union whose every branch names a type or a definition (kept in strict mode), as opposed
/// to a constraint such as `anyOf: [{"required": ["vin"]}, …]` (dropped).
fn is_type_union(branches: &Value) -> bool {
    branches.as_array().is_some_and(|b| {
        b.iter()
            .all(|s| s.get("type").is_some() || s.get("$ref").is_some())
    })
}

/// OpenAI strict mode, in place: every object closed and listing every property as required,
/// the originally optional ones nullable; constraint-only composition removed (at the root
/// every composition is removed).
fn strict_node(node: &mut Value, root: bool) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    for k in CONSTRAINT_ONLY {
        obj.remove(k);
    }
    for k in ["anyOf", "oneOf"] {
        if obj.get(k).is_some_and(|b| root || !is_type_union(b)) {
            obj.remove(k);
        }
    }
    if let Some(Value::Object(defs)) = obj.get_mut("$defs") {
        for d in defs.values_mut() {
            strict_node(d, false);
        }
    }
    for k in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get_mut(k) {
            for b in branches {
                strict_node(b, false);
            }
        }
    }
    if let Some(items) = obj.get_mut("items") {
        strict_node(items, false);
    }
    let is_object = obj.get("type").is_some_and(|t| {
        t == "object"
            || t.as_array()
                .is_some_and(|a| a.iter().any(|x| x == "object"))
    }) || obj.contains_key("properties");
    if obj.get("properties").is_some_and(Value::is_object) {
        let was_required: Vec<Value> = obj
            .get("required")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut all = Vec::new();
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            for (name, p) in props.iter_mut() {
                strict_node(p, false);
                if !was_required.iter().any(|r| r == name.as_str()) {
                    nullable(p);
                }
                all.push(Value::String(name.clone()));
            }
        }
        obj.insert("required".into(), Value::Array(all));
    }
    if is_object {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
}

/// Let `p` also accept `null` (it was an optional property).
fn nullable(p: &mut Value) {
    let Some(obj) = p.as_object_mut() else {
        return;
    };
    if let Some(r) = obj.remove("$ref") {
        obj.insert("anyOf".into(), json!([{ "$ref": r }, {"type": "null"}]));
        return;
    }
    match obj.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = std::mem::take(t);
            obj.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => {
            if !types.iter().any(|t| t == "null") {
                types.push(json!("null"));
            }
        }
        Some(_) => {}
        None => {
            if let Some(Value::Array(branches)) = obj.get_mut("anyOf") {
                if !branches
                    .iter()
                    .any(|b| b.get("type") == Some(&json!("null")))
                {
                    branches.push(json!({"type": "null"}));
                }
            }
            return;
        }
    }
    if let Some(c) = obj.remove("const") {
        obj.insert("enum".into(), json!([c]));
    }
    if let Some(Value::Array(values)) = obj.get_mut("enum") {
        if !values.iter().any(Value::is_null) {
            values.push(Value::Null);
        }
    }
}

/// Keywords that apply to one instance type only, moved into that type's branch when a type
/// list becomes an `anyOf`.
fn type_keywords(t: &str) -> &'static [&'static str] {
    match t {
        "string" => &["minLength", "maxLength", "pattern", "format"],
        "integer" | "number" => &[
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ],
        "array" => &[
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "contains",
        ],
        "object" => &[
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
        ],
        _ => &[],
    }
}

/// Keys whose values are data, not subschemas.
const DATA_KEYS: [&str; 4] = ["examples", "enum", "const", "default"];

/// `type: [A, B]` → `anyOf: [{type: A, …}, {type: B}]`, everywhere in the schema.
fn no_type_arrays(node: &mut Value) {
    match node {
        Value::Object(obj) => {
            for (k, v) in obj.iter_mut() {
                if !DATA_KEYS.contains(&k.as_str()) {
                    no_type_arrays(v);
                }
            }
            let Some(Value::Array(types)) = obj.get("type") else {
                return;
            };
            let types: Vec<String> = types
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            obj.remove("type");
            if types.len() == 1 {
                obj.insert("type".into(), json!(types[0]));
                return;
            }
            let branches: Vec<Value> = types
                .iter()
                .map(|t| {
                    let mut b = Map::new();
                    b.insert("type".into(), json!(t));
                    for k in type_keywords(t) {
                        if let Some(v) = obj.remove(*k) {
                            b.insert((*k).into(), v);
                        }
                    }
                    Value::Object(b)
                })
                .collect();
            match obj.remove("anyOf") {
                // Both must hold: keep the existing union beside the new one.
                Some(existing) => {
                    let all = obj.entry("allOf").or_insert_with(|| json!([]));
                    if let Some(a) = all.as_array_mut() {
                        a.push(json!({ "anyOf": existing }));
                        a.push(json!({ "anyOf": branches }));
                    }
                }
                None => {
                    obj.insert("anyOf".into(), Value::Array(branches));
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                no_type_arrays(v);
            }
        }
        _ => {}
    }
}

/// Drop every explicit `null` in `args` whose property the canonical `schema` declares as
/// optional and not nullable; returns the JSON Pointer of each dropped property (structure
/// only, never a value). Objects reached through `properties`, `$ref` (`#/$defs/…`) and
/// `items` are visited; a property the schema does not declare is left as sent.
pub fn drop_nulls(schema: &Value, args: &mut Value) -> Vec<String> {
    let mut dropped = Vec::new();
    visit(schema, schema, args, String::new(), &mut dropped, 0);
    dropped
}

fn resolve<'s>(root: &'s Value, mut s: &'s Value) -> &'s Value {
    for _ in 0..16 {
        let Some(r) = s.get("$ref").and_then(Value::as_str) else {
            return s;
        };
        let Some(name) = r.strip_prefix("#/$defs/") else {
            return s;
        };
        match root.get("$defs").and_then(|d| d.get(name)) {
            Some(t) => s = t,
            None => return s,
        }
    }
    s
}

/// True when the canonical schema `s` accepts `null` itself.
fn allows_null(root: &Value, s: &Value) -> bool {
    let s = resolve(root, s);
    match s.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
        _ => ["anyOf", "oneOf"].iter().any(|k| {
            s.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|b| b.iter().any(|x| allows_null(root, x)))
        }),
    }
}

fn visit(
    root: &Value,
    schema: &Value,
    value: &mut Value,
    path: String,
    dropped: &mut Vec<String>,
    depth: usize,
) {
    if depth > 32 {
        return;
    }
    let schema = resolve(root, schema);
    match value {
        Value::Object(obj) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required = schema.get("required").and_then(Value::as_array);
            let is_required = |k: &str| required.is_some_and(|r| r.iter().any(|x| x == k));
            let nulls: Vec<String> = obj
                .iter()
                .filter(|(k, v)| {
                    v.is_null()
                        && !is_required(k)
                        && props.get(*k).is_some_and(|p| !allows_null(root, p))
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in nulls {
                obj.shift_remove(&k);
                dropped.push(format!("{path}/{}", pointer_escape(&k)));
            }
            for (k, v) in obj.iter_mut() {
                if let Some(p) = props.get(k) {
                    let sub = format!("{path}/{}", pointer_escape(k));
                    visit(root, p, v, sub, dropped, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter_mut().enumerate() {
                    visit(
                        root,
                        item_schema,
                        v,
                        format!("{path}/{i}"),
                        dropped,
                        depth + 1,
                    );
                }
            }
        }
        _ => {}
    }
}

fn pointer_escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aap::schemas::{compile, SchemaSet};
    use crate::aap::skill::Skill;

    fn hc(names: &[&str]) -> HostCompat {
        HostCompat::from_names(names).unwrap()
    }

    #[test]
    fn config_forms() {
        let parse = |t: &str| -> Result<HostCompat, String> {
            #[derive(Deserialize)]
            struct T {
                host_compat: HostCompat,
            }
            toml::from_str::<T>(&format!("host_compat = {t}"))
                .map(|t| t.host_compat)
                .map_err(|e| e.to_string())
        };
        assert!(parse("false").unwrap().is_canonical());
        assert!(parse("true").unwrap().dependent_schemas);
        assert!(parse("\"openai-strict\"").unwrap().openai_strict);
        let both = parse("[\"null-as-absent\", \"no-type-arrays\"]").unwrap();
        assert!(both.null_as_absent && both.no_type_arrays && !both.openai_strict);
        assert!(parse("[\"strict\"]")
            .unwrap_err()
            .contains("unknown host_compat profile"));
        assert!(parse("[\"openai-strict\", \"dependent-schemas\"]").is_err());
        assert_eq!(both.names(), ["null-as-absent", "no-type-arrays"]);
    }

    /// Every strict schema: closed objects, all properties required, no root composition,
    /// and every example request the canonical schema accepts is accepted once its optional
    /// properties are sent as null and then dropped.
    #[test]
    fn strict_schemas_follow_the_rules() {
        let set = SchemaSet::embedded().unwrap();
        for skill in Skill::ALL {
            let canonical = set.request_doc(skill);
            let s = input_schema(canonical, &hc(&["openai-strict"])).unwrap();
            for k in ["anyOf", "allOf", "oneOf", "not", "if", "dependentSchemas"] {
                assert!(s.get(k).is_none(), "{skill:?} root {k}");
            }
            check_closed(&s);
            compile(&s).unwrap();
        }
    }

    fn check_closed(s: &Value) {
        match s {
            Value::Object(o) => {
                if let Some(Value::Object(props)) = o.get("properties") {
                    assert_eq!(o.get("additionalProperties"), Some(&json!(false)), "{s}");
                    let req = o["required"].as_array().unwrap();
                    assert_eq!(req.len(), props.len(), "{s}");
                }
                if o.get("type") == Some(&json!("object")) {
                    assert_eq!(o.get("additionalProperties"), Some(&json!(false)));
                }
                for (k, v) in o {
                    if !DATA_KEYS.contains(&k.as_str()) {
                        check_closed(v);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(check_closed),
            _ => {}
        }
    }

    #[test]
    fn nulls_for_optionals_are_dropped_by_path() {
        let set = SchemaSet::embedded().unwrap();
        let lead = set.request_doc(Skill::LeadSubmit);
        let mut args = json!({
            "type": "lead.submit.request",
            "customer": {"first_name": "A", "last_name": "B", "email": "a@example.com", "phone": null, "address": null},
            "consent": {"granted_at": "2026-01-01T00:00:00Z", "allowed_channels": ["email"], "consent_text": "ok", "scope": ["lead_submission"], "expires_at": null},
            "source_agent": {"name": "t", "url": null, "agent_card_url": null},
            "idempotency_key": "k",
            "vehicle_of_interest": {"vin": null, "make": "Honda", "rooftop": null},
            "trade_in": null,
            "message": null
        });
        let dropped = drop_nulls(lead, &mut args);
        assert_eq!(
            dropped,
            [
                "/trade_in",
                "/message",
                "/customer/phone",
                "/customer/address",
                "/consent/expires_at",
                "/source_agent/url",
                "/source_agent/agent_card_url",
                "/vehicle_of_interest/vin"
            ]
        );
        // rooftop allows null canonically: kept as sent.
        assert!(args["vehicle_of_interest"]["rooftop"].is_null());
        assert!(set.validate_request(Skill::LeadSubmit, &args).is_ok());
        // A required property sent as null is left for validation to refuse.
        let mut bad = json!({"type": "inventory.vehicle.request", "vin": null, "stock": "S1"});
        assert_eq!(
            drop_nulls(set.request_doc(Skill::InventoryVehicle), &mut bad),
            ["/vin"]
        );
        let mut t = json!({"type": null});
        assert!(drop_nulls(set.request_doc(Skill::InventoryVehicle), &mut t).is_empty());
    }

    #[test]
    fn type_arrays_become_any_of() {
        let set = SchemaSet::embedded().unwrap();
        let lead = set.request_doc(Skill::LeadSubmit);
        let s = input_schema(lead, &hc(&["no-type-arrays"])).unwrap();
        let text = s.to_string();
        assert!(!text.contains("[\"string\",\"null\"]"), "{text}");
        let rooftop = &s["$defs"]["Vehicle"]["properties"]["rooftop"];
        assert_eq!(
            rooftop["anyOf"],
            json!([{"type": "string", "maxLength": 200}, {"type": "null"}])
        );
        let v = compile(&s).unwrap();
        let c = compile(lead).unwrap();
        for case in [json!(null), json!("Main"), json!(7), json!("x".repeat(201))] {
            let mut req = lead["examples"][0].clone();
            req["vehicle_of_interest"]["rooftop"] = case;
            assert_eq!(v.is_valid(&req), c.is_valid(&req), "{req}");
        }
        // Without the profile the canonical schema is returned unchanged.
        assert_eq!(&input_schema(lead, &HostCompat::default()).unwrap(), lead);
    }
}
