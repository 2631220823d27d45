//! `aap-gateway run`: logging, telemetry, the state directory's lock, the lead delivery
//! runtime, the first generation, the certificates, the listeners and the Pingora server; and the
//! benchmark's pass-through baseline.

use super::args::{load, Cli};
use crate::admin::log_level::LogLevel;
use crate::admin::{Admin, IngressProbe};
use crate::config::Config;
use crate::gateway::{ConfigGeneration, Gateway};
use crate::ingress::Ingress;
use crate::platform::Platform;
use crate::tls::CertStore;
use pingora::listeners::tls::TlsSettings;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;
use std::process::ExitCode;
use std::sync::Arc;

/// `run`: start the gateway and serve until a shutdown signal. `return_freed_memory` is the
/// binary's hook that starts giving freed memory back to the system (its allocator's), given
/// the platform's [`crate::memory::Release`] to install its "collect now" in.
pub fn run(cfg: Config, cli: &Cli, return_freed_memory: fn(&crate::memory::Release)) -> ExitCode {
    let path = cli.config.as_path();
    let log_level = Arc::new(LogLevel::default());
    let log_guard = super::logging::init_logging(&log_level);
    // Before any runtime starts: the exporter builds its blocking HTTP client.
    if let Err(e) = crate::telemetry::init(&cfg.telemetry) {
        eprintln!("aap-gateway: config error in {}: {e}", path.display());
        return ExitCode::from(2);
    }
    crate::metrics::prime(env!("CARGO_PKG_VERSION"), env!("AAP_BUILD_COMMIT"));
    // The standard process_* series (CPU, resident memory, open files, threads).
    let _ = crate::metrics::METRICS.registry.register(Box::new(
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
    // The process's registries, shared by every generation from the first.
    let platform = Platform::online();
    let state_dir = cfg.state_dir();
    // One process owns state.dir; `check` and `catalog` never take it (nor
    // write anything). An upgrade waits in the background for the old
    // process to let go; its lead calls wait for that too (bounded).
    let locked = if cli.upgrade {
        platform.locks.hold_when_free(&state_dir)
    } else {
        platform.locks.hold(&state_dir)
    };
    if let Err(e) = locked {
        eprintln!("aap-gateway: config error in {}: {e}", path.display());
        return ExitCode::from(2);
    }
    // Lead delivery runs on a runtime of its own (`leads::outbox`).
    if let Err(e) = platform.outboxes.start_delivery() {
        eprintln!("aap-gateway: {e}");
        return ExitCode::from(1);
    }
    let runtime = match ConfigGeneration::start(cfg, 1, &platform) {
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
    // restart (see `crate::tls`).
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
    return_freed_memory(&platform.memory);
    let conf = ServerConf {
        threads,
        pid_file: state_dir.join("aap-gateway.pid").display().to_string(),
        upgrade_sock: state_dir
            .join("aap-gateway-upgrade.sock")
            .display()
            .to_string(),
        // After SIGTERM and the drain delay (`crate::shutdown`) the
        // listeners close and requests in flight get the grace period; then
        // the runtimes stop, waiting a little more for blocking work (a lead
        // file append being fsync'd).
        grace_period_seconds: Some(grace),
        graceful_shutdown_timeout_seconds: Some(BLOCKING_WORK_SECS),
        // Pingora's own timeouts of a second or more (the TLS handshake's)
        // on the runtime's timer: `pingora_timeout`'s fast timer would start
        // a thread that wakes 100 times a second for the life of the process.
        fast_timeout_to_tokio_threshold_seconds: Some(0),
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
    // backends) and owns its connections (`crate::ingress`), so it is
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
            crate::tls::offer_http2(&mut settings);
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
            log_level,
        },
    );
    admin.add_tcp(&admin_listen);
    server.add_service(ingress);
    server.add_service(admin);
    tracing::info!(listen = %listen, admin_listen = %admin_listen, "aap-gateway started");
    server.run(pingora::server::RunArgs {
        shutdown_signal: Box::new(crate::shutdown::DrainingSignals { drain }),
    });
    // Queued spans and log lines go out first (bounded), then, as
    // `run_forever` does, exit without running destructors.
    crate::telemetry::flush(std::time::Duration::from_secs(BLOCKING_WORK_SECS));
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
    crate::background::spawn_loop("sighup", "SIGHUP reload unavailable", move || async move {
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
    });
}

/// The ingress listener on `addr`: no Pingora buffers, the ingress reads and
/// writes through its own, allocated on a connection's first byte.
fn ingress_listener(addr: &str) -> ListenerConfig {
    ListenerConfig::tcp(addr).l4_buffer(L4BufferSettings::unbuffered())
}

/// The load script's baseline (`passthrough --upstream HOST:PORT`): the
/// gateway's own HTTP/1.1 connection loop and pooled upstream client
/// forwarding to one upstream, with no MCP work (`crate::passthrough`), on
/// the same listener settings and `server.threads` as the gateway.
pub fn passthrough(listen: &str, upstream: &str, cfg: &crate::config::ServerConfig) -> ExitCode {
    let app = match crate::passthrough::PassThrough::new(upstream, cfg.write_buffer_bytes) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("aap-gateway: passthrough --upstream {upstream}: {e}");
            return ExitCode::from(2);
        }
    };
    let conf = ServerConf {
        threads: cfg.threads,
        // As `run`: Pingora's own timeouts on the runtime's timer, no timer thread.
        fast_timeout_to_tokio_threshold_seconds: Some(0),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut svc =
        pingora::services::listening::Service::new("aap-gateway passthrough".to_owned(), app);
    svc.add_listener(ingress_listener(listen));
    server.add_service(svc);
    server.run_forever()
}
