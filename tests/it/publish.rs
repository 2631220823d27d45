//! The discovery documents over real HTTP (Agent Card, llms.txt, Poppy link) for several tenant
//! kinds, checked against the A2A card shape, the AAP rules and tools/list; the CLI; CORS.

use crate::support::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const PREFIX: &str = "/aap/3.0.0/demo-toyota";
/// The shipped config's public URL (loopback, for local use).
const SHIPPED_URL: &str = "http://127.0.0.1:8080/aap/3.0.0/demo-toyota/mcp";
const AAP_KEY: &str = "autoagentprotocol.org/aap";
const ALL_SKILLS: [&str; 5] = [
    "dealer.information",
    "inventory.facets",
    "inventory.search",
    "inventory.vehicle",
    "lead.submit",
];

/// A request with a chosen `Host` (the support client always sends 127.0.0.1).
fn on_host(port: u16, method: &str, path: &str, host: &str, extra: &[(&str, &str)]) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    raw(port, req.as_bytes()).unwrap()
}

fn get(gw: &Gateway, path: &str) -> Resp {
    let r = request(gw.port, "GET", path, &[], b"");
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    r
}

/// The three documents under the tenant prefix: (card, llms.txt, poppy).
fn documents(gw: &Gateway, prefix: &str) -> (Resp, Resp, Resp) {
    (
        get(gw, &format!("{prefix}/.well-known/agent-card.json")),
        get(gw, &format!("{prefix}/llms.txt")),
        get(gw, &format!("{prefix}/poppy.json")),
    )
}

fn media(skill: &str, side: &str) -> String {
    let stem = match skill {
        "inventory.vehicle" => "vehicle-detail".to_owned(),
        s => s.replace('.', "-"),
    };
    format!("application/vnd.autoagent.{stem}-{side}+json")
}

/// Every string in the card that is a URL is https, or http on loopback.
fn urls_are_https_or_loopback(v: &Value) {
    match v {
        Value::String(s) if s.starts_with("http://") => {
            let host = s[7..].split(['/', ':']).next().unwrap();
            assert!(
                ["127.0.0.1", "localhost", "[", ""].contains(&host),
                "plain http outside loopback: {s}"
            );
        }
        Value::Array(a) => a.iter().for_each(urls_are_https_or_loopback),
        Value::Object(m) => m.values().for_each(urls_are_https_or_loopback),
        _ => {}
    }
}

