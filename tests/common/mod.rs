//! Test harness: starts the real `aap-gateway` binary on free loopback ports
//! and talks to it with a raw HTTP/1.1 client (so tests control every byte:
//! duplicate headers, odd casing, hostile values).
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ENDPOINT: &str = "/aap/3.0.0/demo-toyota/mcp";
pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";
/// The admin token every gateway started here gets (through `AAP_ADMIN_TOKEN`,
/// which the shipped gateway.toml names in `server.admin_token_env`).
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";
/// `Authorization` value for the admin listener's mutating endpoints.
pub const ADMIN_AUTH: &str = "Bearer test-admin-token-0123456789";

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A loopback port nobody listens on, never handed out twice in this test
/// process: tests run in parallel threads, and the kernel readily gives a
/// just-released port to the next `bind(0)`, so a port meant to stay dead
/// could otherwise become another gateway's listener.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aapgw-{tag}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The shipped gateway.toml with `extra` lines appended inside the tenant's
/// tables, data paths made absolute.
pub fn config_with(tenant_extra: &str, backend_extra: &str, top_extra: &str) -> String {
    let base = std::fs::read_to_string(repo().join("gateway.toml")).unwrap();
    let data = repo().join("data");
    let mut out = String::new();
    for line in base.lines() {
        let line = line
            .replace(
                "\"data/demo-inventory.json\"",
                &format!("{:?}", data.join("demo-inventory.json")),
            )
            .replace(
                "\"data/demo-dealer.json\"",
                &format!("{:?}", data.join("demo-dealer.json")),
            );
        if line.starts_with("[tenants.backend]") {
            out.push_str(tenant_extra);
            out.push('\n');
        }
        if line.starts_with("[tenants.quotas]") {
            out.push_str(backend_extra);
            out.push('\n');
        }
        if line.starts_with("[[tenants]]") {
            out.push_str(top_extra);
            out.push('\n');
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

pub struct Gateway {
    pub child: Option<Child>,
    pub port: u16,
    pub admin: u16,
    pub state: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

impl Gateway {
    /// Start on the shipped config.
    pub fn start() -> Gateway {
        Self::start_with(&config_with("", "", ""))
    }

    pub fn start_with(config_text: &str) -> Gateway {
        let state = temp_dir("state");
        let config = state.join("gateway.toml");
        std::fs::write(&config, config_text).unwrap();
        Self::launch(config, state)
    }

    /// (Re)start with an existing config and state directory.
    pub fn launch(config: PathBuf, state: PathBuf) -> Gateway {
        Self::launch_with_args(config, state, &[])
    }

    /// Like [`Gateway::launch`], with extra command-line arguments.
    pub fn launch_with_args(config: PathBuf, state: PathBuf, extra: &[&str]) -> Gateway {
        Self::launch_with_env(config, state, extra, &[])
    }

    /// Like [`Gateway::launch_with_args`], with extra environment variables.
    pub fn launch_with_env(
        config: PathBuf,
        state: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Gateway {
        let port = free_port();
        let admin = free_port();
        let log = state.join(format!("gateway-{port}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{admin}"))
            .arg("--state-dir")
            .arg(&state)
            .args(extra)
            .env("AAP_ADMIN_TOKEN", ADMIN_TOKEN)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start aap-gateway");
        let mut gw = Gateway {
            child: Some(child),
            port,
            admin,
            state,
            config,
            log,
        };
        gw.wait_ready();
        gw
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "gateway exited ({status}) during start; log:\n{}",
                    self.logs()
                );
            }
            if let Ok(r) = try_request(self.admin, "GET", "/readyz", &[], b"") {
                if r.status == 200 {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("gateway did not become ready; log:\n{}", self.logs());
    }

    /// Start a second process with `--upgrade` on this gateway's config,
    /// ports and state (Pingora's graceful upgrade takes over the sockets
    /// once the old process gets SIGQUIT); its stderr goes to `log`.
    pub fn spawn_upgrade(&self, log: &Path) -> Child {
        Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .arg("--config")
            .arg(&self.config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{}", self.admin))
            .arg("--state-dir")
            .arg(&self.state)
            .arg("--upgrade")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    }

    /// `POST /reload` on the admin listener, with the admin token.
    pub fn reload(&self) -> Resp {
        request(
            self.admin,
            "POST",
            "/reload",
            &[("authorization", ADMIN_AUTH)],
            b"",
        )
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no chance to flush anything not already durable.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Restart on the same config and state after a kill.
    pub fn restart(mut self) -> Gateway {
        self.kill9();
        let config = self.config.clone();
        let state = self.state.clone();
        std::mem::forget(self);
        Gateway::launch(config, state)
    }

    pub fn post(&self, headers: &[(&str, &str)], body: &str) -> Resp {
        let mut h: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
        h.extend_from_slice(headers);
        request(self.port, "POST", ENDPOINT, &h, body.as_bytes())
    }

    /// POST with only the given headers (no default Content-Type).
    pub fn post_raw(&self, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        request(self.port, "POST", ENDPOINT, headers, body)
    }

    pub fn rpc(&self, headers: &[(&str, &str)], body: &Value) -> Resp {
        self.post(headers, &body.to_string())
    }

    /// Modern tools/call with full standard headers.
    pub fn call(&self, name: &str, arguments: Value) -> Resp {
        self.rpc(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", name),
            ],
            &modern("tools/call", json!({"name": name, "arguments": arguments})),
        )
    }

    /// The structuredContent of a modern tools/call.
    /// The `aap.error` code of a call that must fail, and the payload.
    pub fn aap_error_code(&self, name: &str, arguments: Value) -> (String, Value) {
        let (is_err, sc) = self.call_sc(name, arguments);
        assert!(is_err, "{sc}");
        let code = sc["code"]
            .as_str()
            .expect("an aap.error has a code")
            .to_owned();
        (code, sc)
    }

    pub fn call_sc(&self, name: &str, arguments: Value) -> (bool, Value) {
        let r = self.call(name, arguments);
        assert_eq!(r.status, 200, "{}", r.text());
        let j = r.json();
        let result = &j["result"];
        assert_eq!(result["resultType"], "complete", "{j}");
        let sc = result["structuredContent"].clone();
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, sc, "text block must equal structuredContent");
        let is_error = result["isError"].as_bool().unwrap();
        assert_eq!(
            is_error,
            sc["type"] == "aap.error",
            "isError must agree with the payload"
        );
        (is_error, sc)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
        std::fs::remove_dir_all(&self.state).ok();
    }
}

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "aap-gateway-tests", "version": "1.0.0"}
    })
}

/// A modern request body with `_meta`.
pub fn modern(method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

pub fn legacy(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn error_code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error code: {}", self.text()))
    }
}

pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    try_request(port, method, path, headers, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// Send raw bytes and read the response (the connection is closed after).
pub fn raw(port: u16, bytes: &[u8]) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(bytes)?;
    read_response(&mut s)
}

pub fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(port, &bytes)
}

