//! Metrics that scale with many tenants: the bounded default `/metrics`, per-tenant labels only
//! where `[telemetry] tenant_metrics` asks, and per-tenant figures on the admin listener.

use crate::support::*;
use serde_json::json;

/// The shipped config with `n` copies of its tenant (dealer-0 .. dealer-(n-1), each on its own
/// path), and `telemetry` (a `[telemetry]` body) before the tenants.
fn many(n: usize, telemetry: &str) -> String {
    let text = config_with("", "", &format!("[telemetry]\n{telemetry}\n"));
    let at = text.find("[[tenants]]").unwrap();
    let (head, tenant) = text.split_at(at);
    let mut out = head.to_owned();
    for i in 0..n {
        out.push_str(
            &tenant
                .replace("id = \"demo-toyota\"", &format!("id = \"dealer-{i}\""))
                .replace(
                    "/aap/3.0.0/demo-toyota/",
                    &format!("/aap/3.0.0/dealer-{i}/"),
                ),
        );
        out.push('\n');
    }
    out
}

fn search(gw: &Gateway, i: usize) {
    let body = modern(
        "tools/call",
        json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "pagination": {"limit": 1}}}),
    );
    let r = request(
        gw.port,
        "POST",
        &format!("/aap/3.0.0/dealer-{i}/mcp"),
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "dealer-{i}: {}", r.text());
}

fn metrics(gw: &Gateway) -> String {
    let m = request(gw.admin, "GET", "/metrics", &[], b"");
    assert_eq!(m.status, 200);
    m.text()
}

#[test]
fn default_metrics_stay_bounded_and_figures_stay_reachable() {
    // Above the "auto" limit of 100 tenants: no tenant gets a label of its own.
    let n = 120;
    let gw = Gateway::start_with(&many(n, ""));
    for i in 0..n {
        search(&gw, i);
    }
    search(&gw, 7);
    let t = metrics(&gw);
    assert!(!t.contains("tenant=\"dealer-"), "{t}");
    assert!(t.contains("tenant=\"_other\""), "{t}");
    // 120 tenants with traffic: about the size of one tenant's series (a few KB), where a
    // label per tenant made it grow by kilobytes per tenant.
    assert!(t.len() < 20_000, "{} bytes", t.len());
    let requests: f64 = t
        .lines()
        .filter(|l| l.starts_with("aap_requests_total{") && l.contains("tenant=\"_other\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(requests, (n + 1) as f64, "{t}");

    let s = request(gw.admin, "GET", "/admin/tenants/dealer-7/stats", &[], b"");
    assert_eq!(s.status, 200);
    let s = s.json();
    assert_eq!(
        (
            s["tenant"].as_str(),
            s["requests"].as_u64(),
            s["tool_calls"].as_u64()
        ),
        (Some("dealer-7"), Some(2), Some(2)),
        "{s}"
    );
    let top = request(
        gw.admin,
        "GET",
        "/admin/tenants/top?by=requests&n=3",
        &[],
        b"",
    )
    .json();
    assert_eq!(top["tenants"], n, "{top}");
    assert_eq!(top["top"].as_array().map(Vec::len), Some(3), "{top}");
    assert_eq!(top["top"][0]["tenant"], "dealer-7", "{top}");
    assert_eq!(top["top"][1]["requests"], 1, "{top}");
    assert_eq!(
        request(gw.admin, "GET", "/admin/tenants/nobody/stats", &[], b"").status,
        404
    );
    for bad in [
        "/admin/tenants/top?by=luck",
        "/admin/tenants/top?n=0",
        "/admin/tenants/top?x=1",
    ] {
        let r = request(gw.admin, "GET", bad, &[], b"");
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
}

#[test]
fn tenants_named_in_tenant_metrics_get_their_own_label() {
    let gw = Gateway::start_with(&many(3, "tenant_metrics = [\"dealer-1\"]"));
    for i in 0..3 {
        search(&gw, i);
    }
    let t = metrics(&gw);
    assert!(t.contains("tenant=\"dealer-1\""), "{t}");
    assert!(
        !t.contains("tenant=\"dealer-0\"") && !t.contains("tenant=\"dealer-2\""),
        "{t}"
    );
    assert!(t.contains("tenant=\"_other\""), "{t}");

    // "all" on reload: every tenant labelled; the figures survive the reload.
    let text = many(3, "tenant_metrics = \"all\"");
    std::fs::write(&gw.config, text).unwrap();
    let r = request(
        gw.admin,
        "POST",
        "/reload",
        &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    search(&gw, 2);
    let t = metrics(&gw);
    assert!(t.contains("tenant=\"dealer-2\""), "{t}");
    let s = request(gw.admin, "GET", "/admin/tenants/dealer-2/stats", &[], b"").json();
    assert_eq!(s["requests"], 2, "{s}");

    // "none": the labelled series go (they are reset), nothing new is labelled.
    std::fs::write(&gw.config, many(3, "tenant_metrics = \"none\"")).unwrap();
    let r = request(
        gw.admin,
        "POST",
        "/reload",
        &[("Authorization", &format!("Bearer {ADMIN_TOKEN}"))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    search(&gw, 0);
    let t = metrics(&gw);
    assert!(!t.contains("tenant=\"dealer-"), "{t}");
}
