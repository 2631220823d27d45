//! `aap-gateway passthrough`, the load benchmark's baseline, over real HTTP: what it forwards
//! (bodies, end-to-end headers), what it keeps on its hop, keep-alive, and a dead upstream.

use crate::support::*;
use serde_json::json;
use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `aap-gateway passthrough --upstream 127.0.0.1:UPSTREAM`; killed on drop.
struct PassThrough {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl PassThrough {
    fn start(upstream: u16) -> PassThrough {
        let dir = temp_dir("passthrough");
        let config = dir.join("gateway.toml");
        std::fs::write(&config, config_with("", "", "")).unwrap();
        let port = free_port();
        let child = gateway_command(&config, port, free_port(), &dir)
            .arg("passthrough")
            .arg("--upstream")
            .arg(format!("127.0.0.1:{upstream}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
            .spawn()
            .expect("start aap-gateway passthrough");
        let mut pt = PassThrough { child, port, dir };
        let log = pt.dir.join("stderr.log");
        wait_listening(
            &mut pt.child,
            port,
            "passthrough",
            &log,
            Duration::from_secs(20),
        );
        pt
    }
}

impl Drop for PassThrough {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// The body as HTTP/1.1 chunks of at most `size` bytes, with the last chunk.
fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for part in body.chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn answers_match_a_direct_call_over_one_kept_alive_connection() {
    let upstream = Gateway::start();
    let pt = PassThrough::start(upstream.port);
    // One vehicle: an answer with nothing in it that changes from call to
    // call (a search's next-page cursor carries a time).
    let body = modern(
        "tools/call",
        json!({
            "name": "aap_inventory_vehicle",
            "arguments": {"type": "inventory.vehicle.request", "stock": "DT-1001"}
        }),
    )
    .to_string();
    let direct = upstream.post(&[], &body);
    assert_eq!(direct.status, 200, "{}", direct.text());
    assert!(direct.text().contains("DT-1001"), "{}", direct.text());
    assert_eq!(
        upstream.post(&[], &body).body,
        direct.body,
        "a repeatable answer"
    );

    let mut s = TcpStream::connect(("127.0.0.1", pt.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // 1. Content-Length framing; the connection stays open.
    let head = format!(
        "POST {ENDPOINT} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        pt.port,
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let first = read_response(&mut s).unwrap();
    assert_eq!(first.status, direct.status, "{}", first.text());
    assert_eq!(first.header("content-type"), direct.header("content-type"));
    assert_eq!(
        first.body, direct.body,
        "byte-identical to the direct answer"
    );
    assert_eq!(first.header("connection"), None, "kept alive");
    // 2. The same call on the same connection, its body chunked: forwarded
    // whole (the upstream needs the complete JSON to answer it).
    let head = format!(
        "POST {ENDPOINT} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        pt.port
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&chunked(body.as_bytes(), 40)).unwrap();
    let second = read_response(&mut s).unwrap();
    assert_eq!(second.status, 200, "{}", second.text());
    assert_eq!(second.header("content-type"), direct.header("content-type"));
    assert!(
        second.body == direct.body,
        "not the direct answer: {}",
        second.text()
    );
    // 3. HEAD: the head of the answer, no body; the connection then closes.
    s.write_all(
        format!(
            "HEAD /aap/3.0.0/demo-toyota/llms.txt HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            pt.port
        )
        .as_bytes(),
    )
    .unwrap();
    let mut rest = Vec::new();
    let text = read_rest(&mut s, &mut rest);
    let got = request(
        upstream.port,
        "GET",
        "/aap/3.0.0/demo-toyota/llms.txt",
        &[],
        b"",
    );
    assert!(
        text.starts_with(&format!("HTTP/1.1 {} ", got.status)),
        "{text}"
    );
    assert!(
        text.to_ascii_lowercase()
            .contains(&format!("content-length: {}\r\n", got.body.len())),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\n"),
        "no body after a HEAD's head: {text}"
    );
}

#[test]
fn hop_by_hop_headers_stay_on_their_hop() {
    let (up, heads) = recording_upstream();
    let pt = PassThrough::start(up);
    let r = raw(
        pt.port,
        b"POST /echo?q=1 HTTP/1.1\r\nHost: client.example\r\nConnection: close, X-Secret\r\n\
          X-Secret: 1\r\nKeep-Alive: timeout=9\r\nTE: trailers\r\n\
          Proxy-Authorization: Basic eA==\r\nX-End: 1\r\nContent-Length: 5\r\n\r\nhello",
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"ok");
    assert_eq!(r.header("x-kept"), Some("yes"));
    for gone in ["x-up-secret", "keep-alive", "proxy-agent"] {
        assert_eq!(r.header(gone), None, "{gone} reached the client: {r:?}");
    }
    let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("POST /echo?q=1 HTTP/1.1\r\n"), "{head}");
    assert!(lower.contains("\r\nx-end: 1\r\n"), "{head}");
    assert!(lower.contains("\r\ncontent-length: 5\r\n"), "{head}");
    assert!(
        lower.contains(&format!("\r\nhost: 127.0.0.1:{up}\r\n")),
        "the upstream's own authority: {head}"
    );
    for gone in [
        "x-secret",
        "connection",
        "keep-alive",
        "\r\nte:",
        "proxy-authorization",
        "client.example",
    ] {
        assert!(!lower.contains(gone), "{gone} reached the upstream: {head}");
    }
    // A HEAD goes upstream as a HEAD; its answer keeps the upstream's
    // Content-Length and has no body.
    let mut s = TcpStream::connect(("127.0.0.1", pt.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"HEAD /page HTTP/1.1\r\nHost: client.example\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let text = read_rest(&mut s, &mut got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200 "), "{text}");
    assert!(text.contains("\r\ncontent-length: 2\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\n"),
        "no body after a HEAD's head: {text}"
    );
    let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(head.starts_with("HEAD /page HTTP/1.1\r\n"), "{head}");
}

#[test]
fn an_unreachable_upstream_is_a_502_that_names_nothing_inside() {
    let dead = free_port();
    let pt = PassThrough::start(dead);
    for _ in 0..2 {
        let r = request(pt.port, "POST", ENDPOINT, &[], b"{}");
        assert_eq!(r.status, 502, "{}", r.text());
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("text/plain")),
            "{r:?}"
        );
        let text = r.text();
        assert!(text.len() < 100, "{text}");
        for inside in [
            "127.0.0.1",
            &dead.to_string(),
            "refused",
            "panicked",
            ".rs:",
        ] {
            assert!(!text.contains(inside), "{inside} in {text:?}");
        }
    }
}
