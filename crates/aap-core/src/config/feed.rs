//! `[tenants.backend.feed]`: where a dealer tenant's inventory comes from (a CSV, XML or JSON
//! feed read from a file or an HTTP(S) URL) and how its columns map to AAP vehicle fields.

use super::Secret;
use crate::feed::{Format, Mapping, Policy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedConfig {
    /// `csv`, `xml` or `json`.
    pub format: Format,
    /// A local file, re-read when it changes (size, mtime or inode).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An `http[s]://` URL, polled with `If-None-Match` / `If-Modified-Since`.
    #[serde(default)]
    pub url: Option<String>,
    /// Seconds between two looks at the source (default: 5 for a file, 300 for a URL).
    #[serde(default)]
    pub poll_interval_secs: Option<u64>,
    /// URL: time allowed for one download, in milliseconds.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// URL: the largest body accepted, in bytes (a larger `Content-Length` is refused before
    /// the download, a longer body is cut while it is read).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// URL: a PEM bundle trusted besides the system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// URL: sent as the `Authorization` header value.
    #[serde(default)]
    pub authorization: Option<Secret>,
    /// AAP field → column (CSV) or element (XML) name.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// Separator of list items held in one cell (photos, features, fees).
    #[serde(default = "default_separator")]
    pub list_separator: String,
    /// CSV field delimiter.
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    /// XML: the element of one vehicle.
    #[serde(default = "default_listing")]
    pub listing_element: String,
    /// Per AAP field, feed value → AAP value.
    #[serde(default)]
    pub values: BTreeMap<String, BTreeMap<String, String>>,
    /// Refuse a feed whose rejected rows exceed this share of its rows.
    #[serde(default = "default_share")]
    pub max_reject_share: f64,
    /// Refuse a feed with fewer vehicles than the inventory it would replace by more than this share.
    #[serde(default = "default_share")]
    pub max_drop_share: f64,
    /// A feed whose last successful load is older than this is reported stale.
    #[serde(default = "default_stale")]
    pub stale_after_secs: u64,
    /// The feed's character encoding: `utf-8` (default), `windows-1252`,
    /// `iso-8859-1` / `latin1`, or another WHATWG encoding label.
    #[serde(default)]
    pub encoding: Option<String>,
}

fn default_timeout() -> u64 {
    30_000
}
/// 512 MiB: a feed is parsed whole in memory, so the cap bounds what one source can take.
pub const DEFAULT_FEED_MAX_BYTES: u64 = 512 * 1024 * 1024;
fn default_max_bytes() -> u64 {
    DEFAULT_FEED_MAX_BYTES
}
fn default_separator() -> String {
    "|".into()
}
fn default_delimiter() -> String {
    ",".into()
}
fn default_listing() -> String {
    "listing".into()
}
fn default_share() -> f64 {
    0.2
}
fn default_stale() -> u64 {
    86_400
}

impl FeedConfig {
    /// A feed of a JSON file (what `inventory = "…json"` means).
    pub fn json_file(file: PathBuf) -> FeedConfig {
        FeedConfig {
            format: Format::Json,
            file: Some(file),
            url: None,
            poll_interval_secs: None,
            timeout_ms: default_timeout(),
            max_bytes: default_max_bytes(),
            ca_file: None,
            authorization: None,
            columns: BTreeMap::new(),
            list_separator: default_separator(),
            delimiter: default_delimiter(),
            listing_element: default_listing(),
            values: BTreeMap::new(),
            max_reject_share: default_share(),
            max_drop_share: default_share(),
            stale_after_secs: default_stale(),
            encoding: None,
        }
    }

    /// The feed's encoding: UTF-8 when unset or unknown (`check` refuses an
    /// unknown label before a feed is ever read).
    pub fn encoding(&self) -> &'static encoding_rs::Encoding {
        self.encoding
            .as_deref()
            .and_then(|l| encoding_rs::Encoding::for_label(l.trim().as_bytes()))
            .unwrap_or(encoding_rs::UTF_8)
    }

    pub fn mapping(&self) -> Mapping {
        Mapping {
            columns: self.columns.clone(),
            list_separator: self.list_separator.clone(),
            values: self.values.clone(),
            delimiter: self.delimiter.bytes().next().unwrap_or(b','),
            listing_element: self.listing_element.clone(),
            encoding: self.encoding(),
        }
    }

    pub fn policy(&self) -> Policy {
        Policy {
            max_reject_share: self.max_reject_share,
            max_drop_share: self.max_drop_share,
        }
    }

    /// Seconds between polls.
    pub fn interval_secs(&self) -> u64 {
        self.poll_interval_secs
            .unwrap_or(if self.url.is_some() { 300 } else { 5 })
    }

    /// Problems with the feed settings, as `<key>: <problem>` under `at`.
    pub(super) fn check(&self, at: &dyn Fn(&str) -> String) -> Result<(), String> {
        match (&self.file, &self.url) {
            (Some(_), None) => {}
            (None, Some(u)) => {
                // The URL is never quoted: its query may hold a token.
                if let Err(e) = crate::host::http_url(u) {
                    return Err(format!("{}: the URL cannot be used: {e}", at("url")));
                }
            }
            _ => return Err(format!("{}: set exactly one of file and url", at(""))),
        }
        if self.url.is_none() && (self.ca_file.is_some() || self.authorization.is_some()) {
            return Err(format!(
                "{}: ca_file and authorization are only for a url",
                at("")
            ));
        }
        if self.ca_file.is_some()
            && !self
                .url
                .as_deref()
                .is_some_and(|u| u.starts_with("https://"))
        {
            return Err(format!("{}: only used with an https:// url", at("ca_file")));
        }
        if let Some(a) = &self.authorization {
            let a = a.expose();
            if a.is_empty() || a.chars().any(|c| c.is_control() || !c.is_ascii()) {
                return Err(format!(
                    "{}: must be a non-empty header value of visible ASCII characters",
                    at("authorization")
                ));
            }
        }
        if !(1..=86_400).contains(&self.interval_secs()) {
            return Err(format!(
                "{}: must be between 1 and 86400",
                at("poll_interval_secs")
            ));
        }
        if !(1..=600_000).contains(&self.timeout_ms) {
            return Err(format!(
                "{}: must be between 1 and 600000 milliseconds",
                at("timeout_ms")
            ));
        }
        if !(1024..=4 * 1024 * 1024 * 1024).contains(&self.max_bytes) {
            return Err(format!(
                "{}: must be between 1024 and 4294967296 bytes",
                at("max_bytes")
            ));
        }
        if self.stale_after_secs == 0 {
            return Err(format!("{}: must be positive", at("stale_after_secs")));
        }
        if let Some(label) = &self.encoding {
            match encoding_rs::Encoding::for_label(label.trim().as_bytes()) {
                None => {
                    return Err(format!(
                        "{}: unknown encoding {label:?} (use utf-8, windows-1252 or iso-8859-1)",
                        at("encoding")
                    ))
                }
                // UTF-16 text is not byte-compatible with the CSV, XML and
                // JSON readers' ASCII syntax; no DMS export uses it.
                Some(e) if e == encoding_rs::UTF_16LE || e == encoding_rs::UTF_16BE => {
                    return Err(format!(
                        "{}: UTF-16 feeds are not supported (use utf-8, windows-1252 or iso-8859-1)",
                        at("encoding")
                    ))
                }
                Some(_) => {}
            }
        }
        for (k, v) in [
            ("max_reject_share", self.max_reject_share),
            ("max_drop_share", self.max_drop_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{}: must be between 0 and 1", at(k)));
            }
        }
        if self.delimiter.len() != 1 || !self.delimiter.is_ascii() || self.delimiter == "\"" {
            return Err(format!(
                "{}: must be one ASCII character other than a quote",
                at("delimiter")
            ));
        }
        if self.list_separator.is_empty()
            || (self.format == Format::Csv && self.list_separator == self.delimiter)
        {
            return Err(format!(
                "{}: must be non-empty and differ from the CSV delimiter",
                at("list_separator")
            ));
        }
        if self.listing_element.is_empty() || self.listing_element.contains(['<', '>', ' ', '/']) {
            return Err(format!(
                "{}: must be an element name like listing",
                at("listing_element")
            ));
        }
        if self.format == Format::Json && (!self.columns.is_empty() || !self.values.is_empty()) {
            return Err(format!(
                "{}: a JSON feed holds AAP vehicles already; columns and values are for csv and xml",
                at("format")
            ));
        }
        let known = |f: &str| crate::feed::FIELDS.contains(&f);
        for (field, name) in &self.columns {
            if !known(field) {
                return Err(format!(
                    "{}: {field:?} is not an AAP vehicle field (known: {})",
                    at("columns"),
                    crate::feed::FIELDS.join(", ")
                ));
            }
            if name.trim().is_empty() {
                return Err(format!(
                    "{}: must name a column",
                    at(&format!("columns.{field}"))
                ));
            }
        }
        for field in self.values.keys() {
            if !known(field) {
                return Err(format!(
                    "{}: {field:?} is not an AAP vehicle field",
                    at("values")
                ));
            }
        }
        Ok(())
    }
}
