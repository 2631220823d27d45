//! Inventory sources: a feed file re-read when it changes, or a URL polled with `ETag` /
//! `If-Modified-Since`; each parsed feed is judged and swapped in whole, or refused.
//!
//! One [`FeedSource`] exists per distinct source (location, format, mapping and policy): every
//! tenant naming the same one shares its loaded inventory, across config reloads too, through a
//! process-wide registry of weak references. Its watcher thread ends when the last tenant lets go.

use super::Inventory;
use crate::aap::schemas::SchemaSet;
use crate::config::{EmbeddedBackendConfig, FeedConfig, Secret};
use crate::feed::{self, Format, Mapping, Policy};
use arc_swap::ArcSwapOption;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

/// Rejected rows logged one per line for each load; the rest are counted.
const LOGGED_REJECTS: usize = 100;
/// Largest feed body accepted from a URL.
const MAX_FEED_BYTES: usize = 512 * 1024 * 1024;

/// Where a feed is read from.
#[derive(Debug, Clone)]
pub enum Location {
    File(PathBuf),
    Url {
        url: String,
        authorization: Option<Secret>,
        ca_file: Option<PathBuf>,
        timeout: Duration,
    },
}

/// Everything that identifies one source: equal specs share one [`FeedSource`].
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub format: Format,
    pub mapping: Mapping,
    pub policy: Policy,
    pub location: Location,
    pub interval: Duration,
    pub stale_after_secs: u64,
}

impl SourceSpec {
    /// The source of an embedded tenant: its `[tenants.backend.feed]`, or
    /// `inventory = "…json"` as a JSON file feed. `resolve` makes paths absolute.
    pub fn of_backend(e: &EmbeddedBackendConfig, resolve: &dyn Fn(&Path) -> PathBuf) -> SourceSpec {
        let feed = match (&e.feed, &e.inventory) {
            (Some(f), _) => f.clone(),
            (None, Some(p)) => FeedConfig::json_file(p.clone()),
            (None, None) => FeedConfig::json_file(PathBuf::new()),
        };
        let location = match (&feed.file, &feed.url) {
            (_, Some(url)) => Location::Url {
                url: url.clone(),
                authorization: feed.authorization.clone(),
                ca_file: feed.ca_file.as_deref().map(resolve),
                timeout: Duration::from_millis(feed.timeout_ms),
            },
            (Some(p), None) => Location::File(resolve(p)),
            (None, None) => Location::File(PathBuf::new()),
        };
        SourceSpec {
            format: feed.format,
            mapping: feed.mapping(),
            policy: feed.policy(),
            location,
            interval: Duration::from_secs(feed.interval_secs()),
            stale_after_secs: feed.stale_after_secs,
        }
    }

    /// The registry key: every setting, the credential as a digest.
    fn key(&self) -> String {
        use sha2::{Digest, Sha256};
        let location = match &self.location {
            Location::File(p) => format!("file:{}", p.display()),
            Location::Url {
                url,
                authorization,
                ca_file,
                timeout,
            } => format!(
                "url:{url}|{}|{ca_file:?}|{timeout:?}",
                authorization
                    .as_ref()
                    .map(|a| hex::encode(Sha256::digest(a.expose().as_bytes())))
                    .unwrap_or_default()
            ),
        };
        format!(
            "{location}|{:?}|{:?}|{:?}|{:?}|{}",
            self.format, self.mapping, self.policy, self.interval, self.stale_after_secs
        )
    }

    /// The `source` label of metrics and `/readyz`: the path, or the URL
    /// without query and fragment (they may hold a token).
    pub fn label(&self) -> String {
        match &self.location {
            Location::File(p) => p.display().to_string(),
            Location::Url { url, .. } => {
                url.split(['?', '#']).next().unwrap_or_default().to_owned()
            }
        }
    }
}

/// What identifies one version of a file: size, modification time, inode.
type Stamp = Option<(u64, std::time::SystemTime, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}

#[derive(Debug, Default)]
struct Poll {
    /// File: the version loaded (or last refused), and the one seen at the last poll.
    loaded: Stamp,
    last: Stamp,
    /// URL: validators of the last body parsed.
    etag: Option<String>,
    last_modified: Option<String>,
}

/// The source's state for `/readyz`.
#[derive(Debug, Clone, Default)]
struct Health {
    last_success_unix: Option<i64>,
    last_check_unix: Option<i64>,
    rows: usize,
    rejected: usize,
    duplicates: usize,
    refusals: u64,
    failures: u64,
    last_error: Option<String>,
}

/// One inventory source and the inventory it serves.
pub struct FeedSource {
    spec: SourceSpec,
    label: String,
    schemas: Arc<SchemaSet>,
    current: ArcSwapOption<Inventory>,
    poll: Mutex<Poll>,
    health: Mutex<Health>,
}

impl std::fmt::Debug for FeedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedSource")
            .field("source", &self.label)
            .finish_non_exhaustive()
    }
}