/// The A2A 1.0 AgentCard shape and the AAP card rules (docs/publish.md;
/// notes §2, §11, §15), for a tenant serving `skills` at `mcp_url`.
fn check_card(card: &Value, mcp_url: &str, skills: &[&str]) -> Value {
    for key in ["name", "description", "version"] {
        assert!(
            card[key].as_str().is_some_and(|s| !s.is_empty()),
            "{key}: {card}"
        );
    }
    // supportedInterfaces: JSONRPC first, A2A 1.0, beside the MCP path.
    let ifaces = card["supportedInterfaces"].as_array().expect("interfaces");
    assert!(!ifaces.is_empty());
    assert_eq!(ifaces[0]["protocolBinding"], "JSONRPC");
    assert_eq!(ifaces[0]["protocolVersion"], "1.0");
    let a2a = format!("{}/a2a", &mcp_url[..mcp_url.rfind('/').unwrap()]);
    assert_eq!(ifaces[0]["url"], a2a.as_str());
    // Exactly one AAP extension, required, with the params the notes name.
    let exts = card["capabilities"]["extensions"]
        .as_array()
        .expect("extensions");
    let aap: Vec<&Value> = exts
        .iter()
        .filter(|e| {
            e["uri"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://autoagentprotocol.org/extensions/aap/"))
        })
        .collect();
    assert_eq!(aap.len(), 1, "exactly one AAP extension: {card}");
    assert_eq!(
        aap[0]["uri"],
        "https://autoagentprotocol.org/extensions/aap/v3.0"
    );
    assert_eq!(aap[0]["required"], true);
    let params = &aap[0]["params"];
    let id = params["id"].as_str().expect("params.id");
    uuid::Uuid::parse_str(id).expect("params.id is a UUID");
    assert_eq!(params["version"], "3.0.0");
    let base = params["schema_base_url"].as_str().expect("schema_base_url");
    assert!(
        base.starts_with("https://") && base.ends_with('/'),
        "{base}"
    );
    let pruned: BTreeSet<&str> = params["skills"]
        .as_object()
        .expect("params.skills")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        pruned,
        skills.iter().copied().collect(),
        "pruned to the subset"
    );
    for (skill, s) in params["skills"].as_object().unwrap() {
        for side in ["request_schema", "response_schema"] {
            let url = s[side].as_str().unwrap();
            assert!(url.starts_with(base), "{skill} {side}: {url}");
        }
    }
    assert_eq!(
        params["mcp"]["url"], mcp_url,
        "params.mcp names the exact URL"
    );
    assert!(params["capabilities"].is_object());
    // Modes: the vnd media types, never application/json; non-empty.
    let card_skills = card["skills"].as_array().expect("skills");
    let ids: Vec<&str> = card_skills
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = skills.to_vec();
    want.sort();
    assert_eq!(ids, want, "one skill per implemented skill, in AAP order");
    for (key, side) in [
        ("defaultInputModes", "request"),
        ("defaultOutputModes", "response"),
    ] {
        let modes: Vec<&str> = card[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        let expected: Vec<String> = want.iter().map(|s| media(s, side)).collect();
        assert_eq!(modes, expected, "{key}");
    }
    for s in card_skills {
        let id = s["id"].as_str().unwrap();
        for key in ["name", "description"] {
            assert!(s[key].as_str().is_some_and(|v| !v.is_empty()), "{id}.{key}");
        }
        assert!(!s["tags"].as_array().unwrap().is_empty(), "{id}: tags");
        assert_eq!(s["inputModes"], json!([media(id, "request")]), "{id}");
        assert_eq!(s["outputModes"], json!([media(id, "response")]), "{id}");
    }
    urls_are_https_or_loopback(card);
    parse_with_a2a_sdk(card);
    params.clone()
}

/// Parse the card with the PyPI a2a-sdk's AgentCard (strict ProtoJSON: an
/// unknown or misspelt field fails), when the test venv has it.
fn parse_with_a2a_sdk(card: &Value) {
    let python = std::env::var_os("AAP_UPSTREAMS_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo().join("target").join("upstreams-venv"))
        .join("bin")
        .join("python");
    let has_sdk = python.is_file()
        && std::process::Command::new(&python)
            .args(["-c", "import a2a.types"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_sdk {
        eprintln!(
            "a2a-sdk not in the test venv (bash tests/upstreams/setup.sh): card not parsed with it"
        );
        return;
    }
    let dir = temp_dir("card");
    let file = dir.join("card.json");
    std::fs::write(&file, card.to_string()).unwrap();
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys\n\
             from google.protobuf.json_format import ParseDict\n\
             from a2a.types import AgentCard\n\
             card = ParseDict(json.load(open(sys.argv[1])), AgentCard())\n\
             print(card.supported_interfaces[0].protocol_binding, len(card.skills))\n",
        )
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a2a-sdk AgentCard refused the card: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = card["skills"].as_array().unwrap().len();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("JSONRPC {n}")
    );
}

/// llms.txt: an H1, a summary blockquote, a Markdown link to the exact MCP
/// URL, the access, the contract version, each skill and the card link.
fn check_llms(text: &str, mcp_url: &str, skills: &[&str], access: &str) {
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("# "), "{text}");
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().starts_with("> "), "{text}");
    assert!(text.contains(&format!("]({mcp_url})")), "{text}");
    assert!(text.contains("3.0.0"), "{text}");
    assert!(text.contains(access), "{access}: {text}");
    let card = format!(
        "]({}/.well-known/agent-card.json)",
        &mcp_url[..mcp_url.rfind('/').unwrap()]
    );
    assert!(text.contains(&card), "{text}");
    for s in ALL_SKILLS {
        assert_eq!(
            text.contains(&format!("[{s}](")),
            skills.contains(&s),
            "{s}: {text}"
        );
    }
}

/// The Poppy link: the public MCP link under the AAP extension, no `apis`.
fn check_poppy(poppy: &Value, mcp_url: &str, skills: &[&str]) {
    assert_eq!(poppy["extensions"][AAP_KEY]["mcp"], mcp_url, "{poppy}");
    assert!(poppy.get("apis").is_none(), "no native apis entry: {poppy}");
    let listed: BTreeSet<&str> = poppy["extensions"][AAP_KEY]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(listed, skills.iter().copied().collect());
}

