//! Inventory sources: a feed file re-read when it changes, or a URL polled with `ETag` /
//! `If-Modified-Since`; each parsed feed is judged and swapped in whole, or refused.
//!
//! One [`FeedSource`] exists per distinct source (location, format, mapping and policy): every
//! tenant naming the same one shares its loaded inventory, across config reloads too, through the
//! process's registry of weak references ([`FeedSources`]). Its watcher task ends when the last
//! tenant lets go.

use super::Inventory;
use crate::aap::schemas::SchemaSet;
use crate::config::{EmbeddedBackendConfig, FeedConfig, Secret};
use crate::feed::{self, Format, Mapping, Policy};
use crate::file_stamp::{stamp, Stamp};
use arc_swap::ArcSwapOption;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Rejected rows logged one per line for each load; the rest are counted.
const LOGGED_REJECTS: usize = 100;

/// Where a feed is read from.
#[derive(Debug, Clone)]
pub enum Location {
    File(PathBuf),
    Url {
        url: String,
        authorization: Option<Secret>,
        ca_file: Option<PathBuf>,
        timeout: Duration,
        /// The largest body accepted (`max_bytes`).
        max_bytes: u64,
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
                max_bytes: feed.max_bytes,
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
                max_bytes,
            } => format!(
                "url:{url}|{}|{ca_file:?}|{timeout:?}|{max_bytes}",
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

/// What one look at a source found.
#[derive(Debug)]
pub enum Fetched {
    /// The version already loaded (or already refused): nothing to parse.
    Unchanged,
    /// The source itself confirmed that the version last parsed is still current (a URL's
    /// 304 Not Modified): a successful check when that version was accepted.
    NotModified,
    /// A changed source that is still being written: look again at the next poll.
    Settling,
    /// A new version to parse and judge.
    Changed(Vec<u8>),
    /// The source could not be read (the previous inventory keeps serving).
    Failed(String),
}

/// The port an inventory source's transport implements: where a feed's bytes come from and
/// whether they changed since the last look. [`FeedSource`] does the parsing, judging and
/// swapping; a fetcher only reads.
#[async_trait::async_trait]
pub trait FeedFetch: Send + Sync + std::fmt::Debug {
    async fn fetch(&self) -> Fetched;
    /// Look at once, before the first poll (a file is loaded while the config is built).
    fn first(&self) -> Option<Fetched> {
        None
    }
}

/// A feed file, re-read when its size, modification time or inode changed and then stayed
/// unchanged for one more poll, so a file caught while being written is read once complete.
#[derive(Debug)]
pub struct FileFetch {
    path: PathBuf,
    /// The version loaded (or last refused), and the one seen at the last poll.
    seen: Mutex<(Stamp, Stamp)>,
}

impl FileFetch {
    pub fn new(path: PathBuf) -> FileFetch {
        FileFetch {
            path,
            seen: Mutex::new((None, None)),
        }
    }
}

#[async_trait::async_trait]
impl FeedFetch for FileFetch {
    async fn fetch(&self) -> Fetched {
        let now = stamp(&self.path);
        let due = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let due = now != seen.0 && now == seen.1;
            seen.1 = now;
            if due {
                seen.0 = now;
            }
            due
        };
        match (due, now) {
            (false, Some(_)) => Fetched::Unchanged,
            (false, None) => Fetched::Settling,
            (true, _) => match tokio::fs::read(&self.path).await {
                Ok(bytes) => Fetched::Changed(bytes),
                Err(e) => Fetched::Failed(format!("cannot read the feed file: {e}")),
            },
        }
    }

    fn first(&self) -> Option<Fetched> {
        let s = stamp(&self.path);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = (s, s);
        Some(match std::fs::read(&self.path) {
            Ok(bytes) => Fetched::Changed(bytes),
            Err(e) => Fetched::Failed(format!("{}: {e}", self.path.display())),
        })
    }
}

/// A feed URL, fetched with `If-None-Match` / `If-Modified-Since` from the validators of the
/// last body parsed; a 304 changes nothing but counts as a successful check when the last
/// body parsed was accepted. Redirects are not followed.
#[derive(Debug)]
pub struct UrlFetch {
    url: String,
    authorization: Option<Secret>,
    timeout: Duration,
    /// The largest body accepted (`max_bytes`).
    max_bytes: u64,
    client: Result<reqwest::Client, String>,
    /// `ETag` and `Last-Modified` of the last body parsed.
    validators: Mutex<(Option<String>, Option<String>)>,
}

impl UrlFetch {
    pub fn new(
        url: String,
        authorization: Option<Secret>,
        ca_file: Option<&Path>,
        timeout: Duration,
        max_bytes: u64,
    ) -> UrlFetch {
        UrlFetch {
            url,
            authorization,
            timeout,
            max_bytes,
            client: crate::outbound::client(ca_file, timeout).map_err(|e| e.to_string()),
            validators: Mutex::new((None, None)),
        }
    }
}

#[async_trait::async_trait]
impl FeedFetch for UrlFetch {
    async fn fetch(&self) -> Fetched {
        let client = match &self.client {
            Ok(c) => c,
            Err(e) => return Fetched::Failed(e.clone()),
        };
        let mut req = client.get(&self.url).timeout(self.timeout);
        {
            let v = self.validators.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(etag) = &v.0 {
                req = req.header(reqwest::header::IF_NONE_MATCH, etag.as_str());
            }
            if let Some(lm) = &v.1 {
                req = req.header(reqwest::header::IF_MODIFIED_SINCE, lm.as_str());
            }
        }
        if let Some(a) = &self.authorization {
            match reqwest::header::HeaderValue::from_str(a.expose()) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    req = req.header(reqwest::header::AUTHORIZATION, v);
                }
                Err(_) => {
                    return Fetched::Failed("authorization is not a valid header value".into())
                }
            }
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Fetched::Failed(format!("fetch failed: {}", e.without_url())),
        };
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_MODIFIED {
            return Fetched::NotModified;
        }
        if !status.is_success() {
            return Fetched::Failed(format!("the feed URL answered HTTP {}", status.as_u16()));
        }
        let header = |name| {
            resp.headers()
                .get(name)
                .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let validators = (
            header(reqwest::header::ETAG),
            header(reqwest::header::LAST_MODIFIED),
        );
        // The cap holds before the download (a declared length over it is refused without
        // reading a byte) and while it runs (each chunk is counted before it is kept), so a
        // body never takes more than the cap, whatever the peer says or sends.
        let cap = self.max_bytes;
        let too_large = || {
            Fetched::Failed(format!(
                "the feed is larger than max_bytes ({cap} bytes); the previous inventory keeps serving"
            ))
        };
        let declared = resp.content_length();
        if declared.is_some_and(|n| n > cap) {
            return too_large();
        }
        // Reserve the declared length (at most the cap) once instead of doubling up to it.
        let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
        loop {
            match resp.chunk().await {
                Ok(Some(c)) if (body.len() + c.len()) as u64 > cap => return too_large(),
                Ok(Some(c)) => body.extend_from_slice(&c),
                Ok(None) => break,
                Err(e) => return Fetched::Failed(format!("download failed: {}", e.without_url())),
            }
        }
        // The same body is not parsed again, whether it is accepted or refused.
        *self.validators.lock().unwrap_or_else(|e| e.into_inner()) = validators;
        Fetched::Changed(body)
    }
}

