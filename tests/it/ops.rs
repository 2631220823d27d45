//! Operations over real processes: metrics, hot reload under load, TLS and
//! its certificate reload, SIGTERM's drain and the graceful upgrade.

use crate::support::*;
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
        let r = gw.reload();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["config_generation"], 2);
        std::thread::sleep(std::time::Duration::from_millis(150));
        // 2: an invalid config is refused and the old one keeps serving.
        std::fs::write(
            &gw.config,
            original.replace("max_json_depth = 32", "max_json_depth = 1"),
        )
        .unwrap();
        let r = gw.reload();
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
        signal(pid, "HUP");
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
    assert_eq!(gw.reload().status, 200);
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
    test_ca(&dir);
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

// ---- Graceful shutdown, upgrade, TLS reload ------------------------------------------------

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// One response with a Content-Length body from a kept-alive connection.
fn read_one(s: &mut std::net::TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed before the headers");
        buf.extend_from_slice(&b[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let len: usize = content_length(&head).expect("content-length");
    let mut body = buf[end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0);
        body.extend_from_slice(&b[..n]);
    }
    (head, body)
}

fn strict_backend(peer: &str) -> String {
    forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"{peer}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\n"
    ))
}

/// SIGTERM: the listener stops taking connections, an idle keep-alive
/// connection is closed, the call in flight (held by the upstream until the
/// test releases it, after the signal) still gets its 200 and complete
/// result, and the process exits 0 within grace period + shutdown timeout.
#[test]
fn sigterm_drains_the_call_in_flight_and_exits_0() {
    let hold = temp_dir("hold").join("release");
    let hold_arg = hold.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--sse", "--hold-until", &hold_arg],
        &[],
    );
    let mut gw = Gateway::start_with(&strict_backend(&peer.url()));
    let list = modern("tools/list", json!({})).to_string();
    // An idle keep-alive connection that has served one request.
    let mut idle = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    write!(
        idle,
        "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{list}",
        list.len()
    )
    .unwrap();
    let (head, _) = read_one(&mut idle);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The call in flight: the upstream holds its result after the first
    // progress event.
    let (mut s, mut got) = open_progress_stream(gw.port, "drain");
    // A connection accepted before the signal whose request comes after it
    // (as during an upgrade, when both processes accept on one socket).
    let mut pending = std::net::TcpStream::connect(("127.0.0.1", gw.port)).unwrap();
    pending
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = gw.child.as_ref().unwrap().id();
    signal(pid, "TERM");
    let t0 = Instant::now();
    // The idle connection is closed promptly (EOF or reset, not a timeout).
    let mut b = [0u8; 64];
    match idle.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("unexpected bytes on the idle connection: {:?}", &b[..n]),
        Err(e) => assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "idle keep-alive connection not closed: {e}"
        ),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    write!(
        pending,
        "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{list}",
        list.len()
    )
    .unwrap();
    let (head, _) = read_one(&mut pending);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "no keep-alive while shutting down: {head}"
    );
    std::thread::sleep(Duration::from_millis(300));
    // A new connection is not served: refused, or accepted by the kernel and
    // dropped when the process exits.
    let port = gw.port;
    let late = std::thread::spawn(move || {
        let r = try_request(
            port,
            "POST",
            ENDPOINT,
            &[("Content-Type", "application/json")],
            modern("tools/list", json!({})).to_string().as_bytes(),
        );
        r.map(|r| r.status)
    });
    std::thread::sleep(Duration::from_millis(1200));
    // Release the upstream 1.5 s into the grace period.
    std::fs::write(&hold, b"go").unwrap();
    let all = read_rest(&mut s, &mut got);
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(all.contains("\"resultType\":\"complete\""), "{all}");
    assert!(all.contains("inventory.search.response"), "{all}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "finished inside the grace period"
    );
    let status = wait_exit(gw.child.as_mut().unwrap(), Duration::from_secs(5 + 10 + 3))
        .unwrap_or_else(|| panic!("still running 18 s after SIGTERM; log:\n{}", gw.logs()));
    assert!(status.success(), "exit {status}; log:\n{}", gw.logs());
    let exited = t0.elapsed();
    assert!(
        exited < Duration::from_secs(15),
        "exit after {exited:?} (grace 5 s + shutdown timeout 10 s)"
    );
    let late = late.join().unwrap();
    assert!(
        !matches!(late, Ok(200)),
        "a connection opened after SIGTERM was served: {late:?}"
    );
    assert!(gw.logs().contains("SIGTERM received"), "{}", gw.logs());
    drop(peer);
}

