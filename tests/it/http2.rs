//! HTTP/2 on the public listener against the real binary: curl over TLS (ALPN) and h2c, the
//! official Python MCP SDK over HTTP/2, and a Rust `h2` client for concurrent streams,
//! per-stream limit violations, the idle timeout and the GOAWAY of a draining gateway.

use crate::support::*;
use bytes::Bytes;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The shipped config with TLS from [`test_ca`]'s files.
fn tls_config(dir: &Path) -> String {
    config_with("", "", "").replace(
        "name = \"aap-gateway\"\n",
        &format!(
            "name = \"aap-gateway\"\ntls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            dir.join("server.pem"),
            dir.join("server.key")
        ),
    )
}

/// The shipped config with h2c on and `limits` replacing lines of `[limits]`.
fn h2c_config(limits: &[(&str, &str)]) -> String {
    let mut c = config_with("", "", "").replace("h2c = false", "h2c = true");
    for (from, to) in limits {
        assert!(c.contains(from), "{from}");
        c = c.replace(from, to);
    }
    c
}

fn tools_list() -> String {
    modern("tools/list", json!({})).to_string()
}

/// `curl -i` with `args`, POSTing `body` as JSON: (status line, headers, body).
fn curl(args: &[&str], url: &str, body: &str) -> (String, String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20"])
        .args(args)
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", "Accept: application/json, text/event-stream"])
        .args(["--data", body])
        .arg(url)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let end = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out.stdout[..end]).to_string();
    let (status, headers) = head.split_once("\r\n").unwrap_or((&head, ""));
    (
        status.trim().to_owned(),
        headers.to_ascii_lowercase(),
        out.stdout[end + 4..].to_vec(),
    )
}

fn tool_count(body: &[u8]) -> usize {
    let v: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)));
    v["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {v}"))
        .len()
}

