//! Serving the discovery documents (`publish`): routes by dealer domain (`Host`) and by
//! tenant prefix, with `ETag`/`If-None-Match`, `Cache-Control`, `HEAD` and 405 for other methods.

use crate::context::RequestCtx;
use crate::exchange::{HttpRequest, HttpResponse};
use crate::host::{host_lookup_keys, host_table_key, prefix_of};
use crate::publish::{Documents, Kind};
use imbl::HashMap;
use serde_json::json;
use std::sync::Arc;

/// Every published tenant of a config generation, by where it is served. Persistent maps (see
/// `routes`): a generation one tenant apart shares the others' entries.
#[derive(Debug, Default, Clone)]
pub struct Published {
    /// `<tenant prefix><document path>` → the tenant's documents.
    by_path: HashMap<String, (Arc<Documents>, Kind)>,
    /// Dealer domain (`host_table_key`) → the documents at the root of that host.
    by_host: HashMap<String, Arc<Documents>>,
    /// Tenant id → documents (for `publish` and tests).
    by_tenant: HashMap<String, Arc<Documents>>,
}

impl Published {
    /// Serve `docs` under the prefix of `mcp_path` and at the root of `hosts`.
    pub fn add(&mut self, mcp_path: &str, hosts: &[String], docs: Arc<Documents>) {
        for kind in Kind::ALL {
            self.by_path.insert(
                format!("{}{}", prefix_of(mcp_path), kind.path()),
                (docs.clone(), kind),
            );
        }
        for h in hosts {
            self.by_host.insert(host_table_key(h), docs.clone());
        }
        self.by_tenant.insert(docs.tenant.clone(), docs);
    }

    /// Stop serving what [`Published::add`] added with the same arguments.
    pub fn remove(&mut self, mcp_path: &str, hosts: &[String], tenant: &str) {
        for kind in Kind::ALL {
            self.by_path
                .remove(&format!("{}{}", prefix_of(mcp_path), kind.path()));
        }
        for h in hosts {
            self.by_host.remove(&host_table_key(h));
        }
        self.by_tenant.remove(tenant);
    }

    /// The tenant's documents.
    pub fn tenant(&self, id: &str) -> Option<&Arc<Documents>> {
        self.by_tenant.get(id)
    }

    /// The document a request names: a well-known path on a dealer domain,
    /// or a document path under a tenant prefix.
    pub fn route(&self, req: &HttpRequest) -> Option<(&Documents, Kind)> {
        if let Some(kind) = Kind::from_path(&req.path) {
            if let Some(host) = req.header_str("host") {
                let (whole, bare) = host_lookup_keys(host);
                let docs = self
                    .by_host
                    .get(&whole)
                    .or_else(|| bare.and_then(|b| self.by_host.get(&b)));
                if let Some(docs) = docs {
                    return Some((docs, kind));
                }
            }
        }
        self.by_path
            .get(&req.path)
            .map(|(docs, kind)| (docs.as_ref(), *kind))
    }
}

/// Answer a request for one document. The documents are public: any origin
/// may read them (`Access-Control-Allow-Origin: *`).
pub(super) fn serve(
    docs: &Documents,
    kind: Kind,
    req: &HttpRequest,
    ctx: &mut RequestCtx,
) -> HttpResponse {
    ctx.tenant = Some(docs.tenant.clone());
    let doc = docs.get(kind);
    let resp = match req.method.as_str() {
        "GET" | "HEAD" if doc.not_modified(req.header_str("if-none-match")) => {
            ctx.outcome = "not_modified".into();
            HttpResponse::new(304)
        }
        "GET" | "HEAD" => {
            ctx.outcome = "published".into();
            let mut r = HttpResponse::new(200);
            r.body = doc.body.clone();
            r.with_header("content-type", kind.content_type())
        }
        "OPTIONS" => {
            ctx.outcome = "preflight".into();
            return super::cors::public_preflight().with_header("allow", "GET, HEAD, OPTIONS");
        }
        _ => {
            ctx.outcome = "405".into();
            return HttpResponse::json(
                405,
                &json!({"error": "method_not_allowed", "message": "This discovery document accepts GET and HEAD"}),
            )
            .with_header("allow", "GET, HEAD, OPTIONS");
        }
    };
    super::cors::public(resp.with_header("etag", doc.etag.clone()).with_header(
        "cache-control",
        format!("public, max-age={}", docs.max_age_secs),
    ))
}
