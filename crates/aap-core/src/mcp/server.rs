//! The MCP Streamable HTTP binding of a tenant's endpoint, for both revisions: its head rules,
//! JSON-RPC dispatch, discover/initialize, tools/list paging, tools/call and streaming.
//!
//! Order of checks (each failure answers at once and changes nothing): Origin (403, the
//! endpoint's) → HTTP method (405) → Content-Type (415) → Accept (406) → body size (413, the
//! endpoint's) → JSON (-32700) → envelope (-32600) → mirror headers (-32020) → session (404) →
//! protocol version (-32020/-32022/-32602) → method dispatch.

use super::headers::{self, read_mirror_headers, MirrorHeaders};
use super::jsonrpc::{self, result_body, Message, RpcError};
use super::media::{self, ResponseMedia};
use super::result::{tool_message, ToolResult};
use super::revision::{self, Revision, VersionContext, LEGACY, META_SERVER_INFO};
use super::session::SessionStore;
use crate::aap::arguments::Arguments;
use crate::aap::backend::ProtocolError;
use crate::aap::contract::{ToolOutcome, UpstreamFault};
use crate::aap::skill::Skill;
use crate::auth::Caller;
use crate::context::RequestCtx;
use crate::endpoint::{Binding, Endpoint};
use crate::error::Failure;
use crate::exchange::{BodyStream, HttpRequest, HttpResponse};
use crate::json::Doc;
use crate::trace::Phase;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::FutureExt as _;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

/// The MCP binding of one tenant: what only MCP has (built from config, immutable; a reload
/// swaps it). It serves through the tenant's [`Endpoint`], which it shares with the A2A binding.
#[derive(Debug)]
pub struct McpBinding {
    pub sessions: Option<Arc<SessionStore>>,
    /// Host compatibility (`openai-strict`, `null-as-absent`): an explicit `null` for an
    /// optional, non-nullable property is dropped before the canonical validation.
    pub drop_nulls: bool,
    pub page_size: usize,
    pub list_ttl_ms: u64,
    pub instructions: Option<String>,
    pub server_name: String,
}

/// A request being served: the tenant's endpoint and its MCP binding.
struct Mcp<'a> {
    ep: &'a Endpoint,
    cfg: &'a McpBinding,
}

pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

struct RpcReply {
    status: u16,
    /// The JSON-RPC message, already serialized.
    body: Option<Vec<u8>>,
    headers: Vec<(String, String)>,
    /// A request-scoped SSE stream (already framed events).
    stream: Option<BodyStream>,
}

impl RpcReply {
    fn ok(body: Value) -> Self {
        RpcReply::ok_bytes(serde_json::to_vec(&body).unwrap_or_default())
    }
    fn ok_bytes(body: Vec<u8>) -> Self {
        RpcReply {
            status: 200,
            body: Some(body),
            headers: Vec::new(),
            stream: None,
        }
    }
    fn accepted() -> Self {
        RpcReply {
            status: 202,
            body: None,
            headers: Vec::new(),
            stream: None,
        }
    }
}

/// What a method produced: a result, or a stream that ends with it.
enum Answer {
    Result(Value),
    /// A tools/call result, written once by [`tool_message`].
    Tool(ToolResult),
    /// A whole JSON-RPC message, already written (a `tools/list` page).
    Message(Vec<u8>),
    Stream(BodyStream),
}

/// The parts of a request a tools/call needs besides its params.
struct ToolCallRequest<'a> {
    rev: Revision,
    id: &'a Value,
    /// `params.arguments`, read apart from the other params.
    arguments: Option<&'a Doc>,
    /// The client accepts `text/event-stream`.
    stream_ok: bool,
    req: &'a HttpRequest,
}

/// Upstream notifications buffered per streamed call before the client
/// reads them; beyond this they are dropped (the result never is).
const EVENT_BUFFER: usize = 64;

impl RpcReply {
    fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
}

