//! OAuth resource-server behaviour over real HTTP with locally minted
//! RS256 and ES256 tokens (test keys in tests/keys/).

use crate::support::*;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const RESOURCE: &str = "https://gw.test/aap/3.0.0/demo-toyota/mcp";
const RESOURCE_B: &str = "https://gw.test/aap/3.0.0/demo-lexus/mcp";
const ISSUER: &str = "https://issuer.test";
const PRM: &str = "/.well-known/oauth-protected-resource/aap/3.0.0/demo-toyota/mcp";

fn keys() -> std::path::PathBuf {
    repo().join("tests/keys")
}

fn auth_block(mode: &str, resource: &str, jwks: &std::path::Path) -> String {
    format!(
        "[tenants.auth]\nmode = \"{mode}\"\nresource = \"{resource}\"\nissuer = \"{ISSUER}\"\nauthorization_servers = [\"{ISSUER}\"]\nscopes_supported = [\"inventory:read\", \"leads:write\"]\njwks_file = {jwks:?}\n[tenants.auth.tool_scopes]\n\"lead.submit\" = [\"leads:write\"]\n"
    )
}

/// A gateway whose tenant uses a private copy of jwks.json (so a test can rotate it).
fn start(mode: &str) -> (Gateway, std::path::PathBuf) {
    let dir = temp_dir("jwks");
    let jwks = dir.join("jwks.json");
    std::fs::copy(keys().join("jwks.json"), &jwks).unwrap();
    let mut cfg = config_with(&auth_block(mode, RESOURCE, &jwks), "", "");
    // A second tenant on the same gateway, with its own resource URL.
    let second = config_with(&auth_block(mode, RESOURCE_B, &jwks), "", "");
    let tenant_b = &second[second.find("[[tenants]]").unwrap()..];
    cfg.push_str(
        &tenant_b
            .replace("id = \"demo-toyota\"", "id = \"demo-lexus\"")
            .replace(
                "/aap/3.0.0/demo-toyota/mcp\"\n",
                "/aap/3.0.0/demo-lexus/mcp\"\n",
            ),
    );
    (Gateway::start_with(&cfg), dir)
}

fn token(kid: &str, key_file: &str, alg: Algorithm, claims: Value) -> String {
    let pem = std::fs::read(keys().join(key_file)).unwrap();
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).unwrap(),
        _ => EncodingKey::from_rsa_pem(&pem).unwrap(),
    };
    let mut h = Header::new(alg);
    h.kid = Some(kid.into());
    encode(&h, &claims, &key).unwrap()
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn claims(aud: &str, scope: &str) -> Value {
    json!({"iss": ISSUER, "aud": aud, "sub": "agent-123", "scope": scope, "exp": now() + 300, "iat": now()})
}

fn rs(claims: Value) -> String {
    token("rsa-1", "rsa-1.pem", Algorithm::RS256, claims)
}

fn call_with(gw: &Gateway, path: &str, bearer: Option<&str>, name: &str, args: Value) -> Resp {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let mut h = vec![("Content-Type", "application/json")];
    if let Some(a) = &auth {
        h.push(("Authorization", a.as_str()));
    }
    let body = modern("tools/call", json!({"name": name, "arguments": args}));
    request(gw.port, "POST", path, &h, body.to_string().as_bytes())
}

fn search() -> Value {
    json!({"type": "inventory.search.request", "pagination": {"limit": 1}})
}

fn challenge(r: &Resp) -> String {
    r.header("www-authenticate")
        .unwrap_or_else(|| panic!("no challenge: {} {}", r.status, r.text()))
        .to_owned()
}

#[test]
fn public_read_needs_no_token_and_results_are_private() {
    let (gw, _d) = start("optional");
    let r = call_with(&gw, ENDPOINT, None, "aap_inventory_search", search());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["isError"], false);
    let list = gw.rpc(&[], &modern("tools/list", json!({}))).json();
    assert_eq!(
        list["result"]["cacheScope"], "private",
        "visibility depends on authorization"
    );
}

