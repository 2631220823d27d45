//! The discovery documents of one tenant: the A2A Agent Card, `/llms.txt` and the Poppy link,
//! generated (pure, no I/O) from the same skills and capabilities that build its `tools/list`.
//!
//! Every document names the same public MCP URL, AAP contract and skill subset, so the three
//! can never disagree with each other or with the MCP catalog. They are serialized once per
//! config generation; the strong `ETag` is a digest of the bytes.

use crate::aap::catalog::AAP_META_KEY;
use crate::aap::schemas::{AAP_RELEASE, SCHEMA_BASE_URL};
use crate::aap::skill::Skill;
use crate::auth::{AuthConfig, AuthMode};
use crate::digest::{canonical_json, sha256_hex};
use crate::mcp::revision::SUPPORTED;
use bytes::Bytes;
use serde_json::{json, Map, Value};

/// The AAP extension URI the card declares and A2A callers activate.
pub const AAP_EXTENSION_URI: &str = crate::a2a::EXTENSION_URI;
/// The A2A protocol version of the JSON-RPC interface.
pub const A2A_PROTOCOL_VERSION: &str = "1.0";
/// Where the documents live: below a dealer domain's root, or below the
/// tenant prefix (the MCP path without its last segment).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
pub const LLMS_PATH: &str = "/llms.txt";
pub const POPPY_PATH: &str = "/poppy.json";

/// Which discovery document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Card,
    Llms,
    Poppy,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Card, Kind::Llms, Kind::Poppy];

    /// The document's path below a root or a tenant prefix.
    pub fn path(self) -> &'static str {
        match self {
            Kind::Card => CARD_PATH,
            Kind::Llms => LLMS_PATH,
            Kind::Poppy => POPPY_PATH,
        }
    }

    /// The file name `publish --out` writes.
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Card => "agent-card.json",
            Kind::Llms => "llms.txt",
            Kind::Poppy => "poppy.json",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Kind::Card | Kind::Poppy => "application/json",
            Kind::Llms => "text/plain; charset=utf-8",
        }
    }

    /// The document a path names, relative to a root or prefix.
    pub fn from_path(rest: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.path() == rest)
    }
}

/// One serialized document.
#[derive(Debug, Clone)]
pub struct Document {
    pub kind: Kind,
    pub body: Bytes,
    /// Strong entity tag, quoted.
    pub etag: String,
}

impl Document {
    fn new(kind: Kind, body: Vec<u8>) -> Document {
        let etag = format!("\"{}\"", &sha256_hex(&body)[..32]);
        Document {
            kind,
            body: Bytes::from(body),
            etag,
        }
    }

    /// True when an `If-None-Match` value matches this document (RFC 9110
    /// §13.1.2: `*`, or any listed tag by weak comparison).
    pub fn not_modified(&self, if_none_match: Option<&str>) -> bool {
        let Some(v) = if_none_match else {
            return false;
        };
        let mine = self.etag.as_str();
        v.split(',')
            .map(str::trim)
            .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == mine)
    }
}

/// The three documents of one tenant, and how long caches may keep them.
#[derive(Debug, Clone)]
pub struct Documents {
    pub tenant: String,
    pub card: Document,
    pub llms: Document,
    pub poppy: Document,
    /// `Cache-Control: max-age`, in seconds (the tenant's `list_ttl_ms`).
    pub max_age_secs: u64,
    /// The card's `params.id`.
    pub card_id: String,
}

impl Documents {
    pub fn get(&self, kind: Kind) -> &Document {
        match kind {
            Kind::Card => &self.card,
            Kind::Llms => &self.llms,
            Kind::Poppy => &self.poppy,
        }
    }
}

/// What the documents are generated from: the tenant definition that also
/// builds its `tools/list`.
#[derive(Debug, Clone)]
pub struct Tenant<'a> {
    pub id: &'a str,
    /// Display name (default: the tenant id).
    pub name: Option<&'a str>,
    pub description: Option<&'a str>,
    /// The exact public MCP URL.
    pub mcp_url: &'a str,
    /// Dealer domains that serve the documents at the root.
    pub hosts: &'a [String],
    /// (organization, url)
    pub provider: Option<(&'a str, &'a str)>,
    /// The implemented skills (any order; published in AAP order).
    pub skills: &'a [Skill],
    /// The inventory capabilities the search tool's `_meta` carries.
    pub capabilities: &'a Value,
    pub auth: Option<&'a AuthConfig>,
    pub list_ttl_ms: u64,
}

