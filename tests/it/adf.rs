//! The ADF sinks against real receivers: `AdfHttpSink` posting to tests/upstreams/http_sink.py and
//! `SmtpSink` mailing aiosmtpd (tests/upstreams/smtp_sink.py), each ADF read back with roxmltree
//! and validated against the ADF 1.0 DTD by libxml2's validating parser (`xmllint --dtdvalid`).

use crate::support::{ensure_upstreams, venv_python};
use crate::support::{free_port, repo, temp_dir, test_ca, wait_listening};
use aap_gateway::config::{
    AdfContentType, AdfEmailSinkConfig, AdfHttpSinkConfig, AdfNetworkConfig, Secret, SmtpSecurity,
};
use aap_gateway::leads::adf_http::AdfHttpSink;
use aap_gateway::leads::smtp::{SmtpSink, SmtpSinkError};
use aap_gateway::leads::{Lead, LeadSink, SinkError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One receiver script on a free port, storing what it receives in `out`; killed on drop.
struct Receiver {
    port: u16,
    out: PathBuf,
    log: PathBuf,
    child: Child,
}

impl Receiver {
    fn start(script: &str, args: &[&str]) -> Receiver {
        ensure_upstreams();
        let dir = temp_dir("adf-sink");
        let port = free_port();
        let out = dir.join("out");
        let log = dir.join("receiver.log");
        let mut child = Command::new(venv_python())
            .arg(repo().join("tests/upstreams").join(script))
            .arg("--port")
            .arg(port.to_string())
            .arg("--out")
            .arg(&out)
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start receiver");
        wait_listening(&mut child, port, script, &log, Duration::from_secs(30));
        Receiver {
            port,
            out,
            log,
            child,
        }
    }

    /// Every stored record, in arrival order.
    fn records(&self) -> Vec<Value> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.out)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        names.retain(|p| p.extension().is_some_and(|x| x == "json"));
        names.sort();
        names
            .iter()
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect()
    }

    fn control(&self, change: Value) {
        let body = change.to_string();
        let r = crate::support::request(
            self.port,
            "POST",
            "/__control",
            &[("content-type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "control {change}");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn demo_dealer() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("data/demo-dealer.json")).unwrap())
        .unwrap()
}

/// The first demo listing that satisfies `f`.
fn listing(f: impl Fn(&Value) -> bool) -> Value {
    let all: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(repo().join("data/demo-inventory.json")).unwrap(),
    )
    .unwrap();
    all.into_iter().find(|v| f(v)).expect("a demo listing")
}

const HOSTILE_FIRST: &str = "</name><script>alert(1)</script>";
/// Quotes, ampersands, a CDATA end and characters XML 1.0 cannot carry
/// (NUL, ESC, vertical tab, DEL, a C1 control, U+FFFF).
const HOSTILE_LAST: &str = "O'Brien & \"Sons\" ]]> \u{0}\u{1b}\u{b}\u{7f}\u{85}\u{ffff}Jr";
const HOSTILE_LAST_CLEAN: &str = "O'Brien & \"Sons\" ]]> Jr";

/// The lead cases the mapping is checked on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Minimal,
    Vehicle,
    TradeIn,
    TestDrive,
    Sales,
    Cpo,
    Hostile,
    /// A listing with both a price and an MSRP (the DTD allows one `<price>`).
    Msrp,
    /// A customer address with only a ZIP code (`<address>` needs a `<street>`).
    ZipOnly,
    /// A vehicle of interest with make and model but no year, and no listing.
    NoYear,
    /// A trade-in with only a make.
    TradeInMakeOnly,
}

const CASES: [Case; 11] = [
    Case::Minimal,
    Case::Vehicle,
    Case::TradeIn,
    Case::TestDrive,
    Case::Sales,
    Case::Cpo,
    Case::Hostile,
    Case::Msrp,
    Case::ZipOnly,
    Case::NoYear,
    Case::TradeInMakeOnly,
];

/// The ADF 1.0 DTD the documents must satisfy: the notes' copy
/// (`../shared/notes/adf-1.0.dtd`) when it is beside the repository, which
/// must equal the copy the repository carries (tests/fixtures/adf-1.0.dtd).
fn adf_dtd() -> PathBuf {
    let ours = repo().join("tests/fixtures/adf-1.0.dtd");
    let notes = repo().join("../shared/notes/adf-1.0.dtd");
    if notes.exists() {
        assert_eq!(
            std::fs::read(&notes).unwrap(),
            std::fs::read(&ours).unwrap(),
            "tests/fixtures/adf-1.0.dtd differs from ../shared/notes/adf-1.0.dtd"
        );
        return notes;
    }
    ours
}

/// Validates `xml` against the ADF 1.0 DTD with libxml2's validating parser
/// (`xmllint --dtdvalid`, Debian's libxml2-utils); panics with its report.
pub(crate) fn assert_dtd_valid(what: &str, xml: &str) {
    let dir = temp_dir("adf-dtd");
    let file = dir.join("lead.xml");
    std::fs::write(&file, xml).unwrap();
    let out = Command::new("xmllint")
        .args(["--noout", "--nonet", "--dtdvalid"])
        .arg(adf_dtd())
        .arg(&file)
        .output()
        .expect("xmllint (Debian libxml2-utils) is installed by the test setup");
    assert!(
        out.status.success(),
        "{what}: the ADF document is not valid against the ADF 1.0 DTD:\n{}\n{xml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The validator refuses what the DTD forbids (so a passing check means something).
#[test]
fn the_dtd_check_refuses_an_invalid_document() {
    let xml =
        "<?xml version=\"1.0\"?>\n<adf><prospect><requestdate>x</requestdate></prospect></adf>\n";
    let r = std::panic::catch_unwind(|| assert_dtd_valid("invalid", xml));
    assert!(
        r.is_err(),
        "a prospect without vehicle, customer and vendor must fail the DTD"
    );
}

fn lead(case: Case) -> Lead {
    let mut request = json!({
        "type": "lead.submit.request",
        "customer": {"first_name": "Quinn", "last_name": "Testbuyer", "email": "quinn@example.com",
            "phone": "+14155550199", "preferred_contact": "phone",
            "address": {"address_line_1": "1 Main St", "address_line_2": "Apt 2", "city": "Oakland", "state": "CA", "zip": "94601"}},
        "consent": {"granted_at": "2026-12-05T09:00:00Z", "allowed_channels": ["email", "phone"],
            "consent_text": "I agree to be contacted.", "scope": ["lead_submission"]},
        "source_agent": {"name": "buyer-agent-7", "url": "https://agent.example/"},
        "idempotency_key": format!("{case:?}"),
        "submitted_at": "2026-12-05T09:30:00-08:00"
    });
    let mut vehicle = None;
    match case {
        Case::Minimal => {
            request["customer"] = json!({"first_name": "Quinn", "last_name": "Testbuyer", "email": "quinn@example.com"});
            request.as_object_mut().unwrap().remove("submitted_at");
        }
        Case::Vehicle => {
            let l = listing(|v| v["condition"] == "used" && v["transmission"] == "6-speed manual");
            request["vehicle_of_interest"] = json!({"vin": l["vin"], "condition": "used"});
            vehicle = Some(l);
        }
        Case::TradeIn => {
            request["vehicle_of_interest"] =
                json!({"year": 2026, "make": "Toyota", "model": "RAV4", "condition": "new"});
            request["trade_in"] = json!({"year": 2014, "make": "Honda", "model": "Civic", "trim": "LX",
                "mileage": 112000, "condition": "good", "vin": "19XFB2F59EE000001"});
            request["appointment"] = json!({"appointment_type": "trade_in", "appointment_at": "2026-12-08T11:00:00-08:00"});
        }
        Case::TestDrive => {
            let l = listing(|v| v["condition"] == "new");
            request["vehicle_of_interest"] = json!({"stock": l["stock"]});
            request["appointment"] = json!({"appointment_type": "test_drive", "appointment_at": "2026-12-06T15:00:00Z", "duration_minutes": 30});
            request["message"] = json!("Can I drive it Saturday?");
            vehicle = Some(l);
        }
        Case::Sales => {
            request["appointment"] = json!({"appointment_type": "sales", "appointment_at": "2026-12-09T17:30:00-08:00", "notes": "Financing questions"});
        }
        Case::Cpo => {
            let l = listing(|v| v["condition"] == "cpo");
            request["vehicle_of_interest"] =
                json!({"vin": l["vin"], "condition": "cpo", "displacement_cc": 1987});
            vehicle = Some(l);
        }
        Case::Msrp => {
            let l = listing(|v| v["msrp"].is_number() && v["price"].is_number());
            request["vehicle_of_interest"] = json!({"stock": l["stock"]});
            vehicle = Some(l);
        }
        Case::ZipOnly => {
            request["customer"]["address"] = json!({"zip": "94601"});
        }
        Case::NoYear => {
            request["vehicle_of_interest"] = json!({"make": "Toyota", "model": "Camry"});
        }
        Case::TradeInMakeOnly => {
            request["trade_in"] = json!({"make": "Ford"});
        }
        Case::Hostile => {
            request["customer"]["first_name"] = json!(HOSTILE_FIRST);
            request["customer"]["last_name"] = json!(HOSTILE_LAST);
            request["message"] = json!("<![CDATA[x]]> & </comments></customer><vendor>");
        }
    }
    Lead {
        lead_id: format!("lead_{}", format!("{case:?}").to_ascii_lowercase()),
        tenant: "demo".into(),
        received_at: "2026-12-05T17:31:00Z".into(),
        request,
        dealer: demo_dealer(),
        vehicle,
    }
}

/// The text of the element at `path` below `from` (`a/b/c`), the n-th match.
fn text_at<'a>(from: roxmltree::Node<'a, 'a>, path: &str, n: usize) -> Option<&'a str> {
    node_at(from, path, n).map(|e| e.text().unwrap_or(""))
}

fn node_at<'a>(
    from: roxmltree::Node<'a, 'a>,
    path: &str,
    n: usize,
) -> Option<roxmltree::Node<'a, 'a>> {
    let mut level = vec![from];
    for part in path.split('/') {
        level = level
            .iter()
            .flat_map(|p| {
                p.children()
                    .filter(|c| c.is_element() && c.has_tag_name(part))
            })
            .collect();
    }
    level.into_iter().nth(n)
}

fn all_at<'a>(from: roxmltree::Node<'a, 'a>, path: &str) -> Vec<roxmltree::Node<'a, 'a>> {
    (0..).map_while(|i| node_at(from, path, i)).collect()
}

/// Parses `xml` with roxmltree and checks it field by field against the
/// mapping for `case` (docs/leads.md, "ADF mapping").
fn check(case: Case, xml: &str) {
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("{case:?}: {e}\n{xml}"));
    assert_dtd_valid(&format!("{case:?}"), xml);
    let pi = doc
        .root()
        .children()
        .find_map(|n| n.pi())
        .expect("the adf processing instruction");
    assert_eq!((pi.target, pi.value), ("adf", Some("version=\"1.0\"")));
    let adf = doc.root_element();
    assert_eq!(adf.tag_name().name(), "adf");
    let p = node_at(adf, "prospect", 0).expect("prospect");
    let lead = lead(case);
    let req = &lead.request;

    // Prospect id and date.
    let id = node_at(p, "id", 0).unwrap();
    assert_eq!(id.text(), Some(lead.lead_id.as_str()));
    assert_eq!(id.attribute("sequence"), Some("1"));
    assert_eq!(id.attribute("source"), Some("aap-gateway"));
    let date = req["submitted_at"].as_str().unwrap_or(&lead.received_at);
    assert_eq!(text_at(p, "requestdate", 0), Some(date));

    // Customer.
    let c = node_at(p, "customer/contact", 0).unwrap();
    let names: Vec<(Option<&str>, &str)> = all_at(c, "name")
        .iter()
        .map(|n| (n.attribute("part"), n.text().unwrap_or("")))
        .collect();
    let (first, last) = if case == Case::Hostile {
        (HOSTILE_FIRST, HOSTILE_LAST_CLEAN)
    } else {
        ("Quinn", "Testbuyer")
    };
    let full = format!("{first} {last}");
    assert_eq!(
        names,
        [
            (Some("first"), first),
            (Some("last"), last),
            (Some("full"), full.as_str())
        ],
        "{case:?}"
    );
    assert_eq!(text_at(c, "email", 0), Some("quinn@example.com"));
    let comments = all_at(p, "customer/comments");
    assert!(comments.len() <= 1, "one customer comments");
    let cc = comments.first().and_then(|n| n.text()).unwrap_or("");
    if case == Case::Minimal {
        assert!(node_at(c, "phone", 0).is_none());
        assert!(node_at(c, "address", 0).is_none());
        assert_eq!(cc, "Contact only by: email, phone.");
    } else if case == Case::ZipOnly {
        // No street: no <address>; the ZIP code arrives in the comments.
        assert!(node_at(c, "address", 0).is_none(), "{xml}");
        assert_eq!(
            cc,
            "Address (no street given): 94601, US.\n\nContact only by: email, phone."
        );
    } else {
        let phone = node_at(c, "phone", 0).unwrap();
        assert_eq!(phone.text(), Some("+14155550199"));
        assert_eq!(phone.attribute("preferredcontact"), Some("1"));
        assert_eq!(text_at(c, "address/street", 0), Some("1 Main St"));
        assert_eq!(
            node_at(c, "address/street", 1).unwrap().attribute("line"),
            Some("2")
        );
        assert_eq!(text_at(c, "address/city", 0), Some("Oakland"));
        assert_eq!(text_at(c, "address/regioncode", 0), Some("CA"));
        assert_eq!(text_at(c, "address/postalcode", 0), Some("94601"));
        assert_eq!(text_at(c, "address/country", 0), Some("US"));
    }

    // Vendor from the dealer profile, provider from source_agent.
    assert_eq!(text_at(p, "vendor/vendorname", 0), Some("Demo Toyota"));
    assert!(text_at(p, "vendor/contact/phone", 0).is_some_and(|t| t.starts_with("+1")));
    assert_eq!(text_at(p, "provider/name", 0), Some("buyer-agent-7"));
    assert_eq!(
        text_at(p, "provider/url", 0),
        Some("https://agent.example/")
    );

    // Vehicles: exactly one comments element at most per vehicle.
    let vehicles = all_at(p, "vehicle");
    for v in &vehicles {
        assert!(
            all_at(*v, "comments").len() <= 1,
            "{case:?}: one comments per vehicle"
        );
    }
    let li = lead.vehicle.as_ref();
    match case {
        Case::Minimal | Case::Sales | Case::Hostile | Case::ZipOnly => {
            // ADF requires a vehicle: a general inquiry's has empty year, make and model.
            assert_eq!(vehicles.len(), 1, "{case:?}");
            let v = vehicles[0];
            for el in ["year", "make", "model"] {
                assert_eq!(text_at(v, el, 0), Some(""), "{case:?} {el}: {xml}");
            }
            assert!(node_at(v, "vin", 0).is_none());
            assert_eq!(
                text_at(v, "comments", 0),
                Some("General inquiry: no vehicle named")
            );
        }
        Case::NoYear => {
            assert_eq!(vehicles.len(), 1);
            let v = vehicles[0];
            assert_eq!(
                text_at(v, "year", 0),
                Some(""),
                "unknown, not guessed: {xml}"
            );
            assert_eq!(text_at(v, "make", 0), Some("Toyota"));
            assert_eq!(text_at(v, "model", 0), Some("Camry"));
        }
        Case::TradeInMakeOnly => {
            assert_eq!(vehicles.len(), 1, "the trade-in is the prospect's vehicle");
            let t = vehicles[0];
            assert_eq!(t.attribute("interest"), Some("trade-in"));
            assert_eq!(text_at(t, "year", 0), Some(""));
            assert_eq!(text_at(t, "make", 0), Some("Ford"));
            assert_eq!(text_at(t, "model", 0), Some(""));
        }
        Case::Vehicle | Case::Cpo | Case::TestDrive | Case::Msrp => {
            assert_eq!(vehicles.len(), 1);
            let v = vehicles[0];
            let l = li.unwrap();
            let interest = if case == Case::TestDrive {
                "test-drive"
            } else {
                "buy"
            };
            assert_eq!(v.attribute("interest"), Some(interest));
            let status = match l["condition"].as_str() {
                Some("new") => "new",
                _ => "used",
            };
            assert_eq!(v.attribute("status"), Some(status), "{case:?}");
            // Year, make and model fill from the dealer's listing.
            assert_eq!(text_at(v, "year", 0), Some(l["year"].to_string().as_str()));
            assert_eq!(text_at(v, "make", 0), l["make"].as_str());
            assert_eq!(text_at(v, "model", 0), l["model"].as_str());
            assert_eq!(text_at(v, "vin", 0), l["vin"].as_str());
            assert_eq!(text_at(v, "stock", 0), l["stock"].as_str());
            let price = node_at(v, "price", 0).unwrap();
            assert_eq!(price.text(), Some(l["price"].to_string().as_str()));
            assert_eq!(price.attribute("currency"), Some("USD"));
            assert_eq!(price.attribute("type"), Some("quote"));
            assert_eq!(all_at(v, "price").len(), 1, "one <price>: {xml}");
            // The MSRP rides beside the price in <pricecomments>.
            match l["msrp"].as_u64() {
                Some(m) => assert_eq!(
                    text_at(v, "pricecomments", 0),
                    Some(format!("MSRP: {m} USD").as_str())
                ),
                None => assert!(node_at(v, "pricecomments", 0).is_none()),
            }
            if case == Case::Msrp {
                assert!(l["msrp"].is_number(), "the Msrp case has an MSRP");
            }
            if let Some(m) = l["mileage"].as_u64().filter(|m| *m > 0) {
                let odo = node_at(v, "odometer", 0).unwrap();
                assert_eq!(odo.text(), Some(m.to_string().as_str()));
                assert_eq!(odo.attribute("units"), Some("mi"));
            }
            let tr = l["transmission"].as_str().unwrap();
            let code = if tr.contains("manual") { "M" } else { "A" };
            assert_eq!(text_at(v, "transmission", 0), Some(code), "{tr}");
            let vc = text_at(v, "comments", 0).unwrap_or("");
            if case == Case::Cpo {
                assert!(vc.starts_with("certified pre-owned; "), "{vc}");
                assert!(vc.contains("Displacement: 1987cc"), "{vc}");
            } else {
                assert!(!vc.contains("certified"), "{vc}");
            }
            if case == Case::TestDrive {
                assert_eq!(
                    cc,
                    "Can I drive it Saturday?\n\nAppointment requested: test drive at 2026-12-06T15:00:00Z (30 minutes).\n\nContact only by: email, phone."
                );
            }
        }
        Case::TradeIn => {
            assert_eq!(vehicles.len(), 2);
            assert_eq!(vehicles[0].attribute("interest"), Some("buy"));
            assert_eq!(vehicles[0].attribute("status"), Some("new"));
            assert_eq!(text_at(vehicles[0], "model", 0), Some("RAV4"));
            let t = vehicles[1];
            assert_eq!(t.attribute("interest"), Some("trade-in"));
            assert_eq!(text_at(t, "year", 0), Some("2014"));
            assert_eq!(text_at(t, "make", 0), Some("Honda"));
            assert_eq!(text_at(t, "model", 0), Some("Civic"));
            assert_eq!(text_at(t, "trim", 0), Some("LX"));
            assert_eq!(text_at(t, "vin", 0), Some("19XFB2F59EE000001"));
            assert_eq!(text_at(t, "odometer", 0), Some("112000"));
            assert_eq!(text_at(t, "condition", 0), Some("good"));
            assert!(
                cc.contains(
                    "Appointment requested: trade-in appraisal at 2026-12-08T11:00:00-08:00."
                ),
                "{cc}"
            );
        }
    }
    match case {
        Case::Sales => assert!(
            cc.starts_with("Appointment requested: sales consultation at 2026-12-09T17:30:00-08:00. Notes: Financing questions"),
            "{cc}"
        ),
        Case::Hostile => {
            assert!(cc.starts_with("<![CDATA[x]]> & </comments></customer><vendor>"), "{cc}");
            // Markup in values stayed text: no element was injected.
            assert!(doc.descendants().all(|n| !n.has_tag_name("script")));
            assert_eq!(all_at(p, "vendor").len(), 1);
            assert_eq!(all_at(p, "customer").len(), 1);
        }
        _ => {}
    }
}

