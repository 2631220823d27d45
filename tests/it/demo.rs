//! The embedded demo dealer over real HTTP: filters, sorting, cursor paging,
//! facets, vehicle detail.

use crate::support::*;
use serde_json::{json, Value};
use std::collections::HashSet;

fn search(gw: &Gateway, args: Value) -> Value {
    let (err, sc) = gw.call_sc("aap_inventory_search", args);
    assert!(!err, "{sc}");
    sc["data"].clone()
}

#[test]
fn filters_narrow_results() {
    let gw = Gateway::start();
    let all = search(
        &gw,
        json!({"type": "inventory.search.request", "pagination": {"limit": 100}}),
    );
    let total = all["total"].as_u64().unwrap();
    assert!(
        total >= 60,
        "demo inventory has at least 60 listed vehicles"
    );
    for v in all["vehicles"].as_array().unwrap() {
        assert!(
            ["available", "intransit", "pending"].contains(&v["status"].as_str().unwrap()),
            "sold units never listed"
        );
    }
    let d = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {
        "make": ["toyota"], "year_min": 2022, "price_min": 25000, "price_max": 45000, "status": ["available"], "body": ["suv"]
    }, "pagination": {"limit": 100}}),
    );
    let vs = d["vehicles"].as_array().unwrap();
    assert!(!vs.is_empty());
    assert!((vs.len() as u64) < total);
    for v in vs {
        assert_eq!(v["make"], "Toyota");
        assert!(v["year"].as_i64().unwrap() >= 2022);
        let p = v["price"].as_i64().unwrap();
        assert!((25000..=45000).contains(&p));
        assert_eq!(v["status"], "available");
        assert_eq!(v["body"], "suv");
    }
    let none = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {"make": ["Bugatti"]}}),
    );
    assert_eq!(none["total"], 0);
    let moto = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {"vehicle_type": ["motorcycle"]}}),
    );
    assert!(moto["total"].as_u64().unwrap() >= 1);
    let q = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {"query": "hybrid"}}),
    );
    assert!(q["total"].as_u64().unwrap() >= 1);
}

#[test]
fn sort_puts_unpriced_last_and_orders() {
    let gw = Gateway::start();
    for order in ["asc", "desc"] {
        let d = search(
            &gw,
            json!({"type": "inventory.search.request", "sort": {"field": "price", "order": order}, "pagination": {"limit": 100}}),
        );
        let prices: Vec<Option<i64>> = d["vehicles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["price"].as_i64())
            .collect();
        let priced: Vec<i64> = prices.iter().flatten().copied().collect();
        let mut sorted = priced.clone();
        sorted.sort();
        if order == "desc" {
            sorted.reverse();
        }
        assert_eq!(priced, sorted, "{order}");
        let first_none = prices
            .iter()
            .position(Option::is_none)
            .unwrap_or(prices.len());
        assert!(
            prices[first_none..].iter().all(Option::is_none),
            "vehicles without price sort last ({order})"
        );
    }
}

#[test]
fn cursor_pages_cover_everything_once() {
    let gw = Gateway::start();
    let args = json!({"type": "inventory.search.request", "sort": {"field": "year", "order": "desc"}, "pagination": {"limit": 7}});
    let mut seen = HashSet::new();
    let mut page = search(&gw, args.clone());
    let total = page["total"].as_u64().unwrap() as usize;
    loop {
        for v in page["vehicles"].as_array().unwrap() {
            assert!(
                seen.insert(v["stock"].as_str().unwrap().to_owned()),
                "duplicate across pages"
            );
        }
        let Some(c) = page["next_cursor"].as_str() else {
            break;
        };
        let mut next = args.clone();
        next["pagination"]["cursor"] = json!(c);
        page = search(&gw, next);
    }
    assert_eq!(seen.len(), total);
    // A cursor is bound to its query.
    let first = search(&gw, args.clone());
    let mut other = json!({"type": "inventory.search.request", "filters": {"make": ["Ford"]}, "pagination": {"limit": 7}});
    other["pagination"]["cursor"] = first["next_cursor"].clone();
    let (err, sc) = gw.call_sc("aap_inventory_search", other);
    assert!(err);
    assert_eq!(sc["code"], "INVALID_CURSOR");
}

#[test]
fn limit_is_capped_and_echoed() {
    let gw = Gateway::start();
    let d = search(
        &gw,
        json!({"type": "inventory.search.request", "pagination": {"limit": 1000}}),
    );
    assert_eq!(d["limit"], 100);
    let d = search(&gw, json!({"type": "inventory.search.request"}));
    assert_eq!(d["limit"], 20);
    assert_eq!(d["vehicles"].as_array().unwrap().len(), 20);
}

#[test]
fn facets_and_detail() {
    let gw = Gateway::start();
    let (err, sc) = gw.call_sc(
        "aap_inventory_facets",
        json!({"type": "inventory.facets.request", "filters": {"make": ["Toyota"]}}),
    );
    assert!(!err);
    let makes = sc["data"]["makes"].as_array().unwrap();
    assert_eq!(makes.len(), 1);
    assert_eq!(makes[0]["value"], "Toyota");
    assert!(
        sc["data"]["price_range"]["min"].as_i64().unwrap()
            <= sc["data"]["price_range"]["max"].as_i64().unwrap()
    );
    let statuses: Vec<&str> = sc["data"]["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value"].as_str().unwrap())
        .collect();
    assert!(!statuses.contains(&"sold"));
    let first = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {"make": ["Toyota"]}, "pagination": {"limit": 1}}),
    );
    let v = &first["vehicles"][0];
    for (k, val) in [
        ("vin", &v["vin"]),
        ("stock", &v["stock"]),
        ("vehicle_id", &v["vehicle_id"]),
    ] {
        let (err, sc) = gw.call_sc(
            "aap_inventory_vehicle",
            json!({"type": "inventory.vehicle.request", k: val}),
        );
        assert!(!err, "{sc}");
        assert_eq!(&sc["data"], v, "lookup by {k}");
    }
    let (err, sc) = gw.call_sc(
        "aap_dealer_information",
        json!({"type": "dealer.information.request"}),
    );
    assert!(!err);
    assert!(sc["data"]["rooftops"].as_array().unwrap().len() >= 2);
}

#[test]
fn lead_with_appointment() {
    let gw = Gateway::start();
    let mut l = lead(&uuid::Uuid::new_v4().to_string());
    l["appointment"] = json!({"appointment_type": "test_drive", "appointment_at": "2026-12-20T18:00:00Z", "duration_minutes": 30});
    let (err, sc) = gw.call_sc("aap_lead_submit", l);
    assert!(!err, "{sc}");
    assert_eq!(sc["data"]["appointment"]["status"], "requested");
    assert!(sc["data"]["lead_id"].as_str().unwrap().starts_with("lead_"));
    let rec = stored_leads(&gw.state, "demo-toyota").remove(0);
    assert_eq!(
        rec["request"]["consent"]["scope"],
        json!(["lead_submission"]),
        "consent stored for audit"
    );
}