fn read_response(s: &mut TcpStream) -> std::io::Result<Resp> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let header_end;
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before headers",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            header_end = p;
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect();
    let mut body = buf[header_end + 4..].to_vec();
    let len = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    match len {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(len);
        }
        None => {
            loop {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
            if chunked {
                body = dechunk(&body);
            }
        }
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(p) = find(b, b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..p]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[p + 2..p + 2 + size]);
        b = &b[p + 2 + size + 2..];
    }
    out
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// A consented lead with a fresh idempotency key.
pub fn lead(key: &str) -> Value {
    // One consent time per test process: a retry must resend the identical
    // payload, even when the two calls straddle a second boundary.
    static GRANTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let granted = GRANTED
        .get_or_init(|| {
            (time::OffsetDateTime::now_utc() - time::Duration::minutes(1))
                .replace_nanosecond(0)
                .unwrap()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap()
        })
        .clone();
    json!({
        "type": "lead.submit.request",
        "customer": {"first_name": "Quinn", "last_name": "Testbuyer", "email": "quinn.testbuyer@example.com", "preferred_contact": "email"},
        "consent": {
            "granted_at": granted,
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may contact me by email about this enquiry.",
            "scope": ["lead_submission"]
        },
        "vehicle_of_interest": {"stock": "DT-1001"},
        "source_agent": {"name": "aap-gateway-tests"},
        "idempotency_key": key
    })
}

pub fn leads_in(state: &Path) -> usize {
    std::fs::read_to_string(state.join("demo-toyota").join("leads.jsonl"))
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

// ---- Upstream peers (tests/upstreams) ---------------------------------------------------------

static UPSTREAMS_SETUP: std::sync::Once = std::sync::Once::new();

pub fn venv_python() -> PathBuf {
    std::env::var_os("AAP_UPSTREAMS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target").join("upstreams-venv"))
        .join("bin")
        .join("python")
}

/// Run `tests/upstreams/setup.sh` once per test binary when the venv or the
/// Node modules are missing.
pub fn ensure_upstreams() {
    UPSTREAMS_SETUP.call_once(|| {
        let node_ok = repo()
            .join("tests/upstreams/node/node_modules/@modelcontextprotocol/sdk")
            .is_dir();
        if venv_python().is_file() && node_ok {
            return;
        }
        let status = Command::new("bash")
            .arg(repo().join("tests/upstreams/setup.sh"))
            .arg("--quiet")
            .status()
            .expect("run tests/upstreams/setup.sh");
        assert!(status.success(), "tests/upstreams/setup.sh failed");
    });
}

/// Which peer program to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    StrictMcp,
    LegacyMcp,
    A2a,
}