fn http_config(name: &str, url: String) -> AdfHttpSinkConfig {
    AdfHttpSinkConfig {
        name: name.into(),
        url,
        authorization: Some(Secret::new("Bearer crm-token".into())),
        timeout_ms: 2_000,
        content_type: AdfContentType::ApplicationXml,
        ca_file: None,
        network: None,
    }
}

#[test]
fn adf_http_posts_every_case_and_the_crm_reads_the_mapping() {
    let rx = Receiver::start("http_sink.py", &[]);
    let sink = AdfHttpSink::new(&http_config(
        "crm",
        format!("http://127.0.0.1:{}/adf/intake", rx.port),
    ))
    .unwrap();
    assert_eq!(sink.name(), "crm");
    let rt = rt();
    for case in CASES {
        rt.block_on(sink.deliver(&lead(case)))
            .unwrap_or_else(|e| panic!("{case:?}: {e}"));
    }
    let got = rx.records();
    assert_eq!(got.len(), CASES.len());
    for (case, r) in CASES.iter().zip(&got) {
        assert_eq!(r["method"], "POST");
        assert_eq!(r["path"], "/adf/intake");
        assert_eq!(r["headers"]["content-type"], "application/xml");
        assert_eq!(r["headers"]["authorization"], "Bearer crm-token");
        assert_eq!(
            r["headers"]["idempotency-key"],
            lead(*case).lead_id.as_str()
        );
        check(*case, r["body"].as_str().unwrap());
    }
}

