//! HTTP-level throttling, shared counters on a real Redis, and hardening
//! limits (oversized heads, slow heads and bodies, idle connections).

use crate::support::*;
use serde_json::json;
use std::time::Duration;

fn list(gw: &Gateway) -> Resp {
    gw.rpc(&[], &modern("tools/list", json!({})))
}

#[test]
fn caller_budget_429_then_recovery() {
    let cfg = config_with("", "", "").replace(
        "caller_per_second = 0.0\ncaller_burst = 0",
        "caller_per_second = 2.0\ncaller_burst = 3",
    );
    let gw = Gateway::start_with(&cfg);
    for i in 0..3 {
        assert_eq!(list(&gw).status, 200, "request {i}");
    }
    let r = list(&gw);
    assert_eq!(r.status, 429, "{}", r.text());
    let secs: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(secs >= 1);
    assert!(
        r.json()["error"]["data"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            > 0
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(list(&gw).status, 200, "the bucket refills");
}

#[test]
fn two_instances_share_one_redis_budget_and_idempotency() {
    two_instances_share_budget_and_idempotency(RedisKind::Single);
}

/// Two gateways on one Redis deployment of `kind` (also run against a TLS
/// Redis and a Redis Cluster by `redis_cluster`) and one PostgreSQL lead
/// store: one lead through A is replayed by B, and one tenant budget is
/// shared. Redis holds the budget only; the lead and its idempotency
/// record are in PostgreSQL.
pub(crate) fn two_instances_share_budget_and_idempotency(kind: RedisKind) {
    let redis = RedisDeployment::start(kind);
    let pg = PgServer::start();
    let prefix = format!("t{}:", uuid::Uuid::new_v4().simple());
    let cfg = config_with("", "", "")
        .replace("lead_store = \"sqlite\"\n", &pg.state_toml())
        .replace("redis_prefix = \"aapgw:\"\n", "")
        .replace("backend = \"local\"\n", &redis.state_toml(&prefix))
        .replace(
            "tenant_per_second = 0.0\ntenant_burst = 0",
            "tenant_per_second = 0.01\ntenant_burst = 6",
        );
    let a = Gateway::start_with(&cfg);
    let b = Gateway::start_with(&cfg);
    // One lead through A, replayed through B: one lead in total.
    let key = uuid::Uuid::new_v4().to_string();
    let (_, first) = a.call_sc("aap_lead_submit", lead(&key));
    let (err, again) = b.call_sc("aap_lead_submit", lead(&key));
    assert!(!err, "{again}");
    assert_eq!(
        first, again,
        "instance B replays A's result from PostgreSQL"
    );
    assert_eq!(leads_in(&a.state) + leads_in(&b.state), 0, "no local copy");
    let recorded = pg.leads("demo-toyota");
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["lead_id"], first["data"]["lead_id"]);
    // 2 requests used; 4 more fit in the shared budget, then both refuse.
    for gw in [&a, &b, &a, &b] {
        assert_eq!(list(gw).status, 200);
    }
    assert_eq!(list(&a).status, 429);
    assert_eq!(list(&b).status, 429);
    // Redis holds the counters only (every node, on a Cluster).
    for port in &redis.ports {
        let keys = redis.cli_at(*port, &["--scan", "--pattern", &format!("{prefix}*")]);
        for k in keys.lines().filter(|k| !k.trim().is_empty()) {
            assert!(k.starts_with(&format!("{prefix}bucket:")), "{k} in Redis");
        }
    }
    drop(redis);
}

#[test]
fn oversized_headers_and_slow_bodies() {
    let gw = Gateway::start();
    let body = modern("tools/list", json!({})).to_string();
    let big = "x".repeat(20_000);
    let r = try_request(
        gw.port,
        "POST",
        ENDPOINT,
        &[("Content-Type", "application/json"), ("X-Big", &big)],
        body.as_bytes(),
    );
    assert!(
        matches!(r, Ok(ref r) if r.status == 431 || r.status == 400) || r.is_err(),
        "{r:?}"
    );
    let many: Vec<(String, String)> = (0..150).map(|i| (format!("X-H{i}"), "v".into())).collect();
    let mut h: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
    h.extend(many.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let r = request(gw.port, "POST", ENDPOINT, &h, body.as_bytes());
    assert_eq!(r.status, 431, "{}", r.text());
    // Deep JSON and long strings are refused with a clear error.
    let deep = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{{\"x\":{}{}}}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    let r = gw.post(&[], &deep);
    assert_eq!((r.status, r.error_code()), (400, -32700));
    // A body that never finishes arrives too slowly: 408, and the server keeps serving.
    let cfg = config_with("", "", "")
        .replace("body_read_timeout_ms = 10000", "body_read_timeout_ms = 500");
    let slow = Gateway::start_with(&cfg);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", slow.port)).unwrap();
    use std::io::{Read, Write};
    s.write_all(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"").as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert_eq!(list(&slow).status, 200);
}

/// A client that trickles its request header (slowloris) is cut off after
/// `limits.header_read_timeout_ms` in total, even though every single read
/// makes progress; an idle keep-alive connection is closed after
/// `limits.idle_timeout_secs`; other clients are served throughout.
#[test]
fn slow_headers_and_idle_connections_are_closed() {
    use std::io::{Read, Write};
    let cfg = config_with("", "", "")
        .replace(
            "header_read_timeout_ms = 10000",
            "header_read_timeout_ms = 1000",
        )
        .replace("idle_timeout_secs = 60", "idle_timeout_secs = 1");
    let gw = Gateway::start_with(&cfg);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let header = format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nX-Slow: ");
    s.write_all(header.as_bytes()).unwrap();
    let started = std::time::Instant::now();
    let mut closed_after = None;
    let mut buf = [0u8; 256];
    // One byte every 100 ms: each read succeeds, the whole header never ends.
    while started.elapsed() < Duration::from_secs(6) {
        if s.write_all(b"a").is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(n) => panic!(
                "unexpected answer to an unfinished header: {}",
                String::from_utf8_lossy(&buf[..n])
            ),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => {
                closed_after = Some(started.elapsed());
                break;
            }
        }
        // Others are served while the slow client hangs on.
        if started.elapsed() > Duration::from_millis(300)
            && started.elapsed() < Duration::from_millis(450)
        {
            assert_eq!(list(&gw).status, 200);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed_after = closed_after.expect("slow header connection was never closed");
    assert!(
        closed_after >= Duration::from_millis(900) && closed_after < Duration::from_secs(4),
        "closed after {closed_after:?}"
    );
    // A keep-alive connection that served a request and then idles is closed.
    let mut k = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    let body = modern("tools/list", json!({})).to_string();
    k.write_all(
        format!(
            "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    k.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let idle_started;
    loop {
        let n = k.read(&mut buf).unwrap();
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length: ")
                        .or_else(|| l.strip_prefix("Content-Length: "))
                })
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            if got.len() >= end + 4 + len {
                idle_started = std::time::Instant::now();
                break;
            }
        }
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    let n = k.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "idle keep-alive connection got data");
    let idle = idle_started.elapsed();
    assert!(
        idle >= Duration::from_millis(900) && idle < Duration::from_secs(4),
        "idle connection closed after {idle:?}"
    );
    let metrics = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("aap_connections_closed_total{reason=\"header_timeout\"}"),
        "{metrics}"
    );
    assert_eq!(list(&gw).status, 200);
}
