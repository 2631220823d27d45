//! `Content-Type` and `Accept` handling for the MCP endpoint.

/// How a response to a request should be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseMedia {
    Json,
    EventStream,
}

/// True when `Content-Type` names `application/json` (parameters such as
/// `charset=utf-8` allowed; another charset is not).
pub fn is_json_content_type(value: Option<&str>) -> bool {
    let Some(value) = value else { return false };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|p| {
        let mut kv = p.splitn(2, '=');
        let key = kv.next().unwrap_or("").trim();
        let val = kv.next().unwrap_or("").trim().trim_matches('"');
        !key.eq_ignore_ascii_case("charset") || val.eq_ignore_ascii_case("utf-8")
    })
}

struct Range<'a> {
    kind: &'a str,
    subtype: &'a str,
    q: f32,
}

/// The media ranges of an `Accept` value, read as they are looked at (no list is built).
fn parse_ranges(accept: &str) -> impl Iterator<Item = Range<'_>> + Clone {
    accept.split(',').filter_map(|item| {
        let mut parts = item.split(';');
        let media = parts.next()?.trim();
        let (kind, subtype) = media.split_once('/')?;
        let mut q = 1.0f32;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = v.trim().parse().unwrap_or(0.0);
                }
            }
        }
        Some(Range {
            kind: kind.trim(),
            subtype: subtype.trim(),
            q,
        })
    })
}

/// The quality the client gives a media type: the most specific matching
/// range wins (RFC 9110 §12.5.1), so `application/json;q=0` excludes JSON
/// even when `*/*` is listed.
fn quality<'a>(ranges: impl Iterator<Item = Range<'a>>, kind: &str, subtype: &str) -> f32 {
    let mut best: Option<(u8, f32)> = None;
    for r in ranges {
        let specificity =
            if r.kind.eq_ignore_ascii_case(kind) && r.subtype.eq_ignore_ascii_case(subtype) {
                2
            } else if r.kind.eq_ignore_ascii_case(kind) && r.subtype == "*" {
                1
            } else if r.kind == "*" && r.subtype == "*" {
                0
            } else {
                continue;
            };
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, r.q));
        }
    }
    best.map(|(_, q)| q).unwrap_or(0.0)
}

/// Choose the response framing for a synchronous operation.
///
/// JSON whenever the client accepts it (absent `Accept`, `*/*`, JSON-only or
/// both); SSE only when JSON is excluded and SSE is accepted; `None` → 406.
pub fn negotiate(accept: Option<&str>) -> Option<ResponseMedia> {
    let accept = match accept {
        None => return Some(ResponseMedia::Json),
        Some(a) if a.trim().is_empty() => return Some(ResponseMedia::Json),
        Some(a) => a,
    };
    let ranges = parse_ranges(accept);
    if quality(ranges.clone(), "application", "json") > 0.0 {
        Some(ResponseMedia::Json)
    } else if quality(ranges, "text", "event-stream") > 0.0 {
        Some(ResponseMedia::EventStream)
    } else {
        None
    }
}

/// The media checks every MCP POST passes first: a JSON `Content-Type`
/// (else 415) and an `Accept` that admits JSON or SSE (else 406). Returns
/// the framing for a synchronous answer.
pub fn check_post(
    content_type: Option<&str>,
    accept: Option<&str>,
) -> Result<ResponseMedia, super::jsonrpc::RpcError> {
    use crate::error::{Failure, RpcError};
    if !is_json_content_type(content_type) {
        return Err(RpcError::of(
            Failure::UnsupportedMediaType,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    negotiate(accept).ok_or_else(|| {
        RpcError::of(
            Failure::NotAcceptable,
            "Not Acceptable: the client must accept application/json or text/event-stream",
        )
    })
}

/// True when `Accept` admits `text/event-stream`, i.e. the answer may be
/// streamed even though JSON is preferred.
pub fn accepts_event_stream(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| quality(parse_ranges(a), "text", "event-stream") > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_type() {
        assert!(is_json_content_type(Some("application/json")));
        assert!(is_json_content_type(Some(
            "Application/JSON; charset=UTF-8"
        )));
        assert!(!is_json_content_type(Some(
            "application/json; charset=latin1"
        )));
        assert!(!is_json_content_type(Some("text/plain")));
        assert!(!is_json_content_type(None));
    }

    #[test]
    fn accept_variants() {
        use ResponseMedia::*;
        assert_eq!(negotiate(None), Some(Json));
        assert_eq!(negotiate(Some("*/*")), Some(Json));
        assert_eq!(negotiate(Some("application/json")), Some(Json));
        assert_eq!(
            negotiate(Some("application/json, text/event-stream")),
            Some(Json)
        );
        assert_eq!(negotiate(Some("application/*")), Some(Json));
        assert_eq!(negotiate(Some("text/event-stream")), Some(EventStream));
        assert_eq!(
            negotiate(Some("application/json;q=0, text/event-stream")),
            Some(EventStream)
        );
        assert_eq!(
            negotiate(Some("*/*, application/json;q=0")),
            Some(EventStream)
        );
        assert_eq!(negotiate(Some("text/html")), None);
        assert_eq!(negotiate(Some("application/json;q=0")), None);
        assert_eq!(negotiate(Some("*/*;q=0")), None);
        assert!(accepts_event_stream(Some(
            "application/json, text/event-stream"
        )));
        assert!(accepts_event_stream(Some("*/*")));
        assert!(!accepts_event_stream(Some("application/json")));
        assert!(!accepts_event_stream(Some(
            "text/event-stream;q=0, application/json"
        )));
        assert!(!accepts_event_stream(None));
    }
}