/// Graceful upgrade: a second process started with `--upgrade` takes the
/// listening sockets over `state.dir/aap-gateway-upgrade.sock`, the old one
/// gets SIGQUIT and exits 0; a client loop running throughout sees no
/// failed request and the new pid serves afterwards.
#[test]
fn upgrade_hands_the_sockets_over_with_zero_failures() {
    let mut gw = Gateway::start();
    let old_pid = gw.child.as_ref().unwrap().id();
    assert_eq!(
        request(gw.admin, "GET", "/readyz", &[], b"").json()["pid"],
        old_pid
    );
    let stop = AtomicBool::new(false);
    let ok = AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(Vec::<String>::new());
    let new_log = gw.state.join("upgraded.log");
    let mut new_child = None;
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let r = try_request(gw.port, "POST", ENDPOINT, &[("Content-Type", "application/json")],
                        modern("tools/call", json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 2}}})).to_string().as_bytes());
                    match r {
                        Ok(r) if r.status == 200 && r.json()["result"]["isError"] == false => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failed.lock().unwrap().push(format!("{} {}", r.status, r.text())),
                        Err(e) => failed.lock().unwrap().push(e.to_string()),
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        let child = gw.spawn_upgrade(&new_log);
        let new_pid = child.id();
        new_child = Some(child);
        // Let the new process reach the point where it waits for the sockets.
        std::thread::sleep(Duration::from_millis(700));
        signal(old_pid, "QUIT");
        let mut old = gw.child.take().unwrap();
        let status = wait_exit(&mut old, Duration::from_secs(25));
        let log = std::fs::read_to_string(&new_log).unwrap_or_default();
        let status = status.unwrap_or_else(|| panic!("old process still running; new log:\n{log}"));
        assert!(status.success(), "old exit {status}; log:\n{}", gw.logs());
        assert!(
            new_child.as_mut().unwrap().try_wait().unwrap().is_none(),
            "new process exited; log:\n{log}"
        );
        // The old one is gone: whatever answers now is the new process.
        let r = request(gw.admin, "GET", "/readyz", &[], b"");
        assert_eq!(r.json()["pid"], new_pid, "{}", r.text());
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
    });
    gw.child = new_child;
    let failed = failed.into_inner().unwrap();
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let n = ok.load(Ordering::Relaxed);
    assert!(n > 50, "only {n} requests");
    assert!(gw.logs().contains("SIGQUIT received"), "{}", gw.logs());
    let (err, sc) = gw.call_sc(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert!(!err, "{sc}");
}

/// Issue a server certificate for 127.0.0.1 from the test CA in `dir`.
fn issue(dir: &std::path::Path, name: &str, serial: u32) {
    let sh = format!(
        "set -e; cd {d}; \
         openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj /CN={name} 2>/dev/null; \
         printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf; \
         openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -set_serial {serial} -out {name}.pem -days 2 -extfile ext.cnf 2>/dev/null",
        d = dir.display()
    );
    assert!(std::process::Command::new("sh")
        .args(["-c", &sh])
        .status()
        .unwrap()
        .success());
}

/// A TLS client (Python's ssl, verifying against the test CA) driven over
/// stdin: `keep` opens a kept-alive connection and asks on it, `kept` asks
/// again on it, `new` asks on a fresh connection. Each answer is a JSON line
/// with the status, the peer certificate's CN and serial and the local port.
const TLS_CLIENT: &str = r#"
import sys, ssl, json, http.client
ca, port, path, body = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
def connect():
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    c.connect()
    return c
def ask(c):
    local = c.sock.getsockname()[1]
    cert = c.sock.getpeercert()
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    cn = dict(x[0] for x in cert["subject"])["commonName"]
    return {"status": r.status, "cn": cn, "serial": cert["serialNumber"], "local": local, "tools": len(data["result"]["tools"])}
kept = None
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd == "keep":
            kept = connect(); out = ask(kept)
        elif cmd == "kept":
            out = ask(kept)
        else:
            c = connect(); out = ask(c); c.close()
    except Exception as e:
        out = {"error": repr(e)}
    print(json.dumps(out), flush=True)
"#;

