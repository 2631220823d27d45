//! Request traces: the sampling decision at ingress, and OpenTelemetry spans built from a finished
//! request's recorded phases and each upstream call, exported over OTLP/HTTP (protobuf).
//!
//! The protocol core records ids and instants only (`aap_core::trace`); this module owns the SDK.
//! Spans are made as `SpanData` with the ids the core chose and explicit start and end times, and
//! handed to the SDK's batch processor, which exports them from its own thread (a blocking HTTP
//! client there, so a slow collector never holds a worker; a full queue drops spans). The SDK's
//! `Tracer` is not used because it picks span ids itself, and an upstream request must carry its
//! client span's id before that span ends.
//!
//! Attributes follow the OpenTelemetry semantic conventions for HTTP and RPC, plus `aap.*`
//! (tenant, skill, outcome). Never arguments, bodies, header values, customer data or tokens.

use crate::config::TelemetryConfig;
use crate::context::RequestCtx;
use crate::exchange::HttpRequest;
use aap_core::trace::{new_span_id, Phase, Trace};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SamplingDecision, ShouldSample, SpanData,
    SpanEvents, SpanLinks, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

struct Telemetry {
    processor: BatchSpanProcessor,
    sampler: Sampler,
    scope: InstrumentationScope,
}

static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

/// Start exporting per `cfg` (a no-op when `telemetry.enabled` is off).
/// Called once, at start, outside any async runtime; `[telemetry]` changes
/// take effect on restart.
pub fn init(cfg: &TelemetryConfig) -> Result<(), String> {
    if !cfg.enabled || TELEMETRY.get().is_some() {
        return Ok(());
    }
    let headers: HashMap<String, String> = cfg
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_owned()))
        .collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(cfg.endpoint.clone())
        .with_timeout(Duration::from_millis(cfg.export_timeout_ms))
        .with_headers(headers)
        .build()
        // The SDK's message names the setting, never a header value.
        .map_err(|e| format!("telemetry: {e}"))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(cfg.queue_size)
        .with_max_export_batch_size(cfg.batch_size)
        .with_scheduled_delay(Duration::from_millis(cfg.scheduled_delay_ms))
        .build();
    let mut processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    processor.set_resource(
        &Resource::builder_empty()
            .with_service_name(cfg.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build(),
    );
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sampling_ratio)));
    let scope = InstrumentationScope::builder("aap-gateway")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let _ = TELEMETRY.set(Telemetry {
        processor,
        sampler,
        scope,
    });
    Ok(())
}

/// Export what is queued (a graceful stop), waiting at most `timeout`.
pub fn flush(timeout: Duration) {
    if let Some(t) = TELEMETRY.get() {
        let _ = t.processor.shutdown_with_timeout(timeout);
    }
}

/// `new_ctx`, continued: give the request its trace context from its
/// `traceparent` and `tracestate` and decide whether it is sampled.
/// Nothing when tracing is off.
pub fn start(ctx: &mut RequestCtx, req: &HttpRequest) {
    let Some(t) = TELEMETRY.get() else { return };
    let traceparent = req.header_str("traceparent");
    let Some(mut trace) = Trace::new(
        &ctx.correlation_id,
        traceparent,
        req.header_str("tracestate"),
    ) else {
        return;
    };
    let trace_id = TraceId::from_bytes(trace.trace_id);
    let parent = match (trace.remote_parent, Trace::remote_sampled(traceparent)) {
        (Some(span), Some(sampled)) => Context::new().with_remote_span_context(SpanContext::new(
            trace_id,
            SpanId::from_bytes(span),
            if sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            },
            true,
            TraceState::NONE,
        )),
        _ => Context::new(),
    };
    let decision = t
        .sampler
        .should_sample(
            Some(&parent),
            trace_id,
            "request",
            &SpanKind::Server,
            &[],
            &[],
        )
        .decision;
    trace.sampled = decision == SamplingDecision::RecordAndSample;
    ctx.trace = Some(Arc::new(trace));
}

