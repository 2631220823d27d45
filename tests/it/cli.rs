//! The command line as an operator meets it: `--version`, completions and the man page,
//! `health`, a closed stdout, port 0 and a busy port refused at once, naming the listener.
//!
//! Also `check` refusing Redis state with a per-instance lead store.

use crate::support::*;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

fn gateway_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = gateway_cmd().args(args).output().expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_names_the_commit_and_the_build_date() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!(code, 0);
    let line = out.trim();
    assert!(
        line.starts_with(&format!(
            "aap-gateway {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{line}"
    );
    let commit = line
        .split("(commit ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("");
    // A commit of this checkout when git is there (CI, a developer's tree):
    // HEAD itself on a clean build, or an ancestor when commits were made
    // after the binary was built.
    let in_git = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(repo())
        .output()
        .is_ok_and(|o| o.status.success());
    if in_git {
        let ancestor = Command::new("git")
            .args(["merge-base", "--is-ancestor", commit, "HEAD"])
            .current_dir(repo())
            .status()
            .unwrap();
        assert!(
            ancestor.success(),
            "{commit} is not a commit of HEAD's history: {line}"
        );
    }
    let date = line
        .split(", built ")
        .nth(1)
        .unwrap_or("")
        .trim_end_matches(')');
    assert_eq!(date.len(), 10, "{line}");
    assert!(time::Date::parse(
        date,
        &time::macros::format_description!("[year]-[month]-[day]")
    )
    .is_ok());
}

#[test]
fn completions_and_man_page_cover_the_subcommands() {
    let (code, bash, _) = run(&["completions", "bash"]);
    assert_eq!(code, 0);
    for word in [
        "aap-gateway",
        "check",
        "catalog",
        "publish",
        "leads",
        "health",
    ] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    // bash itself accepts the script.
    let st = Command::new("bash")
        .args(["-n", "-c", &bash])
        .status()
        .unwrap();
    assert!(st.success());
    let (code, zsh, _) = run(&["completions", "zsh"]);
    assert_eq!(code, 0);
    assert!(
        zsh.starts_with("#compdef aap-gateway"),
        "{}",
        &zsh[..40.min(zsh.len())]
    );
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error");
    assert!(err.contains("tcsh"), "{err}");
    let (code, man, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(
        man.contains(".TH aap-gateway"),
        "{}",
        &man[..80.min(man.len())]
    );
    assert!(man.contains("check"));
}

/// `catalog | head -1`: the reader goes away after one line; the writer
/// exits 0 without a panic message.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let mut child = gateway_cmd()
        .args(["--config", "gateway.toml", "catalog"])
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let status = wait_exit(&mut child, Duration::from_secs(30)).expect("catalog exits");
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(status.code(), Some(0), "{err}");
}

#[test]
fn port_zero_is_refused_with_the_flag_named() {
    let (code, _, err) = run(&[
        "--config",
        "gateway.toml",
        "--listen",
        "127.0.0.1:0",
        "check",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--listen") && err.contains("port 0"), "{err}");
    let dir = temp_dir("cli-port0");
    let text = std::fs::read_to_string(repo().join("gateway.toml"))
        .unwrap()
        .replace(
            "admin_listen = \"127.0.0.1:9090\"",
            "admin_listen = \"127.0.0.1:0\"",
        );
    let file = dir.join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let (code, _, err) = run(&["--config", file.to_str().unwrap(), "check"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("server.admin_listen") && err.contains("port 0"),
        "{err}"
    );
}

/// Redis state with each instance's own SQLite lead store would split the
/// lead path (idempotency and leads per instance, counters shared): `check`
/// and `run` refuse it, naming the key to change; with the lead store on
/// PostgreSQL the same config passes (`check` connects to neither).
#[test]
fn check_refuses_redis_state_with_a_per_instance_lead_store() {
    let dir = temp_dir("cli-split");
    let split = config_with("", "", "").replace(
        "backend = \"local\"\n",
        "backend = \"redis\"\nredis_url = \"redis://127.0.0.1:1/\"\n",
    );
    let file = dir.join("gateway.toml");
    std::fs::write(&file, &split).unwrap();
    let want = "state.lead_store: with state.backend = \"redis\" (several instances) leads must be in a shared store: set state.lead_store = \"postgres\" and state.postgres_url";
    for cmd in ["check", "run"] {
        let (code, _, err) = run(&["--config", file.to_str().unwrap(), cmd]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(err.contains(want), "{cmd}: {err}");
    }
    let shared = split.replace(
        "lead_store = \"sqlite\"\n",
        "lead_store = \"postgres\"\npostgres_url = \"postgres://gw@127.0.0.1:1/leads\"\n",
    );
    assert_ne!(shared, split);
    std::fs::write(&file, &shared).unwrap();
    let (code, _, err) = run(&["--config", file.to_str().unwrap(), "check"]);
    assert_eq!(code, 0, "{err}");
}

/// A listener address in use stops the start at once, naming the key and
/// the address, instead of Pingora's retries and a debug dump.
#[test]
fn a_busy_port_fails_fast_naming_the_listener() {
    let busy = listener();
    let port = busy.local_addr().unwrap().port();
    let state = temp_dir("cli-busy");
    let mut child = gateway_cmd()
        .args(["--config", "gateway.toml"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--state-dir")
        .arg(&state)
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the gateway kept waiting for a busy port");
    });
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{port} (server.listen)"
        )),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    drop(busy);
}

/// `health` is the container's HEALTHCHECK: 0 against a ready gateway, 1
/// when nothing answers on the admin listener.
#[test]
fn health_reports_readiness_through_the_admin_listener() {
    let gw = Gateway::start();
    let admin = format!("127.0.0.1:{}", gw.admin);
    let (code, out, err) = run(&[
        "--config",
        gw.config.to_str().unwrap(),
        "--admin-listen",
        &admin,
        "health",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ready"), "{out}");
    let closed = format!("127.0.0.1:{}", free_port());
    let (code, _, err) = run(&[
        "--config",
        gw.config.to_str().unwrap(),
        "--admin-listen",
        &closed,
        "health",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("cannot reach the admin listener"), "{err}");
}

/// Counters with a known label set exist at 0 from start, so the first
/// rejected reload is an increase a rule can see; build and process series.
#[test]
fn metrics_exist_at_zero_with_build_and_process_series() {
    let gw = Gateway::start();
    let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
    for line in [
        "aap_config_reloads_total{result=\"rejected\"} 0",
        "aap_config_reloads_total{result=\"ok\"} 0",
        "aap_connections_closed_total{reason=\"header_timeout\"} 0",
        "aap_admin_refusals_total{reason=\"wrong_token\"} 0",
        "aap_log_lines_dropped_total 0",
    ] {
        assert!(m.lines().any(|l| l == line), "missing {line}:\n{m}");
    }
    let build = m
        .lines()
        .find(|l| l.starts_with("aap_build_info{"))
        .unwrap_or_else(|| panic!("no aap_build_info:\n{m}"));
    assert!(build.ends_with(" 1"), "{build}");
    assert!(
        build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{build}"
    );
    assert!(build.contains("commit=\""), "{build}");
    for name in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
    ] {
        assert!(
            m.lines()
                .any(|l| l.starts_with(name) && !l.starts_with('#')),
            "missing {name}"
        );
    }
}
