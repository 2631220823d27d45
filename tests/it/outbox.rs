//! The durable lead outbox against the real binary and a real webhook receiver
//! (tests/upstreams/webhook_receiver.py): outages, SIGKILL mid-delivery, dead letters, redrive.
//!
//! On PostgreSQL: two instances with one killed, a rolling restart of both,
//! the server restarted mid-burst.
//!
//! Every test counts what the receiver got by lead id: each accepted lead
//! arrives exactly once after an outage, at most twice across a SIGKILL,
//! always under the id the agent was answered with.

use crate::support::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_aap-gateway");
const TENANT: &str = "demo-toyota";

/// The webhook receiver on a fixed port (so it can be stopped and started
/// again where the gateway's sink points).
struct Receiver {
    port: u16,
    out: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Receiver {
    /// A receiver that is down: its port is reserved, nothing listens.
    fn down() -> Receiver {
        let dir = temp_dir("webhook");
        Receiver {
            port: free_port(),
            out: dir.join("received.jsonl"),
            log: dir.join("receiver.log"),
            child: None,
        }
    }

    fn up(mode: &str) -> Receiver {
        let mut r = Receiver::down();
        r.start(mode, 0);
        r
    }

    fn start(&mut self, mode: &str, delay_ms: u64) {
        assert!(self.child.is_none());
        let child = Command::new("python3")
            .arg(repo().join("tests/upstreams/webhook_receiver.py"))
            .args(["--port", &self.port.to_string()])
            .arg("--out")
            .arg(&self.out)
            .args(["--mode", mode, "--delay-ms", &delay_ms.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .expect("python3 runs tests/upstreams/webhook_receiver.py");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "receiver did not start");
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    fn set(&self, mode: &str, delay_ms: u64) {
        let r = request(
            self.port,
            "POST",
            "/_control",
            &[("Content-Type", "application/json")],
            json!({"mode": mode, "delay_ms": delay_ms})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(r.status, 200);
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/leads", self.port)
    }

    /// Every POST that arrived, in order (a line the receiver is still
    /// writing, without its newline yet, is read next time).
    fn arrivals(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        complete
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Arrivals answered 200, counted by lead id.
    fn delivered(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for a in self.arrivals().iter().filter(|a| a["answered"] == 200) {
            *m.entry(a["lead_id"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
        m
    }

    /// Wait until every id in `ids` was delivered (at least once).
    fn wait_for(&self, ids: &BTreeSet<String>, within: Duration) -> BTreeMap<String, usize> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.delivered();
            if ids.iter().all(|id| got.contains_key(id)) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {} leads arrived",
                ids.iter().filter(|id| got.contains_key(*id)).count(),
                ids.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The shipped config with one webhook sink and a fast retry policy.
fn config(sink_url: &str, outbox: &str) -> String {
    config_with(
        "",
        &format!(
            "[[tenants.backend.sinks]]\nkind = \"webhook\"\nname = \"crm\"\nurl = \"{sink_url}\"\ntimeout_ms = 5000\n\n[tenants.backend.outbox]\ninitial_backoff_ms = 50\nmax_backoff_ms = 400\n{outbox}\n"
        ),
        "",
    )
    .replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0")
}

/// Submit the lead of `key`: its `lead_id` and `status`.
fn submit(gw: &Gateway, key: &str) -> (String, String) {
    let (is_err, sc) = gw.call_sc("aap_lead_submit", lead(key));
    assert!(!is_err, "{sc}");
    (
        sc["data"]["lead_id"].as_str().unwrap().to_owned(),
        sc["data"]["status"].as_str().unwrap().to_owned(),
    )
}

/// A metric's value (the first sample whose line starts with `series`).
fn metric(gw: &Gateway, series: &str) -> f64 {
    let text = request(gw.admin, "GET", "/metrics", &[], b"").text();
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn wait_until(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn admin(gw: &Gateway, method: &str, path: &str) -> Resp {
    request(
        gw.admin,
        method,
        path,
        &[("authorization", ADMIN_AUTH)],
        b"",
    )
}

/// Every delivered body is the lead as JSON under the id the agent got,
/// and the id travels in `Idempotency-Key`.
fn check_bodies(rx: &Receiver) {
    for a in rx.arrivals() {
        assert_eq!(a["idempotency_key"], a["lead_id"], "{a}");
        assert_eq!(a["content_type"], "application/json");
        let b = &a["body"];
        assert_eq!(b["tenant"], TENANT);
        assert_eq!(b["request"]["customer"]["first_name"], "Quinn");
        assert!(b["dealer"]["name"].is_string(), "{b}");
        assert_eq!(b["vehicle"]["stock"], "DT-1001");
    }
}

/// The sink is down while 100 leads are accepted (each answered
/// `received`, retries of a key answered with the same id), the
/// configuration is reloaded mid-outage with a changed sink, then the sink
/// comes up: every lead arrives exactly once by lead id.
fn outage_then_exactly_once(cfg: String) {
    let mut rx = Receiver::down();
    let gw = Gateway::start_with(&cfg.replace("@SINK@", &rx.url()));
    let mut ids = BTreeSet::new();
    let mut keys = Vec::new();
    for i in 0..100 {
        let key = format!("outage-{i}-{}", uuid::Uuid::new_v4().simple());
        let (id, status) = submit(&gw, &key);
        assert_eq!(status, "received");
        assert!(ids.insert(id.clone()), "lead ids are unique");
        keys.push((key, id));
    }
    // A retried key returns the original id and enqueues nothing more.
    for (key, id) in keys.iter().take(5) {
        assert_eq!(&submit(&gw, key).0, id);
    }
    wait_until(Duration::from_secs(20), "retries to be counted", || {
        metric(
            &gw,
            "aap_lead_deliveries_total{outcome=\"retry\",sink=\"webhook\"}",
        ) >= 100.0
    });
    assert_eq!(metric(&gw, "aap_lead_outbox_pending"), 100.0);
    // A reload that rebuilds the tenant's backend keeps the one outbox.
    let changed = std::fs::read_to_string(&gw.config)
        .unwrap()
        .replace("timeout_ms = 5000", "timeout_ms = 4000");
    std::fs::write(&gw.config, changed).unwrap();
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    rx.start("ok", 0);
    let got = rx.wait_for(&ids, Duration::from_secs(60));
    // Anything late (a doubled delivery) would show within a few retry periods.
    std::thread::sleep(Duration::from_secs(2));
    let got_after = rx.delivered();
    assert_eq!(got, got_after);
    assert_eq!(
        got_after.keys().cloned().collect::<BTreeSet<_>>(),
        ids,
        "exactly the accepted leads"
    );
    for (id, n) in &got_after {
        assert_eq!(*n, 1, "lead {id} arrived {n} times");
    }
    check_bodies(&rx);
    wait_until(Duration::from_secs(5), "the pending gauge to drain", || {
        metric(&gw, "aap_lead_outbox_pending") == 0.0
    });
    assert_eq!(metric(&gw, "aap_lead_outbox_oldest_pending_seconds"), 0.0);
    assert_eq!(
        metric(
            &gw,
            "aap_lead_deliveries_total{outcome=\"delivered\",sink=\"webhook\"}"
        ),
        100.0
    );
}

#[test]
fn outage_then_every_lead_arrives_exactly_once() {
    outage_then_exactly_once(config("@SINK@", ""));
}

/// The fleet setup: counters on Redis, the lead store on PostgreSQL.
#[test]
fn outage_on_redis_state_then_every_lead_arrives_exactly_once() {
    let redis = Redis::start();
    let pg = PgServer::start();
    let state = format!(
        "backend = \"redis\"\nredis_url = \"redis://127.0.0.1:{}/\"\n",
        redis.port
    );
    outage_then_exactly_once(
        config("@SINK@", "")
            .replace("backend = \"local\"\n", &state)
            .replace("lead_store = \"sqlite\"\n", &pg.state_toml()),
    );
}

/// SIGKILL while deliveries are in flight (the receiver answers slowly),
/// restart on the same state: no lead lost, none more than twice, all
/// under the ids the agent got; nothing is sent again once settled.
#[test]
fn sigkill_mid_delivery_loses_none_and_doubles_at_most_in_flight() {
    let mut rx = Receiver::down();
    rx.start("ok", 1500);
    let gw = Gateway::start_with(&config(&rx.url(), "concurrency = 4"));
    let mut ids = BTreeSet::new();
    for i in 0..20 {
        let (id, status) = submit(&gw, &format!("kill-{i}-{}", uuid::Uuid::new_v4().simple()));
        assert_eq!(status, "received");
        ids.insert(id);
    }
    wait_until(Duration::from_secs(10), "deliveries in flight", || {
        rx.arrivals().len() >= 2
    });
    let gw = gw.restart();
    rx.set("ok", 0);
    let got = rx.wait_for(&ids, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let got = {
        let after = rx.delivered();
        assert_eq!(got, after, "settled leads are not sent again");
        after
    };
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), ids);
    let doubled: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    for (id, n) in &got {
        assert!(*n <= 2, "lead {id} arrived {n} times");
    }
    // Only what was in flight at the kill can arrive twice (4 at once).
    assert!(doubled.len() <= 4, "{doubled:?}");
    check_bodies(&rx);
    // A second restart sends nothing again.
    let gw = gw.restart();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rx.delivered(), got);
    drop(gw);
}

/// A lead the sink refuses (400) is dead-lettered at once; one whose sink
/// stays unavailable after `max_attempts` too. Both show in the metrics
/// and the admin command (token required, no customer values), survive a
/// restart, and a redrive delivers each exactly once when the sink is back.
#[test]
fn dead_letters_are_listed_and_redriven() {
    let rx = Receiver::up("reject");
    let gw = Gateway::start_with(&config(&rx.url(), "max_attempts = 3"));
    let (rejected, _) = submit(&gw, &format!("dl-a-{}", uuid::Uuid::new_v4().simple()));
    wait_until(
        Duration::from_secs(10),
        "the rejected lead's dead letter",
        || metric(&gw, "aap_lead_dead_letters") == 1.0,
    );
    rx.set("unavailable", 0);
    let (exhausted, _) = submit(&gw, &format!("dl-b-{}", uuid::Uuid::new_v4().simple()));
    wait_until(
        Duration::from_secs(10),
        "the exhausted lead's dead letter",
        || metric(&gw, "aap_lead_dead_letters") == 2.0,
    );
    assert_eq!(
        metric(
            &gw,
            "aap_lead_deliveries_total{outcome=\"dead_letter\",sink=\"webhook\"}"
        ),
        2.0
    );
    assert_eq!(
        rx.arrivals()
            .iter()
            .filter(|a| a["lead_id"] == exhausted.as_str())
            .count(),
        3,
        "max_attempts = 3"
    );
    // The list needs the admin token, even to read.
    let r = request(gw.admin, "GET", "/admin/leads/dead-letters", &[], b"");
    assert_eq!(r.status, 401);
    // Dead letters survive a restart (journal replay).
    let gw = gw.restart();
    let r = admin(
        &gw,
        "GET",
        &format!("/admin/leads/dead-letters?tenant={TENANT}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    assert!(
        !text.contains("Quinn") && !text.contains("example.com"),
        "no customer values: {text}"
    );
    let list = r.json()["dead_letters"].as_array().unwrap().clone();
    let by_id: BTreeMap<String, Value> = list
        .iter()
        .map(|d| (d["lead_id"].as_str().unwrap().to_owned(), d.clone()))
        .collect();
    assert_eq!(by_id.len(), 2, "{list:?}");
    assert_eq!(by_id[&rejected]["last_error_class"], "permanent");
    assert_eq!(by_id[&rejected]["last_error"], "HTTP 400");
    assert_eq!(by_id[&rejected]["attempts"], 1);
    assert_eq!(by_id[&exhausted]["last_error_class"], "exhausted");
    assert_eq!(by_id[&exhausted]["last_error"], "HTTP 503");
    assert_eq!(by_id[&exhausted]["attempts"], 3);
    for d in &list {
        assert_eq!(d["tenant"], TENANT);
        assert_eq!(d["sink"], "crm");
        assert!(d["dead_at"].as_str().unwrap().ends_with('Z'));
    }
    // The sink's queue: two dead letters, nothing pending, so no next attempt.
    assert_eq!(
        r.json()["sinks"],
        json!([{"tenant": TENANT, "sink": "crm", "pending": 0, "dead": 2,
                "oldest_pending_at": null, "next_attempt_at": null}])
    );
    // The CLI lists the same through the admin listener.
    let admin_listen = format!("127.0.0.1:{}", gw.admin);
    let cli = |args: &[&str]| {
        Command::new(BIN)
            .arg("--config")
            .arg(&gw.config)
            .args(["--admin-listen", &admin_listen])
            .args(args)
            .env("AAP_ADMIN_TOKEN", ADMIN_TOKEN)
            .output()
            .unwrap()
    };
    let out = cli(&["leads", "dead-letters", "--tenant", TENANT]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["dead_letters"].as_array().unwrap().len(), 2);
    // Bad input: a clear error, nothing changes.
    let r = admin(&gw, "POST", "/admin/leads/redrive?tenant=demo-toyota");
    assert_eq!(r.status, 400, "{}", r.text());
    let r = admin(
        &gw,
        "POST",
        "/admin/leads/redrive?tenant=demo-toyota&lead_id=lead_nope",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(metric(&gw, "aap_lead_dead_letters"), 2.0);
    // The sink is back: redrive one lead by CLI, then the rest over HTTP.
    rx.set("ok", 0);
    let out = cli(&[
        "leads",
        "redrive",
        "--tenant",
        TENANT,
        "--lead-id",
        &rejected,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rx.wait_for(&BTreeSet::from([rejected.clone()]), Duration::from_secs(10));
    assert!(
        !rx.delivered().contains_key(&exhausted),
        "only the one redriven"
    );
    let r = admin(
        &gw,
        "POST",
        &format!("/admin/leads/redrive?tenant={TENANT}&all=true"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["deliveries"], 1);
    let got = rx.wait_for(
        &BTreeSet::from([rejected.clone(), exhausted.clone()]),
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rx.delivered(), got);
    assert_eq!(got[&rejected], 1);
    assert_eq!(got[&exhausted], 1);
    wait_until(Duration::from_secs(5), "no dead letters", || {
        metric(&gw, "aap_lead_dead_letters") == 0.0
    });
    let r = admin(&gw, "GET", "/admin/leads/dead-letters");
    assert_eq!(r.json()["dead_letters"], json!([]));
}

/// A bad outbox or sink config is refused by `check` with the key named.
#[test]
fn bad_outbox_config_is_refused_with_the_key() {
    let dir = temp_dir("outbox-check");
    for (cfg, want) in [
        (
            config("http://127.0.0.1:9/x", "max_attempts = 0"),
            "tenants[0].backend.outbox.max_attempts",
        ),
        (
            config("ftp://127.0.0.1/x", ""),
            "tenants[0].backend.sinks[0].url",
        ),
        (
            config("http://127.0.0.1:9/x", "concurrency = 0"),
            "tenants[0].backend.outbox.concurrency",
        ),
        (
            config("http://127.0.0.1:9/x", "").replace("kind = \"webhook\"\nname = \"crm\"\nurl = \"http://127.0.0.1:9/x\"\ntimeout_ms = 5000", "kind = \"adf_email\"\nname = \"crm\"\nhost = \"127.0.0.1\"\nfrom = \"a@b.example\"\nto = []"),
            "tenants[0].backend.sinks[0].to: needs at least one address",
        ),
    ] {
        let path = dir.join("gateway.toml");
        std::fs::write(&path, cfg).unwrap();
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&path)
            .arg("check")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{want}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// SIGKILL in the middle of a burst of 200 leads while the sink is down;
/// restart on the same SQLite store, sink up: every lead answered
/// `received` arrives exactly once by lead id, and the store lists it
/// delivered.
#[test]
fn sigkill_during_a_burst_with_the_sink_down_loses_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let mut rx = Receiver::down();
    let gw = Gateway::start_with(&config(&rx.url(), ""));
    let next = AtomicUsize::new(0);
    let told: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let port = gw.port;
    let pid = gw.child.as_ref().unwrap().id();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= 200 {
                    break;
                }
                let key = format!("burst-{i}-{}", uuid::Uuid::new_v4().simple());
                if let crate::lead_path::Answer::Lead(id) = crate::lead_path::submit(port, &key) {
                    told.lock().unwrap().insert(id);
                }
            });
        }
        while told.lock().unwrap().len() < 80 {
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(pid, "KILL");
    });
    let told = told.into_inner().unwrap();
    assert!(told.len() >= 80, "{}", told.len());
    let gw = gw.restart();
    rx.start("ok", 0);
    let got = rx.wait_for(&told, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    let got = {
        // A lead accepted just before the kill, whose answer the client never read, may still
        // arrive (it is not in `told`); what arrived already must not arrive again.
        let after = rx.delivered();
        for (id, n) in &got {
            assert_eq!(
                after.get(id),
                Some(n),
                "nothing is sent again once delivered"
            );
        }
        after
    };
    for id in &told {
        assert_eq!(
            got.get(id),
            Some(&1),
            "lead {id} arrived {:?} times",
            got.get(id)
        );
    }
    // Leads recorded but whose answer the kill cut are delivered too (once).
    let stored: BTreeSet<String> = stored_leads(&gw.state, TENANT)
        .iter()
        .map(|r| r["lead_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(stored.is_superset(&told));
    let got = rx.wait_for(&stored, Duration::from_secs(30));
    assert!(got.values().all(|n| *n == 1), "{got:?}");
    wait_until(
        Duration::from_secs(10),
        "the pending gauge to drain",
        || metric(&gw, "aap_lead_outbox_pending") == 0.0,
    );
}

/// `config` with the lead store on `pg` and short leases.
fn on_postgres(cfg: String, pg: &PgServer) -> String {
    cfg.replace("lead_store = \"sqlite\"\n", &pg.state_toml())
        .replace("lead_lease_ms = 60000", "lead_lease_ms = 2000")
        .replace("outbox_poll_ms = 1000", "outbox_poll_ms = 100")
}

/// Two instances share one PostgreSQL lead store. The CRM is down while
/// 100 leads are accepted through both; one instance is killed with
/// SIGKILL; the CRM comes back: the survivor delivers every lead exactly
/// once (the dead one's leased rows once its leases run out), and a retry
/// of any key through the survivor answers the same lead id.
#[test]
fn postgres_two_instances_one_killed_every_lead_once_by_the_survivor() {
    let pg = PgServer::start();
    let mut rx = Receiver::down();
    // Deliveries keep retrying through the outage: with the default attempts and the fast
    // backoff, the first leads could be dead letters before the hundredth is in on a slow machine.
    let cfg = on_postgres(config(&rx.url(), "max_attempts = 1000"), &pg);
    let a = Gateway::start_with(&cfg);
    let b = Gateway::start_with(&cfg);
    let mut keys = Vec::new();
    let mut ids = BTreeSet::new();
    for i in 0..100 {
        let key = format!("pg-{i}-{}", uuid::Uuid::new_v4().simple());
        let gw = if i % 2 == 0 { &a } else { &b };
        let (id, status) = submit(gw, &key);
        assert_eq!(status, "received");
        assert!(ids.insert(id.clone()));
        keys.push((key, id));
    }
    // A retry through the other instance replays the same id.
    for (i, (key, id)) in keys.iter().enumerate().take(10) {
        let gw = if i % 2 == 0 { &b } else { &a };
        assert_eq!(&submit(gw, key).0, id);
    }
    wait_until(Duration::from_secs(20), "both instances to retry", || {
        metric(
            &a,
            "aap_lead_deliveries_total{outcome=\"retry\",sink=\"webhook\"}",
        ) > 0.0
            && metric(
                &b,
                "aap_lead_deliveries_total{outcome=\"retry\",sink=\"webhook\"}",
            ) > 0.0
    });
    // The gauge follows the store on its own refresh: wait for it rather than race it.
    wait_until(Duration::from_secs(10), "100 leads pending", || {
        metric(&b, "aap_lead_outbox_pending") == 100.0
    });
    // The sink's queue as the console shows it, read from PostgreSQL: every lead pending,
    // the next attempt due within the backoff cap.
    let r = admin(&b, "GET", "/admin/leads/dead-letters");
    assert_eq!(r.status, 200, "{}", r.text());
    let queue = r.json()["sinks"][0].clone();
    assert_eq!(queue["sink"], "crm", "{queue}");
    assert_eq!(queue["pending"], 100, "{queue}");
    assert_eq!(queue["dead"], 0, "{queue}");
    let next = queue["next_attempt_at"].as_str().unwrap_or_default();
    let next = time::OffsetDateTime::parse(next, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{e}: {queue}"));
    assert!(
        next - time::OffsetDateTime::now_utc() < time::Duration::minutes(10),
        "{queue}"
    );
    assert!(queue["oldest_pending_at"].is_string(), "{queue}");
    let a_pid = a.child.as_ref().unwrap().id();
    signal(a_pid, "KILL");
    let killed = Instant::now();
    rx.start("ok", 0);
    let got = rx.wait_for(&ids, Duration::from_secs(30));
    let took = killed.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let after = rx.delivered();
    assert_eq!(got, after, "nothing delivered twice later");
    assert_eq!(after.keys().cloned().collect::<BTreeSet<_>>(), ids);
    for (id, n) in &after {
        assert_eq!(*n, 1, "lead {id} arrived {n} times");
    }
    // Within the lease (2 s) plus the backoff cap and polling, not minutes.
    assert!(took < Duration::from_secs(20), "{took:?}");
    check_bodies(&rx);
    for (key, id) in keys.iter().take(10) {
        assert_eq!(&submit(&b, key).0, id);
    }
    let rows = pg.query("SELECT status, COUNT(*) FROM outbox GROUP BY status");
    assert_eq!(rows, vec!["delivered\t100".to_owned()]);
    drop(a);
}

/// A rolling restart with the CRM down: two instances share one PostgreSQL
/// lead store; four clients keep submitting new leads, alternating between
/// them, and retry a refused or unanswered submission with the same key
/// (through the other instance, then this one again), as an agent behind a
/// balancer would. Instance A gets SIGTERM, exits and starts again on the
/// same port, then B the same way. The CRM comes back: every lead answered
/// `received` arrives exactly once by lead id, none is missing, and the
/// store holds no lead nobody was told about.
#[test]
fn postgres_rolling_restart_with_the_crm_down_loses_nothing() {
    use crate::lead_path::Answer;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let pg = PgServer::start();
    let mut rx = Receiver::down();
    // Deliveries keep retrying through the outage; a claim cut by an exit
    // is judged after 2 s, not a minute.
    let cfg = on_postgres(config(&rx.url(), "max_attempts = 1000"), &pg)
        .replace("claim_lease_ms = 60000", "claim_lease_ms = 2000");
    let a = Gateway::start_with(&cfg);
    let b = Gateway::start_with(&cfg);
    let ports = [a.port, b.port];
    let stop = AtomicBool::new(false);
    let seq = AtomicUsize::new(0);
    let retries = AtomicUsize::new(0);
    let told: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
    let count = || told.lock().unwrap().len();
    let more = |n: usize| {
        let want = count() + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while count() < want {
            assert!(Instant::now() < deadline, "leads stopped coming");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (a, b) = std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = seq.fetch_add(1, Ordering::Relaxed);
                    let key = format!("roll-{i}-{}", uuid::Uuid::new_v4().simple());
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let mut attempt = 0;
                    loop {
                        match crate::lead_path::submit(ports[(i + attempt) % 2], &key) {
                            Answer::Lead(id) => {
                                told.lock().unwrap().insert(key, id);
                                break;
                            }
                            Answer::Error(code, sc) if sc["retryable"] == false => {
                                panic!("{key}: {code}: {sc}")
                            }
                            _ => {}
                        }
                        attempt += 1;
                        retries.fetch_add(1, Ordering::Relaxed);
                        assert!(Instant::now() < deadline, "{key}: no lead id in 60 s");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        }
        more(40);
        let a = a.restart_graceful(Duration::from_secs(15));
        more(40);
        let b = b.restart_graceful(Duration::from_secs(15));
        more(40);
        stop.store(true, Ordering::Relaxed);
        (a, b)
    });
    let told = told.into_inner().unwrap();
    let ids: BTreeSet<String> = told.values().cloned().collect();
    assert_eq!(ids.len(), told.len(), "one lead id per key");
    eprintln!(
        "rolling restart: {} leads, {} submissions retried",
        told.len(),
        retries.load(Ordering::Relaxed)
    );
    // The store holds exactly the leads the clients were told about.
    let stored: BTreeSet<String> = pg.query("SELECT lead_id FROM leads").into_iter().collect();
    assert_eq!(stored, ids, "stored leads and answered leads differ");
    rx.start("ok", 0);
    let got = rx.wait_for(&ids, Duration::from_secs(60));
    // Anything late (a doubled delivery) would show within a few retry periods.
    std::thread::sleep(Duration::from_secs(2));
    let after = rx.delivered();
    assert_eq!(got, after, "nothing delivered again later");
    assert_eq!(after.keys().cloned().collect::<BTreeSet<_>>(), ids);
    for (id, n) in &after {
        assert_eq!(*n, 1, "lead {id} arrived {n} times");
    }
    check_bodies(&rx);
    // Every key still replays its lead id, through either instance.
    for (i, (key, id)) in told.iter().enumerate().take(20) {
        let gw = if i % 2 == 0 { &a } else { &b };
        assert_eq!(&submit(gw, key).0, id);
    }
    let rows = pg.query("SELECT status, COUNT(*) FROM outbox GROUP BY status");
    assert_eq!(rows, vec![format!("delivered\t{}", ids.len())]);
}

/// PostgreSQL restarted (as after a crash) in the middle of a burst: every
/// key is retried until it has a final answer; no lead answered `received`
/// is missing from the store, none is recorded twice.
#[test]
fn postgres_restart_mid_burst_loses_no_received_lead() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let pg = PgServer::start();
    let rx = Receiver::up("ok");
    let gw = Gateway::start_with(&on_postgres(config(&rx.url(), ""), &pg));
    let next = AtomicUsize::new(0);
    let answered = AtomicUsize::new(0);
    let told: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let port = gw.port;
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= 120 {
                    break;
                }
                let key = format!("pgr-{i}-{}", uuid::Uuid::new_v4().simple());
                let r = crate::lead_path::submit_until_final(port, &key, Duration::from_secs(60));
                answered.fetch_add(1, Ordering::Relaxed);
                if let crate::lead_path::Answer::Lead(id) = r {
                    told.lock().unwrap().push((key, id));
                }
            });
        }
        while answered.load(Ordering::Relaxed) < 30 {
            std::thread::sleep(Duration::from_millis(5));
        }
        pg.restart();
    });
    let told = told.into_inner().unwrap();
    assert_eq!(told.len(), 120, "every key got its lead id");
    let stored = pg.query("SELECT lead_id, idem_key FROM leads");
    let ids: BTreeSet<String> = stored
        .iter()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    assert_eq!(stored.len(), ids.len());
    for (_, id) in &told {
        assert!(ids.contains(id), "{id} answered received but not stored");
    }
    assert_eq!(stored.len(), 120, "no lead recorded twice or unanswered");
    let want: BTreeSet<String> = told.iter().map(|(_, id)| id.clone()).collect();
    let got = rx.wait_for(&want, Duration::from_secs(60));
    assert!(got.values().all(|n| *n == 1), "{got:?}");
}

/// The SQLite store on a tiny tmpfs that is then filled to ENOSPC: leads
/// are refused with the documented INTERNAL_ERROR (retryable, nothing
/// sent); once space is freed, every key retried gets one lead id, and
/// with the sink up every lead answered `received` arrives exactly once.
#[test]
fn a_full_disk_refuses_leads_as_not_sent_and_loses_none_once_freed() {
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let mut rx = Receiver::down();
    let dir = temp_dir("enospc");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&state)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs (the tests run as root)");
    let _unmount = Unmount(state.clone());
    let cfg_path = dir.join("gateway.toml");
    std::fs::write(&cfg_path, config(&rx.url(), "")).unwrap();
    let gw = Gateway::launch(cfg_path, state.clone());
    let mut told: BTreeMap<String, String> = BTreeMap::new();
    let mut keys = Vec::new();
    for i in 0..10 {
        let key = format!("full-a{i}-{}", uuid::Uuid::new_v4().simple());
        match crate::lead_path::submit(gw.port, &key) {
            crate::lead_path::Answer::Lead(id) => told.insert(key.clone(), id),
            other => panic!("before the disk filled: {other:?}"),
        };
        keys.push(key);
    }
    let fill = state.join("fill");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", fill.display()))
        .args(["bs=16k"])
        .stderr(Stdio::null())
        .status();
    let mut refused = 0;
    for i in 0..40 {
        let key = format!("full-b{i}-{}", uuid::Uuid::new_v4().simple());
        match crate::lead_path::submit(gw.port, &key) {
            crate::lead_path::Answer::Lead(id) => {
                told.insert(key.clone(), id);
            }
            crate::lead_path::Answer::Error(code, sc) => {
                assert_eq!(code, "INTERNAL_ERROR", "{sc}");
                assert_eq!(sc["retryable"], true, "{sc}");
                assert!(
                    sc["message"].as_str().unwrap().contains("nothing was sent"),
                    "{sc}"
                );
                refused += 1;
            }
            crate::lead_path::Answer::Nothing => panic!("no answer with a full disk"),
        }
        keys.push(key);
    }
    assert!(refused > 0, "the full disk refused nothing");
    std::fs::remove_file(&fill).unwrap();
    let mut ids = BTreeSet::new();
    for key in &keys {
        match crate::lead_path::submit_until_final(gw.port, key, Duration::from_secs(30)) {
            crate::lead_path::Answer::Lead(id) => {
                if let Some(before) = told.get(key) {
                    assert_eq!(before, &id, "{key}: a retry answers the first id");
                }
                assert!(ids.insert(id), "one id per key");
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(ids.len(), keys.len());
    rx.start("ok", 0);
    let got = rx.wait_for(&ids, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rx.delivered(), got);
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), ids);
    assert!(got.values().all(|n| *n == 1), "{got:?}");
    drop(gw);
}
