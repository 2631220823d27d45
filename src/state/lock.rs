//! Who may write under `state.dir`: one running gateway holds an exclusive
//! lock on `<state.dir>/aap-gateway.lock`; offline commands never take it.
//!
//! `run` takes the lock at start (a second `run` on the same directory is
//! refused); `run --upgrade` waits for it in the background while the old
//! process drains, and every writer ([`StateLocks::ready`]) waits, bounded, until it is
//! held. The lock is `flock(2)` through std's `File::try_lock`/`lock`, so it
//! is released by the kernel whenever the holder exits, even by SIGKILL.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Name of the lock file inside `state.dir`.
pub const LOCK_FILE: &str = "aap-gateway.lock";

/// How long a writer of a process started with `--upgrade` waits for the old
/// process to release the state: its grace period plus its graceful shutdown
/// timeout (see `cli/run.rs`), plus a margin.
pub const UPGRADE_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Waiting,
    Held,
    Failed(String),
}

#[derive(Debug)]
struct DirLock {
    status: watch::Receiver<Status>,
    /// Keeps the locked file description open for the life of the process.
    _file: Arc<Mutex<Option<File>>>,
}

/// The state directories this process holds (or waits for), by path: one
/// value per process, in its `Platform`.
#[derive(Debug, Default)]
pub struct StateLocks {
    by_dir: Mutex<HashMap<PathBuf, DirLock>>,
}

fn open_lock_file(dir: &Path) -> Result<File, String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("state.dir {}: cannot create directory: {e}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("state.dir {}: cannot open {LOCK_FILE}: {e}", dir.display()))
}

/// Record the holder's pid in the lock file (for the refusal message).
fn write_pid(f: &mut File) {
    let _ = f
        .set_len(0)
        .and_then(|_| f.rewind())
        .and_then(|_| writeln!(f, "{}", std::process::id()))
        .and_then(|_| f.sync_data());
}

fn busy(dir: &Path) -> String {
    let mut pid = String::new();
    let _ = File::open(dir.join(LOCK_FILE)).and_then(|mut f| f.read_to_string(&mut pid));
    let holder = match pid.trim().parse::<u32>() {
        Ok(p) => format!("another aap-gateway process (pid {p})"),
        Err(_) => "another aap-gateway process".to_owned(),
    };
    format!(
        "state.dir {}: in use by {holder}; one gateway owns a state directory (stop it, give this one another state.dir, or start this one with --upgrade to take over)",
        dir.display()
    )
}

impl StateLocks {
    /// Take the lock on `dir` now, or fail with a message naming the directory
    /// and the holder's pid. For `run`.
    pub fn hold(&self, dir: &Path) -> Result<(), String> {
        let mut reg = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
        if reg.contains_key(dir) {
            return Ok(());
        }
        let mut f = open_lock_file(dir)?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(busy(dir)),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("state.dir {}: cannot lock: {e}", dir.display()))
            }
        }
        write_pid(&mut f);
        let (_tx, rx) = watch::channel(Status::Held);
        reg.insert(
            dir.to_path_buf(),
            DirLock {
                status: rx,
                _file: Arc::new(Mutex::new(Some(f))),
            },
        );
        Ok(())
    }

    /// Take the lock on `dir` as soon as its current holder releases it (the old
    /// process of a graceful upgrade). Returns at once; writers wait in [`StateLocks::ready`].
    pub fn hold_when_free(&self, dir: &Path) -> Result<(), String> {
        let mut reg = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
        if reg.contains_key(dir) {
            return Ok(());
        }
        let f = open_lock_file(dir)?;
        let (tx, rx) = watch::channel(Status::Waiting);
        let slot = Arc::new(Mutex::new(None));
        let kept = slot.clone();
        let shown = dir.display().to_string();
        std::thread::Builder::new()
            .name("state-lock".into())
            .spawn(move || {
                let mut f = f;
                let status = match f.lock() {
                    Ok(()) => {
                        write_pid(&mut f);
                        *kept.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
                        tracing::info!(state_dir = %shown, "state lock taken over from the previous process");
                        Status::Held
                    }
                    Err(e) => Status::Failed(format!("state.dir {shown}: cannot lock: {e}")),
                };
                let _ = tx.send(status);
            })
            .map_err(|e| format!("cannot start the state lock thread: {e}"))?;
        reg.insert(
            dir.to_path_buf(),
            DirLock {
                status: rx,
                _file: slot,
            },
        );
        Ok(())
    }

    /// Wait (at most `wait`) until this process holds the lock on `dir`. A
    /// directory nobody registered (a library user, or a reload that moved
    /// `state.dir`) is locked now, without waiting.
    pub async fn ready(&self, dir: &Path, wait: Duration) -> Result<(), String> {
        let rx = {
            let reg = self.by_dir.lock().unwrap_or_else(|e| e.into_inner());
            reg.get(dir).map(|l| l.status.clone())
        };
        let Some(mut rx) = rx else {
            return self.hold(dir);
        };
        let outcome = tokio::time::timeout(wait, rx.wait_for(|s| *s != Status::Waiting)).await;
        match outcome {
            Ok(Ok(s)) => match &*s {
                Status::Held => Ok(()),
                Status::Failed(e) => Err(e.clone()),
                Status::Waiting => Err(busy(dir)),
            },
            Ok(Err(_)) => Err(format!(
                "state.dir {}: the state lock thread stopped",
                dir.display()
            )),
            Err(_) => Err(format!(
                "state.dir {}: the previous process still holds the state",
                dir.display()
            )),
        }
    }
}

/// Offline check that `dir` could serve as the state directory, without
/// creating or writing anything: it is a directory (or does not exist yet)
/// and is not read-only.
pub fn check_usable(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(format!("state.dir {}: not a directory", dir.display())),
        Ok(m) if m.permissions().readonly() => {
            Err(format!("state.dir {}: read-only", dir.display()))
        }
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("state.dir {}: {e}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("aapgw-lock-{}", uuid::Uuid::new_v4().simple()))
    }

    #[tokio::test]
    async fn a_held_directory_is_refused_and_waited_for_with_a_bound() {
        let d = dir();
        // Another holder: flock locks belong to an open file description, so
        // a second open in this process is a different holder.
        let other = open_lock_file(&d).unwrap();
        other.try_lock().unwrap();
        std::fs::write(d.join(LOCK_FILE), "4242\n").unwrap();
        let locks = StateLocks::default();
        let e = locks.hold(&d).unwrap_err();
        assert!(
            e.contains(&d.display().to_string()) && e.contains("pid 4242"),
            "{e}"
        );
        // An upgrade waits in the background; writers wait at most `wait`.
        locks.hold_when_free(&d).unwrap();
        let e = locks
            .ready(&d, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.contains("still holds"), "{e}");
        // Once the holder lets go, the waiting writer gets the directory.
        drop(other);
        locks.ready(&d, Duration::from_secs(5)).await.unwrap();
        let pid = std::fs::read_to_string(d.join(LOCK_FILE)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn check_usable_writes_nothing() {
        let d = dir();
        check_usable(&d).unwrap();
        assert!(!d.exists());
        std::fs::write(&d, b"").unwrap();
        assert!(check_usable(&d).unwrap_err().contains("not a directory"));
        std::fs::remove_file(&d).ok();
    }
}