#[test]
fn adf_http_outage_is_transient_and_a_refusal_permanent() {
    let rx = Receiver::start("http_sink.py", &["--status", "503"]);
    let mut cfg = http_config("crm", format!("http://127.0.0.1:{}/adf", rx.port));
    cfg.content_type = AdfContentType::TextXml;
    cfg.network = Some(AdfNetworkConfig {
        name: "Lead Network Inc".into(),
        url: Some("https://leads.example".into()),
    });
    cfg.authorization = None;
    let sink = AdfHttpSink::new(&cfg).unwrap();
    let rt = rt();
    let l = lead(Case::Minimal);
    assert_eq!(
        rt.block_on(sink.deliver(&l)),
        Err(SinkError::Transient("HTTP 503".into()))
    );
    rx.control(json!({"status": 400}));
    assert_eq!(
        rt.block_on(sink.deliver(&l)),
        Err(SinkError::Permanent("HTTP 400".into()))
    );
    rx.control(json!({"status": 202}));
    assert_eq!(rt.block_on(sink.deliver(&l)), Ok(()));
    let got = rx.records();
    assert_eq!(got.len(), 3);
    let last = &got[2];
    assert_eq!(last["headers"]["content-type"], "text/xml");
    assert!(last["headers"].get("authorization").is_none());
    // A network delivers: its brand is the provider, the agent its service.
    let doc = roxmltree::Document::parse(last["body"].as_str().unwrap()).unwrap();
    let p = node_at(doc.root_element(), "prospect/provider", 0).unwrap();
    assert_eq!(text_at(p, "name", 0), Some("Lead Network Inc"));
    assert_eq!(text_at(p, "service", 0), Some("buyer-agent-7"));
    assert_eq!(text_at(p, "url", 0), Some("https://leads.example"));
    // The receiver is gone: transient.
    let port = rx.port;
    drop(rx);
    let sink =
        AdfHttpSink::new(&http_config("crm", format!("http://127.0.0.1:{port}/adf"))).unwrap();
    assert_eq!(
        rt.block_on(sink.deliver(&l)),
        Err(SinkError::Transient("connection failed".into()))
    );
}

