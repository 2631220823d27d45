//! HTTP/2 abuse against the real binary over real sockets: a paced rapid-reset client (h2c
//! and TLS) against a slow MCP upstream, connections whose answers are never read, and the
//! RFC 9113 error codes of malformed frames, sent as raw bytes.

use crate::support::*;
use bytes::Bytes;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `config` with each `(from, to)` replaced (every `from` must be there).
fn edit(mut config: String, edits: &[(&str, &str)]) -> String {
    for (from, to) in edits {
        assert!(config.contains(from), "{from}");
        config = config.replacen(from, to, 1);
    }
    config
}

/// The `mcp` backend on `peer`, with h2c or TLS and `limits` lines added under `[limits]`.
fn slow_upstream_config(peer: &str, tls: Option<&Path>, limits: &str) -> String {
    let backend = format!(
        "kind = \"mcp\"\npeers = [{peer:?}]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 20000\n"
    );
    let server = match tls {
        Some(dir) => format!(
            "tls = {{ cert_file = {:?}, key_file = {:?} }}\n",
            dir.join("server.pem"),
            dir.join("server.key")
        ),
        None => "h2c = true\n".to_owned(),
    };
    edit(
        forwarding_config(&backend),
        &[
            ("threads = 2\n", &format!("threads = 2\n{server}")),
            ("[state]", &format!("[limits]\n{limits}\n\n[state]")),
        ],
    )
}

/// A TLS connection to the gateway offering only `h2`, trusting the test CA.
async fn tls_connect(
    port: u16,
    ca: &Path,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(ca).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    tls
}

/// What a rapid-reset run saw.
struct Attack {
    opened: usize,
    /// How the connection ended (the GOAWAY's error code), if it did.
    ended: Option<h2::Error>,
}

/// Every 10 ms: reset the 5 streams opened 10 ms ago, open 5 more (HEADERS + DATA with a
/// tool call for the slow upstream). A steady pace, never a burst, for `run`.
async fn rapid_reset<T>(io: T, port: u16, run: Duration) -> Attack
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io).await.expect("h2 handshake");
    let driver = tokio::spawn(conn);
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut open: Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> = Vec::new();
    let mut opened = 0;
    'run: while started.elapsed() < run && !driver.is_finished() {
        tick.tick().await;
        for (_resp, mut tx) in open.drain(..) {
            tx.send_reset(h2::Reason::CANCEL);
        }
        for _ in 0..5 {
            let ready = tokio::time::timeout(Duration::from_secs(5), send.clone().ready()).await;
            let Ok(Ok(mut s)) = ready else {
                break 'run;
            };
            let body = modern(
                "tools/call",
                json!({"name": "aap_inventory_search",
                       "arguments": {"type": "inventory.search.request",
                                     "pagination": {"limit": 1 + opened % 50}}}),
            )
            .to_string();
            // JSON only: the answer is one body, so the streams measured are the requests'.
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("https://127.0.0.1:{port}{ENDPOINT}"))
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .body(())
                .unwrap();
            let Ok((resp, mut tx)) = s.send_request(req, false) else {
                break 'run;
            };
            let _ = tx.send_data(Bytes::from(body), true);
            open.push((resp, tx));
            opened += 1;
        }
    }
    for (_resp, mut tx) in open.drain(..) {
        tx.send_reset(h2::Reason::CANCEL);
    }
    let ended = match tokio::time::timeout(Duration::from_secs(3), driver).await {
        Ok(Ok(Err(e))) => Some(e),
        _ => None,
    };
    Attack { opened, ended }
}

/// Upstream tool calls the slow peer received (its `--seen` file, one line per POST).
fn upstream_calls(seen: &Path) -> usize {
    std::fs::read_to_string(seen)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("tools/call"))
        .count()
}

