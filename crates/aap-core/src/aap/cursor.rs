//! Opaque, signed, expiring inventory cursors (`next_cursor`).
//!
//! A cursor carries the next offset, the page size, a hash of the query it
//! belongs to and its issue time, signed with HMAC-SHA256 so a client can
//! neither forge an offset nor reuse a cursor with other filters.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorState {
    #[serde(rename = "o")]
    pub offset: usize,
    #[serde(rename = "l")]
    pub limit: usize,
    #[serde(rename = "h")]
    pub query_hash: u64,
    #[serde(rename = "t")]
    pub issued_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorError {
    /// Not a cursor this gateway issued, or issued for another query.
    Invalid,
    /// Older than the configured lifetime.
    Expired,
}

#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
    ttl_ms: u64,
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorCodec")
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

impl CursorCodec {
    pub fn new(key: &[u8], ttl_ms: u64) -> Self {
        CursorCodec {
            key: key.to_vec(),
            ttl_ms,
        }
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    fn mac(&self, payload: &[u8]) -> Vec<u8> {
        // HMAC accepts keys of any length, so construction cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(payload);
        mac.finalize().into_bytes()[..16].to_vec()
    }

    pub fn encode(&self, state: &CursorState) -> String {
        let payload = serde_json::to_vec(state).unwrap_or_default();
        let sig = self.mac(&payload);
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&payload),
            URL_SAFE_NO_PAD.encode(sig)
        )
    }

    pub fn decode(
        &self,
        token: &str,
        query_hash: u64,
        now_ms: u64,
    ) -> Result<CursorState, CursorError> {
        let (p, s) = token.split_once('.').ok_or(CursorError::Invalid)?;
        let payload = URL_SAFE_NO_PAD
            .decode(p)
            .map_err(|_| CursorError::Invalid)?;
        let sig = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| CursorError::Invalid)?;
        let expected = self.mac(&payload);
        // Constant-time comparison of the truncated tags.
        if sig.len() != expected.len()
            || sig
                .iter()
                .zip(&expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                != 0
        {
            return Err(CursorError::Invalid);
        }
        let state: CursorState =
            serde_json::from_slice(&payload).map_err(|_| CursorError::Invalid)?;
        if state.query_hash != query_hash {
            return Err(CursorError::Invalid);
        }
        if now_ms.saturating_sub(state.issued_ms) > self.ttl_ms {
            return Err(CursorError::Expired);
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_expiry_and_tamper() {
        let c = CursorCodec::new(b"k", 1000);
        let st = CursorState {
            offset: 20,
            limit: 10,
            query_hash: 7,
            issued_ms: 5000,
        };
        let tok = c.encode(&st);
        assert_eq!(c.decode(&tok, 7, 5500), Ok(st));
        assert_eq!(c.decode(&tok, 7, 7000), Err(CursorError::Expired));
        assert_eq!(c.decode(&tok, 8, 5500), Err(CursorError::Invalid));
        let other = CursorCodec::new(b"other", 1000);
        assert_eq!(other.decode(&tok, 7, 5500), Err(CursorError::Invalid));
        assert_eq!(c.decode("garbage", 7, 5500), Err(CursorError::Invalid));
    }
}
