//! The admin listener over real processes: the admin token on the mutating
//! endpoints, and SIGTERM's drain and bounded exit.
//!
//! The token on POST /reload and POST /idempotency/resolve (required,
//! refused, accepted; locked with 403 when none is configured; rotated from
//! a file), the read-only endpoints open, and SIGTERM's drain (`/readyz` 503
//! while the public listener still answers) and bounded exit.

use crate::support::*;
use serde_json::json;
use std::time::{Duration, Instant};

const RESOLVE: &str = "/idempotency/resolve?ref=zz&release=true";

/// The shipped config with the `admin_token_env` line replaced by `source`.
fn with_token_source(source: &str) -> String {
    let cfg = config_with("", "", "");
    let line = "admin_token_env = \"AAP_ADMIN_TOKEN\"\n";
    assert!(
        cfg.contains(line),
        "the shipped gateway.toml names AAP_ADMIN_TOKEN"
    );
    cfg.replace(line, source)
}

fn post(admin: u16, path: &str, auth: Option<&str>) -> Resp {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    request(admin, "POST", path, &headers, b"")
}

fn generation(admin: u16) -> serde_json::Value {
    request(admin, "GET", "/readyz", &[], b"").json()["config_generation"].clone()
}

/// POST /reload and POST /idempotency/resolve: no token, a wrong one, another
/// scheme and two headers get 401 with a JSON body and change nothing; the
/// right one goes through. GET /healthz, /readyz and /metrics need nothing.
/// The token never appears in an answer or the log.
#[test]
fn mutating_endpoints_need_the_admin_token() {
    let gw = Gateway::start();
    for path in ["/reload", RESOLVE] {
        let r = post(gw.admin, path, None);
        assert_eq!(r.status, 401, "{path}: {}", r.text());
        assert_eq!(r.json()["error"], "missing_token", "{}", r.text());
        assert!(r.json()["message"].as_str().unwrap().contains("Bearer"));
        assert!(r
            .header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer")));
        for bad in [
            "Bearer test-admin-token-0123456788",
            "Bearer test-admin-token-0123456789x",
            "Bearer ",
            "Basic dGVzdDp0ZXN0",
            "test-admin-token-0123456789",
        ] {
            let r = post(gw.admin, path, Some(bad));
            assert_eq!(r.status, 401, "{path} with {bad:?}: {}", r.text());
            assert!(!r.text().contains(ADMIN_TOKEN), "{}", r.text());
        }
        let r = request(
            gw.admin,
            "POST",
            path,
            &[("Authorization", ADMIN_AUTH), ("Authorization", ADMIN_AUTH)],
            b"",
        );
        assert_eq!(r.status, 401, "two Authorization headers: {}", r.text());
    }
    assert_eq!(generation(gw.admin), 1, "a refused reload reloads nothing");
    // The right token: the reload happens, the resolve reaches its own
    // validation (a malformed ref is its 400, not the lock's 401).
    let r = post(gw.admin, "/reload", Some(ADMIN_AUTH));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(generation(gw.admin), 2);
    let r = post(
        gw.admin,
        RESOLVE,
        Some("bearer test-admin-token-0123456789"),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Any other non-GET method is locked too, before routing.
    let r = request(gw.admin, "DELETE", "/anything", &[], b"");
    assert_eq!(r.status, 401, "{}", r.text());
    // Reading stays open.
    assert_eq!(request(gw.admin, "GET", "/healthz", &[], b"").status, 200);
    assert_eq!(request(gw.admin, "GET", "/readyz", &[], b"").status, 200);
    let m = request(gw.admin, "GET", "/metrics", &[], b"");
    assert_eq!(m.status, 200);
    assert!(
        m.text()
            .contains("aap_admin_refusals_total{reason=\"missing_token\"} 3"),
        "{}",
        m.text()
    );
    assert!(m
        .text()
        .contains("aap_admin_refusals_total{reason=\"wrong_token\"}"));
    let logs = gw.logs();
    assert!(logs.contains("admin request refused"), "{logs}");
    assert!(!logs.contains(ADMIN_TOKEN), "the token is in the log");
}

/// No token configured (the named variable unset or empty, or no source at
/// all): the mutating endpoints answer 403 saying how to configure one,
/// whatever the request presents; SIGHUP still reloads.
#[test]
fn without_a_configured_token_mutating_endpoints_are_locked() {
    // The variable named by admin_token_env is empty.
    let state = temp_dir("state");
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with("", "", "")).unwrap();
    let gw = Gateway::launch_with_env(config, state, &[], &[("AAP_ADMIN_TOKEN", "")]);
    for path in ["/reload", RESOLVE] {
        for auth in [None, Some(ADMIN_AUTH)] {
            let r = post(gw.admin, path, auth);
            assert_eq!(r.status, 403, "{path}: {}", r.text());
            assert_eq!(r.json()["error"], "admin_token_not_configured");
            let msg = r.json()["message"].as_str().unwrap().to_owned();
            assert!(msg.contains("AAP_ADMIN_TOKEN"), "{msg}");
        }
    }
    assert!(gw.logs().contains("no admin token"), "{}", gw.logs());
    // SIGHUP is the local way to reload, and keeps working.
    signal(gw.child.as_ref().unwrap().id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while generation(gw.admin) != 2 {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(gw);
    // No source at all.
    let gw = Gateway::start_with(&with_token_source(""));
    let r = post(gw.admin, "/reload", Some(ADMIN_AUTH));
    assert_eq!(r.status, 403, "{}", r.text());
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("server.admin_token_file") && msg.contains("server.admin_token_env"),
        "{msg}"
    );
    assert_eq!(generation(gw.admin), 1);
}

/// `admin_token_file`: the token is read from the file (trailing newline
/// ignored) and re-read on every reload, so replacing the file and reloading
/// rotates it. A literal `admin_token` works the same; a bad one is a config
/// error that does not print it.
#[test]
fn token_from_a_file_rotates_on_reload_and_bad_tokens_are_config_errors() {
    let dir = temp_dir("token");
    let file = dir.join("admin-token");
    std::fs::write(&file, "first-token-0123456789\n").unwrap();
    let gw = Gateway::start_with(&with_token_source(&format!(
        "admin_token_file = {:?}\n",
        file
    )));
    assert_eq!(
        post(gw.admin, "/reload", Some(ADMIN_AUTH)).status,
        401,
        "the environment's token is not this config's"
    );
    let r = post(gw.admin, "/reload", Some("Bearer first-token-0123456789"));
    assert_eq!(r.status, 200, "{}", r.text());
    std::fs::write(&file, "second-token-0123456789").unwrap();
    // This reload re-reads the file: from now on only the new token works.
    let r = post(gw.admin, "/reload", Some("Bearer first-token-0123456789"));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(gw.admin, "/reload", Some("Bearer first-token-0123456789"));
    assert_eq!(r.status, 401, "{}", r.text());
    let r = post(gw.admin, "/reload", Some("Bearer second-token-0123456789"));
    assert_eq!(r.status, 200, "{}", r.text());
    // A file that disappears makes the reload fail; the old token stays.
    std::fs::remove_file(&file).unwrap();
    let r = post(gw.admin, "/reload", Some("Bearer second-token-0123456789"));
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(r.text().contains("admin_token_file"), "{}", r.text());
    drop(gw);

    // A literal token in the config.
    let gw = Gateway::start_with(&with_token_source(
        "admin_token = \"literal-token-0123456789\"\n",
    ));
    let r = post(gw.admin, "/reload", Some("Bearer literal-token-0123456789"));
    assert_eq!(r.status, 200, "{}", r.text());
    drop(gw);

    // Config errors: too short, two sources, a non-string; none prints the value.
    let check = |source: &str| {
        let dir = temp_dir("tokencheck");
        let config = dir.join("gateway.toml");
        std::fs::write(&config, with_token_source(source)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .arg("check")
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{source}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = check("admin_token = \"short-secret\"\n");
    assert!(
        err.contains("server.admin_token: the admin token must be at least 16"),
        "{err}"
    );
    assert!(!err.contains("short-secret"), "{err}");
    let err = check("admin_token = \"two-sources-0123456789\"\nadmin_token_env = \"X\"\n");
    assert!(err.contains("set at most one"), "{err}");
    assert!(!err.contains("two-sources-0123456789"), "{err}");
    let err = check("admin_token = 12345678901234567890\n");
    assert!(err.contains("admin_token must be a quoted string"), "{err}");
    assert!(!err.contains("12345678901234567890"), "{err}");
    let err = check("admin_token = \"unterminated-secret-0123456789\n");
    assert!(!err.contains("unterminated-secret"), "{err}");
    let err = check(&format!(
        "admin_token_file = {:?}\n",
        dir.join("missing-token")
    ));
    assert!(
        err.contains("server.admin_token_file: cannot read"),
        "{err}"
    );
}

/// SIGTERM with `shutdown_drain_secs = 3`, `shutdown_grace_secs = 1`:
/// `/readyz` answers 503 `draining` at once while `/healthz` stays 200 and
/// the public listener still answers new connections (with `Connection:
/// close`); the process exits 0 after the drain, within drain + grace + 2 s.
#[test]
fn sigterm_turns_readyz_503_during_the_drain_then_exits_in_time() {
    let cfg = config_with("", "", "").replace(
        "shutdown_drain_secs = 0\nshutdown_grace_secs = 5\n",
        "shutdown_drain_secs = 3\nshutdown_grace_secs = 1\n",
    );
    assert!(cfg.contains("shutdown_drain_secs = 3"));
    let mut gw = Gateway::start_with(&cfg);
    let list = modern("tools/list", json!({})).to_string();
    let keep_alive = || {
        raw(
            gw.port,
            format!(
                "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{list}",
                list.len()
            )
            .as_bytes(),
        )
    };
    let before = keep_alive().unwrap();
    assert_eq!(before.status, 200, "{}", before.text());
    assert_ne!(before.header("connection"), Some("close"));
    signal(gw.child.as_ref().unwrap().id(), "TERM");
    let t0 = Instant::now();
    let r = loop {
        let r = request(gw.admin, "GET", "/readyz", &[], b"");
        if r.status == 503 || t0.elapsed() > Duration::from_secs(2) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["status"], "draining", "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(request(gw.admin, "GET", "/healthz", &[], b"").status, 200);
    // Still serving, well inside the drain: a new connection is answered.
    std::thread::sleep(Duration::from_millis(800));
    let during = keep_alive().unwrap_or_else(|e| panic!("not served during the drain: {e}"));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(during.status, 200, "{}", during.text());
    assert_eq!(
        during.header("connection"),
        Some("close"),
        "no keep-alive while draining"
    );
    assert_eq!(request(gw.admin, "GET", "/readyz", &[], b"").status, 503);
    let status = wait_exit(
        gw.child.as_mut().unwrap(),
        Duration::from_secs(3 + 1 + 2 + 3),
    )
    .unwrap_or_else(|| panic!("still running 9 s after SIGTERM; log:\n{}", gw.logs()));
    let exited = t0.elapsed();
    assert!(status.success(), "exit {status}; log:\n{}", gw.logs());
    assert!(
        exited >= Duration::from_secs(3),
        "exited after {exited:?}, before the drain delay ended"
    );
    assert!(
        exited < Duration::from_secs(3 + 1 + 2 + 1),
        "exited after {exited:?}: more than drain 3 s + grace 1 s + 2 s"
    );
    assert!(gw.logs().contains("draining"), "{}", gw.logs());
}

/// The old process of an upgrade: from SIGQUIT on, its `/readyz` answers 503
/// `draining` (with its pid) while the new process, accepting on the same
/// admin socket, answers 200; both stay reachable through the hand-over.
#[test]
fn the_old_process_of_an_upgrade_reports_draining() {
    let mut gw = Gateway::start();
    let old_pid = gw.child.as_ref().unwrap().id();
    let new_log = gw.state.join("upgraded.log");
    let new_child = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&gw.config)
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", gw.port))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", gw.admin))
        .arg("--state-dir")
        .arg(&gw.state)
        .arg("--upgrade")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&new_log).unwrap())
        .spawn()
        .unwrap();
    let new_pid = new_child.id();
    std::thread::sleep(Duration::from_millis(700));
    signal(old_pid, "QUIT");
    std::thread::sleep(Duration::from_millis(150));
    // The old process keeps accepting beside the new one for about 5 s.
    let (mut old_answers, mut new_answers) = (Vec::new(), Vec::new());
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(3500) {
        if let Ok(r) = try_request(gw.admin, "GET", "/readyz", &[], b"") {
            let pid = r.json()["pid"].as_u64().unwrap_or(0) as u32;
            if pid == old_pid {
                old_answers.push((r.status, r.json()["status"].clone()));
            } else if pid == new_pid {
                new_answers.push((r.status, r.json()["status"].clone()));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut old = gw.child.replace(new_child).unwrap();
    let exited = wait_exit(&mut old, Duration::from_secs(25));
    assert!(
        exited.is_some_and(|s| s.success()),
        "old process: {exited:?}; log:\n{}",
        gw.logs()
    );
    assert!(
        !old_answers.is_empty(),
        "the old process answered no /readyz during the hand-over (new: {})",
        new_answers.len()
    );
    assert!(
        old_answers
            .iter()
            .all(|(s, st)| *s == 503 && st == "draining"),
        "old process after SIGQUIT: {old_answers:?}"
    );
    assert!(
        new_answers.iter().all(|(s, _)| *s == 200),
        "new process: {new_answers:?}"
    );
    let r = request(gw.admin, "GET", "/readyz", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["pid"], new_pid);
}