/// Every live inventory source of a process, by its key, and the one runtime their watchers
/// run on (a thread, not one per source), started on first use.
#[derive(Debug, Default)]
pub struct FeedSources {
    sources: Mutex<HashMap<String, Weak<FeedSource>>>,
    /// `None` inside when the thread could not be started (logged, feeds not refreshed).
    watchers: OnceLock<Option<tokio::runtime::Runtime>>,
}

impl Drop for FeedSources {
    fn drop(&mut self) {
        // Its watchers end with it, wherever it is dropped (a test's async context too).
        if let Some(Some(rt)) = self.watchers.take() {
            rt.shutdown_background();
        }
    }
}

impl FeedSources {
    fn watchers(&self) -> Option<&tokio::runtime::Runtime> {
        self.watchers
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .max_blocking_threads(4)
                    .thread_name("feed-watch")
                    .enable_all()
                    .build()
                    .inspect_err(|e| tracing::error!(error = %e, "inventory feed watchers cannot start; feeds are not refreshed"))
                    .ok()
            })
            .as_ref()
    }

    /// The live source for `spec`, or a new one: a file is loaded now (an
    /// error here is a configuration error: the file is missing, unreadable
    /// or refused), a URL is fetched by its watcher right after.
    pub fn open(
        &self,
        spec: SourceSpec,
        schemas: Arc<SchemaSet>,
    ) -> Result<Arc<FeedSource>, String> {
        let key = spec.key();
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.retain(|_, w| w.strong_count() > 0);
        if let Some(live) = sources.get(&key).and_then(Weak::upgrade) {
            return Ok(live);
        }
        let label = spec.label();
        let m = &crate::metrics::METRICS.feed;
        for result in ["ok", "refused", "failed"] {
            m.loads.with_label_values(&[&label, result]).inc_by(0);
        }
        m.stale_after
            .with_label_values(&[&label])
            .set(spec.stale_after_secs as i64);
        let fetch: Box<dyn FeedFetch> = match &spec.location {
            Location::File(path) => Box::new(FileFetch::new(path.clone())),
            Location::Url {
                url,
                authorization,
                ca_file,
                timeout,
                max_bytes,
            } => Box::new(UrlFetch::new(
                url.clone(),
                authorization.clone(),
                ca_file.as_deref(),
                *timeout,
                *max_bytes,
            )),
        };
        let source = Arc::new(FeedSource {
            label,
            schemas,
            current: ArcSwapOption::empty(),
            fetch,
            health: Mutex::new(Health::default()),
            spec,
        });
        // A file is loaded now: a missing, unreadable or refused file is a configuration error.
        match source.fetch.first() {
            Some(Fetched::Changed(bytes)) => source
                .offer(&bytes)
                .map_err(|e| format!("{}: {e}", source.label))?,
            Some(Fetched::Failed(e)) => return Err(e),
            _ => {}
        }
        source.watch(self.watchers());
        sources.insert(key, Arc::downgrade(&source));
        Ok(source)
    }
}

