//! A real browser (headless Chromium) runs an MCP client with `fetch` from a page on a loopback
//! origin: allowed, it discovers, lists and searches; from another origin, CORS refuses it.

use crate::support::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The page: server/discover, tools/list and a search through `fetch`, the
/// outcome written into `<pre id="out">` as JSON.
const PAGE: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>aap-gateway browser client</title></head>
<body><pre id="out">pending</pre>
<script>
const endpoint = "__ENDPOINT__";
const meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": {}};
let id = 0;
async function rpc(method, params, name) {
  const headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method};
  if (name) headers["Mcp-Name"] = name;
  const r = await fetch(endpoint, {method: "POST", headers,
    body: JSON.stringify({jsonrpc: "2.0", id: ++id, method, params: {...params, _meta: meta}})});
  return {status: r.status, correlation: r.headers.get("x-correlation-id"), body: await r.json()};
}
(async () => {
  const out = document.getElementById("out");
  try {
    const discover = await rpc("server/discover", {});
    const list = await rpc("tools/list", {});
    const search = await rpc("tools/call", {name: "aap_inventory_search",
      arguments: {type: "inventory.search.request", pagination: {limit: 3}}}, "aap_inventory_search");
    out.textContent = JSON.stringify({ok: true,
      versions: discover.body.result.supportedVersions,
      tools: list.body.result.tools.map(t => t.name),
      searchType: search.body.result.structuredContent.type,
      total: search.body.result.structuredContent.data.total,
      vehicles: search.body.result.structuredContent.data.vehicles.length,
      correlation: search.correlation});
  } catch (e) {
    out.textContent = JSON.stringify({ok: false, error: String(e)});
  }
})();
</script></body></html>
"#;

/// Serve `page` to every request on `l`, in threads that end with the test
/// process.
fn serve_page(l: TcpListener, page: String) {
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(s) = stream else { continue };
            let page = page.clone();
            std::thread::spawn(move || answer(s, &page));
        }
    });
}

fn answer(mut s: std::net::TcpStream, page: &str) {
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut buf = [0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        page.len()
    );
    s.write_all(head.as_bytes()).ok();
    s.write_all(page.as_bytes()).ok();
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Load `url` in headless Chromium and return what the page wrote.
fn run_page(browser: &PathBuf, url: &str) -> Value {
    let profile = temp_dir("chromium");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=15000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom.find("<pre id=\"out\">").unwrap_or_else(|| {
        panic!(
            "no result in the DOM: {dom}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    }) + "<pre id=\"out\">".len();
    let end = dom[start..].find("</pre>").unwrap() + start;
    let text = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("page result: {text}"))
}

#[test]
fn chromium_runs_an_mcp_client_from_an_allowed_origin_only() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is required in CI (scripts/setup.sh installs the Debian package)"
        );
        eprintln!("SKIPPED browser::chromium_runs_an_mcp_client_from_an_allowed_origin_only: chromium is not installed (apt-get install chromium, or bash scripts/setup.sh)");
        return;
    };
    // Two page servers on loopback: one origin is allowed, the other is not.
    // Both listen before the gateway starts, whose config names the first.
    let allowed_l = listener();
    let allowed = allowed_l.local_addr().unwrap().port();
    let other_l = listener();
    let other = other_l.local_addr().unwrap().port();
    let cfg = config_with("", "", "").replace(
        "allowed_origins = [\"http://localhost:3000\"",
        &format!("allowed_origins = [\"http://127.0.0.1:{allowed}\""),
    );
    let gw = Gateway::start_with(&cfg);
    let page = PAGE.replace(
        "__ENDPOINT__",
        &format!("http://127.0.0.1:{}{ENDPOINT}", gw.port),
    );
    serve_page(allowed_l, page.clone());
    serve_page(other_l, page);

    let ok = run_page(&browser, &format!("http://127.0.0.1:{allowed}/"));
    assert_eq!(ok["ok"], true, "{ok}");
    assert_eq!(ok["versions"], serde_json::json!([MODERN, LEGACY]), "{ok}");
    assert_eq!(ok["tools"].as_array().unwrap().len(), 5, "{ok}");
    assert_eq!(ok["searchType"], "inventory.search.response", "{ok}");
    assert_eq!(ok["total"], 92, "{ok}");
    assert_eq!(ok["vehicles"], 3, "{ok}");
    // An exposed header is readable by the page.
    assert_eq!(ok["correlation"].as_str().map(str::len), Some(32), "{ok}");

    let refused = run_page(&browser, &format!("http://127.0.0.1:{other}/"));
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("Failed to fetch"),
        "{refused}"
    );
    // The gateway refused the other origin's preflight itself.
    let logs = gw.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("\"http_method\":\"OPTIONS\"") && l.contains("\"status\":403")),
        "{logs}"
    );
    assert!(logs
        .lines()
        .any(|l| l.contains("\"http_method\":\"OPTIONS\"") && l.contains("\"status\":204")));
}
