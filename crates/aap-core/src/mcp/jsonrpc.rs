//! JSON-RPC 2.0 envelope parsing and error rendering.
//!
//! The parser is strict on purpose: duplicate object keys are rejected (a
//! gateway and the service behind it must never disagree about which `method`
//! or `name` a body carries), nesting depth is bounded, and batches are refused
//! because neither supported MCP revision allows them.

use crate::json::{self, Doc};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;

pub use crate::error::{code, RpcError};

/// A JSON-RPC id: MCP allows strings and integers, never null.
pub type RequestId = Value;

/// What a POST body turned out to be.
#[derive(Debug, Clone)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        /// `params` without `arguments`, which is read apart.
        params: Option<Map<String, Value>>,
        /// `params.arguments`, read into a document (see `aap::arguments`).
        arguments: Option<Doc>,
    },
    /// (A notification's `params.arguments`, were there one, is dropped:
    /// no notification the gateway handles has arguments.)
    Notification {
        method: String,
        params: Option<Map<String, Value>>,
    },
    /// A client posting a JSON-RPC response (legacy clients answering a
    /// server request). The gateway never sends server requests.
    Response { id: RequestId },
}

impl Message {
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request { method, .. } | Message::Notification { method, .. } => Some(method),
            Message::Response { .. } => None,
        }
    }
    pub fn params(&self) -> Option<&Map<String, Value>> {
        match self {
            Message::Request { params, .. } | Message::Notification { params, .. } => {
                params.as_ref()
            }
            Message::Response { .. } => None,
        }
    }
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request { id, .. } | Message::Response { id } => Some(id),
            Message::Notification { .. } => None,
        }
    }
}

/// A successful JSON-RPC response body.
pub fn result_body(id: &RequestId, result: Value) -> Value {
    let mut body = Map::new();
    body.insert("jsonrpc".into(), Value::from("2.0"));
    body.insert("id".into(), id.clone());
    body.insert("result".into(), result);
    Value::Object(body)
}

/// Parse bytes into JSON, rejecting duplicate keys and excessive depth.
pub fn parse_json(bytes: &[u8], max_depth: usize) -> Result<Value, RpcError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue {
        depth_left: max_depth,
    }
    .deserialize(&mut de)
    .map_err(|e| RpcError::parse(describe_parse_error(&e)))?;
    de.end()
        .map_err(|e| RpcError::parse(describe_parse_error(&e)))?;
    Ok(value)
}

fn describe_parse_error(e: &serde_json::Error) -> String {
    // serde_json messages name the problem and position but never echo input.
    let text = e.to_string();
    if text.contains("duplicate key") || text.contains("nesting") {
        format!("Parse error: {text}")
    } else {
        format!("Parse error: invalid JSON ({text})")
    }
}

/// Parse a POST body into one JSON-RPC message. `params.arguments` is
/// read into a [`Doc`] with the same strictness (unique member names, the
/// depth left at that point) instead of into the `params` map.
///
/// The body is read with [`json::Reader`], not `serde_json`: a search call's
/// envelope cost about 17,600 instructions through `serde_json`'s visitor,
/// against about 13,600 here (most of what is left is the `params` map).
/// [`parse_json`] (the `serde_json` reading) stays as the reference: the
/// `jsonrpc_envelope` fuzz target and the tests check that both accept,
/// refuse and read the same bodies.
pub fn parse_message(bytes: &[u8], max_depth: usize) -> Result<Message, RpcError> {
    let (top, arguments) = read_body(bytes, max_depth)?;
    let arguments = match arguments {
        None => None,
        Some((raw, depth_left)) => {
            let mut reader = json::Reader::new(raw).with_depth_left(depth_left);
            let doc = reader
                .doc()
                .and_then(|doc| reader.finish().map(|()| doc))
                .map_err(|e| RpcError::parse(format!("Parse error: params.arguments: {e}")))?;
            Some(doc)
        }
    };
    let mut message = top.into_message()?;
    if let Message::Request {
        arguments: slot, ..
    } = &mut message
    {
        *slot = arguments;
    }
    Ok(message)
}