/// A finished request whose server span and phase spans are exported once
/// its answer is written (so the `write` phase is in).
#[derive(Debug)]
pub struct ServerSpan {
    trace: Arc<Trace>,
    started: Instant,
    ended: Instant,
    attributes: Vec<KeyValue>,
    error: bool,
}

impl ServerSpan {
    /// The span of `ctx` (answered with `status` on `route`, the tenant's
    /// mounted path when routed); `None` unless the request is sampled.
    pub fn of(ctx: &RequestCtx, status: u16, route: Option<&str>) -> Option<ServerSpan> {
        let trace = ctx.trace.as_ref().filter(|t| t.sampled)?.clone();
        let mut a = vec![
            KeyValue::new("http.request.method", ctx.http_method.clone()),
            KeyValue::new("http.response.status_code", i64::from(status)),
            KeyValue::new("network.protocol.name", "http"),
            KeyValue::new("network.protocol.version", ctx.http_version.number()),
            KeyValue::new("aap.outcome", ctx.outcome.clone()),
        ];
        if let Some(route) = route {
            // Only a configured path: an unrouted one is the client's text.
            a.push(KeyValue::new("http.route", route.to_owned()));
            a.push(KeyValue::new("url.path", route.to_owned()));
        }
        if let Some(tenant) = &ctx.tenant {
            a.push(KeyValue::new("aap.tenant", tenant.clone()));
        }
        // The MCP semantic conventions on the MCP binding; A2A's JSON-RPC methods keep the
        // generic RPC attributes.
        match (&ctx.method, ctx.binding) {
            (Some(method), "a2a") => {
                a.push(KeyValue::new("rpc.system", "jsonrpc"));
                a.push(KeyValue::new("rpc.method", method.clone()));
            }
            (Some(method), _) => a.push(KeyValue::new("mcp.method.name", method.clone())),
            (None, _) => {}
        }
        if let Some(tool) = ctx.tool {
            a.push(KeyValue::new("gen_ai.tool.name", tool));
            a.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(rev) = ctx.revision {
            a.push(KeyValue::new("mcp.protocol.version", rev));
        }
        if let Some(skill) = ctx.skill {
            a.push(KeyValue::new("aap.skill", skill));
        }
        let error = status >= 500;
        if error {
            a.push(KeyValue::new("error.type", status.to_string()));
        }
        Some(ServerSpan {
            trace,
            started: ctx.started,
            ended: Instant::now(),
            attributes: a,
            error,
        })
    }

    /// Record the `write` phase (from `start` until now) and export.
    pub fn written(self, start: Instant) {
        self.trace.record(Phase::Write, start);
        self.export();
    }

    /// Export the server span and its phases.
    pub fn export(self) {
        let Some(t) = TELEMETRY.get() else { return };
        let clock = Clock::now();
        let trace = &self.trace;
        let phases = trace.phases();
        // The server span covers the write as well.
        let end = phases
            .iter()
            .filter_map(|(_, (_, e))| *e)
            .chain([self.ended])
            .max()
            .unwrap_or(self.ended);
        let tracestate = trace
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let name = self
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "http.route")
            .map(|kv| format!("{} {}", self.method(), kv.value))
            .unwrap_or_else(|| self.method().to_owned());
        t.processor.on_end(span_data(
            t,
            trace,
            trace.span_id,
            trace.remote_parent,
            SpanKind::Server,
            Cow::Owned(name),
            (clock.wall(self.started), clock.wall(end)),
            self.attributes.clone(),
            self.error,
            tracestate.clone(),
        ));
        for (phase, (start, stop)) in phases {
            let id = if phase == Phase::Backend {
                trace.backend_span_id
            } else {
                new_span_id()
            };
            t.processor.on_end(span_data(
                t,
                trace,
                id,
                Some(trace.span_id),
                SpanKind::Internal,
                Cow::Borrowed(phase.name()),
                (clock.wall(start), clock.wall(stop.unwrap_or(end))),
                vec![KeyValue::new("aap.phase", phase.name())],
                false,
                tracestate.clone(),
            ));
        }
    }

