//! `aap-gateway health`: GET /readyz on the running gateway's admin listener, exit 0 when ready
//! (the container HEALTHCHECK, with no curl in the image).

use super::{admin_target, print_line};
use crate::config::Config;
use std::process::ExitCode;

/// `health`: GET /readyz on the admin listener; 0 when it answers 200.
pub fn health(cfg: &Config, timeout_ms: u64) -> ExitCode {
    use std::io::{Read as _, Write as _};
    let target = admin_target(cfg);
    let timeout = std::time::Duration::from_millis(timeout_ms.max(1));
    let probe = || -> Result<String, String> {
        let addr: std::net::SocketAddr = target
            .parse()
            .map_err(|_| format!("server.admin_listen {target:?} is not an address"))?;
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("cannot reach the admin listener at {target}: {e}"))?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        s.write_all(
            format!("GET /readyz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let _ = s.take(64 * 1024).read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        let status = text.split(' ').nth(1).unwrap_or("");
        if status == "200" {
            Ok(format!("ready ({target})"))
        } else if status.is_empty() {
            Err(format!("no answer from the admin listener at {target}"))
        } else {
            Err(format!("not ready: /readyz answered {status} at {target}"))
        }
    };
    match probe() {
        Ok(line) => print_line(&line),
        Err(e) => {
            eprintln!("aap-gateway: health: {e}");
            ExitCode::from(1)
        }
    }
}
