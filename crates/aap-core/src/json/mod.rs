//! Strict, fast reading of JSON answers from upstreams.
//!
//! A strict MCP upstream answers a search with a JSON-RPC frame of ~13 KB:
//! the payload as `structuredContent` and again, escaped, as the text block.
//! `serde_json` reads that correctly but pays a branch per escape in the text
//! block and builds a tree with a `String` per key. This module reads it in
//! one pass with [`Reader`]: strings are scanned 64 bytes at a time
//! ([`scan`]), skipped values only report their span, and a payload becomes a
//! [`Doc`] that borrows every string without escapes.
//!
//! [`Reader::doc`] takes a fast path first (`json/fast.rs`: one tight loop that
//! reads a well-formed value or declines) and falls back to the reference
//! reader (`Reader::doc_into`) for any value it declines, so errors and
//! their offsets are the reference's; on the search answer, reading the
//! `structuredContent` went from 60,380 to 46,889 instructions and
//! skipping the text block (AVX2 blocks, [`scan`]) from ~13,800 to ~9,000.
//!
//! The grammar is `serde_json`'s, checked against it by tests and by a
//! differential fuzz target (`fuzz/fuzz_targets/json_reader.rs`): the same
//! documents are accepted, including the nesting limit, and decoded
//! to equal values. It is stricter in two places: a [`Doc`] refuses an
//! object that repeats a member name, since the text is passed on and the
//! client's parser might read the other member than the one validated; and
//! a skipped value obeys the nesting limit too (`serde_json` skips without
//! one).

mod doc;
mod fast;
pub mod scan;
mod write;

use doc::Node;
pub use doc::{ArrayRef, Doc, DocJson, Elements, Members, NameScratch, NodeRef, ObjectRef};
use std::ops::Range;
pub use write::write_str;

use bytestring::ByteString;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;

/// [`Error::what`] when an object names a member twice ([`Doc`], [`Reader::value`]).
pub const REPEATED_NAME: &str = "an object repeats a member name";
/// [`Error::what`] when a value nests deeper than the limit.
pub const TOO_DEEP: &str = "nesting too deep";

/// Containers nest at most this deep (`serde_json` refuses the 128th level).
pub const MAX_DEPTH: usize = 127;

/// Why a text is not (acceptable) JSON, and the byte offset where that
/// became clear. Never quotes the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub what: &'static str,
    pub at: usize,
}

