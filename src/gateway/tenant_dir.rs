//! The tenants directory (`tenants_dir`) read: its tenant files (`*.toml`, not hidden) with their
//! stamps, each parsed into a tenant or the reason it is refused; plain data, no generation.

use crate::config::{Config, TenantConfig};
use crate::tls::{stamp, Stamp};
use std::path::Path;

/// One tenant file as read: its name in the directory, its stamp when
/// read, and the tenant or why it is refused.
#[derive(Debug)]
pub struct FileRead {
    pub name: String,
    pub stamp: Stamp,
    pub result: Result<TenantConfig, String>,
}

/// Log a refused file: its name and the problem (which never holds a
/// secret: parse errors hide secret lines, validation never quotes one).
pub(super) fn log_refused(name: &str, error: &str, previous_serves: bool) {
    let serving = if previous_serves {
        "the previous version keeps serving"
    } else {
        "the tenant is not served"
    };
    tracing::error!(file = name, error, "tenant file refused; {serving}");
}

/// The tenant files (`*.toml`, not hidden) of a directory with their stamps,
/// sorted by name. An unreadable directory is an error (never "no tenants").
pub(super) fn list(dir: &Path) -> Result<Vec<(String, Stamp)>, String> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| format!("tenants_dir: cannot read {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".toml") {
            continue;
        }
        let path = entry.path();
        if path.is_file() {
            out.push((name, stamp(&path)));
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn read_one(config: &Config, dir: &Path, name: &str, stamp: Stamp) -> FileRead {
    let result = std::fs::read_to_string(dir.join(name))
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|text| config.parse_tenant_file(&text));
    FileRead {
        name: name.to_owned(),
        stamp,
        result,
    }
}

/// Read every tenant file of the config's `tenants_dir` (none without one).
pub fn read(config: &Config) -> Result<Vec<FileRead>, String> {
    let Some(dir) = config.tenants_dir_path() else {
        return Ok(Vec::new());
    };
    Ok(list(&dir)?
        .into_iter()
        .map(|(name, stamp)| read_one(config, &dir, &name, stamp))
        .collect())
}
