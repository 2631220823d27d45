//! The embedded dealer: dealer information from a file, inventory from a feed
//! (`upstream::inventory`), and durable lead intake, so the gateway is a dealer by itself.

use super::inventory::source::{FeedSource, FeedSources, SourceSpec};
use super::inventory::{
    is_listed, Inventory, Paging, LISTED, SCALAR_FILTERS, SORT_FIELDS, TERM_FACETS, TERM_FILTERS,
};
use crate::aap::cursor::CursorCodec;
use crate::aap::error::{aap_error, ErrorCode};
use crate::aap::payload::Payload;
use crate::aap::skill::Skill;
use crate::backend::{Backend, BackendError, SkillCall};
use crate::clock::now_rfc3339;
use crate::store::{Accept, Accepted, LeadStore};
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Where the inventory comes from (a JSON file, or a CSV/XML/JSON feed).
    pub feed: SourceSpec,
    /// The schemas feed rows are checked against.
    pub schemas: Arc<crate::aap::schemas::SchemaSet>,
    pub dealer: PathBuf,
    /// The file store's leads file, imported into the store once.
    pub leads_file: PathBuf,
    /// Where leads are recorded: one transaction with the completion of
    /// their idempotency claim and their outbox rows.
    pub store: Arc<dyn LeadStore>,
    /// `state.idempotency_ttl_hours`.
    pub idempotency_ttl: Duration,
    /// The tenant's lead outbox (`[[tenants.backend.sinks]]` configured):
    /// each accepted lead gets one outbox row per sink, committed with it.
    pub outbox: Option<Arc<crate::leads::outbox::TenantOutbox>>,
    pub default_limit: usize,
    pub max_limit: usize,
    pub cursor: CursorCodec,
    /// The lead store's series (its failures are counted).
    pub store_metrics: Arc<crate::series::StoreMetrics>,
}

#[derive(Debug)]
pub struct EmbeddedDealer {
    /// Shared with every tenant naming the same file (see [`DealerProfiles`]).
    dealer: Arc<Value>,
    /// Shared with every tenant naming the same source.
    feed: Arc<FeedSource>,
    default_limit: usize,
    max_limit: usize,
    cursor: CursorCodec,
    leads_file: PathBuf,
    store: Arc<dyn LeadStore>,
    idempotency_ttl: Duration,
    /// The file store's leads file was imported (once per dealer).
    imported: OnceCell<()>,
    outbox: Option<Arc<crate::leads::outbox::TenantOutbox>>,
    store_metrics: Arc<crate::series::StoreMetrics>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {problem}")]
    File { path: String, problem: String },
}

fn load_json(path: &Path) -> Result<Value, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::File {
        path: path.display().to_string(),
        problem: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| LoadError::File {
        path: path.display().to_string(),
        problem: format!("invalid JSON: {e}"),
    })
}

/// The dealer information files of a process, each parsed once per version of the file and
/// shared by every tenant naming it while any of them lives: a platform of 10,000 tenants of one
/// dealer group holds one copy (the demo profile is about 45 KB as a `Value`, measured with
/// heaptrack) and parses it once. A changed file (size, modification time or inode) is parsed
/// again.
#[derive(Debug, Default)]
pub struct DealerProfiles {
    by_path: Mutex<HashMap<PathBuf, (crate::file_stamp::Stamp, Weak<Value>)>>,
}

impl DealerProfiles {
    /// The dealer information of `path` (see [`DealerProfiles`]).
    pub fn get(&self, path: &Path) -> Result<Arc<Value>, LoadError> {
        let stamp = crate::file_stamp::stamp(path);
        let cached = self
            .by_path
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .filter(|(s, _)| stamp.is_some() && *s == stamp)
            .and_then(|(_, w)| w.upgrade());
        if let Some(v) = cached {
            return Ok(v);
        }
        let dealer = load_json(path)?;
        if !dealer.is_object() {
            return Err(LoadError::File {
                path: path.display().to_string(),
                problem: "expected the dealer information object".into(),
            });
        }
        let dealer = Arc::new(dealer);
        let mut profiles = self.by_path.lock().unwrap_or_else(|e| e.into_inner());
        profiles.retain(|_, (_, w)| w.strong_count() > 0);
        profiles.insert(path.to_owned(), (stamp, Arc::downgrade(&dealer)));
        Ok(dealer)
    }
}

