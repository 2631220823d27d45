//! The pass-through baseline: a minimal Pingora reverse proxy with no MCP work at all, which
//! `benches/load.sh` runs beside the gateway to measure what the gateway itself adds.

use async_trait::async_trait;
use pingora::prelude::*;

/// A minimal Pingora reverse proxy with no MCP work at all: the baseline
/// the load script compares the full gateway against.
pub struct PassThrough {
    pub upstream: String,
}

#[async_trait]
impl ProxyHttp for PassThrough {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }
}
