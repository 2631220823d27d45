//! The lead path under process faults (offline commands, a second `run`, an
//! upgrade, SIGKILL on shared Redis + PostgreSQL): one lead per key at the sink.
//!
//! Offline commands beside a live gateway, a second `run` on one state
//! directory, a graceful upgrade under lead load, and instances killed with
//! SIGKILL mid-load on shared state (Redis counters, leads and idempotency
//! records in PostgreSQL), for every backend kind that
//! sends leads. Every test counts leads at the sink: one per key, and the
//! lead id the client was told.

use crate::support::*;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_aap-gateway");

// ---- helpers ----------------------------------------------------------------------------------

/// What one lead submission got back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// `lead.submit.response` (received or duplicate) with its lead id.
    Lead(String),
    /// An `aap.error` with its code and the whole payload.
    Error(String, Value),
    /// No answer (connection refused or cut: the instance died).
    Nothing,
}

impl Answer {
    /// An answer the client should act on without retrying the same key.
    fn is_final(&self) -> bool {
        match self {
            Answer::Lead(_) => true,
            Answer::Error(_, sc) => sc["retryable"] == false,
            Answer::Nothing => false,
        }
    }
}

pub(crate) fn submit(port: u16, key: &str) -> Answer {
    let body = modern(
        "tools/call",
        json!({"name": "aap_lead_submit", "arguments": lead(key)}),
    )
    .to_string();
    let r = match try_request(
        port,
        "POST",
        ENDPOINT,
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    ) {
        Ok(r) if r.status == 200 => r,
        _ => return Answer::Nothing,
    };
    let Ok(j) = serde_json::from_slice::<Value>(&r.body) else {
        return Answer::Nothing;
    };
    let sc = j["result"]["structuredContent"].clone();
    if sc["type"] == "lead.submit.response" {
        return Answer::Lead(
            sc["data"]["lead_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    if sc["type"] == "aap.error" {
        return Answer::Error(sc["code"].as_str().unwrap_or_default().to_owned(), sc);
    }
    if j.get("error").is_some() {
        // A JSON-RPC error (e.g. upstream unavailable): no lead was confirmed.
        return Answer::Nothing;
    }
    panic!("unexpected answer: {j}");
}

/// Submit `key` through `port` until a final answer (bounded).
pub(crate) fn submit_until_final(port: u16, key: &str, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    loop {
        let a = submit(port, key);
        if a.is_final() || Instant::now() >= deadline {
            return a;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Descriptors of `pid` that point to a deleted file.
fn deleted_fds(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            if let Ok(target) = std::fs::read_link(e.path()) {
                let t = target.to_string_lossy().into_owned();
                if t.ends_with("(deleted)") {
                    out.push(t);
                }
            }
        }
    }
    out
}

/// Name, size and inode of every file under `dir` except the gateway's own
/// stderr logs (which grow while it runs).
fn snapshot(dir: &Path) -> Vec<(String, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            let name = e.path().display().to_string();
            if m.is_dir() {
                stack.push(e.path());
            } else if !name.ends_with(".log") {
                out.push((name, m.len(), m.ino()));
            }
        }
    }
    out.sort();
    out
}

fn offline(config: &Path, state: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

/// Lines of an embedded dealer's leads file, grouped by client key.
fn leads_by_key(state: &Path) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for rec in stored_leads(state, "demo-toyota") {
        out.entry(
            rec["request"]["idempotency_key"]
                .as_str()
                .unwrap()
                .to_owned(),
        )
        .or_default()
        .push(rec["lead_id"].as_str().unwrap().to_owned());
    }
    out
}

// ---- 1. offline commands and the state lock ---------------------------------------------------

/// `check` and `catalog` on the config and state directory of a running
/// gateway change nothing there: the running process never ends up writing
/// to an unlinked log, and every record written before and after survives a
/// restart (each key replays its lead id; the log holds every completion).
#[test]
fn check_and_catalog_leave_a_running_gateways_state_alone() {
    let gw = Gateway::start();
    let pid = gw.child.as_ref().unwrap().id();
    let mut told = Vec::new();
    for _ in 0..4 {
        let key = uuid::Uuid::new_v4().to_string();
        let Answer::Lead(id) = submit(gw.port, &key) else {
            panic!("lead refused")
        };
        told.push((key, id));
    }
    let before = snapshot(&gw.state);
    for args in [&["check"][..], &["catalog"][..]] {
        let out = offline(&gw.config, &gw.state, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            deleted_fds(pid),
            Vec::<String>::new(),
            "after {args:?} the gateway writes to a deleted file"
        );
    }
    assert_eq!(
        snapshot(&gw.state),
        before,
        "check/catalog changed the state directory"
    );
    for _ in 0..4 {
        let key = uuid::Uuid::new_v4().to_string();
        let Answer::Lead(id) = submit(gw.port, &key) else {
            panic!("lead refused")
        };
        told.push((key, id));
    }
    assert_eq!(deleted_fds(pid), Vec::<String>::new());
    let state = gw.state.clone();
    let gw = gw.restart();
    let done = completed_keys(&state);
    assert_eq!(done, told.len(), "every completion survived");
    for (key, id) in &told {
        assert_eq!(submit(gw.port, key), Answer::Lead(id.clone()), "key {key}");
    }
    let by_key = leads_by_key(&state);
    assert_eq!(by_key.len(), told.len());
    assert!(by_key.values().all(|ids| ids.len() == 1), "{by_key:?}");
}

/// `check` on a state directory that does not exist yet creates nothing.
#[test]
fn check_creates_nothing() {
    let dir = temp_dir("offline");
    let config = dir.join("gateway.toml");
    std::fs::write(&config, config_with("", "", "")).unwrap();
    let state = dir.join("not-yet");
    for args in [&["check"][..], &["catalog"][..]] {
        let out = offline(&config, &state, args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!state.exists(), "{args:?} created {}", state.display());
    }
    // A state.dir that is a file is reported, offline.
    std::fs::write(&state, b"").unwrap();
    let out = offline(&config, &state, &["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a directory"), "{err}");
    // A lease too short to be meaningful is a config error.
    std::fs::write(
        &config,
        config_with("", "", "").replace("claim_lease_ms = 60000", "claim_lease_ms = 50"),
    )
    .unwrap();
    let out = offline(&config, &dir.join("state"), &["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("state.claim_lease_ms"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A second `run` on a state directory in use stops at start with exit 2
/// and a message naming the directory and the holder's pid; the first keeps
/// serving leads.
#[test]
fn a_second_run_on_the_same_state_dir_is_refused() {
    let gw = Gateway::start();
    let pid = gw.child.as_ref().unwrap().id();
    let mut second = Command::new(BIN)
        .arg("--config")
        .arg(&gw.config)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--state-dir")
        .arg(&gw.state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut second, Duration::from_secs(15));
    if status.is_none() {
        second.kill().ok();
        second.wait().ok();
        panic!("a second gateway started on a state directory in use");
    }
    let mut err = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.unwrap().code(), Some(2), "{err}");
    assert!(
        err.contains(&gw.state.display().to_string()),
        "names the directory: {err}"
    );
    assert!(
        err.contains(&format!("pid {pid}")),
        "names the holder: {err}"
    );
    let key = uuid::Uuid::new_v4().to_string();
    assert!(matches!(submit(gw.port, &key), Answer::Lead(_)));
    assert_eq!(leads_in(&gw.state), 1);
}

/// Graceful upgrade while clients submit leads: the new process serves at
/// once, its leads wait until the old one let go of the state, and nothing
/// is lost or duplicated: every key the clients were told about replays the
/// same lead id through the new process, and the leads file holds exactly
/// one line per key.
#[test]
fn upgrade_under_lead_load_loses_and_duplicates_nothing() {
    let mut gw = Gateway::start_with(
        &config_with("", "", "").replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0"),
    );
    let old_pid = gw.child.as_ref().unwrap().id();
    let port = gw.port;
    let stop = AtomicBool::new(false);
    let told: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let open: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let new_log = gw.state.join("upgraded.log");
    let mut new_child = None;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let key = uuid::Uuid::new_v4().to_string();
                    match submit_until_final(port, &key, Duration::from_secs(40)) {
                        Answer::Lead(id) => {
                            told.lock().unwrap().insert(key, id);
                        }
                        other => {
                            open.lock().unwrap().push(format!("{key}: {other:?}"));
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(800));
        let child = gw.spawn_upgrade(&new_log);
        new_child = Some(child);
        std::thread::sleep(Duration::from_millis(700));
        signal(old_pid, "QUIT");
        let mut old = gw.child.take().unwrap();
        let status = wait_exit(&mut old, Duration::from_secs(30));
        let log = std::fs::read_to_string(&new_log).unwrap_or_default();
        assert!(
            status.is_some(),
            "old process still running; new log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(1500));
        stop.store(true, Ordering::Relaxed);
    });
    gw.child = new_child;
    let open = open.into_inner().unwrap();
    assert!(open.is_empty(), "keys without a lead: {open:?}");
    let told = told.into_inner().unwrap();
    assert!(told.len() > 20, "only {} leads", told.len());
    for (key, id) in &told {
        assert_eq!(
            submit(gw.port, key),
            Answer::Lead(id.clone()),
            "key {key} after the upgrade"
        );
    }
    let by_key = leads_by_key(&gw.state);
    for (key, id) in &told {
        assert_eq!(by_key.get(key), Some(&vec![id.clone()]), "key {key}");
    }
    assert_eq!(by_key.len(), told.len(), "leads nobody was told about");
}

// ---- 2. instances killed mid-load on shared Redis + PostgreSQL ------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sink {
    Embedded,
    Mcp { dedupes: bool },
    A2a { dedupes: bool },
}

const NO_QUOTA: &str = "\n[tenants.quotas]\nlead_submit_per_hour = 0\n";
const A2A_TOKEN: &str = "a2a-upstream-secret";
const LEASE_MS: u64 = 1500;
const KEYS_PER_ROUND: usize = 36;
const ROUNDS: usize = 3;

/// Redis counters and the lead store on `pg`, shared by every instance.
fn shared_state(redis: &Redis, prefix: &str, pg: &PgServer) -> String {
    format!(
        "backend = \"redis\"\nredis_url = \"redis://127.0.0.1:{}/\"\nredis_prefix = \"{prefix}\"\nclaim_lease_ms = {LEASE_MS}\n{}",
        redis.port,
        pg.state_toml()
    )
}

fn config_for(
    sink: Sink,
    redis: &Redis,
    prefix: &str,
    pg: &PgServer,
    peer: Option<&Peer>,
) -> String {
    let state = shared_state(redis, prefix, pg);
    match sink {
        Sink::Embedded => config_with("", "", "")
            .replace("lead_store = \"sqlite\"\n", "")
            .replace("backend = \"local\"\n", &state)
            .replace("redis_prefix = \"aapgw:\"\n", "")
            .replace("claim_lease_ms = 60000\n", "")
            .replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0"),
        Sink::Mcp { dedupes } => forwarding_config(&format!(
            "kind = \"mcp\"\npeers = [\"{}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nrequest_timeout_ms = 8000\ndedupes_leads = {dedupes}\n",
            peer.unwrap().url()
        ))
        .replace("dir = \"var\"\n", &format!("dir = \"var\"\n{state}"))
            + NO_QUOTA,
        Sink::A2a { dedupes } => forwarding_config(&format!(
            "kind = \"a2a\"\npeers = [\"{}\"]\npath = \"/a2a\"\nbearer_token = \"{A2A_TOKEN}\"\nrequest_timeout_ms = 8000\ndedupes_leads = {dedupes}\n",
            peer.unwrap().url()
        ))
        .replace("dir = \"var\"\n", &format!("dir = \"var\"\n{state}"))
            + NO_QUOTA,
    }
}

/// One sink line: the key it was sent under (the client's key for the
/// embedded dealer, `gw-<idempotency_ref>` at an upstream) and its lead id.
fn sink_lines(sink: Sink, pg: &PgServer, peer: Option<&Peer>) -> Vec<(String, String)> {
    let records = match sink {
        Sink::Embedded => pg.leads("demo-toyota"),
        _ => peer.unwrap().leads(),
    };
    records
        .iter()
        .map(|r| {
            let key = match sink {
                Sink::Embedded => r["request"]["idempotency_key"].as_str(),
                _ => r["idempotency_key"].as_str(),
            };
            (
                key.unwrap_or_default().to_owned(),
                r["lead_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Two instances on one Redis and one PostgreSQL; leads with distinct keys through A from
/// concurrent clients; A killed with SIGKILL mid-load; every key without a
/// final answer retried through B (before and after the claim lease) until
/// it has one; several rounds. At the sink: never two leads for one key,
/// and exactly the lead id the client was told for every key it was told.
/// Keys whose outcome stays unknown (an upstream that does not deduplicate)
/// are resolved by the operator endpoint from the sink, then answered.
fn crash_rounds(sink: Sink) {
    let redis = Redis::start();
    let pg = PgServer::start();
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let peer = match sink {
        Sink::Embedded => None,
        Sink::Mcp { .. } => Some(Peer::start(PeerKind::StrictMcp, &[], &[])),
        Sink::A2a { .. } => Some(Peer::start(
            PeerKind::A2a,
            &[],
            &[("AAP_A2A_TOKEN", A2A_TOKEN)],
        )),
    };
    let cfg = config_for(sink, &redis, &prefix, &pg, peer.as_ref());
    let b = Gateway::start_with(&cfg);
    let mut told: HashMap<String, String> = HashMap::new();
    let mut unknown: Vec<(String, String)> = Vec::new();
    let mut killed_mid_call = 0;
    for round in 0..ROUNDS {
        let mut a = Gateway::start_with(&cfg);
        let a_port = a.port;
        let mut a_child = a.child.take().unwrap();
        let keys: Vec<String> = (0..KEYS_PER_ROUND)
            .map(|i| format!("r{round}-{i}-{}", uuid::Uuid::new_v4().simple()))
            .collect();
        let next = AtomicUsize::new(0);
        let answered = AtomicUsize::new(0);
        let answers: Mutex<HashMap<String, Answer>> = Mutex::new(HashMap::new());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(key) = keys.get(i) else { break };
                    let a = submit(a_port, key);
                    if a != Answer::Nothing {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    answers.lock().unwrap().insert(key.clone(), a);
                });
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while answered.load(Ordering::Relaxed) < KEYS_PER_ROUND / 3 && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            a_child.kill().ok();
            a_child.wait().ok();
        });
        let answers = answers.into_inner().unwrap();
        killed_mid_call += answers.values().filter(|a| **a == Answer::Nothing).count();
        for key in &keys {
            let mut answer = answers.get(key).cloned().unwrap_or(Answer::Nothing);
            if !answer.is_final() {
                // Right away (the lease of A's claim is live: in flight),
                // then until it resolves after the lease.
                answer = submit_until_final(b.port, key, Duration::from_secs(30));
            }
            match answer {
                Answer::Lead(id) => {
                    told.insert(key.clone(), id);
                }
                Answer::Error(code, sc) if code == "OUTCOME_UNKNOWN" => {
                    assert_eq!(sc["retryable"], false, "{sc}");
                    assert!(sc["details"].get("retry_after_ms").is_none(), "{sc}");
                    assert!(
                        !matches!(
                            sink,
                            Sink::Embedded
                                | Sink::Mcp { dedupes: true }
                                | Sink::A2a { dedupes: true }
                        ),
                        "a deduplicating backend left {key} unknown: {sc}"
                    );
                    let r = sc["details"]["idempotency_ref"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    unknown.push((key.clone(), r));
                }
                other => panic!(
                    "key {key}: no final answer: {other:?}\nB log:\n{}",
                    b.logs()
                ),
            }
        }
        drop(a);
    }
    assert!(killed_mid_call > 0, "no call was cut by the kill");
    eprintln!(
        "{sink:?}: {killed_mid_call} calls cut by the kills, {} keys left unknown and resolved by the operator",
        unknown.len()
    );
    // The operator resolves each unknown key from the sink: the upstream got
    // it (lead id) or it did not (release, and the retry sends it).
    for (key, r) in &unknown {
        let at_sink = sink_lines(sink, &pg, peer.as_ref())
            .into_iter()
            .find(|(k, _)| *k == format!("gw-{r}"));
        let query = match &at_sink {
            Some((_, id)) => format!("ref={r}&lead_id={id}"),
            None => format!("ref={r}&release=true"),
        };
        let resp = request(
            b.admin,
            "POST",
            &format!("/idempotency/resolve?{query}"),
            &[("Authorization", ADMIN_AUTH)],
            b"",
        );
        assert_eq!(resp.status, 200, "{}", resp.text());
        let Answer::Lead(id) = submit_until_final(b.port, key, Duration::from_secs(10)) else {
            panic!("{key} unanswered after resolution")
        };
        if let Some((_, sent)) = at_sink {
            assert_eq!(id, sent);
        }
        told.insert(key.clone(), id);
    }
    // Every key replays what its client was told, through either instance.
    let a = Gateway::start_with(&cfg);
    for (key, id) in &told {
        assert_eq!(submit(a.port, key), Answer::Lead(id.clone()), "key {key}");
    }
    // Nothing of the lead path is on an instance's disk.
    for gw in [&a, &b] {
        assert!(leads_by_key(&gw.state).is_empty());
    }
    let lines = sink_lines(sink, &pg, peer.as_ref());
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    let mut ids = HashSet::new();
    for (k, id) in &lines {
        *per_key.entry(k.as_str()).or_default() += 1;
        assert!(ids.insert(id.clone()), "lead id {id} twice at the sink");
    }
    let twice: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "keys with two leads: {twice:?}");
    for (key, id) in &told {
        assert!(
            ids.contains(id),
            "key {key}: told {id}, which the sink never got"
        );
    }
    assert_eq!(told.len(), ROUNDS * KEYS_PER_ROUND);
    assert_eq!(
        lines.len(),
        told.len(),
        "leads at the sink nobody was told about"
    );
}

#[test]
fn embedded_dealer_on_redis_survives_sigkill_rounds() {
    crash_rounds(Sink::Embedded);
}

#[test]
fn deduplicating_mcp_upstream_survives_sigkill_rounds() {
    crash_rounds(Sink::Mcp { dedupes: true });
}

#[test]
fn non_deduplicating_mcp_upstream_is_never_resent() {
    crash_rounds(Sink::Mcp { dedupes: false });
}

#[test]
fn deduplicating_a2a_upstream_survives_sigkill_rounds() {
    crash_rounds(Sink::A2a { dedupes: true });
}

#[test]
fn non_deduplicating_a2a_upstream_is_never_resent() {
    crash_rounds(Sink::A2a { dedupes: false });
}

// ---- 3. the OUTCOME_UNKNOWN payloads ----------------------------------------------------------

/// A key in flight is retryable with `retry_after_ms`; a key whose attempt
/// was interrupted after its intent is not retryable and carries the
/// resolution path. Driven on the lead store (PostgreSQL, shared with
/// Redis counters): a claim is planted as a crashed instance leaves it.
#[test]
fn outcome_unknown_payloads_are_consistent() {
    let redis = Redis::start();
    let pg = PgServer::start();
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[]);
    let cfg = config_for(
        Sink::Mcp { dedupes: false },
        &redis,
        &prefix,
        &pg,
        Some(&peer),
    )
    .replace(
        &format!("claim_lease_ms = {LEASE_MS}"),
        "claim_lease_ms = 20000",
    );
    let gw = Gateway::start_with(&cfg);
    // The record key of (tenant, caller, key), as the gateway derives it:
    // read it from a completed lead's forwarded key.
    let key = uuid::Uuid::new_v4().to_string();
    let Answer::Lead(_) = submit(gw.port, &key) else {
        panic!("lead refused")
    };
    let fwd = peer.leads()[0]["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = fwd.trim_start_matches("gw-").to_owned();
    let fp = pg.query(&format!("SELECT fp FROM idem WHERE key = '{r}'"));
    assert_eq!(fp.len(), 1, "the record is in the lead store: {fp:?}");
    let out = Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "--raw",
            "--scan",
            "--pattern",
        ])
        .arg(format!("{prefix}*"))
        .output()
        .unwrap();
    let keys = String::from_utf8_lossy(&out.stdout);
    assert!(
        keys.lines()
            .all(|k| k.starts_with(&format!("{prefix}bucket:"))),
        "Redis holds counters only: {keys}"
    );
    // Plant the claim a crashed instance leaves (the fingerprint stays).
    let set = |state: &str, lease_until: u64| {
        pg.query(&format!(
            "UPDATE idem SET state = '{state}', claim = 'x', lease_until = {lease_until}, result = NULL WHERE key = '{r}'"
        ));
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // In flight: a live lease of another attempt.
    set("sending", now + 60_000);
    let Answer::Error(code, sc) = submit(gw.port, &key) else {
        panic!("expected an error")
    };
    assert_eq!(code, "OUTCOME_UNKNOWN");
    assert_eq!(sc["retryable"], true, "{sc}");
    assert!(
        sc["details"]["retry_after_ms"].as_u64().unwrap() > 0,
        "{sc}"
    );
    // Interrupted after its intent (lease passed): unknown, not retryable.
    set("sending", now - 1);
    let Answer::Error(code, sc) = submit(gw.port, &key) else {
        panic!("expected an error")
    };
    assert_eq!(code, "OUTCOME_UNKNOWN");
    assert_eq!(sc["retryable"], false, "{sc}");
    assert!(sc["details"].get("retry_after_ms").is_none(), "{sc}");
    assert_eq!(sc["details"]["idempotency_ref"], r.as_str());
    assert!(sc["details"]["resolution"]
        .as_str()
        .unwrap()
        .contains("/idempotency/resolve"));
    assert_eq!(peer.leads().len(), 1, "nothing was resent");
    // Claimed but no intent (a crash before sending): claimed afresh.
    set("claimed", now - 1);
    assert!(matches!(submit(gw.port, &key), Answer::Lead(_)));
    assert_eq!(peer.leads().len(), 1, "the upstream deduplicated the key");
    // Bad operator requests change nothing.
    for q in [
        "ref=zz&release=true",
        &format!("ref={r}"),
        &format!("ref={r}&lead_id=a b"),
    ] {
        let resp = request(
            gw.admin,
            "POST",
            &format!("/idempotency/resolve?{q}"),
            &[("Authorization", ADMIN_AUTH)],
            b"",
        );
        assert_eq!(resp.status, 400, "{q}: {}", resp.text());
    }
    let resp = request(
        gw.admin,
        "POST",
        &format!("/idempotency/resolve?ref={r}&release=true"),
        &[("Authorization", ADMIN_AUTH)],
        b"",
    );
    assert_eq!(
        resp.status,
        409,
        "a completed key is not released: {}",
        resp.text()
    );
}

// ---- 4. the canonical fingerprint -------------------------------------------------------------

/// The same lead re-serialized (an integral number written `2024.0`,
/// members in another order) is a retry, not a conflict: RFC 8785 canonical
/// JSON. Fails with the sorted-key fingerprint (IDEMPOTENCY_CONFLICT).
#[test]
fn a_reserialized_lead_is_the_same_lead() {
    let gw = Gateway::start();
    let key = uuid::Uuid::new_v4().to_string();
    let mut first = lead(&key);
    first["vehicle_of_interest"] = json!({"stock": "DT-1001", "year": 2024});
    let body = modern(
        "tools/call",
        json!({"name": "aap_lead_submit", "arguments": first}),
    )
    .to_string();
    let r = gw.post(&[], &body);
    let sc = r.json()["result"]["structuredContent"].clone();
    assert_eq!(sc["type"], "lead.submit.response", "{sc}");
    // The members of `customer` reversed, then 2024 written as 2024.0.
    let mut again: Value = serde_json::from_str(&body).unwrap();
    let customer = again["params"]["arguments"]["customer"]
        .as_object()
        .unwrap()
        .clone();
    let reversed: serde_json::Map<String, Value> = customer.into_iter().rev().collect();
    again["params"]["arguments"]["customer"] = Value::Object(reversed);
    let text = again
        .to_string()
        .replace("\"year\":2024", "\"year\":2024.0");
    assert!(text.contains("2024.0") && text != body);
    let r = gw.post(&[], &text);
    let sc2 = r.json()["result"]["structuredContent"].clone();
    assert_eq!(sc2, sc, "a re-serialized retry replays the lead");
    assert_eq!(leads_in(&gw.state), 1);
}

// ---- 5. a timed-out lead on local state ------------------------------------------------------

/// A lead whose upstream call timed out (504) has an unknown outcome: the
/// retry is not sent again but answered `OUTCOME_UNKNOWN` (not retryable)
/// at once, with the record's reference; the operator settles it through
/// the admin endpoint of the running gateway, and the answer survives a
/// restart.
#[test]
fn a_timed_out_lead_is_settled_by_the_operator() {
    // An upstream that accepts connections and never answers.
    let l = listener();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            held.push(s);
        }
    });
    let cfg = forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"http://127.0.0.1:{port}\"]\nrevision = \"2026-07-28\"\nrequest_timeout_ms = 600\n"
    )) + NO_QUOTA;
    let gw = Gateway::start_with(&cfg);
    let key = uuid::Uuid::new_v4().to_string();
    let r = gw.call("aap_lead_submit", lead(&key));
    assert_eq!(r.status, 504, "{}", r.text());
    let Answer::Error(code, sc) = submit(gw.port, &key) else {
        panic!("expected OUTCOME_UNKNOWN")
    };
    assert_eq!(code, "OUTCOME_UNKNOWN", "{sc}");
    assert_eq!(sc["retryable"], false, "{sc}");
    let r = sc["details"]["idempotency_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(r.len(), 64);
    let resp = request(
        gw.admin,
        "POST",
        &format!("/idempotency/resolve?ref={r}&lead_id=lead_from_the_crm"),
        &[("Authorization", ADMIN_AUTH)],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        submit(gw.port, &key),
        Answer::Lead("lead_from_the_crm".into())
    );
    let gw = gw.restart();
    assert_eq!(
        submit(gw.port, &key),
        Answer::Lead("lead_from_the_crm".into())
    );
    // Released instead: the next retry sends the lead again (and times out).
    let other = uuid::Uuid::new_v4().to_string();
    assert_eq!(gw.call("aap_lead_submit", lead(&other)).status, 504);
    let Answer::Error(_, sc) = submit(gw.port, &other) else {
        panic!("expected OUTCOME_UNKNOWN")
    };
    let r = sc["details"]["idempotency_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = request(
        gw.admin,
        "POST",
        &format!("/idempotency/resolve?ref={r}&release=true"),
        &[("Authorization", ADMIN_AUTH)],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(gw.call("aap_lead_submit", lead(&other)).status, 504);
}

/// A record written before RFC 8785 fingerprints (sorted keys, numbers as
/// parsed) still matches a retry of the same payload: replayed, not
/// `IDEMPOTENCY_CONFLICT`.
#[test]
fn a_record_with_the_older_fingerprint_still_replays() {
    use sha2::Digest;
    let sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
    let state = temp_dir("legacy-fp");
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with("", "", "")).unwrap();
    let key = uuid::Uuid::new_v4().to_string();
    let mut args = lead(&key);
    args["vehicle_of_interest"] = json!({"stock": "DT-1001", "year": 2024.0});
    let record = sha(format!("idem\0demo-toyota\0anonymous\0{key}").as_bytes());
    let old_fp = sha(aap_gateway::digest::canonical_json(&args).as_bytes());
    let result = json!({"type": "lead.submit.response", "data": {"lead_id": "lead_before_the_upgrade", "status": "received"}});
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    let line = json!({"k": record, "fp": old_fp, "st": "done", "exp": exp, "r": result});
    std::fs::write(state.join("idempotency.jsonl"), format!("{line}\n")).unwrap();
    let gw = Gateway::launch(config, state);
    let (err, sc) = gw.call_sc("aap_lead_submit", args);
    assert!(!err, "{sc}");
    assert_eq!(sc["data"]["lead_id"], "lead_before_the_upgrade");
    assert_eq!(leads_in(&gw.state), 0, "nothing sent again");
}
