//! The command line: `main` parses it (`args`) and hands it to [`dispatch`], which runs the
//! subcommand: `run` (the gateway), the offline commands (`check`, `catalog`, `publish`), the
//! documents about the binary (`print`), and the clients of a running gateway (`admin`, `leads`,
//! `health`). `logging` sets up the process's log lines for `run`.

pub mod admin;
pub mod args;
mod health;
mod leads;
mod logging;
mod offline;
mod print;
mod run;

pub use offline::write_published;

use crate::config::Config;
use args::{Cli, Command, LeadsCommand, StateCommand};
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

/// Why a command that talks to the admin listener has no token to send.
pub fn no_admin_token(cfg: &Config) -> String {
    match &cfg.server.admin_token_env {
        Some(var) => format!(
            "server.admin_token_env names {var}, which is unset or empty here: export {var} with the token the gateway runs with"
        ),
        None => "no admin token configured (set server.admin_token_file, server.admin_token_env or server.admin_token)".into(),
    }
}

/// Run the command line's subcommand (`run` without one). `return_freed_memory` is the binary's
/// allocator hook, started by `run` (see `run::run`).
pub fn dispatch(cli: Cli, return_freed_memory: fn(&crate::memory::Release)) -> ExitCode {
    // Commands that need no configuration.
    match &cli.command {
        Some(Command::Completions { shell }) => return print::completions(*shell),
        Some(Command::Man) => return print::man(),
        Some(Command::Schema { of }) => return print::schema(*of),
        _ => {}
    }
    let cfg = match args::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aap-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let path = cli.config.as_path();
    match &cli.command {
        Some(Command::Check) => offline::check(cfg, path),
        Some(Command::Catalog { tenant }) => offline::catalog(cfg, path, tenant.as_deref()),
        Some(Command::Publish { tenant, out }) => {
            offline::publish(cfg, path, tenant.as_deref(), out)
        }
        Some(Command::Passthrough { upstream }) => {
            run::passthrough(&cfg.server.listen, upstream, &cfg.server)
        }
        Some(Command::Leads { action }) => match action {
            LeadsCommand::List { select } => leads::leads_read(&cfg, select, false),
            LeadsCommand::Export { select } => leads::leads_read(&cfg, select, true),
            LeadsCommand::Show { lead_id } => leads::leads_show(&cfg, lead_id),
            _ => leads::leads_command(&cfg, action),
        },
        Some(Command::State {
            action: StateCommand::Import,
        }) => leads::state_import(&cfg),
        Some(Command::Health { timeout_ms }) => health::health(&cfg, *timeout_ms),
        Some(Command::Admin(args)) => admin::run(&cfg, args),
        Some(Command::Completions { .. } | Command::Man | Command::Schema { .. }) => {
            ExitCode::SUCCESS
        }
        None | Some(Command::Run) => run::run(cfg, &cli, return_freed_memory),
    }
}