/// The source's state for `/readyz`.
#[derive(Debug, Clone, Default)]
struct Health {
    /// The last successful check: a load, or a 304 confirming the loaded version is current.
    last_success_unix: Option<i64>,
    /// When the inventory served now was loaded.
    last_load_unix: Option<i64>,
    last_check_unix: Option<i64>,
    /// Whether the version last parsed was accepted (a 304 for a refused one is no success).
    latest_accepted: bool,
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
    fetch: Box<dyn FeedFetch>,
    health: Mutex<Health>,
}

impl std::fmt::Debug for FeedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedSource")
            .field("source", &self.label)
            .finish_non_exhaustive()
    }
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

impl FeedSource {
    /// The inventory served now; `None` until a first feed was accepted.
    pub fn inventory(&self) -> Option<Arc<Inventory>> {
        self.current.load_full()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Parse, judge and (when usable) swap in a feed body.
    pub fn offer(&self, bytes: &[u8]) -> Result<(), String> {
        let m = &crate::metrics::METRICS.feed;
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
                health.latest_accepted = false;
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
            health.latest_accepted = false;
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
        health.last_load_unix = Some(now);
        health.latest_accepted = true;
        health.last_error = None;
        m.loads.with_label_values(&[label, "ok"]).inc();
        m.last_success.with_label_values(&[label]).set(now);
        m.last_load.with_label_values(&[label]).set(now);
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

    fn failed(&self, problem: &str) {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.failures += 1;
        health.last_error = Some(problem.to_owned());
        crate::metrics::METRICS
            .feed
            .loads
            .with_label_values(&[&self.label, "failed"])
            .inc();
        tracing::error!(source = %self.label, error = problem, "inventory feed unavailable; the previous inventory keeps serving");
    }

    /// The source was reached and had nothing new. `confirmed` (a 304) makes it a successful
    /// check when the version last parsed was accepted: the inventory served is current, so
    /// the source is not stale however long it stays unchanged.
    fn checked(&self, confirmed: bool) {
        let t = now_unix();
        let m = &crate::metrics::METRICS.feed;
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        health.last_check_unix = Some(t);
        m.last_check.with_label_values(&[&self.label]).set(t);
        if confirmed && health.latest_accepted {
            health.last_success_unix = Some(t);
            health.last_error = None;
            m.last_success.with_label_values(&[&self.label]).set(t);
        }
    }

    /// One look at the source; a new version is parsed on a blocking thread (a large feed
    /// takes a while and must not hold up the other sources' polls).
    async fn poll(self: Arc<Self>) {
        match self.fetch.fetch().await {
            Fetched::Unchanged => self.checked(false),
            Fetched::NotModified => self.checked(true),
            Fetched::Settling => {}
            Fetched::Failed(e) => self.failed(&e),
            Fetched::Changed(bytes) => {
                let me = self.clone();
                if tokio::task::spawn_blocking(move || me.offer(&bytes))
                    .await
                    .is_err()
                {
                    self.failed("the feed parser stopped");
                }
            }
        }
    }

    /// Start the source's watcher: a task on the shared feed runtime that polls every
    /// `poll_interval_secs` (a URL at once, then on the interval) and ends when the last
    /// tenant lets go of the source.
    fn watch(self: &Arc<Self>, watchers: Option<&tokio::runtime::Runtime>) {
        let Some(rt) = watchers else {
            tracing::error!(source = %self.label, "inventory feed watcher unavailable; the feed is not refreshed");
            return;
        };
        let weak = Arc::downgrade(self);
        let interval = self.spec.interval;
        let at_once = matches!(self.spec.location, Location::Url { .. });
        rt.spawn(async move {
            if !at_once {
                tokio::time::sleep(interval).await;
            }
            loop {
                let Some(me) = weak.upgrade() else { return };
                me.poll().await;
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// `/readyz` detail: `state` is `ok`, `stale` (no successful check — a load, or a 304
    /// for the version served — for `stale_after_secs`) or `never_loaded`.
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
            "last_load": rfc(h.last_load_unix),
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
