//! The HTTP/1.1 request framing of the ingress (`h1::frame`: request line, head, body by its
//! framing) against hyper's server-side HTTP/1 parser, on the same bytes: when both accept a
//! request they must agree on its method, target and body, for the first two requests (so
//! also on where the first one ends: a disagreement there is request smuggling).
#![no_main]

use aap_gateway::ingress::h1::{self, HeadLimits};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, Mutex, OnceLock};

/// (method, path, query, body) of one request.
type Seen = (String, String, Option<String>, Vec<u8>);

const LIMITS: HeadLimits = HeadLimits {
    max_headers: 100,
    max_header_bytes: 16384,
};
const MAX_BODY: usize = 65536;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Up to two requests as the gateway frames them (stops at the first refusal or incomplete one).
fn ours(data: &[u8]) -> Vec<Seen> {
    let mut buf = data.to_vec();
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < 2 {
        match h1::frame(&mut buf[at..], &LIMITS, MAX_BODY) {
            Ok(Some(f)) => {
                at += f.consumed;
                let keep = f.head.keep_alive;
                out.push((f.head.method, f.head.path, f.head.query, f.body));
                if !keep {
                    break;
                }
            }
            _ => break,
        }
    }
    out
}

/// Up to two requests as hyper's HTTP/1 server reads them from the same bytes.
fn hypers(data: &[u8]) -> Vec<Seen> {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let got = seen.clone();
    let input = data.to_vec();
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let got = got.clone();
            async move {
                let method = req.method().as_str().to_owned();
                let path = req.uri().path().to_owned();
                let query = req.uri().query().map(str::to_owned);
                if let Ok(body) = req.into_body().collect().await {
                    got.lock().unwrap().push((method, path, query, body.to_bytes().to_vec()));
                }
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(server), service);
        let feed = async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            let mut sink = Vec::new();
            let _ = client.read_to_end(&mut sink).await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            tokio::join!(conn, feed)
        })
        .await;
    });
    let mut v = seen.lock().unwrap().clone();
    v.truncate(2);
    v
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 1 << 16 {
        return;
    }
    let a = ours(data);
    if a.is_empty() {
        return;
    }
    let b = hypers(data);
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        assert_eq!(x, y, "request {i} framed differently by the gateway and hyper");
    }
});
