//! Backends: where a validated skill call is executed.
//!
//! Every backend kind sits behind [`Backend`]; the contract layer validates
//! requests before and results after, so a backend only executes.

pub mod embedded;

use crate::aap::skill::Skill;
use async_trait::async_trait;
use serde_json::Value;

/// One validated skill call.
#[derive(Debug, Clone, Copy)]
pub struct SkillCall<'a> {
    pub tenant: &'a str,
    pub skill: Skill,
    /// The typed AAP request (already schema-valid).
    pub request: &'a Value,
    /// Verified caller scope (or `anonymous`).
    pub caller: &'a str,
    /// Stable reference of the idempotency record for `lead.submit`, so a
    /// backend that can deduplicate does so across gateway restarts.
    pub idempotency_ref: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The call certainly did not reach the service (safe to retry).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The call may have reached the service; the outcome is unknown.
    #[error("backend timed out: {0}")]
    Timeout(String),
    /// The service answered something that is not an AAP payload.
    #[error("backend answered an invalid response: {0}")]
    InvalidResponse(String),
}

#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Short name for logs and metrics (`embedded`, `mcp`, `a2a`).
    fn kind(&self) -> &'static str;

    /// Execute a call; the answer is a typed AAP response or `aap.error`.
    async fn call(&self, call: SkillCall<'_>) -> Result<Value, BackendError>;

    /// The inventory capabilities object advertised on the search tool.
    fn capabilities(&self) -> Value;

    /// True when the backend itself suppresses a repeated `idempotency_ref`,
    /// which lets the gateway safely re-execute a lead whose earlier attempt
    /// was interrupted by a crash.
    fn dedupes_leads(&self) -> bool {
        false
    }
}