/// One running upstream peer; killed on drop.
pub struct Peer {
    pub kind: PeerKind,
    pub port: u16,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub leads: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Peer {
    pub fn start(kind: PeerKind, args: &[&str], env: &[(&str, &str)]) -> Peer {
        Self::start_on(kind, free_port(), args, env, None)
    }

    pub fn start_on(
        kind: PeerKind,
        port: u16,
        args: &[&str],
        env: &[(&str, &str)],
        leads: Option<PathBuf>,
    ) -> Peer {
        ensure_upstreams();
        let dir = temp_dir("peer");
        let mut p = Peer {
            kind,
            port,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            leads: leads.unwrap_or_else(|| dir.join("leads.jsonl")),
            log: dir.join("peer.log"),
            child: None,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        let up = repo().join("tests/upstreams");
        let mut cmd = match self.kind {
            PeerKind::StrictMcp => {
                let mut c = Command::new(venv_python());
                c.arg(up.join("strict_mcp_server.py"));
                c
            }
            PeerKind::A2a => {
                let mut c = Command::new(venv_python());
                c.arg(up.join("a2a_agent.py"));
                c
            }
            PeerKind::LegacyMcp => {
                let mut c = Command::new("node");
                c.arg(up.join("legacy_mcp_server.mjs"));
                c
            }
        };
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--leads")
            .arg(&self.leads)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap());
        self.child = Some(cmd.spawn().expect("start upstream peer"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "peer {:?} exited ({status}) during start; log:\n{}",
                    self.kind,
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("peer {:?} did not start on {}", self.kind, self.port);
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Start again on the same port and lead file (sessions are lost).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn leads(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.leads)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A one-tenant gateway config (tenant `demo-toyota` at [`ENDPOINT`]) whose
/// backend table is `backend` (the lines after `[tenants.backend]`).
pub fn forwarding_config(backend: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:8080"
admin_listen = "127.0.0.1:9090"
threads = 2
admin_token_env = "AAP_ADMIN_TOKEN"

[state]
dir = "var"

[[tenants]]
id = "demo-toyota"
path = "{ENDPOINT}"

[tenants.backend]
{backend}
"#
    )
}

/// Legacy handshake through the gateway; returns the negotiated session id
/// (if the tenant issues one).
pub fn legacy_handshake(gw: &Gateway) -> Option<String> {
    let r = gw.rpc(
        &[("Accept", "application/json, text/event-stream")],
        &legacy(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "legacy-test", "version": "1"}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["protocolVersion"], LEGACY);
    let sid = r.header("mcp-session-id").map(str::to_owned);
    let r = gw.rpc(
        &[("MCP-Protocol-Version", LEGACY)],
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(r.status, 202, "{}", r.text());
    sid
}

/// A legacy tools/call (2025-11-25 header, no `_meta`); returns the result.
pub fn legacy_call(gw: &Gateway, name: &str, arguments: Value) -> Value {
    let r = gw.rpc(
        &[
            ("MCP-Protocol-Version", LEGACY),
            ("Accept", "application/json, text/event-stream"),
        ],
        &legacy("tools/call", json!({"name": name, "arguments": arguments})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let j = r.json();
    assert!(
        j["result"].get("resultType").is_none(),
        "legacy results carry no resultType: {j}"
    );
    j["result"].clone()
}

/// A modern tools/call with `_meta` but none of the mirror headers.
pub fn headerless_call(gw: &Gateway, name: &str, arguments: Value) -> Resp {
    gw.rpc(
        &[],
        &modern("tools/call", json!({"name": name, "arguments": arguments})),
    )
}

/// POST a modern search carrying `_meta.progressToken = token`, accepting
/// SSE, on a fresh `Connection: close` connection, and read until the first
/// `notifications/progress` event arrived (for upstreams that hold their
/// result after it). Returns the connection and what was read so far.
pub fn open_progress_stream(port: u16, token: &str) -> (TcpStream, Vec<u8>) {
    let mut call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 5}}}),
    );
    call["params"]["_meta"]["progressToken"] = json!(token);
    let body = call.to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        s,
        "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("notifications/progress") {
        let n = s
            .read(&mut buf)
            .expect("first event while the upstream holds");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    (s, got)
}

/// Read a `Connection: close` response to its end (or an error), appending
/// to `got`; returns everything read as text.
pub fn read_rest(s: &mut TcpStream, got: &mut Vec<u8>) -> String {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(got).into_owned()
}

/// A throwaway `redis-server` on a free loopback port, killed on drop.
pub struct Redis {
    child: std::process::Child,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Redis {
        let port = free_port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--bind",
                "127.0.0.1",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/setup.sh installs it)");
        let mut redis = Redis { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return redis;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        redis.child.kill().ok();
        redis.child.wait().ok();
        panic!("redis did not start");
    }

    /// Every element of the list `key`.
    pub fn list(&self, key: &str) -> Vec<serde_json::Value> {
        let out = std::process::Command::new("redis-cli")
            .args([
                "-p",
                &self.port.to_string(),
                "--raw",
                "LRANGE",
                key,
                "0",
                "-1",
            ])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Send `kill -SIG` to `pid` (`sig` without the dash: `TERM`, `QUIT`, …).
pub fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

/// Wait for the process to exit; `None` if it is still running at the deadline.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    None
}
