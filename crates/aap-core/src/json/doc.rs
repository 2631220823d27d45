//! [`Doc`]: a parsed JSON value that keeps the text it was read from, and
//! its adapter for `jsonschema` ([`DocJson`]).
//!
//! The nodes sit in one flat array (one growing allocation instead of one per
//! object and array; nodes written in place instead of returned up the
//! parser's recursion). A string without escapes is a byte range of the
//! text, so reading copies none of them, and the document holds its text, so
//! it can travel from the upstream that read it to the contract that
//! validates it and the writer that passes the same bytes on. The text is a
//! `ByteString` (UTF-8 over `bytes::Bytes`): a document read from an upstream
//! answer shares the answer's buffer ([`Reader::shared`]) rather than copy it.

use super::{Error, Reader};
use bytestring::ByteString;
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::cell::Cell;
use std::ops::Range;

/// A parsed JSON value with its text.
///
/// ```
/// use aap_core::json::Doc;
/// let text = r#"{"type":"x","n":[1,2.5,"\u00e9"]}"#;
/// let doc = Doc::parse(text).unwrap();
/// assert_eq!(doc.to_value(), serde_json::from_str::<serde_json::Value>(text).unwrap());
/// assert_eq!(doc.type_name(), Some("x"));
/// assert_eq!(doc.raw(), text);
/// assert!(Doc::parse(r#"{"a":1,"a":2}"#).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Doc {
    /// The text read (for an upstream answer, the whole frame, shared with
    /// the answer's buffer rather than copied).
    text: ByteString,
    /// Where the value itself is in `text`.
    span: Range<usize>,
    nodes: Vec<Node>,
    /// The decoded text of every string written with escapes, one after
    /// another (a [`Node::Decoded`] is a range of it). Kept beside the
    /// nodes rather than a `Box<str>` in each, so no node owns memory and
    /// dropping a document frees two buffers without visiting its nodes
    /// (that walk read a search answer's 381 nodes again, cold: about 1,900
    /// instructions and 140 data-cache misses a call under callgrind).
    decoded: String,
    /// Whether a number is written with a fraction or an exponent (set by
    /// the reader, which sees each number's text).
    floats: bool,
}

/// One value. An object's members follow it as name, value, name, value…
///
/// `repr(u8)`: a tag byte of its own. Without it the compiler keeps the
/// discriminant in `Number`'s spare tag values (16-byte nodes instead of
/// 24), and every match then decodes it: validating and reading a search
/// answer cost about 4,200 more instructions that way.
#[derive(Debug, Clone, PartialEq)]
#[repr(u8)]
pub(super) enum Node {
    Null,
    Bool(bool),
    Number(Number),
    /// A string without escapes: its bytes in the text.
    Str {
        start: u32,
        end: u32,
    },
    /// A string with escapes: its decoded text, a range of the document's
    /// `decoded`.
    Decoded {
        start: u32,
        end: u32,
    },
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

impl Doc {
    /// Read one JSON text (surrounding whitespace allowed, nothing else).
    pub fn parse(text: &str) -> Result<Doc, Error> {
        let mut reader = Reader::new(text);
        let doc = reader.doc()?;
        reader.finish()?;
        Ok(doc)
    }

    /// A document read by [`Reader::doc`] from `text`.
    pub(super) fn from_parts(
        text: ByteString,
        span: Range<usize>,
        nodes: Vec<Node>,
        decoded: String,
        floats: bool,
    ) -> Doc {
        Doc {
            text,
            span,
            nodes,
            decoded,
            floats,
        }
    }

    /// The value's own text, exactly as it was read.
    pub fn raw(&self) -> &str {
        self.text.get(self.span.clone()).unwrap_or_default()
    }

    /// The top-level value.
    pub fn root(&self) -> NodeRef<'_> {
        NodeRef::new(self, 0)
    }

    /// The top-level `type` member of an object, if it is a string.
    pub fn type_name(&self) -> Option<&str> {
        self.root().member("type")?.as_str()
    }

    /// Whether a number is written with a fraction or exponent but is a
    /// whole number within ±2^53 (`18999.0`): the gateway sends those as
    /// integers (see `upstream::normalize_numbers`), so the text would change.
    pub fn has_integral_float(&self) -> bool {
        // Most answers write every number as an integer: the reader knows,
        // and the walk over every node (~2,900 instructions for a search
        // answer) is skipped.
        self.floats
            && self.nodes.iter().any(|n| match n {
                Node::Number(n) => super::integral_float(n).is_some(),
                _ => false,
            })
    }

