use aap_gateway::admin::{Admin, IngressProbe};
use aap_gateway::cli::{admin_target, print_line, print_out};
use aap_gateway::config::Config;
use aap_gateway::gateway::{ConfigGeneration, Gateway};
use aap_gateway::ingress::Ingress;
use aap_gateway::tls::CertStore;
use clap::{Parser, Subcommand};
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

// Every request allocates many small JSON nodes; glibc malloc spent about a
// quarter of the full gateway's CPU under load (perf, benches/load.sh).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc returns freed memory to the system ("purges") only when the
// allocator runs again after `purge_delay` (1 s); after a burst of
// connections on an otherwise idle gateway nothing runs, and the memory
// stayed (10,000 closed connections: 1 GB kept for minutes). A thread that
// lets mimalloc collect once a second returns it. Declared here because the
// `mimalloc` crate exposes `mi_collect` only behind a feature that pulls in
// another crate; the symbol is always in the linked library.
extern "C" {
    fn mi_collect(force: bool);
}

fn return_freed_memory() {
    // A full reload frees a config-sized burst on a thread that then sleeps.
    aap_gateway::memory::install(|| {
        // SAFETY: as below.
        unsafe { mi_collect(true) }
    });
    let spawned = std::thread::Builder::new()
        .name("mi-collect".into())
        .spawn(|| loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
            // SAFETY: `mi_collect` takes no pointers and may be called from
            // any thread at any time.
            unsafe { mi_collect(false) };
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "freed memory is returned to the system only under load");
    }
}

