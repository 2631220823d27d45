//! Priming the result path: after a quiet spell, a skill's sample answer is read and checked
//! while the backend works on a call, so the call's own answer meets warm caches.
//!
//! At a dealer's sparse traffic (a few calls a second) the CPU's caches lose the reader, the
//! compiled result schemas and their code between calls, and reading and checking a search
//! answer then cost about three times what they cost under load: that sat on every such
//! call's critical path. The time a call waits for its backend is idle on the gateway's side,
//! so [`Primer`] spends it there. It runs only after [`PRIME_AFTER`] without a result check,
//! so a busy gateway (whose caches are warm) never pays for it, and it needs no thread or
//! timer, so an idle gateway burns nothing. `benches/cold.sh` measures it (the answer side;
//! docs/performance.md, twelfth pass). It pays when the backend runs on other cores, as a
//! dealer's does on another machine; a backend sharing the gateway's cores waits for it.
//!
//! ```
//! use aap_core::aap::{schemas::SchemaSet, skill::Skill};
//! let schemas = SchemaSet::embedded().unwrap();
//! // Nothing was checked yet: this call primes.
//! assert!(schemas.prime_result(Skill::InventorySearch));
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the result check may go unused before a call primes it. Below about 500 calls a
/// second per process every call primes; above that the caches stay warm on their own.
pub const PRIME_AFTER: Duration = Duration::from_millis(2);

/// One valid answer per skill, in [`crate::aap::skill::Skill::ALL`]'s order: members, lists
/// and formats like a backend's real answers, so priming runs the validators those will.
/// Copies of conformance-corpus examples kept beside this module (the container build
/// compiles `src/` without `tests/`); a unit test holds each to its skill's schema.
const SAMPLES: [&str; 5] = [
    include_str!("samples/dealer-information-response.json"),
    include_str!("samples/inventory-facets-response.json"),
    include_str!("samples/inventory-search-response.json"),
    include_str!("samples/inventory-vehicle-response.json"),
    include_str!("samples/lead-submit-response.json"),
];

/// The sample answer of the skill at `index` in `Skill::ALL`.
pub fn sample(index: usize) -> Option<&'static str> {
    SAMPLES.get(index).copied()
}

/// When the result check last ran, to tell a quiet spell from a busy one.
#[derive(Debug)]
pub struct Primer {
    epoch: Instant,
    /// Microseconds since `epoch` of the last check noted; `u64::MAX` for never.
    last: AtomicU64,
}

impl Default for Primer {
    fn default() -> Self {
        Primer {
            epoch: Instant::now(),
            last: AtomicU64::new(u64::MAX),
        }
    }
}

impl Primer {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX - 1)
    }

    /// A result was checked now. Stored at most once a millisecond, so that workers under load
    /// do not pass the line between their caches on every call.
    pub fn note(&self) {
        self.note_at(self.now());
    }

    fn note_at(&self, now: u64) {
        let last = self.last.load(Ordering::Relaxed);
        if last == u64::MAX || now.saturating_sub(last) >= 1_000 {
            self.last.store(now, Ordering::Relaxed);
        }
    }

    /// Whether no check ran for [`PRIME_AFTER`]; the caller primes and the spell ends.
    pub fn quiet(&self) -> bool {
        self.quiet_at(self.now())
    }

    fn quiet_at(&self, now: u64) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        let quiet = last == u64::MAX || now.saturating_sub(last) >= PRIME_AFTER.as_micros() as u64;
        if quiet {
            self.last.store(now, Ordering::Relaxed);
        }
        quiet
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aap::{schemas::SchemaSet, skill::Skill};
    use crate::json::Doc;

    #[test]
    fn every_sample_is_a_valid_answer_of_its_skill() {
        let schemas = SchemaSet::embedded().unwrap();
        for skill in Skill::ALL {
            let text = sample(skill.index()).unwrap();
            let doc = Doc::parse(text).unwrap();
            assert!(schemas.result_holds(skill, &doc), "{skill:?}");
            assert_eq!(doc.type_name(), Some(skill.response_type()), "{skill:?}");
        }
    }

    /// Times in µs since the primer's epoch, given, so that no test depends on the clock.
    #[test]
    fn a_check_within_the_spell_keeps_it_busy() {
        let spell = PRIME_AFTER.as_micros() as u64;
        let p = Primer::default();
        assert!(p.quiet_at(10), "never checked is quiet");
        assert!(!p.quiet_at(11), "priming itself ends the spell");
        p.note_at(5_000);
        assert!(!p.quiet_at(5_000 + spell - 1));
        assert!(p.quiet_at(5_000 + spell));
        // Checks within a millisecond of the last one noted are not stored again.
        p.note_at(9_000);
        p.note_at(9_500);
        assert!(p.quiet_at(9_000 + spell), "9,500 was not stored");
    }
}
