//! The single-pass fast path of [`Reader::doc`]: one tight loop that reads a
//! well-formed value into a [`Doc`](super::Doc)'s nodes, or declines.
//!
//! [`Reader::doc_into`] (the reference reader) decides every case; this loop
//! reads only what it is sure of and returns `None` on anything else (any
//! error, nesting more than `STACK - 1` deep, a member name whose hash
//! equals an earlier one's in its object), and [`Reader::doc`] then reads
//! the value again with the reference reader, which gives the exact error
//! at the exact offset, or the same document. Its rule: never accept what
//! the reference refuses, never build another document (checked by the
//! differential tests below and by `fuzz/fuzz_targets/json_reader.rs`,
//! through [`Reader::doc_both`]). Numbers other than short non-negative
//! integers, escaped strings and their errors use the reference's own code.
//!
//! What it saves, measured under callgrind on the search answer's
//! `structuredContent` (5,986 bytes, 381 nodes) in the gateway:
//! `Reader::doc` inclusive 60,380 -> 46,889 instructions a request. The
//! cursor is a local, not the reader's field; the 16-byte string lane, the
//! `:` check and the node stores are inline, and only a string with a
//! backslash or a control character (or within 16 bytes of the text's end)
//! calls the block scanner; the open containers sit in a small array on the
//! stack (no vector, no allocation), kept in memory rather than in locals
//! so the hot paths keep the cursor in a register; errors carry nothing
//! (`Option`); the nodes vector is moved into a local whose address never
//! escapes (48,172 -> 44,564 in a harness); a member name costs a 64-bit
//! hash of its bytes, a one-bit probe of a 64-bit filter and a store of
//! the hash, and only a probe that hits scans the object's kept hashes
//! (the old per-name `signature` and node walk on a hit cost ~6,300 of the
//! 60,380).

use super::doc::Node;
use super::{container, decode_into, node_bytes, number, repeats, scan, Reader, MAX_DEPTH};
use serde_json::Number;

/// Open containers the fast path tracks, less one; a value nested deeper is
/// read by the reference reader (it never happens in an answer).
const STACK: usize = 32;

/// Member-name hashes kept for the open objects (the names along the path
/// from the root); past that, a probe that hits compares the names
/// themselves ([`repeats`]).
const NAMES: usize = 64;

/// An open container. The loop keeps them in memory (`levels[top]` is the
/// one being read) rather than in locals: with fewer live values its hot
/// paths keep the cursor and the text in registers.
#[derive(Clone, Copy, Default)]
struct Level {
    /// Its node's index.
    at: u32,
    /// Members or elements so far.
    len: u32,
    /// One bit per member-name hash seen ([`name_hash`]'s top 6 bits).
    seen: u64,
    /// Where its names start in the hashes kept.
    names: u32,
    /// `}` or `]`.
    close: u8,
}

