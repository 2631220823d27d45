//! Command-line clients of a running gateway (subcommands that talk to its admin listener);
//! `main` parses the command line and dispatches here.

pub mod admin;

use crate::config::Config;
use std::process::ExitCode;

/// Writes `bytes` to stdout. A reader that went away (`aap-gateway catalog |
/// head -1`) is not an error: the output was simply not wanted any more.
pub fn print_out(bytes: &[u8]) -> ExitCode {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aap-gateway: cannot write to stdout: {e}");
            ExitCode::from(1)
        }
    }
}

/// [`print_out`] of one line.
pub fn print_line(line: &str) -> ExitCode {
    print_out(format!("{line}\n").as_bytes())
}

/// The admin listener as a client reaches it: a wildcard address on the
/// loopback of the same family.
pub fn admin_target(cfg: &Config) -> String {
    match cfg.server.admin_listen.parse::<std::net::SocketAddr>() {
        Ok(mut a) if a.ip().is_unspecified() => {
            if a.is_ipv4() {
                a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            } else {
                a.set_ip(std::net::Ipv6Addr::LOCALHOST.into());
            }
            a.to_string()
        }
        _ => cfg.server.admin_listen.clone(),
    }
}