impl Error {
    pub fn new(what: &'static str, at: usize) -> Error {
        Error { what, at }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for Error {}

/// A cursor over one JSON text.
///
/// ```
/// use aap_core::json::Reader;
/// let mut r = Reader::new(r#" {"id": 7, "result": {"text": "a\"b"}} "#);
/// let mut result = None;
/// r.object(|r, key| {
///     if key == "result" {
///         result = Some(r.skip()?);
///     } else {
///         r.skip()?;
///     }
///     Ok(())
/// })
/// .unwrap();
/// r.finish().unwrap();
/// assert_eq!(result, Some(r#"{"text": "a\"b"}"#));
/// ```
pub struct Reader<'a> {
    text: &'a str,
    /// The shared buffer `text` is, when the reader was made over one
    /// ([`Reader::shared`]): a [`Doc`] then shares it instead of copying it.
    owner: Option<&'a ByteString>,
    pos: usize,
    depth: usize,
    /// Containers deeper than this must be empty (see `with_depth_left`);
    /// none may be deeper than [`MAX_DEPTH`].
    filled_depth: usize,
    /// Whether the [`Doc`] being read holds a number written with a
    /// fraction or an exponent ([`Doc::has_integral_float`] looks no
    /// further when it does not).
    floats: bool,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text,
            owner: None,
            pos: 0,
            depth: 0,
            filled_depth: usize::MAX,
            floats: false,
        }
    }

    /// Read the text as a value with `depth_left` levels left under a
    /// depth limit, counted as `mcp::jsonrpc`'s strict parser counts them:
    /// elements may sit at most `depth_left` levels below the value (so an
    /// empty container may sit one level deeper). Never deeper than
    /// [`MAX_DEPTH`].
    pub fn with_depth_left(mut self, depth_left: usize) -> Reader<'a> {
        self.filled_depth = depth_left;
        self
    }

    /// Called at a container's first element.
    fn may_fill(&self) -> Result<(), Error> {
        if self.depth > self.filled_depth {
            return Err(self.error(TOO_DEEP));
        }
        Ok(())
    }

    /// A reader over a shared, UTF-8 buffer: the documents it reads
    /// ([`Reader::doc`]) share the buffer rather than copy it.
    ///
    /// ```
    /// use aap_core::json::Reader;
    /// let text = bytestring::ByteString::from(r#"{"a": ["x", 1]}"#);
    /// let doc = Reader::shared(&text).doc().unwrap();
    /// assert_eq!(doc.raw(), r#"{"a": ["x", 1]}"#);
    /// ```
    pub fn shared(text: &'a ByteString) -> Reader<'a> {
        Reader {
            owner: Some(text),
            ..Reader::new(text)
        }
    }

    /// A reader over bytes that must be UTF-8 (checked once, up front).
    pub fn from_slice(bytes: &'a [u8]) -> Result<Reader<'a>, Error> {
        std::str::from_utf8(bytes)
            .map(Reader::new)
            .map_err(|e| Error::new("invalid UTF-8", e.valid_up_to()))
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes().get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next significant byte, if any (whitespace is consumed).
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        // Answers are mostly compact: the next byte is usually the one.
        match self.bytes().get(self.pos) {
            Some(&b) if b > b' ' => Some(b),
            _ => {
                self.skip_whitespace();
                self.bytes().get(self.pos).copied()
            }
        }
    }

    fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), Error> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    /// An error at the cursor.
    pub fn error(&self, what: &'static str) -> Error {
        Error::new(what, self.pos)
    }

    /// Only whitespace may follow the value read.
    pub fn finish(mut self) -> Result<(), Error> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("trailing characters")),
        }
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(TOO_DEEP));
        }
        Ok(())
    }

    /// Validate the next value and return its text.
    pub fn skip(&mut self) -> Result<&'a str, Error> {
        let start = match self.peek() {
            Some(_) => self.pos,
            None => return Err(self.error("expected a value")),
        };
        self.skip_value()?;
        Ok(&self.text[start..self.pos])
    }

    fn skip_value(&mut self) -> Result<(), Error> {
        match self.peek() {
            Some(b'"') => self.string_span().map(|_| ()),
            // Names are checked, not decoded (as `serde_json` skips them).
            Some(b'{') => self.object_with(
                &mut (),
                |r, ()| r.string_range().map(drop),
                |r, (), ()| r.skip_value(),
            ),
            Some(b'[') => self.array(|r| r.skip_value()),
            Some(b'-' | b'0'..=b'9') => self.number_span().map(|_| ()),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            _ => Err(self.error("expected a value")),
        }
    }

    /// Read the value at the cursor into a `serde_json::Value`, as strictly
    /// as [`Reader::doc`]: an object that repeats a member name is refused
    /// and the depth limit holds. Numbers are read as `serde_json` reads them.
    ///
    /// ```
    /// use aap_core::json::Reader;
    /// let v = Reader::new(r#"{"a": [1, "x", null]}"#).value().unwrap();
    /// assert_eq!(v, serde_json::json!({"a": [1, "x", null]}));
    /// assert!(Reader::new(r#"{"a": 1, "a": 2}"#).value().is_err());
    /// ```
    pub fn value(&mut self) -> Result<Value, Error> {
        match self.peek() {
            Some(b'"') => self.string().map(|s| Value::String(s.into_owned())),
            Some(b'{') => {
                let mut map = Map::new();
                self.object_with(
                    &mut map,
                    |r, _| {
                        let at = r.pos;
                        r.string().map(|name| (name, at))
                    },
                    |r, map, (name, at)| match map.entry(name.into_owned()) {
                        serde_json::map::Entry::Vacant(slot) => {
                            slot.insert(r.value()?);
                            Ok(())
                        }
                        serde_json::map::Entry::Occupied(_) => Err(Error::new(REPEATED_NAME, at)),
                    },
                )?;
                Ok(Value::Object(map))
            }
            Some(b'[') => {
                let mut items = Vec::new();
                self.array(|r| {
                    items.push(r.value()?);
                    Ok(())
                })?;
                Ok(Value::Array(items))
            }
            Some(b'-' | b'0'..=b'9') => {
                let at = self.pos;
                let (span, integer) = self.number_span()?;
                number(span, integer)
                    .map(Value::Number)
                    .ok_or(Error::new("number out of range", at))
            }
            Some(b't') => self.literal("true").map(|()| Value::Bool(true)),
            Some(b'f') => self.literal("false").map(|()| Value::Bool(false)),
            Some(b'n') => self.literal("null").map(|()| Value::Null),
            _ => Err(self.error("expected a value")),
        }
    }

    /// Read the value at the cursor into a [`Doc`], which keeps the whole
    /// text the reader reads (its strings are ranges of it): the shared
    /// buffer of a [`Reader::shared`], otherwise a copy.
    pub fn doc(&mut self) -> Result<Doc, Error> {
        let start = match self.peek() {
            Some(_) => self.pos,
            None => return Err(self.error("expected a value")),
        };
        if u32::try_from(self.text.len()).is_err() {
            return Err(self.error("document too large"));
        }
        // A rough guess (a node per ~12 bytes) saves most regrowth.
        let mut nodes = Vec::with_capacity((self.text.len() - start) / 12 + 1);
        let mut decoded = String::new();
        let depth = self.depth;
        self.floats = false;
        if self.doc_fast(&mut nodes, &mut decoded).is_none() {
            // Not read by the fast path: the reference reader decides.
            nodes.clear();
            decoded.clear();
            self.pos = start;
            self.depth = depth;
            self.floats = false;
            self.doc_into(&mut nodes, &mut decoded)?;
        }
        Ok(self.doc_from(start, nodes, decoded))
    }

    fn doc_from(&self, start: usize, nodes: Vec<Node>, decoded: String) -> Doc {
        let text = match self.owner {
            Some(owner) => owner.clone(),
            None => ByteString::from(self.text),
        };
        Doc::from_parts(text, start..self.pos, nodes, decoded, self.floats)
    }

    /// For the differential tests and the fuzz target: the value at the
    /// cursor read by the fast path alone (`None` where it declines) and,
    /// from the same place, by the reference reader alone.
    #[doc(hidden)]
    pub fn doc_both(self) -> (Option<DocRead>, Result<DocRead, Error>) {
        let (mut fast, mut reference) = (Reader { ..self }, self);
        let start = match reference.peek() {
            Some(_) => reference.pos,
            None => return (None, Err(reference.error("expected a value"))),
        };
        fast.pos = start;
        let (mut nodes, mut decoded) = (Vec::new(), String::new());
        let fast = fast
            .doc_fast(&mut nodes, &mut decoded)
            .map(|()| (fast.doc_from(start, nodes, decoded), fast.pos));
        let (mut nodes, mut decoded) = (Vec::new(), String::new());
        let reference = reference
            .doc_into(&mut nodes, &mut decoded)
            .map(|()| (reference.doc_from(start, nodes, decoded), reference.pos));
        (fast, reference)
    }

    /// Append the next value to a [`Doc`]'s nodes (offsets fit `u32`:
    /// checked by [`Reader::doc`]).
    ///
    /// One loop over the values with the open containers on a stack of its
    /// own, rather than a call per value (the recursive form paid a call, a
    /// closure and a `Result` per member): with the inlining below, a search
    /// answer's whole read went from 102,673 to 81,210 instructions in the
    /// gateway under callgrind.
    /// It decides exactly as [`Reader::skip`] does (the same errors at the
    /// same places, the same depth rules), plus the repeated-name check.
    fn doc_into(&mut self, nodes: &mut Vec<Node>, decoded: &mut String) -> Result<(), Error> {
        let mut open: Vec<Open> = Vec::new();
        'value: loop {
            match self.peek() {
                Some(b'"') => self.push_string(nodes, decoded)?,
                Some(b @ (b'{' | b'[')) => {
                    let object = b == b'{';
                    self.pos += 1;
                    self.enter()?;
                    let at = nodes.len();
                    push(nodes, container(object, 0, 0));
                    if self.peek() == Some(if object { b'}' } else { b']' }) {
                        self.pos += 1;
                        self.depth -= 1;
                        nodes[at] = container(object, 0, nodes.len() as u32);
                    } else {
                        self.may_fill()?;
                        let mut top = Open {
                            at,
                            len: 1,
                            seen: 0,
                            object,
                        };
                        if object {
                            self.member_name(nodes, decoded, &mut top)?;
                        }
                        open.push(top);
                        continue 'value;
                    }
                }
                Some(b'-' | b'0'..=b'9') => {
                    let at = self.pos;
                    let (span, integer) = self.number_span()?;
                    let n = number(span, integer).ok_or(Error::new("number out of range", at))?;
                    self.floats |= !integer;
                    push(nodes, Node::Number(n));
                }
                Some(b't') => {
                    self.literal("true")?;
                    push(nodes, Node::Bool(true));
                }
                Some(b'f') => {
                    self.literal("false")?;
                    push(nodes, Node::Bool(false));
                }
                Some(b'n') => {
                    self.literal("null")?;
                    push(nodes, Node::Null);
                }
                _ => return Err(self.error("expected a value")),
            }
            // A value was read: close the containers that end after it, or
            // go on to the next member or element.
            while let Some(top) = open.last_mut() {
                match (self.peek(), top.object) {
                    (Some(b','), _) => {
                        self.pos += 1;
                        top.len += 1;
                        if top.object {
                            self.member_name(nodes, decoded, top)?;
                        }
                        continue 'value;
                    }
                    (Some(b'}'), true) | (Some(b']'), false) => {
                        self.pos += 1;
                        self.depth -= 1;
                        nodes[top.at] = container(top.object, top.len, nodes.len() as u32);
                        open.pop();
                    }
                    (_, true) => return Err(self.error("expected ',' or '}'")),
                    (_, false) => return Err(self.error("expected ',' or ']'")),
                }
            }
            return Ok(());
        }
    }

    /// A member's name and its `:`, the name pushed as a node; refused when
    /// it repeats an earlier name of the object `top`.
    #[inline(always)]
    fn member_name(
        &mut self,
        nodes: &mut Vec<Node>,
        decoded: &mut String,
        top: &mut Open,
    ) -> Result<(), Error> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expected a member name"));
        }
        let name_at = self.pos;
        self.push_string(nodes, decoded)?;
        self.expect(b':', "expected ':'")?;
        // One bit per name signature seen so far: only a name whose bit is
        // already set is compared with the earlier names, so distinct names
        // (the normal case) rarely cost comparisons (a 31-member vehicle:
        // about 3 scans instead of 31).
        let key = nodes.len() - 1;
        let text = self.text.as_bytes();
        let bit = 1u128 << signature(node_bytes(text, decoded, &nodes[key]));
        if top.seen & bit != 0 && repeats(nodes, text, decoded, top.at, key) {
            return Err(Error::new(REPEATED_NAME, name_at));
        }
        top.seen |= bit;
        Ok(())
    }

    /// Push the string at the cursor as a node: its range, or decoded.
    /// (Pushed in place: a `Node` returned by value costs a slow copy.)
    #[inline(always)]
    fn push_string(&mut self, nodes: &mut Vec<Node>, decoded: &mut String) -> Result<(), Error> {
        let at = self.pos;
        let (range, escaped) = self.string_range()?;
        if !escaped {
            push(
                nodes,
                Node::Str {
                    start: range.start as u32,
                    end: range.end as u32,
                },
            );
            return Ok(());
        }
        let raw = self.text.get(range).unwrap_or_default();
        let node = decode_into(raw, decoded).map_err(|what| Error::new(what, at))?;
        push(nodes, node);
        Ok(())
    }

    /// Read an object, calling `member` with the reader positioned at each
    /// member's value, which `member` must consume.
    pub fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.object_with(&mut (), |r, ()| r.string(), |r, (), name| member(r, name))
    }

    /// Read an object whose members named in `names` go to `member` with
    /// the name's index, each at most once (a second one is an error);
    /// other members are skipped.
    ///
    /// ```
    /// use aap_core::json::Reader;
    /// let mut id = None;
    /// let mut r = Reader::new(r#"{"x": [1], "id": "a"}"#);
    /// r.known_members(["id"], |r, _| Ok(id = Some(r.string()?))).unwrap();
    /// assert_eq!(id.as_deref(), Some("a"));
    /// let mut r = Reader::new(r#"{"id": "a", "id": "b"}"#);
    /// assert!(r.known_members(["id"], |r, _| r.skip().map(drop)).is_err());
    /// ```
    pub fn known_members<const N: usize>(
        &mut self,
        names: [&str; N],
        mut member: impl FnMut(&mut Self, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut seen = [false; N];
        self.object(|r, name| {
            let Some(i) = names.iter().position(|n| *n == name) else {
                return r.skip().map(drop);
            };
            if std::mem::replace(&mut seen[i], true) {
                return Err(r.error("a member is named twice"));
            }
            member(r, i)
        })
    }

    /// An object whose names are read by `name` (decoded, pushed as nodes,
    /// or only checked); `state` is lent to both callbacks in turn.
    fn object_with<S, K>(
        &mut self,
        state: &mut S,
        mut name: impl FnMut(&mut Self, &mut S) -> Result<K, Error>,
        mut member: impl FnMut(&mut Self, &mut S, K) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.expect(b'{', "expected an object")?;
        self.enter()?;
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        self.may_fill()?;
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let key = name(self, state)?;
            self.expect(b':', "expected ':'")?;
            member(self, state, key)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Result<(), Error>) -> Result<(), Error> {
        self.expect(b'[', "expected an array")?;
        self.enter()?;
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        self.may_fill()?;
        loop {
            item(self)?;
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    /// Read a string value, decoded (borrowed when it holds no escape).
    pub fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        let at = self.pos;
        let (raw, escaped) = self.string_span()?;
        if !escaped {
            return Ok(Cow::Borrowed(raw));
        }
        unescape(raw)
            .map(Cow::Owned)
            .map_err(|what| Error::new(what, at))
    }

    /// The raw content of the string at the cursor, between its quotes.
    fn string_span(&mut self) -> Result<(&'a str, bool), Error> {
        let (range, escaped) = self.string_range()?;
        // Both ends sit at ASCII quotes, so this slice is on char boundaries.
        let raw = self
            .text
            .get(range.clone())
            .ok_or(Error::new("invalid UTF-8", range.start))?;
        Ok((raw, escaped))
    }

    /// Where the content of the string at the cursor is, and whether it
    /// holds escapes.
    #[inline(always)]
    fn string_range(&mut self) -> Result<(Range<usize>, bool), Error> {
        self.expect(b'"', "expected a string")?;
        let start = self.pos;
        let end = scan::string_end(self.bytes(), start)?;
        self.pos = end.close + 1;
        Ok((start..end.close, end.escaped))
    }

    /// The text of the number at the cursor, and whether it is an integer
    /// (no fraction, no exponent).
    fn number_span(&mut self) -> Result<(&'a str, bool), Error> {
        let b = self.bytes();
        let start = self.pos;
        let mut i = start;
        let digits = |mut i: usize| {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digits(i),
            _ => return Err(Error::new("invalid number", i)),
        }
        let mut integer = true;
        if b.get(i) == Some(&b'.') {
            integer = false;
            let after = digits(i + 1);
            if after == i + 1 {
                return Err(Error::new("invalid number", after));
            }
            i = after;
        }
        if let Some(b'e' | b'E') = b.get(i) {
            integer = false;
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let after = digits(i);
            if after == i {
                return Err(Error::new("invalid number", after));
            }
            i = after;
        }
        // A digit straight after a leading zero (`01`) is not JSON.
        if b.get(i).is_some_and(u8::is_ascii_digit) {
            return Err(Error::new("invalid number", i));
        }
        self.pos = i;
        // ASCII only between `start` and `i`.
        let span = self
            .text
            .get(start..i)
            .ok_or(Error::new("invalid number", start))?;
        Ok((span, integer))
    }

    fn literal(&mut self, word: &'static str) -> Result<(), Error> {
        if self
            .text
            .get(self.pos..)
            .is_some_and(|rest| rest.starts_with(word))
        {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error("invalid literal"))
        }
    }
}