#[test]
fn curl_over_tls_negotiates_http2_by_alpn() {
    let dir = temp_dir("h2tls");
    let ca = test_ca(&dir);
    let gw = Gateway::start_with(&tls_config(&dir));
    let url = format!("https://127.0.0.1:{}{ENDPOINT}", gw.port);
    let ca = ca.display().to_string();
    let (status, headers, body) = curl(&["--http2", "--cacert", &ca], &url, &tools_list());
    assert_eq!(status, "HTTP/2 200", "{headers}");
    assert_eq!(tool_count(&body), 5);
    let id = headers
        .lines()
        .find_map(|l| l.strip_prefix("x-correlation-id: "))
        .expect("x-correlation-id")
        .trim()
        .to_owned();
    assert!(
        gw.logs().contains(&format!("\"correlation_id\":\"{id}\"")),
        "the HTTP/2 request has its access-log line"
    );
    // A client that offers only http/1.1 is still served HTTP/1.1.
    let (status, _, body) = curl(&["--http1.1", "--cacert", &ca], &url, &tools_list());
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(tool_count(&body), 5);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn curl_h2c_with_prior_knowledge_when_configured() {
    let gw = Gateway::start_with(&h2c_config(&[]));
    let url = format!("http://127.0.0.1:{}{ENDPOINT}", gw.port);
    let (status, headers, body) = curl(&["--http2-prior-knowledge"], &url, &tools_list());
    assert_eq!(status, "HTTP/2 200", "{headers}");
    assert!(headers.contains("x-correlation-id: "), "{headers}");
    assert_eq!(tool_count(&body), 5);
    // HTTP/1.1 on the same listener as before.
    let (status, _, body) = curl(&["--http1.1"], &url, &tools_list());
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(tool_count(&body), 5);
}

#[test]
fn without_h2c_the_preface_is_refused() {
    let gw = Gateway::start();
    let r = raw(gw.port, PREFACE).expect("an HTTP/1 answer");
    assert_eq!(r.status, 505, "{}", r.text());
    assert_eq!(r.error_code(), -32600, "{}", r.text());
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
        .args([
            "-H",
            "Content-Type: application/json",
            "--data",
            &tools_list(),
        ])
        .arg(format!("http://127.0.0.1:{}{ENDPOINT}", gw.port))
        .output()
        .expect("curl");
    assert!(
        !out.status.success(),
        "h2c is off: curl must not get an answer"
    );
}

fn python_sdk(url: &str, ca: Option<&Path>) {
    let mut cmd = Command::new(venv_python());
    cmd.arg(repo().join("tests/sdk/python/http2_client.py"))
        .arg(url);
    if let Some(ca) = ca {
        cmd.arg(ca);
    }
    let out = cmd.output().expect("run http2_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("http2-sdk: ok"),
        "{url}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_python_mcp_sdk_lists_and_calls_every_tool_over_http2() {
    ensure_upstreams();
    let dir = temp_dir("h2sdk");
    let ca = test_ca(&dir);
    let gw = Gateway::start_with(&tls_config(&dir));
    python_sdk(
        &format!("https://127.0.0.1:{}{ENDPOINT}", gw.port),
        Some(&ca),
    );
    assert_eq!(leads_in(&gw.state), 1, "the lead went through");
    drop(gw);
    let gw = Gateway::start_with(&h2c_config(&[]));
    python_sdk(&format!("http://127.0.0.1:{}{ENDPOINT}", gw.port), None);
    std::fs::remove_dir_all(dir).ok();
}

// ---- A Rust `h2` client: several streams on one connection ----------------------------------

struct H2Resp {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl H2Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

type Driver = tokio::task::JoinHandle<Result<(), h2::Error>>;

/// One h2c connection: the request handle, the task driving the connection, and the
/// SETTINGS_MAX_CONCURRENT_STREAMS the gateway announced (0 until its SETTINGS arrive).
async fn connect(port: u16) -> (h2::client::SendRequest<Bytes>, Driver, Arc<AtomicUsize>) {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (send, mut conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let max = Arc::new(AtomicUsize::new(0));
    let seen = max.clone();
    let driver = tokio::spawn(async move {
        std::future::poll_fn(|cx| {
            let r = std::pin::Pin::new(&mut conn).poll(cx);
            seen.store(conn.max_concurrent_send_streams(), Ordering::Relaxed);
            r
        })
        .await
    });
    (send, driver, max)
}

use std::future::Future as _;

/// POST `body` to the tenant's endpoint on its own stream.
async fn post(
    send: &h2::client::SendRequest<Bytes>,
    port: u16,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<H2Resp, h2::Error> {
    let mut send = send.clone().ready().await?;
    let mut req = h2_mcp_post(&format!("127.0.0.1:{port}"));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let (resp, mut tx) = send.send_request(req.body(()).unwrap(), false)?;
    // The gateway may answer (and reset the rest) before the whole body is sent.
    let _ = tx.send_data(Bytes::from(body), true);
    let resp = resp.await?;
    let (parts, mut rx) = resp.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = rx.data().await {
        let chunk = chunk?;
        let _ = rx.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    Ok(H2Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

#[test]
fn many_concurrent_streams_share_one_connection() {
    let gw = Gateway::start_with(&h2c_config(&[(
        "max_concurrent_streams = 100",
        "max_concurrent_streams = 16",
    )]));
    let port = gw.port;
    runtime().block_on(async move {
        let (send, driver, max) = connect(port).await;
        // The gateway's SETTINGS first: a client that opens streams before it knows the limit
        // has the extra ones refused (REFUSED_STREAM, tested below with raw frames).
        let settings = async {
            while max.load(Ordering::Relaxed) != 16 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), settings)
            .await
            .expect("SETTINGS_MAX_CONCURRENT_STREAMS is limits.max_concurrent_streams");
        let mut streams = tokio::task::JoinSet::new();
        for i in 0..64 {
            let send = send.clone();
            streams.spawn(async move {
                let body = if i % 2 == 0 {
                    modern("tools/list", json!({}))
                } else {
                    modern(
                        "tools/call",
                        json!({"name": "aap_dealer_information",
                               "arguments": {"type": "dealer.information.request"}}),
                    )
                };
                let r = post(&send, port, &[], body.to_string().into_bytes())
                    .await
                    .expect("stream");
                (i, r)
            });
        }
        let mut ids = std::collections::HashSet::new();
        while let Some(done) = streams.join_next().await {
            let (i, r) = done.unwrap();
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let v = r.json();
            if i % 2 == 0 {
                assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 5);
            } else {
                assert_eq!(
                    v["result"]["structuredContent"]["type"], "dealer.information.response",
                    "{v}"
                );
            }
            ids.insert(r.headers["x-correlation-id"].to_str().unwrap().to_owned());
        }
        assert_eq!(ids.len(), 64, "each stream is its own request");
        assert!(!driver.is_finished(), "the connection is still open");
    });
    let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert!(m.contains("aap_requests_total"), "{m}");
}

#[test]
fn a_body_over_several_data_frames_is_read_whole() {
    // One frame is kept as it came; several are joined: both must give the same request.
    let gw = Gateway::start_with(&h2c_config(&[]));
    let port = gw.port;
    runtime().block_on(async move {
        let (send, _driver, _) = connect(port).await;
        let one = tools_list().into_bytes();
        // Leading whitespace is JSON's; 40 KB needs three DATA frames of 16 KiB.
        let mut several = vec![b' '; 40_000];
        several.extend_from_slice(&one);
        for body in [one, several] {
            let len = body.len();
            let r = post(&send, port, &[], body).await.expect("answered");
            assert_eq!(r.status, 200, "a {len}-byte body");
            assert_eq!(
                r.json()["result"]["tools"].as_array().map(Vec::len),
                Some(5),
                "a {len}-byte body"
            );
        }
    });
}

#[test]
fn a_header_or_body_violation_fails_only_its_stream() {
    let gw = Gateway::start_with(&h2c_config(&[]));
    let port = gw.port;
    runtime().block_on(async move {
        let (send, driver, _) = connect(port).await;
        let ok = || tools_list().into_bytes();
        // Over limits.max_header_bytes (16384) but within the advertised header list.
        let big = "x".repeat(17_000);
        let many: Vec<(String, String)> =
            (0..101).map(|i| (format!("x-h{i}"), "v".into())).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        let big_header = [("x-big", big.as_str())];
        let declared = [("content-length", "100000")];
        let (header, count, body, length, fine) = tokio::join!(
            post(&send, port, &big_header, ok()),
            post(&send, port, &many, ok()),
            // Over limits.max_body_bytes (65536) with no Content-Length.
            post(&send, port, &[], vec![b' '; 70_000]),
            post(&send, port, &declared, vec![b' '; 100_000]),
            post(&send, port, &[], ok()),
        );
        for (what, r, status) in [
            ("header bytes", header, 431),
            ("header count", count, 431),
            ("body", body, 413),
            ("declared length", length, 413),
        ] {
            let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(r.status, status, "{what}");
            assert_eq!(r.json()["error"]["code"], -32600, "{what}");
            assert!(r.headers.contains_key("x-correlation-id"), "{what}");
        }
        let fine = fine.expect("the good stream");
        assert_eq!(fine.status, 200);
        assert_eq!(fine.json()["result"]["tools"].as_array().unwrap().len(), 5);
        // Far over the advertised SETTINGS_MAX_HEADER_LIST_SIZE: `h2` answers 431 itself
        // (or resets the stream); either way only this stream.
        let huge = "y".repeat(40_000);
        match post(&send, port, &[("x-huge", &huge)], ok()).await {
            Ok(r) => assert_eq!(r.status, 431),
            Err(e) => assert!(e.is_reset(), "{e}"),
        }
        let after = post(&send, port, &[], ok()).await.expect("still served");
        assert_eq!(after.status, 200);
        assert!(
            !driver.is_finished(),
            "the connection survived every violation"
        );
    });
    let logs = gw.logs();
    for (status, outcome) in [(431, "headers_too_large"), (413, "body_too_large")] {
        assert!(
            logs.lines()
                .any(|l| l.contains(&format!("\"status\":{status}"))
                    && l.contains(&format!("\"outcome\":\"{outcome}\""))),
            "no access-log line with {status} {outcome}"
        );
    }
}

#[test]
fn idle_and_draining_connections_end_with_goaway() {
    let gw = Gateway::start_with(&h2c_config(&[
        ("idle_timeout_secs = 60", "idle_timeout_secs = 1"),
        (
            "header_read_timeout_ms = 10000",
            "header_read_timeout_ms = 1000",
        ),
    ]));
    let port = gw.port;
    runtime().block_on(async move {
        // Idle: after one request, nothing for idle_timeout_secs → GOAWAY, a clean close.
        let (send, driver, _) = connect(port).await;
        let r = post(&send, port, &[], tools_list().into_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        let closed = tokio::time::timeout(Duration::from_secs(10), driver)
            .await
            .expect("closed after the idle timeout");
        assert!(matches!(closed, Ok(Ok(()))), "{closed:?}");
        // A preface and then nothing: closed after the header timeout.
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut tcp, PREFACE)
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let eof = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match tokio::io::AsyncReadExt::read(&mut tcp, &mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            eof.is_ok(),
            "a connection that never sends a request is closed"
        );
    });
    // Draining (SIGTERM with a drain delay): an open connection gets a GOAWAY and closes
    // cleanly while the listener still accepts.
    let gw = Gateway::start_with(
        &h2c_config(&[]).replace("shutdown_drain_secs = 0", "shutdown_drain_secs = 5"),
    );
    let port = gw.port;
    let pid = gw.child.as_ref().unwrap().id();
    runtime().block_on(async move {
        let (send, driver, _) = connect(port).await;
        let r = post(&send, port, &[], tools_list().into_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        signal(pid, "TERM");
        let closed = tokio::time::timeout(Duration::from_secs(4), driver)
            .await
            .expect("GOAWAY within the drain delay");
        assert!(matches!(closed, Ok(Ok(()))), "{closed:?}");
    });
    assert!(
        try_request(gw.admin, "GET", "/readyz", &[], b"").map_or(true, |r| r.status == 503),
        "draining"
    );
}

/// A gateway on h2c in front of a streaming MCP upstream that holds its result after the
/// first progress event until the file `hold` exists.
fn held_sse_gateway(hold: &Path) -> (Peer, Gateway) {
    let hold_arg = hold.display().to_string();
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--sse", "--hold-until", &hold_arg],
        &[],
    );
    let backend = format!(
        "kind = \"mcp\"\npeers = [{:?}]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nhealth_check_interval_ms = 500\n",
        peer.url()
    );
    let config = forwarding_config(&backend).replacen("[server]\n", "[server]\nh2c = true\n", 1);
    (peer, Gateway::start_with(&config))
}

/// A search `tools/call` with `progress_token` on a new HTTP/2 connection: the answer's head
/// (waited for), the stream's sending half, and the connection (kept open by the caller).
async fn held_search(
    port: u16,
    progress_token: &str,
) -> (
    h2::client::SendRequest<Bytes>,
    Driver,
    http::Response<h2::RecvStream>,
    h2::SendStream<Bytes>,
) {
    let (send, driver, _) = connect(port).await;
    let mut call = modern(
        "tools/call",
        json!({"name": "aap_inventory_search",
               "arguments": {"type": "inventory.search.request", "pagination": {"limit": 5}}}),
    );
    call["params"]["_meta"]["progressToken"] = json!(progress_token);
    let mut send = send.ready().await.unwrap();
    let req = h2_mcp_post(&format!("127.0.0.1:{port}")).body(()).unwrap();
    let (resp, mut tx) = send.send_request(req, false).unwrap();
    tx.send_data(Bytes::from(call.to_string()), true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(15), resp)
        .await
        .expect("the head while the upstream holds")
        .unwrap();
    (send, driver, resp, tx)
}

/// The SSE path on HTTP/2: a tools/call with a progress token to a streaming MCP upstream
/// gets `text/event-stream` on its stream, the first progress event arriving while the
/// upstream still holds its result (it waits for a file the test writes after that event).
#[test]
fn sse_progress_streams_on_an_http2_stream() {
    let hold = temp_dir("h2hold").join("release");
    let (_peer, gw) = held_sse_gateway(&hold);
    let port = gw.port;
    runtime().block_on(async move {
        let (_send, _driver, resp, _tx) = held_search(port, "h2-live").await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert!(!resp.headers().contains_key("content-length"));
        let mut rx = resp.into_body();
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("notifications/progress") {
            let chunk = tokio::time::timeout(Duration::from_secs(15), rx.data())
                .await
                .expect("the first event while the upstream holds")
                .expect("the stream is open")
                .unwrap();
            let _ = rx.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        let first = String::from_utf8_lossy(&got).to_string();
        assert!(
            !first.contains("\"result\""),
            "result before release: {first}"
        );
        std::fs::write(&hold, b"go").unwrap();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(15), rx.data())
            .await
            .expect("the rest of the stream")
        {
            let chunk = chunk.unwrap();
            let _ = rx.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
        let all = String::from_utf8_lossy(&got);
        assert!(all.contains("\"resultType\":\"complete\""), "{all}");
    });
}

/// A streamed read whose client resets its stream after the first event is cancelled at
/// once, its upstream call with it (a write would run to completion).
#[test]
fn a_reset_streamed_read_is_cancelled() {
    let hold = temp_dir("h2cancel").join("release");
    let (_peer, gw) = held_sse_gateway(&hold);
    let port = gw.port;
    runtime().block_on(async move {
        let (_send, _driver, resp, mut tx) = held_search(port, "h2-cancel").await;
        let mut rx = resp.into_body();
        let chunk = tokio::time::timeout(Duration::from_secs(15), rx.data())
            .await
            .expect("the first event")
            .expect("the stream is open")
            .unwrap();
        assert!(String::from_utf8_lossy(&chunk).contains("notifications/progress"));
        tx.send_reset(h2::Reason::CANCEL);
        drop(rx);
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw.logs().contains("streamed read cancelled") {
        assert!(
            Instant::now() < deadline,
            "the read was not cancelled: {}",
            gw.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The upstream still holds (it is released only now): the cancellation did not wait for it.
    assert!(!hold.exists());
}

/// HTTP/2 connections count against the same connection limits as HTTP/1 ones: over
/// `limits.max_connections_per_ip`, the stream on the refused connection gets the 429.
#[test]
fn connection_limits_apply_to_http2() {
    let gw = Gateway::start_with(&h2c_config(&[(
        "max_connections_per_ip = 1000",
        "max_connections_per_ip = 1",
    )]));
    let port = gw.port;
    runtime().block_on(async move {
        // The readiness probe's own connection to the listener (closed at once) may not be
        // counted out yet on a loaded machine: the first connection waits for it.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (held, held_driver) = loop {
            let (held, held_driver, _) = connect(port).await;
            let r = post(&held, port, &[], tools_list().into_bytes())
                .await
                .unwrap();
            if r.status == 200 {
                break (held, held_driver);
            }
            assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
            assert!(
                Instant::now() < deadline,
                "the probe's connection never ended"
            );
            drop((held, held_driver));
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (second, _d, _) = connect(port).await;
        let r = post(&second, port, &[], tools_list().into_bytes())
            .await
            .expect("an answer on the refused connection");
        assert_eq!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.headers["retry-after"], "1");
        assert_eq!(r.json()["error"]["data"]["retry_after_ms"], 1000);
        // The admitted connection goes on.
        let r = post(&held, port, &[], tools_list().into_bytes())
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        assert!(!held_driver.is_finished());
    });
}

/// Raw HTTP/2 frames from PyPI `h2` with its own header checks off: what the gateway's HTTP/2
/// layer must refuse by itself, stream by stream. Prints one JSON object: per stream id, the
/// `:status` and body, or the RST_STREAM error code.
const RAW_CLIENT: &str = r#"
import json, socket, sys
import h2.config, h2.connection, h2.events
port, path, body = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
plan = json.loads(sys.argv[4])  # [[stream id, extra headers, send the body now]]
s = socket.create_connection(("127.0.0.1", port), timeout=15)
c = h2.connection.H2Connection(h2.config.H2Configuration(
    client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False))
c.initiate_connection()
base = [(":method", "POST"), (":scheme", "http"), (":authority", f"127.0.0.1:{port}"),
        (":path", path), ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream")]
for sid, extra, now in plan:
    c.send_headers(sid, base + [tuple(h) for h in extra], end_stream=False)
    if now:
        c.send_data(sid, body, end_stream=True)
s.sendall(c.data_to_send())
out, pending = {}, {sid for sid, _, _ in plan}
late = [sid for sid, _, now in plan if not now]
while pending:
    data = s.recv(65536)
    if not data:
        break
    for ev in c.receive_data(data):
        if isinstance(ev, h2.events.ResponseReceived):
            out.setdefault(str(ev.stream_id), {})["status"] = dict(ev.headers)[b":status"].decode()
        elif isinstance(ev, h2.events.DataReceived):
            c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            o = out.setdefault(str(ev.stream_id), {})
            o["body"] = o.get("body", "") + ev.data.decode()
        elif isinstance(ev, h2.events.StreamEnded):
            pending.discard(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            out.setdefault(str(ev.stream_id), {})["reset"] = int(ev.error_code)
            pending.discard(ev.stream_id)
    # Once every stream sent with its body is done, finish the ones held open.
    if late and not (pending - set(late)):
        for sid in late:
            if sid in pending:
                c.send_data(sid, body, end_stream=True)
        late = []
    s.sendall(c.data_to_send())
print(json.dumps(out))
"#;

fn raw_h2(port: u16, plan: Value) -> Value {
    ensure_upstreams();
    let out = Command::new(venv_python())
        .args(["-c", RAW_CLIENT])
        .arg(port.to_string())
        .arg(ENDPOINT)
        .arg(tools_list())
        .arg(plan.to_string())
        .output()
        .expect("python h2 client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// RFC 9113 §8.2.2: a connection-specific header field makes the request malformed; that
/// stream is reset (PROTOCOL_ERROR = 1), the others on the connection are answered. A stream
/// over `limits.max_concurrent_streams` is refused (REFUSED_STREAM = 7) alone as well.
#[test]
fn malformed_and_excess_streams_are_reset_alone() {
    let gw = Gateway::start_with(&h2c_config(&[(
        "max_concurrent_streams = 100",
        "max_concurrent_streams = 3",
    )]));
    let got = raw_h2(
        gw.port,
        json!([
            [1, [["connection", "keep-alive"]], true],
            [3, [], true],
            [5, [["te", "gzip"]], true],
            [7, [["transfer-encoding", "chunked"]], true],
            [9, [], true],
        ]),
    );
    for sid in ["1", "5", "7"] {
        assert_eq!(got[sid]["reset"], 1, "stream {sid}: {got}");
        assert!(got[sid].get("status").is_none(), "{got}");
    }
    for sid in ["3", "9"] {
        assert_eq!(got[sid]["status"], "200", "stream {sid}: {got}");
        assert_eq!(tool_count(got[sid]["body"].as_str().unwrap().as_bytes()), 5);
    }
    // Three streams held open (their bodies not sent yet), a fourth over the limit.
    let got = raw_h2(
        gw.port,
        json!([
            [1, [], false],
            [3, [], false],
            [5, [], false],
            [7, [], true]
        ]),
    );
    assert_eq!(got["7"]["reset"], 7, "{got}");
    for sid in ["1", "3", "5"] {
        assert_eq!(got[sid]["status"], "200", "stream {sid}: {got}");
    }
}

/// RFC 9113 §8.3.1: a `host` header naming another host than `:authority` makes the request
/// malformed: refused (400), never routed by `host`. Agreeing (case, trailing dot aside): served.
#[test]
fn an_authority_and_a_different_host_header_are_refused() {
    let gw = Gateway::start_with(&h2c_config(&[]));
    let port = gw.port;
    runtime().block_on(async move {
        let (send, _driver, _) = connect(port).await;
        let ask = |authority: String, host: Option<String>| {
            let send = send.clone();
            async move {
                let mut send = send.ready().await.unwrap();
                let mut req = h2_mcp_post(&authority)
                    .header("mcp-protocol-version", MODERN)
                    .header("mcp-method", "tools/list");
                if let Some(h) = host {
                    req = req.header("host", h);
                }
                let (resp, mut tx) = send.send_request(req.body(()).unwrap(), false).unwrap();
                let _ = tx.send_data(Bytes::from(tools_list()), true);
                let resp = resp.await.unwrap();
                let (parts, mut rx) = resp.into_parts();
                let mut body = Vec::new();
                while let Some(chunk) = rx.data().await {
                    let chunk = chunk.unwrap();
                    let _ = rx.flow_control().release_capacity(chunk.len());
                    body.extend_from_slice(&chunk);
                }
                (
                    parts.status.as_u16(),
                    String::from_utf8_lossy(&body).into_owned(),
                )
            }
        };
        let (status, body) = ask(format!("127.0.0.1:{port}"), Some("other.example".into())).await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(":authority"), "{body}");
        let (status, body) = ask(format!("a.example:{port}"), Some("b.example".into())).await;
        assert_eq!(status, 400, "{body}");
        let (status, body) = ask(
            format!("localhost:{port}"),
            Some(format!("LOCALHOST.:{port}")),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(tool_count(body.as_bytes()), 5);
        let (status, body) = ask(format!("127.0.0.1:{port}"), None).await;
        assert_eq!(status, 200, "{body}");
    });
}
