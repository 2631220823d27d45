//! Inventory from dealer feeds over real HTTP against the real binary: the CSV and XML fixtures
//! load with exact counts, a broken feed is refused while the old inventory serves, and a changed
//! feed on disk or at a URL (a real HTTP server with ETags) replaces it while a client searches;
//! a URL feed answering 304 stays current, one whose URL fails goes stale.

use crate::support::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What tests/fixtures/feeds/generate.py wrote: 520 rows, 11 malformed, 1 duplicate VIN,
/// 13 sold (loaded, never listed).
const ROWS: u64 = 520;
const REJECTED: u64 = 11;
const DUPLICATES: u64 = 1;
const LOADED: u64 = 508;
const LISTED: u64 = 495;
const MAKES: [(&str, u64); 6] = [
    ("Toyota", 100),
    ("Honda", 84),
    ("BMW", 81),
    ("Tesla", 81),
    ("Ford", 78),
    ("Chevrolet", 71),
];

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/feeds").join(name)
}

/// The dealer's column names and codes, as a tenant maps them.
const CSV_MAPPING: &str = r#"
[tenants.backend.feed.columns]
vin = "VIN"
stock = "Stock #"
condition = "New/Used"
year = "Year"
make = "Make"
model = "Model"
trim = "Trim"
body = "Body Style"
exterior_color = "Ext Color"
interior_color = "Int Color"
mileage = "Mileage"
price = "Internet Price"
msrp = "MSRP"
photos = "Photo URLs"
features = "Options"
status = "Status"
fuel = "Fuel Type"
[tenants.backend.feed.values.condition]
N = "new"
U = "used"
C = "cpo"
[tenants.backend.feed.values.status]
"In Stock" = "available"
Sold = "sold"
[tenants.backend.feed.values.fuel]
Gasoline = "gas"
Electric = "bev"
[tenants.backend.feed.values.body]
Sedan = "sedan"
SUV = "suv"
Truck = "truck"
Coupe = "coupe"
"#;

const XML_MAPPING: &str = r#"
[tenants.backend.feed.columns]
stock = "stock_number"
body = "body_style"
price = "internet_price"
features = "options"
[tenants.backend.feed.values.condition]
N = "new"
U = "used"
C = "cpo"
[tenants.backend.feed.values.status]
"In Stock" = "available"
Sold = "sold"
[tenants.backend.feed.values.fuel]
Gasoline = "gas"
Electric = "bev"
"#;