/// tools/list from the endpoint: the tool names and the search tool's
/// `_meta` capabilities.
fn tools_list(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> (Vec<String>, Option<Value>) {
    let mut h = vec![
        ("Content-Type", "application/json"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
    ];
    h.extend_from_slice(headers);
    let r = request(
        gw.port,
        "POST",
        path,
        &h,
        modern("tools/list", json!({})).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let tools = r.json()["result"]["tools"].as_array().unwrap().clone();
    let names = tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let caps = tools
        .iter()
        .find(|t| t["name"] == "aap_inventory_search")
        .map(|t| t["_meta"][AAP_KEY]["capabilities"].clone());
    (names, caps)
}

fn tool_names(skills: &[&str]) -> Vec<String> {
    let mut s = skills.to_vec();
    s.sort();
    s.iter()
        .map(|s| format!("aap_{}", s.replace('.', "_")))
        .collect()
}

#[test]
fn embedded_tenant_publishes_one_story_at_the_prefix_and_on_its_domain() {
    let cfg = config_with("", "", "").replace(
        "# hosts = [\"www.demo-toyota.example\"]",
        "hosts = [\"www.demo-toyota.test\"]",
    );
    let gw = Gateway::start_with(&cfg);
    let (card, llms, poppy) = documents(&gw, PREFIX);
    assert_eq!(card.header("content-type"), Some("application/json"));
    assert_eq!(
        llms.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(poppy.header("content-type"), Some("application/json"));
    let params = check_card(&card.json(), SHIPPED_URL, &ALL_SKILLS);
    assert_eq!(card.json()["name"], "Demo Toyota");
    assert_eq!(params["mcp"]["access"], "public");
    check_llms(&llms.text(), SHIPPED_URL, &ALL_SKILLS, "public");
    check_poppy(&poppy.json(), SHIPPED_URL, &ALL_SKILLS);
    // The card agrees with tools/list: the tools and the capabilities object.
    let (names, caps) = tools_list(&gw, ENDPOINT, &[]);
    assert_eq!(names, tool_names(&ALL_SKILLS));
    assert_eq!(caps.as_ref(), Some(&params["capabilities"]));
    // The same bytes on the dealer domain's well-known paths (any port, any case).
    for (path, doc) in [
        ("/.well-known/agent-card.json", &card),
        ("/llms.txt", &llms),
        ("/poppy.json", &poppy),
    ] {
        let r = on_host(gw.port, "GET", path, "WWW.Demo-Toyota.test:443", &[]);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, doc.body, "{path}");
        assert_eq!(r.header("etag"), doc.header("etag"));
        // Another host has nothing at the root: no guessed universal path.
        let other = on_host(gw.port, "GET", path, "elsewhere.test", &[]);
        assert_eq!(other.status, 404, "{path}");
    }
    // The domain's documents list it in llms.txt.
    assert!(llms
        .text()
        .contains("(https://www.demo-toyota.test/.well-known/agent-card.json)"));
    // Public documents: any origin may read them.
    assert_eq!(card.header("access-control-allow-origin"), Some("*"));
    assert!(gw.logs().contains("\"outcome\":\"published\""));
}

#[test]
fn mcp_upstream_with_a_skill_subset_publishes_exactly_that_subset() {
    let skills = ["inventory.search", "inventory.vehicle"];
    let caps = json!({
        "type": "inventory.capabilities",
        "filters": ["make", "model", "year_min"],
        "sort_fields": ["price"],
        "facets": ["makes"],
        "vehicle_types": ["car"],
        "statuses": ["available"],
        "conditions": ["new", "used"],
        "pagination": {"default_limit": 10, "max_limit": 25, "cursor": false}
    });
    let url = "https://api.platform.test/aap/3.0.0/demo-toyota/mcp";
    // The documents need nothing from the upstream: its peer may be down.
    let backend = format!(
        "kind = \"mcp\"\npeers = [\"http://127.0.0.1:{}\"]\npath = \"/mcp\"\ncapabilities = {}\n",
        free_port(),
        toml_inline(&caps)
    );
    let cfg = forwarding_config(&backend).replace(
        "[tenants.backend]",
        &format!(
            "skills = [\"inventory.vehicle\", \"inventory.search\"]\npublic_url = \"{url}\"\n[tenants.publish]\nname = \"Demo Toyota (platform)\"\nprovider_name = \"Platform Test\"\nprovider_url = \"https://platform.test\"\n\n[tenants.backend]"
        ),
    );
    let gw = Gateway::start_with(&cfg);
    let (card, llms, poppy) = documents(&gw, PREFIX);
    let card = card.json();
    let params = check_card(&card, url, &skills);
    assert_eq!(
        card["provider"],
        json!({"organization": "Platform Test", "url": "https://platform.test"})
    );
    check_llms(&llms.text(), url, &skills, "public");
    check_poppy(&poppy.json(), url, &skills);
    let (names, search_caps) = tools_list(&gw, ENDPOINT, &[]);
    assert_eq!(names, tool_names(&skills));
    assert_eq!(search_caps.as_ref(), Some(&params["capabilities"]));
    assert_eq!(params["capabilities"], caps, "the configured capabilities");
}

/// A JSON object as a TOML inline table (arrays of strings and numbers).
fn toml_inline(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let parts: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k} = {}", toml_inline(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(toml_inline).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

#[test]
fn a_tenant_that_requires_oauth_says_so_and_its_documents_stay_public() {
    let url = "https://gw.test/aap/3.0.0/demo-toyota/mcp";
    let prm = "https://gw.test/.well-known/oauth-protected-resource/aap/3.0.0/demo-toyota/mcp";
    let jwks = repo().join("tests/keys/jwks.json");
    // One URL: public_url is the OAuth resource (auth.resource left out).
    let auth = format!(
        "public_url = \"{url}\"\n[tenants.auth]\nmode = \"required\"\nissuer = \"https://issuer.test\"\nauthorization_servers = [\"https://issuer.test\"]\njwks_file = {jwks:?}\n"
    );
    let gw = Gateway::start_with(&config_with(&auth, "", ""));
    // The endpoint needs a token and points at the metadata...
    let r = gw.call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request"}),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.header("www-authenticate").unwrap().contains(prm));
    let meta = get(
        &gw,
        "/.well-known/oauth-protected-resource/aap/3.0.0/demo-toyota/mcp",
    );
    assert_eq!(
        meta.json()["resource"],
        url,
        "auth.resource is the public_url"
    );
    // The metadata is public, and a browser client is pointed at it: CORS for any origin,
    // preflight included.
    let meta_path = "/.well-known/oauth-protected-resource/aap/3.0.0/demo-toyota/mcp";
    let r = request(
        gw.port,
        "GET",
        meta_path,
        &[("Origin", "https://app.example")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let r = request(
        gw.port,
        "OPTIONS",
        meta_path,
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "GET"),
        ],
        b"",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("GET")));
    // ...and the documents, served without one, say the same.
    let (card, llms, poppy) = documents(&gw, PREFIX);
    let card = card.json();
    let params = check_card(&card, url, &ALL_SKILLS);
    let mcp = &params["mcp"];
    assert_eq!(mcp["access"], "oauth");
    assert_eq!(mcp["oauth"]["required"], true);
    assert_eq!(mcp["oauth"]["resource"], url);
    assert_eq!(mcp["oauth"]["resource_metadata"], prm);
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {"list": []}}}])
    );
    check_llms(&llms.text(), url, &ALL_SKILLS, prm);
    check_poppy(&poppy.json(), url, &ALL_SKILLS);
    assert_eq!(poppy.json()["extensions"][AAP_KEY]["access"], "oauth");

    // Optional auth with a scoped skill: reads stay public, the lead skill
    // names its requirement, the card as a whole none.
    let optional = auth.replace("mode = \"required\"", "mode = \"optional\"")
        + "[tenants.auth.tool_scopes]\n\"lead.submit\" = [\"leads:write\"]\n";
    let gw = Gateway::start_with(&config_with(&optional, "", ""));
    let (card, llms, _) = documents(&gw, PREFIX);
    let card = card.json();
    let params = check_card(&card, url, &ALL_SKILLS);
    assert_eq!(params["mcp"]["oauth"]["required"], false);
    assert_eq!(
        params["mcp"]["oauth"]["skill_scopes"],
        json!({"lead.submit": ["leads:write"]})
    );
    assert!(card.get("securityRequirements").is_none(), "{card}");
    for skill in card["skills"].as_array().unwrap() {
        let expected = if skill["id"] == "lead.submit" {
            json!([{"schemes": {"bearer": {"list": ["leads:write"]}}}])
        } else {
            Value::Null
        };
        assert_eq!(skill["securityRequirements"], expected, "{skill}");
    }
    assert!(
        llms.text()
            .contains("public reads; an OAuth 2.1 bearer token is needed for lead.submit"),
        "{}",
        llms.text()
    );
}

