//! The ADF/XML HTTP sink: each lead as an ADF 1.0 document POSTed to the CRM's intake, and the
//! one conversion of a [`Lead`] into ADF that the e-mail sink shares.

use super::{post::HttpTarget, Lead, LeadSink, SinkError};
use crate::config::{AdfHttpSinkConfig, AdfNetworkConfig};
use aap_core::aap::adf::{self, AdfInput, AdfNetwork};
use async_trait::async_trait;
use std::time::Duration;

/// The `source` of the ADF prospect `<id>`: the lead ids are the gateway's.
pub const ADF_ID_SOURCE: &str = "aap-gateway";

/// The lead as an ADF document. A document that cannot be written is a
/// permanent failure (the same lead would fail again); it does not happen
/// with an in-memory writer.
pub fn adf_document(lead: &Lead, network: Option<&AdfNetworkConfig>) -> Result<Vec<u8>, SinkError> {
    let input = AdfInput {
        lead_id: &lead.lead_id,
        received_at: &lead.received_at,
        request: &lead.request,
        dealer: &lead.dealer,
        vehicle: lead.vehicle.as_ref(),
        id_source: ADF_ID_SOURCE,
        network: network.map(|n| AdfNetwork {
            name: &n.name,
            url: n.url.as_deref(),
        }),
    };
    adf::build(&input).map_err(|e| SinkError::Permanent(e.to_string()))
}

/// Why an ADF HTTP sink could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum AdfHttpSinkError {
    #[error("sink {name}: {source}")]
    Client {
        name: String,
        #[source]
        source: crate::outbound::ClientError,
    },
}

/// ADF/XML over HTTP POST (`kind = "adf_http"`). 2xx is delivered; the
/// status rule of [`super::post::post`] decides between retry and dead letter.
#[derive(Debug)]
pub struct AdfHttpSink {
    name: String,
    content_type: &'static str,
    network: Option<AdfNetworkConfig>,
    target: HttpTarget,
}

impl AdfHttpSink {
    /// A sink for one `[[tenants.backend.sinks]]` entry. `ca_file` is used as
    /// given: the caller resolves a relative path against the config file's
    /// directory (`Config::resolve`) first.
    pub fn new(cfg: &AdfHttpSinkConfig) -> Result<AdfHttpSink, AdfHttpSinkError> {
        let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
        let client =
            crate::outbound::client(cfg.ca_file.as_deref(), timeout).map_err(|source| {
                AdfHttpSinkError::Client {
                    name: cfg.name.clone(),
                    source,
                }
            })?;
        Ok(AdfHttpSink {
            name: cfg.name.clone(),
            content_type: cfg.content_type.as_str(),
            network: cfg.network.clone(),
            target: HttpTarget {
                url: cfg.url.clone(),
                authorization: cfg.authorization.clone(),
                timeout,
                client,
            },
        })
    }
}

#[async_trait]
impl LeadSink for AdfHttpSink {
    fn name(&self) -> &str {
        &self.name
    }

    async fn deliver(&self, lead: &Lead) -> Result<(), SinkError> {
        let body = adf_document(lead, self.network.as_ref())?;
        self.target
            .post(self.content_type, &lead.lead_id, body)
            .await
    }
}