/// A document read and the byte after it ([`Reader::doc_both`]).
#[doc(hidden)]
pub type DocRead = (Doc, usize);

/// A container [`Reader::doc_into`] is reading.
struct Open {
    /// Its node's index.
    at: usize,
    /// Members or elements so far.
    len: u32,
    /// For an object, one bit per member-name signature seen ([`signature`]).
    seen: u128,
    object: bool,
}

/// Append `node` to a document's nodes, inline.
///
/// `Vec::push` was left out of line in `Reader::doc_into`'s loop (its
/// `push_mut`: about 2 % of a search's CPU samples, ~350 calls a search);
/// here the common case is a capacity test and a store, and only a full
/// vector calls out (`grow`, cold).
#[inline(always)]
fn push(nodes: &mut Vec<Node>, node: Node) {
    if nodes.len() == nodes.capacity() {
        grow(nodes);
    }
    // `spare_capacity_mut` is not empty: the capacity exceeds the length
    // (grown just above when it did not).
    if let Some(slot) = nodes.spare_capacity_mut().first_mut() {
        slot.write(node);
        // SAFETY: the slot just past the length was initialized above.
        unsafe { nodes.set_len(nodes.len() + 1) };
    }
}

#[cold]
#[inline(never)]
fn grow(nodes: &mut Vec<Node>) {
    nodes.reserve(nodes.len().max(16));
}

