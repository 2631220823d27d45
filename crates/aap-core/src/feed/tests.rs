use super::*;
use serde_json::json;

const NOW: &str = "2026-12-05T10:00:00Z";

fn schemas() -> SchemaSet {
    SchemaSet::embedded().unwrap()
}

fn dealer_mapping() -> Mapping {
    let mut m = Mapping::default();
    for (f, c) in [
        ("vin", "VIN"),
        ("stock", "StockNumber"),
        ("condition", "Type"),
        ("price", "InternetPrice"),
        ("mileage", "Miles"),
        ("photos", "ImageURLs"),
        ("features", "Options"),
    ] {
        m.columns.insert(f.into(), c.into());
    }
    m.values.insert(
        "condition".into(),
        [("N", "new"), ("U", "used"), ("Certified", "cpo")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    );
    m
}

#[test]
fn csv_rows_become_listings_with_mapping_values_and_numbers() {
    let csv = "VIN,StockNumber,Type,year,make,model,InternetPrice,Miles,ImageURLs,Options,Cost\n\
               1hgcv1f34la000001,A1,U,2020,Honda,Accord,\"$21,995\",\"29,840 mi\",https://x.example/1.jpg|https://x.example/2.jpg,Sunroof|Heated seats,15000\n\
               1HGCV1F34LA000002,A2,certified,2021,Honda,Civic,19995.00,12000,,,14000\n";
    let p = parse(
        Format::Csv,
        &dealer_mapping(),
        csv.as_bytes(),
        &schemas(),
        NOW,
    )
    .unwrap();
    assert_eq!(p.report.rows, 2);
    assert_eq!(p.report.loaded, 2, "{:?}", p.report.rejected);
    let v = &p.vehicles[0];
    assert_eq!(v["vin"], "1HGCV1F34LA000001");
    assert_eq!(v["condition"], "used");
    assert_eq!(v["price"], 21995);
    assert_eq!(v["mileage"], 29840);
    assert_eq!(
        v["photos"],
        json!(["https://x.example/1.jpg", "https://x.example/2.jpg"])
    );
    assert_eq!(v["features"], json!(["Sunroof", "Heated seats"]));
    assert_eq!(v["fees"], json!([]));
    assert_eq!(v["status"], "available");
    assert_eq!(v["updated_at"], NOW);
    assert!(
        v.get("Cost").is_none() && v.get("cost").is_none(),
        "unmapped columns stay behind"
    );
    assert_eq!(p.vehicles[1]["condition"], "cpo");
    assert!(p.vehicles[1].get("photos").is_none());
}

#[test]
fn bad_rows_are_rejected_with_row_id_and_field_but_no_value() {
    let csv = "VIN,StockNumber,Type,year,make,InternetPrice\n\
               1HGCV1F34LA000001,A1,U,2020,Honda,CALL-FOR-PRICE\n\
               NOT-A-VIN-SECRET,A2,U,2020,Honda,100\n\
               1HGCV1F34LA000003,A3,U,1850,Honda,100\n\
               1HGCV1F34LA000004,A4,U,2020\n\
               ,,U,2020,Honda,100\n\
               1HGCV1F34LA000006,A6,Z,2020,Honda,100\n\
               1HGCV1F34LA000007,A7,N,2020,Honda,100\n";
    let mut m = dealer_mapping();
    for f in ["mileage", "photos", "features"] {
        m.columns.remove(f);
    }
    let p = parse(Format::Csv, &m, csv.as_bytes(), &schemas(), NOW).unwrap();
    assert_eq!(p.report.rows, 7);
    assert_eq!(p.report.loaded, 1);
    let reasons: Vec<String> = p.report.rejected.iter().map(ToString::to_string).collect();
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    assert!(
        reasons[0].starts_with("row 1 (stock A1): price:"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].starts_with("row 2 (stock A2): vin:"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].starts_with("row 3 (stock A3): year:"),
        "{reasons:?}"
    );
    assert!(
        reasons[3].starts_with("row 4: (row): 4 cells"),
        "{reasons:?}"
    );
    assert!(reasons[4].starts_with("row 5: vin: no vin"), "{reasons:?}");
    assert!(
        reasons[5].starts_with("row 6 (stock A6): condition:"),
        "{reasons:?}"
    );
    let all = reasons.join("\n");
    for value in ["CALL-FOR-PRICE", "1850", "Honda"] {
        assert!(!all.contains(value), "{value} in {all}");
    }
}

#[test]
fn the_first_row_of_a_duplicate_vin_or_stock_wins() {
    let csv = "vin,stock,make,price\n\
               1HGCV1F34LA000001,A1,First,100\n\
               1HGCV1F34LA000001,A9,Second,200\n\
               1HGCV1F34LA000003,A1,Third,300\n";
    let p = parse(
        Format::Csv,
        &Mapping::default(),
        csv.as_bytes(),
        &schemas(),
        NOW,
    )
    .unwrap();
    assert_eq!(p.report.loaded, 1);
    assert_eq!(p.vehicles[0]["make"], "First");
    assert_eq!(p.report.duplicates.len(), 2);
    assert_eq!(
        p.report.duplicates[0].to_string(),
        "row 2: duplicate vin 1HGCV1F34LA000001 (row 1 kept)"
    );
    assert_eq!(p.report.duplicates[1].key, "stock");
}

#[test]
fn a_mapped_column_missing_from_the_header_refuses_the_feed() {
    let csv = "vin,stock\n1HGCV1F34LA000001,A1\n";
    let mut m = Mapping::default();
    m.columns.insert("price".into(), "InternetPrice".into());
    let e = parse(Format::Csv, &m, csv.as_bytes(), &schemas(), NOW).unwrap_err();
    assert!(matches!(e, FeedError::Mapping(_)), "{e}");
    let e = parse(
        Format::Csv,
        &Mapping::default(),
        b"a,b\n1,2\n",
        &schemas(),
        NOW,
    )
    .unwrap_err();
    assert!(e.to_string().contains("vin, stock or vehicle_id"), "{e}");
}

#[test]
fn xml_listings_with_item_elements_entities_and_out_of_stock_rows() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<listings>
  <listing>
    <VIN>1HGCV1F34LA000001</VIN><stock>X1</stock><make>Ford &amp; Sons</make>
    <price>$30,000</price><status>Sold</status>
    <photos><photo>https://x.example/1.jpg</photo><photo><![CDATA[https://x.example/2.jpg]]></photo></photos>
  </listing>
  <listing><VIN>1HGCV1F34LA000002</VIN><stock>X2</stock><year>twenty</year></listing>
  <listing><VIN>1HGCV1F34LA000003</VIN><stock>X3</stock><features>A;B</features></listing>
</listings>"#;
    let mut m = Mapping::default();
    m.columns.insert("vin".into(), "VIN".into());
    m.list_separator = ";".into();
    let p = parse(Format::Xml, &m, xml.as_bytes(), &schemas(), NOW).unwrap();
    assert_eq!(p.report.rows, 3);
    assert_eq!(p.report.loaded, 2, "{:?}", p.report.rejected);
    assert_eq!(p.vehicles[0]["make"], "Ford & Sons");
    assert_eq!(p.vehicles[0]["status"], "sold", "kept as out of stock");
    assert_eq!(
        p.vehicles[0]["photos"],
        json!(["https://x.example/1.jpg", "https://x.example/2.jpg"])
    );
    assert_eq!(p.vehicles[1]["features"], json!(["A", "B"]));
    assert_eq!(
        p.report.rejected[0].to_string(),
        "row 2 (stock X2): year: not a whole number"
    );
    let e = parse(
        Format::Xml,
        &m,
        b"<listings><listing><vin>1</vin></listings>",
        &schemas(),
        NOW,
    )
    .unwrap_err();
    assert!(matches!(e, FeedError::Syntax { .. }), "{e}");
}

