//! Shared-state stores: the durable local log (one process owns `state.dir`) and Redis.
//! The port they implement ([`SharedState`]) and its types live in `aap_core::state`.

pub use aap_core::state::*;

pub mod buckets;
pub mod local;
pub mod lock;
pub mod redis;
