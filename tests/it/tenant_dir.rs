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

    // Its upstream changed: from the embedded dealer to a strict MCP server (a real peer).
    let peer = Peer::start(PeerKind::StrictMcp, &[], &[]);
    let upstream = format!(
        "id = \"dealer-a\"\npath = \"{path}\"\n{origins_b}\n\n[backend]\nkind = \"mcp\"\npeers = [\"{}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\n",
        peer.url()
    );
    put_tenant_file(&dir, "dealer-a.toml", &upstream);
    wait_for("the new upstream", || search(gw.port) > 3);
    assert!(tool_names(gw.port, &path).contains(&"aap_lead_submit".to_owned()));

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

/// The main config with `top` before its `[[tenants]]`, and a tenants
/// directory (watched every 100 ms) holding `files`.
fn start_with_top(top: &str, files: &[(&str, String)]) -> (Gateway, std::path::PathBuf) {
    let state = temp_dir("tdir");
    let dir = state.join("tenants.d");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let config = state.join("gateway.toml");
    let text = format!("tenants_dir = {:?}\n{}", dir, config_with("", "", top));
    std::fs::write(&config, text).unwrap();
    let gw = Gateway::launch_with_args(config, state, &["--tenants-watch-ms", "100"]);
    (gw, dir)
}

/// An admin GET (with the admin token).
fn admin_get(gw: &Gateway, path: &str) -> Resp {
    request(gw.admin, "GET", path, &[("authorization", ADMIN_AUTH)], b"")
}

/// How many tenants the metrics know (`/admin/tenants/top`).
fn tenants_in_metrics(gw: &Gateway) -> u64 {
    let r = admin_get(gw, "/admin/tenants/top?n=1");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["tenants"].as_u64().unwrap_or(0)
}

/// A `kind = "mcp"` tenant file naming the main config's cluster `cluster`.
fn mcp_tenant_file(id: &str, cluster: &str) -> String {
    format!(
        "id = \"{id}\"\npath = \"{}\"\n\n[backend]\nkind = \"mcp\"\ncluster = \"{cluster}\"\nrevision = \"2026-07-28\"\n",
        tenant_path(id)
    )
}

#[test]
fn tenant_files_share_the_main_configs_clusters_and_feeds_and_the_metrics_follow_them() {
    // A cluster whose name never resolves: a tenant file on it is applied
    // (no lookup while building), and the cluster is reported, not fatal.
    let top = "[[clusters]]\nname = \"far\"\npeers = [\"http://upstream-not-there.invalid:8001\"]\ndns_refresh_secs = 1\n";
    let (gw, dir) = start_with_top(
        top,
        &[
            ("a.toml", tenant_file("dealer-a", "", "")),
            ("m.toml", mcp_tenant_file("dealer-m", "far")),
            ("x.toml", mcp_tenant_file("dealer-x", "nope")),
        ],
    );
    let ready = readyz(gw.admin);
    assert_eq!(ready["tenants"], 3, "{ready}");
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["tenant_files"]["applied"], 2, "{ready}");
    let refused = &ready["tenant_files"]["refused"];
    assert_eq!(refused.as_array().map_or(0, Vec::len), 1, "{ready}");
    assert_eq!(refused[0]["file"], "x.toml", "{ready}");
    let e = refused[0]["error"].as_str().unwrap_or_default();
    assert!(e.contains("cluster") && e.contains("nope"), "{e}");
    // The main tenant and dealer-a name the same inventory: one source, two tenants.
    let feeds = ready["feeds"].as_array().cloned().unwrap_or_default();
    assert_eq!(feeds.len(), 1, "{ready}");
    assert_eq!(feeds[0]["tenants"], 2, "{ready}");
    wait_for("cluster far to be reported not ready", || {
        readyz(gw.admin)["clusters_not_ready"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c["cluster"] == "far"))
    });
    assert_eq!(readyz(gw.admin)["status"], "ready");
    // dealer-m is mounted on its cluster (its upstream unreachable: not a 404).
    let m = tools_list(gw.port, &tenant_path("dealer-m"), &[]).unwrap();
    assert_ne!(m.status, 404, "{}", m.text());

    // The metrics know the file tenants, from the start and after one-file applies.
    assert_eq!(tenants_in_metrics(&gw), 3);
    assert_eq!(admin_get(&gw, "/admin/tenants/dealer-a/stats").status, 200);
    assert_eq!(admin_get(&gw, "/admin/tenants/dealer-n/stats").status, 404);
    put_tenant_file(&dir, "n.toml", &tenant_file("dealer-n", "", ""));
    let pn = tenant_path("dealer-n");
    wait_for("dealer-n to be served", || {
        tools_list(gw.port, &pn, &[]).is_ok_and(|r| r.status == 200)
    });
    assert_eq!(tenants_in_metrics(&gw), 4);
    let stats = admin_get(&gw, "/admin/tenants/dealer-n/stats");
    assert_eq!(stats.status, 200, "{}", stats.text());
    assert!(
        request(gw.admin, "GET", "/metrics", &[], b"")
            .text()
            .contains("tenant=\"dealer-n\""),
        "dealer-n's request is labelled with its tenant"
    );
    // Three tenants now share the source.
    assert_eq!(readyz(gw.admin)["feeds"][0]["tenants"], 3);

    std::fs::remove_file(dir.join("n.toml")).unwrap();
    wait_for("dealer-n to be gone", || {
        tools_list(gw.port, &pn, &[]).is_ok_and(|r| r.status == 404)
    });
    assert_eq!(tenants_in_metrics(&gw), 3);
    assert_eq!(admin_get(&gw, "/admin/tenants/dealer-n/stats").status, 404);
    assert!(
        !request(gw.admin, "GET", "/metrics", &[], b"")
            .text()
            .contains("tenant=\"dealer-n\""),
        "a removed tenant leaves no series"
    );
}

