//! Process management: free ports, temp dirs, the gateway config, and the
//! real `aap-gateway` binary (start, restart, upgrade, reload, signals); Redis.

use super::http::{request, try_request, Resp};
use super::mcp::ENDPOINT;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    listener().local_addr().unwrap().port()
}

/// A loopback listener for a test's own stand-in peer, on a port
/// [`free_port`] has not handed out and now never will: every test shares
/// this process, so a bare `bind(0)` could take the port a gateway started
/// by another test is about to bind.
pub fn listener() -> TcpListener {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return l;
        }
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aapgw-{tag}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The shipped gateway.toml with `extra` lines appended inside the tenant's
/// tables, data paths made absolute. A `tenant_extra` that names the public
/// URL (`public_url`, or an `[tenants.auth]` `resource`, which is the same
/// URL) replaces the shipped `public_url`.
pub fn config_with(tenant_extra: &str, backend_extra: &str, top_extra: &str) -> String {
    let base = std::fs::read_to_string(repo().join("gateway.toml")).unwrap();
    let data = repo().join("data");
    let own_url = tenant_extra
        .lines()
        .any(|l| l.starts_with("public_url") || l.starts_with("resource ="));
    let mut out = String::new();
    for line in base.lines() {
        if own_url && line.starts_with("public_url = ") {
            continue;
        }
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

/// The gateway binary with the flags every test process gets: its config, its listener and
/// admin listener on loopback, and its state directory.
pub fn gateway_command(config: &Path, port: u16, admin: u16, state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aap-gateway"));
    c.arg("--config")
        .arg(config)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-listen")
        .arg(format!("127.0.0.1:{admin}"))
        .arg("--state-dir")
        .arg(state);
    c
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
        Self::launch_on(config, state, (free_port(), free_port()), extra, env)
    }

    /// Like [`Gateway::launch_with_env`], on the given (listen, admin) ports.
    fn launch_on(
        config: PathBuf,
        state: PathBuf,
        (port, admin): (u16, u16),
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Gateway {
        let log = state.join(format!("gateway-{port}.log"));
        // A config may name the listener's own port as `@PORT@` (a public
        // URL that a client follows, e.g. the Agent Card's A2A interface):
        // it runs from a copy with the port filled in.
        let config = match std::fs::read_to_string(&config) {
            Ok(text) if text.contains(PORT_MARKER) => {
                let filled = state.join(format!("gateway-{port}.toml"));
                std::fs::write(&filled, text.replace(PORT_MARKER, &port.to_string())).unwrap();
                filled
            }
            _ => config,
        };
        let child = gateway_command(&config, port, admin, &state)
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
            // The spelling docs/leads.md and docs/operations.md use.
            .args(["run", "--upgrade"])
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

    /// The log so far. Lines reach the file through the gateway's log
    /// writer thread, a moment after the answer they describe: read until
    /// the file has been quiet for 30 ms (at most 2 s).
    pub fn logs(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut text = std::fs::read_to_string(&self.log).unwrap_or_default();
        loop {
            std::thread::sleep(Duration::from_millis(30));
            let again = std::fs::read_to_string(&self.log).unwrap_or_default();
            if again.len() == text.len() || Instant::now() >= deadline {
                return again;
            }
            text = again;
        }
    }

    /// The log once it holds a line containing `needle` (at most 10 s; then the log as it is):
    /// for a line the test knows is coming, which [`Gateway::logs`] may read before the log
    /// writer thread has run on a busy machine.
    pub fn logs_containing(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.logs();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to flush anything not already durable.
    fn kill9(&mut self) {
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
}

impl Gateway {
    /// One step of a rolling restart: SIGTERM, wait for the exit (drain and
    /// grace, at most `within`; it must exit 0), then start again on the same
    /// config, state directory and ports (the old log kept as `*.log.1`).
    pub fn restart_graceful(mut self, within: Duration) -> Gateway {
        let mut child = self.child.take().expect("a running gateway");
        signal(child.id(), "TERM");
        let status = wait_exit(&mut child, within);
        assert!(
            status.is_some_and(|s| s.success()),
            "SIGTERM: {status:?}; log:\n{}",
            self.logs()
        );
        let old = self.log.clone();
        let (config, state, ports) = (
            self.config.clone(),
            self.state.clone(),
            (self.port, self.admin),
        );
        // The state directory stays for the next process.
        std::mem::forget(self);
        // The next process writes the same file name: keep this one's log.
        std::fs::rename(&old, old.with_extension("log.1")).ok();
        Gateway::launch_on(config, state, ports, &[], &[])
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
        std::fs::remove_dir_all(&self.state).ok();
    }
}

/// A one-tenant gateway config (tenant `demo-toyota` at [`ENDPOINT`]) whose
/// backend table is `backend` (the lines after `[tenants.backend]`).
/// Stands for the gateway's listening port in a config text (see
/// [`Gateway::launch_with_env`]).
pub const PORT_MARKER: &str = "@PORT@";

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

/// Wait until `child` accepts connections on `port`; panics with its log (`log`) if it exits
/// first, or if it is not listening within `within`. `what` names it in the panic.
pub fn wait_listening(child: &mut Child, port: u16, what: &str, log: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) during start:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// A test CA and a server certificate it signed for `localhost` and
/// `127.0.0.1`, made with openssl in `dir` (`ca.pem`, `server.pem`,
/// `server.key`); returns the CA file. Used by the TLS ingress, HTTP/2 and
/// Redis-over-TLS tests.
pub fn test_ca(dir: &Path) -> PathBuf {
    let sh = format!(
        "set -e; cd {d}; \
         openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=aap-test-ca 2>/dev/null; \
         openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null; \
         printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf; \
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf 2>/dev/null",
        d = dir.display()
    );
    let made = Command::new("sh").args(["-c", &sh]).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "openssl could not make the test CA"
    );
    dir.join("ca.pem")
}
