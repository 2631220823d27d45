//! The admin console in headless Chromium, driven over the DevTools protocol (`--remote-debugging-
//! pipe`): refused without the token, signed in it shows the demo tenant, each sink's queue with
//! its next attempt, and redrives a dead letter.

use crate::support::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium with the DevTools protocol on fds 3 (commands in) and 4
/// (answers out), NUL-terminated JSON messages; one page attached.
struct Browser {
    child: Child,
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    next: u64,
    session: String,
}

impl Browser {
    fn start(exe: &PathBuf) -> Browser {
        let (chrome_reads, to) = std::io::pipe().unwrap();
        let (from, chrome_writes) = std::io::pipe().unwrap();
        let (r, w) = (chrome_reads.as_raw_fd(), chrome_writes.as_raw_fd());
        let profile = temp_dir("chromium-console");
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(profile.join("chromium.log")).unwrap());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Move both ends above 4 first, so neither dup2 closes the other.
                let r2 = libc::fcntl(r, libc::F_DUPFD, 10);
                let w2 = libc::fcntl(w, libc::F_DUPFD, 10);
                if r2 < 0 || w2 < 0 || libc::dup2(r2, 3) < 0 || libc::dup2(w2, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        drop(chrome_reads);
        drop(chrome_writes);
        let mut b = Browser {
            child,
            to,
            from: BufReader::new(from),
            next: 0,
            session: String::new(),
        };
        let target = b.send(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().unwrap().to_owned();
        let attached = b.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_owned();
        b
    }

    /// One command; its `result` (panics on a protocol error).
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_send(session, method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    fn try_send(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).unwrap();
            assert!(n > 0, "chromium closed the DevTools pipe");
            buf.pop();
            let v: Value = serde_json::from_slice(&buf).unwrap();
            if v["id"] == id {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    fn navigate(&mut self, url: &str) {
        let s = self.session.clone();
        self.send(Some(&s), "Page.navigate", json!({"url": url}));
    }

    /// Evaluate `expr` in the page until it gives a truthy value (within
    /// 15 s); that value. A navigation in between is retried.
    fn wait_for(&mut self, expr: &str) -> Value {
        let s = self.session.clone();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let r = self.try_send(
                Some(&s),
                "Runtime.evaluate",
                json!({"expression": format!("(() => {{ try {{ return ({expr}); }} catch (e) {{ return null; }} }})()"),
                       "returnByValue": true}),
            );
            if let Ok(r) = r {
                let v = r["result"]["value"].clone();
                if !(v.is_null() || v == false || v == "" || v == 0) {
                    return v;
                }
            }
            assert!(Instant::now() < deadline, "page never satisfied: {expr}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn run(&mut self, expr: &str) {
        let s = self.session.clone();
        let r = self.send(
            Some(&s),
            "Runtime.evaluate",
            json!({"expression": format!("{{ {expr} }}"), "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// The webhook receiver (tests/upstreams/webhook_receiver.py) in a mode.
struct Receiver {
    port: u16,
    out: PathBuf,
    child: Child,
}

impl Receiver {
    fn start(mode: &str) -> Receiver {
        let dir = temp_dir("console-webhook");
        let port = free_port();
        let out = dir.join("received.jsonl");
        let child = Command::new("python3")
            .arg(repo().join("tests/upstreams/webhook_receiver.py"))
            .args(["--port", &port.to_string(), "--mode", mode])
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the webhook receiver");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "receiver did not start");
            std::thread::sleep(Duration::from_millis(30));
        }
        Receiver { port, out, child }
    }

    fn set(&self, mode: &str) {
        let r = request(
            self.port,
            "POST",
            "/_control",
            &[("Content-Type", "application/json")],
            json!({"mode": mode, "delay_ms": 0}).to_string().as_bytes(),
        );
        assert_eq!(r.status, 200);
    }

    fn delivered(&self, lead_id: &str) -> bool {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|a| a["lead_id"] == lead_id && a["answered"] == 200)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

#[test]
fn console_refuses_without_the_token_shows_the_tenant_and_redrives_a_dead_letter() {
    let Some(exe) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is required in CI (scripts/setup.sh installs the Debian package)"
        );
        eprintln!("SKIPPED console::…: chromium is not installed");
        return;
    };
    // A sink that refuses (400): the lead is dead-lettered at once. Another that is
    // unavailable (503): the lead stays pending there, retried later.
    let rx = Receiver::start("reject");
    let backup = Receiver::start("unavailable");
    let cfg = config_with(
        "",
        &format!(
            "[[tenants.backend.sinks]]\nkind = \"webhook\"\nname = \"crm\"\nurl = \"http://127.0.0.1:{}/leads\"\ntimeout_ms = 5000\n\n[[tenants.backend.sinks]]\nkind = \"webhook\"\nname = \"backup\"\nurl = \"http://127.0.0.1:{}/leads\"\ntimeout_ms = 5000\n",
            rx.port, backup.port
        ),
        "",
    )
    .replace("lead_submit_per_hour = 30", "lead_submit_per_hour = 0");
    let gw = Gateway::start_with(&cfg);
    let (is_err, sc) = gw.call_sc(
        "aap_lead_submit",
        lead(&format!("console-{}", uuid::Uuid::new_v4().simple())),
    );
    assert!(!is_err, "{sc}");
    let lead_id = sc["data"]["lead_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = request(
            gw.admin,
            "GET",
            "/admin/leads/dead-letters",
            &[("authorization", ADMIN_AUTH)],
            b"",
        );
        let v = r.json();
        let backup_retried = v["sinks"].as_array().is_some_and(|q| {
            q.iter().any(|q| {
                q["sink"] == "backup" && q["pending"] == 1 && q["next_attempt_at"].is_string()
            })
        });
        if v["dead_letters"].as_array().is_some_and(|a| a.len() == 1) && backup_retried {
            break;
        }
        assert!(Instant::now() < deadline, "no dead letter: {}", r.text());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The page: compiled-in assets under a strict CSP, no inline script.
    let page = request(gw.admin, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap().to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(!page.text().contains("<script>"), "no inline script");
    assert_eq!(
        request(gw.admin, "GET", "/console.js", &[], b"").status,
        200
    );

    let mut b = Browser::start(&exe);
    let url = format!("http://127.0.0.1:{}/", gw.admin);
    b.navigate(&url);
    // No token: the sign-in form, no data.
    b.wait_for("document.body.dataset.state === 'login'");
    assert_eq!(
        b.wait_for("document.getElementById('console').hidden"),
        true
    );
    // A wrong token is refused by the gateway and the form comes back.
    b.run("document.getElementById('token').value = 'wrong-token-0123456789abc'; document.getElementById('login').requestSubmit();");
    let msg = b.wait_for("document.getElementById('message').textContent.includes('Refused (401)') && document.getElementById('message').textContent");
    assert!(
        msg.as_str().unwrap().contains("admin token is not valid"),
        "{msg}"
    );
    assert_eq!(b.wait_for("document.body.dataset.state"), "login");
    assert_eq!(
        b.wait_for("document.getElementById('console').hidden"),
        true
    );
    assert_eq!(
        b.wait_for("document.querySelectorAll('#tenants tbody tr').length === 0"),
        true
    );

    // The right token: the demo tenant, searchable; the dead letter.
    b.run(&format!("document.getElementById('token').value = '{ADMIN_TOKEN}'; document.getElementById('login').requestSubmit();"));
    b.wait_for("document.body.dataset.state === 'loaded'");
    assert_eq!(
        b.wait_for("document.querySelector('#tenants tbody tr').dataset.tenant"),
        "demo-toyota"
    );
    b.run("const s = document.getElementById('tenant-search'); s.value = 'no-such'; s.dispatchEvent(new Event('input'));");
    assert_eq!(
        b.wait_for("document.querySelectorAll('#tenants tbody tr').length === 0"),
        true
    );
    b.run("const s2 = document.getElementById('tenant-search'); s2.value = 'toyota'; s2.dispatchEvent(new Event('input'));");
    assert_eq!(
        b.wait_for("document.querySelectorAll('#tenants tbody tr').length"),
        1
    );
    assert_eq!(
        b.wait_for(
            "document.getElementById('status').textContent.includes('Config generation1') && 'yes'"
        ),
        "yes"
    );
    let row = b.wait_for(&format!("document.querySelector('#dead-letters tr[data-lead=\"{lead_id}\"]') && document.querySelector('#dead-letters tr[data-lead=\"{lead_id}\"]').textContent"));
    assert!(row.as_str().unwrap().contains("HTTP 400"), "{row}");
    // Each sink's queue: the unavailable one pending with its next attempt (an RFC 3339
    // time), the refusing one with its dead letter.
    let cells = |b: &mut Browser, sink: &str| -> Vec<String> {
        let v = b.wait_for(&format!("document.querySelector('#sinks tr[data-sink=\"demo-toyota/{sink}\"]') && Array.from(document.querySelectorAll('#sinks tr[data-sink=\"demo-toyota/{sink}\"] td')).map(td => td.textContent)"));
        serde_json::from_value(v).unwrap_or_default()
    };
    let q = cells(&mut b, "backup");
    assert_eq!(&q[..3], ["demo-toyota", "backup", "1"], "{q:?}");
    assert!(
        time::OffsetDateTime::parse(&q[3], &time::format_description::well_known::Rfc3339).is_ok(),
        "next attempt: {q:?}"
    );
    assert_eq!(q[5], "0", "{q:?}");
    let q = cells(&mut b, "crm");
    assert_eq!(&q[..4], ["demo-toyota", "crm", "0", "-"], "{q:?}");
    assert_eq!(q[5], "1", "{q:?}");
    // No token in the page's address or storage beyond this tab's session.
    assert_eq!(b.wait_for("location.hash === '' && 'clean'"), "clean");

    // The sink is fixed; the Redrive button delivers the lead.
    rx.set("ok");
    b.run(&format!("document.querySelector('#dead-letters tr[data-lead=\"{lead_id}\"] button.redrive').click();"));
    assert_eq!(
        b.wait_for("document.body.dataset.redriven"),
        lead_id.as_str()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rx.delivered(&lead_id) {
        assert!(Instant::now() < deadline, "the redriven lead never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    b.run("document.getElementById('refresh').click();");
    assert_eq!(b.wait_for("document.querySelectorAll('#dead-letters tbody tr').length === 0 && document.getElementById('outbox-summary').textContent.includes('Dead letters: 0') && 'empty'"), "empty");

    // Signing out forgets the token, and an answer still in flight (a refresh clicked
    // just before) does not bring the console back.
    b.run("document.getElementById('refresh').click(); document.getElementById('logout').click();");
    assert_eq!(
        b.wait_for(
            "sessionStorage.getItem('aap-admin-token') === null && document.body.dataset.state"
        ),
        "login"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(b.wait_for("document.body.dataset.state"), "login");
    assert_eq!(
        b.wait_for("document.getElementById('console').hidden"),
        true
    );
}