/// The id of a body that is a valid JSON-RPC request envelope, for an
/// answer decided before the body is interpreted (401, 403, 406, 415,
/// 429). The envelope is read with the same strictness as
/// [`parse_message`] (so an id is never taken from a body the gateway would
/// refuse as malformed); `params.arguments` is skipped, not read into a
/// document. `None` for anything else: a notification, a client response,
/// invalid JSON, a batch.
pub fn request_id(bytes: &[u8], max_depth: usize) -> Option<RequestId> {
    if bytes.is_empty() {
        return None;
    }
    match read_body(bytes, max_depth).ok()?.0.into_message().ok()? {
        Message::Request { id, .. } => Some(id),
        _ => None,
    }
}

/// `params.arguments`' text and the depth left for it, kept for
/// [`parse_message`] to read into a document.
type ArgumentsText<'a> = Option<(&'a str, usize)>;

/// A body read as a message: the top level's members are kept apart rather than put in a
/// map (a map and a string per member name were about a third of the allocations of reading
/// a call), with the strictness of [`parse_json`] (unique names, bounded depth).
fn read_body(bytes: &[u8], max_depth: usize) -> Result<(Shape<'_>, ArgumentsText<'_>), RpcError> {
    let mut r = json::Reader::from_slice(bytes)
        .map_err(parse_error)?
        .with_depth_left(max_depth);
    let mut arguments = None;
    let top = match r.peek() {
        Some(b'{') => {
            Shape::Envelope(read_envelope(&mut r, max_depth, &mut arguments).map_err(parse_error)?)
        }
        Some(b'[') => r.value().map(|_| Shape::Array).map_err(parse_error)?,
        _ => r.value().map(|_| Shape::Other).map_err(parse_error)?,
    };
    r.finish().map_err(parse_error)?;
    Ok((top, arguments))
}

/// A body's top-level object: the members that decide what the message is,
/// each at most once; every other member read as strictly and dropped.
fn read_envelope<'a>(
    r: &mut json::Reader<'a>,
    max_depth: usize,
    arguments: &mut ArgumentsText<'a>,
) -> Result<Envelope<'a>, json::Error> {
    let mut env = Envelope::default();
    // Names of members the envelope does not read, for the repeat check (rare).
    let mut others: Vec<Cow<'a, str>> = Vec::new();
    r.object(|r, name| {
        let repeated = match name.as_ref() {
            "jsonrpc" | "method" => {
                let kept = if name == "jsonrpc" {
                    &mut env.jsonrpc
                } else {
                    &mut env.method
                };
                let repeated = kept.is_some();
                if !repeated {
                    // Anything but a string counts as no text (and is read as strictly).
                    *kept = Some(match r.peek() {
                        Some(b'"') => Some(r.string()?),
                        _ => r.value().map(|_| None)?,
                    });
                }
                repeated
            }
            "id" => {
                let repeated = env.id.is_some();
                if !repeated {
                    env.id = Some(r.value()?);
                }
                repeated
            }
            "params" => {
                let repeated = env.params.is_some();
                if !repeated {
                    env.params = Some(match r.peek() {
                        Some(b'{') => Value::Object(read_params(r, max_depth, arguments)?),
                        _ => r.value()?,
                    });
                }
                repeated
            }
            "result" | "error" => {
                let seen = if name == "result" {
                    &mut env.result
                } else {
                    &mut env.error
                };
                let repeated = std::mem::replace(seen, true);
                if !repeated {
                    r.value()?;
                }
                repeated
            }
            _ => {
                let repeated = others.contains(&name);
                if !repeated {
                    r.value()?;
                    others.push(name);
                }
                repeated
            }
        };
        if repeated {
            return Err(r.error(json::REPEATED_NAME));
        }
        Ok(())
    })?;
    Ok(env)
}

/// `params` as a map, except `arguments`, whose text is kept apart (its
/// grammar and depth checked here, its names when it is read into a
/// document).
fn read_params<'a>(
    r: &mut json::Reader<'a>,
    max_depth: usize,
    arguments: &mut ArgumentsText<'a>,
) -> Result<Map<String, Value>, json::Error> {
    let mut params = Map::new();
    r.object(|r, name| {
        if name == "arguments" {
            if arguments.is_some() {
                return Err(r.error(json::REPEATED_NAME));
            }
            // Two levels below the top: the body's object, then `params`.
            *arguments = Some((r.skip()?, max_depth.saturating_sub(2)));
            return Ok(());
        }
        match params.entry(name.into_owned()) {
            serde_json::map::Entry::Vacant(slot) => {
                slot.insert(r.value()?);
                Ok(())
            }
            serde_json::map::Entry::Occupied(_) => Err(r.error(json::REPEATED_NAME)),
        }
    })?;
    Ok(params)
}

