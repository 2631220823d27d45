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
    /// When a result was last checked: after a quiet spell a call primes the check
    /// ([`SchemaSet::prime_result`]).
    primer: crate::aap::prime::Primer,
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
        .with_format("uri", uri_format()?)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// [`compile`] for [`Doc`] instances, of the schema with its object `allOf`s merged
/// ([`merge_object_all_of`]): the `Doc` path only answers whether a value holds, so it may take
/// an equivalent schema that is cheaper to decide.
fn compile_for_docs(schema: &Value) -> Result<Validator<DocJson>, String> {
    let mut merged = schema.clone();
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    merge_object_all_of(&mut merged, &defs);
    jsonschema::options_for::<DocJson>()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .with_format("uri", uri_format()?)
        .build(&merged)
        .map_err(|e| e.to_string())
}

/// Keywords [`merge_object_all_of`] may find beside the ones it merges: annotations.
const ANNOTATIONS: &[&str] = &[
    "$comment",
    "title",
    "description",
    "examples",
    "default",
    "deprecated",
];

/// Rewrite, everywhere in `schema`, an object schema of the form
/// `{"allOf": [{"$ref": "#/$defs/T"}], "type": "object", "properties": …, "required": …,
/// "dependentRequired": …}` whose `T` is itself only `type: object`, `properties`, `required`
/// and `additionalProperties: true` into one object schema: `T`'s properties and its own (a name
/// in both must hold for both: an `allOf` of the two, or one of them when they are equal), both
/// `required` lists, its `dependentRequired`. Neither side restricts other members, so a value
/// holds for the result exactly when it holds for the original. A subschema with an `$id` of its
/// own is left as it is (`#/$defs/T` would name something else inside it).
///
/// Why: the AAP `Listing` is such a schema (a `Vehicle` plus the listing's `condition`, `status`
/// and `updated_at`), and `jsonschema` walked each listing's ~31 members twice, once for each
/// side: the merge took a search answer's validation from 62,558 to 55,498 instructions
/// (callgrind). The `serde_json::Value` path, which reports details, keeps the schema as
/// written; the differential fuzz target `schema_doc` and the tests hold the two paths to the
/// same answers.
fn merge_object_all_of(schema: &mut Value, defs: &Value) {
    merge_within(schema, defs, true);
}

fn merge_within(schema: &mut Value, defs: &Value, root: bool) {
    match schema {
        Value::Object(map) => {
            if !root && map.contains_key("$id") {
                return;
            }
            if let Some(merged) = merged_listing(map, defs) {
                *map = merged;
            }
            for child in map.values_mut() {
                merge_within(child, defs, false);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| merge_within(c, defs, false)),
        _ => {}
    }
}

/// Whether two schemas are the same but for their top-level [`ANNOTATIONS`].
fn same_assertions(a: &Value, b: &Value) -> bool {
    fn asserted(m: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
        m.iter()
            .filter(|(k, _)| !ANNOTATIONS.contains(&k.as_str()))
            .collect()
    }
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => asserted(x) == asserted(y),
        _ => a == b,
    }
}

