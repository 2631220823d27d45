//! Wall-clock time as the protocol writes it: RFC 3339 stamps and Unix milliseconds.
//! Nothing here sleeps or schedules; durations and deadlines belong to the callers.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| OffsetDateTime::now_utc())
        .format(&Rfc3339)
        .unwrap_or_default()
}

pub fn now_unix_ms() -> u64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as u64
}

/// Unix milliseconds as an RFC 3339 UTC time (empty for a time `time` cannot represent).
///
/// ```
/// assert_eq!(aap_core::clock::unix_ms_rfc3339(1_764_811_665_123), "2025-12-04T01:27:45.123Z");
/// ```
pub fn unix_ms_rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

pub fn parse_rfc3339(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}
