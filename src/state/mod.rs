//! Shared-state stores: the in-process token buckets and Redis (counters), the state lock.
//! Idempotency records and leads live in the lead store (`crate::store`).
//! The port they implement ([`SharedState`]) and its types live in `aap_core::state`.

pub use aap_core::state::*;

pub mod buckets;
pub mod lock;
pub mod redis;