/// A body that is not (acceptable) JSON: -32700, with where and why, never
/// the input.
fn parse_error(e: json::Error) -> RpcError {
    match e.what {
        json::REPEATED_NAME | json::TOO_DEEP => RpcError::parse(format!("Parse error: {e}")),
        _ => RpcError::parse(format!("Parse error: invalid JSON ({e})")),
    }
}

/// A member that counts only when it is a string: its text, or `None`.
type Member<'de> = Option<Cow<'de, str>>;

/// What a body's top-level value is, as far as the envelope needs to know; read with the
/// strictness of [`parse_json`] (unique names, bounded depth) whatever it is.
enum Shape<'de> {
    /// An object.
    Envelope(Envelope<'de>),
    Array,
    /// Anything else: a string, a number, `true`, `false` or `null`.
    Other,
}

/// The members of a message object that decide what it is; other members are read (as
/// strictly) and dropped.
#[derive(Default)]
struct Envelope<'de> {
    jsonrpc: Option<Member<'de>>,
    id: Option<Value>,
    method: Option<Member<'de>>,
    params: Option<Value>,
    result: bool,
    error: bool,
}

impl<'de> Shape<'de> {
    /// The envelope rules, in order: an object, `jsonrpc` "2.0", a string or integer `id`, an
    /// object `params`, then what `method`, `result` and `error` make it.
    fn into_message(self) -> Result<Message, RpcError> {
        let env = match self {
            Shape::Envelope(env) => env,
            Shape::Array => return Err(RpcError::invalid_request(BATCH)),
            Shape::Other => return Err(RpcError::invalid_request(NOT_AN_OBJECT)),
        };
        if !matches!(&env.jsonrpc, Some(Some(v)) if v == "2.0") {
            return Err(RpcError::invalid_request(BAD_VERSION));
        }
        let id = env.id.map(valid_id).transpose()?;
        let params = match env.params {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err(RpcError::invalid_request(BAD_PARAMS)),
        };
        match env.method {
            Some(Some(method)) => {
                if env.result || env.error {
                    return Err(RpcError::invalid_request(METHOD_AND_RESULT));
                }
                let method = method.into_owned();
                Ok(match id {
                    Some(id) => Message::Request {
                        id,
                        method,
                        params,
                        arguments: None,
                    },
                    None => Message::Notification { method, params },
                })
            }
            Some(None) => Err(RpcError::invalid_request(BAD_METHOD)),
            None => match (id, env.result ^ env.error) {
                (Some(id), true) => Ok(Message::Response { id }),
                _ => Err(RpcError::invalid_request(NO_METHOD)),
            },
        }
    }
}

const BATCH: &str =
    "Invalid Request: batch arrays are not supported; send one JSON-RPC message per POST";
const NOT_AN_OBJECT: &str = "Invalid Request: the body must be a JSON-RPC 2.0 object";
const BAD_VERSION: &str = "Invalid Request: \"jsonrpc\" must be the string \"2.0\"";
const BAD_ID: &str = "Invalid Request: \"id\" must be a string or an integer (null is not allowed)";
const BAD_PARAMS: &str = "Invalid Request: \"params\" must be an object";
const METHOD_AND_RESULT: &str =
    "Invalid Request: a message cannot carry both \"method\" and \"result\"/\"error\"";
const BAD_METHOD: &str = "Invalid Request: \"method\" must be a string";
const NO_METHOD: &str = "Invalid Request: missing \"method\"";

/// An id MCP allows: a string or an integer.
fn valid_id(id: Value) -> Result<Value, RpcError> {
    match id {
        Value::String(_) => Ok(id),
        Value::Number(ref n) if n.is_i64() || n.is_u64() => Ok(id),
        _ => Err(RpcError::invalid_request(BAD_ID)),
    }
}

/// Validate the JSON-RPC envelope of an already-parsed value (the rules [`parse_message`]
/// applies to the members it reads).
pub fn message_from_value(value: Value) -> Result<Message, RpcError> {
    let text = |v: Value| match v {
        Value::String(s) => Some(Cow::Owned(s)),
        _ => None,
    };
    let shape = match value {
        Value::Object(mut obj) => Shape::Envelope(Envelope {
            jsonrpc: obj.remove("jsonrpc").map(text),
            id: obj.remove("id"),
            method: obj.remove("method").map(text),
            params: obj.remove("params"),
            result: obj.contains_key("result"),
            error: obj.contains_key("error"),
        }),
        Value::Array(_) => Shape::Array,
        _ => Shape::Other,
    };
    shape.into_message()
}

