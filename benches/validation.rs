//! Validation cost per call, measured (not asserted): the request checks a
//! tools/call runs before any backend sees it, for search and lead payloads.
//!
//! Run: `cargo bench --bench validation`. Prints µs per call and, as the
//! in-run baseline, the cost of parsing the same arguments from JSON.

use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::aap::skill::Skill;
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Instant;

fn per_call_us(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / iters as f64
}

fn main() {
    let set = SchemaSet::embedded().expect("schemas");
    let search = json!({
        "type": "inventory.search.request",
        "filters": {"make": ["Toyota"], "price_max": 35000, "status": ["available"], "body": ["suv"], "year_min": 2022},
        "pagination": {"limit": 20},
        "sort": {"field": "price", "order": "asc"},
        "privacy": {"anonymous": true}
    });
    let lead = json!({
        "type": "lead.submit.request",
        "customer": {"first_name": "Alex", "last_name": "Sample", "email": "alex@example.com", "phone": "+14155550123", "preferred_contact": "email"},
        "consent": {"granted_at": "2026-11-30T10:00:00Z", "allowed_channels": ["email", "phone"], "consent_text": "I agree to be contacted about this vehicle.", "scope": ["lead_submission"]},
        "vehicle_of_interest": {"vin": "JTDACAAU2H3400137", "condition": "used"},
        "trade_in": {"year": 2018, "make": "Honda", "model": "Civic", "condition": "good", "mileage": 61000},
        "appointment": {"appointment_type": "test_drive", "appointment_at": "2026-12-20T18:00:00Z", "duration_minutes": 30},
        "source_agent": {"name": "bench"},
        "idempotency_key": "7f9c2b1e-0d3a-4c55-9a61-2f1a9f0b8e11"
    });
    let bad_search = json!({"type": "inventory.search.request", "filters": {"price_max": "cheap", "colour": ["red"]}});
    let iters = 20_000;
    println!("{:<34} {:>10}", "operation", "µs/call");
    for (label, skill, v) in [
        ("search: validate (valid)", Skill::InventorySearch, &search),
        ("lead: validate (valid)", Skill::LeadSubmit, &lead),
        (
            "search: validate (2 errors)",
            Skill::InventorySearch,
            &bad_search,
        ),
    ] {
        let us = per_call_us(iters, || {
            let _ = black_box(set.validate_request(skill, black_box(v)));
        });
        println!("{label:<34} {us:>10.2}");
    }
    for (label, v) in [
        ("baseline: parse search JSON", &search),
        ("baseline: parse lead JSON", &lead),
    ] {
        let text = v.to_string();
        let us = per_call_us(iters, || {
            let _: Value = black_box(serde_json::from_str(black_box(&text)).unwrap_or(Value::Null));
        });
        println!("{label:<34} {us:>10.2}");
    }
}
