//! Tool arguments as they travel from the client to a backend.
//!
//! The client's `params.arguments` is read once into a [`Doc`] while the
//! envelope is parsed (building it as a `serde_json::Value` was about half
//! of the envelope's cost: an `IndexMap` per object, a `String` per key and
//! value). The contract validates the `Doc`, a strict MCP upstream receives
//! the client's own text, and a `Value` is built only for a backend that
//! works on one (the embedded dealer, A2A) or for a lead.

use crate::json::Doc;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// A tools/call's arguments: the document (borrowed from the parsed
/// request, or owned), and its `Value` once asked for.
///
/// ```
/// use aap_core::aap::arguments::Arguments;
/// use aap_core::json::Doc;
///
/// let doc = Doc::parse(r#"{"type": "dealer.information.request"}"#).unwrap();
/// let args = Arguments::new(&doc);
/// assert_eq!(args.raw(), r#"{"type": "dealer.information.request"}"#);
/// assert_eq!(args.value()["type"], "dealer.information.request");
/// ```
#[derive(Debug, Clone)]
pub struct Arguments<'a> {
    doc: Cow<'a, Doc>,
    tree: OnceLock<Value>,
}

impl<'a> Arguments<'a> {
    pub fn new(doc: &'a Doc) -> Arguments<'a> {
        Arguments {
            doc: Cow::Borrowed(doc),
            tree: OnceLock::new(),
        }
    }

    /// The same arguments, owning their document (for a call that runs in
    /// its own task).
    pub fn into_owned(self) -> Arguments<'static> {
        Arguments {
            doc: Cow::Owned(self.doc.into_owned()),
            tree: self.tree,
        }
    }

    /// Arguments that own `doc` (rewritten by the gateway, e.g. host compatibility).
    pub fn owned(doc: Doc) -> Arguments<'static> {
        Arguments {
            doc: Cow::Owned(doc),
            tree: OnceLock::new(),
        }
    }

    /// `{}`: what a call without arguments is checked as.
    pub fn empty() -> Arguments<'static> {
        Arguments {
            doc: Cow::Owned(empty_doc()),
            tree: OnceLock::new(),
        }
    }

    pub fn doc(&self) -> &Doc {
        &self.doc
    }

    /// The client's text of the arguments, exactly as sent.
    pub fn raw(&self) -> &str {
        self.doc.raw()
    }

    /// The arguments as a `Value`, built on first use.
    pub fn value(&self) -> &Value {
        self.tree.get_or_init(|| self.doc.to_value())
    }
}

fn empty_doc() -> Doc {
    // A literal that always reads; `Doc::parse` has no other outcome here.
    Doc::parse("{}").unwrap_or_else(|_| unreachable!("\"{{}}\" is JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn value_and_text_agree() {
        let text = r#"{ "type": "inventory.search.request", "filters": {"make": ["Toyota"]}, "pagination": {"limit": 5.0} }"#;
        let doc = Doc::parse(text).unwrap();
        let args = Arguments::new(&doc);
        assert_eq!(args.raw(), text);
        assert_eq!(*args.value(), serde_json::from_str::<Value>(text).unwrap());
        let escaped = Doc::parse(r#"{"a": [1, "\u00e9\n"]}"#).unwrap();
        assert_eq!(
            *Arguments::new(&escaped).value(),
            json!({"a": [1, "\u{e9}\n"]})
        );
        assert_eq!(Arguments::empty().raw(), "{}");
    }
}
