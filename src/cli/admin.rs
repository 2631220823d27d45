//! `aap-gateway admin …`: one request to the running gateway's admin listener (with the
//! configured admin token), its answer printed as a table, or as JSON with `--json`.

use crate::config::Config;
use serde_json::Value;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct AdminArgs {
    /// Print the admin listener's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub action: AdminCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Reload the configuration (POST /reload); exit 1 when it is rejected.
    Reload,
    /// Version, config generation, tenants, feeds, clusters, last reload (GET /admin/status)
    /// and the reload history (GET /admin/reloads).
    Status,
    /// Every tenant's figures (GET /admin/tenants), one tenant's (--id), or the top N (--top).
    Tenants {
        /// Only this tenant (GET /admin/tenants/{id}/stats).
        #[arg(long, conflicts_with = "top")]
        id: Option<String>,
        /// The N highest by --by (GET /admin/tenants/top).
        #[arg(long)]
        top: Option<usize>,
        /// requests, server_errors, client_errors, throttled or duration.
        #[arg(long, default_value = "requests", requires = "top")]
        by: String,
    },
    /// Inventory feeds: state, rows, rejects, last success, last error (GET /admin/feeds).
    Feeds,
    /// The lead outbox: pending count and dead letters (GET /admin/leads/dead-letters).
    Leads {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// The configuration being served, secrets shown as "<redacted>" (GET /admin/config).
    Config,
    /// Show the log filter (GET /admin/log-level), or set it (PUT), e.g. `debug` or
    /// `info,aap_gateway=debug`.
    LogLevel {
        /// The new filter (an `AAP_LOG` directive); without it, show the current one.
        filter: Option<String>,
    },
}

/// Run one admin subcommand: exit 0 on a 2xx answer, 1 on any other answer
/// or no answer, 2 when there is no admin token to send or the input is bad.
pub fn run(cfg: &Config, args: &AdminArgs) -> ExitCode {
    let Some(token) = &cfg.server.admin_secret else {
        eprintln!("aap-gateway: admin: {}", super::no_admin_token(cfg));
        return ExitCode::from(2);
    };
    let safe = |v: &str| {
        !v.is_empty()
            && v.len() <= 128
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
    };
    let calls: Vec<(reqwest::Method, String, Option<String>)> = match &args.action {
        AdminCommand::Reload => vec![(reqwest::Method::POST, "/reload".into(), None)],
        AdminCommand::Status => vec![
            (reqwest::Method::GET, "/admin/status".into(), None),
            (reqwest::Method::GET, "/admin/reloads".into(), None),
        ],
        AdminCommand::Tenants { id, top, by } => match (id, top) {
            (Some(id), _) if !safe(id) => return bad("--id: 1-128 of A-Z a-z 0-9 . _ : -"),
            (Some(id), _) => vec![(
                reqwest::Method::GET,
                format!("/admin/tenants/{id}/stats"),
                None,
            )],
            (None, Some(_)) if !safe(by) => return bad(&format!("--by {by:?}: not a ranking")),
            (None, Some(n)) => vec![(
                reqwest::Method::GET,
                format!("/admin/tenants/top?by={by}&n={n}"),
                None,
            )],
            (None, None) => vec![(reqwest::Method::GET, "/admin/tenants".into(), None)],
        },
        AdminCommand::Feeds => vec![(reqwest::Method::GET, "/admin/feeds".into(), None)],
        AdminCommand::Leads { tenant } => match tenant {
            Some(t) if !safe(t) => return bad("--tenant: 1-128 of A-Z a-z 0-9 . _ : -"),
            Some(t) => vec![(
                reqwest::Method::GET,
                format!("/admin/leads/dead-letters?tenant={t}"),
                None,
            )],
            None => vec![(
                reqwest::Method::GET,
                "/admin/leads/dead-letters".into(),
                None,
            )],
        },
        AdminCommand::Config => vec![(reqwest::Method::GET, "/admin/config".into(), None)],
        AdminCommand::LogLevel { filter } => match filter {
            Some(f) => vec![(
                reqwest::Method::PUT,
                "/admin/log-level".into(),
                Some(serde_json::json!({ "filter": f }).to_string()),
            )],
            None => vec![(reqwest::Method::GET, "/admin/log-level".into(), None)],
        },
    };
    let target = super::admin_target(cfg);
    let mut answers = Vec::new();
    for (method, path, body) in calls {
        match request(&target, token.expose(), method, &path, body) {
            Ok((status, value)) if (200..300).contains(&status) => answers.push(value),
            Ok((status, value)) => {
                // A rejected reload answers 422 with the reason: shown, exit 1.
                eprintln!("aap-gateway: admin: {path} answered {status}");
                if args.json {
                    println!("{}", pretty(&value));
                } else {
                    eprintln!("{}", error_text(&value));
                }
                return ExitCode::from(1);
            }
            Err(e) => {
                eprintln!("aap-gateway: admin: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let out = if args.json {
        match answers.as_slice() {
            [one] => pretty(one),
            _ => pretty(&Value::Array(answers.clone())),
        }
    } else {
        human(&args.action, &answers)
    };
    super::print_line(&out)
}

fn bad(msg: &str) -> ExitCode {
    eprintln!("aap-gateway: admin: {msg}");
    ExitCode::from(2)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn error_text(v: &Value) -> String {
    ["error", "message", "reason"]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(": ")
}

fn request(
    target: &str,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> Result<(u16, Value), String> {
    let url = format!("http://{target}{path}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let client = crate::outbound::client(None, std::time::Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        let mut req = client
            .request(method, &url)
            .bearer_auth(token)
            .timeout(std::time::Duration::from_secs(60));
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_connect() {
                format!("cannot reach the admin listener at {target} (is the gateway running?)")
            } else {
                format!("admin request to {target} failed")
            }
        })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    })
}

/// A value as a table cell.
fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Rows under a header, columns padded to their widest cell. Hand-written:
/// a dozen lines, where a table crate would add a dependency for the same.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = width[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

fn rows(list: &Value, keys: &[&str]) -> Vec<Vec<String>> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|item| keys.iter().map(|k| text(&item[*k])).collect())
                .collect()
        })
        .unwrap_or_default()
}