impl McpBinding {
    fn allow_methods(&self) -> &'static str {
        if self.sessions.is_some() {
            "POST, DELETE"
        } else {
            "POST"
        }
    }

    fn method_not_allowed(&self) -> RpcError {
        let mut err = RpcError::of(
            Failure::MethodNotAllowed,
            format!(
                "Method Not Allowed: this MCP endpoint accepts {}",
                self.allow_methods()
            ),
        );
        err.headers
            .push(("allow".into(), self.allow_methods().into()));
        err
    }
}

impl Binding for McpBinding {
    const NAME: &'static str = "mcp";

    /// HTTP method (405), then for a POST `Content-Type` (415) and `Accept` (406).
    fn head_rules(&self, req: &HttpRequest) -> Option<RpcError> {
        match req.method.as_str() {
            "POST" => {
                media::check_post(req.header_str("content-type"), req.header_str("accept")).err()
            }
            "DELETE" if self.sessions.is_some() => None,
            _ => Some(self.method_not_allowed()),
        }
    }

    /// Plain JSON with the error's own headers (`Allow`, `WWW-Authenticate`, `Retry-After`).
    fn refusal(&self, e: &RpcError, req: &HttpRequest, id_depth: usize) -> HttpResponse {
        refusal(e, req, id_depth)
    }

    async fn serve(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> HttpResponse {
        let mcp = Mcp { ep, cfg: self };
        match req.method.as_str() {
            "DELETE" => mcp.delete(req, out),
            _ => mcp.post(req, caller, out).await,
        }
    }
}

impl Mcp<'_> {
    fn error_response(
        &self,
        err: &RpcError,
        id: Option<&Value>,
        out: &mut RequestCtx,
    ) -> HttpResponse {
        out.outcome = err.code.to_string();
        let mut resp = HttpResponse::json(err.http_status, &err.to_body(id));
        resp.add_fields(err.headers.iter().cloned());
        resp
    }

    fn delete(&self, req: &HttpRequest, out: &mut RequestCtx) -> HttpResponse {
        let Some(store) = &self.cfg.sessions else {
            return HttpResponse::new(405);
        };
        match session_header(req) {
            Ok(Some(id)) if store.end(&self.ep.tenant, &id) => {
                out.outcome = "ok".into();
                HttpResponse::new(204)
            }
            Ok(Some(_)) => self.error_response(&session_not_found(), None, out),
            Ok(None) => self.error_response(
                &RpcError::of(
                    Failure::InvalidRequest,
                    "Bad Request: DELETE needs the Mcp-Session-Id header",
                ),
                None,
                out,
            ),
            Err(e) => self.error_response(&e, None, out),
        }
    }

