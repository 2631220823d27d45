//! [`Doc`]: a JSON document held as one flat array of nodes, borrowing its
//! strings from the text it was read from, and its adapter for `jsonschema`
//! ([`DocJson`]).
//!
//! One array for the whole document means one growing allocation instead of
//! one per object and array, and nodes are written in place instead of being
//! returned up the parser's recursion. A container records its length and
//! where its last descendant ends, so a reader can step over it.

use super::{Error, Reader};
use serde_json::{Number, Value};
use std::borrow::Cow;

/// A parsed JSON document.
///
/// ```
/// use aap_gateway::json::Doc;
/// let text = r#"{"type":"x","n":[1,2.5,"\u00e9"]}"#;
/// let doc = Doc::parse(text).unwrap();
/// assert_eq!(doc.to_value(), serde_json::from_str::<serde_json::Value>(text).unwrap());
/// assert_eq!(doc.type_name(), Some("x"));
/// assert!(Doc::parse(r#"{"a":1,"a":2}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Doc<'a> {
    nodes: Vec<Node<'a>>,
}

/// One value. An object's members follow it as name, value, name, value…
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    /// `next`: the index just past the container's last descendant.
    Array {
        len: u32,
        next: u32,
    },
    Object {
        len: u32,
        next: u32,
    },
}

impl<'a> Doc<'a> {
    /// Read one JSON text (surrounding whitespace allowed, nothing else).
    pub fn parse(text: &'a str) -> Result<Doc<'a>, Error> {
        let mut reader = Reader::new(text);
        // A rough guess (a node per ~12 bytes) saves most regrowth.
        let mut nodes = Vec::with_capacity(text.len() / 12 + 1);
        reader.doc_into(&mut nodes)?;
        reader.finish()?;
        Ok(Doc { nodes })
    }

    /// The top-level value.
    pub fn root(&self) -> NodeRef<'_> {
        NodeRef {
            nodes: &self.nodes,
            at: 0,
        }
    }

    /// The top-level `type` member of an object, if it is a string.
    pub fn type_name(&self) -> Option<&str> {
        self.root().member("type")?.as_str()
    }

    /// Whether a number is written with a fraction or exponent but is a
    /// whole number within ±2^53 (`18999.0`): the gateway sends those as
    /// integers (see `upstream::normalize_numbers`), so the text would change.
    pub fn has_integral_float(&self) -> bool {
        self.nodes.iter().any(|n| match n {
            Node::Number(n) if !n.is_i64() && !n.is_u64() => n
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0),
            _ => false,
        })
    }

    /// An owned `serde_json::Value` of the same document.
    pub fn to_value(&self) -> Value {
        self.root().value()
    }
}

/// The index just past node `at` and its descendants.
fn next_of(nodes: &[Node<'_>], at: usize) -> usize {
    match nodes.get(at) {
        Some(Node::Array { next, .. } | Node::Object { next, .. }) => *next as usize,
        _ => at + 1,
    }
}

/// A value inside a [`Doc`] (cheap to copy).
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'b> {
    nodes: &'b [Node<'b>],
    at: usize,
}

impl<'b> NodeRef<'b> {
    fn node(&self) -> &'b Node<'b> {
        // `at` always indexes a node: handles are only made by walking the
        // array. `Null` keeps this total anyway.
        self.nodes.get(self.at).unwrap_or(&Node::Null)
    }

    /// The first member named `name` of an object.
    pub fn member(&self, name: &str) -> Option<NodeRef<'b>> {
        self.object()?.find(name)
    }

    pub fn as_str(&self) -> Option<&'b str> {
        match self.node() {
            Node::String(s) => Some(s.as_ref()),
            _ => None,
        }
    }

    fn object(&self) -> Option<ObjectRef<'b>> {
        match self.node() {
            Node::Object { len, .. } => Some(ObjectRef {
                nodes: self.nodes,
                at: self.at,
                len: *len as usize,
            }),
            _ => None,
        }
    }

    fn array(&self) -> Option<ArrayRef<'b>> {
        match self.node() {
            Node::Array { len, .. } => Some(ArrayRef {
                nodes: self.nodes,
                at: self.at,
                len: *len as usize,
            }),
            _ => None,
        }
    }

    fn value(&self) -> Value {
        match self.node() {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.to_string()),
            Node::Array { .. } => Value::Array(
                self.array()
                    .map(|a| a.elements().map(|e| e.value()).collect())
                    .unwrap_or_default(),
            ),
            Node::Object { .. } => Value::Object(
                self.object()
                    .map(|o| {
                        o.members()
                            .map(|(k, v)| (k.to_owned(), v.value()))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
        }
    }
}

/// An object inside a [`Doc`].
#[derive(Debug, Clone, Copy)]
pub struct ObjectRef<'b> {
    nodes: &'b [Node<'b>],
    at: usize,
    len: usize,
}

impl<'b> ObjectRef<'b> {
    fn find(&self, name: &str) -> Option<NodeRef<'b>> {
        self.members().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    fn members(&self) -> Members<'b> {
        Members {
            nodes: self.nodes,
            next: self.at + 1,
            left: self.len,
        }
    }
}

/// The members of an object in document order.
pub struct Members<'b> {
    nodes: &'b [Node<'b>],
    next: usize,
    left: usize,
}

impl<'b> Iterator for Members<'b> {
    type Item = (&'b str, NodeRef<'b>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let name = match self.nodes.get(self.next) {
            Some(Node::String(s)) => s.as_ref(),
            _ => return None,
        };
        let value = NodeRef {
            nodes: self.nodes,
            at: self.next + 1,
        };
        self.next = next_of(self.nodes, self.next + 1);
        Some((name, value))
    }
}