/// The public URL of the A2A interface beside an MCP URL: its last path
/// segment replaced by `a2a`.
pub fn a2a_url(mcp_url: &str) -> String {
    crate::a2a::path_for(mcp_url)
}

/// A document's public URL under the prefix of an MCP URL.
pub fn document_url(mcp_url: &str, kind: Kind) -> String {
    format!("{}{}", crate::host::prefix_of(mcp_url), kind.path())
}

fn skill_description(skill: Skill) -> &'static str {
    match skill {
        Skill::DealerInformation => "The dealership's profile: rooftops with address, hours, contacts, services and the fees included in advertised prices.",
        Skill::InventoryFacets => "Counts of the vehicles in stock by make, model, year, condition, body style, fuel and more, with price and mileage ranges.",
        Skill::InventorySearch => "Search the vehicles in stock with typed filters, a sort and cursor paging; prices include mandatory dealer fees.",
        Skill::InventoryVehicle => "Full details of one vehicle by VIN, stock number or vehicle id, or VEHICLE_UNAVAILABLE once it has left stock.",
        Skill::LeadSubmit => "Send the buyer's enquiry to the dealership; needs the buyer's explicit contact consent and an idempotency key.",
    }
}

fn skill_tags(skill: Skill) -> &'static [&'static str] {
    match skill {
        Skill::DealerInformation => &["automotive", "dealer", "locations", "hours", "fees"],
        Skill::InventoryFacets => &["automotive", "inventory", "facets", "filters"],
        Skill::InventorySearch => &["automotive", "inventory", "search", "vehicles"],
        Skill::InventoryVehicle => &["automotive", "inventory", "vehicle", "vin"],
        Skill::LeadSubmit => &["automotive", "lead", "consent", "contact"],
    }
}

/// `application/vnd.autoagent.<x>-request+json`.
pub fn request_media_type(skill: Skill) -> String {
    format!(
        "application/vnd.autoagent.{}-request+json",
        skill.media_stem()
    )
}

/// `application/vnd.autoagent.<x>-response+json`.
pub fn response_media_type(skill: Skill) -> String {
    format!(
        "application/vnd.autoagent.{}-response+json",
        skill.media_stem()
    )
}

fn schema_url(skill: Skill, side: &str) -> String {
    format!(
        "{SCHEMA_BASE_URL}{}-{side}.schema.json",
        skill.schema_stem()
    )
}

/// A UUID (version 8, RFC 9562 §5.8) from a digest of the card's content:
/// equal content gives the same id on every instance and every restart, and
/// any change gives a new one. (A v7 id would need a clock and stored state
/// to stay put while the content does.)
fn content_id(card_without_id: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(canonical_json(card_without_id).as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// The access requirements of the MCP endpoint (`params.mcp` keys).
fn access(t: &Tenant<'_>) -> Map<String, Value> {
    let mut m = Map::new();
    match t.auth.filter(|a| a.mode != AuthMode::Off) {
        None => {
            m.insert("access".into(), json!("public"));
        }
        Some(a) => {
            m.insert("access".into(), json!("oauth"));
            let scopes: Map<String, Value> = a
                .tool_scopes
                .iter()
                .filter(|(s, v)| {
                    !v.is_empty() && Skill::from_id(s).is_some_and(|s| t.skills.contains(&s))
                })
                .map(|(s, v)| (s.clone(), json!(v)))
                .collect();
            m.insert(
                "oauth".into(),
                json!({
                    // true: every call needs a token; false: reads are
                    // anonymous and only the skills in skill_scopes need one.
                    "required": a.mode == AuthMode::Required,
                    "resource": t.mcp_url,
                    "resource_metadata": crate::auth::metadata_url(t.mcp_url),
                    "authorization_servers": a.authorization_servers,
                    "skill_scopes": scopes,
                }),
            );
        }
    }
    m
}

fn access_sentence(t: &Tenant<'_>) -> String {
    match t.auth.filter(|a| a.mode != AuthMode::Off) {
        None => "public: no sign-in, no API key".into(),
        Some(a) => {
            let prm = crate::auth::metadata_url(t.mcp_url).unwrap_or_default();
            let who = if a.mode == AuthMode::Required {
                "every call needs an OAuth 2.1 bearer token".to_owned()
            } else {
                let scoped: Vec<&str> = a
                    .tool_scopes
                    .iter()
                    .filter(|(s, v)| {
                        !v.is_empty() && Skill::from_id(s).is_some_and(|s| t.skills.contains(&s))
                    })
                    .map(|(s, _)| s.as_str())
                    .collect();
                if scoped.is_empty() {
                    "public; an OAuth 2.1 bearer token is validated when sent".to_owned()
                } else {
                    format!(
                        "public reads; an OAuth 2.1 bearer token is needed for {}",
                        scoped.join(", ")
                    )
                }
            };
            format!("{who} (protected resource metadata: {prm})")
        }
    }
}

fn ordered(skills: &[Skill]) -> Vec<Skill> {
    let mut v = skills.to_vec();
    v.sort();
    v.dedup();
    v
}

fn name_of<'a>(t: &Tenant<'a>) -> &'a str {
    t.name.unwrap_or(t.id)
}

