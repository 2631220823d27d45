//! The W3C trace context of one request (`traceparent`, `tracestate`) and the times of its phases.
//! Only ids and instants: the gateway crate turns a finished request into OpenTelemetry spans.
//!
//! A [`Trace`] exists only when tracing is configured. Its trace id is the
//! request's correlation id (the incoming `traceparent`'s when valid, else a
//! fresh one), so the access line's `correlation_id` is the trace id. Span
//! ids are chosen here, before the spans end, because upstream requests carry
//! them (`traceparent`) while the request is still running. Phases are
//! recorded only for a sampled request.

use std::sync::Mutex;
use std::time::Instant;

/// The parts of a request's work that become child spans of its server span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Origin, method, media types, budgets and the access token.
    Admission,
    /// JSON-RPC parsing, mirror headers and the MCP revision.
    Parse,
    /// The tool arguments against the skill's request schema.
    Validation,
    /// The backend call (embedded, MCP, A2A, or the relay's upstream).
    Backend,
    /// The backend's answer against the skill's response schema.
    ResultValidation,
    /// Writing the response to the client.
    Write,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Admission,
        Phase::Parse,
        Phase::Validation,
        Phase::Backend,
        Phase::ResultValidation,
        Phase::Write,
    ];

    /// The span name.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Admission => "admission",
            Phase::Parse => "parse",
            Phase::Validation => "validation",
            Phase::Backend => "backend",
            Phase::ResultValidation => "result_validation",
            Phase::Write => "write",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// When a phase began and (once it did) ended.
pub type PhaseTimes = (Instant, Option<Instant>);

/// The trace context of one request.
#[derive(Debug)]
pub struct Trace {
    pub trace_id: [u8; 16],
    /// The span id of a valid incoming `traceparent`: the server span's parent.
    pub remote_parent: Option<[u8; 8]>,
    /// The incoming `tracestate`, passed on unchanged with the trace.
    pub tracestate: Option<String>,
    /// The request's server span.
    pub span_id: [u8; 8],
    /// The backend phase's span: the parent of every upstream client span.
    pub backend_span_id: [u8; 8],
    /// Whether this request's spans are recorded and exported.
    pub sampled: bool,
    phases: Mutex<[Option<PhaseTimes>; 6]>,
}

/// Largest `tracestate` passed on (W3C: 32 members of at most 256 bytes
/// each; longer is dropped rather than cut, since a cut list may be invalid).
const MAX_TRACESTATE: usize = 8_192;

impl Trace {
    /// The trace of a request whose correlation id is `correlation_id` (32
    /// hex digits, as [`crate::context::RequestCtx::new`] makes it). `None`
    /// for any other id (a transport answer's scratch context).
    pub fn new(
        correlation_id: &str,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> Option<Trace> {
        let trace_id = hex_bytes::<16>(correlation_id)?;
        let parent = traceparent
            .and_then(parse_traceparent)
            .filter(|p| p.trace_id == trace_id);
        let tracestate = parent
            .as_ref()
            .and(tracestate)
            .map(str::trim)
            .filter(|s| {
                // Visible ASCII, spaces and tabs only: it goes into upstream
                // request heads, which refuse control characters.
                !s.is_empty()
                    && s.len() <= MAX_TRACESTATE
                    && s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            })
            .map(str::to_owned);
        Some(Trace {
            trace_id,
            remote_parent: parent.as_ref().map(|p| p.span_id),
            tracestate,
            span_id: new_span_id(),
            backend_span_id: new_span_id(),
            sampled: false,
            phases: Mutex::new([None; 6]),
        })
    }

    /// Whether the incoming `traceparent` asked for sampling (its flags'
    /// low bit); `None` without a valid incoming `traceparent`.
    pub fn remote_sampled(traceparent: Option<&str>) -> Option<bool> {
        traceparent.and_then(parse_traceparent).map(|p| p.sampled)
    }

    /// Mark the start of `phase` (sampled requests only).
    pub fn begin(&self, phase: Phase) {
        if self.sampled {
            let mut p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
            p[phase.index()] = Some((Instant::now(), None));
        }
    }

    /// Mark the end of `phase`, begun earlier.
    pub fn end(&self, phase: Phase) {
        if self.sampled {
            let mut p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, end)) = &mut p[phase.index()] {
                *end = Some(Instant::now());
            }
        }
    }

    /// Record a phase that ran from `start` until now.
    pub fn record(&self, phase: Phase, start: Instant) {
        if self.sampled {
            let mut p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
            p[phase.index()] = Some((start, Some(Instant::now())));
        }
    }

    /// The phases that began, in [`Phase::ALL`] order.
    pub fn phases(&self) -> Vec<(Phase, PhaseTimes)> {
        let p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        Phase::ALL
            .iter()
            .filter_map(|phase| p[phase.index()].map(|t| (*phase, t)))
            .collect()
    }

    /// The `traceparent` an upstream request carries, naming `span_id` (the
    /// gateway's client span) as its parent.
    pub fn traceparent_for(&self, span_id: [u8; 8]) -> String {
        format!(
            "00-{}-{}-{}",
            hex::encode(self.trace_id),
            hex::encode(span_id),
            if self.sampled { "01" } else { "00" }
        )
    }
}