    async fn post(
        &self,
        req: &HttpRequest,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> HttpResponse {
        let framing =
            match media::check_post(req.header_str("content-type"), req.header_str("accept")) {
                Ok(f) => f,
                // The endpoint ran the head rules; this is their framing.
                Err(e) => return self.error_response(&e, None, out),
            };
        if let Some(t) = &out.trace {
            t.begin(Phase::Parse);
        }
        let message = match jsonrpc::parse_message(&req.body, self.ep.max_json_depth) {
            Ok(m) => m,
            Err(e) => return self.error_response(&e, None, out),
        };
        let id = message.id().cloned();
        out.method = message.method().map(str::to_owned);
        let stream_ok = media::accepts_event_stream(req.header_str("accept"));
        match self.dispatch(req, &message, caller, stream_ok, out).await {
            Ok(reply) => {
                if out.outcome.is_empty() {
                    out.outcome = "ok".into();
                }
                let mut resp = match (reply.body, framing) {
                    _ if reply.stream.is_some() => {
                        let mut r = HttpResponse::sse_headers(reply.status);
                        r.stream = reply.stream;
                        r
                    }
                    (None, _) => HttpResponse::new(reply.status),
                    (Some(body), ResponseMedia::Json) => {
                        HttpResponse::json_bytes(reply.status, body)
                    }
                    (Some(body), ResponseMedia::EventStream) => {
                        HttpResponse::sse_bytes(reply.status, &body)
                    }
                };
                resp.add_fields(reply.headers);
                resp
            }
            Err(e) => {
                let body = e.to_body(id.as_ref());
                out.outcome = e.code.to_string();
                let mut resp = match framing {
                    // Transport-level failures are plain JSON whatever Accept says.
                    _ if e.http_status != 200 => HttpResponse::json(e.http_status, &body),
                    ResponseMedia::Json => HttpResponse::json(200, &body),
                    ResponseMedia::EventStream => HttpResponse::sse(200, &body),
                };
                resp.add_fields(e.headers);
                resp
            }
        }
    }

    async fn dispatch(
        &self,
        req: &HttpRequest,
        message: &Message,
        caller: &Caller<'_>,
        stream_ok: bool,
        out: &mut RequestCtx,
    ) -> Result<RpcReply, RpcError> {
        let mirror = read_mirror_headers(req.headers.iter())?;
        if let Some(h) = &mirror.method {
            if Some(h.as_str()) != message.method() {
                return Err(RpcError::header_mismatch(
                    "Header mismatch: Mcp-Method does not match the JSON-RPC method",
                ));
            }
        } else if message.method().is_some() {
            out.filled.push("Mcp-Method");
        }
        if message.method() == Some("initialize") {
            return self.initialize(message, &mirror, out);
        }
        let session_version = self.session_version(req, message, &mirror)?;
        match message {
            Message::Notification { .. } | Message::Response { .. } => {
                if let Some(v) = mirror.protocol_version.as_deref() {
                    if Revision::from_version(v).is_none() {
                        return Err(revision::unsupported_version(v));
                    }
                }
                out.revision = mirror
                    .protocol_version
                    .as_deref()
                    .or(session_version.as_deref())
                    .and_then(Revision::from_version)
                    .map(Revision::as_str);
                Ok(RpcReply::accepted())
            }
            Message::Request {
                id,
                method,
                params,
                arguments,
            } => {
                let ctx = VersionContext {
                    headers: &mirror,
                    session_version: session_version.as_deref(),
                };
                let (rev, filled_version) = revision::resolve(message, &ctx)?;
                out.revision = Some(rev.as_str());
                if filled_version {
                    out.filled.push("MCP-Protocol-Version");
                }
                if rev == Revision::Legacy
                    && self.cfg.sessions.is_some()
                    && session_version.is_none()
                {
                    return Err(RpcError::of(Failure::InvalidRequest,
                        "Bad Request: this endpoint uses sessions; initialize first and send Mcp-Session-Id"));
                }
                let name = self.check_name(method, params.as_ref(), &mirror, out)?;
                if let Some(t) = &out.trace {
                    t.end(Phase::Parse);
                }
                let ctx = ToolCallRequest {
                    rev,
                    id,
                    arguments: arguments.as_ref(),
                    stream_ok,
                    req,
                };
                match self
                    .method(&ctx, method, params.as_ref(), name, caller, out)
                    .await?
                {
                    Answer::Result(result) => Ok(RpcReply::ok(result_body(
                        id,
                        with_revision_fields(rev, result, &self.cfg.server_name),
                    ))),
                    Answer::Tool(result) => Ok(RpcReply::ok_bytes(tool_message(
                        id,
                        rev,
                        &self.cfg.server_name,
                        SERVER_VERSION,
                        &result,
                    ))),
                    Answer::Message(body) => Ok(RpcReply::ok_bytes(body)),
                    Answer::Stream(stream) => Ok(RpcReply {
                        stream: Some(stream),
                        ..RpcReply::accepted()
                    }
                    .with_status(200)),
                }
            }
        }
    }

    /// `Mcp-Name` is defined for tools/call: derive it from `params.name`
    /// when absent, require an exact match when supplied.
    fn check_name<'m>(
        &self,
        method: &str,
        params: Option<&'m Map<String, Value>>,
        mirror: &MirrorHeaders,
        out: &mut RequestCtx,
    ) -> Result<Option<&'m str>, RpcError> {
        if method != "tools/call" {
            if mirror.name.is_some() {
                return Err(RpcError::header_mismatch(
                    "Header mismatch: Mcp-Name is only defined for tools/call here",
                ));
            }
            return Ok(None);
        }
        let name = match params.and_then(|p| p.get("name")) {
            Some(Value::String(s)) => s.as_str(),
            _ => {
                return Err(RpcError::of(
                    Failure::ParamsRefused,
                    "Invalid params: tools/call needs params.name (string)",
                ))
            }
        };
        match &mirror.name {
            Some(h) if h != name => Err(RpcError::header_mismatch(
                "Header mismatch: Mcp-Name does not match params.name",
            )),
            Some(_) => Ok(Some(name)),
            None => {
                out.filled.push("Mcp-Name");
                Ok(Some(name))
            }
        }
    }

    /// The legacy session this request names, if sessions are on. Modern
    /// MCP has no protocol sessions: a body that carries the 2026-07-28
    /// `_meta` version is never looked up, and a request that declares
    /// 2026-07-28 in `MCP-Protocol-Version` and names an unknown session
    /// is not a 404 -32001, its `Mcp-Session-Id` is ignored. (A known
    /// session still supplies its version, so a header that contradicts it
    /// stays a -32020 conflict.)
    fn session_version(
        &self,
        req: &HttpRequest,
        message: &Message,
        mirror: &MirrorHeaders,
    ) -> Result<Option<String>, RpcError> {
        let Some(store) = &self.cfg.sessions else {
            return Ok(None);
        };
        let modern_body = revision::request_meta(message.params())
            .is_some_and(|m| m.contains_key(revision::META_PROTOCOL_VERSION));
        if modern_body {
            return Ok(None);
        }
        let modern_header = mirror.protocol_version.as_deref() == Some(revision::MODERN);
        match session_header(req)? {
            None => Ok(None),
            Some(id) => match store.touch(&self.ep.tenant, &id) {
                Some(v) => Ok(Some(v)),
                None if modern_header => Ok(None),
                None => Err(session_not_found()),
            },
        }
    }

    fn initialize(
        &self,
        message: &Message,
        mirror: &MirrorHeaders,
        out: &mut RequestCtx,
    ) -> Result<RpcReply, RpcError> {
        let Message::Request { id, params, .. } = message else {
            return Err(RpcError::invalid_request(
                "Invalid Request: initialize must be a request with an id",
            ));
        };
        if let Some(v) = mirror.protocol_version.as_deref() {
            if Revision::from_version(v).is_none() {
                return Err(revision::unsupported_version(v));
            }
        }
        let requested = params
            .as_ref()
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                RpcError::of(
                    Failure::InvalidParams,
                    "Invalid params: initialize needs params.protocolVersion",
                )
            })?;
        if params
            .as_ref()
            .and_then(|p| p.get("capabilities"))
            .is_some_and(|c| !c.is_object())
        {
            return Err(RpcError::of(
                Failure::InvalidParams,
                "Invalid params: capabilities must be an object",
            ));
        }
        // 2025-11-25 is the only handshake revision served; an older or
        // newer request is answered with it and the client decides.
        let _ = requested;
        let negotiated = LEGACY;
        out.revision = Some(LEGACY);
        let mut result = json!({
            "protocolVersion": negotiated,
            "capabilities": { "tools": { "listChanged": false } },
            "serverInfo": { "name": self.cfg.server_name, "version": SERVER_VERSION },
        });
        if let Some(i) = &self.cfg.instructions {
            result["instructions"] = json!(i);
        }
        let mut reply = RpcReply::ok(result_body(id, result));
        if let Some(store) = &self.cfg.sessions {
            let sid = store.create(&self.ep.tenant, negotiated);
            reply.headers.push((headers::SESSION_ID.into(), sid));
        }
        Ok(reply)
    }

    async fn method(
        &self,
        ctx: &ToolCallRequest<'_>,
        method: &str,
        params: Option<&Map<String, Value>>,
        name: Option<&str>,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> Result<Answer, RpcError> {
        let rev = ctx.rev;
        if method == "tools/call" {
            return self
                .call_tool(ctx, params, name.unwrap_or_default(), caller, out)
                .await;
        }
        let cache_scope = if caller.private { "private" } else { "public" };
        let result = match (method, rev) {
            ("server/discover", Revision::Modern) => {
                let mut r = json!({
                    "supportedVersions": revision::SUPPORTED,
                    "capabilities": { "tools": { "listChanged": false } },
                    "ttlMs": self.cfg.list_ttl_ms,
                    "cacheScope": cache_scope,
                });
                if let Some(i) = &self.cfg.instructions {
                    r["instructions"] = json!(i);
                }
                Ok(r)
            }
            ("tools/list", _) => {
                return self
                    .list_tools(params, cache_scope)
                    .map(|(page, rest)| Answer::Message(self.list_message(ctx, page, rest)));
            }
            ("ping", Revision::Legacy) => Ok(json!({})),
            _ => Err(RpcError::of(
                Failure::MethodNotFound {
                    modern: rev == Revision::Modern,
                },
                "Method not found",
            )),
        };
        result.map(Answer::Result)
    }

    /// The page a `tools/list` asks for (its offset and end) and the result's other members.
    fn list_tools(
        &self,
        params: Option<&Map<String, Value>>,
        cache_scope: &str,
    ) -> Result<((usize, usize), Value), RpcError> {
        let offset = match params.and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => decode_list_cursor(c)
                .filter(|o| *o < self.ep.tools.len())
                .ok_or_else(|| {
                    RpcError::of(
                        Failure::ParamsRefused,
                        "Invalid params: unknown tools/list cursor; list again without a cursor",
                    )
                })?,
            Some(_) => {
                return Err(RpcError::of(
                    Failure::ParamsRefused,
                    "Invalid params: cursor must be a string",
                ))
            }
        };
        let end = (offset + self.cfg.page_size).min(self.ep.tools.len());
        let mut r = json!({
            "ttlMs": self.cfg.list_ttl_ms,
            "cacheScope": cache_scope,
        });
        if end < self.ep.tools.len() {
            r["nextCursor"] = json!(URL_SAFE_NO_PAD.encode(format!("tools:{end}")));
        }
        Ok(((offset, end), r))
    }

    /// The `tools/list` answer: `{"jsonrpc","id","result":{"tools":[page],...rest}}` with the
    /// page's array copied from the catalog's pre-serialized bytes (the same text, member for
    /// member, as serializing the `Value`; a page at an offset the catalog was not cut at is
    /// serialized here).
    fn list_message(
        &self,
        ctx: &ToolCallRequest<'_>,
        (offset, end): (usize, usize),
        rest: Value,
    ) -> Vec<u8> {
        let rest = with_revision_fields(ctx.rev, rest, &self.cfg.server_name);
        let rest = serde_json::to_vec(&rest).unwrap_or_default();
        let owned;
        let page = match self.ep.tools.page(offset, self.cfg.page_size) {
            Some(p) => p,
            None => {
                owned = serde_json::to_vec(&self.ep.tools[offset..end]).unwrap_or_default();
                &owned[..]
            }
        };
        let mut body = Vec::with_capacity(page.len() + rest.len() + 64);
        body.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
        body.extend_from_slice(&serde_json::to_vec(ctx.id).unwrap_or_default());
        body.extend_from_slice(b",\"result\":{\"tools\":");
        body.extend_from_slice(page);
        // `rest` is an object with at least ttlMs: splice its members after the page.
        body.push(b',');
        body.extend_from_slice(rest.get(1..).unwrap_or(b"}"));
        body.push(b'}');
        body
    }

    /// `arguments` with every explicit `null` of an optional, non-nullable property removed
    /// (host compatibility); the access line lists the dropped properties' paths.
    fn without_nulls<'a>(
        &self,
        skill: Skill,
        arguments: Arguments<'a>,
        out: &mut RequestCtx,
    ) -> Arguments<'a> {
        // Most calls hold no null at all: keep the client's document untouched.
        if !arguments.raw().contains("null") {
            return arguments;
        }
        let mut value = arguments.value().clone();
        let dropped =
            crate::aap::compat::drop_nulls(self.ep.contract.schemas.request_doc(skill), &mut value);
        if dropped.is_empty() {
            return arguments;
        }
        out.nulls_dropped = dropped;
        match serde_json::to_string(&value)
            .ok()
            .and_then(|text| Doc::parse(&text).ok())
        {
            Some(doc) => Arguments::owned(doc),
            None => arguments,
        }
    }

    async fn call_tool(
        &self,
        ctx: &ToolCallRequest<'_>,
        params: Option<&Map<String, Value>>,
        name: &str,
        caller: &Caller<'_>,
        out: &mut RequestCtx,
    ) -> Result<Answer, RpcError> {
        let skill = Skill::from_tool_name(name)
            .filter(|s| self.ep.implements(*s))
            .ok_or_else(|| RpcError::of(Failure::ParamsRefused, "Invalid params: unknown tool; call tools/list for the tools this endpoint implements"))?;
        out.skill = Some(skill.id());
        out.tool = Some(skill.tool_name());
        caller.authorize(skill.id())?;
        let arguments = match ctx.arguments {
            Some(doc) => Arguments::new(doc),
            None => Arguments::empty(),
        };
        let arguments = if self.cfg.drop_nulls {
            self.without_nulls(skill, arguments, out)
        } else {
            arguments
        };
        let mut forward = out.forward();
        forward.param_headers = ctx
            .req
            .headers
            .iter()
            .filter(|(n, _)| n.starts_with("mcp-param-"))
            .filter_map(|(n, v)| Some((n.to_owned(), std::str::from_utf8(v).ok()?.to_owned())))
            .collect();
        forward.progress_token = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        if !(ctx.stream_ok && self.ep.contract.backend.may_notify()) {
            let done = self
                .ep
                .contract
                .execute(skill, &arguments, caller.scope, &forward)
                .await;
            return tool_answer(done, ctx.rev, out).map(Answer::Tool);
        }
        // The upstream may send notifications before its result: stream as
        // soon as the first one arrives. A read runs in this task until then
        // (most calls send none and are answered here, with no task spawned
        // and no hand-off between threads); only a call that streams moves,
        // boxed and part-run, into a task of its own that outlives this
        // handler. A write runs in its own task from the start, so that it
        // completes even if the client goes away (a lead is never abandoned
        // half-way). Without notifications the answer is the same as without
        // SSE; a panic in the call is answered as an internal error.
        let (tx, mut events) = tokio::sync::mpsc::channel(EVENT_BUFFER);
        forward.events = Some(tx);
        let contract = self.ep.contract.clone();
        let args = arguments.into_owned();
        let scope = caller.scope.to_owned();
        let run =
            AssertUnwindSafe(async move { contract.execute(skill, &args, &scope, &forward).await })
                .catch_unwind();
        let mut call: Pin<Box<dyn Future<Output = CallDone> + Send>> = if skill.is_read() {
            Box::pin(run.map(|done| done.map_err(drop)))
        } else {
            let task = tokio::spawn(run);
            Box::pin(async move { task.await.map_err(drop).and_then(|done| done.map_err(drop)) })
        };
        let first = tokio::select! {
            biased;
            done = &mut call => {
                let done = done.map_err(|_| call_task_failed())?;
                let mut early = Vec::new();
                while let Ok(ev) = events.try_recv() {
                    early.push(ev);
                }
                if early.is_empty() {
                    return tool_answer(done, ctx.rev, out).map(Answer::Tool);
                }
                let last = self.final_event(tool_answer(done, ctx.rev, out), ctx);
                let (btx, brx) = tokio::sync::mpsc::channel(early.len() + 1);
                for ev in &early {
                    let _ = btx.try_send(sse_event(ev));
                }
                let _ = btx.try_send(last);
                return Ok(Answer::Stream(brx));
            }
            Some(first) = events.recv() => first,
        };
        out.outcome = "stream".into();
        // From here the call runs beside the stream, in a task of its own.
        let call = tokio::spawn(call);
        let (btx, brx) = tokio::sync::mpsc::channel(EVENT_BUFFER);
        let _ = btx.try_send(sse_event(&first));
        let finisher = StreamFinish {
            rev: ctx.rev,
            id: ctx.id.clone(),
            server_name: self.cfg.server_name.clone(),
        };
        let cancellable = skill.is_read();
        tokio::spawn(async move {
            // A write runs to completion even if the client goes away (a lead
            // is never abandoned half-way); a read is cancelled as soon as
            // the client is gone (it reset the stream or closed the
            // connection), its upstream call with it.
            let mut client_gone = false;
            loop {
                let gone = tokio::select! {
                    ev = events.recv() => match ev {
                        Some(ev) => client_gone || btx.send(sse_event(&ev)).await.is_err(),
                        None => break,
                    },
                    () = btx.closed(), if !client_gone => true,
                };
                client_gone |= gone;
                if client_gone && cancellable {
                    call.abort();
                    tracing::info!(
                        tool = skill.id(),
                        "streamed read cancelled: the client went away"
                    );
                    return;
                }
            }
            // The access line was written when the stream started (outcome `stream`); the
            // final answer goes to the client only.
            let done = call
                .await
                .map_err(drop)
                .and_then(|done| done)
                .map_err(|()| call_task_failed());
            let answer = done
                .and_then(|d| tool_outcome(d, finisher.rev))
                .map(|(result, _outcome)| result);
            if !client_gone {
                let _ = btx.send(finisher.event(answer)).await;
            }
        });
        Ok(Answer::Stream(brx))
    }

    /// The last SSE event of a streamed call.
    fn final_event(
        &self,
        answer: Result<ToolResult, RpcError>,
        ctx: &ToolCallRequest<'_>,
    ) -> Bytes {
        StreamFinish {
            rev: ctx.rev,
            id: ctx.id.clone(),
            server_name: self.cfg.server_name.clone(),
        }
        .event(answer)
    }
}