impl EmbeddedDealer {
    /// The dealer of `cfg`: its profile from `profiles`, its feed from `feeds` (both shared
    /// with every tenant naming the same file or source).
    pub fn load(
        cfg: EmbeddedConfig,
        feeds: &FeedSources,
        profiles: &DealerProfiles,
    ) -> Result<EmbeddedDealer, LoadError> {
        let dealer = profiles.get(&cfg.dealer)?;
        let feed = feeds
            .open(cfg.feed, cfg.schemas)
            .map_err(|problem| LoadError::File {
                path: "inventory feed".into(),
                problem,
            })?;
        if cfg.leads_file.is_dir() {
            return Err(LoadError::File {
                path: cfg.leads_file.display().to_string(),
                problem: "is a directory".into(),
            });
        }
        Ok(EmbeddedDealer {
            dealer,
            feed,
            default_limit: cfg.default_limit,
            max_limit: cfg.max_limit,
            cursor: cfg.cursor,
            leads_file: cfg.leads_file,
            store: cfg.store,
            idempotency_ttl: cfg.idempotency_ttl,
            imported: OnceCell::new(),
            outbox: cfg.outbox,
            store_metrics: cfg.store_metrics,
        })
    }

    fn dealer_name(&self) -> &str {
        self.dealer
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("Dealer")
    }

    fn dealer_phone(&self) -> Option<&str> {
        self.dealer
            .pointer("/rooftops/0/phones/0/value")
            .and_then(Value::as_str)
    }

    /// The inventory served now; `None` until the feed first loaded.
    fn inventory(&self) -> Option<Arc<Inventory>> {
        self.feed.inventory()
    }

    fn paging(&self) -> Paging<'_> {
        Paging {
            default_limit: self.default_limit,
            max_limit: self.max_limit,
            cursor: &self.cursor,
        }
    }

    async fn lead(&self, call: &SkillCall<'_>) -> Result<Value, BackendError> {
        // The file store's leads (and their idempotency results) are in the
        // store before the first lead of this dealer is recorded.
        let imported = self
            .imported
            .get_or_try_init(|| async {
                self.store
                    .import_leads_file(call.tenant, &self.leads_file, self.idempotency_ttl)
                    .await
                    .map(|_| ())
            })
            .await;
        if let Err(e) = imported {
            self.store_metrics.errors.inc();
            tracing::error!(tenant = call.tenant, correlation_id = %call.forward.correlation_id, error = %e, "lead store unavailable; lead refused");
            return Ok(nothing_recorded());
        }
        // A lead about a unit that has left stock cannot be honoured.
        let mut listing = None;
        if let Some(voi) = call.request.value().get("vehicle_of_interest") {
            let inventory = self.inventory();
            let unit = ["vin", "stock", "vehicle_id"].into_iter().find_map(|k| {
                let id = voi.get(k).and_then(Value::as_str)?;
                inventory.as_deref()?.find(k, id)
            });
            listing = unit.cloned();
            if let Some(unit) = unit {
                if !is_listed(unit) {
                    return Ok(aap_error(
                        ErrorCode::VehicleUnavailable,
                        "The vehicle of interest is no longer available; no lead was recorded.",
                        Some(json!({"errors": [crate::aap::error::field_error(
                            "/vehicle_of_interest", "status", "the vehicle has left inventory",
                            "choose an available vehicle from aap_inventory_search, or omit vehicle_of_interest")]})),
                    ));
                }
            }
        }
        let lead_id = format!("lead_{}", uuid::Uuid::now_v7().simple());
        let mut data = Map::new();
        data.insert("lead_id".into(), json!(lead_id));
        data.insert("status".into(), json!("received"));
        if call.request.value().get("appointment").is_some() {
            data.insert(
                "appointment".into(),
                json!({"appointment_id": format!("appt_{}", uuid::Uuid::now_v7().simple()), "status": "requested"}),
            );
        }
        let mut dealer = Map::new();
        dealer.insert("name".into(), json!(self.dealer_name()));
        if let Some(p) = self.dealer_phone() {
            dealer.insert("phone".into(), json!(p));
        }
        data.insert("dealer".into(), Value::Object(dealer));
        let response = json!({
            "type": Skill::LeadSubmit.response_type(),
            "data": data,
            "message": format!("{} received this inquiry. A sales advisor will follow up only through the channels the buyer allowed.", self.dealer_name()),
        });
        let mut record = json!({
            "lead_id": lead_id,
            "tenant": call.tenant,
            "received_at": now_rfc3339(),
            "idempotency_ref": call.idempotency_ref,
            "request": call.request.value(),
            "response": response,
        });
        // With sinks: the outbox rows committed with the lead are the enqueue.
        let sinks = self
            .outbox
            .as_ref()
            .map(|o| o.sink_names())
            .unwrap_or_default();
        if !sinks.is_empty() {
            record["dealer"] = Value::clone(&self.dealer);
            record["vehicle"] = listing.unwrap_or(Value::Null);
            record["sinks"] = json!(sinks);
        }
        let accept = Accept {
            tenant: call.tenant.to_owned(),
            lead_id,
            received_ms: crate::clock::now_unix_ms(),
            idem: call
                .idempotency_ref
                .zip(call.claim)
                .map(|(r, c)| (r.to_owned(), c.clone())),
            record,
            response: response.clone(),
            sinks,
            ttl: self.idempotency_ttl,
        };
        match self.store.accept(accept).await {
            Ok(Accepted::Recorded) => {
                if let Some(o) = &self.outbox {
                    o.enqueued();
                }
                Ok(response)
            }
            Ok(Accepted::Replay(previous)) => Ok(previous),
            Ok(Accepted::Lost) => Ok(crate::aap::error::in_flight_error()),
            Err(e) => {
                // Nothing was committed: the same answer whichever write failed.
                self.store_metrics.errors.inc();
                tracing::error!(tenant = call.tenant, correlation_id = %call.forward.correlation_id, error = %e, "lead store write failed; lead refused");
                Ok(nothing_recorded())
            }
        }
    }
}