static SOURCES: LazyLock<Mutex<HashMap<String, Weak<FeedSource>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl FeedSource {
    /// The live source for `spec`, or a new one: a file is loaded now (an
    /// error here is a configuration error: the file is missing, unreadable
    /// or refused), a URL is fetched by its watcher right after.
    pub fn open(spec: SourceSpec, schemas: Arc<SchemaSet>) -> Result<Arc<FeedSource>, String> {
        let key = spec.key();
        let mut sources = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        sources.retain(|_, w| w.strong_count() > 0);
        if let Some(live) = sources.get(&key).and_then(Weak::upgrade) {
            return Ok(live);
        }
        let label = spec.label();
        let m = &*crate::metrics::FEED;
        for result in ["ok", "refused", "failed"] {
            m.loads.with_label_values(&[&label, result]).inc_by(0);
        }
        m.stale_after
            .with_label_values(&[&label])
            .set(spec.stale_after_secs as i64);
        let source = Arc::new(FeedSource {
            label,
            schemas,
            current: ArcSwapOption::empty(),
            poll: Mutex::new(Poll::default()),
            health: Mutex::new(Health::default()),
            spec,
        });
        if let Location::File(path) = &source.spec.location {
            let s = stamp(path);
            {
                let mut poll = source.poll.lock().unwrap_or_else(|e| e.into_inner());
                poll.loaded = s;
                poll.last = s;
            }
            let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            source
                .offer(&bytes)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        source.watch();
        sources.insert(key, Arc::downgrade(&source));
        Ok(source)
    }

    /// The inventory served now; `None` until a first feed was accepted.
    pub fn inventory(&self) -> Option<Arc<Inventory>> {
        self.current.load_full()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Parse, judge and (when usable) swap in a feed body.
    pub fn offer(&self, bytes: &[u8]) -> Result<(), String> {
        let m = &*crate::metrics::FEED;
        let label = self.label.as_str();
        let now = now_unix();
        let parsed = feed::parse(
            self.spec.format,
            &self.spec.mapping,
            bytes,
            &self.schemas,
            &crate::clock::now_rfc3339(),
        );
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.last_check_unix = Some(now);
        m.last_check.with_label_values(&[label]).set(now);
        let parsed = match parsed {
            Ok(p) => p,
            Err(e) => {
                health.failures += 1;
                health.last_error = Some(e.to_string());
                m.loads.with_label_values(&[label, "failed"]).inc();
                tracing::error!(source = label, error = %e, "inventory feed unreadable; the previous inventory keeps serving");
                return Err(e.to_string());
            }
        };
        let r = &parsed.report;
        for reason in r.rejected.iter().take(LOGGED_REJECTS) {
            tracing::warn!(source = label, row = reason.row, reason = %reason, "inventory feed row rejected");
        }
        if r.rejected.len() > LOGGED_REJECTS {
            tracing::warn!(
                source = label,
                more = r.rejected.len() - LOGGED_REJECTS,
                "more inventory feed rows rejected (not logged one by one)"
            );
        }
        for d in &r.duplicates {
            tracing::warn!(source = label, row = d.row, reason = %d, "inventory feed row skipped as a duplicate");
        }
        health.rows = r.rows;
        health.rejected = r.rejected.len();
        health.duplicates = r.duplicates.len();
        m.rejected
            .with_label_values(&[label])
            .set(r.rejected.len() as i64);
        m.duplicates
            .with_label_values(&[label])
            .set(r.duplicates.len() as i64);
        let previous = self.current.load().as_ref().map(|i| i.len());
        if let Err(refusal) = feed::judge(r, previous, &self.spec.policy) {
            health.refusals += 1;
            health.last_error = Some(format!("refused: {refusal}"));
            m.loads.with_label_values(&[label, "refused"]).inc();
            tracing::error!(source = label, reason = refusal.reason(), error = %refusal, "inventory feed refused; the previous inventory keeps serving");
            return Err(format!("refused: {refusal}"));
        }
        let (rows, loaded, rejected, duplicates) =
            (r.rows, r.loaded, r.rejected.len(), r.duplicates.len());
        let inventory = Inventory::new(parsed.vehicles);
        self.current.store(Some(Arc::new(inventory)));
        health.last_success_unix = Some(now);
        health.last_error = None;
        m.loads.with_label_values(&[label, "ok"]).inc();
        m.last_success.with_label_values(&[label]).set(now);
        m.vehicles.with_label_values(&[label]).set(loaded as i64);
        tracing::info!(
            source = label,
            rows,
            loaded,
            rejected,
            duplicates,
            "inventory feed loaded"
        );
        Ok(())
    }

    /// File: reload when the file differs from the version loaded (or last
    /// refused) and has not changed since the previous poll, so a file
    /// caught while being written is read only once it is complete.
    fn poll_file(&self, path: &Path) {
        let now = stamp(path);
        let due = {
            let mut poll = self.poll.lock().unwrap_or_else(|e| e.into_inner());
            let due = now != poll.loaded && now == poll.last;
            poll.last = now;
            if due {
                poll.loaded = now;
            }
            due
        };
        if !due {
            if now.is_some() {
                let t = now_unix();
                self.health
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .last_check_unix = Some(t);
                crate::metrics::FEED
                    .last_check
                    .with_label_values(&[&self.label])
                    .set(t);
            }
            return;
        }
        match std::fs::read(path) {
            Ok(bytes) => {
                let _ = self.offer(&bytes);
            }
            Err(e) => self.failed(&format!("cannot read the feed file: {e}")),
        }
    }

    fn failed(&self, problem: &str) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.failures += 1;
        health.last_error = Some(problem.to_owned());
        crate::metrics::FEED
            .loads
            .with_label_values(&[&self.label, "failed"])
            .inc();
        tracing::error!(source = %self.label, error = problem, "inventory feed unavailable; the previous inventory keeps serving");
    }

    /// URL: one conditional GET; a changed body is offered.
    async fn poll_url(&self, client: &reqwest::Client) {
        let Location::Url {
            url,
            authorization,
            timeout,
            ..
        } = &self.spec.location
        else {
            return;
        };
        let mut req = client.get(url).timeout(*timeout);
        {
            let poll = self.poll.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(etag) = &poll.etag {
                req = req.header(reqwest::header::IF_NONE_MATCH, etag.as_str());
            }
            if let Some(lm) = &poll.last_modified {
                req = req.header(reqwest::header::IF_MODIFIED_SINCE, lm.as_str());
            }
        }
        if let Some(a) = authorization {
            match reqwest::header::HeaderValue::from_str(a.expose()) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    req = req.header(reqwest::header::AUTHORIZATION, v);
                }
                Err(_) => return self.failed("authorization is not a valid header value"),
            }
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return self.failed(&format!("fetch failed: {}", e.without_url())),
        };
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_MODIFIED {
            let t = now_unix();
            self.health
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .last_check_unix = Some(t);
            crate::metrics::FEED
                .last_check
                .with_label_values(&[&self.label])
                .set(t);
            return;
        }
        if !status.is_success() {
            return self.failed(&format!("the feed URL answered HTTP {}", status.as_u16()));
        }
        let header = |name| {
            resp.headers()
                .get(name)
                .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let (etag, last_modified) = (
            header(reqwest::header::ETAG),
            header(reqwest::header::LAST_MODIFIED),
        );
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(c)) if body.len() + c.len() > MAX_FEED_BYTES => {
                    return self.failed(&format!("the feed is larger than {MAX_FEED_BYTES} bytes"))
                }
                Ok(Some(c)) => body.extend_from_slice(&c),
                Ok(None) => break,
                Err(e) => return self.failed(&format!("download failed: {}", e.without_url())),
            }
        }
        // The same body is not parsed again, whether it was accepted or refused.
        {
            let mut poll = self.poll.lock().unwrap_or_else(|e| e.into_inner());
            poll.etag = etag;
            poll.last_modified = last_modified;
        }
        let _ = self.offer(&body);
    }

    /// Start the watcher thread (file polls, or URL fetches on a runtime of its own).
    fn watch(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let interval = self.spec.interval;
        let label = self.label.clone();
        let spawned = match self.spec.location.clone() {
            Location::File(path) => std::thread::Builder::new()
                .name("feed-file".into())
                .spawn(move || loop {
                    std::thread::sleep(interval);
                    let Some(me) = weak.upgrade() else { return };
                    me.poll_file(&path);
                }),
            Location::Url {
                ca_file, timeout, ..
            } => std::thread::Builder::new()
                .name("feed-url".into())
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            tracing::error!(source = %label, error = %e, "inventory feed watcher cannot start");
                            return;
                        }
                    };
                    rt.block_on(async move {
                        let client = match crate::outbound::client(ca_file.as_deref(), timeout) {
                            Ok(c) => c,
                            Err(e) => {
                                if let Some(me) = weak.upgrade() {
                                    me.failed(&e.to_string());
                                }
                                return;
                            }
                        };
                        loop {
                            let Some(me) = weak.upgrade() else { return };
                            me.poll_url(&client).await;
                            drop(me);
                            tokio::time::sleep(interval).await;
                        }
                    });
                }),
        };
        if let Err(e) = spawned {
            tracing::error!(source = %self.label, error = %e, "inventory feed watcher unavailable; the feed is not refreshed");
        }
    }

    /// `/readyz` detail: `state` is `ok`, `stale` (no successful load for
    /// `stale_after_secs`) or `never_loaded`.
    pub fn health(&self) -> Value {
        let h = self
            .health
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let now = now_unix();
        let rfc = |t: Option<i64>| {
            t.and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
        };
        let state = match h.last_success_unix {
            None => "never_loaded",
            Some(t) if now - t > self.spec.stale_after_secs as i64 => "stale",
            Some(_) => "ok",
        };
        json!({
            "source": self.label,
            "state": state,
            "vehicles": self.current.load().as_ref().map(|i| i.len()),
            "last_success": rfc(h.last_success_unix),
            "last_check": rfc(h.last_check_unix),
            "rows": h.rows,
            "rejected": h.rejected,
            "duplicates": h.duplicates,
            "refusals": h.refusals,
            "failures": h.failures,
            "last_error": h.last_error,
        })
    }
}