#[test]
fn metadata_document_and_401_challenge() {
    let (gw, _d) = start("optional");
    let m = request(gw.port, "GET", PRM, &[], b"");
    assert_eq!(m.status, 200);
    let doc = m.json();
    assert_eq!(doc["resource"], RESOURCE);
    assert_eq!(doc["authorization_servers"], json!([ISSUER]));
    assert!(doc["scopes_supported"]
        .as_array()
        .unwrap()
        .contains(&json!("leads:write")));
    // A lead without a token: 401, no skill execution, challenge with metadata and scope.
    let r = call_with(&gw, ENDPOINT, None, "aap_lead_submit", lead("auth-1"));
    assert_eq!(r.status, 401, "{}", r.text());
    let c = challenge(&r);
    assert!(c.starts_with("Bearer "), "{c}");
    assert!(
        c.contains(&format!("resource_metadata=\"https://gw.test{PRM}\"")),
        "{c}"
    );
    assert!(c.contains("scope=\"leads:write\""), "{c}");
    assert_eq!(leads_in(&gw.state), 0);
}

#[test]
fn required_mode_challenges_every_request() {
    let (gw, _d) = start("required");
    let r = call_with(&gw, ENDPOINT, None, "aap_inventory_search", search());
    assert_eq!(r.status, 401);
    assert!(
        !challenge(&r).contains("error="),
        "no error code when the token is simply absent"
    );
    let ok = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(claims(RESOURCE, "inventory:read"))),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
}

#[test]
fn invalid_tokens_are_401_invalid_token() {
    let (gw, _d) = start("optional");
    let mut expired = claims(RESOURCE, "leads:write");
    expired["exp"] = json!(now() - 600);
    let mut wrong_iss = claims(RESOURCE, "leads:write");
    wrong_iss["iss"] = json!("https://evil.test");
    let cases = [
        (
            "wrong audience",
            rs(claims("https://other.test/mcp", "leads:write")),
        ),
        ("wrong issuer", rs(wrong_iss)),
        ("expired", rs(expired)),
        (
            "bad signature",
            token(
                "rsa-1",
                "attacker.pem",
                Algorithm::RS256,
                claims(RESOURCE, "leads:write"),
            ),
        ),
        (
            "unknown kid",
            token(
                "rsa-2",
                "rsa-2.pem",
                Algorithm::RS256,
                claims(RESOURCE, "leads:write"),
            ),
        ),
        ("garbage", "not.a.jwt".to_string()),
    ];
    for (what, t) in cases {
        let r = call_with(&gw, ENDPOINT, Some(&t), "aap_inventory_search", search());
        assert_eq!(r.status, 401, "{what}: {}", r.text());
        let c = challenge(&r);
        assert!(c.contains("error=\"invalid_token\""), "{what}: {c}");
        assert!(c.contains("resource_metadata="), "{what}");
        assert!(!r.text().contains(&t), "{what}: the token is never echoed");
    }
    assert!(!gw.logs().contains("eyJ"), "tokens never reach the log");
}

#[test]
fn key_rotation_by_kid() {
    let (gw, dir) = start("optional");
    let t = token(
        "rsa-2",
        "rsa-2.pem",
        Algorithm::RS256,
        claims(RESOURCE, "leads:write"),
    );
    assert_eq!(
        call_with(&gw, ENDPOINT, Some(&t), "aap_inventory_search", search()).status,
        401
    );
    std::fs::copy(keys().join("jwks-rotated.json"), dir.join("jwks.json")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&t),
        "aap_lead_submit",
        lead("rotated-1"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["isError"], false);
}