fn mail_config(port: u16, security: SmtpSecurity) -> AdfEmailSinkConfig {
    AdfEmailSinkConfig {
        name: "inbox".into(),
        host: "127.0.0.1".into(),
        port,
        security,
        username: None,
        password: None,
        from: "Demo Gateway <leads@gateway.example>".into(),
        to: vec![
            "crm@dealer.example".into(),
            "Backup Inbox <backup@dealer.example>".into(),
        ],
        timeout_ms: 5_000,
        ca_file: None,
        network: None,
    }
}

fn check_mail(r: &Value, case: Case, tls: bool, login: Option<&str>) {
    let l = lead(case);
    assert_eq!(r["mail_from"], "leads@gateway.example");
    assert_eq!(
        r["rcpt_tos"],
        json!(["crm@dealer.example", "backup@dealer.example"])
    );
    assert_eq!(r["tls"], tls, "{r}");
    assert_eq!(r["login"].as_str(), login);
    assert_eq!(r["subject"], format!("ADF lead {}", l.lead_id));
    assert_eq!(r["message_id"], format!("<{}@gateway.example>", l.lead_id));
    assert_eq!(r["content_type"], "text/plain");
    let raw = r["data"].as_str().unwrap();
    // No customer value in the headers.
    let head = raw.split("\r\n\r\n").next().unwrap();
    assert!(
        !head.contains("Quinn") && !head.contains("quinn@"),
        "{head}"
    );
    check(case, r["body"].as_str().unwrap());
}

