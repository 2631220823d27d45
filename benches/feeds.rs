//! Inventory feeds at 1k / 10k / 50k vehicles (criterion): loading a CSV feed (parse, row checks
//! against the listing schema, the search index), memory per vehicle, and search latency.
//! Run: `cargo bench --bench feeds`. Memory is printed once per size before the timings.

use aap_gateway::aap::cursor::CursorCodec;
use aap_gateway::aap::schemas::SchemaSet;
use aap_gateway::feed::{self, Format, Mapping};
use aap_gateway::upstream::inventory::{Inventory, Paging};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

/// mimalloc (the binary's allocator) with a count of the bytes held, so
/// memory per vehicle is what the inventory keeps allocated after a load.
struct Counting;
static HELD: AtomicIsize = AtomicIsize::new(0);
static INNER: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HELD.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { INNER.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HELD.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { INNER.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        HELD.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { INNER.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MAKES: [(&str, [&str; 3]); 6] = [
    ("Toyota", ["Camry", "RAV4", "Tacoma"]),
    ("Honda", ["Civic", "Accord", "CR-V"]),
    ("Ford", ["F-150", "Escape", "Mustang"]),
    ("Chevrolet", ["Silverado", "Equinox", "Malibu"]),
    ("BMW", ["X3", "330i", "X5"]),
    ("Tesla", ["Model 3", "Model Y", "Model S"]),
];

/// A dealer-style CSV of `n` vehicles (the columns of tests/fixtures/feeds).
fn csv_feed(n: usize) -> Vec<u8> {
    let mut s = String::from("VIN,Stock #,New/Used,Year,Make,Model,Trim,Body Style,Ext Color,Mileage,Internet Price,Photo URLs,Options,Status,Description\n");
    for i in 0..n {
        let (make, models) = MAKES[i % MAKES.len()];
        let model = models[(i / 7) % 3];
        let cond = ["N", "U", "U", "C"][i % 4];
        let price = 18_000 + (i * 7919) % 50_000;
        s.push_str(&format!(
            "1FDAJ{i:012},S{i:06},{cond},{},{make},{model},Sport,Sedan,{},\"{}\",\"${},{:03}\",https://cdn.dealer.example/{i}/1.jpg|https://cdn.dealer.example/{i}/2.jpg|https://cdn.dealer.example/{i}/3.jpg,Sunroof|Heated Seats|Navigation,{},Clean history; one owner; {make} {model} with low miles\n",
            2018 + i % 9,
            ["Black", "White", "Silver", "Blue"][i % 4],
            (i * 131) % 90_000,
            price / 1000,
            price % 1000,
            if i % 25 == 0 { "Sold" } else { "In Stock" },
        ));
    }
    s.into_bytes()
}

fn mapping() -> Mapping {
    let mut m = Mapping::default();
    for (f, c) in [
        ("vin", "VIN"),
        ("stock", "Stock #"),
        ("condition", "New/Used"),
        ("year", "Year"),
        ("make", "Make"),
        ("model", "Model"),
        ("trim", "Trim"),
        ("body", "Body Style"),
        ("exterior_color", "Ext Color"),
        ("mileage", "Mileage"),
        ("price", "Internet Price"),
        ("photos", "Photo URLs"),
        ("features", "Options"),
        ("status", "Status"),
        ("description", "Description"),
    ] {
        m.columns.insert(f.into(), c.into());
    }
    for (k, v) in [("N", "new"), ("U", "used"), ("C", "cpo")] {
        m.values
            .entry("condition".into())
            .or_default()
            .insert(k.into(), v.into());
    }
    for (k, v) in [("In Stock", "available"), ("Sold", "sold")] {
        m.values
            .entry("status".into())
            .or_default()
            .insert(k.into(), v.into());
    }
    m
}

fn load(bytes: &[u8], schemas: &SchemaSet, mapping: &Mapping) -> Inventory {
    let parsed = feed::parse(Format::Csv, mapping, bytes, schemas, "2026-12-05T10:00:00Z")
        .expect("the generated feed parses");
    Inventory::new(parsed.vehicles)
}

fn benches(c: &mut Criterion) {
    let schemas = SchemaSet::embedded().expect("schemas");
    let mapping = mapping();
    let codec = CursorCodec::new(b"bench-cursor-key-0123456789abcdef", 900_000);
    let paging = Paging {
        default_limit: 20,
        max_limit: 100,
        cursor: &codec,
    };
    let mut g = c.benchmark_group("feeds");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    for n in [1_000usize, 10_000, 50_000] {
        let bytes = csv_feed(n);
        let before = HELD.load(Ordering::Relaxed);
        let inv = load(&bytes, &schemas, &mapping);
        let held = HELD.load(Ordering::Relaxed) - before;
        eprintln!(
            "feeds/{n}: feed {} bytes ({} per row); inventory holds {} bytes = {} bytes per vehicle ({} vehicles)",
            bytes.len(),
            bytes.len() / n,
            held,
            held as usize / inv.len().max(1),
            inv.len()
        );
        g.bench_with_input(BenchmarkId::new("load csv", n), &bytes, |b, bytes| {
            b.iter(|| black_box(load(bytes, &schemas, &mapping)))
        });
        let queries = [
            (
                "search default sort, no filter",
                json!({"type": "inventory.search.request"}),
            ),
            (
                "search make+price, price sort",
                json!({"type": "inventory.search.request", "filters": {"make": ["toyota"], "price_max": 40000}, "sort": {"field": "price", "order": "asc"}}),
            ),
            (
                "search free text query",
                json!({"type": "inventory.search.request", "filters": {"query": "tacoma sunroof"}}),
            ),
        ];
        for (name, req) in queries {
            g.bench_with_input(BenchmarkId::new(name, n), &req, |b, req| {
                b.iter(|| black_box(inv.search(req, &paging)))
            });
        }
        let facets = json!({"type": "inventory.facets.request"});
        g.bench_with_input(
            BenchmarkId::new("facets, no filter", n),
            &facets,
            |b, req| b.iter(|| black_box(inv.facets(req))),
        );
    }
    g.finish();
}

criterion_group!(feeds_benches, benches);
criterion_main!(feeds_benches);