    fn method(&self) -> &str {
        self.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "http.request.method")
            .map(|kv| match &kv.value {
                opentelemetry::Value::String(s) => s.as_str(),
                _ => "HTTP",
            })
            .unwrap_or("HTTP")
    }
}

/// One upstream HTTP request (one attempt on one peer): a client span whose
/// id the request's `traceparent` names as its parent.
#[derive(Debug)]
pub struct ClientSpan {
    trace: Arc<Trace>,
    span_id: [u8; 8],
    started: Instant,
    attributes: Vec<KeyValue>,
}

impl ClientSpan {
    /// Begin the span of a `method` request to `path` on `host:port`
    /// (`mcp_method` when it carries an MCP method). `None` when the
    /// request has no trace (tracing off).
    pub fn start(
        trace: Option<&Arc<Trace>>,
        method: &str,
        path: &str,
        host: &str,
        port: u16,
        mcp_method: Option<&str>,
    ) -> Option<ClientSpan> {
        let trace = trace?.clone();
        let mut attributes = Vec::new();
        if trace.sampled {
            // The path without its query: a query string may hold values.
            let path = path.split('?').next().unwrap_or("/");
            attributes.extend([
                KeyValue::new("http.request.method", method.to_owned()),
                KeyValue::new("url.path", path.to_owned()),
                KeyValue::new("server.address", host.to_owned()),
                KeyValue::new("server.port", i64::from(port)),
            ]);
            if let Some(m) = mcp_method {
                attributes.push(KeyValue::new("mcp.method.name", m.to_owned()));
            }
        }
        Some(ClientSpan {
            trace,
            span_id: new_span_id(),
            started: Instant::now(),
            attributes,
        })
    }

    /// The `traceparent` header value the upstream request carries.
    pub fn traceparent(&self) -> String {
        self.trace.traceparent_for(self.span_id)
    }

    /// The `tracestate` passed on with it, if the client sent one.
    pub fn tracestate(&self) -> Option<&str> {
        self.trace.tracestate.as_deref()
    }

    /// End the span: the upstream's HTTP status, or why there was none
    /// (`error.type`: `timeout`, `unavailable`).
    pub fn end(mut self, status: Result<u16, &'static str>) {
        if !self.trace.sampled {
            return;
        }
        let Some(t) = TELEMETRY.get() else { return };
        let error = match status {
            Ok(code) => {
                self.attributes
                    .push(KeyValue::new("http.response.status_code", i64::from(code)));
                (code >= 400).then(|| code.to_string())
            }
            Err(kind) => Some(kind.to_owned()),
        };
        if let Some(e) = &error {
            self.attributes.push(KeyValue::new("error.type", e.clone()));
        }
        let clock = Clock::now();
        let name = self
            .attributes
            .first()
            .map(|kv| kv.value.to_string())
            .unwrap_or_else(|| "HTTP".into());
        let tracestate = self
            .trace
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        t.processor.on_end(span_data(
            t,
            &self.trace,
            self.span_id,
            Some(self.trace.backend_span_id),
            SpanKind::Client,
            Cow::Owned(name),
            (clock.wall(self.started), clock.wall(Instant::now())),
            std::mem::take(&mut self.attributes),
            error.is_some(),
            tracestate,
        ));
    }
}

/// Monotonic instants to wall-clock times, from one reading of both clocks.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn wall(&self, at: Instant) -> SystemTime {
        self.wall - self.instant.saturating_duration_since(at)
    }
}

#[allow(clippy::too_many_arguments)]
fn span_data(
    t: &Telemetry,
    trace: &Trace,
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    kind: SpanKind,
    name: Cow<'static, str>,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    error: bool,
    tracestate: TraceState,
) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(trace.trace_id),
            SpanId::from_bytes(span_id),
            TraceFlags::SAMPLED,
            false,
            tracestate,
        ),
        parent_span_id: parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: parent.is_some() && parent == trace.remote_parent,
        span_kind: kind,
        name,
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if error {
            Status::error("")
        } else {
            Status::Unset
        },
        instrumentation_scope: t.scope.clone(),
    }
}