#[test]
fn adf_email_starttls_with_auth_delivers_every_case() {
    let dir = temp_dir("adf-smtp-tls");
    let ca = test_ca(&dir);
    let cert = dir.join("server.pem");
    let key = dir.join("server.key");
    let rx = Receiver::start(
        "smtp_sink.py",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--auth",
            "gateway:s3cret pass",
        ],
    );
    let mut cfg = mail_config(rx.port, SmtpSecurity::Starttls);
    cfg.ca_file = Some(ca.clone());
    cfg.username = Some("gateway".into());
    cfg.password = Some(Secret::new("s3cret pass".into()));
    let sink = SmtpSink::new(&cfg).unwrap();
    assert!(!format!("{sink:?}").contains("s3cret"));
    let rt = rt();
    for case in CASES {
        rt.block_on(sink.deliver(&lead(case))).unwrap_or_else(|e| {
            panic!(
                "{case:?}: {e}\n{}",
                std::fs::read_to_string(&rx.log).unwrap_or_default()
            )
        });
    }
    let got = rx.records();
    assert_eq!(got.len(), CASES.len());
    for (case, r) in CASES.iter().zip(&got) {
        check_mail(r, *case, true, Some("gateway"));
    }

    // A wrong password is refused with 535: permanent.
    cfg.password = Some(Secret::new("wrong".into()));
    let bad = SmtpSink::new(&cfg).unwrap();
    assert_eq!(
        rt.block_on(bad.deliver(&lead(Case::Minimal))),
        Err(SinkError::Permanent("SMTP 535".into()))
    );
    // Without the test CA the server's certificate is not trusted: transient
    // (the operator fixes the trust; the lead waits in the outbox).
    cfg.password = Some(Secret::new("s3cret pass".into()));
    cfg.ca_file = None;
    let untrusted = SmtpSink::new(&cfg).unwrap();
    assert_eq!(
        rt.block_on(untrusted.deliver(&lead(Case::Minimal))),
        Err(SinkError::Transient("SMTP TLS failed".into()))
    );
    assert_eq!(rx.records().len(), CASES.len());
}