/// A refusal decided before the body was interpreted, as an MCP client gets it (the MCP binding's and
/// a relay tenant's): plain JSON with the error's own headers (`Allow`, `WWW-Authenticate`,
/// `Retry-After`), carrying the body's id when `id_depth` is not 0 and the body is a valid request
/// envelope within that nesting depth.
pub fn refusal(e: &RpcError, req: &HttpRequest, id_depth: usize) -> HttpResponse {
    let id = (id_depth > 0)
        .then(|| jsonrpc::request_id(&req.body, id_depth))
        .flatten();
    let mut resp = HttpResponse::json(e.http_status, &e.to_body(id.as_ref()));
    resp.add_fields(e.headers.iter().cloned());
    resp
}

/// What the end of a streamed call needs to frame its response.
struct StreamFinish {
    rev: Revision,
    id: Value,
    server_name: String,
}

impl StreamFinish {
    fn event(&self, answer: Result<ToolResult, RpcError>) -> Bytes {
        match answer {
            Ok(result) => sse_frame(&tool_message(
                &self.id,
                self.rev,
                &self.server_name,
                SERVER_VERSION,
                &result,
            )),
            Err(e) => sse_event(&e.to_body(Some(&self.id))),
        }
    }
}

/// One SSE `message` event carrying a JSON-RPC message.
fn sse_event(message: &Value) -> Bytes {
    sse_frame(&serde_json::to_vec(message).unwrap_or_default())
}