#[test]
fn scopes_es256_and_caller_scoped_idempotency() {
    let (gw, _d) = start("optional");
    let read_only = rs(claims(RESOURCE, "inventory:read"));
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&read_only),
        "aap_lead_submit",
        lead("scope-1"),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    let c = challenge(&r);
    assert!(
        c.contains("error=\"insufficient_scope\"") && c.contains("scope=\"leads:write\""),
        "{c}"
    );
    assert_eq!(leads_in(&gw.state), 0);
    let es = token(
        "es-1",
        "es-1.pem",
        Algorithm::ES256,
        claims(RESOURCE, "inventory:read leads:write"),
    );
    let a = call_with(
        &gw,
        ENDPOINT,
        Some(&es),
        "aap_lead_submit",
        lead("shared-key"),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let first = a.json()["result"]["structuredContent"].clone();
    // Another verified caller using the same key gets its own record.
    let mut other = claims(RESOURCE, "leads:write");
    other["sub"] = json!("agent-456");
    let b = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(other)),
        "aap_lead_submit",
        lead("shared-key"),
    );
    let second = b.json()["result"]["structuredContent"].clone();
    assert_eq!(second["type"], "lead.submit.response");
    assert_ne!(
        first["data"]["lead_id"], second["data"]["lead_id"],
        "idempotency is caller-scoped"
    );
    // The same caller replays.
    let again = call_with(
        &gw,
        ENDPOINT,
        Some(&es),
        "aap_lead_submit",
        lead("shared-key"),
    )
    .json();
    assert_eq!(again["result"]["structuredContent"], first);
    assert_eq!(leads_in(&gw.state), 2);
}

#[test]
fn tenant_isolation() {
    let (gw, _d) = start("optional");
    let for_a = rs(claims(RESOURCE, "leads:write"));
    let ok = call_with(
        &gw,
        ENDPOINT,
        Some(&for_a),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(ok.status, 200);
    let at_b = call_with(
        &gw,
        "/aap/3.0.0/demo-lexus/mcp",
        Some(&for_a),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(
        at_b.status,
        401,
        "a token for tenant A is refused at tenant B: {}",
        at_b.text()
    );
    let for_b = rs(claims(RESOURCE_B, "leads:write"));
    assert_eq!(
        call_with(
            &gw,
            "/aap/3.0.0/demo-lexus/mcp",
            Some(&for_b),
            "aap_inventory_search",
            search()
        )
        .status,
        200
    );
}

#[test]
fn jwks_from_url_with_rotation() {
    let dir = temp_dir("jwks-url");
    std::fs::copy(keys().join("jwks.json"), dir.join("jwks.json")).unwrap();
    let port = free_port();
    let mut server = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 http.server");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let block = auth_block("optional", RESOURCE, std::path::Path::new("unused")).replace(
        "jwks_file = \"unused\"",
        &format!("jwks_url = \"http://127.0.0.1:{port}/jwks.json\""),
    );
    let gw = Gateway::start_with(&config_with(&block, "", ""));
    let ok = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(claims(RESOURCE, "leads:write"))),
        "aap_lead_submit",
        lead("url-1"),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let t2 = token(
        "rsa-2",
        "rsa-2.pem",
        Algorithm::RS256,
        claims(RESOURCE, "leads:write"),
    );
    assert_eq!(
        call_with(&gw, ENDPOINT, Some(&t2), "aap_inventory_search", search()).status,
        401
    );
    std::fs::copy(keys().join("jwks-rotated.json"), dir.join("jwks.json")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = call_with(&gw, ENDPOINT, Some(&t2), "aap_inventory_search", search());
    assert_eq!(
        r.status,
        200,
        "the rotated key is fetched on an unknown kid: {}",
        r.text()
    );
    server.kill().ok();
    server.wait().ok();
    std::fs::remove_dir_all(dir).ok();
}

/// A modern tools/call with the `Authorization` header exactly as given.
fn call_authorized(gw: &Gateway, authorization: &str, id: Value) -> Resp {
    let mut body = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": search()}),
    );
    body["id"] = id;
    request(
        gw.port,
        "POST",
        ENDPOINT,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", authorization),
        ],
        body.to_string().as_bytes(),
    )
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let (gw, _d) = start("required");
    let t = rs(claims(RESOURCE, "inventory:read"));
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r = call_authorized(&gw, &format!("{scheme} {t}"), json!(1));
        assert_eq!(r.status, 200, "{scheme}: {}", r.text());
    }
    let r = call_authorized(&gw, &format!("Bearer   {t}"), json!(1));
    assert_eq!(
        r.status,
        200,
        "several spaces after the scheme: {}",
        r.text()
    );
    for bad in [
        format!("Basic {t}"),
        format!("Bearer{t}"),
        format!("Bearer {t} extra"),
        "Bearer ".to_string(),
    ] {
        let r = call_authorized(&gw, &bad, json!(1));
        assert_eq!(r.status, 401, "{bad:.12}: {}", r.text());
        assert!(challenge(&r).contains("invalid_token"));
    }
}