fn description_of(t: &Tenant<'_>, skills: &[Skill]) -> String {
    if let Some(d) = t.description {
        return d.to_owned();
    }
    let ids: Vec<&str> = skills.iter().map(|s| s.id()).collect();
    format!(
        "Auto Agent Protocol {AAP_RELEASE} dealer agent for {}: {}. Served over MCP and A2A 1.0 with one contract.",
        name_of(t),
        ids.join(", ")
    )
}

/// The Agent Card (A2A 1.0 shape with the AAP extension).
pub fn agent_card(t: &Tenant<'_>) -> Value {
    let skills = ordered(t.skills);
    let mut schemas = Map::new();
    for s in &skills {
        schemas.insert(
            s.id().into(),
            json!({
                "request_schema": schema_url(*s, "request"),
                "response_schema": schema_url(*s, "response"),
            }),
        );
    }
    let mut mcp = Map::new();
    mcp.insert("url".into(), json!(t.mcp_url));
    mcp.insert("transport".into(), json!("streamable-http"));
    mcp.insert("protocol_versions".into(), json!(SUPPORTED));
    mcp.extend(access(t));
    let auth = t.auth.filter(|a| a.mode != AuthMode::Off);
    let scoped = |s: Skill| -> Option<&Vec<String>> {
        auth.and_then(|a| a.tool_scopes.get(s.id()))
            .filter(|v| !v.is_empty())
    };
    let card_skills: Vec<Value> = skills
        .iter()
        .map(|s| {
            let mut v = json!({
                "id": s.id(),
                "name": s.title(),
                "description": skill_description(*s),
                "tags": skill_tags(*s),
                "inputModes": [request_media_type(*s)],
                "outputModes": [response_media_type(*s)],
            });
            // With optional auth, a scoped skill names its requirement.
            if let (Some(a), Some(scopes)) = (auth, scoped(*s)) {
                if a.mode == AuthMode::Optional {
                    v["securityRequirements"] =
                        json!([{ "schemes": { "bearer": { "list": scopes } } }]);
                }
            }
            v
        })
        .collect();
    let mut card = json!({
        "name": name_of(t),
        "description": description_of(t, &skills),
        "supportedInterfaces": [{
            "url": a2a_url(t.mcp_url),
            "protocolBinding": "JSONRPC",
            "protocolVersion": A2A_PROTOCOL_VERSION,
        }],
        "version": AAP_RELEASE,
        "capabilities": {
            "streaming": false,
            "pushNotifications": false,
            "extensions": [{
                "uri": AAP_EXTENSION_URI,
                "description": format!("Auto Agent Protocol {AAP_RELEASE}: automotive retail skills; the same contract over MCP (params.mcp)."),
                "required": true,
                "params": {
                    "id": "",
                    "version": AAP_RELEASE,
                    "schema_base_url": SCHEMA_BASE_URL,
                    "skills": schemas,
                    "mcp": mcp,
                    "capabilities": t.capabilities,
                },
            }],
        },
        "defaultInputModes": skills.iter().map(|s| request_media_type(*s)).collect::<Vec<_>>(),
        "defaultOutputModes": skills.iter().map(|s| response_media_type(*s)).collect::<Vec<_>>(),
        "skills": card_skills,
    });
    if let Some((org, url)) = t.provider {
        card["provider"] = json!({ "organization": org, "url": url });
    }
    if let Some(a) = auth {
        card["securitySchemes"] = json!({
            "bearer": {
                "httpAuthSecurityScheme": {
                    "description": format!(
                        "OAuth 2.1 access token for {} from {}; see the protected resource metadata at {}.",
                        t.mcp_url,
                        a.authorization_servers.join(", "),
                        crate::auth::metadata_url(t.mcp_url).unwrap_or_default()
                    ),
                    "scheme": "Bearer",
                    "bearerFormat": "JWT",
                }
            }
        });
        if a.mode == AuthMode::Required {
            card["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
        }
    }
    let id = content_id(&card);
    card["capabilities"]["extensions"][0]["params"]["id"] = json!(id);
    card
}

/// `/llms.txt` (llmstxt.org: an H1, a summary blockquote, then sections of
/// Markdown links).
pub fn llms_txt(t: &Tenant<'_>, card_id: &str) -> String {
    let skills = ordered(t.skills);
    let name = name_of(t);
    let mut out = String::new();
    out.push_str(&format!("# {name}\n\n"));
    out.push_str(&format!(
        "> {name} answers AI agents over the Auto Agent Protocol (AAP) {AAP_RELEASE}: connect an MCP client to {} ({}).\n\n",
        t.mcp_url,
        access_sentence(t)
    ));
    out.push_str(&format!(
        "AAP contract version: {AAP_RELEASE} (extension URI {AAP_EXTENSION_URI}). Agent Card id: {card_id}.\n\n"
    ));
    out.push_str("## Endpoints\n\n");
    out.push_str(&format!(
        "- [MCP endpoint]({}): Streamable HTTP, MCP {}; POST JSON-RPC with Content-Type: application/json. Access: {}.\n",
        t.mcp_url,
        SUPPORTED.join(" and "),
        access_sentence(t)
    ));
    out.push_str(&format!(
        "- [A2A endpoint]({}): A2A {A2A_PROTOCOL_VERSION} JSON-RPC SendMessage; send A2A-Version: {A2A_PROTOCOL_VERSION} and A2A-Extensions: {AAP_EXTENSION_URI}.\n\n",
        a2a_url(t.mcp_url)
    ));
    out.push_str("## Skills\n\n");
    for s in &skills {
        out.push_str(&format!(
            "- [{}]({}): MCP tool `{}`. {}\n",
            s.id(),
            schema_url(*s, "request"),
            s.tool_name(),
            skill_description(*s)
        ));
    }
    out.push_str("\n## Discovery\n\n");
    out.push_str(&format!(
        "- [Agent Card]({}): A2A 1.0 card with the AAP extension (params.mcp names the MCP endpoint)\n",
        document_url(t.mcp_url, Kind::Card)
    ));
    for h in t.hosts {
        out.push_str(&format!(
            "- [Agent Card on {h}]({}{CARD_PATH})\n",
            host_origin(t.mcp_url, h)
        ));
    }
    out.push_str(&format!(
        "- [Poppy link]({}): the public MCP link\n",
        document_url(t.mcp_url, Kind::Poppy)
    ));
    out
}

/// `https://<host>`, or the MCP URL's scheme for a loopback host.
fn host_origin(mcp_url: &str, host: &str) -> String {
    let loopback = crate::host::Authority::parse(host).is_ok_and(|a| a.is_loopback());
    let scheme = if loopback {
        mcp_url.split_once("://").map_or("https", |(s, _)| s)
    } else {
        "https"
    };
    format!("{scheme}://{host}")
}

/// The Poppy link: the public MCP link under the AAP extension, and no
/// native `apis` entry (PAP sessions are not implemented).
pub fn poppy(t: &Tenant<'_>, card_id: &str) -> Value {
    let skills = ordered(t.skills);
    let mut aap = Map::new();
    aap.insert("version".into(), json!(AAP_RELEASE));
    aap.insert("mcp".into(), json!(t.mcp_url));
    aap.extend(access(t));
    aap.insert(
        "agent_card".into(),
        json!(document_url(t.mcp_url, Kind::Card)),
    );
    aap.insert("agent_card_id".into(), json!(card_id));
    aap.insert(
        "skills".into(),
        json!(skills.iter().map(|s| s.id()).collect::<Vec<_>>()),
    );
    json!({
        "name": name_of(t),
        "extensions": { AAP_META_KEY: aap },
    })
}

/// Generate and serialize the three documents.
pub fn build(t: &Tenant<'_>) -> Result<Documents, String> {
    crate::host::check_public_url(t.mcp_url).map_err(|e| format!("public_url: {e}"))?;
    if t.skills.is_empty() {
        return Err("skills: nothing to publish".into());
    }
    let card = agent_card(t);
    let card_id = card["capabilities"]["extensions"][0]["params"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let pretty = |v: &Value| {
        let mut b = serde_json::to_vec_pretty(v).map_err(|e| e.to_string())?;
        b.push(b'\n');
        Ok::<_, String>(b)
    };
    Ok(Documents {
        tenant: t.id.to_owned(),
        card: Document::new(Kind::Card, pretty(&card)?),
        llms: Document::new(Kind::Llms, llms_txt(t, &card_id).into_bytes()),
        poppy: Document::new(Kind::Poppy, pretty(&poppy(t, &card_id))?),
        max_age_secs: t.list_ttl_ms / 1000,
        card_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant<'a>(skills: &'a [Skill], caps: &'a Value) -> Tenant<'a> {
        Tenant {
            id: "demo",
            name: Some("Demo Motors"),
            description: None,
            mcp_url: "https://api.example.com/aap/3.0.0/demo/mcp",
            hosts: &[],
            provider: None,
            skills,
            capabilities: caps,
            auth: None,
            list_ttl_ms: 300_000,
        }
    }

    #[test]
    fn id_follows_content_only() {
        let caps = json!({"filters": ["make"]});
        let a = build(&tenant(&[Skill::InventorySearch], &caps)).unwrap();
        let again = build(&tenant(&[Skill::InventorySearch], &caps)).unwrap();
        assert_eq!(a.card_id, again.card_id);
        assert_eq!(a.card.etag, again.card.etag);
        let more = build(&tenant(&[Skill::InventorySearch, Skill::LeadSubmit], &caps)).unwrap();
        assert_ne!(a.card_id, more.card_id);
        assert_eq!(
            uuid::Uuid::parse_str(&a.card_id).unwrap().get_version_num(),
            8
        );
        // The cache lifetime is not content.
        let mut t = tenant(&[Skill::InventorySearch], &caps);
        t.list_ttl_ms = 1000;
        let shorter = build(&t).unwrap();
        assert_eq!(shorter.card_id, a.card_id);
        assert_eq!(shorter.max_age_secs, 1);
    }

    #[test]
    fn if_none_match_compares_weakly() {
        let caps = json!({});
        let d = build(&tenant(&[Skill::DealerInformation], &caps)).unwrap();
        let tag = d.card.etag.clone();
        assert!(d.card.not_modified(Some(&tag)));
        assert!(d.card.not_modified(Some(&format!("\"x\", W/{tag}"))));
        assert!(d.card.not_modified(Some("*")));
        assert!(!d.card.not_modified(Some("\"x\"")));
        assert!(!d.card.not_modified(None));
    }

    #[test]
    fn prefixes_and_siblings() {
        assert_eq!(
            document_url("https://h.example/aap/3.0.0/demo/mcp", Kind::Card),
            format!("https://h.example/aap/3.0.0/demo{}", Kind::Card.path())
        );
        assert_eq!(
            a2a_url("https://h.example/aap/3.0.0/demo/mcp"),
            "https://h.example/aap/3.0.0/demo/a2a"
        );
    }
}
