//! The HTTP/1.1 edge over raw sockets and real clients: strict framing,
//! connection limits, transport answers with a JSON-RPC body.
//!
//! Strict framing (RFC 9110/9112), pipelining, 100-continue, lingering
//! close, connection limits, and transport answers that carry a JSON-RPC
//! body and are logged.

use crate::support::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// One keep-alive connection that reads responses one at a time (bytes past
/// one response stay buffered for the next).
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { s, buf: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    fn more(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.s.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// The next response (`None` if the connection ends first).
    fn response(&mut self) -> Option<Resp> {
        let end = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p;
            }
            if !self.more() {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        self.buf.drain(..end + 4);
        if status == 100 {
            return Some(Resp {
                status,
                headers,
                body: Vec::new(),
            });
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .expect("every answer has a content-length");
        while self.buf.len() < len {
            if !self.more() {
                return None;
            }
        }
        let body = self.buf.drain(..len).collect();
        Some(Resp {
            status,
            headers,
            body,
        })
    }

    /// True if the server closes the connection (EOF or reset) within 3 s
    /// and sends nothing more.
    fn closed(&mut self) -> bool {
        self.s
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut b = [0u8; 256];
        match self.s.read(&mut b) {
            Ok(0) => self.buf.is_empty(),
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&b[..n])),
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        }
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

fn list_body(id: i64) -> String {
    let mut b = modern("tools/list", json!({}));
    b["id"] = json!(id);
    b.to_string()
}

/// A keep-alive POST of tools/list with `extra` header lines.
fn post(id: i64, extra: &str) -> String {
    let body = list_body(id);
    format!(
        "POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A transport refusal: the status, a JSON-RPC error body, a closed connection.
fn assert_refused(c: &mut Client, status: u16, what: &str) -> Value {
    let r = c.response().unwrap_or_else(|| panic!("{what}: no answer"));
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{what}");
    assert!(v["error"]["code"].is_i64(), "{what}: {v}");
    assert!(v["error"]["message"].is_string(), "{what}: {v}");
    assert_eq!(
        r.header("connection")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("close"),
        "{what}"
    );
    assert!(c.closed(), "{what}: connection left open");
    v
}

fn one(gw: &Gateway, bytes: &[u8]) -> Client {
    let mut c = Client::connect(gw.port);
    c.send(bytes);
    c
}

#[test]
fn transfer_encoding_other_than_one_final_chunked_is_refused() {
    let gw = Gateway::start();
    let body = list_body(1);
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let req = |te: &str| {
        format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{te}\r\n{chunked}")
    };
    // A single chunked is read.
    let mut c = one(&gw, req("Transfer-Encoding: chunked\r\n").as_bytes());
    assert_eq!(c.response().unwrap().status, 200);
    for (te, status) in [
        ("Transfer-Encoding: chunked, chunked\r\n", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
        ("Transfer-Encoding: gzip, chunked\r\n", 501),
        ("Transfer-Encoding: identity, chunked\r\n", 501),
        ("Transfer-Encoding: chunked, identity\r\n", 400),
        (
            &format!("Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\nContent-Length: {}\r\n", chunked.len()),
            400,
        ),
    ] {
        let mut c = one(&gw, req(te).as_bytes());
        assert_refused(&mut c, status, te);
    }
}

#[test]
fn content_length_with_transfer_encoding_closes_the_connection() {
    let gw = Gateway::start();
    let body = list_body(1);
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let mut c = Client::connect(gw.port);
    c.send(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}", chunked.len()).as_bytes());
    std::thread::sleep(Duration::from_millis(200));
    // A second request on the same connection is never served.
    c.send(post(2, "").as_bytes());
    assert_refused(&mut c, 400, "CL+TE");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let gw = Gateway::start();
    let mut c = Client::connect(gw.port);
    let burst = format!("{}{}{}", post(1, ""), post(2, ""), post(3, ""));
    c.send(burst.as_bytes());
    for id in 1..=3 {
        let r = c
            .response()
            .unwrap_or_else(|| panic!("request {id} unanswered"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["id"], id);
        assert_ne!(r.header("connection"), Some("close"), "keep-alive");
    }
    // Still open for a fourth, sent later; a Connection: close request in
    // a pipeline is answered, and what follows it is not.
    c.send(format!("{}{}", post(4, "Connection: close\r\n"), post(5, "")).as_bytes());
    let r = c.response().unwrap();
    assert_eq!((r.status, r.json()["id"].clone()), (200, json!(4)));
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
}

#[test]
fn expect_100_continue_gets_100_or_the_final_status_at_once() {
    let gw = Gateway::start();
    let body = list_body(7);
    for expect in ["100-continue", "100-Continue"] {
        let mut c = Client::connect(gw.port);
        c.send(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: {expect}\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
        c.s.set_read_timeout(Some(Duration::from_millis(900)))
            .unwrap();
        let r = c.response().expect("100 Continue before the body");
        assert_eq!(r.status, 100);
        c.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.send(body.as_bytes());
        let r = c.response().unwrap();
        assert_eq!((r.status, r.json()["id"].clone()), (200, json!(7)));
    }
    // Too large: 413 at once, no 100, nothing of the body needed.
    let mut c = Client::connect(gw.port);
    c.send(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 10000000\r\n\r\n").as_bytes());
    c.s.set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    assert_refused(&mut c, 413, "expect + too large");
    // An expectation we cannot meet.
    let mut c = one(&gw, post(1, "Expect: teapot\r\n").as_bytes());
    assert_refused(&mut c, 417, "unknown expectation");
}

/// With `Expect: 100-continue`, a refusal the head alone decides is the
/// final answer at once (no 100, no body needed), logged like any other.
#[test]
fn expect_100_continue_gets_a_head_decided_refusal_at_once() {
    let jwks = repo().join("tests/keys/jwks.json");
    let auth = format!(
        "[tenants.auth]\nmode = \"required\"\nresource = \"https://gw.test/aap/3.0.0/demo-toyota/mcp\"\nissuer = \"https://issuer.test\"\nauthorization_servers = [\"https://issuer.test\"]\njwks_file = {jwks:?}\n"
    );
    let open = Gateway::start();
    let locked = Gateway::start_with(&config_with(&auth, "", ""));
    let body = list_body(9);
    let ask = |gw: &Gateway, line: &str, extra: &str| {
        let mut c = Client::connect(gw.port);
        c.send(format!("{line} HTTP/1.1\r\nHost: x\r\n{extra}Expect: 100-continue\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes());
        // Well under the second a client waits before sending the body anyway.
        c.s.set_read_timeout(Some(Duration::from_millis(900)))
            .unwrap();
        c
    };
    let json_ct = "Content-Type: application/json\r\n";
    for (gw, line, extra, status, what) in [
        (
            &open,
            "POST /nowhere".to_owned(),
            json_ct.to_owned(),
            404,
            "unknown path",
        ),
        (
            &open,
            format!("POST {ENDPOINT}"),
            "Content-Type: text/plain\r\n".to_owned(),
            415,
            "content type",
        ),
        (
            &open,
            format!("POST {ENDPOINT}"),
            format!("{json_ct}Accept: text/html\r\n"),
            406,
            "accept",
        ),
        (
            &open,
            format!("POST {ENDPOINT}"),
            format!("{json_ct}Origin: https://evil.example\r\n"),
            403,
            "origin",
        ),
        (
            &open,
            format!("PUT {ENDPOINT}"),
            json_ct.to_owned(),
            405,
            "method",
        ),
        (
            &locked,
            format!("POST {ENDPOINT}"),
            json_ct.to_owned(),
            401,
            "no token",
        ),
        (
            &locked,
            format!("POST {ENDPOINT}"),
            format!("{json_ct}Authorization: Bearer not.a.jwt\r\n"),
            401,
            "bad token",
        ),
    ] {
        let mut c = ask(gw, &line, &extra);
        let r = c
            .response()
            .unwrap_or_else(|| panic!("{what}: no answer before the body"));
        assert_eq!(r.status, status, "{what}: {}", r.text());
        if status != 404 {
            assert!(r.json()["error"]["code"].is_i64(), "{what}: {}", r.text());
        }
        if status == 401 {
            assert!(
                r.header("www-authenticate")
                    .is_some_and(|h| h.starts_with("Bearer")),
                "{what}: challenge"
            );
        }
        assert_eq!(
            r.header("connection")
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("close"),
            "{what}"
        );
    }
    // A request the head does not refuse still gets 100 and its answer.
    let mut c = ask(&open, &format!("POST {ENDPOINT}"), json_ct);
    assert_eq!(c.response().expect("100 Continue").status, 100);
    c.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.send(body.as_bytes());
    assert_eq!(c.response().unwrap().status, 200);
    // Each early answer was logged with its status, like any other.
    let access: Vec<Value> = open
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "access")
        .collect();
    for status in [404, 415, 406, 403, 405] {
        assert!(
            access.iter().any(|v| v["fields"]["status"] == status),
            "no access line with status {status}: {access:?}"
        );
    }
}

#[test]
fn host_target_and_version_rules() {
    let gw = Gateway::start();
    let body = list_body(3);
    let with = |line: &str, host: &str| {
        format!(
            "{line}\r\n{host}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let req_line = format!("POST {ENDPOINT} HTTP/1.1");
    for (host, what) in [
        ("", "no Host"),
        ("Host: a b\r\n", "space in Host"),
        ("Host: x/y\r\n", "path in Host"),
        ("Host: x\r\nHost: y\r\n", "two Hosts"),
    ] {
        let mut c = one(&gw, with(&req_line, host).as_bytes());
        assert_refused(&mut c, 400, what);
    }
    // Absolute form: routed on the path.
    let mut c = one(
        &gw,
        with(
            &format!("POST http://gw.example{ENDPOINT} HTTP/1.1"),
            "Host: gw.example\r\n",
        )
        .as_bytes(),
    );
    let r = c.response().unwrap();
    assert_eq!(
        (r.status, r.json()["id"].clone()),
        (200, json!(3)),
        "{}",
        r.text()
    );
    // HTTP/1.2 and 1.9 are handled as 1.1 (RFC 9110 §2.5); 2.0 is not 1.x.
    for v in ["1.2", "1.9"] {
        let mut c = one(
            &gw,
            with(&format!("POST {ENDPOINT} HTTP/{v}"), "Host: x\r\n").as_bytes(),
        );
        let r = c.response().unwrap();
        assert_eq!(r.status, 200, "HTTP/{v}: {}", r.text());
    }
    let mut c = one(
        &gw,
        with(&format!("POST {ENDPOINT} HTTP/2.0"), "Host: x\r\n").as_bytes(),
    );
    assert_refused(&mut c, 505, "HTTP/2.0 request line");
    // Two spaces in the request line: malformed, not a 404.
    let mut c = one(
        &gw,
        with(&format!("POST  {ENDPOINT} HTTP/1.1"), "Host: x\r\n").as_bytes(),
    );
    assert_refused(&mut c, 400, "two spaces");
    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut c = one(
        &gw,
        with(&format!("POST {ENDPOINT} HTTP/1.0"), "").as_bytes(),
    );
    let r = c.response().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed(), "HTTP/1.0 connection left open");
    // HTTP/1.0 asking for keep-alive keeps it.
    let mut c = one(
        &gw,
        with(
            &format!("POST {ENDPOINT} HTTP/1.0"),
            "Connection: keep-alive\r\n",
        )
        .as_bytes(),
    );
    let r = c.response().unwrap();
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send(with(&format!("POST {ENDPOINT} HTTP/1.0"), "").as_bytes());
    assert_eq!(c.response().unwrap().status, 200);
}

/// A chunk size over the body limit is refused (413) as soon as its line is read, and a size
/// with too many digits as soon as they are read (400), without waiting for more bytes: the
/// client here sends nothing more, so waiting would end in 408 when the body timeout fires.
#[test]
fn an_oversized_chunk_size_is_refused_at_once() {
    let gw = Gateway::start();
    let head = format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    // 1 MiB announced, the limit is 64 KiB; no data follows.
    let mut c = one(&gw, format!("{head}100000\r\n").as_bytes());
    let v = assert_refused(&mut c, 413, "chunk over the body limit");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("65536"),
        "{v}"
    );
    // A chunk within the limit, then one that takes the body over it.
    let mut c = one(
        &gw,
        format!("{head}8000\r\n{}\r\n8001\r\n", "x".repeat(0x8000)).as_bytes(),
    );
    assert_refused(&mut c, 413, "second chunk over the body limit");
    // Twenty hex digits and no line end yet.
    let mut c = one(&gw, format!("{head}FFFFFFFFFFFFFFFFFFFF").as_bytes());
    let v = assert_refused(&mut c, 400, "a chunk size with too many digits");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chunk size too large"),
        "{v}"
    );
    // No size at all.
    let mut c = one(&gw, format!("{head}zz").as_bytes());
    assert_refused(&mut c, 400, "no chunk size");
}

#[test]
fn a_bare_lf_in_a_chunk_extension_is_refused() {
    let gw = Gateway::start();
    let body = list_body(5);
    let head = format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    // A lenient parser takes `;a\nX` as an extension and reads the body.
    let mut c = one(
        &gw,
        format!("{head}{:x};a\nX\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes(),
    );
    assert_refused(&mut c, 400, "bare LF in a chunk extension");
    // Well-formed extensions are fine.
    let mut c = one(
        &gw,
        format!("{head}{:x};a=b;c=\"d\"\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes(),
    );
    assert_eq!(c.response().unwrap().status, 200);
}

#[test]
fn oversized_heads_get_431_with_a_json_body() {
    let gw = Gateway::start();
    for (what, extra) in [
        (
            "257 headers",
            (0..300)
                .map(|i| format!("X-H{i}: v\r\n"))
                .collect::<String>(),
        ),
        (
            "a 1 MiB header value",
            format!("X-Big: {}\r\n", "a".repeat(1 << 20)),
        ),
        (
            "120 headers",
            (0..120).map(|i| format!("X-H{i}: v\r\n")).collect(),
        ),
    ] {
        let mut c = Client::connect(gw.port);
        // The server may answer before the head is written: write from a
        // thread, read here.
        let mut w = c.s.try_clone().unwrap();
        let bytes = post(1, &extra).into_bytes();
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&bytes);
        });
        let v = assert_refused(&mut c, 431, what);
        assert_eq!(v["error"]["code"], -32600, "{what}");
        writer.join().unwrap();
    }
}

#[test]
fn transport_answers_are_logged_and_counted() {
    let cfg = config_with("", "", "")
        .replace("body_read_timeout_ms = 10000", "body_read_timeout_ms = 300");
    let gw = Gateway::start_with(&cfg);
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let mut c = one(&gw, post(1, &many).as_bytes());
    assert_refused(&mut c, 431, "120 headers");
    let mut c = one(
        &gw,
        format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{").as_bytes(),
    );
    assert_refused(&mut c, 408, "slow body");
    let mut c = one(
        &gw,
        post(1, "Transfer-Encoding: gzip, chunked\r\n").as_bytes(),
    );
    assert_refused(&mut c, 400, "CL+TE");
    let mut c = one(
        &gw,
        format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .as_bytes(),
    );
    assert_refused(&mut c, 501, "gzip");
    let mut c = one(
        &gw,
        format!("GET {ENDPOINT} HTTP/3.0\r\nHost: x\r\n\r\n").as_bytes(),
    );
    assert_refused(&mut c, 505, "HTTP/3.0");
    let mut c = one(
        &gw,
        format!("POST {ENDPOINT} HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n")
            .as_bytes(),
    );
    assert_refused(&mut c, 413, "too large");
    std::thread::sleep(Duration::from_millis(300));
    let logs = gw.logs();
    let lines: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "request")
        .collect();
    for (status, outcome) in [
        (431, "headers_too_large"),
        (408, "body_timeout"),
        (400, "bad_request"),
        (501, "not_implemented"),
        (505, "version_not_supported"),
        (413, "body_too_large"),
    ] {
        assert!(
            lines
                .iter()
                .any(|v| v["fields"]["status"] == status && v["fields"]["outcome"] == outcome),
            "no access line for {status}: {logs}"
        );
    }
    let metrics = request(gw.admin, "GET", "/metrics", &[], b"").text();
    for status in ["400", "408", "413", "431", "501", "505"] {
        assert!(
            metrics.lines().any(|l| l.starts_with("aap_requests_total")
                && l.contains(&format!("status=\"{status}\""))),
            "no aap_requests_total for {status}: {metrics}"
        );
    }
}

fn limited(global: usize, per_ip: usize) -> Gateway {
    let cfg = config_with("", "", "")
        .replace(
            "max_connections = 10000",
            &format!("max_connections = {global}"),
        )
        .replace(
            "max_connections_per_ip = 1000",
            &format!("max_connections_per_ip = {per_ip}"),
        );
    Gateway::start_with(&cfg)
}

#[test]
fn connection_limits_refuse_with_a_clear_answer() {
    for (global, per_ip, status) in [(3, 0, 503), (0, 3, 429)] {
        let gw = limited(global, per_ip);
        // Each held connection is answered once (and kept alive), so the
        // gateway has surely accepted and counted it: a fixed sleep was not
        // enough on a loaded 2-core CI machine.
        let held: Vec<Client> = (0..3)
            .map(|i| {
                let mut c = one(&gw, post(10 + i, "").as_bytes());
                assert_eq!(c.response().unwrap().status, 200, "held connection {i}");
                c
            })
            .collect();
        let mut c = one(&gw, post(1, "").as_bytes());
        let v = assert_refused(&mut c, status, "over the limit");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("connections"),
            "{v}"
        );
        drop(held);
        // The gateway notices the closes asynchronously: retry (bounded)
        // until a slot is seen free.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let served = loop {
            let mut c = one(&gw, post(2, "").as_bytes());
            let got = c.response().map(|r| r.status);
            if got == Some(200) || std::time::Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(served, Some(200), "served once a slot is free");
        let metrics = request(gw.admin, "GET", "/metrics", &[], b"").text();
        assert!(
            metrics.contains(&format!("status=\"{status}\"")),
            "{metrics}"
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Silent connections (no byte sent) cost little, and the memory comes back
/// after they close.
#[test]
fn silent_connections_are_cheap_and_memory_returns() {
    let gw = limited(0, 0);
    let pid = gw.child.as_ref().unwrap().id();
    // Warm up: a few requests so the steady state is allocated.
    for id in 0..20 {
        let mut c = one(&gw, post(id, "Connection: close\r\n").as_bytes());
        assert_eq!(c.response().unwrap().status, 200);
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(pid);
    let n = 3000;
    let held: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(("127.0.0.1", gw.port)).unwrap())
        .collect();
    // Every connection accepted and waiting for its first byte.
    let mut c = one(&gw, post(1, "Connection: close\r\n").as_bytes());
    assert_eq!(c.response().unwrap().status, 200);
    std::thread::sleep(Duration::from_secs(1));
    let during = rss_kib(pid);
    let per_conn = (during.saturating_sub(before)) / n;
    // Pingora's buffers made it about 110 KiB; the task, the socket's
    // Pingora stream and the allocator's share are left (about 13 KiB).
    assert!(
        per_conn <= 32,
        "{per_conn} KiB per silent connection ({before} → {during} KiB)"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = rss_kib(pid);
    while after > before + (during - before) / 2 + 4096 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        after = rss_kib(pid);
    }
    eprintln!("RSS {before} → {during} → {after} KiB for {n} silent connections");
    assert!(
        after <= before + (during - before) / 2 + 4096,
        "memory not returned: {before} → {during} → {after} KiB"
    );
    assert_eq!(
        one(&gw, post(2, "").as_bytes()).response().unwrap().status,
        200
    );
}

/// Clients that are still writing a body when the early answer comes read
/// the answer (lingering close), not a reset or a broken pipe.
#[test]
fn real_clients_read_early_rejections() {
    let gw = Gateway::start();
    let url = format!("http://127.0.0.1:{}{ENDPOINT}", gw.port);
    let big = 4 << 20;
    let python = r#"
import sys, json, urllib.request, urllib.error, requests
url, n = sys.argv[1], int(sys.argv[2])
body = b'{"x":"' + b"a" * n + b'"}'
r = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=20)
print("requests", r.status_code, r.json()["error"]["code"])
try:
    urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"}), timeout=20)
    print("urllib 200")
except urllib.error.HTTPError as e:
    print("urllib", e.code, json.loads(e.read())["error"]["code"])
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(python)
        .arg(&url)
        .arg(big.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("requests 413 -32600") && text.contains("urllib 413 -32600"),
        "python: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = r#"
const [url, n] = process.argv.slice(1);
const body = '{"x":"' + 'a'.repeat(Number(n)) + '"}';
fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json' } })
  .then(async (r) => console.log('fetch', r.status, (await r.json()).error.code))
  .catch((e) => console.log('fetch failed', e.cause ? e.cause.code : e.message));
"#;
    let out = std::process::Command::new("node")
        .arg("-e")
        .arg(node)
        .arg(&url)
        .arg(big.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fetch 413 -32600"),
        "node: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Property: no byte sequence yields two different framings. Requests generated from the
/// framing vocabulary (Host, Content-Length and Transfer-Encoding variants, chunked bodies with
/// extensions and trailers, pipelining), then mutated byte by byte, are framed by
/// `h1::frame` from the whole input and from the same bytes arriving in random pieces (the
/// connection loop looks at every prefix); the chunked decoder is also fed in pieces with its
/// state kept, as the connection loop does. Every way must give the same requests (method,
/// target, body, end) or the same refusal. Seeded: a failure prints the seed and the input.
#[test]
fn property_no_byte_sequence_yields_two_framings() {
    use aap_gateway::ingress::h1::{self, HeadLimits};
    const CASES: u64 = 20_000;
    let limits = HeadLimits {
        max_headers: 100,
        max_header_bytes: 4096,
    };
    let max_body = 4096;
    // (method, path, query, body, end) per request, then the refusal status if any.
    type Outcome = (
        Vec<(String, String, Option<String>, Vec<u8>, usize)>,
        Option<u16>,
    );
    let whole = |data: &[u8]| -> Outcome {
        let mut buf = data.to_vec();
        let (mut got, mut at) = (Vec::new(), 0);
        while got.len() < 3 {
            match h1::frame(&mut buf[at..], &limits, max_body) {
                Ok(Some(f)) => {
                    at += f.consumed;
                    got.push((f.head.method, f.head.path, f.head.query, f.body, at));
                    if !f.head.keep_alive {
                        break;
                    }
                }
                Ok(None) => break,
                Err(r) => return (got, Some(r.status)),
            }
        }
        (got, None)
    };
    // The same bytes arriving in pieces: every prefix is looked at, the first verdict stands.
    let pieces = |data: &[u8], rng: &mut fastrand::Rng| -> Outcome {
        let mut buf: Vec<u8> = Vec::new();
        let (mut got, mut at, mut fed) = (Vec::new(), 0, 0);
        loop {
            match h1::frame(&mut buf.clone()[at..], &limits, max_body) {
                Ok(Some(f)) => {
                    at += f.consumed;
                    got.push((f.head.method, f.head.path, f.head.query, f.body, at));
                    if !f.head.keep_alive || got.len() == 3 {
                        return (got, None);
                    }
                    continue;
                }
                Ok(None) if fed == data.len() => return (got, None),
                Ok(None) => {}
                Err(r) => return (got, Some(r.status)),
            }
            let n = rng.usize(1..=(data.len() - fed).min(64));
            buf.extend_from_slice(&data[fed..fed + n]);
            fed += n;
        }
    };
    let chunked_pieces =
        |data: &[u8], rng: &mut fastrand::Rng| -> Result<Option<(Vec<u8>, usize)>, u16> {
            let mut d = h1::Chunked::new(limits.max_header_bytes);
            let (mut buf, mut body, mut fed, mut used) = (Vec::new(), Vec::new(), 0, 0);
            loop {
                match d.decode(&buf).map_err(|r| h1::Refusal::from(r).status)? {
                    h1::Step::Progress { consumed, data: r } => {
                        body.extend_from_slice(&buf[r]);
                        buf.drain(..consumed);
                        used += consumed;
                    }
                    h1::Step::Done { consumed } => return Ok(Some((body, used + consumed))),
                    h1::Step::More if fed == data.len() => return Ok(None),
                    h1::Step::More => {
                        let n = rng.usize(1..=(data.len() - fed).min(16));
                        buf.extend_from_slice(&data[fed..fed + n]);
                        fed += n;
                    }
                }
            }
        };
    let seed = std::env::var("AAP_PROPERTY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00AA_9000_u64);
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut accepted, mut refused) = (0u64, 0u64);
    for case in 0..CASES {
        let (data, chunked_at) = request_bytes(&mut rng);
        let a = whole(&data);
        let b = pieces(&data, &mut rng);
        let shown = String::from_utf8_lossy(&data);
        assert_eq!(a, b, "seed {seed} case {case}: two framings of {shown:?}");
        if let Some(at) = chunked_at.filter(|&at| at <= data.len()) {
            let once = chunked_pieces(&data[at..], &mut fastrand::Rng::with_seed(1));
            let split = chunked_pieces(&data[at..], &mut rng);
            assert_eq!(once, split, "seed {seed} case {case}: chunked {shown:?}");
        }
        if a.0.is_empty() {
            refused += 1;
        } else {
            accepted += 1;
        }
    }
    // The generator reaches both sides of the boundary.
    assert!(
        accepted > CASES / 50 && refused > CASES / 50,
        "{accepted} accepted, {refused} refused"
    );
}

/// One generated input: a request (or two, pipelined) from the framing vocabulary with a few
/// byte mutations, and where its first chunked body starts when it has one.
fn request_bytes(rng: &mut fastrand::Rng) -> (Vec<u8>, Option<usize>) {
    let pick = |rng: &mut fastrand::Rng, xs: &[&'static str]| xs[rng.usize(..xs.len())];
    let mut out = Vec::new();
    let mut chunked_at = None;
    for _ in 0..rng.usize(1..=2) {
        if rng.u8(..) < 20 {
            out.extend_from_slice(b"\r\n");
        }
        let method = pick(rng, &["GET", "POST", "OPTIONS", "PUT"]);
        let target = pick(
            rng,
            &[
                "/mcp",
                "/a?b=c",
                "http://a.example/mcp",
                "*",
                "HTTP://A.example:80",
                "/%2e",
            ],
        );
        let version = pick(
            rng,
            &["HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "http/1.1"],
        );
        out.extend_from_slice(format!("{method} {target} {version}\r\n").as_bytes());
        let body: Vec<u8> = (0..rng.usize(0..40))
            .map(|_| rng.alphanumeric() as u8)
            .collect();
        let chunked = rng.bool();
        let mut headers: Vec<String> = Vec::new();
        for _ in 0..rng.usize(0..4) {
            headers.push(
                pick(
                    rng,
                    &[
                        "Host: a.example",
                        "Host: a.example.",
                        "Host: b.example",
                        "Host: [::1]:80",
                        "Host:",
                        "Connection: close",
                        "Connection: keep-alive",
                        "Expect: 100-continue",
                        "Transfer-Encoding: chunked",
                        "Transfer-Encoding: gzip, chunked",
                        "Transfer-Encoding: chunked, identity",
                        "Transfer-Encoding:  chunked ",
                        "Content-Length: 0",
                        "Content-Length: +1",
                        "Content-Length: 1, 1",
                        "X: y",
                    ],
                )
                .to_owned(),
            );
        }
        if chunked {
            headers.push("Transfer-Encoding: chunked".into());
        } else if rng.bool() {
            headers.push(format!("Content-Length: {}", body.len()));
        }
        rng.shuffle(&mut headers);
        for h in &headers {
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if chunked {
            chunked_at.get_or_insert(out.len());
            let mut rest = &body[..];
            while !rest.is_empty() {
                let n = rng.usize(1..=rest.len());
                let ext = pick(rng, &["", ";a", ";a=b", ";a=\"q\\\"\"", " ; a = b", ";"]);
                out.extend_from_slice(format!("{n:x}{ext}\r\n").as_bytes());
                out.extend_from_slice(&rest[..n]);
                out.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            out.extend_from_slice(b"0\r\n");
            if rng.bool() {
                out.extend_from_slice(
                    pick(rng, &["T: v\r\n", "Bad Trailer\r\n", ": x\r\n"]).as_bytes(),
                );
            }
            out.extend_from_slice(b"\r\n");
        } else {
            out.extend_from_slice(&body);
        }
    }
    // A few mutations: the bytes framing hinges on.
    for _ in 0..rng.usize(0..3) {
        if out.is_empty() {
            break;
        }
        let at = rng.usize(..out.len());
        let b = *[
            b'\r', b'\n', b' ', b'\t', b':', b';', b'0', b'f', b'"', 0, 0x7f,
        ][..]
            .get(rng.usize(..11))
            .unwrap_or(&b'x');
        match rng.u8(..3) {
            0 => out[at] = b,
            1 => out.insert(at, b),
            _ => {
                out.remove(at);
            }
        }
    }
    (out, chunked_at)
}