impl Reader<'_> {
    /// Read the value at the cursor into `nodes` (empty), as
    /// [`Reader::doc_into`] would, or `None` (nodes and cursor then in an
    /// unspecified state: the caller starts over with the reference reader).
    pub(super) fn doc_fast(&mut self, out: &mut Vec<Node>, decoded: &mut String) -> Option<()> {
        // The vector is moved into a local whose address never leaves this
        // function (helpers out of line take slices or return nodes), so
        // its length and capacity stay in registers.
        let mut local = std::mem::take(out);
        let nodes = &mut local;
        let b = self.text.as_bytes();
        let mut i = self.pos;
        // How many containers may be open at once: any container sits at
        // most `MAX_DEPTH` deep, a filled one at most `filled_depth`.
        let deepest = MAX_DEPTH.saturating_sub(self.depth);
        let deepest_filled = MAX_DEPTH
            .min(self.filled_depth)
            .saturating_sub(self.depth)
            .min(STACK - 1);
        let mut levels = [Level::default(); STACK];
        // Open containers; `levels[top]` is the innermost (`levels[0]` is
        // unused).
        let mut top = 0usize;
        let mut hashes = [0u64; NAMES];
        let mut names = 0usize;
        'value: loop {
            let (c, j) = next(b, i);
            i = j;
            if c == b'"' {
                let (close, escaped) = string(b, i + 1)?;
                push_str(nodes, decoded, b, i + 1, close, escaped)?;
                i = close + 1;
            } else {
                match c {
                    b'{' | b'[' => {
                        let close = c + 2; // `}` and `]`
                        let object = c == b'{';
                        if top >= deepest {
                            return None;
                        }
                        let at = nodes.len();
                        put(nodes, container(object, 0, 0));
                        let (c, j) = next(b, i + 1);
                        i = j;
                        if c == close {
                            i += 1;
                            let next = nodes.len() as u32;
                            *nodes.get_mut(at)? = container(object, 0, next);
                        } else {
                            if top >= deepest_filled {
                                return None;
                            }
                            top += 1;
                            let level = levels.get_mut(top)?;
                            *level = Level {
                                at: at as u32,
                                len: 1,
                                seen: 0,
                                names: names as u32,
                                close,
                            };
                            if object {
                                i = member_name(
                                    b,
                                    i,
                                    nodes,
                                    decoded,
                                    level,
                                    &mut hashes,
                                    &mut names,
                                )?;
                            }
                            continue 'value;
                        }
                    }
                    b'0'..=b'9' => {
                        // A non-negative integer of at most 19 digits, not
                        // followed by a fraction, an exponent or (after a
                        // leading zero) a digit: exactly what `number` reads
                        // as a `u64`. Anything else takes the general path.
                        let start = i;
                        let mut n = u64::from(c - b'0');
                        i += 1;
                        if c != b'0' {
                            while let Some(&d) = b.get(i) {
                                let d = d.wrapping_sub(b'0');
                                if d > 9 {
                                    break;
                                }
                                n = n.wrapping_mul(10).wrapping_add(u64::from(d));
                                i += 1;
                            }
                        }
                        if i - start > 19
                            || matches!(b.get(i), Some(b'.' | b'e' | b'E' | b'0'..=b'9'))
                        {
                            let (node, after) = self.other_number(start)?;
                            put(nodes, node);
                            i = after;
                        } else {
                            put(nodes, Node::Number(Number::from(n)));
                        }
                    }
                    b'-' => {
                        let (node, after) = self.other_number(i)?;
                        put(nodes, node);
                        i = after;
                    }
                    b't' => i = literal(b, i, *b"true", nodes, Node::Bool(true))?,
                    b'f' => {
                        if b.get(i + 1..i + 5) != Some(b"alse") {
                            return None;
                        }
                        put(nodes, Node::Bool(false));
                        i += 5;
                    }
                    b'n' => i = literal(b, i, *b"null", nodes, Node::Null)?,
                    _ => return None,
                }
            }
            // A value was read: close the containers that end after it, or
            // go on to the next member or element.
            while top > 0 {
                let level = levels.get_mut(top)?;
                let (c, j) = next(b, i);
                i = j + 1;
                if c == b',' {
                    level.len += 1;
                    if level.close == b'}' {
                        i = member_name(b, i, nodes, decoded, level, &mut hashes, &mut names)?;
                    }
                    continue 'value;
                }
                if c != level.close {
                    return None;
                }
                let next = nodes.len() as u32;
                *nodes.get_mut(level.at as usize)? =
                    container(level.close == b'}', level.len, next);
                names = level.names as usize;
                top -= 1;
            }
            self.pos = i;
            *out = local;
            return Some(());
        }
    }

    /// A number other than a short non-negative integer, by the reference
    /// reader's own code; returns the index after it.
    #[inline(never)]
    fn other_number(&mut self, at: usize) -> Option<(Node, usize)> {
        self.pos = at;
        let (span, integer) = self.number_span().ok()?;
        let n = number(span, integer)?;
        self.floats |= !integer;
        Some((Node::Number(n), self.pos))
    }
}