/// An object's or array's node.
fn container(object: bool, len: u32, next: u32) -> Node {
    if object {
        Node::Object { len, next }
    } else {
        Node::Array { len, next }
    }
}

/// Decode the escaped string body `raw` onto the end of `decoded` (a
/// document's decoded text), as a node naming its range there.
fn decode_into(raw: &str, decoded: &mut String) -> Result<Node, &'static str> {
    let start = decoded.len();
    if let Err(what) = unescape_onto(raw, decoded) {
        decoded.truncate(start);
        return Err(what);
    }
    // Decoding never lengthens a string, so the decoded text of a document
    // whose offsets fit `u32` (checked by `Reader::doc`) fits too.
    Ok(Node::Decoded {
        start: start as u32,
        end: decoded.len() as u32,
    })
}

/// The text of a string node (`decoded`: the document's decoded text).
fn node_bytes<'t>(text: &'t [u8], decoded: &'t str, node: &'t Node) -> &'t [u8] {
    match node {
        Node::Str { start, end } => text.get(*start as usize..*end as usize).unwrap_or_default(),
        Node::Decoded { start, end } => decoded
            .as_bytes()
            .get(*start as usize..*end as usize)
            .unwrap_or_default(),
        _ => b"",
    }
}

/// Whether the name pushed at `nodes[key]` repeats an earlier member
/// name of the object whose node is `nodes[at]` (still being read).
/// Names compare as bytes: equal strings are equal byte strings.
fn repeats(nodes: &[Node], text: &[u8], decoded: &str, at: usize, key: usize) -> bool {
    let (Some(name), Some(mut members)) = (
        nodes.get(key).map(|n| node_bytes(text, decoded, n)),
        nodes.get(at + 1..key),
    ) else {
        return false;
    };
    let mut i = at + 1;
    while let [member, value, tail @ ..] = members {
        if node_bytes(text, decoded, member) == name {
            return true;
        }
        let Some(next) = doc::after(value, i + 1, tail) else {
            break;
        };
        (members, i) = next;
    }
    false
}