struct TlsClient {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl TlsClient {
    fn start(ca: &std::path::Path, port: u16) -> TlsClient {
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(TLS_CLIENT)
            .arg(ca)
            .arg(port.to_string())
            .arg(ENDPOINT)
            .arg(modern("tools/list", json!({})).to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        TlsClient { child, out }
    }

    fn ask(&mut self, cmd: &str) -> serde_json::Value {
        use std::io::BufRead;
        writeln!(self.child.stdin.as_mut().unwrap(), "{cmd}").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("error").is_none(), "{cmd}: {v}");
        assert_eq!(v["status"], 200, "{v}");
        assert_eq!(v["tools"], 5, "{v}");
        v
    }
}

impl Drop for TlsClient {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Replace the live pair atomically (rename), key first.
fn install(dir: &std::path::Path, name: &str) {
    for ext in ["key", "pem"] {
        let tmp = dir.join(format!("live.{ext}.tmp"));
        std::fs::copy(dir.join(format!("{name}.{ext}")), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(format!("live.{ext}"))).unwrap();
    }
}

fn wait_metric(admin: u16, labels: &[(&str, &str)], want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = request(admin, "GET", "/metrics", &[], b"").text();
        let got = metric(&m, "aap_tls_reloads_total", labels);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "aap_tls_reloads_total{labels:?} = {got}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cert A is served; its files are replaced by cert B (same CA, other CN
/// and serial): the next new connection gets B while the connection made
/// under A goes on. A broken replacement is refused (metric, error log) and
/// B keeps serving; SIGHUP and POST /reload re-read the files at once.
#[test]
fn tls_certificate_is_reloaded_when_its_files_change() {
    let dir = temp_dir("tlsreload");
    let ca = format!(
        "set -e; cd {d}; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=aap-test-ca 2>/dev/null",
        d = dir.display()
    );
    assert!(std::process::Command::new("sh")
        .args(["-c", &ca])
        .status()
        .unwrap()
        .success());
    issue(&dir, "cert-a", 1001);
    issue(&dir, "cert-b", 2002);
    issue(&dir, "cert-c", 3003);
    install(&dir, "cert-a");
    let cfg = config_with("", "", "").replace(
        "name = \"aap-gateway\"\n",
        &format!(
            "name = \"aap-gateway\"\ntls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            dir.join("live.pem"),
            dir.join("live.key")
        ),
    );
    let state = temp_dir("state");
    let config = state.join("gateway.toml");
    std::fs::write(&config, cfg).unwrap();
    let gw = Gateway::launch_with_args(config, state, &["--tls-watch-ms", "200"]);
    let mut client = TlsClient::start(&dir.join("ca.pem"), gw.port);
    let a = client.ask("keep");
    assert_eq!(a["cn"], "cert-a", "{a}");
    assert_eq!(a["serial"], "03E9", "{a}");
    assert_eq!(client.ask("new")["cn"], "cert-a");

    // Replace with B: picked up by the watcher.
    install(&dir, "cert-b");
    wait_metric(gw.admin, &[("result", "ok")], 1.0);
    let b = client.ask("new");
    assert_eq!(b["cn"], "cert-b", "{b}");
    assert_eq!(b["serial"], "07D2", "{b}");
    // The connection made under A is still open and still A.
    let kept = client.ask("kept");
    assert_eq!(kept["local"], a["local"], "same connection: {kept}");
    assert_eq!(kept["cn"], "cert-a", "{kept}");

    // A broken certificate file: refused, B keeps serving.
    std::fs::write(
        dir.join("live.pem.tmp"),
        b"-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    std::fs::rename(dir.join("live.pem.tmp"), dir.join("live.pem")).unwrap();
    wait_metric(gw.admin, &[("result", "rejected")], 1.0);
    assert_eq!(client.ask("new")["cn"], "cert-b");
    // A key that does not match the certificate: refused too (POST /reload says so).
    std::fs::copy(dir.join("cert-b.pem"), dir.join("live.pem")).unwrap();
    std::fs::copy(dir.join("cert-a.key"), dir.join("live.key")).unwrap();
    let r = gw.reload();
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["tls"], "rejected", "{}", r.text());
    assert_eq!(client.ask("new")["cn"], "cert-b");
    let logs = gw.logs();
    assert!(logs.contains("TLS certificate reload rejected"), "{logs}");

    // C by SIGHUP (the watcher is still settling or has refused the pair above).
    install(&dir, "cert-c");
    signal(gw.child.as_ref().unwrap().id(), "HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw
        .logs()
        .lines()
        .any(|l| l.contains("TLS certificate reloaded") && l.contains("\"trigger\":\"sighup\""))
    {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload: {}",
            gw.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(client.ask("new")["cn"], "cert-c");
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tls"], "reloaded");
    assert_eq!(client.ask("kept")["cn"], "cert-a");
    drop(client);
    std::fs::remove_dir_all(dir).ok();
}

/// A pair that does not load at start is a config error (exit 2), not a
/// panic in the listener.
#[test]
fn unusable_tls_files_stop_the_start() {
    let dir = temp_dir("tlsbad");
    std::fs::write(dir.join("bad.pem"), b"not a certificate\n").unwrap();
    std::fs::write(dir.join("bad.key"), b"not a key\n").unwrap();
    let cfg = config_with("", "", "").replace(
        "name = \"aap-gateway\"\n",
        &format!(
            "name = \"aap-gateway\"\ntls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            dir.join("bad.pem"),
            dir.join("bad.key")
        ),
    );
    std::fs::write(dir.join("gateway.toml"), cfg).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--state-dir")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.tls"));
    std::fs::remove_dir_all(dir).ok();
}
