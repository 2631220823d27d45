//! `aap-gateway admin …` against a running gateway: every subcommand, as a table and as JSON,
//! the config dump without secrets, the runtime log level, and the refusals (token, bad input).

use crate::support::*;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_aap-gateway");
const CURSOR_SECRET: &str = "inline-cursor-secret-0123456789abcdef";

fn admin(gw: &Gateway, token: Option<&str>, args: &[&str]) -> Output {
    // The command reads its own copy of the config (admin listener, token
    // source): the test breaks the gateway's file to make a reload fail.
    let own = gw.state.join("cli.toml");
    if !own.exists() {
        std::fs::copy(&gw.config, &own).unwrap();
    }
    let mut c = Command::new(BIN);
    c.arg("--config")
        .arg(&own)
        .args(["--admin-listen", &format!("127.0.0.1:{}", gw.admin)])
        .arg("admin")
        .args(args)
        .env_remove("AAP_ADMIN_TOKEN");
    if let Some(t) = token {
        c.env("AAP_ADMIN_TOKEN", t);
    }
    c.output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(gw: &Gateway, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let text = ok(&admin(gw, Some(ADMIN_TOKEN), &a));
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

#[test]
fn every_admin_subcommand_answers_from_the_running_gateway() {
    let cfg = config_with("", "", "").replace(
        "# cursor_secret = \"change-me\"",
        &format!("cursor_secret = \"{CURSOR_SECRET}\""),
    );
    assert!(cfg.contains(CURSOR_SECRET));
    let gw = Gateway::start_with(&cfg);
    std::fs::copy(&gw.config, gw.state.join("cli.toml")).unwrap();
    let t = Some(ADMIN_TOKEN);

    // status: a table and JSON.
    let table = ok(&admin(&gw, t, &["status"]));
    assert!(
        table.contains("config_generation") && table.contains("reloads (newest first)"),
        "{table}"
    );
    let s = json(&gw, &["status"]);
    assert_eq!(s[0]["config_generation"], 1, "{s}");
    assert_eq!(s[0]["tenants"], 1, "{s}");
    assert_eq!(s[0]["log_filter"], "info", "{s}");
    assert_eq!(s[1]["reloads"], serde_json::json!([]), "{s}");

    // reload: ok, then a broken file is rejected (exit 1) and both show in the history.
    let out = ok(&admin(&gw, t, &["reload"]));
    assert!(out.starts_with("reloaded: config generation 2"), "{out}");
    let good = std::fs::read_to_string(&gw.config).unwrap();
    std::fs::write(
        &gw.config,
        good.replace("[server]", "[server]\nno_such_key = 1"),
    )
    .unwrap();
    let rejected = admin(&gw, t, &["reload"]);
    assert_eq!(rejected.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&rejected.stderr).contains("422"));
    std::fs::write(&gw.config, &good).unwrap();
    let s = json(&gw, &["status"]);
    let reloads = s[1]["reloads"].as_array().unwrap();
    assert_eq!(reloads.len(), 2, "{s}");
    assert_eq!(reloads[0]["result"], "rejected");
    assert!(
        reloads[0]["error"]
            .as_str()
            .unwrap()
            .contains("no_such_key"),
        "{s}"
    );
    assert_eq!(reloads[0]["config_generation"], 2);
    assert_eq!(reloads[1]["result"], "reloaded");
    assert_eq!(s[0]["last_reload"]["result"], "rejected");

    // tenants: all, one, top; an unknown one is a 404 (exit 1).
    gw.call_sc(
        "aap_inventory_search",
        serde_json::json!({"type": "inventory.search.request"}),
    );
    let table = ok(&admin(&gw, t, &["tenants"]));
    assert!(
        table.lines().next().unwrap().starts_with("tenant"),
        "{table}"
    );
    assert!(table.contains("demo-toyota"), "{table}");
    let all = json(&gw, &["tenants"]);
    assert_eq!(all["tenants"][0]["tenant"], "demo-toyota");
    assert!(
        all["tenants"][0]["requests"].as_u64().unwrap() >= 1,
        "{all}"
    );
    let one = json(&gw, &["tenants", "--id", "demo-toyota"]);
    assert_eq!(one["tenant"], "demo-toyota");
    let top = json(&gw, &["tenants", "--top", "5", "--by", "requests"]);
    assert_eq!(top["top"][0]["tenant"], "demo-toyota", "{top}");
    assert_eq!(
        admin(&gw, t, &["tenants", "--id", "no-such-tenant"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        admin(&gw, t, &["tenants", "--id", "../x"]).status.code(),
        Some(2)
    );

    // feeds and leads.
    let table = ok(&admin(&gw, t, &["feeds"]));
    assert!(table.starts_with("source"), "{table}");
    assert!(json(&gw, &["feeds"])["feeds"].is_array());
    let table = ok(&admin(&gw, t, &["leads"]));
    assert!(table.starts_with("pending: 0"), "{table}");
    let leads = json(&gw, &["leads", "--tenant", "demo-toyota"]);
    assert_eq!(leads["dead_letters"], serde_json::json!([]));
    assert_eq!(leads["sinks"], serde_json::json!([]));

    // config: the file as served, the secret redacted, as TOML and JSON.
    let text = ok(&admin(&gw, t, &["config"]));
    assert!(!text.contains(CURSOR_SECRET), "{text}");
    assert!(text.contains("cursor_secret = \"<redacted>\""), "{text}");
    assert!(
        text.contains("admin_token_env = \"AAP_ADMIN_TOKEN\""),
        "{text}"
    );
    let c = json(&gw, &["config"]);
    assert_eq!(
        c["config"]["tenants"][0]["backend"]["cursor_secret"],
        "<redacted>"
    );
    assert_eq!(c["config"]["tenants"][0]["id"], "demo-toyota");
    assert!(!c.to_string().contains(CURSOR_SECRET));

    // log-level: read, set (debug lines appear), refuse a bad filter.
    assert_eq!(
        ok(&admin(&gw, t, &["log-level"])).trim(),
        "log filter: info"
    );
    let out = ok(&admin(&gw, t, &["log-level", "debug"]));
    assert_eq!(out.trim(), "log filter: debug (was info)");
    assert_eq!(json(&gw, &["log-level"])["filter"], "debug");
    gw.call_sc(
        "aap_inventory_search",
        serde_json::json!({"type": "inventory.search.request"}),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        gw.logs().contains("\"level\":\"DEBUG\""),
        "no debug line after the change"
    );
    let bad = admin(&gw, t, &["log-level", "x=y=z"]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(json(&gw, &["log-level"])["filter"], "debug");
    ok(&admin(&gw, t, &["log-level", "info"]));

    // Refusals: no token (exit 2, says why), a wrong token (401, exit 1).
    let none = admin(&gw, None, &["status"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("AAP_ADMIN_TOKEN"));
    let wrong = admin(&gw, Some("wrong-token-0123456789abc"), &["status"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("401"));
    // And the views themselves need the token, even to read.
    for path in [
        "/admin/status",
        "/admin/reloads",
        "/admin/tenants",
        "/admin/feeds",
        "/admin/clusters",
        "/admin/config",
        "/admin/log-level",
    ] {
        assert_eq!(
            request(gw.admin, "GET", path, &[], b"").status,
            401,
            "{path}"
        );
    }
    let r = request(gw.admin, "PUT", "/admin/log-level", &[], b"debug");
    assert_eq!(r.status, 401);
}