/// A 7-bit digest of a member name: its length and first, middle and last
/// bytes, mixed by a multiplicative (Fibonacci) hash and read from the top.
fn signature(name: &[u8]) -> u32 {
    let n = name.len();
    let byte = |i: usize| u32::from(name.get(i).copied().unwrap_or(0));
    let key = (n as u32) ^ (byte(0) << 8) ^ (byte(n / 2) << 16) ^ (byte(n.wrapping_sub(1)) << 24);
    key.wrapping_mul(0x9E37_79B1) >> 25
}

/// A number written as a float that is a whole number within ±2^53
/// (`18999.0`), and that integer. The gateway sends such numbers as
/// integers (`upstream::normalize_numbers`).
pub fn integral_float(n: &Number) -> Option<i64> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0).then_some(f as i64)
}

/// A number's value as `serde_json` reads it: integers as `u64`/`i64` when
/// they fit, else (and for fractions and exponents) the nearest `f64`;
/// `None` when that is not finite. `-0` is the float `-0.0`, as in
/// `serde_json`.
fn number(span: &str, integer: bool) -> Option<Number> {
    if integer {
        let (negative, digits) = match span.strip_prefix('-') {
            Some(digits) => (true, digits),
            None => (false, span),
        };
        // Up to 19 digits cannot overflow a `u64`; the span holds only
        // digits here (`number_span`). Summed by hand: `str::parse` costs
        // about twice as much per number on an answer's short integers.
        if digits.len() <= 19 {
            let magnitude = digits.bytes().fold(0u64, |n, d| {
                n.wrapping_mul(10)
                    .wrapping_add(u64::from(d.wrapping_sub(b'0')))
            });
            match (negative, magnitude) {
                (false, n) => return Some(Number::from(n)),
                (true, 0) => {} // `-0`: a float
                (true, n) if n <= 1 << 63 => {
                    return Some(Number::from(0i64.wrapping_sub(n as i64)))
                }
                (true, _) => {} // below `i64::MIN`: a float
            }
        } else if !negative {
            if let Ok(n) = span.parse::<u64>() {
                return Some(Number::from(n));
            }
        }
    }
    span.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .and_then(Number::from_f64)
}