/// The shipped config with the demo tenant's inventory taken from a feed.
fn feed_config(source: &str, mapping: &str) -> String {
    let feed = format!("[tenants.backend.feed]\n{source}\n{mapping}\n");
    config_with("", &feed, "")
        .lines()
        .filter(|l| !l.starts_with("inventory = "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn search(gw: &Gateway, args: Value) -> Value {
    let (err, sc) = gw.call_sc("aap_inventory_search", args);
    assert!(!err, "{sc}");
    sc["data"].clone()
}

fn total(gw: &Gateway) -> u64 {
    search(gw, json!({"type": "inventory.search.request"}))["total"]
        .as_u64()
        .unwrap()
}

fn metrics(gw: &Gateway) -> String {
    request(gw.admin, "GET", "/metrics", &[], b"").text()
}

/// The value of the series `name{source="<source>"…}`.
fn metric(text: &str, name: &str, source: &str, extra: &str) -> Option<f64> {
    let head = format!("{name}{{{extra}source=\"{source}\"");
    text.lines()
        .find(|l| l.starts_with(&head))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}");
}

/// Exact counts through facets, search, vehicle detail, metrics and /readyz.
fn assert_fixture_served(gw: &Gateway, source: &str) {
    let (err, facets) = gw.call_sc(
        "aap_inventory_facets",
        json!({"type": "inventory.facets.request"}),
    );
    assert!(!err, "{facets}");
    let makes: Vec<(String, u64)> = facets["data"]["makes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["value"].as_str().unwrap().to_owned(),
                m["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = MAKES.iter().map(|(m, n)| (m.to_string(), *n)).collect();
    assert_eq!(makes, want);
    assert_eq!(total(gw), LISTED);
    let conditions = &facets["data"]["conditions"];
    let sum: u64 = conditions
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["count"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, LISTED, "{conditions}");
    // Filters and cursors work on feed data as on the demo data.
    let teslas = search(
        gw,
        json!({"type": "inventory.search.request", "filters": {"make": ["tesla"], "fuel": ["bev"]}, "pagination": {"limit": 50}}),
    );
    assert_eq!(teslas["total"], 81);
    let next = search(
        gw,
        json!({"type": "inventory.search.request", "filters": {"make": ["tesla"], "fuel": ["bev"]}, "pagination": {"cursor": teslas["next_cursor"]}}),
    );
    assert_eq!(next["vehicles"].as_array().unwrap().len(), 31);
    // Row 1 as mapped: dealer prices and mileage become integers.
    let (err, v) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "FD00001"}),
    );
    assert!(!err, "{v}");
    let v = &v["data"];
    assert_eq!(v["vin"], "1FDBJ000000000001");
    assert_eq!(v["condition"], "cpo");
    assert_eq!(
        (v["price"].clone(), v["mileage"].clone()),
        (json!(35695), json!(65796))
    );
    assert_eq!(v["photos"].as_array().unwrap().len(), 2);
    assert_eq!(v["fees"], json!([]));
    assert!(v.get("cost").is_none() && v.get("Dealer Cost").is_none());
    // The duplicate VIN (rows 10 and 500): the first row wins.
    let vin10 = search(
        gw,
        json!({"type": "inventory.search.request", "filters": {"stock": "FD00010"}}),
    )["vehicles"][0]["vin"]
        .clone();
    let (err, v) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "vin": vin10}),
    );
    assert!(!err);
    assert_eq!(v["data"]["stock"], "FD00010");
    // A sold unit is loaded but unavailable; a rejected row is unknown.
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "FD00040"}),
    );
    assert_eq!(code, "VEHICLE_UNAVAILABLE");
    let (code, _) = gw.aap_error_code(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "FD00017"}),
    );
    assert_eq!(code, "VEHICLE_NOT_FOUND");

    let m = metrics(gw);
    assert_eq!(
        metric(&m, "aap_feed_vehicles", source, ""),
        Some(LOADED as f64),
        "{m}"
    );
    assert_eq!(
        metric(&m, "aap_feed_rows_rejected", source, ""),
        Some(REJECTED as f64)
    );
    assert_eq!(
        metric(&m, "aap_feed_rows_duplicate", source, ""),
        Some(DUPLICATES as f64)
    );
    assert!(metric(&m, "aap_feed_last_success_timestamp_seconds", source, "").unwrap() > 1.7e9);
    let ready = request(gw.admin, "GET", "/readyz", &[], b"").json();
    assert_eq!(ready["status"], "ready", "{ready}");
    let feed = &ready["feeds"][0];
    assert_eq!(feed["state"], "ok", "{ready}");
    assert_eq!(feed["rows"], ROWS);
    assert_eq!(feed["vehicles"], LOADED);
    assert_eq!(feed["rejected"], REJECTED);
    assert_eq!(feed["tenants"], 1);

    // One log line per rejected row, naming row, stock and field, never the value.
    let logs = gw.logs();
    assert!(
        logs.contains("row 17 (stock FD00017): price: not a whole number"),
        "{logs}"
    );
    assert!(logs.contains("row 55 (stock FD00055): vin:"), "{logs}");
    assert!(!logs.contains("Call for price"));
}

#[test]
fn the_csv_fixture_loads_with_exact_counts() {
    let path = fixture("inventory.csv");
    let gw = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nfile = {:?}", path),
        CSV_MAPPING,
    ));
    assert_fixture_served(&gw, &path.display().to_string());
    let logs = gw.logs();
    assert!(
        logs.contains("row 466: (row): 17 cells where the header has 18"),
        "{logs}"
    );
}

