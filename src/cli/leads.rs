//! `aap-gateway leads …` and `state import`: `list`, `show` and `export` read the lead store
//! directly; `dead-letters` and `redrive` ask the running gateway's admin listener.

use super::args::{LeadSelection, LeadsCommand};
use super::{admin_target, no_admin_token, print_line, print_out};
use crate::config::Config;
use std::process::ExitCode;

/// `leads list` / `leads export`: read the lead store directly.
pub fn leads_read(cfg: &Config, s: &LeadSelection, full: bool) -> ExitCode {
    use crate::store::cli;
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
pub fn leads_show(cfg: &Config, lead_id: &str) -> ExitCode {
    use crate::store::cli;
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
pub fn leads_command(cfg: &Config, action: &LeadsCommand) -> ExitCode {
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
    let target = admin_target(cfg);
    let url = format!("http://{target}{path}?{query}");
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(async {
                let client = crate::outbound::client(None, std::time::Duration::from_secs(5))
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

/// `state import`: the file store of state.dir into the lead store.
pub fn state_import(cfg: &Config) -> ExitCode {
    match crate::store::cli::import(cfg) {
        Ok(report) => print_line(&report.to_string()),
        Err(e) => {
            eprintln!("aap-gateway: state import: {e}");
            ExitCode::from(1)
        }
    }
}