/// The merged form of `map` when [`merge_object_all_of`]'s conditions hold.
fn merged_listing(
    map: &serde_json::Map<String, Value>,
    defs: &Value,
) -> Option<serde_json::Map<String, Value>> {
    let only = |m: &serde_json::Map<String, Value>, allowed: &[&str]| {
        m.keys()
            .all(|k| allowed.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()))
    };
    let is_object_type =
        |m: &serde_json::Map<String, Value>| m.get("type").is_none_or(|t| t == "object");
    let [base] = map.get("allOf")?.as_array()?.as_slice() else {
        return None;
    };
    let base = base.as_object().filter(|b| b.len() == 1)?;
    let name = base.get("$ref")?.as_str()?.strip_prefix("#/$defs/")?;
    if name.contains(['/', '~', '%']) {
        return None;
    }
    let target = defs.get(name)?.as_object()?;
    let open = |m: &serde_json::Map<String, Value>| {
        m.get("additionalProperties")
            .is_none_or(|a| a == &Value::Bool(true))
    };
    if !only(
        map,
        &[
            "allOf",
            "type",
            "properties",
            "required",
            "dependentRequired",
        ],
    ) || !only(
        target,
        &["type", "properties", "required", "additionalProperties"],
    ) || !is_object_type(map)
        || !is_object_type(target)
        || !open(target)
    {
        return None;
    }
    let mut properties = target
        .get("properties")
        .map_or(Some(serde_json::Map::new()), |p| p.as_object().cloned())?;
    for (name, own) in map
        .get("properties")
        .map_or(Some(&serde_json::Map::new()), |p| p.as_object())?
        .clone()
    {
        let both = match properties.remove(&name) {
            // The same schema on both sides (the listing's `status` and `updated_at`, whose
            // descriptions differ) once.
            Some(theirs) if same_assertions(&theirs, &own) => own,
            Some(theirs) => json!({ "allOf": [theirs, own] }),
            None => own,
        };
        properties.insert(name, both);
    }
    let mut required: Vec<Value> = Vec::new();
    for list in [target.get("required"), map.get("required")]
        .into_iter()
        .flatten()
    {
        for name in list.as_array()? {
            if !required.contains(name) {
                required.push(name.clone());
            }
        }
    }
    let mut merged = serde_json::Map::new();
    // Without a `type` on either side a non-object holds for both; keep that.
    if map.contains_key("type") || target.contains_key("type") {
        merged.insert("type".into(), json!("object"));
    }
    merged.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        merged.insert("required".into(), Value::Array(required));
    }
    if let Some(d) = map.get("dependentRequired") {
        merged.insert("dependentRequired".into(), d.clone());
    }
    Some(merged)
}

/// The `format: "uri"` check: accepts and refuses exactly the strings
/// `jsonschema`'s own check does, and answers the common ones in one pass.
///
/// Why it exists: the crate's check (an RFC 3986 scanner that reads the
/// authority three times) was the largest single cost of validating a search
/// answer, 17,000 of 78,000 instructions for the 20 photo and page addresses
/// of five vehicles, and no option of the crate makes it cheaper. A plain web
/// address ([`plain_web_uri`]) is accepted here; RFC 3986 accepts every one
/// of those. Any other string (percent-encodings, fragments, userinfo, IP
/// literals, other schemes, non-ASCII, and every invalid one) is decided by
/// the crate's built-in check, through a validator of `{"format": "uri"}`.
fn uri_format() -> Result<impl Fn(&str) -> bool + Send + Sync + 'static, String> {
    let builtin = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&json!({ "format": "uri" }))
        .map_err(|e| e.to_string())?;
    Ok(move |text: &str| plain_web_uri(text) || builtin.is_valid(&Value::String(text.to_owned())))
}

/// `URI_BYTES` bits: a byte of a host name of letters, digits, dots and
/// hyphens.
const HOST: u8 = 1;
/// A byte a path or query holds as itself (no percent-encoding): RFC
/// 3986's unreserved and sub-delims characters, `:`, `@`, `/` and `?`.
const PATH_OR_QUERY: u8 = 2;

const URI_BYTES: [u8; 256] = {
    let mut classes = [0; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let host = b.is_ascii_alphanumeric() || b == b'.' || b == b'-';
        let plain = host
            || matches!(
                b,
                b'_' | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'@'
                    | b'/'
                    | b'?'
            );
        classes[i] = if host { HOST } else { 0 } | if plain { PATH_OR_QUERY } else { 0 };
        i += 1;
    }
    classes
};

/// Whether `text` is `http://` or `https://`, a host of letters, digits,
/// dots and hyphens, an optional `:` port of digits, then nothing or a path
/// and query that begin with `/` or `?` and hold only [`PATH_OR_QUERY`]
/// bytes. Such a string is an RFC 3986 URI: scheme, authority (a reg-name
/// host and a port), a path-abempty, and a query (which may hold `?`).
/// `false` only means "not of this form", not "invalid".
fn plain_web_uri(text: &str) -> bool {
    let bytes = text.as_bytes();
    let Some(rest) = bytes
        .strip_prefix(b"https://")
        .or_else(|| bytes.strip_prefix(b"http://"))
    else {
        return false;
    };
    let Some(mut rest) = rest.get(run(rest, HOST)..) else {
        return false;
    };
    if let [b':', port @ ..] = rest {
        let digits = port
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(port.len());
        let Some(after) = port.get(digits..) else {
            return false;
        };
        rest = after;
    }
    matches!(rest.first(), None | Some(b'/' | b'?')) && run(rest, PATH_OR_QUERY) == rest.len()
}