/// A Windows DMS export (Windows-1252 bytes: `Citro\xebn`, and `Co\xfbt` in a column the mapping
/// does not use) with `encoding = "windows-1252"`: served over MCP with `Citroën` intact.
#[test]
fn a_windows_1252_csv_feed_is_served_with_its_accents() {
    let dir = temp_dir("feed-1252");
    let file = dir.join("export.csv");
    let mut csv = b"VIN,Stock #,New/Used,Year,Make,Model,Internet Price,Co\xfbt\r\n".to_vec();
    csv.extend_from_slice(b"VF7NCRFJ8PY000001,C1,U,2023,Citro\xebn,C5 Aircross,\"$24,500\",1\r\n");
    csv.extend_from_slice(b"VF3MRHNSXNS000002,P2,N,2024,Peugeot,308 GT Premi\xe8re,31990,2\r\n");
    std::fs::write(&file, &csv).unwrap();
    let mapping = "encoding = \"windows-1252\"\n[tenants.backend.feed.columns]\nvin = \"VIN\"\nstock = \"Stock #\"\ncondition = \"New/Used\"\nyear = \"Year\"\nmake = \"Make\"\nmodel = \"Model\"\nprice = \"Internet Price\"\n[tenants.backend.feed.values.condition]\nN = \"new\"\nU = \"used\"\n";
    let gw = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nfile = {:?}", file),
        mapping,
    ));
    let data = search(
        &gw,
        json!({"type": "inventory.search.request", "filters": {"make": ["Citroën"]}}),
    );
    assert_eq!(data["total"], 1, "{data}");
    let (err, sc) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "P2"}),
    );
    assert!(!err, "{sc}");
    assert_eq!(sc["data"]["model"], "308 GT Première", "{sc}");
    assert_eq!(total(&gw), 2);
}

#[test]
fn the_xml_fixture_loads_with_exact_counts() {
    let path = fixture("inventory.xml");
    let gw = Gateway::start_with(&feed_config(
        &format!("format = \"xml\"\nfile = {:?}", path),
        XML_MAPPING,
    ));
    assert_fixture_served(&gw, &path.display().to_string());
}

