//! Shared counters on a real Redis Cluster (three masters, three replicas) and on a TLS-only
//! Redis with the test CA, leads on PostgreSQL: two instances, a master failover, Redis's clock.

use crate::lead_path::{submit, submit_until_final, Answer};
use crate::support::*;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[test]
fn two_instances_share_a_budget_and_a_lead_on_a_cluster() {
    crate::limits::two_instances_share_budget_and_idempotency(RedisKind::Cluster);
}

#[test]
fn two_instances_share_a_budget_and_a_lead_over_tls() {
    crate::limits::two_instances_share_budget_and_idempotency(RedisKind::Tls);
}

/// The embedded dealer with counters on `redis` and leads on `pg`, with
/// `state_extra` lines in `[state]`.
fn embedded_on(redis: &RedisDeployment, prefix: &str, pg: &PgServer, state_extra: &str) -> String {
    config_with("", "", "")
        .replace("lead_store = \"sqlite\"\n", &pg.state_toml())
        .replace("redis_prefix = \"aapgw:\"\n", "")
        .replace("claim_lease_ms = 60000\n", "")
        .replace(
            "backend = \"local\"\n",
            &format!("{}{state_extra}", redis.state_toml(prefix)),
        )
        .replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0")
}

const KEYS: usize = 60;

/// Leads go in through two gateways while the master holding the tenant's
/// budget is killed with SIGKILL; its replica is promoted. The leads are
/// in PostgreSQL, not Redis: every key is retried until it has a lead id;
/// then every lead is stored exactly once, with the id its client was told,
/// a retry of any key through either gateway answers that same id, and the
/// tenant budget keeps counting on the promoted master.
#[test]
fn a_master_failover_loses_and_duplicates_no_lead() {
    let mut redis = RedisDeployment::start(RedisKind::Cluster);
    let pg = PgServer::start();
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let cfg = embedded_on(
        &redis,
        &prefix,
        &pg,
        "redis_command_timeout_ms = 3000\nclaim_lease_ms = 1500\n",
    )
    .replace(
        "tenant_per_second = 0.0\ntenant_burst = 0",
        "tenant_per_second = 0.001\ntenant_burst = 100000",
    );
    let a = Gateway::start_with(&cfg);
    let b = Gateway::start_with(&cfg);
    let bucket = format!("{prefix}bucket:rl:tenant:demo-toyota");
    let victim = redis.master_of(&bucket);
    let keys: Vec<String> = (0..KEYS)
        .map(|i| format!("fo-{i}-{}", uuid::Uuid::new_v4().simple()))
        .collect();
    let next = AtomicUsize::new(0);
    let answered = AtomicUsize::new(0);
    let told: Mutex<HashMap<String, Answer>> = Mutex::new(HashMap::new());
    let ports = [a.port, b.port];
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(key) = keys.get(i) else { break };
                let answer = submit_until_final(ports[i % 2], key, Duration::from_secs(60));
                answered.fetch_add(1, Ordering::Relaxed);
                told.lock().unwrap().insert(key.clone(), answer);
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::Relaxed) < KEYS / 4 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        redis.kill9(victim);
    });
    let alive = redis.alive();
    redis.wait_cluster_ok(&alive, Duration::from_secs(30));
    let promoted = redis.master_of(&bucket);
    assert_ne!(promoted, victim, "the replica took over the slot");
    let told = told.into_inner().unwrap();
    let mut ids: HashMap<String, String> = HashMap::new();
    for key in &keys {
        match told.get(key) {
            Some(Answer::Lead(id)) => {
                ids.insert(key.clone(), id.clone());
            }
            other => panic!(
                "{key}: no lead id: {other:?}\nA log:\n{}\nB log:\n{}",
                a.logs(),
                b.logs()
            ),
        }
    }
    // Retries with the same key, through the other gateway, replay the id.
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            submit(ports[(i + 1) % 2], key),
            Answer::Lead(ids[key].clone()),
            "{key}"
        );
    }
    let recorded = pg.leads("demo-toyota");
    let mut per_key: HashMap<String, Vec<String>> = HashMap::new();
    for r in &recorded {
        per_key
            .entry(r["request"]["idempotency_key"].as_str().unwrap().to_owned())
            .or_default()
            .push(r["lead_id"].as_str().unwrap().to_owned());
    }
    let twice: Vec<_> = per_key.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(twice.is_empty(), "keys recorded twice: {twice:?}");
    for (key, id) in &ids {
        assert_eq!(per_key.get(key), Some(&vec![id.clone()]), "{key}");
    }
    assert_eq!(recorded.len(), KEYS, "leads nobody was told about");
    let distinct: HashSet<_> = ids.values().collect();
    assert_eq!(distinct.len(), KEYS);
    // The budget keeps counting on the promoted master (a failover may
    // forget some takes: counters are loss-tolerant).
    let tokens = || -> f64 {
        redis
            .cli_at(promoted, &["HGET", &bucket, "t"])
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("bucket {bucket} on {promoted}: {e}"))
    };
    let list = |gw: &Gateway| gw.rpc(&[], &modern("tools/list", json!({}))).status;
    assert_eq!(list(&a), 200);
    let before = tokens();
    assert_eq!(list(&a), 200);
    assert_eq!(list(&b), 200);
    let after = tokens();
    assert!(
        before - after > 1.5 && before - after < 2.5,
        "two takes: {before} -> {after}"
    );
}