#[test]
fn the_demo_inventory_loads_whole_as_a_json_feed() {
    let bytes = include_bytes!("../../../../data/demo-inventory.json");
    let p = parse(Format::Json, &Mapping::default(), bytes, &schemas(), NOW).unwrap();
    assert_eq!(
        p.report.rejected,
        vec![],
        "every demo vehicle is a valid listing"
    );
    assert_eq!(p.report.loaded, 100);
    assert!(p.vehicles.iter().any(|v| v["status"] == "sold"));
}

#[test]
fn judge_refuses_reject_shares_and_drops_over_the_policy() {
    let policy = Policy::default();
    let report = |rows, loaded, rejected: usize| Report {
        rows,
        loaded,
        rejected: (0..rejected)
            .map(|i| Rejected {
                row: i,
                id: None,
                field: "price".into(),
                problem: "x".into(),
            })
            .collect(),
        duplicates: vec![],
    };
    assert_eq!(judge(&report(100, 80, 20), None, &policy), Ok(()));
    assert_eq!(
        judge(&report(100, 79, 21), None, &policy)
            .unwrap_err()
            .reason(),
        "rejected_share"
    );
    assert_eq!(judge(&report(100, 100, 0), Some(125), &policy), Ok(()));
    assert_eq!(
        judge(&report(100, 100, 0), Some(126), &policy)
            .unwrap_err()
            .reason(),
        "row_drop"
    );
    assert_eq!(judge(&report(0, 0, 0), None, &policy), Ok(()));
    assert_eq!(
        judge(&report(0, 0, 0), Some(10), &policy)
            .unwrap_err()
            .reason(),
        "row_drop"
    );
    assert_eq!(
        judge(&report(3, 0, 0), None, &policy).unwrap_err().reason(),
        "nothing_loaded"
    );
}