/// A fresh random span id (never all zero).
pub fn new_span_id() -> [u8; 8] {
    loop {
        let (hi, _) = uuid::Uuid::new_v4().as_u64_pair();
        if hi != 0 {
            return hi.to_be_bytes();
        }
    }
}

/// A valid W3C `traceparent`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

/// Parse a `traceparent` (version `00`, or a later version's first four
/// fields): 32 and 16 hex digits, neither all zero, two flag digits.
pub fn parse_traceparent(value: &str) -> Option<TraceParent> {
    let mut parts = value.trim().split('-');
    let (version, id, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    // Version 00 has exactly four fields; ff is invalid; later versions
    // may add fields after these four.
    if version.len() != 2
        || !version.bytes().all(|b| b.is_ascii_hexdigit())
        || version.eq_ignore_ascii_case("ff")
        || (version == "00" && rest.is_some())
    {
        return None;
    }
    let trace_id = hex_bytes::<16>(id)?;
    let span_id = hex_bytes::<8>(parent)?;
    let flags = hex_bytes::<1>(flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(TraceParent {
        trace_id,
        span_id,
        sampled: flags[0] & 1 == 1,
    })
}

/// `N` bytes from exactly `2N` hex digits.
fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        let t = Trace::new("4bf92f3577b34da6a3ce929d0e0e4736", Some(TP), Some("a=b")).unwrap();
        assert_eq!(
            t.remote_parent,
            Some(hex_bytes::<8>("00f067aa0ba902b7").unwrap())
        );
        assert_eq!(t.tracestate.as_deref(), Some("a=b"));
        assert_ne!(t.span_id, t.backend_span_id);
        assert_eq!(Trace::remote_sampled(Some(TP)), Some(true));
        let child = t.traceparent_for([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            child,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-00"
        );
    }

    #[test]
    fn invalid_traceparents_are_no_parent() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "garbage",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        // A later version's extra fields are allowed.
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what")
                .is_some()
        );
        // No tracestate without a valid traceparent.
        let t = Trace::new("4bf92f3577b34da6a3ce929d0e0e4736", None, Some("a=b")).unwrap();
        assert_eq!((t.remote_parent, t.tracestate), (None, None));
        let t = Trace::new(
            "4bf92f3577b34da6a3ce929d0e0e4736",
            Some(TP),
            Some("a=b\u{7}"),
        )
        .unwrap();
        assert_eq!(t.tracestate, None);
        assert!(Trace::new("", None, None).is_none());
    }

    #[test]
    fn phases_are_recorded_only_when_sampled() {
        let mut t = Trace::new("4bf92f3577b34da6a3ce929d0e0e4736", None, None).unwrap();
        t.begin(Phase::Parse);
        assert!(t.phases().is_empty());
        t.sampled = true;
        t.begin(Phase::Parse);
        t.end(Phase::Parse);
        t.record(Phase::Admission, Instant::now());
        let phases = t.phases();
        assert_eq!(phases.len(), 2);
        assert_eq!(phases[0].0, Phase::Admission);
        assert!(phases.iter().all(|(_, (_, end))| end.is_some()));
    }
}