/// Frame one serialized JSON-RPC message (single-line JSON) as an SSE event.
fn sse_frame(message: &[u8]) -> Bytes {
    let mut s = Vec::with_capacity(message.len() + 24);
    s.extend_from_slice(b"event: message\ndata: ");
    s.extend_from_slice(message);
    s.extend_from_slice(b"\n\n");
    Bytes::from(s)
}

/// A tool call's outcome; `Err(())` when the call panicked.
type CallDone = Result<Result<ToolOutcome, UpstreamFault>, ()>;

fn call_task_failed() -> RpcError {
    RpcError::of(Failure::Internal,
        "Internal error: the call could not complete; retry a lead only with the same idempotency_key",
    )
}

/// A contract outcome as a tools/call result or a JSON-RPC error; the access line's outcome
/// is the request's.
fn tool_answer(
    done: Result<ToolOutcome, UpstreamFault>,
    rev: Revision,
    out: &mut RequestCtx,
) -> Result<ToolResult, RpcError> {
    let (result, outcome) = tool_outcome(done, rev)?;
    out.outcome = outcome;
    Ok(result)
}

/// A contract outcome as a tools/call result and its access-line outcome, or a JSON-RPC error.
fn tool_outcome(
    done: Result<ToolOutcome, UpstreamFault>,
    rev: Revision,
) -> Result<(ToolResult, String), RpcError> {
    let outcome = done.map_err(|fault| match fault {
        UpstreamFault::Unavailable => RpcError::of(Failure::UpstreamUnavailable, "Bad Gateway: the dealer system could not be reached; nothing was executed"),
        UpstreamFault::CredentialsRefused => RpcError::of(Failure::UpstreamCredentialsRefused, "Bad Gateway: the dealer system refused the gateway's credentials; nothing was executed (the gateway's operator must renew them; retrying does not help until then)"),
        UpstreamFault::Timeout => RpcError::of(Failure::UpstreamTimeout, "Gateway Timeout: the dealer system did not answer in time; the outcome is unknown (retry a lead only with the same idempotency_key)"),
        UpstreamFault::Protocol(e) => upstream_protocol_error(e, rev),
    })?;
    Ok((
        ToolResult {
            payload: outcome.payload,
            is_error: outcome.is_error,
        },
        outcome.outcome,
    ))
}