fn human(action: &AdminCommand, answers: &[Value]) -> String {
    let first = answers.first().cloned().unwrap_or(Value::Null);
    match action {
        AdminCommand::Reload => {
            let mut s = format!(
                "{}: config generation {}",
                text(&first["status"]),
                text(&first["config_generation"])
            );
            if !first["tls"].is_null() {
                s.push_str(&format!(", tls {}", text(&first["tls"])));
            }
            s
        }
        AdminCommand::Status => {
            let keys = [
                "version",
                "commit",
                "pid",
                "uptime_secs",
                "config_file",
                "config_generation",
                "tenants",
                "tenants_not_ready",
                "feeds",
                "clusters",
                "clusters_not_ready",
                "draining",
                "log_filter",
            ];
            let kv: Vec<Vec<String>> = keys
                .iter()
                .map(|k| vec![k.to_string(), text(&first[*k])])
                .collect();
            let reloads = answers
                .get(1)
                .map(|r| r["reloads"].clone())
                .unwrap_or_default();
            format!(
                "{}\n\nreloads (newest first)\n{}",
                table(&["key", "value"], &kv),
                table(
                    &["at", "result", "generation", "error"],
                    &rows(&reloads, &["at", "result", "config_generation", "error"])
                )
            )
        }
        AdminCommand::Tenants { .. } => {
            let list = if first["tenants"].is_array() {
                first["tenants"].clone()
            } else if first["top"].is_array() {
                first["top"].clone()
            } else {
                Value::Array(vec![first.clone()])
            };
            table(
                &[
                    "tenant",
                    "requests",
                    "client_errors",
                    "server_errors",
                    "throttled",
                    "tool_calls",
                    "mean_ms",
                ],
                &rows(
                    &list,
                    &[
                        "tenant",
                        "requests",
                        "client_errors",
                        "server_errors",
                        "throttled",
                        "tool_calls",
                        "mean_duration_ms",
                    ],
                ),
            )
        }
        AdminCommand::Feeds => {
            let mut s = table(
                &[
                    "source",
                    "state",
                    "rows",
                    "rejected",
                    "last_success",
                    "last_load",
                    "last_error",
                    "tenants",
                ],
                &rows(
                    &first["feeds"],
                    &[
                        "source",
                        "state",
                        "rows",
                        "rejected",
                        "last_success",
                        "last_load",
                        "last_error",
                        "tenants",
                    ],
                ),
            );
            if first["not_ready"].as_array().is_some_and(|a| !a.is_empty()) {
                s.push_str(&format!("\nnot ready: {}", text(&first["not_ready"])));
            }
            s
        }
        AdminCommand::Leads { .. } => format!(
            "pending: {}\nsinks:\n{}\ndead letters:\n{}",
            text(&first["pending"]),
            table(
                &[
                    "tenant",
                    "sink",
                    "pending",
                    "next_attempt",
                    "oldest_pending",
                    "dead"
                ],
                &rows(
                    &first["sinks"],
                    &[
                        "tenant",
                        "sink",
                        "pending",
                        "next_attempt_at",
                        "oldest_pending_at",
                        "dead"
                    ],
                ),
            ),
            table(
                &[
                    "lead_id",
                    "tenant",
                    "sink",
                    "attempts",
                    "error_class",
                    "error",
                    "dead_at"
                ],
                &rows(
                    &first["dead_letters"],
                    &[
                        "lead_id",
                        "tenant",
                        "sink",
                        "attempts",
                        "last_error_class",
                        "last_error",
                        "dead_at"
                    ],
                ),
            )
        ),
        // The configuration is a tree: shown as TOML, like the file.
        AdminCommand::Config => {
            let cfg = toml::to_string_pretty(&first["config"])
                .unwrap_or_else(|_| pretty(&first["config"]));
            format!(
                "# {} (config generation {}), secrets redacted\n{}",
                text(&first["config_file"]),
                text(&first["config_generation"]),
                cfg
            )
        }
        AdminCommand::LogLevel { .. } => match first.get("previous") {
            Some(p) => format!("log filter: {} (was {})", text(&first["filter"]), text(p)),
            None => format!("log filter: {}", text(&first["filter"])),
        },
    }
}