/// `check` with a config text: (success, stdout + stderr).
fn check(text: &str) -> (bool, String) {
    let dir = temp_dir("check");
    let file = dir.join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn check_notes_what_is_published_and_refuses_bad_public_identities() {
    let shipped = config_with("", "", "");
    let (ok, out) = check(&shipped);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("{PREFIX}/.well-known/agent-card.json")),
        "{out}"
    );
    let line = format!("public_url = \"{SHIPPED_URL}\"\n");
    assert!(shipped.contains(&line));
    // No public URL: a note, not an error.
    let (ok, out) = check(&shipped.replace(&line, ""));
    assert!(ok, "{out}");
    assert!(
        out.contains("note: tenant demo-toyota publishes no discovery documents"),
        "{out}"
    );
    let jwks = repo().join("tests/keys/jwks.json");
    let auth = |resource: &str| {
        format!("[tenants.auth]\nmode = \"optional\"\n{resource}issuer = \"https://i.test\"\nauthorization_servers = [\"https://i.test\"]\njwks_file = {jwks:?}\n[tenants.backend]")
    };
    for (text, key) in [
        (
            shipped.replace(
                &line,
                "public_url = \"http://dealer.test/aap/3.0.0/demo-toyota/mcp\"\n",
            ),
            "tenants[0].public_url: must use https",
        ),
        (
            shipped.replace(
                &line,
                "public_url = \"http://localhost.evil.test/aap/3.0.0/demo-toyota/mcp\"\n",
            ),
            "tenants[0].public_url: must use https",
        ),
        (
            shipped.replace(&line, "public_url = \"https://dealer.test/other/mcp\"\n"),
            "tenants[0].public_url: must end with the tenant path",
        ),
        (
            // Two URLs for one endpoint.
            shipped.replacen(
                "[tenants.backend]",
                &auth("resource = \"https://other.test/aap/3.0.0/demo-toyota/mcp\"\n"),
                1,
            ),
            "tenants[0].auth.resource: must equal public_url",
        ),
        (
            shipped
                .replace(&line, "")
                .replacen("[tenants.backend]", &auth(""), 1),
            "tenants[0].public_url: required with [tenants.auth]",
        ),
        (
            shipped.replace(
                "# hosts = [\"www.demo-toyota.example\"]",
                "hosts = [\"https://x.test/\"]",
            ),
            "tenants[0].publish.hosts",
        ),
        (
            shipped.replace(
                "# provider_name = \"Example Platform\"",
                "provider_name = \"P\"",
            ),
            "tenants[0].publish: set both provider_name and provider_url",
        ),
    ] {
        let (ok, out) = check(&text);
        assert!(!ok, "{key}: accepted");
        assert!(out.contains(key), "{key}: {out}");
    }
}

