//! `tenants_dir` over real HTTP against the real binary: tenant files added, changed and removed
//! while a client loop runs on another tenant; a broken file refused alone; `check` of a directory.

use crate::support::*;
use serde_json::json;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Start on the shipped config plus a tenants directory (watched every 100 ms).
fn start(files: &[(&str, String)]) -> (Gateway, std::path::PathBuf) {
    let state = temp_dir("tdir");
    let dir = state.join("tenants.d");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with_tenants_dir(&dir)).unwrap();
    let gw = Gateway::launch_with_args(config, state, &["--tenants-watch-ms", "100"]);
    (gw, dir)
}

/// A client loop on the main config's tenant: (stop flag, requests, failures).
fn client_loop(
    port: u16,
) -> (
    Arc<AtomicBool>,
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    std::thread::JoinHandle<Vec<String>>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let (s, n, f) = (stop.clone(), sent.clone(), failed.clone());
    let h = std::thread::spawn(move || {
        let mut why = Vec::new();
        while !s.load(Ordering::Relaxed) {
            n.fetch_add(1, Ordering::Relaxed);
            match tools_list(port, ENDPOINT, &[]) {
                Ok(r) if r.status == 200 => {}
                Ok(r) => {
                    f.fetch_add(1, Ordering::Relaxed);
                    why.push(format!("{} {}", r.status, r.text()));
                }
                Err(e) => {
                    f.fetch_add(1, Ordering::Relaxed);
                    why.push(e.to_string());
                }
            }
        }
        why
    });
    (stop, sent, failed, h)
}

