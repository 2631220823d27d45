//! Redis shared state (one server or a Cluster, plain or TLS), so several gateway instances
//! share one set of idempotency records, one lead list per tenant and one rate budget.
//!
//! Each operation is a single Lua script (`scripts`), so claims and token
//! takes are atomic across instances, and every time they compare is the
//! Redis server's own (`TIME`). When a claim's lease passes without a
//! result, a `claimed` key is claimed afresh (nothing was sent) and a
//! `sending` key is handed out again only to a caller whose backend
//! deduplicates by the key; otherwise it is reported unknown until an
//! operator resolves it.
//!
//! Key layout (`<p>` = `state.redis_prefix`):
//! - one server: `<p>idem:<ref>`, `<p>leads:<tenant>`, `<p>bucket:<key>`;
//! - Cluster: `<p>{<tenant>}:idem:<ref>` and `<p>{<tenant>}:leads` (one hash
//!   slot per tenant, so recording a lead and completing its claim stay one
//!   script), `<p>bucket:<key>` (each bucket is one key, any slot).

mod connect;
mod scripts;

pub use connect::RedisOptions;

use super::{
    Begin, Bucket, Claim, LeadRecorded, Resolution, Resolved, SharedState, StateError, Take,
};
use async_trait::async_trait;
use connect::{Conn, Target};
use scripts::Scripts;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

/// The connection and scripts every tenant view of one store shares.
struct Shared {
    opts: RedisOptions,
    target: Target,
    conn: OnceCell<Conn>,
    scripts: Scripts,
    /// Tenants a view was made for (Cluster): where `idem_resolve`, which
    /// knows only the record's ref, looks.
    tenants: Mutex<BTreeSet<String>>,
}

/// The store, or one tenant's view of it ([`SharedState::for_tenant`]).
pub struct RedisState {
    shared: Arc<Shared>,
    tenant: Option<String>,
}

impl std::fmt::Debug for RedisState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        f.debug_struct("RedisState")
            .field("prefix", &self.shared.opts.prefix)
            .field("cluster", &self.shared.opts.is_cluster())
            .field("tenant", &self.tenant)
            .finish()
    }
}

fn err(e: redis::RedisError) -> StateError {
    StateError(format!("redis: {}", e.category()))
}

impl RedisState {
    pub fn new(opts: &RedisOptions) -> Result<RedisState, String> {
        let target = connect::target(opts)?;
        Ok(RedisState {
            shared: Arc::new(Shared {
                opts: RedisOptions {
                    lease_ms: opts.lease_ms.max(1),
                    ..opts.clone()
                },
                target,
                conn: OnceCell::new(),
                scripts: Scripts::new(),
                tenants: Mutex::new(BTreeSet::new()),
            }),
            tenant: None,
        })
    }

    async fn conn(&self) -> Result<Conn, StateError> {
        let s = &self.shared;
        s.conn
            .get_or_try_init(|| s.target.connect(&s.opts))
            .await
            .cloned()
            .map_err(err)
    }

    fn prefix(&self) -> &str {
        &self.shared.opts.prefix
    }

    /// The record of `reference` as `tenant` stores it.
    fn idem_key_of(&self, tenant: Option<&str>, reference: &str) -> String {
        match tenant {
            Some(t) if self.shared.opts.is_cluster() => {
                format!("{}{{{t}}}:idem:{reference}", self.prefix())
            }
            _ => format!("{}idem:{reference}", self.prefix()),
        }
    }

    fn idem_key(&self, reference: &str) -> String {
        self.idem_key_of(self.tenant.as_deref(), reference)
    }

    /// The list holding a tenant's leads when the embedded dealer runs on
    /// Redis state.
    pub fn leads_key(prefix: &str, cluster: bool, tenant: &str) -> String {
        if cluster {
            format!("{prefix}{{{tenant}}}:leads")
        } else {
            format!("{prefix}leads:{tenant}")
        }
    }

