//! OAuth 2.1 resource-server checks for a tenant: bearer JWTs validated
//! against a JWKS (rotation by `kid`), RFC 9728 protected resource metadata,
//! and the 401/403 challenges MCP clients use to discover authorization.
//!
//! Tokens are never logged and never forwarded: the verified subject is the
//! only thing that leaves this module.

use crate::error::{Failure, RpcError};
use crate::exchange::HttpResponse;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::{Duration, Instant, SystemTime};

pub const PRM_PREFIX: &str = "/.well-known/oauth-protected-resource";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No authorization: every request is anonymous.
    #[default]
    Off,
    /// Tokens are validated when present; tools with scopes need one.
    Optional,
    /// Every request needs a valid token.
    Required,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub mode: AuthMode,
    /// The exact public MCP URL of this tenant (the RFC 8707 resource and
    /// the required `aud`): the tenant's `public_url`, which fills it when
    /// it is left out (one URL, see `config::Config::parse`).
    #[serde(default)]
    pub resource: String,
    /// Accepted `iss`.
    pub issuer: String,
    pub authorization_servers: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// JWKS document (`{"keys":[…]}`), re-read when it changes or when a
    /// token names an unknown `kid`. Exactly one of `jwks_file`, `jwks_url`.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// JWKS URL (`http[s]://host[:port]/path`), fetched on first use,
    /// refreshed every `jwks_refresh_secs` and when a `kid` is unknown.
    #[serde(default)]
    pub jwks_url: Option<String>,
    #[serde(default = "default_refresh")]
    pub jwks_refresh_secs: u64,
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// Scopes each skill needs, e.g. `{ "lead.submit" = ["leads:write"] }`.
    #[serde(default)]
    pub tool_scopes: BTreeMap<String, Vec<String>>,
}

fn default_leeway() -> u64 {
    30
}

fn default_refresh() -> u64 {
    300
}

/// Where keys come from.
pub enum KeySource {
    File(PathBuf),
    /// A JWKS document fetched over the network by the gateway's client.
    Url(Box<dyn JwksFetcher>),
}

/// The port through which a `jwks_url` is fetched: the gateway crate implements it
/// on its pooled upstream client, so this crate never opens a socket.
#[async_trait::async_trait]
pub trait JwksFetcher: Send + Sync {
    /// The body of a `200` answer, or why there is none (`HTTP 503`, a transport error).
    async fn fetch(&self) -> Result<bytes::Bytes, String>;
}

/// A verified caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// `sub:<subject>`, used as the caller scope for idempotency and limits.
    pub scope: String,
    pub scopes: HashSet<String>,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Denial {
    /// No token where one is needed (401 without `error`).
    Missing { scope: Option<String> },
    /// Token present but unusable (401 `invalid_token`).
    Invalid { description: &'static str },
    /// Valid token without the needed scopes (403 `insufficient_scope`).
    InsufficientScope { scope: String },
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
    #[serde(default)]
    client_id: Option<String>,
    /// RFC 7519 NumericDate (seconds, possibly fractional).
    #[serde(default)]
    iat: Option<f64>,
}

/// The token of an `Authorization: Bearer <token>` header. The scheme is
/// case-insensitive (RFC 9110 §11.1) and one or more spaces may follow it;
/// the token itself is RFC 6750's b64token, so it holds no space.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, rest) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim_matches(' ');
    (!token.is_empty() && !token.contains([' ', '\t'])).then_some(token)
}

