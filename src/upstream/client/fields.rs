//! An upstream answer's header fields: names lowercased, values as text, all in one buffer.
//!
//! An answer head has a handful of fields and the gateway reads most of them once (framing,
//! `Content-Type`, a session id). Kept as one string and the fields' offsets, a head costs
//! two allocations instead of two per field; a relay copies only the fields it passes on
//! (`hop::passed_on_answer_fields`).
//!
//! ```
//! use aap_gateway::upstream::client::Fields;
//! let f = Fields::from_pairs([("Content-Type", "application/json"), ("X-A", "1")]);
//! assert_eq!(f.get("content-type"), Some("application/json"));
//! assert_eq!(f.iter().map(|(n, _)| n).collect::<Vec<_>>(), ["content-type", "x-a"]);
//! ```

use std::ops::Range;

/// Header fields in order; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    text: String,
    /// Each field's name and value in `text`.
    spans: Vec<(Range<u32>, Range<u32>)>,
}

impl Fields {
    /// Fields from `(name, value)` byte pairs: names lowercased, values decoded as UTF-8 with
    /// anything else replaced (`U+FFFD`), as a relay passes them on. A head over 4 GiB is
    /// not one this client reads (it refuses heads far smaller).
    pub fn from_raw<'a>(fields: impl Iterator<Item = (&'a str, &'a [u8])> + Clone) -> Fields {
        let size: usize = fields.clone().map(|(n, v)| n.len() + v.len()).sum();
        let mut out = Fields {
            text: String::with_capacity(size),
            spans: Vec::with_capacity(fields.clone().count()),
        };
        for (name, value) in fields {
            let n0 = out.text.len();
            out.text.push_str(name);
            // Lowercased in place, as bytes (ASCII letters only, as before).
            if let Some(pushed) = out.text.get_mut(n0..) {
                pushed.make_ascii_lowercase();
            }
            let n1 = out.text.len();
            // A value that is UTF-8 (nearly all) is copied as it is; only
            // another one goes through the lossy decoder.
            match std::str::from_utf8(value) {
                Ok(text) => out.text.push_str(text),
                Err(_) => out.text.push_str(&String::from_utf8_lossy(value)),
            }
            let v1 = out.text.len();
            let at = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
            out.spans.push((at(n0)..at(n1), at(n1)..at(v1)));
        }
        out
    }

    /// [`Fields::from_raw`] from text pairs.
    pub fn from_pairs<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> Fields {
        let pairs: Vec<(&str, &[u8])> =
            fields.into_iter().map(|(n, v)| (n, v.as_bytes())).collect();
        Fields::from_raw(pairs.iter().copied())
    }

    /// `(name, value)` in order, names lowercased.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.spans
            .iter()
            .map(|(n, v)| (self.slice(n), self.slice(v)))
    }

    /// The first field named `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    fn slice(&self, r: &Range<u32>) -> &str {
        self.text
            .get(r.start as usize..r.end as usize)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_values_kept_in_order() {
        let raw: [(&str, &[u8]); 4] = [
            ("Content-Type", b"text/event-stream"),
            ("X-Empty", b""),
            ("x-bin", b"a\xffb"),
            ("Set-Cookie", b"k=v"),
        ];
        let f = Fields::from_raw(raw.iter().copied());
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [
                ("content-type", "text/event-stream"),
                ("x-empty", ""),
                ("x-bin", "a\u{fffd}b"),
                ("set-cookie", "k=v"),
            ]
        );
        let f = Fields::from_pairs([("A", "1"), ("a", "2")]);
        assert_eq!(f.get("A"), Some("1"));
        assert_eq!(f.get("b"), None);
        assert_eq!(Fields::default().iter().count(), 0);
    }
}
