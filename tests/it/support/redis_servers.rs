//! Real Redis deployments for the shared-state tests: one server, a TLS-only server with a test
//! CA, and a three-master three-replica Cluster on loopback ports; every process killed on drop.

use super::process::{free_port, temp_dir, test_ca};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `redis-server` processes of one deployment, killed (and reaped) on drop,
/// also when the test panics.
struct Servers {
    children: Vec<(u16, Child)>,
    dir: PathBuf,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            c.kill().ok();
            c.wait().ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn spawn(args: &[String], log: PathBuf) -> Child {
    Command::new("redis-server")
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(log).unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server must be installed (scripts/setup.sh installs it)")
}

fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("redis-server on {port} did not start");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisKind {
    /// One plain `redis-server`.
    Single,
    /// A TLS-only `redis-server` (`--port 0 --tls-port`), certificate from the test CA.
    Tls,
    /// Three masters, three replicas, `cluster-node-timeout` 1000 ms.
    Cluster,
}

/// A running Redis deployment of one kind.
pub struct RedisDeployment {
    pub kind: RedisKind,
    /// Client ports (the masters first for a Cluster).
    pub ports: Vec<u16>,
    servers: Servers,
}

fn base_args(dir: &std::path::Path) -> Vec<String> {
    [
        "--save",
        "",
        "--appendonly",
        "no",
        "--bind",
        "127.0.0.1",
        "--dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.display().to_string()])
    .collect()
}

impl RedisDeployment {
    pub fn start(kind: RedisKind) -> RedisDeployment {
        let dir = temp_dir("redis");
        let mut servers = Servers {
            children: Vec::new(),
            dir: dir.clone(),
        };
        let mut ports = Vec::new();
        match kind {
            RedisKind::Single => {
                let port = free_port();
                let mut args = base_args(&dir);
                args.extend(["--port".into(), port.to_string()]);
                servers
                    .children
                    .push((port, spawn(&args, dir.join("redis.log"))));
                wait_port(port);
                ports.push(port);
            }
            RedisKind::Tls => {
                test_ca(&dir);
                let port = free_port();
                let mut args = base_args(&dir);
                args.extend(
                    [
                        "--port",
                        "0",
                        "--tls-port",
                        &port.to_string(),
                        "--tls-cert-file",
                        "server.pem",
                        "--tls-key-file",
                        "server.key",
                        "--tls-ca-cert-file",
                        "ca.pem",
                        "--tls-auth-clients",
                        "no",
                    ]
                    .map(String::from),
                );
                servers
                    .children
                    .push((port, spawn(&args, dir.join("redis.log"))));
                wait_port(port);
                ports.push(port);
            }
            RedisKind::Cluster => {
                for i in 0..6 {
                    let port = free_port();
                    let bus = free_port();
                    let mut args = base_args(&dir);
                    args.extend(
                        [
                            "--port",
                            &port.to_string(),
                            "--cluster-enabled",
                            "yes",
                            "--cluster-port",
                            &bus.to_string(),
                            "--cluster-config-file",
                            &format!("nodes-{i}.conf"),
                            "--cluster-node-timeout",
                            "1000",
                            "--cluster-replica-validity-factor",
                            "0",
                        ]
                        .map(String::from),
                    );
                    servers
                        .children
                        .push((port, spawn(&args, dir.join(format!("redis-{i}.log")))));
                    ports.push(port);
                }
                for p in &ports {
                    wait_port(*p);
                }
                let mut create = Command::new("redis-cli");
                create.arg("--cluster").arg("create");
                for p in &ports {
                    create.arg(format!("127.0.0.1:{p}"));
                }
                let out = create
                    .args(["--cluster-replicas", "1", "--cluster-yes"])
                    .output()
                    .expect("redis-cli");
                assert!(
                    out.status.success(),
                    "cluster create: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
        }
        let d = RedisDeployment {
            kind,
            ports,
            servers,
        };
        if kind == RedisKind::Cluster {
            d.wait_cluster_ok(&d.ports.clone(), Duration::from_secs(30));
            // Every master has its replica attached and in sync.
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let synced = d
                    .masters()
                    .iter()
                    .filter(|p| {
                        d.cli_at(**p, &["INFO", "replication"])
                            .contains("state=online")
                    })
                    .count();
                if synced == 3 {
                    break;
                }
                assert!(Instant::now() < deadline, "replicas did not sync");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        d
    }

    /// Wait until every listed node reports `cluster_state:ok`.
    pub fn wait_cluster_ok(&self, ports: &[u16], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if ports.iter().all(|p| {
                self.cli_at(*p, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            }) {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not ok in {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `[state]` lines for a gateway's counters on this deployment (its
    /// leads need a shared lead store too: `PgServer::state_toml`).
    pub fn state_toml(&self, prefix: &str) -> String {
        let url = match self.kind {
            RedisKind::Single => format!("redis://127.0.0.1:{}/", self.ports[0]),
            RedisKind::Tls => format!("rediss://127.0.0.1:{}/", self.ports[0]),
            RedisKind::Cluster => format!(
                "redis+cluster://{}/",
                self.ports[..3]
                    .iter()
                    .map(|p| format!("127.0.0.1:{p}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        let mut s =
            format!("backend = \"redis\"\nredis_url = \"{url}\"\nredis_prefix = \"{prefix}\"\n");
        if self.kind == RedisKind::Tls {
            s.push_str(&format!(
                "redis_ca_file = {:?}\n",
                self.servers.dir.join("ca.pem")
            ));
        }
        s
    }

    /// `redis-cli` against node `port` (TLS with the test CA when needed).
    pub fn cli_at(&self, port: u16, args: &[&str]) -> String {
        let mut c = Command::new("redis-cli");
        c.args(["-p", &port.to_string(), "--raw"]);
        if self.kind == RedisKind::Tls {
            c.arg("--tls")
                .arg("--cacert")
                .arg(self.servers.dir.join("ca.pem"));
        }
        if self.kind == RedisKind::Cluster {
            c.arg("-c");
        }
        let out = c.args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `redis-cli` against the first node still running.
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self
            .servers
            .children
            .iter()
            .map(|(p, _)| *p)
            .find(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
            .expect("a live redis node");
        self.cli_at(port, args)
    }

    /// The ports of the Cluster's current masters.
    pub fn masters(&self) -> Vec<u16> {
        self.cli(&["CLUSTER", "NODES"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|l| {
                let addr = l.split_whitespace().nth(1)?;
                addr.split(['@', ':']).nth(1)?.parse().ok()
            })
            .collect()
    }

    /// The port of the master serving `key`'s hash slot.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot: u16 = self
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap();
        for l in self.cli(&["CLUSTER", "NODES"]).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if !f.get(2).is_some_and(|r| r.contains("master")) || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                    if (a..=b).contains(&slot) {
                        return f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
                    }
                }
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// SIGKILL the server on `port` (a Cluster failover test kills a master).
    pub fn kill9(&mut self, port: u16) {
        for (p, c) in &mut self.servers.children {
            if *p == port {
                c.kill().ok();
                c.wait().ok();
            }
        }
    }

    /// Ports of the servers still running.
    pub fn alive(&self) -> Vec<u16> {
        self.servers
            .children
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
            .collect()
    }
}