/// The documented answer when the store cannot take a lead: `INTERNAL_ERROR`
/// (retryable), nothing sent.
fn nothing_recorded() -> Value {
    aap_error(
        ErrorCode::InternalError,
        "The lead could not be recorded safely; nothing was sent. Retry with the same idempotency_key.",
        None,
    )
}

impl EmbeddedDealer {
    /// The inventory, or the refusal of a tenant whose feed never loaded.
    fn loaded(&self) -> Result<Arc<Inventory>, BackendError> {
        self.inventory().ok_or_else(|| {
            BackendError::Unavailable(format!(
                "inventory feed {} has not loaded yet",
                self.feed.label()
            ))
        })
    }

    async fn answer(&self, call: SkillCall<'_>) -> Result<Value, BackendError> {
        Ok(match call.skill {
            Skill::DealerInformation => json!({
                "type": Skill::DealerInformation.response_type(),
                "data": *self.dealer,
            }),
            Skill::InventoryFacets => self.loaded()?.facets(call.request.value()),
            Skill::InventorySearch => self.loaded()?.search(call.request.value(), &self.paging()),
            Skill::InventoryVehicle => self.loaded()?.vehicle(call.request.value()),
            Skill::LeadSubmit => return self.lead(&call).await,
        })
    }
}

#[async_trait]
impl Backend for EmbeddedDealer {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    async fn call(&self, call: SkillCall<'_>) -> Result<Payload, BackendError> {
        self.answer(call).await.map(Payload::Tree)
    }

    fn capabilities(&self) -> Value {
        let mut filters: Vec<&str> = TERM_FILTERS.iter().map(|(f, _)| *f).collect();
        for f in SCALAR_FILTERS {
            if !filters.contains(&f) {
                filters.push(f);
            }
        }
        json!({
            "type": "inventory.capabilities",
            "filters": filters,
            "sort_fields": SORT_FIELDS,
            "facets": TERM_FACETS.iter().map(|(f, _)| *f).chain(["price_range", "mileage_range", "year_range"]).collect::<Vec<_>>(),
            "vehicle_types": ["car", "motorcycle"],
            "statuses": LISTED,
            "conditions": ["new", "used", "cpo"],
            "pagination": {
                "default_limit": self.default_limit,
                "max_limit": self.max_limit,
                "cursor": true,
                "cursor_ttl_ms": self.cursor.ttl_ms(),
            }
        })
    }

    fn dedupes_leads(&self) -> bool {
        true
    }

    fn commits_with_claim(&self) -> bool {
        true
    }

    fn feed_health(&self) -> Option<Value> {
        Some(self.feed.health())
    }

    fn feed_id(&self) -> Option<usize> {
        // The shared source's address: one per source while any tenant holds it.
        Some(Arc::as_ptr(&self.feed) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::DealerProfiles;
    use std::sync::Arc;

    #[test]
    fn a_dealer_profile_is_parsed_once_per_file_version() {
        let dir = std::env::temp_dir().join(format!("aap-profile-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dealer.json");
        std::fs::write(&path, r#"{"name":"One"}"#).unwrap();
        let profiles = DealerProfiles::default();
        let dealer_profile = |p: &std::path::Path| profiles.get(p);
        let a = dealer_profile(&path).unwrap();
        let b = dealer_profile(&path).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same version is shared");
        std::fs::write(&path, r#"{"name":"Second"}"#).unwrap();
        let c = dealer_profile(&path).unwrap();
        assert_eq!(c["name"], "Second", "a changed file is parsed again");
        assert_eq!(a["name"], "One", "tenants built before keep theirs");
        std::fs::write(&path, "[1]").unwrap();
        assert!(dealer_profile(&path).is_err(), "not an object");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