/// The signature algorithm a JWK's `alg` names, `None` for one that is
/// not a signature algorithm (e.g. `RSA-OAEP`, an encryption key).
fn key_algorithm(a: jsonwebtoken::jwk::KeyAlgorithm) -> Option<Algorithm> {
    use jsonwebtoken::jwk::KeyAlgorithm as K;
    Some(match a {
        K::HS256 => Algorithm::HS256,
        K::HS384 => Algorithm::HS384,
        K::HS512 => Algorithm::HS512,
        K::ES256 => Algorithm::ES256,
        K::ES384 => Algorithm::ES384,
        K::RS256 => Algorithm::RS256,
        K::RS384 => Algorithm::RS384,
        K::RS512 => Algorithm::RS512,
        K::PS256 => Algorithm::PS256,
        K::PS384 => Algorithm::PS384,
        K::PS512 => Algorithm::PS512,
        K::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

struct KeyCache {
    set: JwkSet,
    modified: Option<SystemTime>,
    checked: Instant,
}

pub struct Authenticator {
    pub cfg: AuthConfig,
    source: KeySource,
    /// Serializes URL fetches so a burst of unknown kids costs one request.
    fetch: tokio::sync::Mutex<()>,
    keys: RwLock<KeyCache>,
    metadata_url: String,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("mode", &self.cfg.mode)
            .field("resource", &self.cfg.resource)
            .finish()
    }
}

/// Minimum time between JWKS re-reads triggered by unknown `kid`s.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

fn changed(path: &PathBuf, cache: &KeyCache) -> bool {
    std::fs::metadata(path).and_then(|m| m.modified()).ok() != cache.modified
}

fn read_jwks(path: &PathBuf) -> Result<(JwkSet, Option<SystemTime>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let set: JwkSet =
        serde_json::from_str(&text).map_err(|e| format!("{}: not a JWKS: {e}", path.display()))?;
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((set, modified))
}

/// A caller identity verified by admission (`anonymous` when none).
pub struct Caller<'a> {
    pub scope: &'a str,
    /// True when results depend on authorization (→ `cacheScope: private`).
    pub private: bool,
    /// The tenant's authenticator and the verified principal, for per-skill scope checks.
    pub auth: Option<&'a Authenticator>,
    pub principal: Option<&'a Principal>,
}

impl Caller<'_> {
    /// The per-skill scope check every binding runs before the contract: 401/403 with the
    /// tenant's `WWW-Authenticate` challenge when the token does not allow the skill `skill_id`
    /// (`Skill::id`).
    pub fn authorize(&self, skill_id: &str) -> Result<(), RpcError> {
        let Some(auth) = self.auth else {
            return Ok(());
        };
        let Err(denial) = auth.authorize(skill_id, self.principal) else {
            return Ok(());
        };
        let challenge = auth.challenge(&denial);
        let mut e = match challenge.status {
            403 => RpcError::of(
                Failure::InsufficientScope,
                "Forbidden: the access token lacks the scope this tool needs",
            ),
            _ => RpcError::of(
                Failure::Unauthorized,
                "Unauthorized: this tool needs an OAuth access token",
            ),
        };
        e.headers = challenge
            .headers
            .into_iter()
            .filter(|(n, _)| n == "www-authenticate")
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect();
        Err(e)
    }
}

