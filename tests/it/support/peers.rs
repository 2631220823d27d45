//! Upstream peers from tests/upstreams (strict MCP, legacy MCP, A2A): the
//! one-time venv/node setup, spawning on a port, restart, the lead file.

use super::process::{free_port, repo, temp_dir};
use serde_json::Value;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

static UPSTREAMS_SETUP: std::sync::Once = std::sync::Once::new();

pub fn venv_python() -> PathBuf {
    std::env::var_os("AAP_UPSTREAMS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target").join("upstreams-venv"))
        .join("bin")
        .join("python")
}

/// Run `tests/upstreams/setup.sh` once per test process when the venv or the
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
