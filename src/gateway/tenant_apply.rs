//! Applying one changed file of `tenants_dir` to the running generation (only that tenant is built;
//! a file that fails is refused on its own), and the poll of the directory that decides which.
//!
//! The directory is polled (file size, modification time and inode, like the TLS files in
//! `crate::tls`) rather than watched with inotify (`notify`): polling sees the same thing on
//! every filesystem, including network mounts and Kubernetes ConfigMap volumes (a symlink
//! swap) where inotify events are missed, and a file is applied only once it has stayed
//! unchanged for one poll, so a half-written file is never read. A poll costs one `stat`
//! per file.

use super::generation::{Changed, ConfigGeneration, TenantFile};
use super::tenant;
use super::tenant_dir::{list, log_refused, read_one};
use super::Gateway;
use crate::series::TenantFileMetrics;
use crate::tls::{stamp, Stamp};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Refresh `aap_tenant_files` from a generation (after every swap).
pub(super) fn publish_metrics(m: &TenantFileMetrics, rt: &ConfigGeneration) {
    let refused = rt.files.values().filter(|f| f.error.is_some()).count();
    m.files
        .with_label_values(&["applied"])
        .set((rt.files.len() - refused) as i64);
    m.files.with_label_values(&["refused"]).set(refused as i64);
}

impl Gateway {
    /// Apply one file of `tenants_dir` as it is now (added, changed or
    /// removed): only that tenant is built; every other tenant keeps its
    /// unit. A file that fails is refused; the previous version of its
    /// tenant, if any, keeps serving. Its upstream client comes from the
    /// cluster registry (no lookup here); its lead outbox takes the new
    /// sinks once the new generation is served, and keeps its old ones if
    /// the file is refused (only this tenant's staged policy is dropped).
    pub async fn apply_tenant_file(&self, name: &str) {
        let _one_at_a_time = self.reload_lock.lock().await;
        self.apply_tenant_file_now(name);
        // What the replaced generation alone held (the old unit) goes now.
        self.retired.free_unreferenced();
    }

    fn apply_tenant_file_now(&self, name: &str) {
        let started = Instant::now();
        let cur = self.current();
        let Some(dir) = cur.config.tenants_dir_path() else {
            return;
        };
        let path = dir.join(name);
        let now = stamp(&path);
        let mut files = cur.files.clone();
        let old = files
            .get(name)
            .and_then(|f| f.tenant.as_deref())
            .and_then(|id| cur.routes.units.get(id))
            .filter(|u| u.file.as_deref() == Some(name))
            .cloned();
        // The routes without this file's tenant (a clone of persistent maps: O(1)).
        let mut routes = cur.routes.clone();
        if let Some(o) = &old {
            routes.remove(o.id());
        }
        let removed = old.as_ref().map(|u| u.id());
        if now.is_none() {
            files.remove(name);
            let changed = Changed::One {
                removed,
                added: None,
            };
            self.swap(cur.with_routes(routes, files), changed);
            self.platform
                .metrics
                .tenant_files
                .applies
                .with_label_values(&["removed"])
                .inc();
            tracing::info!(
                file = name,
                tenant = old.as_ref().map(|u| u.id()).unwrap_or("-"),
                elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                "tenant file removed"
            );
            return;
        }
        let read = read_one(&cur.config, &dir, name, now);
        let mut staged_for = None;
        let built = read
            .result
            .and_then(|t| {
                routes.check(&t, name)?;
                let prior = old.as_ref().filter(|o| o.id() == t.id);
                staged_for = Some(t.id.clone());
                tenant::build(t, Some(name.to_owned()), &cur.shared(), prior).map_err(|e| e.0)
            })
            .and_then(|unit| {
                let same = old.as_ref().is_some_and(|o| Arc::ptr_eq(o, &unit));
                let id = unit.id().to_owned();
                routes.add(unit)?;
                Ok((id, same))
            });
        match built {
            Ok((id, same)) => {
                files.insert(
                    name.to_owned(),
                    TenantFile {
                        stamp: now,
                        tenant: Some(id.clone()),
                        error: None,
                    },
                );
                let changed = Changed::One {
                    removed,
                    added: Some(&id),
                };
                self.swap(cur.with_routes(routes, files), changed);
                // This tenant's lead outbox takes its new sinks only now.
                self.platform.outboxes.commit_staged();
                self.platform
                    .metrics
                    .tenant_files
                    .applies
                    .with_label_values(&["applied"])
                    .inc();
                tracing::info!(
                    file = name,
                    tenant = id,
                    unchanged = same,
                    elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "tenant file applied"
                );
            }
            Err(e) => {
                if let Some(id) = &staged_for {
                    // The serving version (if any) keeps its sinks.
                    self.platform.outboxes.discard_staged_of(id);
                }
                log_refused(name, &e, old.is_some());
                files.insert(
                    name.to_owned(),
                    TenantFile {
                        stamp: now,
                        tenant: old.as_ref().map(|u| u.id().to_owned()),
                        error: Some(e),
                    },
                );
                // The routes as they were: the previous version keeps serving.
                let nothing = Changed::One {
                    removed: None,
                    added: None,
                };
                self.swap(cur.with_routes(cur.routes.clone(), files), nothing);
                self.platform
                    .metrics
                    .tenant_files
                    .applies
                    .with_label_values(&["refused"])
                    .inc();
            }
        }
    }

    /// One poll of `tenants_dir`: apply each file that differs from the
    /// version the running generation knows and has not changed since the
    /// previous poll (`last`), and each file that disappeared.
    pub async fn poll_tenant_dir(&self, last: &mut HashMap<String, Stamp>) {
        let cur = self.current();
        let Some(dir) = cur.config.tenants_dir_path() else {
            last.clear();
            return;
        };
        let listed = match list(&dir) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "tenants_dir not read this time; the tenants keep serving");
                return;
            }
        };
        let mut due = Vec::new();
        for (name, now) in &listed {
            let known = cur.files.get(name).map(|f| f.stamp);
            if known != Some(*now) && last.get(name) == Some(now) {
                due.push(name.clone());
            }
        }
        let listed: HashMap<String, Stamp> = listed.into_iter().collect();
        for name in cur.files.keys() {
            if !listed.contains_key(name) && !last.contains_key(name) {
                due.push(name.clone());
            }
        }
        *last = listed;
        for name in due {
            self.apply_tenant_file(&name).await;
        }
    }

    /// Poll `tenants_dir` every `interval` on a thread of its own (0: never;
    /// SIGHUP and `POST /reload` still re-read the whole directory).
    pub fn watch_tenant_dir(self: &Arc<Self>, interval: Duration) {
        if interval.is_zero() {
            return;
        }
        let me = self.clone();
        crate::background::spawn_loop(
            "tenants-watch",
            "tenants_dir watch unavailable; use SIGHUP or POST /reload",
            move || async move {
                let mut last = HashMap::new();
                loop {
                    tokio::time::sleep(interval).await;
                    me.poll_tenant_dir(&mut last).await;
                }
            },
        );
    }
}
