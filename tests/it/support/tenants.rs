//! Tenant files for `tenants_dir` tests: a config that names a tenants directory, tenant files
//! on the demo data, tools/list on any tenant path, and waiting for an applied change.

use super::http::{request, try_request, Resp};
use super::mcp::{modern, MODERN};
use super::process::{config_with, repo};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// The shipped config (tenant `demo-toyota`) with `tenants_dir` naming `dir`.
pub fn config_with_tenants_dir(dir: &Path) -> String {
    format!("tenants_dir = {:?}\n{}", dir, config_with("", "", ""))
}

/// The MCP path of tenant `id` in these tests.
pub fn tenant_path(id: &str) -> String {
    format!("/aap/3.0.0/{id}/mcp")
}

/// A tenant file: tenant `id` on the demo data; `top` adds top-level keys,
/// `backend` keys of `[backend]`.
pub fn tenant_file(id: &str, top: &str, backend: &str) -> String {
    let data = repo().join("data");
    format!(
        "id = \"{id}\"\npath = \"{}\"\n{top}\n\n[backend]\nkind = \"embedded\"\ninventory = {:?}\ndealer = {:?}\n{backend}\n",
        tenant_path(id),
        data.join("demo-inventory.json"),
        data.join("demo-dealer.json"),
    )
}

/// Write a tenant file the way an operator's tool should: a temporary file
/// renamed into place (the watch then sees one whole new version).
pub fn put_tenant_file(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// A modern tools/list on `path`, with extra headers.
pub fn tools_list(port: u16, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Resp> {
    let mut h = vec![
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
    ];
    h.extend_from_slice(headers);
    let body = modern("tools/list", json!({})).to_string();
    try_request(port, "POST", path, &h, body.as_bytes())
}

/// The tool names tools/list on `path` lists (panics unless 200).
pub fn tool_names(port: u16, path: &str) -> Vec<String> {
    let r = tools_list(port, path, &[]).unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()["result"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait (at most 10 s) until `ok` holds, polling every 50 ms.
pub fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// `/readyz` on the admin port.
pub fn readyz(admin: u16) -> Value {
    request(admin, "GET", "/readyz", &[], b"").json()
}

/// One sample of `/metrics` (the line starting with `series`), if present.
pub fn metric(admin: u16, series: &str) -> Option<f64> {
    let text = request(admin, "GET", "/metrics", &[], b"").text();
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A certificate for `name` signed by the CA [`super::process::test_ca`]
/// made in `dir`, as (`<file>.pem`, `<file>.key`); `subject_extra` adds
/// subject fields (e.g. `/O=v2`) so two issues for one name differ.
pub fn issue_cert(
    dir: &Path,
    name: &str,
    file: &str,
    subject_extra: &str,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let sh = format!(
        "set -e; cd {d}; \
         openssl req -newkey rsa:2048 -nodes -keyout {file}.key -out {file}.csr -subj '/CN={name}{subject_extra}' 2>/dev/null; \
         printf 'subjectAltName=DNS:{name}\\n' > {file}.cnf; \
         openssl x509 -req -in {file}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out {file}.pem -days 2 -extfile {file}.cnf 2>/dev/null",
        d = dir.display()
    );
    let made = std::process::Command::new("sh").args(["-c", &sh]).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "openssl could not issue {name}"
    );
    (
        dir.join(format!("{file}.pem")),
        dir.join(format!("{file}.key")),
    )
}

/// The subject of the certificate the TLS listener on `port` presents for
/// SNI `name` (openssl s_client, no verification).
pub fn served_subject(port: u16, name: &str) -> String {
    let sh = format!(
        "openssl s_client -connect 127.0.0.1:{port} -servername {name} </dev/null 2>/dev/null | openssl x509 -noout -subject"
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &sh])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
