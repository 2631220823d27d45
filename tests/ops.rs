//! Operations: Prometheus metrics, hot reload (admin endpoint and SIGHUP)
//! under load, health endpoints.

mod common;
use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn metrics_count_known_traffic() {
    let gw = Gateway::start();
    for _ in 0..3 {
        assert_eq!(gw.rpc(&[], &modern("tools/list", json!({}))).status, 200);
    }
    gw.rpc(
        &[("Mcp-Method", "tools/call")],
        &modern("tools/list", json!({})),
    );
    gw.call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "filters": {"price_max": "x"}}),
    );
    let key = uuid::Uuid::new_v4().to_string();
    gw.call("aap_lead_submit", lead(&key));
    gw.call("aap_lead_submit", lead(&key));
    let m = request(gw.admin, "GET", "/metrics", &[], b"");
    assert_eq!(m.status, 200);
    let t = m.text();
    // Every sample line parses as `name{labels} value`.
    for l in t.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        assert!(
            l.rsplit(' ').next().unwrap().parse::<f64>().is_ok(),
            "bad sample {l}"
        );
    }
    assert_eq!(
        metric(
            &t,
            "aap_requests_total",
            &[
                ("tenant", "demo-toyota"),
                ("outcome", "ok"),
                ("status", "200"),
                ("revision", MODERN)
            ]
        ),
        4.0,
        "{t}"
    );
    assert_eq!(
        metric(
            &t,
            "aap_header_conflicts_total",
            &[("tenant", "demo-toyota")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &t,
            "aap_schema_rejections_total",
            &[
                ("skill", "inventory.search"),
                ("code", "SCHEMA_VALIDATION_FAILED")
            ]
        ),
        1.0
    );
    assert_eq!(metric(&t, "aap_idempotent_replays_total", &[]), 1.0);
    assert_eq!(
        metric(
            &t,
            "aap_header_normalizations_total",
            &[("header", "MCP-Protocol-Version")]
        ),
        3.0,
        "only the header-less list calls"
    );
    assert!(
        metric(
            &t,
            "aap_request_duration_seconds_count",
            &[("tenant", "demo-toyota")]
        ) >= 7.0
    );
    assert!(
        metric(
            &t,
            "aap_upstream_duration_seconds_count",
            &[("backend", "embedded")]
        ) >= 1.0
    );
    assert_eq!(metric(&t, "aap_config_generation", &[]), 1.0);
    assert_eq!(request(gw.admin, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn reload_under_load_has_zero_failures() {
    let gw = Gateway::start();
    let stop = AtomicBool::new(false);
    let ok = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let original = std::fs::read_to_string(&gw.config).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let r = try_request(gw.port, "POST", ENDPOINT, &[("Content-Type", "application/json")],
                        modern("tools/call", json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 2}}})).to_string().as_bytes());
                    match r {
                        Ok(r) if r.status == 200 && r.json()["result"]["isError"] == false => ok.fetch_add(1, Ordering::Relaxed),
                        _ => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        // 1: a valid change (a new allowed origin).
        std::fs::write(
            &gw.config,
            original.replace(
                "\"http://localhost:3000\"",
                "\"http://localhost:3000\", \"https://new.example\"",
            ),
        )
        .unwrap();
        let r = request(gw.admin, "POST", "/reload", &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["config_generation"], 2);
        std::thread::sleep(std::time::Duration::from_millis(150));
        // 2: an invalid config is refused and the old one keeps serving.
        std::fs::write(
            &gw.config,
            original.replace("max_json_depth = 32", "max_json_depth = 1"),
        )
        .unwrap();
        let r = request(gw.admin, "POST", "/reload", &[], b"");
        assert_eq!(r.status, 422, "{}", r.text());
        assert!(r.json()["error"]
            .as_str()
            .unwrap()
            .contains("max_json_depth"));
        std::thread::sleep(std::time::Duration::from_millis(150));
        // 3: SIGHUP, back to the original plus a new instruction text.
        std::fs::write(
            &gw.config,
            original.replace(
                "Demo Toyota inventory and lead intake",
                "Reloaded Demo Toyota",
            ),
        )
        .unwrap();
        let pid = gw.child.as_ref().unwrap().id();
        assert!(std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while request(gw.admin, "GET", "/readyz", &[], b"").json()["config_generation"] != 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "SIGHUP reload did not happen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(150));
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "no request failed during reloads"
    );
    assert!(ok.load(Ordering::Relaxed) > 20);
    let d = gw.rpc(&[], &modern("server/discover", json!({}))).json();
    assert!(d["result"]["instructions"]
        .as_str()
        .unwrap()
        .starts_with("Reloaded"));
    let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert_eq!(
        metric(&m, "aap_config_reloads_total", &[("result", "rejected")]),
        1.0
    );
    assert_eq!(
        metric(&m, "aap_config_reloads_total", &[("result", "ok")]),
        2.0
    );
}

#[test]
fn reload_keeps_idempotency_and_sessions() {
    let gw = Gateway::start_with(
        &config_with("", "", "").replace("legacy_sessions = false", "legacy_sessions = true"),
    );
    let key = uuid::Uuid::new_v4().to_string();
    let (_, first) = gw.call_sc("aap_lead_submit", lead(&key));
    let init = gw.rpc(&[], &legacy("initialize", json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})));
    let sid = init.header("mcp-session-id").unwrap().to_owned();
    assert_eq!(request(gw.admin, "POST", "/reload", &[], b"").status, 200);
    let (_, again) = gw.call_sc("aap_lead_submit", lead(&key));
    assert_eq!(first, again);
    assert_eq!(leads_in(&gw.state), 1);
    assert_eq!(
        gw.rpc(
            &[("Mcp-Session-Id", &sid)],
            &legacy("tools/list", json!({}))
        )
        .status,
        200,
        "sessions survive a reload"
    );
}

#[test]
fn tls_termination_with_a_test_ca() {
    let dir = temp_dir("tls");
    let sh = format!(
        "set -e; cd {d}; \
         openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=aap-test-ca 2>/dev/null; \
         openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null; \
         printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf; \
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf 2>/dev/null",
        d = dir.display()
    );
    assert!(std::process::Command::new("sh")
        .args(["-c", &sh])
        .status()
        .unwrap()
        .success());
    let cfg = config_with("", "", "").replace(
        "name = \"aap-gateway\"\n",
        &format!(
            "name = \"aap-gateway\"\ntls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            dir.join("server.pem"),
            dir.join("server.key")
        ),
    );
    let gw = Gateway::start_with(&cfg);
    let body = modern("tools/list", json!({})).to_string();
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(dir.join("ca.pem"))
        .args(["-H", "Content-Type: application/json", "--data", &body])
        .arg(format!("https://127.0.0.1:{}{ENDPOINT}", gw.port))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 5);
    // Plain HTTP on the TLS port is not served.
    assert!(try_request(
        gw.port,
        "POST",
        ENDPOINT,
        &[("Content-Type", "application/json")],
        body.as_bytes()
    )
    .map(|r| r.status != 200)
    .unwrap_or(true));
    std::fs::remove_dir_all(dir).ok();
}
