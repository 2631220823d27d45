//! The admin console's static page (HTML, script, style), compiled into the binary and served on
//! the admin listener at `/`; the page reads the `/admin/…` views with the admin token itself.

use crate::exchange::HttpResponse;
use bytes::Bytes;

const INDEX: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// Only this origin's own script, style and `fetch`; no inline code, no
/// frames, no forms posted elsewhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// `GET /`, `/console.js`, `/console.css`; `None` for any other path. The
/// assets hold no data (each view asks for the token), so they are open.
pub fn asset(method: &str, path: &str) -> Option<HttpResponse> {
    let (body, kind) = match path {
        "/" | "/index.html" => (INDEX, "text/html; charset=utf-8"),
        "/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    if !matches!(method, "GET" | "HEAD") {
        return None;
    }
    let mut r = HttpResponse::new(200)
        .with_header("content-type", kind)
        .with_header("content-security-policy", CSP)
        .with_header("x-content-type-options", "nosniff")
        .with_header("referrer-policy", "no-referrer")
        .with_header("x-frame-options", "DENY")
        .with_header("cache-control", "no-store");
    r.body = Bytes::from_static(body.as_bytes());
    Some(r)
}