    /// An owned `serde_json::Value` of the same value.
    pub fn to_value(&self) -> Value {
        self.root().value()
    }

    fn node(&self, at: usize) -> &Node {
        // Handles are made by walking the array, so `at` is in range;
        // `Null` keeps this total anyway.
        self.nodes.get(at).unwrap_or(&Node::Null)
    }

    fn str_of<'s>(&'s self, node: &'s Node) -> Option<&'s str> {
        match node {
            Node::Str { start, end } => {
                let bytes = self.text.as_bytes().get(*start as usize..*end as usize)?;
                debug_assert!(std::str::from_utf8(bytes).is_ok());
                // SAFETY: `text` is UTF-8 (a `ByteString`), and a `Str` node's
                // range lies between two ASCII quotes the reader found in it
                // (or is all of a `NameScratch`'s text), so both ends are on
                // character boundaries and the bytes between are UTF-8. Slicing
                // the `str` instead checked both boundaries again on every
                // name and string `jsonschema` reads (~8 instructions each,
                // about 700 a search answer).
                Some(unsafe { std::str::from_utf8_unchecked(bytes) })
            }
            Node::Decoded { start, end } => self.decoded.get(*start as usize..*end as usize),
            _ => None,
        }
    }
}

/// A value inside a [`Doc`] (cheap to copy).
///
/// It holds its node as well as the node's index: `jsonschema` asks a node
/// for its type, string or children many times a call, and each ask then
/// reads the node without looking it up in the array again.
#[derive(Debug, Clone, Copy)]
pub struct NodeRef<'b> {
    doc: &'b Doc,
    node: &'b Node,
    at: usize,
}

impl<'b> NodeRef<'b> {
    fn new(doc: &'b Doc, at: usize) -> NodeRef<'b> {
        NodeRef {
            doc,
            node: doc.node(at),
            at,
        }
    }

    /// The first member named `name` of an object.
    pub fn member(&self, name: &str) -> Option<NodeRef<'b>> {
        self.object()?.find(name)
    }

    pub fn as_str(&self) -> Option<&'b str> {
        self.doc.str_of(self.node)
    }

    pub fn is_object(&self) -> bool {
        matches!(self.node, Node::Object { .. })
    }

    fn object(&self) -> Option<ObjectRef<'b>> {
        match self.node {
            Node::Object { len, next } => Some(ObjectRef {
                doc: self.doc,
                nodes: self.children(*next),
                first: self.at + 1,
                len: *len as usize,
                resume: Cell::new(0),
            }),
            _ => None,
        }
    }

    fn array(&self) -> Option<ArrayRef<'b>> {
        match self.node {
            Node::Array { len, next } => Some(ArrayRef {
                doc: self.doc,
                nodes: self.children(*next),
                first: self.at + 1,
                len: *len as usize,
            }),
            _ => None,
        }
    }

    /// The nodes of a container's descendants, which run from just after it
    /// to `next`. The reader wrote `next`, so the range holds; an empty slice
    /// keeps this total anyway.
    fn children(&self, next: u32) -> &'b [Node] {
        self.doc
            .nodes
            .get(self.at + 1..next as usize)
            .unwrap_or_default()
    }

    fn value(&self) -> Value {
        match self.node {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::Str { .. } | Node::Decoded { .. } => {
                Value::String(self.as_str().unwrap_or_default().to_owned())
            }
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

/// What follows the value `node` at index `at` among `rest`, the nodes after
/// it, and that rest's first index: past its descendants for a container.
/// Walking the descendants as a shrinking slice checks one length a member
/// instead of an index a node read (about a third fewer instructions a
/// member in `ObjectRef::find`, which `jsonschema` calls for `required` and
/// for `properties` on wide objects).
#[inline]
pub(super) fn after<'b>(node: &Node, at: usize, rest: &'b [Node]) -> Option<(&'b [Node], usize)> {
    match node {
        Node::Array { next, .. } | Node::Object { next, .. } => {
            let next = *next as usize;
            Some((rest.get(next.checked_sub(at + 1)?..)?, next))
        }
        _ => Some((rest, at + 1)),
    }
}

/// An object inside a [`Doc`].
#[derive(Debug, Clone)]
pub struct ObjectRef<'b> {
    doc: &'b Doc,
    /// The members' nodes (name, value and the value's descendants each).
    nodes: &'b [Node],
    /// The index of `nodes[0]` in the document.
    first: usize,
    len: usize,
    /// Where in `nodes` the next [`ObjectRef::find`] starts: just past the
    /// member found last (a member's start, or the end). `jsonschema` asks
    /// one object for several names, mostly in the order the answer holds
    /// them (a listing's `required` then `properties`: `status`,
    /// `updated_at`, `condition`, `status`, `updated_at` of ~31 members), so
    /// a lookup that resumes there and wraps around reads about a quarter
    /// fewer members than one from the start. A document never repeats a
    /// member name (the reader refuses it), so where a lookup starts does
    /// not change what it finds.
    resume: Cell<usize>,
}

