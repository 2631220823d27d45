//! Swapped-out generations are freed on a thread of their own, never on a request worker:
//! whoever drops the last reference to a generation frees it, and the config of 10,000 tenants
//! took 20–40 ms to free, a stall for every request behind it on that worker.
//!
//! [`Retired::retire`] takes the generation a swap replaced (each `Gateway` has its own
//! [`Retired`]). The `retire` thread frees each one once it holds its last reference (requests in
//! flight keep theirs until they finish: the running generation is no longer reachable, so that
//! count only falls), then gives the memory back (`memory::Release`). The thread ends with its
//! `Retired`.

use super::ConfigGeneration;
use crate::memory::Release;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How often the `retire` thread looks at the generations it holds.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Generations swapped out and not yet freed, and the thread that frees them.
pub(super) struct Retired {
    held: Arc<Held>,
    /// Whether the `retire` thread runs (started on first use); when it could not start, a
    /// generation is dropped where it is retired.
    thread: OnceLock<bool>,
}

struct Held {
    list: Mutex<Vec<Arc<ConfigGeneration>>>,
    memory: Arc<Release>,
}

impl Retired {
    /// Nothing held yet; what is freed is given back through `memory`.
    pub(super) fn new(memory: Arc<Release>) -> Retired {
        Retired {
            held: Arc::new(Held {
                list: Mutex::new(Vec::new()),
                memory,
            }),
            thread: OnceLock::new(),
        }
    }

    /// Start the `retire` thread once; whether it runs. It holds the list weakly and ends
    /// once this `Retired` is gone.
    fn running(&self) -> bool {
        *self.thread.get_or_init(|| {
            let held = Arc::downgrade(&self.held);
            std::thread::Builder::new()
                .name("retire".into())
                .spawn(move || {
                    crate::background::lower_priority();
                    loop {
                        std::thread::sleep(LOOK_EVERY);
                        let Some(held) = held.upgrade() else { return };
                        let _ = held.free_unreferenced();
                    }
                })
                .map_err(|e| tracing::warn!(error = %e, "retired generations are freed where they are last dropped"))
                .is_ok()
        })
    }

    /// Free `old` on the `retire` thread once nothing else references it.
    pub(super) fn retire(&self, old: Arc<ConfigGeneration>) {
        if self.running() {
            self.held
                .list
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(old);
        } else {
            drop(old);
        }
    }

    /// Drop every retired generation nothing else references (here: the `retire` thread, or a
    /// reload or tenant apply right after its swap, so that what the old generation alone held,
    /// such as a cluster no longer configured, is gone when the caller returns), and give the
    /// memory back. Whether anything was freed.
    pub(super) fn free_unreferenced(&self) -> bool {
        if !self.running() {
            return false;
        }
        self.held.free_unreferenced()
    }
}

impl Held {
    fn free_unreferenced(&self) -> bool {
        let free: Vec<Arc<ConfigGeneration>> = {
            let mut held = self.list.lock().unwrap_or_else(|e| e.into_inner());
            let (free, keep) = held.drain(..).partition(|g| Arc::strong_count(g) == 1);
            *held = keep;
            free
        };
        if free.is_empty() {
            return false;
        }
        drop(free);
        self.memory.release_freed();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_is_freed_once_its_last_request_lets_go() {
        let dir = std::env::temp_dir().join(format!("aap-retire-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("tenants")).unwrap();
        let text = format!(
            "tenants_dir = \"tenants\"\n[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n[state]\ndir = {:?}\n",
            dir.display().to_string()
        );
        let config = crate::config::Config::parse(&text, &dir.join("gateway.toml")).unwrap();
        let old = Arc::new(ConfigGeneration::build(config, 7).unwrap());
        let in_flight = old.clone();
        let freed = Arc::downgrade(&old);
        let retired = Retired::new(Arc::default());
        retired.retire(old);
        std::thread::sleep(LOOK_EVERY * 4);
        assert!(freed.upgrade().is_some(), "a request still holds it");
        // The request's drop is not the last: the `retire` thread frees it
        // (it looks every 50 ms; this check follows the drop by nanoseconds).
        drop(in_flight);
        assert!(freed.upgrade().is_some(), "freed by the request's drop");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while freed.upgrade().is_some() {
            assert!(std::time::Instant::now() < deadline, "never freed");
            std::thread::sleep(LOOK_EVERY);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