/// Decode the escapes of a string's raw content (already scanned, so every
/// escape is well-formed; surrogates are paired here).
fn unescape(raw: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(raw.len());
    unescape_onto(raw, &mut out)?;
    Ok(out)
}

/// [`unescape`] onto the end of `out` (on an error, `out` holds part of it).
fn unescape_onto(raw: &str, out: &mut String) -> Result<(), &'static str> {
    out.reserve(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let b = rest.as_bytes();
        let (ch, used) = match b.get(i + 1) {
            Some(b'"') => ('"', 2),
            Some(b'\\') => ('\\', 2),
            Some(b'/') => ('/', 2),
            Some(b'b') => ('\u{8}', 2),
            Some(b'f') => ('\u{c}', 2),
            Some(b'n') => ('\n', 2),
            Some(b'r') => ('\r', 2),
            Some(b't') => ('\t', 2),
            Some(b'u') => {
                let high = hex4(rest, i + 2).ok_or("invalid \\u escape")?;
                match high {
                    0xD800..=0xDBFF => {
                        if rest.get(i + 6..i + 8) != Some("\\u") {
                            return Err("lone leading surrogate in hex escape");
                        }
                        let low = hex4(rest, i + 8).ok_or("invalid \\u escape")?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err("lone leading surrogate in hex escape");
                        }
                        let c = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                        (char::from_u32(c).ok_or("invalid \\u escape")?, 12)
                    }
                    0xDC00..=0xDFFF => return Err("lone trailing surrogate in hex escape"),
                    c => (char::from_u32(c).ok_or("invalid \\u escape")?, 6),
                }
            }
            _ => return Err("invalid escape"),
        };
        out.push(ch);
        rest = rest.get(i + used..).ok_or("invalid escape")?;
    }
    out.push_str(rest);
    Ok(())
}

