//! Commands that build a generation offline (no lookup, no listener, no state-dir lock) and print
//! from it: `check`, `catalog` and `publish` (the discovery documents written to files).

use super::{print_line, print_out};
use crate::config::Config;
use crate::gateway::ConfigGeneration;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A config the offline build refused: exit 2, naming the file.
fn config_error(path: &Path, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("aap-gateway: config error in {}: {e}", path.display());
    ExitCode::from(2)
}

/// `check`: build everything the config names; exit 2 when it or a tenant file is refused.
pub fn check(cfg: Config, path: &Path) -> ExitCode {
    let rt = match ConfigGeneration::build(cfg, 0) {
        Ok(rt) => rt,
        Err(e) => return config_error(path, e),
    };
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
        path.display(),
        rt.routes.units.len()
    )];
    lines.extend(publish_notes(&rt));
    print_out(format!("{}\n", lines.join("\n")).as_bytes())
}

/// `catalog`: each endpoint tenant's tool catalog (or one tenant's) as JSON.
pub fn catalog(cfg: Config, path: &Path, tenant: Option<&str>) -> ExitCode {
    let rt = match ConfigGeneration::build(cfg, 0) {
        Ok(rt) => rt,
        Err(e) => return config_error(path, e),
    };
    let mut out = serde_json::Map::new();
    let mut eps: Vec<_> = rt.routes.endpoints.values().collect();
    eps.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    for ep in eps {
        if tenant.is_some_and(|t| t != ep.tenant) {
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
            tenant.unwrap_or(""),
            path.display()
        );
        return ExitCode::from(2);
    }
    print_line(&serde_json::to_string_pretty(&serde_json::Value::Object(out)).unwrap_or_default())
}

/// `publish`: write the discovery documents and list the files written.
pub fn publish(cfg: Config, path: &Path, tenant: Option<&str>, out: &Path) -> ExitCode {
    let rt = match ConfigGeneration::build(cfg, 0) {
        Ok(rt) => rt,
        Err(e) => return config_error(path, e),
    };
    match write_published(&rt, tenant, out) {
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
    }
}

/// why it publishes none (a note, not an error).
fn publish_notes(rt: &ConfigGeneration) -> Vec<String> {
    use crate::publish::{document_url, Kind};
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
pub fn write_published(
    rt: &ConfigGeneration,
    tenant: Option<&str>,
    out: &Path,
) -> Result<Vec<PathBuf>, String> {
    use crate::publish::Kind;
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