#[test]
fn adf_email_implicit_tls() {
    let dir = temp_dir("adf-smtps");
    let ca = test_ca(&dir);
    let cert = dir.join("server.pem");
    let key = dir.join("server.key");
    let rx = Receiver::start(
        "smtp_sink.py",
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--implicit-tls",
        ],
    );
    let mut cfg = mail_config(rx.port, SmtpSecurity::Tls);
    cfg.ca_file = Some(ca);
    let sink = SmtpSink::new(&cfg).unwrap();
    rt().block_on(sink.deliver(&lead(Case::Vehicle))).unwrap();
    let got = rx.records();
    assert_eq!(got.len(), 1);
    check_mail(&got[0], Case::Vehicle, true, None);
}

#[test]
fn adf_email_plain_and_its_failures() {
    let rx = Receiver::start("smtp_sink.py", &[]);
    let sink = SmtpSink::new(&mail_config(rx.port, SmtpSecurity::None)).unwrap();
    let rt = rt();
    for case in [Case::Minimal, Case::Hostile] {
        rt.block_on(sink.deliver(&lead(case))).unwrap();
    }
    let got = rx.records();
    assert_eq!(got.len(), 2);
    check_mail(&got[0], Case::Minimal, false, None);
    check_mail(&got[1], Case::Hostile, false, None);

    // STARTTLS required but the server offers none: transient, nothing sent.
    let starttls = SmtpSink::new(&mail_config(rx.port, SmtpSecurity::Starttls)).unwrap();
    assert!(matches!(
        rt.block_on(starttls.deliver(&lead(Case::Minimal))),
        Err(SinkError::Transient(_))
    ));
    assert_eq!(rx.records().len(), 2);

    // The server refuses the message: 5xx permanent, 4xx transient.
    let refuse = Receiver::start("smtp_sink.py", &["--reject", "554"]);
    let s = SmtpSink::new(&mail_config(refuse.port, SmtpSecurity::None)).unwrap();
    assert_eq!(
        rt.block_on(s.deliver(&lead(Case::Minimal))),
        Err(SinkError::Permanent("SMTP 554".into()))
    );
    let later = Receiver::start("smtp_sink.py", &["--reject", "451"]);
    let s = SmtpSink::new(&mail_config(later.port, SmtpSecurity::None)).unwrap();
    assert_eq!(
        rt.block_on(s.deliver(&lead(Case::Minimal))),
        Err(SinkError::Transient("SMTP 451".into()))
    );

    // Nobody listening: transient.
    let port = rx.port;
    drop(rx);
    let gone = SmtpSink::new(&mail_config(port, SmtpSecurity::None)).unwrap();
    assert!(matches!(
        rt.block_on(gone.deliver(&lead(Case::Minimal))),
        Err(SinkError::Transient(_))
    ));
}