fn hex4(s: &str, at: usize) -> Option<u32> {
    let digits = s.get(at..at + 4)?;
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Read a whole text as a `Doc` and as a skipped value; compare with
    /// `serde_json`.
    fn check(text: &str) {
        let theirs = serde_json::from_str::<Value>(text);
        let ours = Doc::parse(text);
        match (&ours, &theirs) {
            (Ok(d), Ok(v)) => assert!(same(&d.to_value(), v), "{text}: {d:?} vs {v}"),
            (Err(_), Err(_)) => {}
            // Repeated member names are the one deliberate difference.
            (Err(e), Ok(_)) if e.what == "an object repeats a member name" => {}
            _ => panic!("{text:?}: ours {ours:?}, serde_json {theirs:?}"),
        }
        let mut r = Reader::new(text);
        let valued = r.value().and_then(|v| r.finish().map(|()| v));
        match (&valued, &theirs) {
            (Ok(v), Ok(t)) => assert!(same(v, t), "{text}: {v} vs {t}"),
            (Err(_), Err(_)) => {}
            (Err(e), Ok(_)) if e.what == "an object repeats a member name" => {}
            _ => panic!("value {text:?}: ours {valued:?}, serde_json {theirs:?}"),
        }
        let mut r = Reader::new(text);
        let skipped = r.skip().and_then(|s| r.finish().map(|_| s));
        let ignored = serde_json::from_str::<serde::de::IgnoredAny>(text);
        // `serde_json` skips without a nesting limit; this reader keeps it
        // (it recurses), the one place where it is stricter.
        let too_deep = matches!(&skipped, Err(e) if e.what == "nesting too deep");
        assert!(
            skipped.is_ok() == ignored.is_ok() || too_deep,
            "skip {text:?}: {skipped:?}"
        );
    }

    /// Equal, with floats within an ulp or two (`serde_json` parses floats
    /// best-effort unless built with `float_roundtrip`; ours are exact).
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|((k, a), (l, b))| k == l && same(a, b))
            }
            _ => a == b,
        }
    }

    #[test]
    fn agrees_with_serde_json() {
        let deep_ok = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let too_deep = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        let texts = [
            r#"{"type":"x","a":[1,-2,3.5,1e3,18446744073709551615,-9223372036854775808],"b":{"c":null,"d":true,"e":false}}"#,
            r#"{"q":"quote \" backslash \\ slash \/ newline \n tab \t \u00e9 \ud83d\ude97 \b\f\r"}"#,
            "  {\n  \"pretty\" : [ ] ,\n \"o\" : { } }\n",
            "[]",
            r#""just a string""#,
            "0",
            "-0",
            "-0.0",
            "0.5",
            "1E5",
            "1e+5",
            "1e-5",
            "-12.5e-3",
            "18446744073709551616",
            "-9223372036854775809",
            "-9223372036854775807",
            "9999999999999999999",
            "-9999999999999999999",
            "10000000000000000000",
            "-1",
            "[0,-1,7,-42,1234567890123456789]",
            "123456789012345678901234567890",
            "1e308",
            "1e309",
            "-1e400",
            "1e-400",
            "2.2250738585072014e-308",
            "01",
            "-",
            "1.",
            ".5",
            "+1",
            "1e",
            "1e+",
            "--1",
            "0x1",
            "1.5.5",
            "00",
            "tru",
            "truex",
            "nul",
            "null",
            "[1,]",
            "[,1]",
            "{,}",
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            r#"{"a" 1}"#,
            "{1:2}",
            r#"{"a":1"#,
            "[1",
            "",
            " ",
            "[1] x",
            "[1]\n",
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800\u0041""#,
            r#""\ud83d""#,
            r#""\u12""#,
            r#""\x""#,
            "\"raw \u{1} control\"",
            "\"tab\tinside\"",
            r#""\u0000""#,
            // A name is only checked when skipped, decoded when read.
            r#"{"\ud800":1}"#,
            r#"{"a\u0062":1,"ab":2}"#,
            r#"{"":""}"#,
            r#"{"a":{"x":1},"b":{"x":2}}"#,
            r#"{"a":1,"a":1}"#,
            r#"{"v":[{"x":1,"y":2,"x":3}]}"#,
            &deep_ok,
            &too_deep,
        ];
        for t in texts {
            check(t);
        }
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let text = r#"{"plain":"abc","esc":"a\nb"}"#;
        let mut r = Reader::new(text);
        let mut got = Vec::new();
        r.object(|r, _| {
            got.push(r.string()?);
            Ok(())
        })
        .unwrap();
        assert!(matches!(&got[0], Cow::Borrowed("abc")));
        assert!(matches!(&got[1], Cow::Owned(s) if s == "a\nb"));
        let doc = Doc::parse(text).unwrap();
        assert_eq!(doc.root().member("esc").unwrap().as_str(), Some("a\nb"));
    }

    #[test]
    fn errors_name_the_place_not_the_input() {
        let e = Doc::parse(r#"{"secret":"x", oops}"#).unwrap_err();
        assert_eq!(e.what, "expected a member name");
        assert_eq!(e.at, 15);
        assert!(!e.to_string().contains("secret"));
        assert!(Reader::from_slice(b"\"\xff\"").is_err());
    }

    #[test]
    fn long_escaped_text_blocks_decode_like_serde_json() {
        // A payload escaped into a string, as the MCP text block carries it,
        // long enough to cross many 64-byte blocks.
        let payload = serde_json::json!({"vehicles": (0..40).map(|i| serde_json::json!({
            "vin": format!("VIN{i:014}"), "note": "a \"quoted\" \\ back\\slash\n", "é": i
        })).collect::<Vec<_>>()});
        let block = serde_json::to_string(&payload.to_string()).unwrap();
        check(&block);
        let doc = Doc::parse(&block).unwrap();
        let s = doc.root().as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(s).unwrap(), payload);
    }
}