#[test]
fn a_tenant_file_is_added_changed_and_removed_while_others_serve_without_a_failure() {
    let (gw, dir) = start(&[]);
    let (stop, sent, failed, loop_thread) = client_loop(gw.port);
    let path = tenant_path("dealer-a");
    assert_eq!(
        tools_list(gw.port, &path, &[]).unwrap().status,
        404,
        "not there yet"
    );

    // Added.
    let origins = "allowed_origins = [\"https://a.example\"]";
    put_tenant_file(&dir, "dealer-a.toml", &tenant_file("dealer-a", origins, ""));
    wait_for("dealer-a to be served", || {
        tools_list(gw.port, &path, &[]).is_ok_and(|r| r.status == 200)
    });
    assert!(tool_names(gw.port, &path).contains(&"aap_lead_submit".to_owned()));
    let from = |o: &str| tools_list(gw.port, &path, &[("Origin", o)]).unwrap().status;
    assert_eq!(from("https://a.example"), 200);
    assert_eq!(from("https://b.example"), 403);

    // Its allowed_origins changed.
    let origins_b = "allowed_origins = [\"https://b.example\"]";
    put_tenant_file(
        &dir,
        "dealer-a.toml",
        &tenant_file("dealer-a", origins_b, ""),
    );
    wait_for("the new origins", || from("https://b.example") == 200);
    assert_eq!(from("https://a.example"), 403);

    // Its skills changed.
    let skills = format!("{origins_b}\nskills = [\"dealer.information\", \"inventory.search\"]");
    put_tenant_file(&dir, "dealer-a.toml", &tenant_file("dealer-a", &skills, ""));
    wait_for("the new skills", || {
        !tool_names(gw.port, &path).contains(&"aap_lead_submit".to_owned())
    });
    let mut names = tool_names(gw.port, &path);
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");

    // Its backend changed: a smaller default page.
    let search = |port: u16| {
        let body = modern(
            "tools/call",
            json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request"}}),
        )
        .to_string();
        let r = request(
            port,
            "POST",
            &path,
            &[
                ("Content-Type", "application/json"),
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "aap_inventory_search"),
            ],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["result"]["structuredContent"]["data"]["vehicles"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert!(search(gw.port) > 3);
    put_tenant_file(
        &dir,
        "dealer-a.toml",
        &tenant_file("dealer-a", &skills, "default_limit = 3"),
    );
    wait_for("the new backend", || search(gw.port) == 3);

    // Removed.
    std::fs::remove_file(dir.join("dealer-a.toml")).unwrap();
    wait_for("dealer-a to be gone", || {
        tools_list(gw.port, &path, &[]).is_ok_and(|r| r.status == 404)
    });

    stop.store(true, Ordering::Relaxed);
    let why = loop_thread.join().unwrap();
    assert!(sent.load(Ordering::Relaxed) > 20, "the loop ran");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "{why:?}");
    let logs = gw.logs();
    assert!(logs.contains("tenant file applied"), "{logs}");
    assert!(logs.contains("tenant file removed"), "{logs}");
}

#[test]
fn a_broken_tenant_file_is_refused_alone_and_its_previous_version_keeps_serving() {
    let (gw, dir) = start(&[
        ("a.toml", tenant_file("dealer-a", "", "")),
        ("b.toml", tenant_file("dealer-b", "", "")),
    ]);
    let (pa, pb) = (tenant_path("dealer-a"), tenant_path("dealer-b"));
    assert_eq!(tool_names(gw.port, &pa).len(), 5);
    assert_eq!(tool_names(gw.port, &pb).len(), 5);
    let ready = readyz(gw.admin);
    assert_eq!(ready["tenants"], 3, "{ready}");
    assert_eq!(ready["tenant_files"]["applied"], 2, "{ready}");
    assert_eq!(
        metric(gw.admin, "aap_tenant_files{result=\"refused\"}"),
        Some(0.0)
    );

    // b breaks: an unknown skill.
    put_tenant_file(
        &dir,
        "b.toml",
        &tenant_file("dealer-b", "skills = [\"inventory.nope\"]", ""),
    );
    wait_for("b to be refused", || {
        readyz(gw.admin)["tenant_files"]["refused"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let ready = readyz(gw.admin);
    let refused = &ready["tenant_files"]["refused"][0];
    assert_eq!(refused["file"], "b.toml", "{ready}");
    assert!(
        refused["error"].as_str().unwrap().contains("skills"),
        "{ready}"
    );
    assert_eq!(refused["serving"], "previous version", "{ready}");
    assert_eq!(ready["status"], "ready");
    assert_eq!(
        metric(gw.admin, "aap_tenant_files{result=\"refused\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(gw.admin, "aap_tenant_files{result=\"applied\"}"),
        Some(1.0)
    );
    // The previous b, a and the main tenant all serve.
    assert_eq!(tool_names(gw.port, &pb).len(), 5);
    assert_eq!(tool_names(gw.port, &pa).len(), 5);
    assert_eq!(tool_names(gw.port, ENDPOINT).len(), 5);
    let logs = gw.logs();
    assert!(
        logs.contains("tenant file refused") && logs.contains("b.toml"),
        "{logs}"
    );

    // A full reload keeps the others and still refuses b alone.
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tool_names(gw.port, &pb).len(), 5);
    assert_eq!(
        readyz(gw.admin)["tenant_files"]["refused"][0]["file"],
        "b.toml"
    );

    // A new file with a syntax error on a secret's line: refused, the
    // secret not shown; one that takes the main tenant's id: refused.
    put_tenant_file(
        &dir,
        "c.toml",
        &tenant_file("dealer-c", "", "cursor_secret = \"sup3r-secret-value"),
    );
    put_tenant_file(&dir, "d.toml", &tenant_file("demo-toyota", "", ""));
    wait_for("c and d to be refused", || {
        readyz(gw.admin)["tenant_files"]["refused"]
            .as_array()
            .is_some_and(|a| a.len() == 3)
    });
    let ready = readyz(gw.admin);
    let text = ready.to_string();
    assert!(!text.contains("sup3r"), "{text}");
    let error_of = |f: &str| {
        ready["tenant_files"]["refused"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["file"] == f)
            .map(|r| {
                (
                    r["error"].as_str().unwrap().to_owned(),
                    r["serving"].clone(),
                )
            })
            .unwrap()
    };
    let (e, serving) = error_of("c.toml");
    assert!(e.contains("cursor_secret"), "{e}");
    assert_eq!(serving, "nothing");
    let (e, _) = error_of("d.toml");
    assert!(e.contains("demo-toyota") && e.contains("already"), "{e}");
    assert!(!gw.logs().contains("sup3r"));
    assert_eq!(
        tools_list(gw.port, &tenant_path("dealer-c"), &[])
            .unwrap()
            .status,
        404
    );

    // b fixed: applied, no longer refused.
    put_tenant_file(
        &dir,
        "b.toml",
        &tenant_file("dealer-b", "skills = [\"inventory.search\"]", ""),
    );
    wait_for("b to be applied", || {
        tool_names(gw.port, &pb) == vec!["aap_inventory_search".to_owned()]
    });
    assert_eq!(
        metric(gw.admin, "aap_tenant_files{result=\"refused\"}"),
        Some(2.0)
    );
}

#[test]
fn check_validates_the_tenant_dir_and_names_each_refused_file() {
    let state = temp_dir("tdir-check");
    let dir = state.join("tenants.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.toml"), tenant_file("dealer-a", "", "")).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a tenant file").unwrap();
    let config = state.join("gateway.toml");
    std::fs::write(&config, config_with_tenants_dir(&dir)).unwrap();
    let check = || {
        Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["check", "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    let out = check();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 tenant file(s), 0 refused"), "{stdout}");
    assert!(stdout.contains("ok (2 tenant(s))"), "{stdout}");

    std::fs::write(
        dir.join("b.toml"),
        tenant_file("dealer-b", "allowed_origins = [\"nope\"]", ""),
    )
    .unwrap();
    std::fs::write(dir.join("c.toml"), "id = \"dealer-c\"\n").unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tenant file b.toml refused: allowed_origins"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tenant file c.toml refused") && stderr.contains("path"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&state).ok();
}