impl<'b> ObjectRef<'b> {
    fn find(&self, name: &str) -> Option<NodeRef<'b>> {
        let from = self.resume.get();
        let (before, after) = self.nodes.split_at_checked(from)?;
        let name = name.as_bytes();
        let (found, next) = self
            .scan(after, self.first + from, name)
            .or_else(|| self.scan(before, self.first, name))?;
        self.resume.set(next - self.first);
        Some(found)
    }

    /// The value of the first member named `name` in `nodes` (whole members,
    /// `nodes[0]` at index `at`), and the index just past it.
    fn scan(
        &self,
        mut nodes: &'b [Node],
        mut at: usize,
        name: &[u8],
    ) -> Option<(NodeRef<'b>, usize)> {
        // `jsonschema` looks names up often (`properties`, `required`):
        // compare lengths before bytes, without building each name's `&str`
        // (or slice: going through `json::node_bytes` validated ~5 % slower),
        // and first bytes before calling `memcmp` (names of equal length
        // mostly differ there: a search's lookups made ~45 calls that missed).
        let doc = self.doc;
        let text: &[u8] = doc.text.as_bytes();
        while let [key, value, tail @ ..] = nodes {
            let hit = match key {
                Node::Str { start, end } => {
                    end.wrapping_sub(*start) as usize == name.len()
                        && text
                            .get(*start as usize..*end as usize)
                            .is_some_and(|t| t.first() == name.first() && t == name)
                }
                Node::Decoded { .. } => doc.str_of(key).is_some_and(|t| t.as_bytes() == name),
                _ => return None,
            };
            if hit {
                let found = NodeRef {
                    doc,
                    node: value,
                    at: at + 1,
                };
                return Some((found, after(value, at + 1, tail)?.1));
            }
            (nodes, at) = after(value, at + 1, tail)?;
        }
        None
    }

    fn members(&self) -> Members<'b> {
        Members {
            doc: self.doc,
            rest: self.nodes,
            at: self.first,
        }
    }
}

/// The members of an object in document order.
pub struct Members<'b> {
    doc: &'b Doc,
    rest: &'b [Node],
    /// The index of `rest[0]`.
    at: usize,
}

impl<'b> Iterator for Members<'b> {
    type Item = (&'b str, NodeRef<'b>);
    // `jsonschema` walks every object's members with this (a search: about
    // 300 a call); out of line it cost about 5,000 instructions a search.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let [key, value, tail @ ..] = self.rest else {
            return None;
        };
        let name = self.doc.str_of(key)?;
        let item = NodeRef {
            doc: self.doc,
            node: value,
            at: self.at + 1,
        };
        (self.rest, self.at) = after(value, self.at + 1, tail)?;
        Some((name, item))
    }
}

/// An array inside a [`Doc`].
#[derive(Debug, Clone, Copy)]
pub struct ArrayRef<'b> {
    doc: &'b Doc,
    /// The elements' nodes, descendants included.
    nodes: &'b [Node],
    /// The index of `nodes[0]` in the document.
    first: usize,
    len: usize,
}

impl<'b> ArrayRef<'b> {
    fn elements(&self) -> Elements<'b> {
        Elements {
            doc: self.doc,
            rest: self.nodes,
            at: self.first,
        }
    }
}

/// The elements of an array in order.
pub struct Elements<'b> {
    doc: &'b Doc,
    rest: &'b [Node],
    /// The index of `rest[0]`.
    at: usize,
}

impl<'b> Iterator for Elements<'b> {
    type Item = NodeRef<'b>;
    fn next(&mut self) -> Option<NodeRef<'b>> {
        let [node, tail @ ..] = self.rest else {
            return None;
        };
        let item = NodeRef {
            doc: self.doc,
            node,
            at: self.at,
        };
        (self.rest, self.at) = after(node, self.at, tail)?;
        Some(item)
    }
}

/// Where `jsonschema` puts a member name it validates as a value
/// (`propertyNames`).
#[derive(Debug)]
pub struct NameScratch(Doc);