/// `--version`: the package version, the commit and the build date (build.rs).
const VERSION: &str = concat!(
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
struct Cli {
    /// Configuration file.
    #[arg(long, short = 'c', default_value = "gateway.toml", global = true)]
    config: PathBuf,
    /// Override server.listen (e.g. 127.0.0.1:0 is not allowed; pick a port).
    #[arg(long, global = true)]
    listen: Option<String>,
    /// Override server.admin_listen.
    #[arg(long, global = true)]
    admin_listen: Option<String>,
    /// Override state.dir (idempotency records and embedded leads).
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// Graceful upgrade: take over the listening sockets of a running
    /// instance (start this, then send SIGQUIT to the old process). Also
    /// accepted after `run` (`aap-gateway run --upgrade`).
    #[arg(long, global = true)]
    upgrade: bool,
    /// With `server.tls`: how often (milliseconds) to check the certificate
    /// and key files for a replacement; 0 turns the check off (SIGHUP and
    /// `POST /reload` still re-read them).
    #[arg(long, default_value_t = 2000, global = true)]
    tls_watch_ms: u64,
    /// With `tenants_dir`: how often (milliseconds) to look for added,
    /// changed and removed tenant files; 0 turns the watch off (SIGHUP and
    /// `POST /reload` still re-read the directory).
    #[arg(long, default_value_t = 1000, global = true)]
    tenants_watch_ms: u64,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway (the default).
    Run,
    /// Validate the configuration (and everything it loads) and exit.
    Check,
    /// Benchmark baseline: a bare Pingora reverse proxy from --listen to
    /// UPSTREAM (host:port), with no MCP processing.
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
    Admin(aap_gateway::cli::admin::AdminArgs),
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
enum SchemaOf {
    /// gateway.toml.
    Config,
    /// One tenant file of tenants_dir.
    Tenant,
}

#[derive(Subcommand, Debug)]
enum StateCommand {
    /// Import idempotency.jsonl and every embedded tenant's leads.jsonl and
    /// leads.outbox.jsonl into the lead store (then renamed *.imported).
    Import,
}

/// The selection of `leads list` / `leads export`.
#[derive(clap::Args, Debug)]
struct LeadSelection {
    #[arg(long)]
    tenant: Option<String>,
    /// pending, delivered, dead or recorded (no sinks).
    #[arg(long)]
    status: Option<String>,
    /// Accepted at or after this RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Accepted before this RFC 3339 time.
    #[arg(long)]
    until: Option<String>,
    /// At most this many (0: no limit).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    #[arg(long, value_enum, default_value = "json")]
    format: aap_gateway::store::cli::Format,
}

#[derive(Subcommand, Debug)]
enum LeadsCommand {
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

fn load(cli: &Cli) -> Result<Config, String> {
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
    if let Some(l) = &cli.listen {
        let addr = l
            .parse::<std::net::SocketAddr>()
            .map_err(|_| bad_addr("--listen", l))?;
        if addr.port() == 0 {
            return Err(port_zero("--listen", l));
        }
        cfg.server.listen = l.clone();
    }
    if let Some(a) = &cli.admin_listen {
        let addr = a
            .parse::<std::net::SocketAddr>()
            .map_err(|_| bad_addr("--admin-listen", a))?;
        if addr.port() == 0 {
            return Err(port_zero("--admin-listen", a));
        }
        cfg.server.admin_listen = a.clone();
    }
    if let Some(d) = &cli.state_dir {
        cfg.state.dir = std::env::current_dir()
            .map(|c| c.join(d))
            .unwrap_or_else(|_| d.clone());
    }
    Ok(cfg)
}

/// Log lines held for stderr; more are dropped (and counted in
/// `aap_log_lines_dropped_total`) rather than making a worker wait.
/// `AAP_LOG_QUEUE_LINES` overrides it (1 to 1,000,000).
const LOG_QUEUE_LINES: usize = 65_536;

fn log_queue_lines() -> usize {
    std::env::var("AAP_LOG_QUEUE_LINES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=1_000_000).contains(n))
        .unwrap_or(LOG_QUEUE_LINES)
}

/// Every log line, access lines included, goes through one bounded queue to
/// a writer thread (tracing-appender's lossy non-blocking writer, which counts
/// what it drops), so a slow or blocked stderr never holds a worker. The
/// guard flushes the queue when dropped.
fn init_logging() -> tracing_appender::non_blocking::WorkerGuard {
    use std::io::Write as _;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(log_queue_lines())
        .thread_name("aap-log")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    aap_gateway::metrics::count_log_drops_from(move || dropped.dropped_lines() as u64);
    let access = writer.clone();
    // One call per whole line: the writer queues it as one message.
    aap_gateway::access::write_lines_to(move |line| {
        let _ = access.clone().write_all(line);
    });
    let filter = tracing_subscriber::EnvFilter::try_from_env("AAP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let initial = filter.to_string();
    // The filter sits behind a reload handle: `PUT /admin/log-level` swaps it.
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_writer(writer)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    aap_gateway::admin::log_level::install(initial, move |spec| {
        let f = tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    });
    builder.init();
    guard
}

fn main() -> ExitCode {
    // One TLS crypto provider (ring) for the whole process: Pingora's listeners and every
    // reqwest client (feeds, lead sinks, the OTLP exporter) use the process default.
    pingora::tls::install_default_crypto_provider();
    let cli = Cli::parse();
    // Commands that need no configuration.
    match &cli.command {
        Some(Command::Completions { shell }) => {
            let mut out = Vec::new();
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "aap-gateway",
                &mut out,
            );
            return print_out(&out);
        }
        Some(Command::Man) => {
            let mut out = Vec::new();
            let man = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command());
            if let Err(e) = man.render(&mut out) {
                eprintln!("aap-gateway: man: {e}");
                return ExitCode::from(1);
            }
            return print_out(&out);
        }
        Some(Command::Schema { of }) => {
            let schema = match of {
                SchemaOf::Config => aap_gateway::config::json_schema(),
                SchemaOf::Tenant => aap_gateway::config::tenant_json_schema(),
            };
            let mut out = serde_json::to_vec_pretty(&schema).unwrap_or_default();
            out.push(b'\n');
            return print_out(&out);
        }
        _ => {}
    }
    let cfg = match load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aap-gateway: {e}");
            return ExitCode::from(2);
        }
    };
    match &cli.command {
        Some(Command::Check) => match ConfigGeneration::build(cfg, 0) {
            Ok(rt) => {
                let refused = rt.refused_files();
                if let Some(dir) = rt.config.tenants_dir_path() {
                    let _ = print_line(&format!(
                        "tenants_dir {}: {} tenant file(s), {} refused",
                        dir.display(),
                        rt.files.len(),
                        refused.len()
                    ));
                }
                for (file, error) in &refused {
                    eprintln!("aap-gateway: tenant file {file} refused: {error}");
                }
                if !refused.is_empty() {
                    return ExitCode::from(2);
                }
                let mut lines = vec![format!(
                    "{}: ok ({} tenant(s))",
                    cli.config.display(),
                    rt.routes.units.len()
                )];
                lines.extend(publish_notes(&rt));
                print_out(format!("{}\n", lines.join("\n")).as_bytes())
            }
            Err(e) => {
                eprintln!("aap-gateway: config error in {}: {e}", cli.config.display());
                ExitCode::from(2)
            }
        },
        Some(Command::Catalog { tenant }) => match ConfigGeneration::build(cfg, 0) {
            Ok(rt) => {
                let mut out = serde_json::Map::new();
                let mut eps: Vec<_> = rt.routes.endpoints.values().collect();
                eps.sort_by(|a, b| a.tenant.cmp(&b.tenant));
                for ep in eps {
                    if tenant.as_ref().is_some_and(|t| t != &ep.tenant) {
                        continue;
                    }
                    out.insert(
                        ep.tenant.clone(),
                        serde_json::json!({ "path": ep.path, "tools": ep.tools.tools }),
                    );
                }
                if out.is_empty() {
                    eprintln!(
                        "aap-gateway: no tenant {:?} in {}",
                        tenant.as_deref().unwrap_or(""),
                        cli.config.display()
                    );
                    return ExitCode::from(2);
                }
                print_line(
                    &serde_json::to_string_pretty(&serde_json::Value::Object(out))
                        .unwrap_or_default(),
                )
            }
            Err(e) => {
                eprintln!("aap-gateway: config error in {}: {e}", cli.config.display());
                ExitCode::from(2)
            }
        },
        Some(Command::Publish { tenant, out }) => match ConfigGeneration::build(cfg, 0) {
            Ok(rt) => match write_published(&rt, tenant.as_deref(), out) {
                Ok(written) => {
                    let lines: String = written
                        .iter()
                        .map(|p| format!("{}\n", p.display()))
                        .collect();
                    print_out(lines.as_bytes())
                }
                Err(e) => {
                    eprintln!("aap-gateway: publish: {e}");
                    ExitCode::from(2)
                }
            },
            Err(e) => {
                eprintln!("aap-gateway: config error in {}: {e}", cli.config.display());
                ExitCode::from(2)
            }
        },
        Some(Command::Passthrough { upstream }) => {
            passthrough(&cfg.server.listen, upstream, &cfg.server)
        }
        Some(Command::Leads { action }) => match action {
            LeadsCommand::List { select } => leads_read(&cfg, select, false),
            LeadsCommand::Export { select } => leads_read(&cfg, select, true),
            LeadsCommand::Show { lead_id } => leads_show(&cfg, lead_id),
            _ => leads_command(&cfg, action),
        },
        Some(Command::State {
            action: StateCommand::Import,
        }) => match aap_gateway::store::cli::import(&cfg) {
            Ok(report) => print_line(&report.to_string()),
            Err(e) => {
                eprintln!("aap-gateway: state import: {e}");
                ExitCode::from(1)
            }
        },
        Some(Command::Health { timeout_ms }) => health(&cfg, *timeout_ms),
        Some(Command::Admin(args)) => aap_gateway::cli::admin::run(&cfg, args),
        Some(Command::Completions { .. } | Command::Man | Command::Schema { .. }) => {
            ExitCode::SUCCESS
        }
        None | Some(Command::Run) => run(cfg, &cli),
    }
}

/// Why a command that talks to the admin listener has no token to send.
fn no_admin_token(cfg: &Config) -> String {
    match &cfg.server.admin_token_env {
        Some(var) => format!(
            "server.admin_token_env names {var}, which is unset or empty here: export {var} with the token the gateway runs with"
        ),
        None => "no admin token configured (set server.admin_token_file, server.admin_token_env or server.admin_token)".into(),
    }
}

/// `health`: GET /readyz on the admin listener; 0 when it answers 200.
fn health(cfg: &Config, timeout_ms: u64) -> ExitCode {
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

/// `leads list` / `leads export`: read the lead store directly.
fn leads_read(cfg: &Config, s: &LeadSelection, full: bool) -> ExitCode {
    use aap_gateway::store::cli;
    let q = cli::Query {
        tenant: s.tenant.clone(),
        lead_id: None,
        status: s.status.clone(),
        since: s.since.clone(),
        until: s.until.clone(),
        limit: s.limit,
    };
    match cli::select(cfg, &q) {
        Ok(leads) => {
            let text = match s.format {
                cli::Format::Csv => cli::csv(&leads, full),
                cli::Format::Json => leads
                    .iter()
                    .map(|l| {
                        let v = if full { cli::full(l) } else { cli::summary(l) };
                        format!("{v}\n")
                    })
                    .collect(),
            };
            print_out(text.as_bytes())
        }
        Err(e) => {
            eprintln!("aap-gateway: leads: {e}");
            ExitCode::from(1)
        }
    }
}

/// `leads show --lead-id`: the lead and its deliveries; exit 1 when unknown.
fn leads_show(cfg: &Config, lead_id: &str) -> ExitCode {
    use aap_gateway::store::cli;
    let q = cli::Query {
        lead_id: Some(lead_id.to_owned()),
        ..Default::default()
    };
    match cli::select(cfg, &q) {
        Ok(leads) if !leads.is_empty() => {
            let text: String = leads
                .iter()
                .map(|l| format!("{}\n", cli::full(l)))
                .collect();
            print_out(text.as_bytes())
        }
        Ok(_) => {
            eprintln!("aap-gateway: leads show: no lead {lead_id} in the store");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("aap-gateway: leads: {e}");
            ExitCode::from(1)
        }
    }
}

/// `leads dead-letters` / `leads redrive`: one request to the admin
/// listener of the running gateway (the outbox's state lives in that
/// process); prints its JSON answer. Exit 0 on 2xx, 1 otherwise.
fn leads_command(cfg: &Config, action: &LeadsCommand) -> ExitCode {
    let (method, path, query) = match action {
        LeadsCommand::DeadLetters { tenant } => (
            reqwest::Method::GET,
            "/admin/leads/dead-letters",
            tenant
                .as_ref()
                .map(|t| format!("tenant={t}"))
                .unwrap_or_default(),
        ),
        LeadsCommand::Redrive {
            tenant,
            lead_id,
            all,
        } => (
            reqwest::Method::POST,
            "/admin/leads/redrive",
            match (lead_id, all) {
                (Some(id), _) => format!("tenant={tenant}&lead_id={id}"),
                (None, _) => format!("tenant={tenant}&all=true"),
            },
        ),
        // Read the store directly (see `leads_read`).
        LeadsCommand::List { .. } | LeadsCommand::Show { .. } | LeadsCommand::Export { .. } => {
            return ExitCode::from(2)
        }
    };
    let Some(token) = &cfg.server.admin_secret else {
        eprintln!("aap-gateway: leads: {}", no_admin_token(cfg));
        return ExitCode::from(2);
    };
    // A wildcard listen address is reached on loopback.
    let target = match cfg.server.admin_listen.parse::<std::net::SocketAddr>() {
        Ok(mut a) if a.ip().is_unspecified() => {
            a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            a.to_string()
        }
        _ => cfg.server.admin_listen.clone(),
    };
    let url = format!("http://{target}{path}?{query}");
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let client = aap_gateway::outbound::client(None, std::time::Duration::from_secs(5))
                    .map_err(|e| e.to_string())?;
                let resp = client
                    .request(method, &url)
                    .bearer_auth(token.expose())
                    .timeout(std::time::Duration::from_secs(30))
                    .send()
                    .await
                    .map_err(|e| {
                        if e.is_connect() {
                            format!("cannot reach the admin listener at {target} (is the gateway running?)")
                        } else {
                            format!("admin request to {target} failed")
                        }
                    })?;
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                Ok::<_, String>((status, body))
            })
        });
    match result {
        Ok((status, body)) => {
            let shown = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or(body);
            if status.is_success() {
                println!("{shown}");
                ExitCode::SUCCESS
            } else {
                eprintln!("aap-gateway: leads: {status}: {shown}");
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("aap-gateway: leads: {e}");
            ExitCode::from(1)
        }
    }
}