#[test]
fn dealer_numbers() {
    assert_eq!(whole_number("$18,995"), Some(18995));
    assert_eq!(whole_number("USD 18 995.50"), Some(18996));
    assert_eq!(whole_number("29,840 mi"), Some(29840));
    assert_eq!(whole_number("call"), None);
    assert_eq!(whole_number(""), None);
    assert_eq!(number("65.5 kWh"), Some(65.5));
}

/// The dealer mapping without the columns the Windows export does not have.
fn export_mapping() -> Mapping {
    let mut m = dealer_mapping();
    for f in ["mileage", "photos", "features"] {
        m.columns.remove(f);
    }
    m
}

/// A Windows DMS export: `Citro\xebn` in a mapped column and `Co\xfbt` in an
/// unmapped header column (Windows-1252 bytes, not UTF-8).
fn windows_1252_csv() -> Vec<u8> {
    let mut csv = b"VIN,StockNumber,Type,year,make,model,InternetPrice,Co\xfbt\n".to_vec();
    csv.extend_from_slice(b"VF7NCRFJ8PY000001,C1,U,2023,Citro\xebn,C5 Aircross,\"$24,500\",1\n");
    csv.extend_from_slice(b"1HGCV1F34LA000002,A2,U,2021,Honda,Civic,19995,2\n");
    csv
}

#[test]
fn a_windows_1252_feed_is_transcoded_with_its_encoding_set() {
    let mut m = export_mapping();
    m.encoding = encoding_rs::WINDOWS_1252;
    let p = parse(Format::Csv, &m, &windows_1252_csv(), &schemas(), NOW).unwrap();
    assert_eq!(p.report.loaded, 2, "{:?}", p.report.rejected);
    assert_eq!(p.vehicles[0]["make"], "Citroën");
    // ISO-8859-1 (latin1) is read the same way.
    m.encoding = encoding_rs::Encoding::for_label(b"latin1").unwrap();
    let p = parse(Format::Csv, &m, &windows_1252_csv(), &schemas(), NOW).unwrap();
    assert_eq!(p.vehicles[0]["make"], "Citroën");
}

#[test]
fn without_the_encoding_only_the_row_is_rejected_and_the_header_still_reads() {
    let p = parse(
        Format::Csv,
        &export_mapping(),
        &windows_1252_csv(),
        &schemas(),
        NOW,
    )
    .expect("a non-UTF-8 byte in an unmapped header column does not refuse the feed");
    assert_eq!(p.report.rows, 2);
    assert_eq!(p.report.loaded, 1);
    let reason = p.report.rejected[0].to_string();
    assert!(
        reason.contains("make") && reason.contains("encoding"),
        "{reason}"
    );
    assert!(
        !reason.contains("Citro"),
        "no value in the reason: {reason}"
    );
}

#[test]
fn a_windows_1252_xml_feed_is_transcoded() {
    let mut xml = b"<?xml version=\"1.0\" encoding=\"windows-1252\"?>\n<listings><listing><vin>VF7NCRFJ8PY000001</vin><year>2023</year><make>Citro\xebn</make><model>C5</model><price>24500</price><condition>used</condition></listing></listings>\n".to_vec();
    let mut m = Mapping {
        encoding: encoding_rs::WINDOWS_1252,
        ..Mapping::default()
    };
    let p = parse(Format::Xml, &m, &xml, &schemas(), NOW).unwrap();
    assert_eq!(p.report.loaded, 1, "{:?}", p.report.rejected);
    assert_eq!(p.vehicles[0]["make"], "Citroën");
    // A UTF-8 byte order mark wins over the configured encoding.
    m.encoding = encoding_rs::WINDOWS_1252;
    let utf8 = String::from_utf8_lossy(&xml).replace('\u{fffd}', "ë");
    xml = [
        b"\xef\xbb\xbf".as_slice(),
        utf8.replace("windows-1252", "UTF-8").as_bytes(),
    ]
    .concat();
    let p = parse(Format::Xml, &m, &xml, &schemas(), NOW).unwrap();
    assert_eq!(p.vehicles[0]["make"], "Citroën");
}