#[test]
fn card_id_changes_with_content_only_and_caching_follows_list_ttl() {
    let gw = Gateway::start();
    let path = format!("{PREFIX}/.well-known/agent-card.json");
    let first = get(&gw, &path);
    let id = |r: &Resp| r.json()["capabilities"]["extensions"][0]["params"]["id"].clone();
    assert_eq!(first.header("cache-control"), Some("public, max-age=300"));
    let etag = first.header("etag").unwrap().to_owned();
    assert!(
        etag.starts_with('"') && !etag.starts_with("W/"),
        "strong: {etag}"
    );
    // Conditional GET and HEAD.
    let again = request(
        gw.port,
        "GET",
        &path,
        &[("If-None-Match", etag.as_str())],
        b"",
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(again.header("cache-control"), Some("public, max-age=300"));
    let stale = request(
        gw.port,
        "GET",
        &path,
        &[("If-None-Match", "\"other\"")],
        b"",
    );
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, first.body);
    let head = request(gw.port, "HEAD", &path, &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(first.body.len().to_string().as_str())
    );
    assert_eq!(head.header("etag"), Some(etag.as_str()));
    for method in ["POST", "PUT", "DELETE"] {
        let r = request(gw.port, method, &path, &[], b"");
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    }
    // A change that is not content: same id, same ETag, new max-age.
    let text = std::fs::read_to_string(&gw.config).unwrap();
    std::fs::write(
        &gw.config,
        text.replace("list_ttl_ms = 300000", "list_ttl_ms = 60000"),
    )
    .unwrap();
    assert_eq!(gw.reload().status, 200);
    let same = get(&gw, &path);
    assert_eq!(id(&same), id(&first));
    assert_eq!(same.header("etag"), Some(etag.as_str()));
    assert_eq!(same.header("cache-control"), Some("public, max-age=60"));
    // A change that is: a new id, a new ETag, and the old tag no longer matches.
    let text = std::fs::read_to_string(&gw.config).unwrap();
    std::fs::write(
        &gw.config,
        text.replace(
            "name = \"Demo Toyota\"",
            "name = \"Demo Toyota of Testville\"",
        ),
    )
    .unwrap();
    assert_eq!(gw.reload().status, 200);
    let changed = get(&gw, &path);
    assert_ne!(id(&changed), id(&first));
    assert_ne!(changed.header("etag"), Some(etag.as_str()));
    let r = request(
        gw.port,
        "GET",
        &path,
        &[("If-None-Match", etag.as_str())],
        b"",
    );
    assert_eq!(r.status, 200);
    // The other documents name the new id.
    let poppy = get(&gw, &format!("{PREFIX}/poppy.json")).json();
    assert_eq!(poppy["extensions"][AAP_KEY]["agent_card_id"], id(&changed));
}