#[test]
fn a_key_that_names_its_algorithm_verifies_only_that_one() {
    let (gw, _d) = start("required");
    // rsa-1 is published with "alg": "RS256"; the same RSA key pair can
    // sign PS256 and RS384, which must not verify against it.
    for alg in [Algorithm::PS256, Algorithm::RS384, Algorithm::RS512] {
        let t = token(
            "rsa-1",
            "rsa-1.pem",
            alg,
            claims(RESOURCE, "inventory:read"),
        );
        let r = call_with(&gw, ENDPOINT, Some(&t), "aap_inventory_search", search());
        assert_eq!(r.status, 401, "{alg:?}: {}", r.text());
        assert!(
            challenge(&r)
                .contains("error_description=\"token algorithm does not match the signing key\""),
            "{alg:?}: {}",
            challenge(&r)
        );
    }
    let t = token(
        "rsa-1",
        "rsa-1.pem",
        Algorithm::RS256,
        claims(RESOURCE, "inventory:read"),
    );
    let r = call_with(&gw, ENDPOINT, Some(&t), "aap_inventory_search", search());
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_token_issued_in_the_future_is_refused() {
    let (gw, _d) = start("required");
    let mut future = claims(RESOURCE, "inventory:read");
    future["iat"] = json!(now() + 3600);
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(future)),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(
        challenge(&r).contains("token issued in the future"),
        "{}",
        challenge(&r)
    );
    // Within the clock leeway (30 s) it is accepted.
    let mut skewed = claims(RESOURCE, "inventory:read");
    skewed["iat"] = json!(now() + 10);
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(skewed)),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn an_audience_array_must_contain_the_resource() {
    let (gw, _d) = start("required");
    let mut both = claims(RESOURCE, "inventory:read");
    both["aud"] = json!([RESOURCE_B, RESOURCE]);
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(both)),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut other = claims(RESOURCE, "inventory:read");
    other["aud"] = json!([RESOURCE_B, "https://other.test/mcp"]);
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&rs(other)),
        "aap_inventory_search",
        search(),
    );
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(challenge(&r).contains("token audience is not this resource"));
}

#[test]
fn refusals_carry_the_request_id_and_a_code_outside_the_reserved_range() {
    let (gw, _d) = start("required");
    // 401 at admission, before the body is interpreted.
    let body = modern("tools/list", json!({}));
    let mut body = body;
    body["id"] = json!("who-am-i");
    let r = gw.rpc(&[], &body);
    assert_eq!(r.status, 401, "{}", r.text());
    let j = r.json();
    assert_eq!(j["id"], "who-am-i", "{j}");
    assert_eq!(j["error"]["code"], -32010, "{j}");
    let r = call_authorized(&gw, "Bearer not.a.jwt", json!(77));
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["id"], 77);
    assert_eq!(r.error_code(), -32010);
    // 403 for a missing scope on a tool.
    let read_only = rs(claims(RESOURCE, "inventory:read"));
    let r = call_with(
        &gw,
        ENDPOINT,
        Some(&read_only),
        "aap_lead_submit",
        lead("id-403"),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.error_code(), -32010);
    assert_eq!(r.json()["id"], 1);
    assert!(challenge(&r).contains("insufficient_scope"));
}
