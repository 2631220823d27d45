//! The composition root of a process ([`Platform`]): the registries and handles every generation,
//! the gateway and the admin listener share, built once and passed down, never reached globally.
//!
//! `run` builds one online platform ([`Platform::online`]) before anything else and hands it to
//! the first generation; every later generation (a reload, a tenant file) gets the same one from
//! the generation before it. `check`, `catalog`, `publish` and tests build an offline one of
//! their own ([`Platform::offline`]): its clusters never connect nor look a name up, and its
//! series are registered nowhere.

use crate::leads::outbox::Outboxes;
use crate::memory::Release;
use crate::series::GatewayMetrics;
use crate::state::lock::StateLocks;
use crate::upstream::cluster::Registry;
use crate::upstream::embedded::DealerProfiles;
use crate::upstream::inventory::source::FeedSources;
use std::sync::Arc;
use std::time::Instant;

/// What the process shares across generations (see the module docs).
#[derive(Debug)]
pub struct Platform {
    /// The upstream clusters' pooled clients, one per distinct cluster setting, with their
    /// health and DNS runtime (`upstream::cluster`).
    pub clusters: Registry,
    /// The inventory sources, one per distinct source, and their watchers' runtime.
    pub feeds: FeedSources,
    /// The dealer information files, each parsed once per version.
    pub profiles: DealerProfiles,
    /// The lead outboxes (one per embedded tenant with sinks), the lease-owner name, the
    /// delivery runtime and the lead sinks' HTTP client.
    pub outboxes: Outboxes,
    /// The state directories this process holds.
    pub locks: Arc<StateLocks>,
    /// The allocator's "give freed memory back" hook the binary installs.
    pub memory: Arc<Release>,
    /// When the process started serving (`/admin/status`'s uptime).
    pub started: Instant,
    /// The gateway crate's Prometheus series.
    pub metrics: GatewayMetrics,
}

impl Platform {
    /// The platform of `run`: clusters connect and look names up in the background, and the
    /// series are registered with the `/metrics` registry.
    pub fn online() -> Arc<Platform> {
        let metrics = GatewayMetrics::new();
        metrics.register(&crate::metrics::METRICS.registry);
        Arc::new(Platform::with(
            Registry::online(metrics.cluster.clone()),
            metrics,
        ))
    }

    /// A platform that never connects nor looks a name up (`check`, `catalog`, `publish`,
    /// tests), with series of its own.
    pub fn offline() -> Arc<Platform> {
        let metrics = GatewayMetrics::new();
        Arc::new(Platform::with(Registry::offline(), metrics))
    }

    fn with(clusters: Registry, metrics: GatewayMetrics) -> Platform {
        Platform {
            clusters,
            feeds: FeedSources::default(),
            profiles: DealerProfiles::default(),
            outboxes: Outboxes::new(metrics.outbox.clone(), metrics.store.clone()),
            locks: Arc::default(),
            memory: Arc::default(),
            started: Instant::now(),
            metrics,
        }
    }
}
