//! The one integration-test binary: each module drives the real `aap-gateway`
//! binary (and real peers) over loopback; `support` holds the shared helpers.
//!
//! One module per former test file, so `cargo test --release --test it
//! lead_path::` still runs one group.

mod a2a_inbound;
mod adf;
mod admin;
mod admin_cli;
mod auth;
mod browser;
mod cli;
mod clusters;
mod compat_profiles;
mod config_schema;
mod console;
mod contract;
mod demo;
mod feeds;
mod framing;
mod h2_abuse;
mod host_routing;
mod hostile;
mod http2;
mod ingress;
mod lead_path;
mod limits;
mod logs;
mod metrics_scale;
mod ops;
mod outbox;
mod passthrough;
mod pipeline;
mod protocol_details;
mod publish;
mod redis_cluster;
mod relay;
mod rmcp_client;
mod secrets;
mod support;
mod tenant_dir;
mod tracing;
mod upstream_a2a;
mod upstream_mcp;