/// An upstream MCP error keeps its code, message and data; the HTTP status
/// follows the client's revision (modern maps protocol errors to 400/404,
/// legacy clients always get 200 so a 404 is not read as "session gone").
fn upstream_protocol_error(e: ProtocolError, rev: Revision) -> RpcError {
    let status = match (rev, e.code) {
        (Revision::Legacy, _) => 200,
        (_, -32700 | -32600 | -32602 | -32022..=-32020) => 400,
        (_, -32601) => 404,
        _ => 200,
    };
    let mut err = RpcError::passthrough(status, e.code, e.message);
    err.data = e.data.map(Box::new);
    err
}

/// A tools/call result as a `Value`: the payload in `structuredContent` and,
/// serialized, in one text block. Responses are written by
/// [`tool_message`] instead; this is the reference it is tested against.
pub fn tool_result_value(payload: Value, is_error: bool) -> Value {
    let text = serde_json::to_string(&payload).unwrap_or_default();
    json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": payload,
        "isError": is_error,
    })
}

/// Add the revision-specific result fields.
pub fn with_revision_fields(rev: Revision, mut result: Value, server_name: &str) -> Value {
    if rev == Revision::Modern {
        if let Some(obj) = result.as_object_mut() {
            obj.insert("resultType".into(), json!("complete"));
            let meta = obj.entry("_meta").or_insert_with(|| json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.insert(
                    META_SERVER_INFO.into(),
                    json!({ "name": server_name, "version": SERVER_VERSION }),
                );
            }
        }
    }
    result
}

fn decode_list_cursor(c: &str) -> Option<usize> {
    let raw = URL_SAFE_NO_PAD.decode(c).ok()?;
    let text = String::from_utf8(raw).ok()?;
    text.strip_prefix("tools:")?.parse().ok()
}

fn session_header(req: &HttpRequest) -> Result<Option<String>, RpcError> {
    match req.header_count(headers::SESSION_ID) {
        0 => Ok(None),
        1 => req
            .header_str(headers::SESSION_ID)
            .map(|s| Some(s.trim().to_owned()))
            .ok_or_else(|| {
                RpcError::invalid_request("Bad Request: Mcp-Session-Id is not valid text")
            }),
        _ => Err(RpcError::invalid_request(
            "Bad Request: Mcp-Session-Id appears more than once",
        )),
    }
}

fn session_not_found() -> RpcError {
    RpcError::of(
        Failure::SessionNotFound,
        "Session not found: initialize again without Mcp-Session-Id",
    )
}