    /// After a lead-path write to `key`: wait (at most half the command
    /// timeout) until `state.redis_wait_replicas` replicas of the node that
    /// holds `key` have it, so a failover that promotes one keeps it. Best
    /// effort: a shortfall (a just-promoted master has no replica until the
    /// old one rejoins) or a failed `WAIT` is logged, and the write stands.
    async fn replicated(&self, c: &mut Conn, key: &str) {
        let want = self.shared.opts.wait_replicas;
        if want == 0 {
            return;
        }
        let ms = (self.shared.opts.command_timeout.as_millis() as u64 / 2).max(1);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(want).arg(ms);
        let got = match c {
            // WAIT on the connection to the key's master only (the client
            // would send a keyless WAIT to every master).
            Conn::Cluster(cc) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                cc.route_command(cmd, route)
                    .await
                    .and_then(|v| Ok(redis::from_redis_value::<i64>(v)?))
            }
            Conn::Single(_) => cmd.query_async::<i64>(c).await,
        };
        match got {
            Ok(n) if n >= i64::from(want) => {}
            Ok(n) => tracing::warn!(
                acknowledged = n,
                wanted = want,
                "redis: a lead-path write reached fewer replicas than state.redis_wait_replicas"
            ),
            Err(e) => tracing::warn!(error = %e.category(), "redis: WAIT for replicas failed"),
        }
    }

    async fn release(&self, key: &str, claim: &Claim, mode: &str) -> Result<(), StateError> {
        let mut c = self.conn().await?;
        self.shared
            .scripts
            .release
            .key(self.idem_key(key))
            .arg(&claim.0)
            .arg(mode)
            .invoke_async::<i64>(&mut c)
            .await
            .map_err(err)?;
        Ok(())
    }

    async fn resolve_at(
        &self,
        c: &mut Conn,
        record: String,
        mode: &str,
        result: &str,
    ) -> Result<Resolved, StateError> {
        let reply: String = self
            .shared
            .scripts
            .resolve
            .key(record)
            .arg(mode)
            .arg(result)
            .invoke_async(c)
            .await
            .map_err(err)?;
        Ok(match reply.as_str() {
            "done" => Resolved::Done,
            "completed" => Resolved::AlreadyCompleted,
            "inflight" => Resolved::InFlight,
            _ => Resolved::NotFound,
        })
    }
}

fn replay(reply: &[String]) -> Result<Value, StateError> {
    reply
        .get(1)
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| StateError("redis: corrupt idempotency record".into()))
}