/// The length of the leading run of `bytes` whose [`URI_BYTES`] have the
/// bit `class`: sixteen bytes a step with SSSE3 (detected at run time,
/// cached by `std`), else eight a step with one branch; then one at a time.
/// (A byte a step took about 7 instructions a byte, eight a step about 4;
/// these addresses are ~50 bytes and a search answer holds ~20: the check of
/// one answer's addresses went from ~4,800 to ~3,100 instructions, callgrind.)
fn run(bytes: &[u8], class: u8) -> usize {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        let tables = if class == HOST {
            &HOST_NIBBLES
        } else {
            &PATH_OR_QUERY_NIBBLES
        };
        // SAFETY: SSSE3 was just detected on this CPU, all `run_ssse3` requires.
        return unsafe { run_ssse3(bytes, class, tables) };
    }
    run_from(bytes, 0, class)
}

/// [`run`] from `at` on, eight bytes a step then one at a time.
fn run_from(bytes: &[u8], mut at: usize, class: u8) -> usize {
    let rest = bytes.get(at..).unwrap_or_default();
    for chunk in rest.chunks_exact(8) {
        if chunk
            .iter()
            .fold(class, |all, &b| all & URI_BYTES[usize::from(b)])
            == 0
        {
            break;
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    at + tail
        .iter()
        .position(|&b| URI_BYTES[usize::from(b)] & class == 0)
        .unwrap_or(tail.len())
}

/// A byte class as two 16-entry tables, by low and by high nibble, such that
/// a byte `b` is in the class when `lo[b & 15] & hi[b >> 4] != 0` (the
/// shuffle lookup of `run_ssse3`). Each distinct row of the class (the low
/// nibbles present under one high nibble) gets a bit of its own; there must
/// be at most eight (checked when compiling).
const fn nibble_tables(class: u8) -> ([u8; 16], [u8; 16]) {
    let mut rows = [0u16; 8];
    let mut used = 0;
    let (mut lo, mut hi) = ([0u8; 16], [0u8; 16]);
    let mut h = 0;
    while h < 16 {
        let mut row = 0u16;
        let mut l = 0;
        while l < 16 {
            if URI_BYTES[h * 16 + l] & class != 0 {
                row |= 1 << l;
            }
            l += 1;
        }
        if row != 0 {
            let mut k = 0;
            while k < used && rows[k] != row {
                k += 1;
            }
            if k == used {
                assert!(used < 8, "a byte class with more than eight distinct rows");
                rows[used] = row;
                used += 1;
            }
            hi[h] = 1 << k;
            let mut l = 0;
            while l < 16 {
                if row & (1 << l) != 0 {
                    lo[l] |= 1 << k;
                }
                l += 1;
            }
        }
        h += 1;
    }
    (lo, hi)
}

const HOST_NIBBLES: ([u8; 16], [u8; 16]) = nibble_tables(HOST);
const PATH_OR_QUERY_NIBBLES: ([u8; 16], [u8; 16]) = nibble_tables(PATH_OR_QUERY);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn run_ssse3(bytes: &[u8], class: u8, tables: &([u8; 16], [u8; 16])) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        _mm_setzero_si128, _mm_shuffle_epi8, _mm_srli_epi16,
    };
    // SAFETY: each load reads 16 bytes from a 16-byte array.
    let (lo_table, hi_table) = unsafe {
        (
            _mm_loadu_si128(tables.0.as_ptr().cast::<__m128i>()),
            _mm_loadu_si128(tables.1.as_ptr().cast::<__m128i>()),
        )
    };
    let nibble = _mm_set1_epi8(0x0F);
    // Bit i set: byte i of the block is outside the class.
    let outside = |block: &[u8; 16]| {
        // SAFETY: `block` is 16 bytes.
        let v = unsafe { _mm_loadu_si128(block.as_ptr().cast::<__m128i>()) };
        let lo = _mm_and_si128(v, nibble);
        // (A byte's high nibble: shifting 16-bit lanes brings in the next
        // byte's low bits, which the mask clears.)
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), nibble);
        let hit = _mm_and_si128(
            _mm_shuffle_epi8(lo_table, lo),
            _mm_shuffle_epi8(hi_table, hi),
        );
        _mm_movemask_epi8(_mm_cmpeq_epi8(hit, _mm_setzero_si128())) as u32
    };
    let mut at = 0;
    while let Some(block) = bytes.get(at..).and_then(|r| r.first_chunk::<16>()) {
        let out = outside(block);
        if out != 0 {
            return at + out.trailing_zeros() as usize;
        }
        at += 16;
    }
    // The last bytes: the final 16, overlapping what was read (only the
    // bits past `at` count); a text under 16 bytes goes byte by byte.
    match bytes.last_chunk::<16>() {
        Some(last) if at < bytes.len() => {
            let fresh = bytes.len() - at;
            let out = outside(last) >> (16 - fresh);
            at + if out != 0 {
                out.trailing_zeros() as usize
            } else {
                fresh
            }
        }
        Some(_) => at,
        None => run_from(bytes, at, class),
    }
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
            primer: Default::default(),
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
        self.doc_requests
            .get(skill.index())
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
        self.primer.note();
        let check = if instance.type_name() == Some(ERROR_TYPE) {
            Some(&self.doc_error)
        } else {
            self.doc_responses.get(skill.index())
        };
        check.is_some_and(|v| v.is_valid(instance.root()))
    }

    /// After a quiet spell ([`crate::aap::prime::PRIME_AFTER`] without a result check), read
    /// `skill`'s sample answer and check it, so that the caches hold what the next answer's
    /// check needs; `true` when it did. Called while a backend works on a call.
    pub fn prime_result(&self, skill: Skill) -> bool {
        if !self.primer.quiet() {
            return false;
        }
        if let Some(doc) = crate::aap::prime::sample(skill.index()).and_then(|t| Doc::parse(t).ok())
        {
            std::hint::black_box(self.result_holds(skill, &doc));
        }
        true
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

    /// `jsonschema`'s own decision for `format: "uri"` (no custom check).
    fn builtin_uri() -> Validator {
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&json!({ "format": "uri" }))
            .unwrap()
    }

    /// Addresses of every shape the two paths of `uri_format` meet.
    const URIS: &[&str] = &[
        // Plain web addresses (the one-pass path).
        "https://cdn.demo-toyota.example/inventory/dt-1001/01.jpg",
        "https://www.demo-toyota.example/inventory/DT-1001",
        "http://example.com",
        "http://example.com/",
        "https://example.com?",
        "https://example.com?a=1&b=2?c",
        "https://example.com/a/b;p=1/c?q=(1)*2+3,4!$'~_:@/?",
        "http://a.b-c.d:8080/x",
        "http://host:/x",
        "http://:80/x",
        "http:///path",
        "https://",
        "http://-./",
        // Percent-encodings.
        "https://example.com/a%20b",
        "https://example.com/a%2Fb%2f",
        "https://example.com/%",
        "https://example.com/%4",
        "https://example.com/%zz",
        "https://example.com/%4g",
        "https://ex%41mple.com/",
        "https://ex%4mple.com/",
        "https://example.com?q=%E2%82%AC",
        "https://example.com?q=%",
        // IP literals.
        "http://127.0.0.1/",
        "http://127.0.0.1:8080/",
        "http://[::1]/",
        "http://[::1]:8080/x",
        "http://[2001:db8::7]/c=GB?objectClass?one",
        "http://[v1.fe]/",
        "http://[vz.fe]/",
        "http://[::1/",
        "http://::1]/",
        "http://[::1]x/",
        "http://[1.2.3.4]/",
        "http://[]/",
        "http://[::g]/",
        "http://user@[::1]:1/",
        // Ports.
        "http://example.com:65536/",
        "http://example.com:80a/",
        "http://example.com:-1/",
        "http://example.com::80/",
        "http://example.com:80:81/",
        // Userinfo.
        "https://user:pass@example.com/",
        "https://user@example.com:1/x",
        "https://@example.com/",
        "https://a@b@example.com/",
        "https://us%65r@example.com/",
        "https://us er@example.com/",
        // Empty parts and other forms.
        "",
        "http",
        "http:",
        "http:/",
        "http://",
        "//example.com/x",
        "/relative/path",
        "relative",
        "a:b",
        "1http://example.com",
        "h+t.t-p://example.com",
        "HTTPS://EXAMPLE.COM/X",
        "Http://example.com/",
        "mailto:someone@example.com",
        "urn:isbn:0451450523",
        "file:///etc/hosts",
        "data:text/plain,hi",
        "https://example.com/#",
        "https://example.com/#frag",
        "https://example.com/#a#b",
        "https://example.com/?q#f?g/h",
        "https://example.com#%41",
        "https://example.com#%4",
        // Characters that are never allowed as themselves.
        "https://example.com/a b",
        "https://exa mple.com/",
        "https://example.com/a\"b",
        "https://example.com/<a>",
        "https://example.com/a\\b",
        "https://example.com/a^b",
        "https://example.com/a`b",
        "https://example.com/{a}",
        "https://example.com/a|b",
        "https://example.com/a[b]",
        "https://example.com/\u{7f}",
        "https://example.com/\t",
        "https://example.com/\n",
        " https://example.com/",
        "https://example.com/ ",
        // Non-ASCII.
        "https://exämple.com/",
        "https://example.com/é",
        "https://example.com/?q=€",
        "https://example.com/#🚗",
        "é://example.com/",
    ];

    #[test]
    fn uri_format_decides_as_the_crate_does() {
        let ours = uri_format().unwrap();
        let builtin = builtin_uri();
        let crate_says = |s: &str| builtin.is_valid(&json!(s));
        for uri in URIS {
            assert_eq!(ours(uri), crate_says(uri), "{uri:?}");
        }
        // Both paths and both answers occur in the list.
        assert!(URIS.iter().any(|u| plain_web_uri(u)));
        assert!(URIS.iter().any(|u| !plain_web_uri(u) && crate_says(u)));
        assert!(URIS.iter().any(|u| !crate_says(u)));

        // Strings made of the pieces that matter to the grammar, after the
        // prefixes that matter to it (a fixed seed, so a failure repeats).
        const PREFIXES: &[&str] = &[
            "https://",
            "http://",
            "HTTP://",
            "ftp://",
            "http:/",
            "http:",
            "",
            "//",
            "https://u@",
            "http://[::1]",
            "https://a.b:",
        ];
        // The first `PLAIN` pieces are bytes a plain web address may hold.
        const PLAIN: usize = 27;
        const PIECES: &[&str] = &[
            "a", "Z", "0", "9", "f", ".", "-", "_", "~", "!", "$", "&", "'", "(", ")", "*", "+",
            ",", ";", "=", ":", "@", "/", "?", "80", "ab.cd", "/path", "#", "%", "%4", "%41",
            "%zz", "%e9", "[", "]", "[::1]", "[v1.x]", "é", "€", " ", "\"", "<", ">", "\\", "^",
            "`", "{", "|", "}", "\u{7f}", "\t", "user@", "//",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut plain, mut refused) = (0, 0);
        for _ in 0..40_000 {
            let mut uri = PREFIXES[next(PREFIXES.len())].to_owned();
            // Half the strings only of plain pieces, so both paths are busy.
            let pieces = if next(2) == 0 { PLAIN } else { PIECES.len() };
            for _ in 0..next(10) {
                uri.push_str(PIECES[next(pieces)]);
            }
            let expected = crate_says(&uri);
            assert_eq!(ours(&uri), expected, "{uri:?}");
            plain += usize::from(plain_web_uri(&uri));
            refused += usize::from(!expected);
        }
        assert!(plain > 2_000 && refused > 2_000, "{plain} {refused}");
    }

    /// The embedded schemas use the `uri` check above, and decide a whole
    /// answer as schemas compiled with the crate's own check do.
    #[test]
    fn answers_with_addresses_decide_as_with_the_builtin_check() {
        let set = SchemaSet::embedded().unwrap();
        let stem = SchemaSet::response_stem(Skill::InventorySearch);
        let builtin = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(set.doc(&stem))
            .unwrap();
        let mut refused = 0;
        for uri in URIS {
            let vehicle = json!({"vin":"JTDACAAU2H3400137","status":"available","updated_at":"2026-11-20T17:00:00Z","photos":["https://cdn.example/1.jpg", uri],"vdp_url":uri});
            let answer =
                json!({"type":"inventory.search.response","data":{"total":1,"vehicles":[vehicle]}});
            let expected = builtin.is_valid(&answer);
            let doc = Doc::parse(&answer.to_string()).unwrap();
            assert_eq!(
                set.result_holds(Skill::InventorySearch, &doc),
                expected,
                "{uri:?}"
            );
            assert_eq!(
                set.validate_result(Skill::InventorySearch, &answer).is_ok(),
                expected,
                "{uri:?}"
            );
            refused += usize::from(!expected);
        }
        assert!(refused > 10 && refused < URIS.len() - 10, "{refused}");
    }

    /// The nibble tables hold exactly each class's bytes, and the vector run
    /// stops where the scalar one does, at every position of every length.
    #[test]
    fn vector_runs_stop_where_scalar_runs_do() {
        for (class, (lo, hi)) in [(HOST, HOST_NIBBLES), (PATH_OR_QUERY, PATH_OR_QUERY_NIBBLES)] {
            for b in 0..=255u8 {
                let listed = URI_BYTES[usize::from(b)] & class != 0;
                let nibbles = lo[usize::from(b & 15)] & hi[usize::from(b >> 4)] != 0;
                assert_eq!(listed, nibbles, "byte {b:#x}, class {class}");
            }
            let clean = b"abcdefghijklmnopqrstuvwxyz0123456789-.abcdefghijklmnopqrstuvwxyz";
            for len in 0..clean.len() {
                for at in 0..=len {
                    for bad in [b' ', b'%', b'#', 0x80, b'_', b'/', b'A'] {
                        let mut text = clean[..len].to_vec();
                        if at < len {
                            text[at] = bad;
                        }
                        assert_eq!(run(&text, class), run_from(&text, 0, class), "{text:?}");
                    }
                }
            }
        }
    }

    /// The `Doc` path (the merged schema) against the `Value` path (the schema as written) on every
    /// valid example of `tests/corpus/valid` and on each single edit of it: a member removed or
    /// added, a value replaced by each of `corpus_edits::SCALARS`, a string lengthened. The fuzz
    /// target `schema_doc` does the same with random edits.
    #[test]
    fn the_doc_path_decides_every_edit_as_the_value_path() {
        use crate::aap::corpus_edits::{at_path, paths, SCALARS};
        let set = SchemaSet::embedded().unwrap();
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/valid");
        let (mut examples, mut checked, mut refused) = (0, 0, 0);
        for skill in Skill::ALL {
            for request in [true, false] {
                let stem = if request {
                    SchemaSet::request_stem(skill)
                } else {
                    SchemaSet::response_stem(skill)
                };
                // Results are decided as the skill's answer or as an `aap.error`.
                let mut stems = vec![stem];
                if !request {
                    stems.push("error".into());
                }
                for stem in stems {
                    let Ok(dir) = std::fs::read_dir(corpus.join(&stem)) else {
                        continue;
                    };
                    for file in dir {
                        let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
                        let example: Value = serde_json::from_str(&text).unwrap();
                        examples += 1;
                        let mut all = Vec::new();
                        paths(&example, &mut Vec::new(), &mut all);
                        let mut edits = vec![example.clone()];
                        for path in &all {
                            let mut replaced = |with: Value| {
                                let mut v = example.clone();
                                if let Some(t) = at_path(&mut v, path) {
                                    *t = with;
                                    edits.push(v);
                                }
                            };
                            for text in SCALARS {
                                replaced(serde_json::from_str(text).unwrap());
                            }
                            replaced(Value::String("a".repeat(2049)));
                            replaced(Value::String("é".repeat(1025)));
                            if let Some((Value::String(last), parent)) = path.split_last() {
                                let mut v = example.clone();
                                if let Some(Value::Object(m)) = at_path(&mut v, parent) {
                                    m.shift_remove(last);
                                    edits.push(v);
                                }
                            }
                            let mut v = example.clone();
                            if let Some(Value::Object(m)) = at_path(&mut v, path) {
                                m.insert("zz_unknown".into(), json!(1));
                                edits.push(v);
                            }
                        }
                        for edited in edits {
                            let text = edited.to_string();
                            let doc = Doc::parse(&text).unwrap();
                            let (on_doc, on_value) = if request {
                                (
                                    set.request_holds(skill, &doc),
                                    set.validate_request(skill, &edited).is_ok(),
                                )
                            } else {
                                (
                                    set.result_holds(skill, &doc),
                                    set.validate_result(skill, &edited).is_ok(),
                                )
                            };
                            assert_eq!(on_doc, on_value, "{stem}: {text}");
                            checked += 1;
                            refused += usize::from(!on_value);
                        }
                    }
                }
            }
        }
        assert!(
            examples > 20 && checked > 20_000 && refused > checked / 4 && refused < checked,
            "{examples} examples, {checked} edits, {refused} refused"
        );
    }

    /// The search answer's `Listing` is merged with its `Vehicle` for the `Doc` path; a schema
    /// the merge's conditions do not hold for is left as written.
    #[test]
    fn object_all_ofs_merge_only_when_equivalent() {
        let set = SchemaSet::embedded().unwrap();
        let mut search = set.response_doc(Skill::InventorySearch).clone();
        let defs = search["$defs"].clone();
        merge_object_all_of(&mut search, &defs);
        let listing = &search["$defs"]["Listing"];
        assert!(listing.get("allOf").is_none(), "{listing}");
        assert_eq!(listing["required"], json!(["status", "updated_at"]));
        assert!(listing["properties"]["vin"].is_object());
        // `condition` differs on the two sides (the listing allows fewer values), `status` not.
        assert!(listing["properties"]["condition"]["allOf"].is_array());
        assert_eq!(listing["properties"]["status"]["type"], "string");
        assert_eq!(listing["dependentRequired"], json!({"price": ["fees"]}));
        // A property on both sides holds for both, booleans too.
        let defs =
            json!({"T": {"properties": {"a": false, "b": {"type": "string", "description": "x"}}}});
        let mut merged = json!({"allOf": [{"$ref": "#/$defs/T"}],
            "properties": {"a": true, "b": {"type": "string", "description": "y"}}});
        merge_object_all_of(&mut merged, &defs);
        assert_eq!(merged["properties"]["a"], json!({"allOf": [false, true]}));
        assert_eq!(merged["properties"]["b"]["type"], "string");
        let defs = json!({"Open": {"properties": {"a": {"type": "string"}}},
            "Closed": {"type": "object", "additionalProperties": false}});
        for (schema, merges) in [
            (
                json!({"allOf": [{"$ref": "#/$defs/Open"}], "required": ["a"]}),
                true,
            ),
            (
                json!({"allOf": [{"$ref": "#/$defs/Closed"}], "required": ["a"]}),
                false,
            ),
            (
                json!({"allOf": [{"$ref": "#/$defs/Open"}], "minProperties": 1}),
                false,
            ),
            (json!({"allOf": [{"$ref": "#/$defs/Open"}, true]}), false),
            (
                json!({"allOf": [{"$ref": "#/$defs/Open", "type": "object"}]}),
                false,
            ),
            // Inside a resource of its own, `#/$defs/Open` is that resource's.
            (
                json!({"properties": {"x": {"$id": "https://example.com/x",
                    "properties": {"y": {"allOf": [{"$ref": "#/$defs/Open"}]}}}}}),
                false,
            ),
        ] {
            let mut merged = schema.clone();
            merge_object_all_of(&mut merged, &defs);
            assert_eq!(merged != schema, merges, "{schema}");
            // Neither side says `type`: a non-object still holds after the merge.
            if merges {
                assert!(merged.get("type").is_none(), "{merged}");
            }
        }
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