/// Replace `to` by `text` atomically (write aside, rename), as an export job should.
fn publish(to: &Path, text: &str) {
    let tmp = to.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// The fixture without its last `n` data rows, and with row 2's price changed.
fn fewer_rows(n: usize) -> String {
    let text = std::fs::read_to_string(fixture("inventory.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines[..lines.len() - n]
        .iter()
        .map(|l| l.to_string())
        .collect();
    out[2] = out[2].replace("\"$29,870\"", "\"$28,000\"");
    out.join("\n") + "\n"
}

/// Every data row's price made unreadable after row 100: far over the rejected share.
fn mostly_broken() -> String {
    let text = std::fs::read_to_string(fixture("inventory.csv")).unwrap();
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i > 100 {
                l.replacen(",\"$", ",\"call $", 1)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// A client searching in a loop until stopped; counts answers that are not a complete page.
struct Searcher {
    stop: Arc<AtomicBool>,
    failures: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Searcher {
    fn start(port: u16) -> Searcher {
        let stop = Arc::new(AtomicBool::new(false));
        let failures = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let (s, f, d) = (stop.clone(), failures.clone(), done.clone());
        let thread = std::thread::spawn(move || {
            let body = modern(
                "tools/call",
                json!({"name": "aap_inventory_search", "arguments": {"type": "inventory.search.request", "filters": {"make": ["toyota"]}}}),
            )
            .to_string();
            while !s.load(Ordering::Relaxed) {
                let r = try_request(
                    port,
                    "POST",
                    ENDPOINT,
                    &[
                        ("Content-Type", "application/json"),
                        ("MCP-Protocol-Version", MODERN),
                        ("Mcp-Method", "tools/call"),
                        ("Mcp-Name", "aap_inventory_search"),
                    ],
                    body.as_bytes(),
                );
                let ok = r.ok().is_some_and(|r| {
                    r.status == 200 && {
                        let j = r.json();
                        j["result"]["isError"] == false
                            && j["result"]["structuredContent"]["data"]["total"].as_u64() > Some(0)
                    }
                });
                if !ok {
                    f.fetch_add(1, Ordering::Relaxed);
                }
                d.fetch_add(1, Ordering::Relaxed);
            }
        });
        Searcher {
            stop,
            failures,
            done,
            thread: Some(thread),
        }
    }

    /// Stop; (answers, failures).
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (
            self.done.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }
}

#[test]
fn a_changed_file_replaces_the_inventory_and_a_broken_one_is_refused_under_load() {
    let dir = temp_dir("feed-file");
    let path = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &path).unwrap();
    let source = path.display().to_string();
    let gw = Gateway::start_with(&feed_config(
        &format!(
            "format = \"csv\"\nfile = {:?}\npoll_interval_secs = 1",
            path
        ),
        CSV_MAPPING,
    ));
    assert_eq!(total(&gw), LISTED);
    let searcher = Searcher::start(gw.port);

    // 20 rows fewer (rows 501..520: one of them sold, the duplicate at 500 stays): 19 listed less.
    publish(&path, &fewer_rows(20));
    wait_for("the new inventory", Duration::from_secs(15), || {
        total(&gw) == LISTED - 19
    });
    let (err, v) = gw.call_sc(
        "aap_inventory_vehicle",
        json!({"type": "inventory.vehicle.request", "stock": "FD00002"}),
    );
    assert!(!err);
    assert_eq!(v["data"]["price"], 28000);
    let refused = |gw: &Gateway| {
        metric(
            &metrics(gw),
            "aap_feed_loads_total",
            &source,
            "result=\"refused\",",
        )
    };
    let before = refused(&gw).unwrap_or(0.0);

    // Most prices unreadable: refused, the previous inventory keeps serving.
    publish(&path, &mostly_broken());
    wait_for("the refusal", Duration::from_secs(15), || {
        refused(&gw).unwrap_or(0.0) > before
    });
    assert_eq!(total(&gw), LISTED - 19);
    let ready = request(gw.admin, "GET", "/readyz", &[], b"").json();
    assert!(
        ready["feeds"][0]["last_error"]
            .as_str()
            .unwrap()
            .starts_with("refused:"),
        "{ready}"
    );
    assert_eq!(
        ready["feeds"][0]["state"], "ok",
        "the served inventory is still fresh"
    );

    // A truncated export (most rows gone): refused as a drop.
    publish(&path, &fewer_rows(400));
    wait_for("the second refusal", Duration::from_secs(15), || {
        refused(&gw).unwrap_or(0.0) > before + 1.0
    });
    assert_eq!(total(&gw), LISTED - 19);
    // Not a feed at all: refused too (nothing parsed).
    publish(&path, "\u{1}\u{2}binary\n");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(total(&gw), LISTED - 19);

    // The whole fixture again: accepted.
    publish(
        &path,
        &std::fs::read_to_string(fixture("inventory.csv")).unwrap(),
    );
    wait_for("the full inventory", Duration::from_secs(15), || {
        total(&gw) == LISTED
    });
    let (answers, failures) = searcher.finish();
    assert!(answers > 20, "the client kept searching ({answers})");
    assert_eq!(failures, 0, "no request failed while feeds were swapped");
    let logs = gw.logs();
    assert!(logs.contains("inventory feed refused"), "{logs}");
}

struct FeedServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl FeedServer {
    fn start(file: &Path, auth: Option<&str>) -> FeedServer {
        Self::start_with(file, auth, &[])
    }

    fn start_with(file: &Path, auth: Option<&str>, extra: &[&str]) -> FeedServer {
        let port = free_port();
        let log = file.with_extension("requests.log");
        let mut cmd = Command::new("python3");
        cmd.arg(repo().join("tests/upstreams/feed_server.py"))
            .args(["--port", &port.to_string(), "--file"])
            .arg(file)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(a) = auth {
            cmd.args(["--auth", a]);
        }
        let child = cmd.spawn().expect("python3 runs the feed server");
        wait_for("the feed server", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        FeedServer { child, port, log }
    }

    fn statuses(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for FeedServer {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

#[test]
fn a_changed_feed_at_a_url_replaces_the_inventory_with_conditional_polls() {
    let dir = temp_dir("feed-url");
    let file = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &file).unwrap();
    let server = FeedServer::start(&file, Some("Bearer feed-token-123"));
    let url = format!("http://127.0.0.1:{}/export/inventory.csv", server.port);
    let gw = Gateway::start_with(&feed_config(
        &format!(
            "format = \"csv\"\nurl = \"{url}?key=query-secret\"\npoll_interval_secs = 1\nauthorization = \"Bearer feed-token-123\""
        ),
        CSV_MAPPING,
    ));
    wait_for("the first load", Duration::from_secs(15), || {
        request(gw.admin, "GET", "/readyz", &[], b"").json()["feeds"][0]["state"] == "ok"
    });
    assert_fixture_served(&gw, &url);
    // Unchanged: the polls are conditional and answered 304.
    wait_for("a 304", Duration::from_secs(10), || {
        server.statuses().iter().any(|s| s.starts_with("304 \""))
    });
    let searcher = Searcher::start(gw.port);
    publish(&file, &fewer_rows(20));
    wait_for("the new inventory", Duration::from_secs(15), || {
        total(&gw) == LISTED - 19
    });
    let (answers, failures) = searcher.finish();
    assert!(answers > 5, "{answers}");
    assert_eq!(failures, 0);
    let statuses = server.statuses();
    assert_eq!(statuses[0], "200 -", "{statuses:?}");
    assert_eq!(
        statuses.iter().filter(|s| s.starts_with("200")).count(),
        2,
        "{statuses:?}"
    );
    assert!(
        !statuses.iter().any(|s| s.starts_with("401")),
        "{statuses:?}"
    );
    // Neither the credential nor the query string reaches metrics or logs.
    let m = metrics(&gw);
    assert!(!m.contains("query-secret") && !gw.logs().contains("query-secret"));
    assert!(!gw.logs().contains("feed-token-123"));
}

/// The feed's entry in `/readyz` and in `/admin/feeds`, and the age in seconds of its last
/// successful check by the metric.
fn feed_views(gw: &Gateway, source: &str) -> (Value, Value, f64) {
    let ready = request(gw.admin, "GET", "/readyz", &[], b"").json()["feeds"][0].clone();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let admin = request(
        gw.admin,
        "GET",
        "/admin/feeds",
        &[("Authorization", auth.as_str())],
        b"",
    );
    assert_eq!(admin.status, 200, "{}", admin.text());
    let admin = admin.json()["feeds"][0].clone();
    let m = metrics(gw);
    let success = metric(&m, "aap_feed_last_success_timestamp_seconds", source, "")
        .expect("the last-success series");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    (ready, admin, now - success)
}

#[test]
fn a_url_feed_answering_304_all_weekend_is_never_stale_and_an_unreachable_one_is() {
    let poll = "poll_interval_secs = 1\nstale_after_secs = 2";
    // One feed whose every poll after the first is answered 304 Not Modified.
    let dir = temp_dir("feed-304");
    let file = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &file).unwrap();
    let server = FeedServer::start(&file, None);
    let url = format!("http://127.0.0.1:{}/inventory.csv", server.port);
    let unchanged = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nurl = {url:?}\n{poll}"),
        CSV_MAPPING,
    ));
    // Another that loads once, then its server goes away.
    let dir = temp_dir("feed-gone");
    let gone_file = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &gone_file).unwrap();
    let mut gone_server = Some(FeedServer::start(&gone_file, None));
    let gone_url = format!(
        "http://127.0.0.1:{}/inventory.csv",
        gone_server.as_ref().map_or(0, |s| s.port)
    );
    let gone = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nurl = {gone_url:?}\n{poll}"),
        CSV_MAPPING,
    ));
    for gw in [&unchanged, &gone] {
        wait_for("the first load", Duration::from_secs(15), || {
            request(gw.admin, "GET", "/readyz", &[], b"").json()["feeds"][0]["state"] == "ok"
        });
    }
    drop(gone_server.take());
    let loaded_at = unchanged_load(&unchanged, &url);

    // Three times stale_after_secs: the 304 feed stays current in every view.
    let until = Instant::now() + Duration::from_secs(7);
    let mut looks = 0;
    while Instant::now() < until {
        let (ready, admin, age) = feed_views(&unchanged, &url);
        assert_eq!(ready["state"], "ok", "{ready}");
        assert_eq!(admin["state"], "ok", "{admin}");
        assert!(admin["last_success"].is_string(), "{admin}");
        assert!(age <= 2.5, "last success {age} s ago: {admin}");
        looks += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(looks > 10, "{looks}");
    let statuses = server.statuses();
    assert_eq!(statuses[0], "200 -", "{statuses:?}");
    assert!(statuses.len() >= 6, "polled every second: {statuses:?}");
    assert!(
        statuses[1..].iter().all(|s| s.starts_with("304 \"")),
        "{statuses:?}"
    );
    // The inventory served is still the one loaded first, and says so.
    assert_eq!(unchanged_load(&unchanged, &url), loaded_at);
    let (_, admin, _) = feed_views(&unchanged, &url);
    assert_ne!(admin["last_load"], admin["last_success"], "{admin}");
    assert_eq!(total(&unchanged), LISTED);

    // The feed whose URL fails goes stale in every view, and keeps serving.
    wait_for("the stale state", Duration::from_secs(10), || {
        feed_views(&gone, &gone_url).0["state"] == "stale"
    });
    let (ready, admin, age) = feed_views(&gone, &gone_url);
    assert_eq!(ready["state"], "stale", "{ready}");
    assert_eq!(admin["state"], "stale", "{admin}");
    assert!(
        admin["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("fetch failed"),
        "{admin}"
    );
    let stale_after = metric(
        &metrics(&gone),
        "aap_feed_stale_after_seconds",
        &gone_url,
        "",
    );
    assert_eq!(stale_after, Some(2.0));
    assert!(age > 2.0, "the alert expression holds: {age}");
    assert_eq!(total(&gone), LISTED);
}

#[test]
fn a_304_for_a_refused_version_is_no_successful_check() {
    let dir = temp_dir("feed-304-refused");
    let file = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &file).unwrap();
    let server = FeedServer::start(&file, None);
    let url = format!("http://127.0.0.1:{}/inventory.csv", server.port);
    let gw = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nurl = {url:?}\npoll_interval_secs = 1\nstale_after_secs = 2"),
        CSV_MAPPING,
    ));
    wait_for("the first load", Duration::from_secs(15), || {
        feed_views(&gw, &url).0["state"] == "ok"
    });
    // The export breaks: the new version is refused, and every later poll is answered 304
    // for it. That confirms the refused version, not the inventory served: it goes stale.
    publish(&file, &mostly_broken());
    wait_for("the refusal", Duration::from_secs(15), || {
        feed_views(&gw, &url).1["refusals"] == 1
    });
    let refused_at = server
        .statuses()
        .iter()
        .rposition(|s| s.starts_with("200"))
        .unwrap_or_default();
    assert!(refused_at > 0, "{:?}", server.statuses());
    wait_for(
        "304s for the refused version",
        Duration::from_secs(10),
        || {
            server.statuses()[refused_at + 1..]
                .iter()
                .filter(|s| s.starts_with("304"))
                .count()
                >= 2
        },
    );
    wait_for("the stale state", Duration::from_secs(10), || {
        feed_views(&gw, &url).0["state"] == "stale"
    });
    let (_, admin, age) = feed_views(&gw, &url);
    assert_eq!(admin["state"], "stale", "{admin}");
    assert!(
        admin["last_error"]
            .as_str()
            .unwrap_or("")
            .starts_with("refused"),
        "{admin}"
    );
    assert!(age > 2.0, "{age}");
    // The previous inventory keeps serving meanwhile.
    assert_eq!(total(&gw), LISTED);
}

/// `aap_feed_last_load_timestamp_seconds` of the source.
fn unchanged_load(gw: &Gateway, source: &str) -> f64 {
    metric(
        &metrics(gw),
        "aap_feed_last_load_timestamp_seconds",
        source,
        "",
    )
    .expect("the last-load series")
}

#[test]
fn a_feed_that_never_loaded_leaves_its_tenant_not_ready() {
    // Nothing listens on this port: the first fetch fails.
    let url = format!("http://127.0.0.1:{}/inventory.csv", free_port());
    let state = temp_dir("feed-down");
    let config = state.join("gateway.toml");
    std::fs::write(
        &config,
        feed_config(
            &format!("format = \"csv\"\nurl = {url:?}\npoll_interval_secs = 1"),
            CSV_MAPPING,
        ),
    )
    .unwrap();
    let port = free_port();
    let admin = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aap-gateway"))
        .arg("--config")
        .arg(&config)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--state-dir",
        ])
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = Value::Null;
    wait_for(
        "a readyz answer",
        Duration::from_secs(20),
        || match try_request(admin, "GET", "/readyz", &[], b"") {
            Ok(r) if r.json()["status"] == "not_ready" => {
                assert_eq!(r.status, 503);
                ready = r.json();
                true
            }
            _ => false,
        },
    );
    assert_eq!(ready["not_ready"], json!(["demo-toyota"]), "{ready}");
    assert_eq!(ready["feeds"][0]["state"], "never_loaded");
    assert!(
        ready["feeds"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("fetch failed"),
        "{ready}"
    );
    child.kill().ok();
    child.wait().ok();
}