#[async_trait]
impl SharedState for RedisState {
    async fn idem_begin(
        &self,
        key: &str,
        fingerprints: &[&str],
        ttl: Duration,
        resend_ok: bool,
    ) -> Result<Begin, StateError> {
        let fingerprint = fingerprints.first().copied().unwrap_or_default();
        let legacy = fingerprints.get(1).copied().unwrap_or(fingerprint);
        let mut c = self.conn().await?;
        let claim = Claim::new();
        let reply: Vec<String> = self
            .shared
            .scripts
            .begin
            .key(self.idem_key(key))
            .arg(fingerprint)
            .arg(ttl.as_millis() as u64)
            .arg(self.shared.opts.lease_ms)
            .arg(&claim.0)
            .arg(if resend_ok { "1" } else { "0" })
            .arg(legacy)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.first().map(String::as_str) {
            Some("claimed") => Begin::Claimed(claim),
            Some("resend") => Begin::Resend(claim),
            Some("conflict") => Begin::Conflict,
            Some("inflight") => Begin::InFlight,
            Some("unknown") => Begin::Unknown,
            Some("replay") => Begin::Replay(replay(&reply)?),
            _ => return Err(StateError("redis: unexpected script reply".into())),
        })
    }

    async fn idem_intent(&self, key: &str, claim: &Claim) -> Result<bool, StateError> {
        let mut c = self.conn().await?;
        let ok: i64 = self
            .shared
            .scripts
            .intent
            .key(self.idem_key(key))
            .arg(&claim.0)
            .arg(self.shared.opts.lease_ms)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        // The intent must survive a failover before anything is sent.
        if ok == 1 {
            self.replicated(&mut c, &self.idem_key(key)).await;
        }
        Ok(ok == 1)
    }

    async fn idem_complete(
        &self,
        key: &str,
        fingerprint: &str,
        result: &Value,
        ttl: Duration,
    ) -> Result<(), StateError> {
        let mut c = self.conn().await?;
        let record = serde_json::json!({"st": "done", "fp": fingerprint, "r": result.to_string()})
            .to_string();
        let key = self.idem_key(key);
        redis::cmd("SET")
            .arg(&key)
            .arg(record)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async::<()>(&mut c)
            .await
            .map_err(err)?;
        self.replicated(&mut c, &key).await;
        Ok(())
    }

    async fn idem_abandon(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        self.release(key, claim, "abandon").await
    }

    async fn idem_interrupt(&self, key: &str, claim: &Claim) -> Result<(), StateError> {
        self.release(key, claim, "interrupt").await
    }

    async fn idem_resolve(
        &self,
        key: &str,
        resolution: &Resolution,
    ) -> Result<Resolved, StateError> {
        let mut c = self.conn().await?;
        let (mode, result) = match resolution {
            Resolution::Delivered(v) => ("delivered", v.to_string()),
            Resolution::Released => ("released", String::new()),
        };
        // The admin endpoint knows only the ref: on a Cluster, look in each
        // tenant's slot (the ref hashes the tenant in, so one holds it at most).
        let mut places: Vec<Option<String>> = match &self.tenant {
            Some(t) => vec![Some(t.clone())],
            None if self.shared.opts.is_cluster() => self
                .shared
                .tenants
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned()
                .map(Some)
                .collect(),
            None => Vec::new(),
        };
        places.push(None);
        for tenant in places {
            let record = self.idem_key_of(tenant.as_deref(), key);
            match self.resolve_at(&mut c, record, mode, &result).await? {
                Resolved::NotFound => continue,
                found => return Ok(found),
            }
        }
        Ok(Resolved::NotFound)
    }

    async fn record_lead(
        &self,
        tenant: &str,
        key: &str,
        claim: &Claim,
        lead: &Value,
        result: &Value,
    ) -> Result<LeadRecorded, StateError> {
        let mut c = self.conn().await?;
        let cluster = self.shared.opts.is_cluster();
        let reply: Vec<String> = self
            .shared
            .scripts
            .record
            .key(self.idem_key_of(Some(tenant), key))
            .key(Self::leads_key(self.prefix(), cluster, tenant))
            .arg(&claim.0)
            .arg(result.to_string())
            .arg(lead.to_string())
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(match reply.first().map(String::as_str) {
            Some("recorded") => {
                self.replicated(&mut c, &self.idem_key_of(Some(tenant), key))
                    .await;
                LeadRecorded::Recorded
            }
            Some("replay") => LeadRecorded::Replay(replay(&reply)?),
            Some("lost") => LeadRecorded::Lost,
            _ => return Err(StateError("redis: unexpected script reply".into())),
        })
    }

    async fn take(&self, key: &str, bucket: Bucket) -> Result<Take, StateError> {
        let mut c = self.conn().await?;
        let capacity = bucket.capacity.max(1);
        let rate = capacity as f64 / bucket.per.as_millis().max(1) as f64;
        let (allowed, wait): (i64, i64) = self
            .shared
            .scripts
            .take
            .key(format!("{}bucket:{key}", self.prefix()))
            .arg(capacity)
            .arg(rate)
            .invoke_async(&mut c)
            .await
            .map_err(err)?;
        Ok(if allowed == 1 {
            Take::Allowed
        } else {
            Take::Limited {
                retry_after_ms: wait.max(1) as u64,
            }
        })
    }

    fn for_tenant(&self, tenant: &str) -> Option<Arc<dyn SharedState>> {
        if !self.shared.opts.is_cluster() {
            return None;
        }
        self.shared
            .tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant.to_owned());
        Some(Arc::new(RedisState {
            shared: self.shared.clone(),
            tenant: Some(tenant.to_owned()),
        }))
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