/// `https://host/.well-known/oauth-protected-resource/<path>` for a resource URL.
pub fn metadata_url(resource: &str) -> Option<String> {
    let (scheme, rest) = resource.split_once("://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    Some(format!("{scheme}://{host}{PRM_PREFIX}{path}"))
}

impl Authenticator {
    pub fn new(cfg: AuthConfig, source: KeySource) -> Result<Authenticator, String> {
        let metadata_url =
            metadata_url(&cfg.resource).ok_or("auth.resource must be an absolute URL")?;
        if cfg.authorization_servers.is_empty() {
            return Err("auth.authorization_servers: name at least one".into());
        }
        let (set, modified) = match &source {
            KeySource::File(p) => read_jwks(p)?,
            // Fetched on first use: the start must not depend on the IdP.
            KeySource::Url(_) => (JwkSet { keys: Vec::new() }, None),
        };
        let stale = Instant::now()
            .checked_sub(Duration::from_secs(cfg.jwks_refresh_secs + 1))
            .unwrap_or_else(Instant::now);
        Ok(Authenticator {
            cfg,
            source,
            fetch: tokio::sync::Mutex::new(()),
            keys: RwLock::new(KeyCache {
                set,
                modified,
                checked: stale,
            }),
            metadata_url,
        })
    }

    pub fn mode(&self) -> AuthMode {
        self.cfg.mode
    }

    /// The path this tenant's metadata document is served at.
    pub fn metadata_path(&self) -> String {
        self.metadata_url
            .split_once("://")
            .and_then(|(_, r)| r.find('/').map(|i| r[i..].to_owned()))
            .unwrap_or_else(|| PRM_PREFIX.to_owned())
    }

    /// RFC 9728 protected resource metadata.
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.cfg.resource,
            "authorization_servers": self.cfg.authorization_servers,
            "scopes_supported": self.cfg.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "AAP MCP endpoint",
        })
    }

    pub fn scopes_for(&self, skill_id: &str) -> Option<&Vec<String>> {
        self.cfg.tool_scopes.get(skill_id).filter(|s| !s.is_empty())
    }

    /// Validate the `Authorization` header. `Ok(None)` means no token.
    pub async fn authenticate(
        &self,
        header: Option<&str>,
        count: usize,
    ) -> Result<Option<Principal>, Denial> {
        if count > 1 {
            return Err(Denial::Invalid {
                description: "more than one Authorization header",
            });
        }
        let Some(header) = header else {
            return match self.cfg.mode {
                AuthMode::Required => Err(Denial::Missing { scope: None }),
                _ => Ok(None),
            };
        };
        let token = bearer_token(header).ok_or(Denial::Invalid {
            description: "expected a Bearer token",
        })?;
        if let KeySource::Url(_) = self.source {
            if let Ok(Some(kid)) = decode_header(token).map(|h| h.kid) {
                self.refresh_from_url(&kid).await;
            }
        }
        self.verify(token).map(Some)
    }

    /// Fetch the JWKS when the cache is older than the refresh interval, or
    /// when `kid` is unknown (at most once per REFRESH_EVERY).
    async fn refresh_from_url(&self, kid: &str) {
        let KeySource::Url(fetcher) = &self.source else {
            return;
        };
        let due = |c: &KeyCache| {
            let age = c.checked.elapsed();
            age >= Duration::from_secs(self.cfg.jwks_refresh_secs)
                || (c.set.find(kid).is_none() && age >= REFRESH_EVERY)
        };
        if !self.keys.read().map(|c| due(&c)).unwrap_or(false) {
            return;
        }
        let _one = self.fetch.lock().await;
        if !self.keys.read().map(|c| due(&c)).unwrap_or(false) {
            return;
        }
        let fetched = fetcher.fetch().await.and_then(|body| {
            serde_json::from_slice::<JwkSet>(&body).map_err(|e| format!("not a JWKS: {e}"))
        });
        if let Ok(mut cache) = self.keys.write() {
            cache.checked = Instant::now();
            match fetched {
                Ok(set) => cache.set = set,
                Err(e) => {
                    tracing::warn!(error = %e, "JWKS fetch failed; keeping the previous keys")
                }
            }
        }
    }

    fn key_for(&self, kid: &str) -> Option<jsonwebtoken::jwk::Jwk> {
        if let Some(k) = self.keys.read().ok()?.set.find(kid) {
            return Some(k.clone());
        }
        // Unknown kid: the key may have rotated. Re-read the JWKS, at most
        // once per REFRESH_EVERY, then look again.
        let KeySource::File(path) = &self.source else {
            return None;
        };
        let mut cache = self.keys.write().ok()?;
        if cache.checked.elapsed() >= REFRESH_EVERY || changed(path, &cache) {
            cache.checked = Instant::now();
            match read_jwks(path) {
                Ok((set, modified)) => {
                    cache.set = set;
                    cache.modified = modified;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "JWKS refresh failed; keeping the previous keys")
                }
            }
        }
        cache.set.find(kid).cloned()
    }

    fn verify(&self, token: &str) -> Result<Principal, Denial> {
        let invalid = |description| Denial::Invalid { description };
        let header = decode_header(token).map_err(|_| invalid("malformed token"))?;
        let kid = header.kid.ok_or(invalid("token has no kid"))?;
        let jwk = self.key_for(&kid).ok_or(invalid("unknown signing key"))?;
        // A key that names its algorithm verifies that algorithm only
        // (RFC 7517 §4.4): an RS256 key must not accept a PS256 or RS384
        // signature made with the same RSA key pair.
        if let Some(declared) = jwk.common.key_algorithm {
            if key_algorithm(declared) != Some(header.alg) {
                return Err(invalid("token algorithm does not match the signing key"));
            }
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| invalid("unusable signing key"))?;
        let alg = match header.alg {
            a @ (Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::ES256
            | Algorithm::ES384
            | Algorithm::PS256
            | Algorithm::EdDSA) => a,
            _ => return Err(invalid("unsupported algorithm")),
        };
        let mut v = Validation::new(alg);
        v.leeway = self.cfg.leeway_secs;
        v.validate_nbf = true;
        v.set_issuer(&[self.cfg.issuer.as_str()]);
        v.set_audience(&[self.cfg.resource.as_str()]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = decode::<Claims>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            invalid(match e.kind() {
                K::ExpiredSignature => "token expired",
                K::ImmatureSignature => "token not yet valid",
                K::InvalidAudience => "token audience is not this resource",
                K::InvalidIssuer => "token issuer is not accepted",
                K::InvalidSignature => "bad signature",
                K::MissingRequiredClaim(_) => "token lacks a required claim",
                _ => "token rejected",
            })
        })?;
        let c = data.claims;
        // jsonwebtoken does not check `iat`; a token issued in the future
        // (beyond the clock leeway) is refused.
        if let Some(iat) = c.iat {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            if !iat.is_finite() || iat > now + self.cfg.leeway_secs as f64 {
                return Err(invalid("token issued in the future"));
            }
        }
        let subject = c
            .sub
            .or(c.client_id)
            .ok_or(invalid("token has no subject"))?;
        let mut scopes: HashSet<String> = c
            .scope
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        scopes.extend(c.scp.unwrap_or_default());
        Ok(Principal {
            scope: format!("sub:{subject}"),
            scopes,
        })
    }

    /// Check that a principal (or anonymous caller) may use a skill.
    pub fn authorize(&self, skill_id: &str, who: Option<&Principal>) -> Result<(), Denial> {
        let Some(needed) = self.scopes_for(skill_id) else {
            return Ok(());
        };
        let scope = needed.join(" ");
        match who {
            None => Err(Denial::Missing { scope: Some(scope) }),
            Some(p) if needed.iter().all(|s| p.scopes.contains(s)) => Ok(()),
            Some(_) => Err(Denial::InsufficientScope { scope }),
        }
    }

    /// The HTTP response for a denial, with its `WWW-Authenticate` challenge
    /// (JSON-RPC `id` null; see [`Authenticator::refusal`] to give one).
    pub fn challenge(&self, denial: &Denial) -> HttpResponse {
        let e = self.refusal(denial);
        let mut resp = HttpResponse::json(e.http_status, &e.to_body(None));
        resp.add_fields(e.headers);
        resp
    }

    /// A denial as a JSON-RPC error: HTTP 401/403, code
    /// [`code::UNAUTHORIZED`], and the `WWW-Authenticate` challenge header.
    pub fn refusal(&self, denial: &Denial) -> RpcError {
        let mut parts = vec![format!("resource_metadata=\"{}\"", self.metadata_url)];
        let (kind, message) = match denial {
            Denial::Missing { scope } => {
                if let Some(s) = scope {
                    parts.push(format!("scope=\"{s}\""));
                }
                (
                    Failure::Unauthorized,
                    "Unauthorized: this operation needs an OAuth access token".to_string(),
                )
            }
            Denial::Invalid { description } => {
                parts.push("error=\"invalid_token\"".into());
                parts.push(format!("error_description=\"{description}\""));
                (
                    Failure::Unauthorized,
                    format!("Unauthorized: {description}"),
                )
            }
            Denial::InsufficientScope { scope } => {
                parts.push("error=\"insufficient_scope\"".into());
                parts.push(format!("scope=\"{scope}\""));
                (
                    Failure::InsufficientScope,
                    format!("Forbidden: this operation needs scope {scope}"),
                )
            }
        };
        let mut e = RpcError::of(kind, message);
        e.headers.push((
            "www-authenticate".into(),
            format!("Bearer {}", parts.join(", ")),
        ));
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        for h in ["Bearer t", "bearer t", "BEARER t", "bEaReR   t "] {
            assert_eq!(bearer_token(h), Some("t"), "{h}");
        }
        for h in [
            "Basic t",
            "Bearer",
            "Bearer ",
            "Bearert",
            "Bearer a b",
            "Bearer a\tb",
        ] {
            assert_eq!(bearer_token(h), None, "{h}");
        }
    }

    #[test]
    fn metadata_url_inserts_well_known() {
        assert_eq!(
            metadata_url("https://api.example.com/aap/3.0.0/t/mcp").unwrap(),
            "https://api.example.com/.well-known/oauth-protected-resource/aap/3.0.0/t/mcp"
        );
        assert_eq!(
            metadata_url("http://h:8080").unwrap(),
            "http://h:8080/.well-known/oauth-protected-resource"
        );
        assert!(metadata_url("not a url").is_none());
    }
}