#[test]
fn publish_command_writes_the_served_bytes() {
    let gw = Gateway::start();
    let (card, llms, poppy) = documents(&gw, PREFIX);
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
            .arg("publish")
            .arg("--config")
            .arg(&gw.config)
            .args(args)
            .output()
            .unwrap()
    };
    let out = temp_dir("publish");
    let one = out.join("site");
    let r = run(&["--tenant", "demo-toyota", "--out", one.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        std::fs::read(one.join(".well-known/agent-card.json")).unwrap(),
        card.body
    );
    assert_eq!(std::fs::read(one.join("llms.txt")).unwrap(), llms.body);
    assert_eq!(std::fs::read(one.join("poppy.json")).unwrap(), poppy.body);
    // Every published tenant, one directory each.
    let all = out.join("all");
    let r = run(&["--out", all.to_str().unwrap()]);
    assert!(r.status.success());
    assert_eq!(
        std::fs::read(all.join("demo-toyota/.well-known/agent-card.json")).unwrap(),
        card.body
    );
    let r = run(&["--tenant", "nobody", "--out", all.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("no tenant \"nobody\""));
}

const ALLOWED: &str = "http://localhost:3000";

fn preflight(port: u16, path: &str, origin: &str, headers: &str) -> Resp {
    request(
        port,
        "OPTIONS",
        path,
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", headers),
        ],
        b"",
    )
}

fn assert_cors_preflight(r: &Resp, methods: &str) {
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some(ALLOWED));
    assert_eq!(r.header("access-control-allow-methods"), Some(methods));
    assert!(r.header("access-control-max-age").is_some());
    assert!(r.header("vary").unwrap().contains("Origin"));
    let allowed: Vec<String> = r
        .header("access-control-allow-headers")
        .unwrap()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    for h in [
        "content-type",
        "accept",
        "authorization",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "mcp-session-id",
        "last-event-id",
        "mcp-param-region",
    ] {
        assert!(allowed.contains(&h.to_owned()), "{h}: {allowed:?}");
    }
    assert!(!allowed.contains(&"x-evil".to_owned()), "{allowed:?}");
    assert!(!allowed.contains(&"mcp-param-".to_owned()), "{allowed:?}");
}