/// The paced rapid-reset client against a gateway in front of an upstream that takes 3 s
/// per call: backend calls in flight (the gateway's open sockets beyond its resting count)
/// never exceed `max_concurrent_streams`, although the upstream saw many more calls start;
/// after `h2_max_resets` the connection gets GOAWAY ENHANCE_YOUR_CALM.
fn paced_rapid_reset(tls: bool) {
    let dir = temp_dir("h2-reset");
    let seen = dir.join("seen.jsonl");
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &["--delay-ms", "3000", "--seen", seen.to_str().unwrap()],
        &[],
    );
    let ca = tls.then(|| test_ca(&dir));
    let max = 8;
    let gw = Gateway::start_with(&slow_upstream_config(
        &peer.url(),
        ca.as_ref().map(|_| dir.as_path()),
        &format!("max_concurrent_streams = {max}\nh2_max_resets = 300"),
    ));
    let pid = gw.child.as_ref().unwrap().id();
    let port = gw.port;
    if !tls {
        // One call through, so the upstream's revision is known and its pool warm.
        let warm = gw.call_sc(
            "aap_inventory_search",
            json!({"type": "inventory.search.request", "pagination": {"limit": 1}}),
        );
        assert!(!warm.0, "{}", warm.1);
    }
    std::thread::sleep(Duration::from_millis(300));
    let base = fds(pid);
    let calls_before = upstream_calls(&seen);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(fds(pid));
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let attack = runtime().block_on(async move {
        let run = Duration::from_secs(4);
        match &ca {
            Some(ca) => rapid_reset(tls_connect(port, ca).await, port, run).await,
            None => {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                rapid_reset(tcp, port, run).await
            }
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    let calls = upstream_calls(&seen) - calls_before;
    eprintln!(
        "rapid reset (tls={tls}): {} streams opened, {calls} upstream calls started, fds {base} → peak {peak}",
        attack.opened
    );
    // The client's own connection is one socket; each backend call in flight another.
    assert!(
        peak <= base + 1 + max,
        "backend calls in flight went past max_concurrent_streams = {max}: fds {base} → {peak}"
    );
    assert!(
        calls > 2 * max,
        "the reset streams did start upstream calls ({calls}), so the bound is the gateway's"
    );
    let e = attack.ended.expect("the gateway ended the connection");
    assert!(e.is_go_away(), "{e:?}");
    assert_eq!(e.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM), "{e:?}");
    assert!(
        attack.opened > 300 && attack.opened < 1000,
        "GOAWAY after about h2_max_resets = 300 resets: {} opened",
        attack.opened
    );
    let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert!(
        m.contains("aap_connections_closed_total{reason=\"h2_reset_flood\"} 1"),
        "{m}"
    );
    let resets = m
        .lines()
        .find_map(|l| l.strip_prefix("aap_h2_streams_reset_total "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    assert!(resets >= 300, "aap_h2_streams_reset_total = {resets}");
    if !tls {
        // The gateway is fine: a fresh client is served.
        let (err, sc) = gw.call_sc(
            "aap_dealer_information",
            json!({"type": "dealer.information.request"}),
        );
        assert!(!err, "{sc}");
    }
}

#[test]
fn paced_rapid_reset_over_h2c_is_bounded_and_sent_goaway() {
    paced_rapid_reset(false);
}

#[test]
fn paced_rapid_reset_over_tls_is_bounded_and_sent_goaway() {
    paced_rapid_reset(true);
}

/// 20 connections × 100 streams asking for large answers with a zero receive window (the
/// answers can never be sent): the gateway's RSS grows less than `limits.h2_memory_bytes`;
/// streams over the budgets wait or are refused (REFUSED_STREAM), and the gateway still
/// answers a well-behaved client.
#[test]
fn connections_that_never_read_stay_within_the_memory_budget() {
    let budget_mib = 24;
    let config = edit(
        config_with("", "", "").replace("h2c = false", "h2c = true"),
        &[(
            "max_concurrent_streams = 100",
            &format!(
                "max_concurrent_streams = 100\nh2_connection_memory_bytes = 1048576\nh2_stream_memory_bytes = 131072\nh2_memory_bytes = {}",
                budget_mib << 20
            ),
        )],
    );
    let gw = Gateway::start_with(&config);
    let pid = gw.child.as_ref().unwrap().id();
    let port = gw.port;
    let search = modern(
        "tools/call",
        json!({"name": "aap_inventory_search",
               "arguments": {"type": "inventory.search.request", "pagination": {"limit": 100}}}),
    )
    .to_string();
    // Warm-up: the answer is large, and the allocator has seen a few.
    let mut size = 0;
    for _ in 0..20 {
        let r = request(
            port,
            "POST",
            ENDPOINT,
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ],
            search.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        size = r.body.len();
    }
    assert!(size > 100_000, "a large answer: {size} bytes");
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(pid);
    let body = search.clone();
    let gw_admin = gw.admin;
    let (peak, refused, answered) = runtime().block_on(async move {
        let mut conns = Vec::new();
        let mut pending = Vec::new();
        for _ in 0..20 {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            let (send, conn) = h2::client::Builder::new()
                .initial_window_size(0)
                .handshake::<_, Bytes>(tcp)
                .await
                .expect("h2 handshake");
            conns.push(tokio::spawn(conn));
            for _ in 0..100 {
                let Ok(Ok(mut s)) =
                    tokio::time::timeout(Duration::from_secs(5), send.clone().ready()).await
                else {
                    break;
                };
                let req = h2_mcp_post(&format!("127.0.0.1:{port}")).body(()).unwrap();
                let (resp, mut tx) = s.send_request(req, false).unwrap();
                let _ = tx.send_data(Bytes::from(body.clone()), true);
                pending.push((resp, tx));
            }
        }
        // Let the gateway do all the work it will do; sample its RSS meanwhile.
        let mut peak = 0;
        let until = Instant::now() + Duration::from_secs(6);
        let admin = gw_admin;
        while Instant::now() < until {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // What the gateway's own accounting holds at the end of the window.
        let m =
            tokio::task::spawn_blocking(move || request(admin, "GET", "/metrics", &[], b"").text())
                .await
                .unwrap();
        eprintln!(
            "HTTP/2 accounting: {}",
            m.lines()
                .filter(|l| l.starts_with("aap_h2"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        // Streams refused by the budgets end with REFUSED_STREAM; answered ones have
        // their head (the body is what cannot come).
        let (mut refused, mut answered) = (0, 0);
        for (resp, _tx) in pending {
            match tokio::time::timeout(Duration::from_millis(1), resp).await {
                Ok(Ok(r)) if r.status() == 200 => answered += 1,
                Ok(Err(e)) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => refused += 1,
                _ => {}
            }
        }
        drop(conns);
        (peak, refused, answered)
    });
    let growth = peak.saturating_sub(before);
    eprintln!(
        "2000 unread streams: RSS {before} → peak {peak} KiB (+{growth} KiB); {answered} answered, {refused} refused; answer {size} bytes"
    );
    assert!(
        growth < budget_mib << 10,
        "RSS grew {growth} KiB, over h2_memory_bytes = {budget_mib} MiB"
    );
    assert!(answered > 0, "some streams were served");
    let m = request(gw.admin, "GET", "/metrics", &[], b"").text();
    assert!(m.contains("aap_h2_memory_bytes"), "{m}");
    let r = request(
        port,
        "POST",
        ENDPOINT,
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        search.as_bytes(),
    );
    assert_eq!(r.status, 200);
}

// ---- RFC 9113 error codes, from raw frames ----

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const PRIORITY: u8 = 2;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

fn frame(kind: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&sid.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK literal fields without indexing, no Huffman (RFC 7541 §6.2.2); lengths < 127.
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        assert!(n.len() < 127 && v.len() < 127);
        out.push(0);
        out.push(n.len() as u8);
        out.extend_from_slice(n.as_bytes());
        out.push(v.len() as u8);
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn request_head(port: u16, extra: &[(&str, &str)]) -> Vec<u8> {
    let authority = format!("127.0.0.1:{port}");
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", ENDPOINT),
        (":authority", authority.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    fields.extend_from_slice(extra);
    hpack(&fields)
}

/// What the gateway sent back: RST_STREAM codes by stream, `:status`-bearing HEADERS seen by
/// stream, and the GOAWAY's error code.
#[derive(Debug, Default)]
struct Seen {
    resets: Vec<(u32, u32)>,
    answered: Vec<u32>,
    goaway: Option<u32>,
}

/// Send the preface, an empty SETTINGS, then `frames`; read until a GOAWAY, the connection's
/// end, or `wait` of silence.
fn raw(port: u16, frames: &[Vec<u8>], wait: Duration) -> Seen {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    for f in frames {
        out.extend_from_slice(f);
    }
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    let mut seen = Seen::default();
    let mut chunk = [0u8; 65536];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while buf.len() >= 9 {
            let len =
                (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let sid = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
            let p = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            match kind {
                RST_STREAM if p.len() == 4 => {
                    seen.resets
                        .push((sid, u32::from_be_bytes([p[0], p[1], p[2], p[3]])));
                }
                HEADERS => seen.answered.push(sid),
                GOAWAY if p.len() >= 8 => {
                    seen.goaway = Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
                }
                SETTINGS if flags & 1 == 0 => {
                    let _ = s.write_all(&frame(SETTINGS, 1, 0, &[]));
                }
                _ => {}
            }
        }
        if seen.goaway.is_some() {
            break;
        }
    }
    seen
}

fn h2c_gateway() -> Gateway {
    Gateway::start_with(&config_with("", "", "").replace("h2c = false", "h2c = true"))
}

const PROTOCOL_ERROR: u32 = 1;
const STREAM_CLOSED: u32 = 5;
const FRAME_SIZE_ERROR: u32 = 6;
const COMPRESSION_ERROR: u32 = 9;

/// RFC 9113 §8.2.1: a field value with leading or trailing whitespace makes the request
/// malformed: RST_STREAM PROTOCOL_ERROR on that stream, the next stream is answered.
#[test]
fn padded_header_values_are_malformed_requests() {
    let gw = h2c_gateway();
    let body = modern("tools/list", json!({})).to_string();
    for padded in [" leading", "trailing\t"] {
        let seen = raw(
            gw.port,
            &[
                frame(
                    HEADERS,
                    END_HEADERS,
                    1,
                    &request_head(gw.port, &[("x-note", padded)]),
                ),
                frame(DATA, END_STREAM, 1, body.as_bytes()),
                frame(HEADERS, END_HEADERS, 3, &request_head(gw.port, &[])),
                frame(DATA, END_STREAM, 3, body.as_bytes()),
            ],
            Duration::from_secs(2),
        );
        assert!(
            seen.resets.contains(&(1, PROTOCOL_ERROR)),
            "{padded:?}: {seen:?}"
        );
        assert!(!seen.answered.contains(&1), "{seen:?}");
        assert!(seen.answered.contains(&3), "{seen:?}");
        assert_eq!(seen.goaway, None, "{seen:?}");
    }
}

/// Malformed frames get the error RFC 9113 names (the frame guard in front of `h2`,
/// src/ingress/h2_frames.rs): a frame over SETTINGS_MAX_FRAME_SIZE or a fixed-size frame of the
/// wrong length (§4.2, §6.4, §6.5, §6.7, §6.9) ends the connection with GOAWAY FRAME_SIZE_ERROR;
/// an undecodable header block (§4.3) with GOAWAY COMPRESSION_ERROR.
#[test]
fn malformed_frames_end_the_connection_with_the_rfc_error() {
    let gw = h2c_gateway();
    let cases: Vec<(&str, Vec<Vec<u8>>, u32)> = vec![
        (
            "oversized PING",
            vec![frame(PING, 0, 0, &[0; 16_385])],
            FRAME_SIZE_ERROR,
        ),
        (
            "PING of 7",
            vec![frame(PING, 0, 0, &[0; 7])],
            FRAME_SIZE_ERROR,
        ),
        (
            "SETTINGS of 5",
            vec![frame(SETTINGS, 0, 0, &[0; 5])],
            FRAME_SIZE_ERROR,
        ),
        (
            "WINDOW_UPDATE of 3",
            vec![frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1])],
            FRAME_SIZE_ERROR,
        ),
        (
            "RST_STREAM of 3",
            vec![
                frame(HEADERS, END_HEADERS, 1, &request_head(gw.port, &[])),
                frame(RST_STREAM, 0, 1, &[0; 3]),
            ],
            FRAME_SIZE_ERROR,
        ),
        (
            // Static index 0 (RFC 7541 §6.1): a decoding error.
            "HPACK index 0",
            vec![frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x80])],
            COMPRESSION_ERROR,
        ),
    ];
    for (what, frames, code) in cases {
        let seen = raw(gw.port, &frames, Duration::from_secs(2));
        assert_eq!(seen.goaway, Some(code), "{what}: {seen:?}");
    }
    // The gateway goes on serving.
    let body = modern("tools/list", json!({})).to_string();
    let seen = raw(
        gw.port,
        &[
            frame(HEADERS, END_HEADERS, 1, &request_head(gw.port, &[])),
            frame(DATA, END_STREAM, 1, body.as_bytes()),
        ],
        Duration::from_secs(2),
    );
    assert!(seen.answered.contains(&1), "{seen:?}");
}

/// Stream errors stay on their stream (RFC 9113 §5.4.2): DATA after END_STREAM gets
/// RST_STREAM STREAM_CLOSED (§5.1), pseudo-header fields in trailers RST_STREAM PROTOCOL_ERROR
/// (§8.1), a PRIORITY frame of the wrong length RST_STREAM FRAME_SIZE_ERROR (§6.3); the
/// connection's next stream is answered and no GOAWAY is sent.
#[test]
fn stream_errors_reset_only_their_stream() {
    let gw = h2c_gateway();
    let body = modern("tools/list", json!({})).to_string();
    let next = |sid: u32| {
        vec![
            frame(HEADERS, END_HEADERS, sid, &request_head(gw.port, &[])),
            frame(DATA, END_STREAM, sid, body.as_bytes()),
        ]
    };
    let cases: Vec<(&str, Vec<Vec<u8>>, u32)> = vec![
        (
            "DATA after END_STREAM",
            vec![
                frame(HEADERS, END_HEADERS, 1, &request_head(gw.port, &[])),
                frame(DATA, END_STREAM, 1, body.as_bytes()),
                frame(DATA, 0, 1, b"more"),
            ],
            STREAM_CLOSED,
        ),
        (
            "pseudo-header in trailers",
            vec![
                frame(HEADERS, END_HEADERS, 1, &request_head(gw.port, &[])),
                frame(DATA, 0, 1, body.as_bytes()),
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    &hpack(&[(":path", "/elsewhere")]),
                ),
            ],
            PROTOCOL_ERROR,
        ),
        (
            "PRIORITY of 4",
            vec![frame(PRIORITY, 0, 1, &[0; 4])],
            FRAME_SIZE_ERROR,
        ),
    ];
    for (what, mut frames, code) in cases {
        frames.extend(next(3));
        let seen = raw(gw.port, &frames, Duration::from_secs(2));
        assert!(seen.resets.contains(&(1, code)), "{what}: {seen:?}");
        assert!(seen.answered.contains(&3), "{what}: {seen:?}");
        assert_eq!(seen.goaway, None, "{what}: {seen:?}");
    }
}
