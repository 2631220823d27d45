//! Host routing and SNI against the real binary over TLS: tenants on their own domains (tenant
//! files with `hosts` and `[tls]`), each host's own certificate from the test CA, unknown SNI.

use crate::support::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// The shipped config over TLS (the server certificate for `localhost`)
/// with a tenants directory.
fn tls_config(ca_dir: &Path, tenants: &Path) -> String {
    config_with_tenants_dir(tenants).replace(
        "name = \"aap-gateway\"\n",
        &format!(
            "name = \"aap-gateway\"\ntls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            ca_dir.join("server.pem"),
            ca_dir.join("server.key")
        ),
    )
}

/// A tenant file routed by `host`, with its own certificate.
fn hosted(id: &str, host: &str, cert: &(std::path::PathBuf, std::path::PathBuf)) -> String {
    tenant_file(
        id,
        &format!(
            "hosts = [\"{host}\"]\ntls = {{ cert_file = {:?}, key_file = {:?} }}",
            cert.0, cert.1
        ),
        "",
    )
}

/// POST tools/list with curl over TLS to `https://<host>:<port><path>`,
/// the name resolved to loopback and the certificate verified against the
/// test CA (so the handshake succeeds only with that host's certificate).
/// Returns (HTTP status, body); status 0 when the handshake failed.
fn curl(ca: &Path, port: u16, host: &str, path: &str, host_header: Option<&str>) -> (u16, String) {
    let body = modern("tools/list", json!({})).to_string();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--http1.1",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "--cacert",
    ])
    .arg(ca)
    .arg("--resolve")
    .arg(format!("{host}:{port}:127.0.0.1"))
    .args(["-H", "Content-Type: application/json"])
    .args(["-H", "MCP-Protocol-Version: 2026-07-28"])
    .args(["-H", "Mcp-Method: tools/list"]);
    if let Some(h) = host_header {
        cmd.args(["-H", &format!("Host: {h}")]);
    }
    let out = cmd
        .args(["--data", &body])
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn tenants_on_their_own_hosts_get_their_own_certificates_by_sni() {
    let state = temp_dir("hosts");
    let ca_dir = state.join("ca");
    std::fs::create_dir_all(&ca_dir).unwrap();
    let ca = test_ca(&ca_dir);
    let tenants = state.join("tenants.d");
    std::fs::create_dir_all(&tenants).unwrap();
    let cert_a = issue_cert(&ca_dir, "dealer-a.test", "a", "");
    let cert_b = issue_cert(&ca_dir, "dealer-b.test", "b", "");
    std::fs::write(
        tenants.join("a.toml"),
        hosted("dealer-a", "dealer-a.test", &cert_a),
    )
    .unwrap();
    std::fs::write(
        tenants.join("b.toml"),
        hosted("dealer-b", "dealer-b.test", &cert_b),
    )
    .unwrap();
    let config = state.join("gateway.toml");
    std::fs::write(&config, tls_config(&ca_dir, &tenants)).unwrap();
    let gw = Gateway::launch_with_args(config, state.clone(), &["--tenants-watch-ms", "100"]);

    // Each host gets its own certificate; unknown or no SNI the server's.
    assert!(served_subject(gw.port, "dealer-a.test").contains("CN = dealer-a.test"));
    assert!(served_subject(gw.port, "dealer-b.test").contains("CN = dealer-b.test"));
    assert!(served_subject(gw.port, "unknown.test").contains("CN = localhost"));
    assert!(served_subject(gw.port, "localhost").contains("CN = localhost"));

    // `/mcp` and the tenant's own path reach the tenant on its host
    // (verified TLS: the handshake succeeds only with that host's cert).
    let tools = |(status, body): (u16, String)| {
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["result"]["tools"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(tools(curl(&ca, gw.port, "dealer-a.test", "/mcp", None)), 5);
    assert_eq!(
        tools(curl(
            &ca,
            gw.port,
            "dealer-a.test",
            &tenant_path("dealer-a"),
            None
        )),
        5
    );
    assert_eq!(tools(curl(&ca, gw.port, "dealer-b.test", "/mcp", None)), 5);
    // Host is compared without case and port.
    let port_host = format!("DEALER-B.Test:{}", gw.port);
    assert_eq!(
        tools(curl(
            &ca,
            gw.port,
            "dealer-a.test",
            "/mcp",
            Some(&port_host)
        )),
        5
    );
    // On a tenant's host another tenant's path is not served; the main
    // tenant is still reached by path on the server's own name.
    let (status, _) = curl(
        &ca,
        gw.port,
        "dealer-a.test",
        &tenant_path("dealer-b"),
        None,
    );
    assert_eq!(status, 404);
    let (status, _) = curl(&ca, gw.port, "dealer-a.test", ENDPOINT, None);
    assert_eq!(status, 404);
    assert_eq!(tools(curl(&ca, gw.port, "localhost", ENDPOINT, None)), 5);
    let (status, _) = curl(&ca, gw.port, "localhost", "/mcp", None);
    assert_eq!(status, 404);

    // The certificate is reloaded with the tenant: a new one for the host,
    // the tenant file rewritten.
    let renewed = issue_cert(&ca_dir, "dealer-a.test", "a2", "/O=renewed");
    put_tenant_file(
        &tenants,
        "a.toml",
        &hosted("dealer-a", "dealer-a.test", &renewed),
    );
    wait_for("the renewed certificate", || {
        served_subject(gw.port, "dealer-a.test").contains("O = renewed")
    });
    assert_eq!(tools(curl(&ca, gw.port, "dealer-a.test", "/mcp", None)), 5);

    // A second tenant claiming a routed host is refused alone.
    let cert_c = issue_cert(&ca_dir, "dealer-b.test", "c", "");
    put_tenant_file(
        &tenants,
        "c.toml",
        &hosted("dealer-c", "dealer-b.test", &cert_c),
    );
    wait_for("c to be refused", || {
        readyz(gw.admin)["tenant_files"]["refused"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let e = readyz(gw.admin)["tenant_files"]["refused"][0]["error"].to_string();
    assert!(e.contains("hosts") && e.contains("dealer-b.test"), "{e}");
    assert!(served_subject(gw.port, "dealer-b.test").contains("CN = dealer-b.test"));
    assert!(!served_subject(gw.port, "dealer-b.test").contains("dealer-c"));

    // Removed: its host falls back to the server certificate and 404.
    std::fs::remove_file(tenants.join("b.toml")).unwrap();
    wait_for("b to be gone", || {
        served_subject(gw.port, "dealer-b.test").contains("CN = localhost")
    });
}

/// A raw HTTP/1.1 request: `target` as written on the request line, `host` as the Host header.
fn raw_on(port: u16, method: &str, target: &str, host: &str, body: &str) -> Resp {
    let mut req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/list\r\n"
    );
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    raw(port, req.as_bytes()).unwrap()
}

/// Two tenants on their own hosts, each published (public_url) at its own domain, no TLS.
fn two_hosted_tenants() -> Gateway {
    let tenants = temp_dir("hosts-plain");
    for id in ["dealer-a", "dealer-b"] {
        let host = format!("{id}.example");
        put_tenant_file(
            &tenants,
            &format!("{id}.toml"),
            &tenant_file(
                id,
                &format!(
                    "hosts = [\"{host}\"]\npublic_url = \"https://{host}{}\"",
                    tenant_path(id)
                ),
                "",
            ),
        );
    }
    let gw = Gateway::start_with(&config_with_tenants_dir(&tenants));
    wait_for("both tenants", || {
        tools_list(gw.port, &tenant_path("dealer-b"), &[]).is_ok_and(|r| r.status == 200)
            && tools_list(gw.port, &tenant_path("dealer-a"), &[]).is_ok_and(|r| r.status == 200)
    });
    gw
}

/// A `Host` with a trailing dot (and any case or port) is the same tenant on every path: its
/// MCP endpoint, `/llms.txt`, the Agent Card and the Poppy link.
#[test]
fn a_trailing_dot_host_gets_the_same_tenant_on_every_path() {
    let gw = two_hosted_tenants();
    let body = modern("tools/list", json!({})).to_string();
    for host in [
        "dealer-a.example",
        "dealer-a.example.",
        "Dealer-A.Example.:8080",
    ] {
        let r = raw_on(gw.port, "POST", "/mcp", host, &body);
        assert_eq!(r.status, 200, "{host}: {}", r.text());
        assert_eq!(
            r.json()["result"]["tools"].as_array().map(Vec::len),
            Some(5)
        );
        for doc in ["/llms.txt", "/.well-known/agent-card.json", "/poppy.json"] {
            let r = raw_on(gw.port, "GET", doc, host, "");
            assert_eq!(r.status, 200, "{host}{doc}: {}", r.text());
            let text = r.text();
            assert!(
                text.contains("https://dealer-a.example/aap/3.0.0/dealer-a/mcp"),
                "{host}{doc}: {text}"
            );
            assert!(!text.contains("dealer-b"), "{host}{doc}: {text}");
        }
    }
    // Two dots are not a host: no tenant's documents.
    let r = raw_on(gw.port, "GET", "/llms.txt", "dealer-a.example..", "");
    assert_ne!(r.status, 200, "{}", r.text());
}

/// RFC 9112 §3.2.2: an absolute-form target's authority is the request's. One that names
/// another host than `Host` is refused (400), never served by either tenant.
#[test]
fn an_absolute_form_target_that_disagrees_with_host_is_refused() {
    let gw = two_hosted_tenants();
    let body = modern("tools/list", json!({})).to_string();
    let r = raw_on(
        gw.port,
        "POST",
        "http://dealer-a.example/mcp",
        "dealer-b.example",
        &body,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("another host"), "{}", r.text());
    // Another port is another authority too.
    let r = raw_on(
        gw.port,
        "POST",
        "http://dealer-a.example:8443/mcp",
        "dealer-a.example",
        &body,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Agreeing (case, trailing dot and the scheme's default port aside): served.
    for (target, host) in [
        ("http://dealer-a.example/mcp", "dealer-a.example"),
        ("http://DEALER-A.example./mcp", "dealer-a.example:80"),
    ] {
        let r = raw_on(gw.port, "POST", target, host, &body);
        assert_eq!(r.status, 200, "{target} {host}: {}", r.text());
    }
}

/// `check` refuses URLs that can never be requested and names the key, not the URL.
#[test]
fn check_refuses_sink_and_feed_urls_that_can_never_work() {
    let check = |text: &str| {
        let dir = temp_dir("check-urls");
        let file = dir.join("gateway.toml");
        std::fs::write(&file, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .args(["check", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let sink = |kind: &str, url: &str| {
        format!("[[tenants.backend.sinks]]\nkind = \"{kind}\"\nname = \"crm\"\nurl = \"{url}\"\n")
    };
    let (ok, out) = check(&config_with(
        "",
        &sink("adf_http", "http://127.0.0.1:9/adf"),
        "",
    ));
    assert!(ok, "{out}");
    for (kind, url, why) in [
        ("adf_http", "http://:99999/adf", ""),
        ("adf_http", "http://[::1/adf", ""),
        ("adf_http", "http:///adf", "no host"),
        ("adf_http", "http://crm.example:65536/adf", "port"),
        ("adf_http", "http://crm.example:0/adf", "port 0"),
        ("adf_http", "http://crm..example/adf", ""),
        ("webhook", "http://:99999/adf", ""),
        (
            "webhook",
            "https://u:secret-token@crm.example/hook",
            "user info",
        ),
    ] {
        let (ok, out) = check(&config_with("", &sink(kind, url), ""));
        assert!(!ok, "{url}: accepted");
        assert!(
            out.contains("tenants[0].backend.sinks[0].url: the URL cannot be used"),
            "{url}: {out}"
        );
        assert!(out.contains(why), "{url}: {out}");
        assert!(!out.contains(url), "{url} quoted: {out}");
        assert!(!out.contains("secret-token"), "{out}");
    }
}