/// Deserializes a `serde_json::Value` while refusing duplicate keys and
/// bounding depth (serde_json's own recursion limit is not configurable).
struct StrictValue {
    depth_left: usize,
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl StrictValue {
    /// The reader of a member or element, one level down.
    fn child<E: de::Error>(&self) -> Result<StrictValue, E> {
        if self.depth_left == 0 {
            return Err(E::custom(
                "JSON nesting exceeds the configured maximum depth",
            ));
        }
        Ok(StrictValue {
            depth_left: self.depth_left - 1,
        })
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if self.depth_left == 0 {
            // Only an element would be too deep: an empty array is fine
            // here, as an empty object is.
            return match seq.next_element::<de::IgnoredAny>()? {
                None => Ok(Value::Array(Vec::new())),
                Some(_) => Err(de::Error::custom(
                    "JSON nesting exceeds the configured maximum depth",
                )),
            };
        }
        let mut out = Vec::new();
        loop {
            let child = self.child()?;
            match seq.next_element_seed(child)? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // One hash per key: the vacant entry takes the value.
            let serde_json::map::Entry::Vacant(entry) = out.entry(key) else {
                return Err(de::Error::custom("duplicate key in JSON object"));
            };
            let child = self.child()?;
            entry.insert(map.next_value_seed(child)?);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_and_notification() {
        let m = parse_message(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            32,
        )
        .unwrap();
        assert!(matches!(m, Message::Request { ref method, .. } if method == "tools/list"));
        let n = parse_message(
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            32,
        )
        .unwrap();
        assert!(matches!(n, Message::Notification { .. }));
    }

    #[test]
    fn rejects_bad_envelopes() {
        let cases: &[(&[u8], i64)] = &[
            (b"{", code::PARSE_ERROR),
            (b"[]", code::INVALID_REQUEST),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":7}"#,
                code::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#,
                code::INVALID_REQUEST,
            ),
            (br#"{"jsonrpc":"2.0","id":1}"#, code::INVALID_REQUEST),
            (br#""hello""#, code::INVALID_REQUEST),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
                code::PARSE_ERROR,
            ),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
                code::PARSE_ERROR,
            ),
        ];
        for (body, want) in cases {
            let got = parse_message(body, 32).unwrap_err();
            assert_eq!(got.code, *want, "body {:?}", String::from_utf8_lossy(body));
            assert_eq!(got.http_status, 400);
        }
    }

    #[test]
    fn depth_is_bounded() {
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert!(parse_json(deep.as_bytes(), 32).is_err());
        assert!(parse_json(deep.as_bytes(), 64).is_ok());
    }

    #[test]
    fn the_top_level_is_read_as_strictly_as_a_value() {
        // Every body: the envelope read without a map for its top level decides exactly as
        // the whole value read into a map and then checked.
        let bodies: &[&[u8]] = &[
            br#"{"jsonrpc":"2.0","id":1,"method":"x","x":1,"x":2}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"result":2}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{},"error":{}}"#,
            br#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{},"params":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","result":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1}"#,
            br#"{"jsonrpc":"2.0","method":"x","x":{"a":1,"a":2}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":{"a":1,"a":2}}"#,
            br#"{"jsonrpc":["2.0"],"id":1,"method":"x"}"#,
            br#"{"jsonr\u0070c":"2.0","id":"a","meth\u006fd":"x\u0079"}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"arguments":{},"arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[[[[1]]]]}}"#,
            br#"[{"a":1,"a":2}]"#,
            br#"[]"#,
            br#"7"#,
            br#"{}"#,
        ];
        let summary = |m: &Result<Message, RpcError>| match m {
            Ok(m) => format!("{:?} {:?} {:?}", m.method(), m.id(), m.params()),
            Err(e) => format!("{} {}", e.code, e.message),
        };
        for body in bodies {
            for depth in [0, 1, 2, 3, 32] {
                let apart = parse_message(body, depth);
                let whole = parse_json(body, depth).and_then(message_from_value);
                let text = String::from_utf8_lossy(body);
                match (&apart, &whole) {
                    // A parse error's text names where serde_json stopped, which differs when
                    // `arguments` is read apart; the code is what must agree.
                    (Err(a), Err(w)) if a.code == code::PARSE_ERROR => {
                        assert_eq!(w.code, code::PARSE_ERROR, "{text} at depth {depth}")
                    }
                    _ => assert_eq!(summary(&apart), summary(&whole), "{text} at depth {depth}"),
                }
            }
        }
        // Member names with escapes are read as their text.
        let m = parse_message(bodies[12], 32).unwrap();
        assert_eq!(m.method(), Some("xy"));
        assert_eq!(m.id(), Some(&Value::from("a")));
    }

    #[test]
    fn arguments_are_read_apart_and_as_strictly() {
        let args = r#"{ "type": "x", "filters": {"make": ["Toyota"]} }"#;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{args}}}}}"#
        );
        let Message::Request {
            params, arguments, ..
        } = parse_message(body.as_bytes(), 32).unwrap()
        else {
            panic!("a request");
        };
        let params = params.unwrap();
        assert_eq!(params.get("name"), Some(&Value::from("t")));
        assert!(params.get("arguments").is_none());
        let doc = arguments.unwrap();
        assert_eq!(doc.raw(), args);
        assert_eq!(doc.to_value(), serde_json::from_str::<Value>(args).unwrap());
        // Only `params.arguments` is read apart.
        let nested = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":{"arguments":[1]}},"arguments":2}"#;
        let Message::Request {
            params, arguments, ..
        } = parse_message(nested, 32).unwrap()
        else {
            panic!("a request");
        };
        assert!(arguments.is_none());
        assert_eq!(params.unwrap()["x"]["arguments"], serde_json::json!([1]));

        let refused: &[&[u8]] = &[
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{},"arguments":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":1,"a":2}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":[{"b":1,"b":1}]}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":"\ud800"}}}"#,
        ];
        for body in refused {
            let e = parse_message(body, 32).unwrap_err();
            assert_eq!(
                e.code,
                code::PARSE_ERROR,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // The depth limit counts from the top of the body: the envelope
        // takes two levels, so 30 are left for the arguments at 32.
        let nest = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":{}1{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(parse_message(nest(30).as_bytes(), 32).is_ok());
        let deep = parse_message(nest(31).as_bytes(), 32).unwrap_err();
        assert_eq!(deep.code, code::PARSE_ERROR);
        assert!(
            parse_json(nest(31).as_bytes(), 32).is_err(),
            "the same limit as a whole-value parse"
        );
        assert!(parse_json(nest(30).as_bytes(), 32).is_ok());
        // An empty container may sit one level deeper, in both parses.
        let empty = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":{}{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        for n in [30, 31, 32] {
            assert_eq!(
                parse_message(empty(n).as_bytes(), 32).is_ok(),
                parse_json(empty(n).as_bytes(), 32).is_ok(),
                "{n} empty levels"
            );
        }
        assert!(parse_message(empty(31).as_bytes(), 32).is_ok());
        assert!(parse_message(empty(32).as_bytes(), 32).is_err());
    }

    #[test]
    fn request_id_only_from_a_valid_request_envelope() {
        let id = |b: &str| request_id(b.as_bytes(), 32);
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"arguments":{"x":[1]}}}"#),
            Some(Value::from("a"))
        );
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":5,"method":"m"}"#),
            Some(Value::from(5))
        );
        for none in [
            "",
            "{",
            r#"{"jsonrpc":"2.0","method":"n"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
        ] {
            assert_eq!(id(none), None, "{none}");
        }
    }

    #[test]
    fn own_codes_stay_out_of_the_spec_reserved_range() {
        for c in [
            code::SESSION_NOT_FOUND,
            code::RATE_LIMITED,
            code::UNAUTHORIZED,
            code::UPSTREAM_UNAVAILABLE,
            code::UPSTREAM_TIMEOUT,
            code::UPSTREAM_CREDENTIALS_REFUSED,
        ] {
            assert!(!code::SPEC_RESERVED.contains(&c), "{c}");
            assert!((-32019..=-32000).contains(&c), "{c}");
        }
        assert!(code::SPEC_RESERVED.contains(&code::HEADER_MISMATCH));
        assert!(code::SPEC_RESERVED.contains(&code::UNSUPPORTED_PROTOCOL_VERSION));
    }

    #[test]
    fn client_response_is_recognised() {
        let m = parse_message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#, 8).unwrap();
        assert!(matches!(m, Message::Response { .. }));
    }
}