/// `examples/dealer-feed.toml` as the README walks a dealer through it: the CSV export
/// serves (4 listed of 6 rows), and a lead for a feed vehicle reaches the local ADF receiver
/// (`tests/upstreams/http_sink.py`) under the id the agent was answered with.
#[test]
fn the_dealer_feed_example_serves_the_csv_and_delivers_adf() {
    use crate::support::request;
    use crate::support::{lead, modern, MODERN};
    let examples = repo().join("examples");
    let dir = temp_dir("dealer-feed-example");
    let sink_port = free_port();
    let sink_out = dir.join("adf-received");
    let mut sink = std::process::Command::new("python3")
        .arg(repo().join("tests/upstreams/http_sink.py"))
        .args(["--port", &sink_port.to_string(), "--out"])
        .arg(&sink_out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 runs tests/upstreams/http_sink.py");
    let text = std::fs::read_to_string(examples.join("dealer-feed.toml"))
        .unwrap()
        .replace(
            "\"../data/",
            &format!("\"{}/", repo().join("data").display()),
        )
        .replace(
            "\"feeds/",
            &format!("\"{}/", examples.join("feeds").display()),
        )
        .replace("127.0.0.1:8025", &format!("127.0.0.1:{sink_port}"));
    let config = dir.join("dealer-feed.toml");
    std::fs::write(&config, text).unwrap();
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let gw = Gateway::launch(config, dir.join("state"));
    let path = "/aap/3.0.0/example-motors/mcp";
    let call = |name: &str, arguments: serde_json::Value| {
        let body = modern("tools/call", json!({"name": name, "arguments": arguments}));
        let r = request(
            gw.port,
            "POST",
            path,
            &[
                ("Content-Type", "application/json"),
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", name),
            ],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["result"]["structuredContent"].clone()
    };
    let found = call(
        "aap_inventory_search",
        json!({"type": "inventory.search.request", "pagination": {"limit": 50}}),
    );
    assert_eq!(found["data"]["total"], 4, "{found}");
    let mut args = lead(&format!("example-{}", uuid::Uuid::new_v4().simple()));
    args["vehicle_of_interest"] = json!({"stock": "EX102"});
    args["consent"]["consent_text"] = json!("I agree that Example Motors may contact me by email.");
    let sc = call("aap_lead_submit", args);
    assert_eq!(sc["data"]["status"], "received", "{sc}");
    let lead_id = sc["data"]["lead_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let record = loop {
        let first = sink_out.join("000001.json");
        if let Ok(t) = std::fs::read_to_string(&first) {
            break serde_json::from_str::<serde_json::Value>(&t).unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no ADF reached the receiver"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    sink.kill().ok();
    sink.wait().ok();
    assert_eq!(record["headers"]["idempotency-key"], lead_id.as_str());
    let xml = record["body"].as_str().unwrap();
    assert!(xml.contains(&format!(">{lead_id}</id>")), "{xml}");
    assert!(
        xml.contains("<stock>EX102</stock>") && xml.contains("<make>Toyota</make>"),
        "{xml}"
    );
}

/// Resident memory of a process, in bytes (`VmRSS` of /proc/<pid>/status).
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A 1 GiB feed body (generated by the feed server as it writes, never held) is cut at
/// `max_bytes` while it is read, and one whose `Content-Length` is over the cap is refused
/// before it is read; the gateway's memory grows by less than 64 MB and the previous inventory
/// keeps serving.
#[test]
fn a_feed_body_over_max_bytes_is_cut_while_read_and_the_old_inventory_serves() {
    const GIB: u64 = 1 << 30;
    const CAP: u64 = 16 << 20;
    let dir = temp_dir("feed-huge");
    let file = dir.join("inventory.csv");
    std::fs::copy(fixture("inventory.csv"), &file).unwrap();
    let huge = GIB.to_string();
    let server = FeedServer::start_with(&file, None, &["--huge", &huge]);
    let url = format!("http://127.0.0.1:{}/inventory.csv", server.port);
    let gw = Gateway::start_with(&feed_config(
        &format!("format = \"csv\"\nurl = {url:?}\npoll_interval_secs = 1\nmax_bytes = {CAP}"),
        CSV_MAPPING,
    ));
    let feed = || request(gw.admin, "GET", "/readyz", &[], b"").json()["feeds"][0].clone();
    wait_for("the first load", Duration::from_secs(15), || {
        feed()["state"] == "ok"
    });
    assert_eq!(total(&gw), LISTED);
    let pid = gw.child.as_ref().unwrap().id();
    let before = rss_bytes(pid);

    for mode in ["huge", "huge-declared"] {
        let failures = feed()["failures"].as_u64().unwrap_or(0);
        std::fs::write(format!("{}.mode", file.display()), mode).unwrap();
        let mut peak = before;
        wait_for(mode, Duration::from_secs(60), || {
            peak = peak.max(rss_bytes(pid));
            feed()["failures"].as_u64().unwrap_or(0) > failures
        });
        let f = feed();
        let error = f["last_error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains("larger than max_bytes"), "{mode}: {f}");
        let growth = peak.saturating_sub(before);
        assert!(
            growth < 64 << 20,
            "{mode}: RSS grew by {} MiB while refusing a 1 GiB feed",
            growth >> 20
        );
        // The previous inventory keeps serving.
        assert_eq!(total(&gw), LISTED, "{mode}");
        // The server saw the client hang up long before 1 GiB; with a declared length,
        // before the body was read at all (what it wrote sits in socket buffers).
        wait_for("the server's count", Duration::from_secs(10), || {
            let tag = format!("sent {mode} ");
            server.statuses().iter().any(|s| s.starts_with(&tag))
        });
        let sent: u64 = server
            .statuses()
            .iter()
            .filter(|s| s.starts_with(&format!("sent {mode} ")))
            .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
            .next_back()
            .unwrap();
        assert!(sent < GIB / 4, "{mode}: {sent} bytes were sent");
        eprintln!(
            "{mode}: RSS growth {} KiB, server wrote {sent} bytes",
            growth >> 10
        );
    }
}
