//! A real PostgreSQL server for a test: Debian's postgresql 15 binaries, a cluster made by
//! `initdb` in a temporary directory owned by the `postgres` user, on a loopback port.

use super::{free_port, temp_dir};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct PgServer {
    pub port: u16,
    dir: PathBuf,
}

fn as_postgres(args: &[&str]) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .args(args)
        .output()
        .expect("runuser runs the PostgreSQL binaries (scripts/setup.sh installs postgresql)")
}

impl PgServer {
    pub fn start() -> PgServer {
        let dir = temp_dir("pg");
        let st = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        let data = dir.join("data");
        let out = as_postgres(&[
            &format!("{BIN}/initdb"),
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ]);
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pg = PgServer {
            port: free_port(),
            dir,
        };
        pg.pg_ctl("start");
        pg
    }

    fn pg_ctl(&self, action: &str) {
        let data = self.dir.join("data");
        let log = self.dir.join("pg.log");
        let opts = format!(
            "-k {} -p {} -c listen_addresses=127.0.0.1",
            self.dir.display(),
            self.port
        );
        let mut args = vec![
            format!("{BIN}/pg_ctl"),
            "-D".into(),
            data.display().to_string(),
            "-w".into(),
            "-l".into(),
            log.display().to_string(),
        ];
        if action == "stop" {
            args.extend(["-m".into(), "immediate".into()]);
        } else {
            args.extend(["-o".into(), opts]);
        }
        args.push(action.into());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = as_postgres(&refs);
        assert!(
            out.status.success(),
            "pg_ctl {action}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        if action == "start" {
            let deadline = Instant::now() + Duration::from_secs(20);
            while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                assert!(Instant::now() < deadline, "postgres did not start");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Stop (immediately, as a crash would) and start again.
    pub fn restart(&self) {
        self.pg_ctl("stop");
        self.pg_ctl("start");
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The `[state]` lines that put the lead store on this server.
    pub fn state_toml(&self) -> String {
        format!(
            "lead_store = \"postgres\"\npostgres_url = \"{}\"\n",
            self.url()
        )
    }

    /// The leads of record of `tenant`, oldest first.
    pub fn leads(&self, tenant: &str) -> Vec<serde_json::Value> {
        self.query(&format!(
            "SELECT record FROM leads WHERE tenant = '{tenant}' ORDER BY received_at, lead_id"
        ))
        .iter()
        .map(|l| serde_json::from_str(l).expect("a stored lead is JSON"))
        .collect()
    }

    /// Rows of a query (psql, tab-separated, no header).
    pub fn query(&self, sql: &str) -> Vec<String> {
        let out = Command::new(format!("{BIN}/psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", "postgres", "-At", "-F", "\t", "-c", sql])
            .output()
            .or_else(|_| {
                Command::new("psql")
                    .args([
                        "-h",
                        "127.0.0.1",
                        "-p",
                        &self.port.to_string(),
                        "-U",
                        "postgres",
                    ])
                    .args(["-d", "postgres", "-At", "-F", "\t", "-c", sql])
                    .output()
            })
            .unwrap();
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = as_postgres(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap_or_default(),
            "-m",
            "immediate",
            "stop",
        ]);
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