#[test]
fn cors_for_allowed_origins_only_on_endpoint_and_relay_tenants() {
    let gw = Gateway::start();
    let asked =
        "Content-Type, MCP-Protocol-Version, Mcp-Method, Mcp-Param-Region, X-Evil, Mcp-Param-";
    assert_cors_preflight(&preflight(gw.port, ENDPOINT, ALLOWED, asked), "POST");
    // Another origin: 403, and nothing that would let a browser read it.
    let r = preflight(gw.port, ENDPOINT, "http://localhost:3001", asked);
    assert_eq!(r.status, 403);
    assert!(r.header("access-control-allow-origin").is_none());
    // OPTIONS that is not a preflight stays 405.
    let r = request(gw.port, "OPTIONS", ENDPOINT, &[("Origin", ALLOWED)], b"");
    assert_eq!(r.status, 405);
    // The actual request from the allowed origin carries the CORS answer.
    let r = gw.rpc(&[("Origin", ALLOWED)], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some(ALLOWED));
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap()
        .to_ascii_lowercase();
    for h in [
        "mcp-session-id",
        "www-authenticate",
        "retry-after",
        "x-correlation-id",
    ] {
        assert!(exposed.contains(h), "{h}: {exposed}");
    }
    assert_eq!(r.header("vary"), Some("Origin"));
    // ...and from another origin is refused, without CORS headers.
    let r = gw.rpc(
        &[("Origin", "https://evil.test")],
        &modern("tools/list", json!({})),
    );
    assert_eq!(r.status, 403);
    assert!(r.header("access-control-allow-origin").is_none());
    // No Origin (a server-side agent): served, no CORS headers.
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200);
    assert!(r.header("access-control-allow-origin").is_none());
    assert!(gw.logs().contains("\"outcome\":\"preflight\""));

    // A relay tenant gets the same CORS from admission (its upstream is not
    // asked: a preflight never leaves the gateway).
    let relay = forwarding_config(&format!(
        "kind = \"relay\"\npeers = [\"http://127.0.0.1:{}\"]\npath = \"/mcp\"\n",
        free_port()
    ))
    .replace(
        "[tenants.backend]",
        &format!("allowed_origins = [\"{ALLOWED}\"]\n\n[tenants.backend]"),
    );
    let gw = Gateway::start_with(&relay);
    assert_cors_preflight(
        &preflight(gw.port, ENDPOINT, ALLOWED, asked),
        "GET, POST, DELETE",
    );
    assert_eq!(
        preflight(gw.port, ENDPOINT, "https://evil.test", asked).status,
        403
    );
    let r = gw.rpc(&[("Origin", ALLOWED)], &modern("tools/list", json!({})));
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(ALLOWED),
        "{}",
        r.text()
    );
}

#[test]
fn cors_promises_vary_a2a_extensions_and_conditional_document_reads() {
    let gw = Gateway::start();
    // A path that echoes allowed origins varies by Origin even when a request has none:
    // a shared cache must not hand this answer to a page of an allowed origin.
    let r = gw.rpc(&[], &modern("tools/list", json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("access-control-allow-origin").is_none());
    assert_eq!(r.header("vary"), Some("Origin"));
    // The A2A binding lets a browser A2A client read A2A-Extensions.
    let a2a = "/aap/3.0.0/demo-toyota/a2a";
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}});
    let r = request(
        gw.port,
        "POST",
        a2a,
        &[
            ("Origin", ALLOWED),
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some(ALLOWED),
        "{}",
        r.text()
    );
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(exposed.contains("a2a-extensions"), "{exposed}");
    let r = request(
        gw.port,
        "POST",
        a2a,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.header("vary"), Some("Origin"), "{}", r.text());
    // A discovery document's preflight allows the conditional-request headers a page
    // revalidates with (a cross-origin If-None-Match is not refused by the browser).
    let card = format!("{PREFIX}/.well-known/agent-card.json");
    let r = request(
        gw.port,
        "OPTIONS",
        &card,
        &[
            ("Origin", "https://any.example"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "if-none-match"),
        ],
        b"",
    );
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let allowed = r
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(allowed.contains("if-none-match"), "{allowed}");
    // ...and the conditional read itself answers 304 with the CORS headers.
    let etag = get(&gw, &card).header("etag").unwrap().to_owned();
    let r = request(
        gw.port,
        "GET",
        &card,
        &[
            ("Origin", "https://any.example"),
            ("If-None-Match", etag.as_str()),
        ],
        b"",
    );
    assert_eq!(r.status, 304);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
}