impl Default for NameScratch {
    fn default() -> Self {
        NameScratch(Doc::from_parts(
            ByteString::new(),
            0..0,
            vec![Node::Str { start: 0, end: 0 }],
            String::new(),
            false,
        ))
    }
}

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
        let doc = &mut buffer.0;
        // `propertyNames` only: not on a call's path (the AAP schemas have none).
        doc.text = ByteString::from(string);
        doc.span = 0..string.len();
        doc.nodes.clear();
        // A name here is a member name of a document the reader read, and
        // the reader refuses texts whose offsets do not fit `u32`.
        let end = u32::try_from(string.len()).unwrap_or(u32::MAX);
        doc.nodes.push(Node::Str { start: 0, end });
        f(doc.root())
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
        match self.node {
            Node::Number(n) => Some(n),
            _ => None,
        }
    }
    fn as_boolean(&self) -> Option<bool> {
        match self.node {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self.node, Node::Null)
    }
    fn json_type(&self) -> jsonschema::JsonType {
        use jsonschema::JsonType;
        match self.node {
            Node::Null => JsonType::Null,
            Node::Bool(_) => JsonType::Boolean,
            Node::Number(_) => JsonType::Number,
            Node::Str { .. } | Node::Decoded { .. } => JsonType::String,
            Node::Array { .. } => JsonType::Array,
            Node::Object { .. } => JsonType::Object,
        }
    }
    fn is_string(&self) -> bool {
        matches!(self.node, Node::Str { .. } | Node::Decoded { .. })
    }
    fn is_number(&self) -> bool {
        matches!(self.node, Node::Number(_))
    }
    fn string_length_within(&self, min: u64, max: u64) -> Option<bool> {
        // An unescaped string's byte length is its range's, so bounds it
        // settles (`maxLength` on every short string of an answer) need not
        // read the text; a code point takes 1 to 4 bytes.
        let bytes = match self.node {
            Node::Str { start, end } => self
                .doc
                .text
                .as_bytes()
                .get(*start as usize..*end as usize)?,
            // Spelled out rather than through `Doc::str_of`: that call kept this
            // function from being inlined into `maxLength`'s check (+1,400
            // instructions a search).
            Node::Decoded { start, end } => self
                .doc
                .decoded
                .as_bytes()
                .get(*start as usize..*end as usize)?,
            _ => return None,
        };
        let most = bytes.len() as u64;
        let fewest = most.div_ceil(4);
        if most < min || fewest > max {
            return Some(false);
        }
        if min <= fewest && most <= max {
            return Some(true);
        }
        // The text is UTF-8, so its code points are its bytes other than
        // continuation bytes (`10xxxxxx`).
        let chars = bytes.iter().filter(|&&b| (b as i8) >= -0x40).count() as u64;
        Some((min..=max).contains(&chars))
    }
    fn to_value(&self) -> Cow<'a, Value> {
        Cow::Owned(self.value())
    }
    fn identity(&self) -> Option<jsonschema::json::NodeIdentity> {
        // Every node has its own slot in the array.
        Some(jsonschema::json::NodeIdentity::new(
            std::ptr::from_ref(self.node) as usize,
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
    use jsonschema::json::Node as _;

    #[test]
    fn refuses_what_serde_json_refuses_and_repeated_names() {
        for bad in [
            r#"{"a":1,"a":1}"#,
            r#"{"v":[{"x":1,"y":2,"x":3}]}"#,
            r#"{"a":1,"b":{"c":[1,2]},"a":2}"#,
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
        // An escaped name equal to a plain one is the same name.
        assert!(Doc::parse(r#"{"ab":1,"a\u0062":2}"#).is_err());
        // Many names sharing a signature, none repeated.
        let many: Vec<String> = (0..200).map(|i| format!("\"k{i:03}\":{i}")).collect();
        assert!(Doc::parse(&format!("{{{}}}", many.join(","))).is_ok());
        let with_repeat = format!("{{{},\"k007\":0}}", many.join(","));
        assert!(Doc::parse(&with_repeat).is_err());
        // Every name repeated once, at the end and in the middle.
        for i in 0..many.len() {
            let name = format!("\"k{i:03}\":0");
            let at_end = format!("{{{},{name}}}", many.join(","));
            assert!(Doc::parse(&at_end).is_err(), "k{i:03} at the end");
            let mut spliced = many.clone();
            spliced.insert(100.max(i + 1), name);
            assert!(
                Doc::parse(&format!("{{{}}}", spliced.join(","))).is_err(),
                "k{i:03} inside"
            );
        }
    }

    #[test]
    fn escaped_strings_share_one_decoded_text() {
        // Nodes own no memory, so dropping a document never visits them.
        assert!(!std::mem::needs_drop::<Node>());
        let text = r#"{"a\u0062":"x\ny","plain":"p","list":["\u00e9","\"q\"",{"\u0063":"\\"}]}"#;
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.decoded, "abx\nyé\"q\"c\\");
        let root = doc.root();
        assert_eq!(root.member("ab").and_then(|v| v.as_str()), Some("x\ny"));
        assert_eq!(root.member("plain").and_then(|v| v.as_str()), Some("p"));
        let list = root.member("list").unwrap().array().unwrap();
        let items: Vec<Value> = list.elements().map(|e| e.value()).collect();
        assert_eq!(
            items,
            [
                Value::from("é"),
                Value::from("\"q\""),
                serde_json::json!({"c": "\\"})
            ]
        );
        assert_eq!(doc.to_value(), serde_json::from_str::<Value>(text).unwrap());
        // A decoded name is compared with later names through the same text.
        assert!(Doc::parse(r#"{"x":{"a\u0062":1,"ab":2}}"#).is_err());
        assert!(Doc::parse(r#"{"x":{"a\u0062":1,"a\u0063":2}}"#).is_ok());
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
        let text = r#" {"a":[1,{"b":[[],{}],"c":"x"},3],"d":{"e":null},"f":true} "#;
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.raw(), text.trim());
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

    /// The adapter's view of a node, built only through the trait methods
    /// `jsonschema` calls, with every member also looked up by name.
    fn through_adapter(node: NodeRef<'_>) -> Value {
        use jsonschema::json::{Array as _, Object as _};
        if let Some(object) = node.as_object() {
            let mut map = serde_json::Map::new();
            for (name, value) in object.members() {
                let found = object
                    .get(&name.to_owned())
                    .expect("a member is found by its name");
                assert_eq!(found.at, value.at, "{name}");
                assert!(std::ptr::eq(found.node, value.node), "{name}");
                map.insert(name.to_owned(), through_adapter(value));
            }
            assert_eq!(object.len(), map.len());
            assert!(object.get(&"no such member".to_owned()).is_none());
            // Lookups resume after the last member found: any order finds
            // every member, on the same handle as on a fresh one.
            let names: Vec<String> = map.keys().cloned().collect();
            for name in names.iter().rev().chain(names.iter().step_by(2)) {
                let again = object.get(name).expect("found again");
                let fresh = node.as_object().and_then(|o| o.get(name));
                assert_eq!(Some(again.at), fresh.map(|f| f.at), "{name}");
                assert!(object.get(&format!("{name}?")).is_none());
            }
            return Value::Object(map);
        }
        if let Some(array) = node.as_array() {
            let items: Vec<Value> = array.elements().map(through_adapter).collect();
            assert_eq!(array.len(), items.len());
            return Value::Array(items);
        }
        assert_eq!(node.is_string(), node.as_string().is_some());
        assert_eq!(node.is_number(), node.as_number().is_some());
        node.value()
    }

    #[test]
    fn members_and_elements_skip_nested_containers() {
        for text in [
            r#"{"a":[1,{"b":[[],{}],"c":"x"},3],"d":{"e":null},"f":true}"#,
            r#"{"x":{},"y":[],"z":[[[]]],"w":{"v":{"u":{}}},"t":"é\u00e9","s\u0074":2}"#,
            r#"[[],{},[{}],{"a":[]},1,"two",null,false,{"k":{"k":{"k":1}}}]"#,
            r#"{"vehicles":[{"vin":"1","fees":[{"name":"n","amount":1}],"price":5},{"vin":"2","photos":["p"]}],"total":2}"#,
            r#"{}"#,
            r#"[]"#,
            r#""alone""#,
        ] {
            let doc = Doc::parse(text).unwrap();
            assert_eq!(
                through_adapter(doc.root()),
                serde_json::from_str::<Value>(text).unwrap(),
                "{text}"
            );
        }
    }

    #[test]
    fn string_length_bounds_count_code_points() {
        let doc = Doc::parse(r#"["abcd","éééé","🚗🚗",""]"#).unwrap();
        let items: Vec<NodeRef<'_>> = doc.root().array().unwrap().elements().collect();
        for item in &items {
            let chars = item.as_str().unwrap().chars().count() as u64;
            for min in 0..6 {
                for max in min..9 {
                    assert_eq!(
                        item.string_length_within(min, max),
                        Some((min..=max).contains(&chars)),
                        "{:?} {min}..={max}",
                        item.as_str()
                    );
                }
            }
        }
        assert_eq!(doc.root().string_length_within(0, 1), None);
    }
}