/// `check`'s word on publishing: where each tenant's documents are, or
/// why it publishes none (a note, not an error).
fn publish_notes(rt: &ConfigGeneration) -> Vec<String> {
    use aap_gateway::publish::{document_url, Kind};
    rt.tenants()
        .into_iter()
        .map(|t| match (&t.public_url, rt.routes.published.tenant(&t.id)) {
            (Some(url), Some(_)) => format!(
                "tenant {}: publishes {}, {} and {}",
                t.id,
                document_url(url, Kind::Card),
                document_url(url, Kind::Llms),
                document_url(url, Kind::Poppy)
            ),
            (Some(_), None) => format!(
                "note: tenant {} publishes no discovery documents: a relay tenant has no AAP contract to describe",
                t.id
            ),
            (None, _) => format!(
                "note: tenant {} publishes no discovery documents (set public_url to publish an Agent Card, llms.txt and a Poppy link)",
                t.id
            ),
        })
        .collect()
}

/// `publish`: the served bytes, written to files.
fn write_published(
    rt: &ConfigGeneration,
    tenant: Option<&str>,
    out: &std::path::Path,
) -> Result<Vec<PathBuf>, String> {
    use aap_gateway::publish::Kind;
    let mut targets = Vec::new();
    match tenant {
        Some(id) => {
            let docs = rt.routes.published.tenant(id).ok_or_else(|| {
                match rt.tenants().into_iter().find(|t| t.id == id) {
                    Some(_) => format!(
                        "tenant {id:?} publishes nothing (no public_url, or a relay tenant)"
                    ),
                    None => format!("no tenant {id:?} in the configuration"),
                }
            })?;
            targets.push((out.to_path_buf(), docs.clone()));
        }
        None => {
            for t in rt.tenants() {
                if let Some(docs) = rt.routes.published.tenant(&t.id) {
                    targets.push((out.join(&t.id), docs.clone()));
                }
            }
            if targets.is_empty() {
                return Err("no tenant has a public_url: nothing to publish".into());
            }
        }
    }
    let mut written = Vec::new();
    for (dir, docs) in targets {
        for kind in Kind::ALL {
            let path = match kind {
                Kind::Card => dir.join(".well-known").join(kind.file_name()),
                _ => dir.join(kind.file_name()),
            };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            std::fs::write(&path, &docs.get(kind).body)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

fn run(cfg: Config, cli: &Cli) -> ExitCode {
    let path = cli.config.as_path();
    let log_guard = init_logging();
    // Before any runtime starts: the exporter builds its blocking HTTP client.
    if let Err(e) = aap_gateway::telemetry::init(&cfg.telemetry) {
        eprintln!("aap-gateway: config error in {}: {e}", path.display());
        return ExitCode::from(2);
    }
    aap_gateway::metrics::prime(env!("CARGO_PKG_VERSION"), env!("AAP_BUILD_COMMIT"));
    // The standard process_* series (CPU, resident memory, open files, threads).
    let _ = aap_gateway::metrics::METRICS.registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ));
    let listen = cfg.server.listen.clone();
    let admin_listen = cfg.server.admin_listen.clone();
    // Fail fast, naming the listener, when an address cannot be bound (in
    // use, not local, no permission). Pingora would retry for about 30 s and
    // then panic. An upgrade takes the old process's sockets instead.
    if !cli.upgrade {
        for (key, addr) in [
            ("server.listen", &listen),
            ("server.admin_listen", &admin_listen),
        ] {
            if let Err(e) = std::net::TcpListener::bind(addr.as_str()) {
                eprintln!("aap-gateway: cannot listen on {addr} ({key}): {e}");
                return ExitCode::from(2);
            }
        }
    }
    let threads = cfg.server.threads;
    let drain = std::time::Duration::from_secs(cfg.server.shutdown_drain_secs);
    let grace = cfg.server.shutdown_grace_secs;
    if cfg.server.admin_secret.is_none() {
        tracing::warn!(
            admin_token_env = cfg.server.admin_token_env.as_deref().unwrap_or("-"),
            "no admin token: POST /reload and POST /idempotency/resolve answer 403 (set server.admin_token_file, server.admin_token_env or server.admin_token); SIGHUP still reloads"
        );
    }
    let tls = cfg.server.tls.as_ref().map(|t| {
        (
            cfg.resolve(&t.cert_file).display().to_string(),
            cfg.resolve(&t.key_file).display().to_string(),
        )
    });
    let state_dir = cfg.state_dir();
    // One process owns state.dir; `check` and `catalog` never take it (nor
    // write anything). An upgrade waits in the background for the old
    // process to let go; its lead calls wait for that too (bounded).
    let locked = if cli.upgrade {
        aap_gateway::state::lock::hold_when_free(&state_dir)
    } else {
        aap_gateway::state::lock::hold(&state_dir)
    };
    if let Err(e) = locked {
        eprintln!("aap-gateway: config error in {}: {e}", path.display());
        return ExitCode::from(2);
    }
    // Lead delivery runs on a runtime of its own (`leads::outbox`).
    if let Err(e) = aap_gateway::leads::outbox::start_delivery() {
        eprintln!("aap-gateway: {e}");
        return ExitCode::from(1);
    }
    let runtime = match ConfigGeneration::start(cfg, 1) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("aap-gateway: config error in {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let source = Cli {
        config: cli.config.clone(),
        listen: cli.listen.clone(),
        admin_listen: cli.admin_listen.clone(),
        state_dir: cli.state_dir.clone(),
        upgrade: false,
        tls_watch_ms: cli.tls_watch_ms,
        tenants_watch_ms: cli.tenants_watch_ms,
        command: None,
    };
    let gateway = Arc::new(Gateway::new(runtime).with_loader(Box::new(move || load(&source))));
    // The certificate is served from memory so it can be replaced without a
    // restart (see `aap_gateway::tls`).
    let certs = match &tls {
        Some((cert, key)) => match CertStore::open(cert.into(), key.into()) {
            Ok(store) => {
                store.watch(std::time::Duration::from_millis(cli.tls_watch_ms));
                Some(store)
            }
            Err(e) => {
                eprintln!(
                    "aap-gateway: config error in {}: server.tls: {e}",
                    path.display()
                );
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    if let Some(store) = &certs {
        gateway.serve_certificates(store.names());
    }
    gateway.watch_tenant_dir(std::time::Duration::from_millis(cli.tenants_watch_ms));
    reload_on_sighup(gateway.clone(), certs.clone());
    return_freed_memory();
    let conf = ServerConf {
        threads,
        pid_file: state_dir.join("aap-gateway.pid").display().to_string(),
        upgrade_sock: state_dir
            .join("aap-gateway-upgrade.sock")
            .display()
            .to_string(),
        // After SIGTERM and the drain delay (`aap_gateway::shutdown`) the
        // listeners close and requests in flight get the grace period; then
        // the runtimes stop, waiting a little more for blocking work (a lead
        // file append being fsync'd).
        grace_period_seconds: Some(grace),
        graceful_shutdown_timeout_seconds: Some(BLOCKING_WORK_SECS),
        ..Default::default()
    };
    let opt = pingora::server::configuration::Opt {
        upgrade: cli.upgrade,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();
    exit_if_a_listener_cannot_bind();
    // The ingress answers every request itself (forwarding happens in the
    // backends) and owns its connections (`aap_gateway::ingress`), so it is
    // a plain server app rather than a proxy service.
    let mut ingress = pingora::services::listening::Service::new(
        "aap-gateway ingress".to_owned(),
        Ingress::new(gateway.clone()),
    );
    match (&tls, &certs) {
        (Some((cert, key)), Some(store)) => {
            let mut settings = match TlsSettings::intermediate(cert, key) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!(
                        "aap-gateway: config error in {}: server.tls: {e}",
                        path.display()
                    );
                    return ExitCode::from(2);
                }
            };
            settings.set_cert_resolver(store.clone());
            aap_gateway::tls::offer_http2(&mut settings);
            ingress.add_listener(ingress_listener(&listen).tls(settings));
        }
        _ => ingress.add_listener(ingress_listener(&listen)),
    }
    let mut admin = http_proxy_service(
        &server.configuration,
        Admin {
            gateway: gateway.clone(),
            tls: certs,
            ingress: IngressProbe::new(&listen),
        },
    );
    admin.add_tcp(&admin_listen);
    server.add_service(ingress);
    server.add_service(admin);
    tracing::info!(listen = %listen, admin_listen = %admin_listen, "aap-gateway started");
    server.run(pingora::server::RunArgs {
        shutdown_signal: Box::new(aap_gateway::shutdown::DrainingSignals { drain }),
    });
    // Queued spans and log lines go out first (bounded), then, as
    // `run_forever` does, exit without running destructors.
    aap_gateway::telemetry::flush(std::time::Duration::from_secs(BLOCKING_WORK_SECS));
    drop(log_guard);
    std::process::exit(0)
}

/// Seconds the runtimes get, after the grace period, for blocking work still
/// running; a graceful stop takes at most drain + grace + this.
const BLOCKING_WORK_SECS: u64 = 2;

/// Pingora binds each service's listeners on that service's own thread and
/// panics there if the bind fails ("Failed to build listeners"), leaving the
/// rest of the process running with a dead port. A gateway that cannot open
/// its port should say so and stop, so a supervisor sees the failure.
fn exit_if_a_listener_cannot_bind() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("Failed to build listeners") {
            eprintln!(
                "aap-gateway: cannot open a listener (server.listen / server.admin_listen): {msg}"
            );
            std::process::exit(1);
        }
        default_hook(info);
    }));
}