/// Append `node` to `nodes`, inline (as `super::push`, but a full vector is
/// passed out of line by value, so a local vector's address never escapes).
#[inline(always)]
fn put(nodes: &mut Vec<Node>, node: Node) {
    if nodes.len() == nodes.capacity() {
        *nodes = grown(std::mem::take(nodes));
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
fn grown(mut nodes: Vec<Node>) -> Vec<Node> {
    nodes.reserve(nodes.len().max(16));
    nodes
}

/// The next significant byte at or after `i` (whitespace skipped) and its
/// index; 0 (never significant in JSON) at the end of the text.
#[inline(always)]
fn next(b: &[u8], i: usize) -> (u8, usize) {
    match b.get(i) {
        Some(&c) if c > b' ' => (c, i),
        _ => next_after_whitespace(b, i),
    }
}

#[inline(never)]
fn next_after_whitespace(b: &[u8], mut i: usize) -> (u8, usize) {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    (b.get(i).copied().unwrap_or(0), i)
}

/// `word` (4 bytes) at `i`, pushed as `node`; the index after it.
#[inline(always)]
fn literal(b: &[u8], i: usize, word: [u8; 4], nodes: &mut Vec<Node>, node: Node) -> Option<usize> {
    if b.get(i..i + 4) != Some(&word[..]) {
        return None;
    }
    put(nodes, node);
    Some(i + 4)
}

/// The string whose content starts at `start`: its closing quote's index
/// and whether it holds escapes. Inline: 16 bytes at a time until the
/// first quote, backslash or control character; a string with a backslash
/// goes to the block scanner, a control character or too few bytes left to
/// [`scan::string_end`], which decides (and its error means `None`).
#[inline(always)]
fn string(b: &[u8], start: usize) -> Option<(usize, bool)> {
    let mut p = start;
    while let Some(lane) = b.get(p..).and_then(|rest| rest.first_chunk::<16>()) {
        let special = scan::special16(lane);
        if special != 0 {
            let k = special.trailing_zeros() as usize;
            if lane[k & 15] == b'"' {
                return Some((p + k, false));
            }
            break;
        }
        p += 16;
    }
    string_slow(b, start)
}

#[inline(never)]
fn string_slow(b: &[u8], start: usize) -> Option<(usize, bool)> {
    scan::string_end_blocks(b, start)
        .ok()
        .map(|end| (end.close, end.escaped))
}

/// Push the string `b[start..close]` (escaped or not) as a node.
#[inline(always)]
fn push_str(
    nodes: &mut Vec<Node>,
    decoded: &mut String,
    b: &[u8],
    start: usize,
    close: usize,
    escaped: bool,
) -> Option<()> {
    if escaped {
        put(nodes, decode(b, start, close, decoded)?);
        return Some(());
    }
    put(
        nodes,
        Node::Str {
            start: start as u32,
            end: close as u32,
        },
    );
    Some(())
}

/// The escaped string `b[start..close]` decoded onto `decoded`, as its node.
#[inline(never)]
fn decode(b: &[u8], start: usize, close: usize, decoded: &mut String) -> Option<Node> {
    let raw = std::str::from_utf8(b.get(start..close)?).ok()?;
    decode_into(raw, decoded).ok()
}

/// A member's name at `i` (whitespace first allowed) and its `:`, the name
/// pushed; `None` when it is not there or may repeat an earlier name of
/// `cur` (the reference reader then decides). Returns the index after `:`.
#[inline(always)]
fn member_name(
    b: &[u8],
    i: usize,
    nodes: &mut Vec<Node>,
    decoded: &mut String,
    cur: &mut Level,
    hashes: &mut [u64; NAMES],
    names: &mut usize,
) -> Option<usize> {
    let (c, i) = next(b, i);
    if c != b'"' {
        return None;
    }
    let start = i + 1;
    let (close, escaped) = string(b, start)?;
    let hash = if escaped {
        let node = decode(b, start, close, decoded)?;
        let hash = name_hash(node_bytes(b, decoded, &node));
        put(nodes, node);
        hash
    } else {
        put(
            nodes,
            Node::Str {
                start: start as u32,
                end: close as u32,
            },
        );
        text_name_hash(b, start, close)
    };
    let (c, i) = next(b, close + 1);
    if c != b':' {
        return None;
    }
    let bit = 1u64 << (hash >> 58);
    if cur.seen & bit != 0 && may_repeat(b, decoded, nodes, cur, hashes, *names, hash) {
        return None;
    }
    cur.seen |= bit;
    if let Some(slot) = hashes.get_mut(*names) {
        *slot = hash;
    }
    *names += 1;
    Some(i + 1)
}

/// Whether the name just pushed (hashed `hash`) may repeat an earlier name
/// of `cur`: an equal hash among its names kept, or, when they were not all
/// kept, an equal name ([`repeats`]).
#[inline(never)]
fn may_repeat(
    b: &[u8],
    decoded: &str,
    nodes: &[Node],
    cur: &Level,
    hashes: &[u64; NAMES],
    names: usize,
    hash: u64,
) -> bool {
    match hashes.get(cur.names as usize..names) {
        Some(kept) => kept.contains(&hash),
        None => repeats(nodes, b, decoded, cur.at as usize, nodes.len() - 1),
    }
}

/// [`name_hash`] of the name `b[start..close]`, read straight from the
/// text: an 8-byte load at `start` (a short name's load reads on past its
/// closing quote, masked off).
#[inline(always)]
fn text_name_hash(b: &[u8], start: usize, close: usize) -> u64 {
    let n = close - start;
    let Some(head) = b.get(start..).and_then(|r| r.first_chunk::<8>()) else {
        return name_hash(b.get(start..close).unwrap_or_default());
    };
    let head = u64::from_le_bytes(*head);
    if n < 8 {
        return mix(head & ((1u64 << (8 * n)) - 1), 0, n);
    }
    let tail = match b.get(close - 8..close).and_then(|t| t.first_chunk::<8>()) {
        Some(t) if n > 8 => u64::from_le_bytes(*t),
        _ => 0,
    };
    mix(head, tail, n)
}

/// A 64-bit hash of a member name, a function of its bytes only (so equal
/// names, read from the text or decoded, hash alike): its first 8 bytes
/// (zero-padded), its last 8 when it is longer, and its length.
fn name_hash(name: &[u8]) -> u64 {
    let n = name.len();
    let word = |s: &[u8]| {
        let mut w = [0u8; 8];
        let k = s.len().min(8);
        w[..k].copy_from_slice(&s[..k]);
        u64::from_le_bytes(w)
    };
    let tail = match name.get(n.saturating_sub(8)..) {
        Some(t) if n > 8 => word(t),
        _ => 0,
    };
    mix(word(name), tail, n)
}

#[inline(always)]
fn mix(head: u64, tail: u64, n: usize) -> u64 {
    ((head ^ n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tail)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

#[cfg(test)]
mod tests {
    use super::super::{Doc, Reader, MAX_DEPTH};

    /// A small deterministic generator (xorshift).
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<'p>(&mut self, from: &[&'p str]) -> &'p str {
            from[self.below(from.len())]
        }
    }

    const NUMBERS: &[&str] = &[
        "0",
        "7",
        "-0",
        "-1",
        "42",
        "1.5",
        "-12.5e-3",
        "1e5",
        "1E+5",
        "1e-5",
        "0.0",
        "9999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "12345678901234567890123",
        "1e309",
        "-1e400",
        "2.2250738585072014e-308",
        "01",
        "00",
        "-",
        "1.",
        ".5",
        "+1",
        "1e",
        "1e+",
        "--1",
        "0x1",
        "1.5.5",
        "-01",
        "1234567890123456789",
    ];
    const PIECES: &[&str] = &[
        "a",
        "a",
        "a",
        "é",
        "\\\"",
        "\\\\",
        "\\n",
        "\\u00e9",
        "\\ud83d\\ude97",
        "\\/",
        "\\t",
        "\\x",
        "\\u12G4",
        "\\ud800",
        "\u{1}",
        "\"",
        "\\",
    ];
    const WHITESPACE: &[&str] = &["", "", "", " ", "\n  ", "\t", "\r\n"];

    /// A string's content: mostly plain, now and then an escape or an
    /// error, its length often near 16, 32 or 64 bytes.
    fn content(g: &mut Gen) -> String {
        let len = match g.below(4) {
            0 => g.below(6),
            1 => [15, 16, 17, 31, 32, 33, 63, 64, 65][g.below(9)] - 1 + g.below(3),
            _ => g.below(80),
        };
        let mut s = String::new();
        let broken = g.below(8) == 0;
        while s.len() < len {
            let p = if broken {
                g.pick(PIECES)
            } else {
                g.pick(&PIECES[..11])
            };
            s.push_str(if g.below(3) == 0 { p } else { "a" });
        }
        s
    }

    fn name(g: &mut Gen, names: &[String]) -> String {
        match g.below(10) {
            0 if !names.is_empty() => names[g.below(names.len())].clone(),
            1 => "a\\u0062".to_owned(), // `ab`, escaped
            2 => "ab".to_owned(),
            3 => content(g),
            _ => [
                "id",
                "type",
                "vehicle_id",
                "vehicle_type",
                "x",
                "",
                "list_price",
                "price",
            ][g.below(8)]
            .to_owned(),
        }
    }

    fn value(g: &mut Gen, out: &mut String, depth: usize) {
        out.push_str(g.pick(WHITESPACE));
        match g.below(if depth > 6 { 4 } else { 7 }) {
            0 => {
                out.push('"');
                out.push_str(&content(g));
                out.push('"');
            }
            1 => out.push_str(g.pick(NUMBERS)),
            2 => out.push_str(g.pick(&["true", "false", "null", "tru", "nul", "fals"])),
            3 => out.push_str(g.pick(&["[]", "{}", "[ ]", "{ }"])),
            4 | 5 => {
                out.push('{');
                let mut names = Vec::new();
                for k in 0..g.below(12) {
                    if k > 0 {
                        out.push(',');
                    }
                    out.push_str(g.pick(WHITESPACE));
                    let n = name(g, &names);
                    out.push('"');
                    out.push_str(&n);
                    out.push('"');
                    out.push_str(g.pick(WHITESPACE));
                    out.push(':');
                    value(g, out, depth + 1);
                    names.push(n);
                }
                out.push_str(g.pick(WHITESPACE));
                out.push('}');
            }
            _ => {
                out.push('[');
                for k in 0..g.below(8) {
                    if k > 0 {
                        out.push(',');
                    }
                    value(g, out, depth + 1);
                }
                out.push(']');
            }
        }
        out.push_str(g.pick(WHITESPACE));
    }

    /// The fast path alone never accepts what the reference refuses, and
    /// builds the same document, ending at the same byte; `Reader::doc`
    /// (fast path, then the reference) answers as the reference does.
    fn agree(text: &str, depth_left: Option<usize>) -> bool {
        let reader = || match depth_left {
            Some(d) => Reader::new(text).with_depth_left(d),
            None => Reader::new(text),
        };
        let (fast, reference) = reader().doc_both();
        if let Some(fast) = &fast {
            assert_eq!(Ok(fast), reference.as_ref(), "{text:?}");
        }
        let mut r = reader();
        let read = r.doc().map(|doc| (doc, r.pos));
        assert_eq!(read, reference, "{text:?}");
        fast.is_some()
    }

    #[test]
    fn the_fast_path_reads_as_the_reference_does() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        let (mut read, mut total) = (0, 0);
        for round in 0..60_000 {
            let mut text = String::new();
            value(&mut g, &mut text, 0);
            let mut bytes = text.into_bytes();
            // Now and then break it: cut it, or change, add or drop a byte.
            match round % 4 {
                0 if !bytes.is_empty() => bytes.truncate(g.below(bytes.len())),
                1 if !bytes.is_empty() => {
                    let at = g.below(bytes.len());
                    let b = *b"\"\\{}[],:0-e.a \x01".get(g.below(15)).unwrap_or(&b'x');
                    match g.below(3) {
                        0 => bytes[at] = b,
                        1 => bytes.insert(at, b),
                        _ => drop(bytes.remove(at)),
                    }
                }
                _ => {}
            }
            let Ok(text) = String::from_utf8(bytes) else {
                continue;
            };
            total += 1;
            read += usize::from(agree(&text, None));
            if round % 16 == 0 {
                agree(&text, Some(g.below(4)));
            }
        }
        // The fast path must actually be taken.
        assert!(read * 3 > total, "{read} of {total}");
    }

    #[test]
    fn the_fast_path_agrees_on_strings_across_lane_and_block_bounds() {
        for len in 0..140 {
            for at in [0, 1, 14, 15, 16, 17, 31, 32, 33, 62, 63, 64, 65] {
                for piece in [
                    "\\\"", "\\\\", "\\n", "\\u00e9", "\u{1}", "\\", "é", "\\ud800",
                ] {
                    if at > len {
                        continue;
                    }
                    let mut s = "a".repeat(len);
                    s.insert_str(at, piece);
                    for text in [
                        format!("\"{s}\""),
                        format!("{{\"{s}\":1,\"{s}\":2}}"),
                        format!("[\"{s}\",\"{s}\"]"),
                        format!("{{\"k\":\"{s}\"}}"),
                        format!("\"{s}"),
                    ] {
                        agree(&text, None);
                    }
                }
            }
        }
    }

    #[test]
    fn the_fast_path_agrees_on_depth_and_repeated_names() {
        for depth in [
            1,
            2,
            30,
            31,
            32,
            33,
            MAX_DEPTH - 1,
            MAX_DEPTH,
            MAX_DEPTH + 1,
        ] {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                for inner in ["1", "[]", "{}", "[1]"] {
                    let text = format!("{}{inner}{}", open.repeat(depth), close.repeat(depth));
                    agree(&text, None);
                    for left in [0, 1, 2, 5, 40] {
                        agree(&text, Some(left));
                    }
                }
            }
        }
        // Many members: more names than the hashes kept.
        for n in [1, 2, 31, 63, 64, 65, 66, 130] {
            let members: Vec<String> = (0..n).map(|k| format!("\"m{k}\":{k}")).collect();
            let text = format!("{{{}}}", members.join(","));
            assert!(agree(&text, None));
            let nested = format!("{{\"o\":{text},{}}}", members.join(","));
            assert!(agree(&nested, None));
            for again in [0, n / 2, n - 1] {
                let text = format!("{{{},\"m{again}\":0}}", members.join(","));
                assert!(!agree(&text, None));
                assert!(Doc::parse(&text).is_err());
            }
        }
        for text in [
            r#"{"a\u0062":1,"ab":2}"#,
            r#"{"ab":1,"a\u0062":2}"#,
            r#"{"a":{"a":1},"b":{"a":2}}"#,
            r#"{"aaaaaaaaXaaaaaaaa":1,"aaaaaaaaYaaaaaaaa":2}"#,
            r#"{"aaaaaaaaXaaaaaaaa":1,"aaaaaaaaXaaaaaaaa":2}"#,
        ] {
            agree(text, None);
        }
    }
}
