//! Secrets given as `{ env = … }` and `{ file = … }` in the real binary: the
//! upstream receives the credential, and a reload reads a rotated file again.

use crate::support::*;
use serde_json::json;

fn mcp_backend(peer: &Peer, bearer: &str) -> String {
    forwarding_config(&format!(
        "kind = \"mcp\"\npeers = [\"{}\"]\npath = \"/mcp\"\nrevision = \"2026-07-28\"\nconnect_timeout_ms = 1000\nrequest_timeout_ms = 8000\nbearer_token = {bearer}\n",
        peer.url()
    ))
}

fn search(gw: &Gateway) -> Resp {
    gw.call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 1}}),
    )
}

#[test]
fn a_bearer_token_from_the_environment_reaches_the_upstream() {
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &[],
        &[("AAP_MCP_TOKEN", "token-from-the-env-1")],
    );
    let state = temp_dir("secret-env");
    let config = state.join("gateway.toml");
    std::fs::write(
        &config,
        mcp_backend(&peer, "{ env = \"AAP_IT_UPSTREAM_TOKEN\" }"),
    )
    .unwrap();
    let gw = Gateway::launch_with_env(
        config,
        state,
        &[],
        &[("AAP_IT_UPSTREAM_TOKEN", "token-from-the-env-1")],
    );
    let r = search(&gw);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["result"]["structuredContent"]["type"],
        "inventory.search.response"
    );
    assert!(!gw.logs().contains("token-from-the-env-1"));
}

#[test]
fn a_rotated_token_file_is_read_again_on_reload() {
    let peer = Peer::start(
        PeerKind::StrictMcp,
        &[],
        &[("AAP_MCP_TOKEN", "token-from-a-file-2")],
    );
    let state = temp_dir("secret-file");
    std::fs::create_dir_all(state.join("secrets")).unwrap();
    std::fs::write(state.join("secrets/upstream"), "stale-token\n").unwrap();
    let config = state.join("gateway.toml");
    std::fs::write(
        &config,
        mcp_backend(&peer, "{ file = \"secrets/upstream\" }"),
    )
    .unwrap();
    let gw = Gateway::launch(config, state.clone());
    // The upstream refuses the stale credential (502, nothing leaked).
    let r = search(&gw);
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(!r.text().contains("stale-token"));
    // The file is rotated; the config text is unchanged; a reload reads it.
    std::fs::write(state.join("secrets/upstream"), "token-from-a-file-2\n").unwrap();
    let r = gw.reload();
    assert_eq!(r.status, 200, "{}", r.text());
    let r = search(&gw);
    assert_eq!(r.status, 200, "{}", r.text());
    // A missing file is a load error on reload: the running config stays.
    std::fs::remove_file(state.join("secrets/upstream")).unwrap();
    let r = gw.reload();
    assert_ne!(r.status, 200, "{}", r.text());
    assert!(
        r.text().contains("bearer_token") && r.text().contains("secrets/upstream"),
        "{}",
        r.text()
    );
    assert!(!r.text().contains("token-from-a-file-2"));
    assert_eq!(search(&gw).status, 200);
    // `check` reports the same error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&gw.config)
        .arg("check")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bearer_token") && err.contains("no such file"),
        "{err}"
    );
}