/// SIGHUP re-reads the configuration and the TLS files (like `POST /reload`
/// on the admin port).
fn reload_on_sighup(gateway: Arc<Gateway>, certs: Option<Arc<CertStore>>) {
    aap_gateway::background::spawn_loop(
        "sighup",
        "SIGHUP reload unavailable",
        move || async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                tracing::error!("cannot listen for SIGHUP; use POST /reload on the admin listener");
                return;
            };
            while hup.recv().await.is_some() {
                let _ = gateway.reload_from_source().await;
                if let Some(c) = &certs {
                    let _ = c.reload("sighup");
                }
            }
        },
    );
}

/// The ingress listener on `addr`: no Pingora buffers, the ingress reads and
/// writes through its own, allocated on a connection's first byte.
fn ingress_listener(addr: &str) -> ListenerConfig {
    ListenerConfig::tcp(addr).l4_buffer(L4BufferSettings::unbuffered())
}

/// The pass-through listener on `addr` with the configured write buffer.
fn client_listener(addr: &str, server: &aap_gateway::config::ServerConfig) -> ListenerConfig {
    ListenerConfig::tcp(addr)
        .l4_buffer(L4BufferSettings::default().write(server.write_buffer_bytes))
}

/// The load script's baseline: same build, same listener settings, no MCP work.
fn passthrough(listen: &str, upstream: &str, cfg: &aap_gateway::config::ServerConfig) -> ExitCode {
    let conf = ServerConf {
        threads: cfg.threads,
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc = http_proxy_service(
        &server.configuration,
        aap_gateway::passthrough::PassThrough {
            upstream: upstream.to_owned(),
        },
    );
    svc.add_listener(client_listener(listen, cfg));
    server.add_service(svc);
    server.run_forever()
}