#[test]
fn adf_email_config_errors_are_typed() {
    let mut cfg = mail_config(2525, SmtpSecurity::None);
    cfg.to = vec!["crm@dealer.example".into(), "not an address".into()];
    match SmtpSink::new(&cfg) {
        Err(SmtpSinkError::Address { key, .. }) => assert_eq!(key, "to[1]"),
        other => panic!("{other:?}"),
    }
    let mut cfg = mail_config(2525, SmtpSecurity::Starttls);
    cfg.ca_file = Some(Path::new("/nonexistent/ca.pem").to_path_buf());
    assert!(matches!(
        SmtpSink::new(&cfg),
        Err(SmtpSinkError::CaFile { .. })
    ));
    let mut cfg = mail_config(2525, SmtpSecurity::Starttls);
    cfg.password = Some(Secret::new("hunter2-secret".into()));
    let e = SmtpSink::new(&cfg).unwrap_err();
    assert!(matches!(e, SmtpSinkError::Credentials { .. }));
    assert!(!e.to_string().contains("hunter2"));
}

/// Through the real binary: a lead accepted over MCP is delivered by the outbox to an `adf_http`
/// sink and an `adf_email` sink of the same tenant, each an ADF whose prospect id is the lead id
/// the agent was answered with, with the hostile customer value carried as text.
#[test]
fn gateway_delivers_an_accepted_lead_as_adf_to_http_and_smtp() {
    use crate::support::config_with;
    use crate::support::Gateway;
    let http = Receiver::start("http_sink.py", &[]);
    let smtp = Receiver::start("smtp_sink.py", &[]);
    let sinks = format!(
        "[[tenants.backend.sinks]]\nkind = \"adf_http\"\nname = \"crm-post\"\nurl = \"http://127.0.0.1:{}/adf\"\ntimeout_ms = 5000\n\n\
         [[tenants.backend.sinks]]\nkind = \"adf_email\"\nname = \"crm-inbox\"\nhost = \"127.0.0.1\"\nport = {}\nsecurity = \"none\"\n\
         from = \"Gateway <leads@gateway.example>\"\nto = [\"crm@dealer.example\"]\ntimeout_ms = 5000\n\n\
         [tenants.backend.outbox]\ninitial_backoff_ms = 50\nmax_backoff_ms = 400\n",
        http.port, smtp.port
    );
    let gw = Gateway::start_with(&config_with("", &sinks, ""));
    let mut args = crate::support::lead(&format!("adf-e2e-{}", uuid::Uuid::new_v4().simple()));
    let hostile = "Testbuyer</name><script>alert(1)</script>&amp;";
    args["customer"]["last_name"] = json!(hostile);
    let (is_err, sc) = gw.call_sc("aap_lead_submit", args);
    assert!(!is_err, "{sc}");
    assert_eq!(sc["data"]["status"], "received", "{sc}");
    let lead_id = sc["data"]["lead_id"].as_str().unwrap().to_owned();

    let deadline = Instant::now() + Duration::from_secs(30);
    while http.records().is_empty() || smtp.records().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the ADF sinks did not receive the lead"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let posted = &http.records()[0];
    assert_eq!(posted["method"], "POST");
    assert_eq!(posted["path"], "/adf");
    assert_eq!(posted["headers"]["idempotency-key"], lead_id.as_str());
    assert_eq!(posted["headers"]["content-type"], "application/xml");
    let mail = &smtp.records()[0];
    assert_eq!(mail["rcpt_tos"], json!(["crm@dealer.example"]));
    assert_eq!(mail["subject"], format!("ADF lead {lead_id}"));
    let dealer = demo_dealer();
    for xml in [
        posted["body"].as_str().unwrap(),
        mail["body"].as_str().unwrap(),
    ] {
        let doc = roxmltree::Document::parse(xml).expect("the ADF is well-formed XML");
        assert_dtd_valid("delivered by the gateway", xml);
        let prospect = node_at(doc.root_element(), "prospect", 0).expect("<prospect>");
        assert_eq!(text_at(prospect, "id", 0), Some(lead_id.as_str()));
        let vehicle = node_at(prospect, "vehicle", 0).expect("<vehicle>");
        assert_eq!(text_at(vehicle, "stock", 0), Some("DT-1001"));
        assert!(
            text_at(vehicle, "make", 0).is_some(),
            "filled from the listing: {xml}"
        );
        let contact = node_at(prospect, "customer/contact", 0).expect("<customer><contact>");
        let names: Vec<(&str, &str)> = all_at(contact, "name")
            .iter()
            .map(|n| (n.attribute("part").unwrap_or(""), n.text().unwrap_or("")))
            .collect();
        assert!(names.contains(&("first", "Quinn")), "{names:?}");
        assert!(
            names.contains(&("last", hostile)),
            "kept as text: {names:?}"
        );
        assert!(!xml.contains("<script>"), "escaped: {xml}");
        assert_eq!(
            text_at(prospect, "vendor/vendorname", 0),
            dealer["name"].as_str(),
            "{xml}"
        );
        assert_eq!(
            text_at(prospect, "provider/name", 0),
            Some("aap-gateway-tests")
        );
    }
    // Delivered once each: nothing more arrives after a few retry periods.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(http.records().len(), 1);
    assert_eq!(smtp.records().len(), 1);
    drop(gw);
}
