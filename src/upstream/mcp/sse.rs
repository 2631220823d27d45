//! Request-scoped SSE from an upstream: parsing `data` events, spotting the
//! JSON-RPC response, passing `notifications/*` on. Decoding the answer is `answer`'s.

use crate::backend::Forward;
use crate::upstream::client::Reply;
use serde_json::Value;

/// Watches an upstream answer as it streams in: hands each complete
/// `notifications/*` event to the client's stream and reports when the
/// JSON-RPC response with `id` has arrived.
pub(super) struct SseWatch<'a> {
    id: &'a Value,
    forward: &'a Forward,
    /// Bytes of the body already parsed into complete events.
    parsed: std::sync::Mutex<usize>,
}

impl<'a> SseWatch<'a> {
    pub(super) fn new(id: &'a Value, forward: &'a Forward) -> Self {
        SseWatch {
            id,
            forward,
            parsed: std::sync::Mutex::new(0),
        }
    }

    pub(super) fn check(&self, r: &Reply) -> bool {
        if !r.is_event_stream() {
            return false;
        }
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*parsed).min(r.body.len());
        let end = start + complete_events_len(&r.body[start..]);
        *parsed = end;
        let mut done = false;
        for data in sse_events(&r.body[start..end]) {
            let Ok(msg) = serde_json::from_str::<Value>(&data) else {
                continue;
            };
            if msg.get("id") == Some(self.id)
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                done = true;
            } else if msg.get("id").is_none()
                && msg
                    .get("method")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.starts_with("notifications/"))
            {
                self.forward.notify(msg);
            }
        }
        done
    }
}

/// Length of the prefix of an SSE body that ends with a blank line.
fn complete_events_len(b: &[u8]) -> usize {
    let mut end = 0;
    for i in 1..b.len() {
        if b[i] == b'\n' && (b[i - 1] == b'\n' || (i >= 3 && &b[i - 3..i] == b"\r\n\r")) {
            end = i + 1;
        }
    }
    end
}

/// True once an SSE body holds the JSON-RPC response with `id`.
pub(super) fn sse_complete(r: &Reply, id: &Value) -> bool {
    r.is_event_stream() && find_in_sse(&r.body, id).is_some()
}

/// The `data` payloads of an SSE stream, complete events only.
pub fn sse_events(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    let mut out = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    let complete_upto = text.rfind("\n\n").map(|p| p + 2).unwrap_or(0);
    for line in text[..complete_upto].split('\n') {
        if line.is_empty() {
            if !data.is_empty() {
                out.push(data.join("\n"));
                data.clear();
            }
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    out
}

pub(super) fn find_in_sse(body: &[u8], id: &Value) -> Option<Value> {
    sse_events(body)
        .into_iter()
        .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
        .find(|m| {
            m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sse_events_skip_comments_and_incomplete_tails() {
        let body = b": ping\n\n: ping\r\n\r\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\n\ndata: {\"partial";
        let ev = sse_events(body);
        assert_eq!(ev.len(), 1);
        assert!(find_in_sse(body, &json!("a")).is_some());
        assert!(find_in_sse(body, &json!("b")).is_none());
    }
}