/// An array inside a [`Doc`].
#[derive(Debug, Clone, Copy)]
pub struct ArrayRef<'b> {
    nodes: &'b [Node<'b>],
    at: usize,
    len: usize,
}

impl<'b> ArrayRef<'b> {
    fn elements(&self) -> Elements<'b> {
        Elements {
            nodes: self.nodes,
            next: self.at + 1,
            left: self.len,
        }
    }
}

/// The elements of an array in order.
pub struct Elements<'b> {
    nodes: &'b [Node<'b>],
    next: usize,
    left: usize,
}

impl<'b> Iterator for Elements<'b> {
    type Item = NodeRef<'b>;
    fn next(&mut self) -> Option<NodeRef<'b>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let item = NodeRef {
            nodes: self.nodes,
            at: self.next,
        };
        self.next = next_of(self.nodes, self.next);
        Some(item)
    }
}

/// Where `jsonschema` puts a member name it validates as a value
/// (`propertyNames`).
#[derive(Debug, Default)]
pub struct NameScratch(Vec<Node<'static>>);

/// [`Doc`] as an instance representation for `jsonschema`
/// (`jsonschema::options_for::<DocJson>()`; validate `doc.root()`).
pub struct DocJson;

impl jsonschema::json::Json for DocJson {
    type Node<'a> = NodeRef<'a>;
    type PreparedKey = String;
    type StringBuffer = NameScratch;
    const ACYCLIC: bool = true;
    // Objects look names up by scanning, so `required` does better with one
    // pass over the members than with a lookup per required name.
    const KEYS_PER_LOOKUP: usize = 8;

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>(
        buffer: &mut NameScratch,
        string: &str,
        f: impl FnOnce(NodeRef<'_>) -> T,
    ) -> T {
        buffer.0.clear();
        buffer.0.push(Node::String(Cow::Owned(string.to_owned())));
        f(NodeRef {
            nodes: &buffer.0,
            at: 0,
        })
    }
}

impl<'a> jsonschema::json::Node<'a, DocJson> for NodeRef<'a> {
    type Object = ObjectRef<'a>;
    type Array = ArrayRef<'a>;
    type Number = &'a Number;

    fn as_object(&self) -> Option<ObjectRef<'a>> {
        self.object()
    }
    fn as_array(&self) -> Option<ArrayRef<'a>> {
        self.array()
    }
    fn as_string(&self) -> Option<Cow<'a, str>> {
        self.as_str().map(Cow::Borrowed)
    }
    fn as_number(&self) -> Option<&'a Number> {
        match self.node() {
            Node::Number(n) => Some(n),
            _ => None,
        }
    }
    fn as_boolean(&self) -> Option<bool> {
        match self.node() {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self.node(), Node::Null)
    }
    fn json_type(&self) -> jsonschema::JsonType {
        use jsonschema::JsonType;
        match self.node() {
            Node::Null => JsonType::Null,
            Node::Bool(_) => JsonType::Boolean,
            Node::Number(_) => JsonType::Number,
            Node::String(_) => JsonType::String,
            Node::Array { .. } => JsonType::Array,
            Node::Object { .. } => JsonType::Object,
        }
    }
    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(self.value())
    }
    fn identity(&self) -> Option<jsonschema::json::NodeIdentity> {
        // Every node has its own slot in the array.
        Some(jsonschema::json::NodeIdentity::new(
            std::ptr::from_ref(self.node()) as usize,
        ))
    }
}

impl<'a> jsonschema::json::Object<'a, DocJson> for ObjectRef<'a> {
    type Node = NodeRef<'a>;
    type MemberName = &'a str;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        self.len
    }
    fn get(&self, key: &String) -> Option<NodeRef<'a>> {
        self.find(key)
    }
    fn members(&self) -> Members<'a> {
        ObjectRef::members(self)
    }
}

impl<'a> jsonschema::json::Array<'a, DocJson> for ArrayRef<'a> {
    type Node = NodeRef<'a>;
    type ElementsIter = Elements<'a>;

    fn len(&self) -> usize {
        self.len
    }
    fn elements(&self) -> Elements<'a> {
        ArrayRef::elements(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Many names sharing a signature, none repeated.
        let many: Vec<String> = (0..200).map(|i| format!("\"k{i:03}\":{i}")).collect();
        assert!(Doc::parse(&format!("{{{}}}", many.join(","))).is_ok());
        let with_repeat = format!("{{{},\"k007\":0}}", many.join(","));
        assert!(Doc::parse(&with_repeat).is_err());
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
    fn walks_nested_containers_in_order() {
        let text = r#"{"a":[1,{"b":[[],{}],"c":"x"},3],"d":{"e":null},"f":true}"#;
        let doc = Doc::parse(text).unwrap();
        let root = doc.root();
        let names: Vec<&str> = root.object().unwrap().members().map(|(k, _)| k).collect();
        assert_eq!(names, ["a", "d", "f"]);
        let a = root.member("a").unwrap().array().unwrap();
        assert_eq!(a.len, 3);
        let items: Vec<Value> = a.elements().map(|e| e.value()).collect();
        assert_eq!(items[2], serde_json::json!(3));
        assert_eq!(root.member("f").unwrap().value(), serde_json::json!(true));
        assert!(root.member("zz").is_none());
        assert_eq!(doc.to_value(), serde_json::from_str::<Value>(text).unwrap());
    }
}
