//! Swapped-out generations are freed on a thread of their own, never on a request worker:
//! whoever drops the last reference to a generation frees it, and the config of 10,000 tenants
//! took 20–40 ms to free, a stall for every request behind it on that worker.
//!
//! [`retire`] takes the generation a swap replaced. The `retire` thread frees each one once it
//! holds its last reference (requests in flight keep theirs until they finish: the running
//! generation is no longer reachable, so that count only falls), then gives the memory back
//! (`memory::release_freed`).

use super::ConfigGeneration;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// How often the `retire` thread looks at the generations it holds.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// Generations swapped out and not yet freed; `None` when the thread could not start (then a
/// generation is dropped where it is retired, as before).
static RETIRED: LazyLock<Option<Mutex<Vec<Arc<ConfigGeneration>>>>> = LazyLock::new(|| {
    std::thread::Builder::new()
        .name("retire".into())
        .spawn(|| {
            crate::background::lower_priority();
            loop {
                std::thread::sleep(LOOK_EVERY);
                let _ = free_unreferenced();
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "retired generations are freed where they are last dropped"))
        .ok()
        .map(|_| Mutex::new(Vec::new()))
});

/// Free `old` on the `retire` thread once nothing else references it.
pub(super) fn retire(old: Arc<ConfigGeneration>) {
    match &*RETIRED {
        Some(list) => list.lock().unwrap_or_else(|e| e.into_inner()).push(old),
        None => drop(old),
    }
}

/// Drop every retired generation nothing else references (here: the `retire` thread, or a
/// reload or tenant apply right after its swap, so that what the old generation alone held,
/// such as a cluster no longer configured, is gone when the caller returns), and give the
/// memory back. Whether anything was freed.
pub(super) fn free_unreferenced() -> bool {
    let Some(list) = &*RETIRED else { return false };
    let free: Vec<Arc<ConfigGeneration>> = {
        let mut held = list.lock().unwrap_or_else(|e| e.into_inner());
        let (free, keep) = held.drain(..).partition(|g| Arc::strong_count(g) == 1);
        *held = keep;
        free
    };
    if free.is_empty() {
        return false;
    }
    drop(free);
    crate::memory::release_freed();
    true
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
        retire(old);
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