/// Buckets are stamped with Redis's clock (`TIME` inside the script), not
/// the gateway's: the instances send no time at all, so instances with
/// skewed clocks share one budget (see `skewed_instances_share_one_budget`,
/// which runs one instance two hours behind).
#[test]
fn buckets_run_on_the_redis_clock() {
    let redis = RedisDeployment::start(RedisKind::Single);
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let pg = PgServer::start();
    let cfg = embedded_on(&redis, &prefix, &pg, "").replace(
        "tenant_per_second = 0.0\ntenant_burst = 0",
        "tenant_per_second = 0.01\ntenant_burst = 6",
    );
    let gw = Gateway::start_with(&cfg);
    let (err, sc) = gw.call_sc("aap_lead_submit", lead("clock-1"));
    assert!(!err, "{sc}");
    let keys = redis.cli(&["--scan", "--pattern", &format!("{prefix}bucket:*")]);
    let key = keys.lines().next().expect("a bucket key").trim().to_owned();
    let stamp: u64 = redis.cli(&["HGET", &key, "ts"]).trim().parse().unwrap();
    let time = redis.cli(&["TIME"]);
    let mut t = time.lines().map(|l| l.trim().parse::<u64>().unwrap());
    let now_ms = t.next().unwrap() * 1000 + t.next().unwrap() / 1000;
    assert!(
        stamp <= now_ms && now_ms - stamp < 10_000,
        "{stamp} vs {now_ms}"
    );
}

/// libfaketime's preload library (Debian `faketime`), which sets a process's
/// wall clock apart from the machine's.
fn faketime_library() -> Option<&'static str> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).is_file())
}

/// Minutes past midnight of the first access line's timestamp in `logs`.
fn access_minute(logs: &str) -> i64 {
    let at = logs
        .lines()
        .find_map(|l| l.split("\"timestamp\":\"").nth(1))
        .expect("an access line");
    let hh: i64 = at[11..13].parse().unwrap();
    let mm: i64 = at[14..16].parse().unwrap();
    hh * 60 + mm
}

/// Two instances whose wall clocks are two hours apart share one tenant
/// budget exactly: the bucket's refill runs on Redis's clock (`TIME`), so
/// the instance that is behind does not make the other refill two hours'
/// worth. (With each instance's own clock, A would see B's stamp two hours
/// old and refill the whole burst.)
#[test]
fn skewed_instances_share_one_budget() {
    let Some(faketime) = faketime_library() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "libfaketime is missing (scripts/setup.sh installs the Debian package faketime)"
        );
        eprintln!("skipped: libfaketime is not installed (apt-get install faketime)");
        return;
    };
    let redis = RedisDeployment::start(RedisKind::Single);
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let pg = PgServer::start();
    let cfg = embedded_on(&redis, &prefix, &pg, "").replace(
        "tenant_per_second = 0.0\ntenant_burst = 0",
        "tenant_per_second = 0.01\ntenant_burst = 6",
    );
    let a = Gateway::start_with(&cfg);
    let state = temp_dir("skewed");
    let config = state.join("gateway.toml");
    std::fs::write(&config, &cfg).unwrap();
    let b = Gateway::launch_with_env(
        config,
        state,
        &[],
        &[
            ("LD_PRELOAD", faketime),
            // Two hours behind on the wall clock; timers keep the real
            // monotonic clock.
            ("FAKETIME", "-7200"),
            ("DONT_FAKE_MONOTONIC", "1"),
        ],
    );
    let list = |gw: &Gateway| gw.rpc(&[], &modern("tools/list", json!({}))).status;
    for gw in [&a, &b, &a, &b, &a, &b] {
        assert_eq!(list(gw), 200);
    }
    // B's clock really is two hours behind A's (its access lines say so).
    let skew = (access_minute(&a.logs()) - access_minute(&b.logs())).rem_euclid(24 * 60);
    assert!((115..=125).contains(&skew), "clock skew of B: {skew} min");
    assert_eq!(list(&a), 429, "A refilled from B's stamp");
    assert_eq!(list(&b), 429);
}
