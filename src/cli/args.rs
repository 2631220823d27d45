//! The command line: its global options and subcommands (clap derive), `--version`, and loading
//! the configuration with the command line's overrides applied.

use crate::config::Config;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// `--version`: the package version, the commit and the build date (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("AAP_BUILD_COMMIT"),
    ", built ",
    env!("AAP_BUILD_DATE"),
    ")"
);

/// AAP 3.0 MCP compatibility gateway.
#[derive(Parser, Debug)]
#[command(name = "aap-gateway", version = VERSION, about)]
pub struct Cli {
    /// Configuration file.
    #[arg(long, short = 'c', default_value = "gateway.toml", global = true)]
    pub config: PathBuf,
    /// Override server.listen (e.g. 127.0.0.1:0 is not allowed; pick a port).
    #[arg(long, global = true)]
    pub listen: Option<String>,
    /// Override server.admin_listen.
    #[arg(long, global = true)]
    pub admin_listen: Option<String>,
    /// Override state.dir (idempotency records and embedded leads).
    #[arg(long, global = true)]
    pub state_dir: Option<PathBuf>,
    /// Graceful upgrade: take over the listening sockets of a running
    /// instance (start this, then send SIGQUIT to the old process). Also
    /// accepted after `run` (`aap-gateway run --upgrade`).
    #[arg(long, global = true)]
    pub upgrade: bool,
    /// With `server.tls`: how often (milliseconds) to check the certificate
    /// and key files for a replacement; 0 turns the check off (SIGHUP and
    /// `POST /reload` still re-read them).
    #[arg(long, default_value_t = 2000, global = true)]
    pub tls_watch_ms: u64,
    /// With `tenants_dir`: how often (milliseconds) to look for added,
    /// changed and removed tenant files; 0 turns the watch off (SIGHUP and
    /// `POST /reload` still re-read the directory).
    #[arg(long, default_value_t = 1000, global = true)]
    pub tenants_watch_ms: u64,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the gateway (the default).
    Run,
    /// Validate the configuration (and everything it loads) and exit.
    Check,
    /// Benchmark baseline: forward every HTTP/1.1 request from --listen to
    /// UPSTREAM (host:port) through the gateway's own connection loop and
    /// pooled client, with no MCP processing.
    #[command(hide = true)]
    Passthrough {
        #[arg(long)]
        upstream: String,
    },
    /// Print each tenant's generated MCP tool catalog as JSON.
    Catalog {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Write the discovery documents (Agent Card, llms.txt, Poppy link) of
    /// each tenant with a `public_url`: the bytes the gateway serves.
    Publish {
        /// Only this tenant, written straight into --out; without it, each
        /// published tenant gets OUT/<tenant id>/.
        #[arg(long)]
        tenant: Option<String>,
        /// Directory to write `.well-known/agent-card.json`, `llms.txt` and
        /// `poppy.json` into (created if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Leads: `list`, `show` and `export` read the lead store; `dead-letters`
    /// and `redrive` go through the running gateway's admin listener
    /// (server.admin_listen or --admin-listen) with the configured admin token.
    Leads {
        #[command(subcommand)]
        action: LeadsCommand,
    },
    /// Exit 0 when the running gateway answers `ready` on its admin
    /// listener's /readyz (server.admin_listen or --admin-listen), 1
    /// otherwise: the container HEALTHCHECK, with no curl in the image.
    Health {
        /// Give up after this many milliseconds.
        #[arg(long, default_value_t = 3000)]
        timeout_ms: u64,
    },
    /// Ask the running gateway through its admin listener (server.admin_listen
    /// or --admin-listen, with the configured admin token): reload, status,
    /// tenants, feeds, leads, config, log-level. Tables, or JSON with --json.
    Admin(crate::cli::admin::AdminArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of aap-gateway.
    Man,
    /// Print the JSON Schema of gateway.toml (`config`) or of a tenants_dir file (`tenant`),
    /// generated from the config types: what docs/gateway.schema.json and
    /// docs/tenant.schema.json ship, for editors that validate TOML.
    Schema {
        #[arg(value_enum, default_value = "config")]
        of: SchemaOf,
    },
    /// The lead store: `import` brings the file store of state.dir in (the
    /// gateway stopped; `run` also imports it at start).
    State {
        #[command(subcommand)]
        action: StateCommand,
    },
}

/// Which file `schema` describes.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum SchemaOf {
    /// gateway.toml.
    Config,
    /// One tenant file of tenants_dir.
    Tenant,
}

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Import idempotency.jsonl and every embedded tenant's leads.jsonl and
    /// leads.outbox.jsonl into the lead store (then renamed *.imported).
    Import,
}

/// The selection of `leads list` / `leads export`.
#[derive(clap::Args, Debug)]
pub struct LeadSelection {
    #[arg(long)]
    pub tenant: Option<String>,
    /// pending, delivered, dead or recorded (no sinks).
    #[arg(long)]
    pub status: Option<String>,
    /// Accepted at or after this RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Accepted before this RFC 3339 time.
    #[arg(long)]
    pub until: Option<String>,
    /// At most this many (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
    #[arg(long, value_enum, default_value = "json")]
    pub format: crate::store::cli::Format,
}

#[derive(Subcommand, Debug)]
pub enum LeadsCommand {
    /// One line per lead: id, tenant, time, status, deliveries (no customer values).
    List {
        #[command(flatten)]
        select: LeadSelection,
    },
    /// One lead: its record of acceptance and its deliveries.
    Show {
        #[arg(long)]
        lead_id: String,
    },
    /// The leads with their records (JSON lines, or CSV with the customer's contact fields).
    Export {
        #[command(flatten)]
        select: LeadSelection,
    },
    /// List dead letters: lead id, tenant, sink, attempts, last error class, times.
    DeadLetters {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Deliver dead letters again: one lead (--lead-id) or all of a tenant (--all).
    Redrive {
        #[arg(long)]
        tenant: String,
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        lead_id: Option<String>,
        #[arg(long)]
        all: bool,
    },
}

/// The configuration file, with the command line's overrides applied.
pub fn load(cli: &Cli) -> Result<Config, String> {
    let mut cfg = Config::load(&cli.config).map_err(|e| e.to_string())?;
    let file = cli.config.display().to_string();
    let bad_addr = |flag: &str, v: &str| {
        format!("config error in {file}: {flag}: {v:?} is not an address like 127.0.0.1:8080")
    };
    // Port 0 would bind a port nobody is told about (and /readyz would
    // never see the listener it probes): refused, like in the config file.
    let port_zero = |flag: &str, v: &str| {
        format!("config error in {file}: {flag}: {v:?} has port 0; pick a port")
    };
    let listen_addr = |flag: &str, v: &String| match v.parse::<std::net::SocketAddr>() {
        Err(_) => Err(bad_addr(flag, v)),
        Ok(addr) if addr.port() == 0 => Err(port_zero(flag, v)),
        Ok(_) => Ok(v.clone()),
    };
    if let Some(l) = &cli.listen {
        cfg.server.listen = listen_addr("--listen", l)?;
    }
    if let Some(a) = &cli.admin_listen {
        cfg.server.admin_listen = listen_addr("--admin-listen", a)?;
    }
    if let Some(d) = &cli.state_dir {
        cfg.state.dir = std::env::current_dir()
            .map(|c| c.join(d))
            .unwrap_or_else(|_| d.clone());
    }
    Ok(cfg)
}
