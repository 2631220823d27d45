//! `json::Reader` and `json::Doc` against `serde_json`, on arbitrary bytes.
//!
//! The reader replaces `serde_json` for upstream answers, so it must accept
//! exactly what `serde_json` accepts and decode it to the same value. The
//! two documented differences are allowed: a `Doc` refuses repeated member
//! names (as does a value read into a `serde_json::Value`), and a skipped
//! value obeys the nesting limit. The input is also
//! read as the content of one long string (the MCP text block case), which
//! exercises the 64-byte block scanner across block boundaries, and written
//! as a string by `json::write_str`, which must match `serde_json`'s bytes.
//! `Reader::doc`'s fast path is also compared alone with the reference
//! reader it falls back to (`Reader::doc_both`).
#![no_main]

mod common;

use aap_gateway::json::{scan, Doc, Reader};
use common::same;
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    // Invalid UTF-8 is refused up front by both.
    let reader = Reader::from_slice(data);
    let Ok(text) = std::str::from_utf8(data) else {
        assert!(reader.is_err());
        assert!(serde_json::from_slice::<Value>(data).is_err());
        return;
    };

    let ours = Doc::parse(text);
    let theirs = serde_json::from_str::<Value>(text);
    // Whether some object repeats a member name, by the gateway's other
    // strict parser (the client envelope's), which refuses exactly that.
    let repeats = || {
        aap_gateway::mcp::jsonrpc::parse_json(data, 10_000)
            .is_err_and(|e| e.message.contains("duplicate key"))
    };
    match (&ours, &theirs) {
        (Ok(doc), Ok(value)) => {
            assert!(same(&doc.to_value(), value), "values differ");
            assert!(!repeats(), "a repeated member name was not noticed");
        }
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => {
            assert_eq!(e.what, "an object repeats a member name");
            assert!(
                repeats(),
                "refused a repeated member name that is not there"
            );
        }
        (Ok(_), Err(e)) => panic!("accepted what serde_json refuses: {e}"),
    }

    // `Reader::doc`'s fast path alone against its reference reader: it
    // never accepts what the reference refuses, and reads the same document
    // to the same byte (byte 0 also sets a depth limit now and then).
    for depth_left in [
        None,
        Some(usize::from(data.first().copied().unwrap_or(0) % 8)),
    ] {
        let reader = match depth_left {
            Some(d) => Reader::new(text).with_depth_left(d),
            None => Reader::new(text),
        };
        let (fast, reference) = reader.doc_both();
        if let Some(fast) = &fast {
            assert_eq!(
                Ok(fast),
                reference.as_ref(),
                "the fast path and the reference differ"
            );
        }
    }

    // Read into a `serde_json::Value` (the JSON-RPC envelope's members):
    // the same as `serde_json`, repeated names refused like a `Doc`.
    let mut r = Reader::new(text);
    let valued = r.value().and_then(|v| r.finish().map(|()| v));
    match (&valued, &theirs) {
        (Ok(v), Ok(t)) => assert!(same(v, t), "values differ"),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => {
            assert_eq!(e.what, "an object repeats a member name");
            assert!(
                repeats(),
                "refused a repeated member name that is not there"
            );
        }
        (Ok(_), Err(e)) => panic!("read a value serde_json refuses: {e}"),
    }

    let mut r = Reader::new(text);
    let skipped = r.skip().and_then(|span| r.finish().map(|_| span));
    let ignored = serde_json::from_str::<IgnoredAny>(text);
    match (&skipped, &ignored) {
        (Ok(span), Ok(_)) => assert_eq!(span.trim(), text.trim()),
        (Err(_), Err(_)) => {}
        (Err(e), Ok(_)) => assert_eq!(e.what, "nesting too deep"),
        (Ok(_), Err(e)) => panic!("skipped what serde_json refuses: {e}"),
    }

    // The text written as a string, as `serde_json` writes it.
    let mut written = Vec::new();
    aap_gateway::json::write_str(&mut written, text);
    assert_eq!(written, serde_json::to_vec(text).expect("a str serializes"));

    // The bytes as the inside of a string.
    let mut quoted = Vec::with_capacity(data.len() + 1);
    quoted.push(b'"');
    quoted.extend_from_slice(data);
    let end = scan::string_end(&quoted, 1);
    let mut stream = serde_json::Deserializer::from_slice(&quoted).into_iter::<IgnoredAny>();
    let serde_end = match stream.next() {
        Some(Ok(_)) => Ok(stream.byte_offset()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("empty".to_owned()),
    };
    match (end, serde_end) {
        (Ok(end), Ok(offset)) => {
            assert_eq!(end.close + 1, offset, "string ends differ");
            assert_eq!(end.escaped, quoted[1..end.close].contains(&b'\\'));
        }
        (Err(_), Err(_)) => {}
        (ours, theirs) => panic!("string scan disagrees: {ours:?} vs {theirs:?}"),
    }
});