/// A webhook sink on a port of its own: records the path of every POST
/// and answers 200.
struct Sink {
    port: u16,
    paths: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Sink {
    fn start() -> Sink {
        use std::io::{Read, Write};
        let l = listener();
        let port = l.local_addr().unwrap().port();
        let paths = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = paths.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut s) = conn else { continue };
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then Content-Length bytes of body.
                let (head_end, len) = loop {
                    let Ok(n) = s.read(&mut buf) else {
                        break (0, 0);
                    };
                    if n == 0 {
                        break (0, 0);
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..i]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (i + 4, len);
                    }
                };
                while head_end > 0 && got.len() < head_end + len {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&got);
                if let Some(path) = line.split_whitespace().nth(1) {
                    seen.lock().unwrap().push(path.to_owned());
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Sink { port, paths }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn count(&self, path: &str) -> usize {
        self.paths
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

/// Tenant file `dealer-o` with one webhook sink at `url`, and `dealer` as
/// its dealer file.
fn outbox_tenant_file(url: &str, dealer: &std::path::Path) -> String {
    let data = repo().join("data");
    format!(
        "id = \"dealer-o\"\npath = \"{}\"\n\n[backend]\nkind = \"embedded\"\ninventory = {:?}\ndealer = {:?}\n\n[[backend.sinks]]\nkind = \"webhook\"\nname = \"crm\"\nurl = \"{url}\"\ntimeout_ms = 5000\n\n[backend.outbox]\ninitial_backoff_ms = 50\nmax_backoff_ms = 400\n",
        tenant_path("dealer-o"),
        data.join("demo-inventory.json"),
        dealer,
    )
}

/// Submit a lead on tenant `path`; it must be accepted.
fn submit_on(port: u16, path: &str, key: &str) {
    let body = modern(
        "tools/call",
        json!({"name": "aap_lead_submit", "arguments": lead(key)}),
    )
    .to_string();
    let r = request(
        port,
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "aap_lead_submit"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert_eq!(j["result"]["isError"], false, "{j}");
}

#[test]
fn a_tenant_files_outbox_takes_new_sinks_when_applied_and_keeps_them_when_refused() {
    let sink = Sink::start();
    let good_dealer = repo().join("data").join("demo-dealer.json");
    let (gw, dir) = start(&[("o.toml", outbox_tenant_file(&sink.url("/a"), &good_dealer))]);
    let po = tenant_path("dealer-o");
    submit_on(gw.port, &po, "tdir-outbox-1");
    wait_for("the first lead at sink /a", || sink.count("/a") == 1);

    // A new version that moves the sink to /b but whose backend does not
    // build (a dealer file that is not JSON): refused after its outbox was
    // staged. The serving version keeps /a, even when another file's apply
    // commits what is staged.
    let broken = gw.state.join("broken-dealer.json");
    std::fs::write(&broken, "{ not json").unwrap();
    put_tenant_file(
        &dir,
        "o.toml",
        &outbox_tenant_file(&sink.url("/b"), &broken),
    );
    wait_for("o.toml to be refused", || {
        readyz(gw.admin)["tenant_files"]["refused"]
            .as_array()
            .is_some_and(|a| a.iter().any(|r| r["file"] == "o.toml"))
    });
    put_tenant_file(&dir, "p.toml", &tenant_file("dealer-p", "", ""));
    wait_for("dealer-p to be served", || {
        tools_list(gw.port, &tenant_path("dealer-p"), &[]).is_ok_and(|r| r.status == 200)
    });
    submit_on(gw.port, &po, "tdir-outbox-2");
    wait_for("the second lead at sink /a", || sink.count("/a") == 2);
    assert_eq!(sink.count("/b"), 0, "a refused version's sinks never apply");

    // Fixed: applied, and the sink moves to /b from now on.
    put_tenant_file(
        &dir,
        "o.toml",
        &outbox_tenant_file(&sink.url("/b"), &good_dealer),
    );
    wait_for("o.toml to be applied", || {
        readyz(gw.admin)["tenant_files"]["refused"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    });
    submit_on(gw.port, &po, "tdir-outbox-3");
    wait_for("the third lead at sink /b", || sink.count("/b") == 1);
    assert_eq!(sink.count("/a"), 2);
}
