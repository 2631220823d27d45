//! An accepted `aap_lead_submit` as an ADF 1.0 (Auto-lead Data Format) XML document, the form
//! dealer CRMs ingest; the field mapping follows the AAP compatibility notes (docs/leads.md).
//!
//! The document is written with `quick-xml`, whose writer escapes every text
//! node and attribute value, so a customer value such as `</name><script>`
//! stays text. Characters XML 1.0 cannot carry at all (C0 controls other than
//! tab, line feed and carriage return; U+FFFE and U+FFFF) and the C1 and DEL
//! controls the XML 1.0 recommendation discourages are removed from every value
//! before it is written: no escape makes them legal and CRMs reject them.
//!
//! Consent has no ADF element. The consent record stays in the gateway's
//! leads file under the lead id; the document only repeats, in the customer's
//! comments, which channels the buyer allowed, so whoever follows the lead up
//! in the CRM sees the restriction.

use quick_xml::events::{BytesDecl, BytesEnd, BytesPI, BytesStart, BytesText, Event};
use quick_xml::Writer;
use serde_json::Value;

/// What one ADF document is built from. The gateway's `Lead` record lives in
/// the gateway crate; it lends its parts here.
#[derive(Debug, Clone, Copy)]
pub struct AdfInput<'a> {
    /// The gateway's lead id (`lead_…`): the prospect `<id>`, so a CRM can
    /// drop a delivery that is repeated after a crash.
    pub lead_id: &'a str,
    /// RFC 3339; the `<requestdate>` when the request has no `submitted_at`.
    pub received_at: &'a str,
    /// The validated `aap_lead_submit` arguments.
    pub request: &'a Value,
    /// The dealer profile (`aap_dealer_information` data): the `<vendor>`.
    pub dealer: &'a Value,
    /// The dealer's own listing of the vehicle the lead names, when there is
    /// one: it fills year, make, model and the rest the request leaves out.
    pub vehicle: Option<&'a Value>,
    /// The `source` attribute of the prospect `<id>` (who numbered the lead).
    pub id_source: &'a str,
    /// Set when a lead network delivers the lead: its brand becomes the
    /// `<provider>` name and the buyer agent moves to `<provider><service>`.
    pub network: Option<AdfNetwork<'a>>,
}

/// The brand of a lead network that delivers leads on behalf of buyer agents.
#[derive(Debug, Clone, Copy)]
pub struct AdfNetwork<'a> {
    pub name: &'a str,
    pub url: Option<&'a str>,
}

/// The writer could not produce the document. Writing into memory does not
/// fail in practice; the type exists so no caller has to unwrap.
#[derive(Debug, thiserror::Error)]
#[error("ADF document could not be written: {0}")]
pub struct AdfError(String);

impl From<std::io::Error> for AdfError {
    fn from(e: std::io::Error) -> Self {
        AdfError(e.to_string())
    }
}

/// The media type the notes suggest for ADF (not IETF-registered); many
/// receivers take `application/xml` or `text/xml` as well.
pub const ADF_MEDIA_TYPE: &str = "application/x-adf+xml";

/// Builds the ADF document: an XML declaration, `<?adf version="1.0"?>`, and
/// one `<prospect>` in `<adf>`. UTF-8, two-space indentation.
pub fn build(input: &AdfInput<'_>) -> Result<Vec<u8>, AdfError> {
    let mut x = Xml {
        w: Writer::new_with_indent(Vec::with_capacity(2048), b' ', 2),
    };
    x.w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    x.w.write_event(Event::PI(BytesPI::new(r#"adf version="1.0""#)))?;
    x.open("adf", &[])?;
    x.open("prospect", &[("status", "new")])?;
    x.leaf(
        "id",
        &[("sequence", "1"), ("source", input.id_source)],
        input.lead_id,
    )?;
    let req = input.request;
    let requestdate = str_at(req, &["submitted_at"]).unwrap_or(input.received_at);
    x.leaf("requestdate", &[], requestdate)?;

    let appointment_type = str_at(req, &["appointment", "appointment_type"]);
    let interest = if appointment_type == Some("test_drive") {
        "test-drive"
    } else {
        "buy"
    };
    let voi = req.get("vehicle_of_interest").filter(|v| v.is_object());
    let trade = req.get("trade_in").filter(|v| v.is_object());
    match voi {
        Some(voi) => vehicle_of_interest(&mut x, voi, input.vehicle, interest)?,
        // The DTD requires at least one <vehicle> in a prospect: a lead that
        // names none (a general inquiry) gets one whose required year, make
        // and model are empty, and says so in its comments.
        None if trade.is_none() => general_inquiry(&mut x, interest)?,
        None => {}
    }
    if let Some(trade) = trade {
        trade_in(&mut x, trade)?;
    }
    customer(&mut x, req)?;
    vendor(&mut x, input.dealer, input.vehicle)?;
    provider(&mut x, req, input.network)?;
    x.close("prospect")?;
    x.close("adf")?;
    let mut out = x.w.into_inner();
    out.push(b'\n');
    Ok(out)
}

/// Thin helpers over the quick-xml writer: every text and attribute value
/// passes [`xml_text`] first, and the writer escapes it.
struct Xml {
    w: Writer<Vec<u8>>,
}

impl Xml {
    fn open(&mut self, name: &str, attrs: &[(&str, &str)]) -> std::io::Result<()> {
        let mut start = BytesStart::new(name);
        for (k, v) in attrs {
            start.push_attribute((*k, xml_text(v).as_str()));
        }
        self.w.write_event(Event::Start(start))
    }

    fn close(&mut self, name: &str) -> std::io::Result<()> {
        self.w.write_event(Event::End(BytesEnd::new(name)))
    }

    /// `<name attrs>text</name>`; nothing when the cleaned text is empty.
    fn leaf(&mut self, name: &str, attrs: &[(&str, &str)], text: &str) -> std::io::Result<()> {
        let text = xml_text(text);
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        let mut start = BytesStart::new(name);
        for (k, v) in attrs {
            start.push_attribute((*k, xml_text(v).as_str()));
        }
        self.w.write_event(Event::Start(start))?;
        self.w.write_event(Event::Text(BytesText::new(text)))?;
        self.w.write_event(Event::End(BytesEnd::new(name)))
    }

    /// An element the DTD requires: `<name>text</name>`, or `<name/>` when
    /// the value is unknown (the DTD's `#PCDATA` allows it empty; a value is
    /// never guessed).
    fn required(&mut self, name: &str, text: Option<&str>) -> std::io::Result<()> {
        let text = text.map(xml_text);
        match text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(t) => {
                self.w.write_event(Event::Start(BytesStart::new(name)))?;
                self.w.write_event(Event::Text(BytesText::new(t)))?;
                self.w.write_event(Event::End(BytesEnd::new(name)))
            }
            None => self.w.write_event(Event::Empty(BytesStart::new(name))),
        }
    }

    fn leaf_opt(
        &mut self,
        name: &str,
        attrs: &[(&str, &str)],
        text: Option<&str>,
    ) -> std::io::Result<()> {
        match text {
            Some(t) => self.leaf(name, attrs, t),
            None => Ok(()),
        }
    }
}

/// `s` without the characters an XML 1.0 document cannot or should not carry:
/// C0 controls except tab, LF and CR (not allowed at all), DEL and the C1
/// controls (discouraged by XML 1.0 §2.2, refused by CRMs), and the
/// noncharacters U+FFFE and U+FFFF (not allowed). Surrogates cannot occur in
/// a Rust string. Everything else is kept and escaped by the writer.
pub fn xml_text(s: &str) -> String {
    s.chars()
        .filter(|&c| {
            let n = c as u32;
            matches!(c, '\t' | '\n' | '\r')
                || (n >= 0x20
                    && n != 0x7F
                    && !(0x80..=0x9F).contains(&n)
                    && n != 0xFFFE
                    && n != 0xFFFF)
        })
        .collect()
}

fn str_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    let mut cur = v;
    for key in path {
        cur = cur.get(*key)?;
    }
    cur.as_str().filter(|s| !s.trim().is_empty())
}

/// A field of the request's vehicle, or of the dealer's listing when the
/// request does not carry it.
fn pick<'v>(req: &'v Value, listing: Option<&'v Value>, key: &str) -> Option<&'v Value> {
    let present = |v: &&Value| !v.is_null() && v.as_str().is_none_or(|s| !s.trim().is_empty());
    req.get(key)
        .filter(present)
        .or_else(|| listing.and_then(|l| l.get(key)).filter(present))
}

/// A scalar as ADF text: strings as they are, integers in decimal, other
/// numbers rounded to whole units (ADF prices and odometers are whole).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(i.to_string())
            } else if let Some(u) = n.as_u64() {
                Some(u.to_string())
            } else {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| format!("{}", f.round() as i64))
            }
        }
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// ADF knows `A` (automatic) and `M` (manual). CVT, DCT and other automated
/// gearboxes count as automatic; anything unrecognized goes to the comments.
fn transmission_code(t: &str) -> Option<&'static str> {
    let t = t.trim().to_ascii_lowercase();
    if t == "m" || t.contains("manual") || t.contains("stick") {
        Some("M")
    } else if t == "a"
        || t.contains("auto")
        || t.contains("cvt")
        || t.contains("dct")
        || t.contains("dual-clutch")
        || t.contains("dual clutch")
        || t.contains("direct drive")
        || t.contains("single-speed")
        || t.contains("single speed")
    {
        Some("A")
    } else {
        None
    }
}

/// The one vehicle-level structure both vehicle blocks share, in the element
/// order of the ADF 1.0 DTD: year, make, model, vin, stock, trim, bodystyle,
/// transmission, odometer, condition, colorcombination, price, comments.
struct VehicleBlock<'v> {
    req: &'v Value,
    listing: Option<&'v Value>,
}

impl<'v> VehicleBlock<'v> {
    fn get(&self, key: &str) -> Option<&'v Value> {
        pick(self.req, self.listing, key)
    }
    fn text(&self, key: &str) -> Option<String> {
        self.get(key).and_then(scalar)
    }
}

fn vehicle_of_interest(
    x: &mut Xml,
    req: &Value,
    listing: Option<&Value>,
    interest: &str,
) -> std::io::Result<()> {
    // The listing only fills in when it is the vehicle the request names;
    // the gateway resolves it that way, this is a second guard.
    let listing = listing.filter(|l| l.is_object());
    let v = VehicleBlock { req, listing };
    let condition = v.text("condition").map(|c| c.to_ascii_lowercase());
    let status = match condition.as_deref() {
        Some("new") => Some("new"),
        Some("used") | Some("cpo") => Some("used"),
        _ => None,
    };
    let mut attrs = vec![("interest", interest)];
    if let Some(s) = status {
        attrs.push(("status", s));
    }
    let mut comments: Vec<String> = Vec::new();
    if condition.as_deref() == Some("cpo") {
        comments.push("certified pre-owned".into());
    }
    x.open("vehicle", &attrs)?;
    common_vehicle(x, &v, &mut comments)?;
    // The DTD allows one <price>: the asking price when there is one, with
    // the MSRP beside it in <pricecomments>; else the MSRP as the price.
    match (v.text("price"), v.text("msrp")) {
        (Some(price), msrp) => {
            x.leaf("price", &[("type", "quote"), ("currency", "USD")], &price)?;
            if let Some(msrp) = msrp {
                x.leaf("pricecomments", &[], &format!("MSRP: {msrp} USD"))?;
            }
        }
        (None, Some(msrp)) => x.leaf("price", &[("type", "msrp"), ("currency", "USD")], &msrp)?,
        (None, None) => {}
    }
    if let Some(url) = v.text("vdp_url") {
        comments.push(format!("Listing: {url}"));
    }
    x.leaf("comments", &[], &comments.join("; "))?;
    x.close("vehicle")
}

/// The vehicle block of a lead that names no vehicle (ADF requires one).
fn general_inquiry(x: &mut Xml, interest: &str) -> std::io::Result<()> {
    x.open("vehicle", &[("interest", interest)])?;
    x.required("year", None)?;
    x.required("make", None)?;
    x.required("model", None)?;
    x.leaf("comments", &[], "General inquiry: no vehicle named")?;
    x.close("vehicle")
}

fn trade_in(x: &mut Xml, req: &Value) -> std::io::Result<()> {
    let v = VehicleBlock { req, listing: None };
    let mut comments: Vec<String> = Vec::new();
    x.open("vehicle", &[("interest", "trade-in"), ("status", "used")])?;
    common_vehicle(x, &v, &mut comments)?;
    x.leaf("comments", &[], &comments.join("; "))?;
    x.close("vehicle")
}

/// The elements both vehicle blocks carry, up to the condition and colors;
/// attributes ADF has no element for are pushed onto `comments`.
fn common_vehicle(
    x: &mut Xml,
    v: &VehicleBlock<'_>,
    comments: &mut Vec<String>,
) -> std::io::Result<()> {
    // Year, make and model are required by the DTD: an unknown one is an
    // empty element, never guessed.
    x.required("year", v.text("year").as_deref())?;
    x.required("make", v.text("make").as_deref())?;
    x.required("model", v.text("model").as_deref())?;
    x.leaf_opt("vin", &[], v.text("vin").as_deref())?;
    x.leaf_opt("stock", &[], v.text("stock").as_deref())?;
    x.leaf_opt("trim", &[], v.text("trim").as_deref())?;
    x.leaf_opt("bodystyle", &[], v.text("body").as_deref())?;
    if let Some(t) = v.text("transmission") {
        match transmission_code(&t) {
            Some(code) => x.leaf("transmission", &[], code)?,
            None => comments.push(format!("Transmission: {t}")),
        }
    }
    x.leaf_opt(
        "odometer",
        &[("status", "original"), ("units", "mi")],
        v.text("mileage").as_deref(),
    )?;
    // The wear vocabulary (a trade-in's condition) is ADF's own.
    if let Some(c) = v.text("condition").map(|c| c.to_ascii_lowercase()) {
        if matches!(c.as_str(), "excellent" | "good" | "fair" | "poor") {
            x.leaf("condition", &[], &c)?;
        }
    }
    let ext = v.text("exterior_color");
    let int = v.text("interior_color");
    if ext.is_some() || int.is_some() {
        x.open("colorcombination", &[])?;
        x.leaf_opt("interiorcolor", &[], int.as_deref())?;
        x.leaf_opt("exteriorcolor", &[], ext.as_deref())?;
        x.leaf("preference", &[], "1")?;
        x.close("colorcombination")?;
    }
    // Niche attributes fold into the one <comments> of the vehicle.
    let folded: [(&str, &str, &str); 8] = [
        ("vehicle_type", "Vehicle type: ", ""),
        ("engine", "Engine: ", ""),
        ("displacement_cc", "Displacement: ", "cc"),
        ("driveline", "Drivetrain: ", ""),
        ("fuel", "Fuel: ", ""),
        ("battery_kwh", "Battery: ", " kWh"),
        ("motor_power_hp", "Motor power: ", " hp"),
        ("electric_range_mi", "Electric range: ", " mi"),
    ];
    for (key, label, unit) in folded {
        if let Some(val) = v.get(key).and_then(|val| match val {
            // Ranges and capacities may be fractional; keep them as given.
            Value::Number(n) => Some(n.to_string()),
            other => scalar(other),
        }) {
            comments.push(format!("{label}{val}{unit}"));
        }
    }
    Ok(())
}

fn customer(x: &mut Xml, req: &Value) -> std::io::Result<()> {
    let c = req.get("customer").unwrap_or(&Value::Null);
    let first = str_at(c, &["first_name"]);
    let last = str_at(c, &["last_name"]);
    let preferred = str_at(c, &["preferred_contact"]);
    x.open("customer", &[])?;
    x.open("contact", &[("primarycontact", "1")])?;
    x.leaf_opt("name", &[("part", "first")], first)?;
    x.leaf_opt("name", &[("part", "last")], last)?;
    let full: Vec<String> = [first, last]
        .into_iter()
        .flatten()
        .map(|n| xml_text(n).trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    // `<contact>` needs a `<name>`: empty when nothing printable is left.
    match full.is_empty() {
        true => x.required("name", None)?,
        false => x.leaf("name", &[("part", "full")], &full.join(" "))?,
    }
    let pref_email = if preferred == Some("email") { "1" } else { "0" };
    x.leaf_opt(
        "email",
        &[("preferredcontact", pref_email)],
        str_at(c, &["email"]),
    )?;
    let (phone_type, pref_phone) = match preferred {
        Some("sms") => ("cellphone", "1"),
        Some("phone") => ("voice", "1"),
        _ => ("voice", "0"),
    };
    x.leaf_opt(
        "phone",
        &[("type", phone_type), ("preferredcontact", pref_phone)],
        str_at(c, &["phone"]),
    )?;
    if let Some(a) = c.get("address").filter(|a| a.is_object()) {
        address(x, a)?;
    }
    x.close("contact")?;
    x.leaf("comments", &[], &customer_comments(req))?;
    x.close("customer")
}

/// An AAP address as `<address>`. The DTD requires a `<street>`: an address
/// without one is left out here, and a customer's goes to the comments
/// instead (see [`address_without_street`]).
fn address(x: &mut Xml, a: &Value) -> std::io::Result<()> {
    if str_at(a, &["address_line_1"]).is_none() && str_at(a, &["address_line_2"]).is_none() {
        return Ok(());
    }
    x.open("address", &[])?;
    x.leaf_opt("street", &[("line", "1")], str_at(a, &["address_line_1"]))?;
    x.leaf_opt("street", &[("line", "2")], str_at(a, &["address_line_2"]))?;
    x.leaf_opt("city", &[], str_at(a, &["city"]))?;
    x.leaf_opt("regioncode", &[], str_at(a, &["state"]))?;
    x.leaf_opt("postalcode", &[], str_at(a, &["zip"]))?;
    x.leaf("country", &[], str_at(a, &["country"]).unwrap_or("US"))?;
    x.close("address")
}

/// A customer address with no street line (ADF's `<address>` needs one) as
/// a comments paragraph, so the city, state and postal code still arrive:
/// `Address (no street given): Oakland, CA 94601, US.`
fn address_without_street(req: &Value) -> Option<String> {
    let a = req.pointer("/customer/address").filter(|a| a.is_object())?;
    if str_at(a, &["address_line_1"]).is_some() || str_at(a, &["address_line_2"]).is_some() {
        return None;
    }
    let region: Vec<&str> = [str_at(a, &["state"]), str_at(a, &["zip"])]
        .into_iter()
        .flatten()
        .map(str::trim)
        .collect();
    let mut parts: Vec<String> = Vec::new();
    if let Some(city) = str_at(a, &["city"]) {
        parts.push(city.trim().to_string());
    }
    if !region.is_empty() {
        parts.push(region.join(" "));
    }
    if parts.is_empty() {
        return None;
    }
    parts.push(str_at(a, &["country"]).unwrap_or("US").trim().to_string());
    Some(format!("Address (no street given): {}.", parts.join(", ")))
}

/// The buyer's message, the appointment request and the allowed contact
/// channels, one paragraph each, in the customer's single `<comments>`.
fn customer_comments(req: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = str_at(req, &["message"]) {
        parts.push(m.trim().to_string());
    }
    if let Some(a) = req.get("appointment").filter(|a| a.is_object()) {
        let kind = match str_at(a, &["appointment_type"]) {
            Some("test_drive") => "test drive",
            Some("trade_in") => "trade-in appraisal",
            Some("service") => "service",
            Some("sales") => "sales consultation",
            Some(other) => other,
            None => "visit",
        };
        let mut line = format!("Appointment requested: {kind}");
        match str_at(a, &["appointment_at"]) {
            Some(at) => line.push_str(&format!(" at {at}")),
            None => line.push_str(", time to be proposed by the dealer"),
        }
        if let Some(d) = a.get("duration_minutes").and_then(Value::as_u64) {
            line.push_str(&format!(" ({d} minutes)"));
        }
        line.push('.');
        if let Some(n) = str_at(a, &["notes"]) {
            line.push_str(&format!(" Notes: {}", n.trim()));
        }
        parts.push(line);
    }
    if let Some(line) = address_without_street(req) {
        parts.push(line);
    }
    if let Some(ch) = req
        .pointer("/consent/allowed_channels")
        .and_then(Value::as_array)
    {
        let ch: Vec<&str> = ch.iter().filter_map(Value::as_str).collect();
        if !ch.is_empty() {
            parts.push(format!("Contact only by: {}.", ch.join(", ")));
        }
    }
    parts.join("\n\n")
}

/// The rooftop that sells the vehicle (the listing's `rooftop`), else the
/// dealer's first rooftop.
fn rooftop<'v>(dealer: &'v Value, listing: Option<&Value>) -> Option<&'v Value> {
    let roofs = dealer.get("rooftops")?.as_array()?;
    let named = listing.and_then(|l| str_at(l, &["rooftop"]));
    named
        .and_then(|n| roofs.iter().find(|r| str_at(r, &["name"]) == Some(n)))
        .or_else(|| roofs.first())
}

/// A `NamedValue` list entry: the first whose name mentions sales, else the first.
fn sales_value(list: Option<&Value>) -> Option<&str> {
    let list = list?.as_array()?;
    list.iter()
        .find(|e| str_at(e, &["name"]).is_some_and(|n| n.to_ascii_lowercase().contains("sales")))
        .or_else(|| list.first())
        .and_then(|e| str_at(e, &["value"]))
}

fn vendor(x: &mut Xml, dealer: &Value, listing: Option<&Value>) -> std::io::Result<()> {
    let roof = rooftop(dealer, listing);
    let name = str_at(dealer, &["name"]).or_else(|| roof.and_then(|r| str_at(r, &["name"])));
    // The DTD requires `<vendorname>` and a `<contact>` with a name and an
    // e-mail or a phone: what the profile does not give is an empty element.
    x.open("vendor", &[])?;
    x.required("vendorname", name)?;
    x.leaf_opt("url", &[], roof.and_then(|r| str_at(r, &["website"])))?;
    x.open("contact", &[("primarycontact", "1")])?;
    let contact_name = roof.and_then(|r| str_at(r, &["name"])).or(name);
    match contact_name {
        Some(n) => x.leaf("name", &[("part", "full")], n)?,
        None => x.required("name", None)?,
    }
    let email = roof.and_then(|r| sales_value(r.get("emails")));
    let phone = roof.and_then(|r| sales_value(r.get("phones")));
    x.leaf_opt("email", &[], email)?;
    match (email, phone) {
        (None, None) => x.required("phone", None)?,
        (_, phone) => x.leaf_opt("phone", &[("type", "voice")], phone)?,
    }
    if let Some(a) = roof
        .and_then(|r| r.get("address"))
        .filter(|a| a.is_object())
    {
        address(x, a)?;
    }
    x.close("contact")?;
    x.close("vendor")
}

fn provider(x: &mut Xml, req: &Value, network: Option<AdfNetwork<'_>>) -> std::io::Result<()> {
    let agent = str_at(req, &["source_agent", "name"]);
    let agent_url = str_at(req, &["source_agent", "url"]);
    // `<provider>` is optional but needs a `<name>`: none without one.
    let named = match network {
        Some(n) => !xml_text(n.name).trim().is_empty(),
        None => agent.is_some_and(|a| !xml_text(a).trim().is_empty()),
    };
    if !named {
        return Ok(());
    }
    x.open("provider", &[])?;
    match network {
        Some(n) => {
            x.leaf("name", &[("part", "full")], n.name)?;
            x.leaf_opt("service", &[], agent)?;
            x.leaf_opt("url", &[], n.url)?;
        }
        None => {
            x.leaf_opt("name", &[("part", "full")], agent)?;
            x.leaf_opt("url", &[], agent_url)?;
        }
    }
    x.close("provider")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dealer() -> Value {
        json!({"name": "Demo Toyota", "rooftops": [
            {"name": "Demo Toyota SF", "website": "https://sf.example",
             "emails": [{"name": "Service", "value": "svc@sf.example"}, {"name": "Internet Sales", "value": "leads@sf.example"}],
             "phones": [{"name": "Sales", "value": "+14155550100"}],
             "address": {"address_line_1": "1500 Howard St", "city": "San Francisco", "state": "CA", "zip": "94103"}},
            {"name": "Demo Toyota Oakland", "phones": [{"name": "Sales", "value": "+15105550100"}]}
        ]})
    }

    fn base() -> Value {
        json!({"type": "lead.submit.request",
            "customer": {"first_name": "Alex", "last_name": "Sample", "email": "alex@example.com", "preferred_contact": "email"},
            "consent": {"granted_at": "2026-05-01T10:00:00Z", "allowed_channels": ["email"], "consent_text": "ok", "scope": ["lead_submission"]},
            "source_agent": {"name": "buyer-agent", "url": "https://agent.example"},
            "idempotency_key": "k1"})
    }

    fn doc(req: &Value, listing: Option<&Value>, network: Option<AdfNetwork<'_>>) -> String {
        let d = dealer();
        let input = AdfInput {
            lead_id: "lead_1",
            received_at: "2026-12-05T10:00:00Z",
            request: req,
            dealer: &d,
            vehicle: listing,
            id_source: "aap-gateway",
            network,
        };
        String::from_utf8(build(&input).expect("build")).expect("utf8")
    }

    /// (element path, attributes, text).
    type El = (String, Vec<(String, String)>, String);

    /// A flat list of (element path, attributes, text) read back with an
    /// independent parser (roxmltree): checks well-formedness and gives the values.
    fn read(xml: &str) -> Vec<El> {
        let d = roxmltree::Document::parse(xml).expect("well-formed");
        let mut out = Vec::new();
        for n in d.descendants().filter(|n| n.is_element()) {
            let path: Vec<&str> = n
                .ancestors()
                .filter(|a| a.is_element())
                .map(|a| a.tag_name().name())
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let attrs = n
                .attributes()
                .map(|a| (a.name().to_string(), a.value().to_string()))
                .collect();
            let text: String = n
                .children()
                .filter(|c| c.is_text())
                .filter_map(|c| c.text())
                .collect();
            out.push((path.join("/"), attrs, text));
        }
        out
    }

    fn texts<'a>(els: &'a [El], path: &str) -> Vec<&'a str> {
        els.iter()
            .filter(|e| e.0 == path)
            .map(|e| e.2.trim())
            .collect()
    }

    fn attr<'a>(els: &'a [El], path: &str, n: usize, key: &str) -> Option<&'a str> {
        els.iter()
            .filter(|e| e.0 == path)
            .nth(n)?
            .1
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn minimal_lead_has_header_id_customer_vendor_provider_and_a_general_inquiry_vehicle() {
        let xml = doc(&base(), None, None);
        assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        assert!(xml.contains("<?adf version=\"1.0\"?>"));
        let els = read(&xml);
        assert_eq!(texts(&els, "adf/prospect/id"), ["lead_1"]);
        assert_eq!(
            attr(&els, "adf/prospect/id", 0, "source"),
            Some("aap-gateway")
        );
        assert_eq!(attr(&els, "adf/prospect/id", 0, "sequence"), Some("1"));
        assert_eq!(
            texts(&els, "adf/prospect/requestdate"),
            ["2026-12-05T10:00:00Z"]
        );
        // The DTD requires a vehicle: empty year, make and model, said in comments.
        assert_eq!(texts(&els, "adf/prospect/vehicle/year"), [""]);
        assert_eq!(texts(&els, "adf/prospect/vehicle/make"), [""]);
        assert_eq!(texts(&els, "adf/prospect/vehicle/model"), [""]);
        assert_eq!(
            texts(&els, "adf/prospect/vehicle/comments"),
            ["General inquiry: no vehicle named"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/customer/contact/name"),
            ["Alex", "Sample", "Alex Sample"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/customer/contact/email"),
            ["alex@example.com"]
        );
        assert_eq!(
            attr(
                &els,
                "adf/prospect/customer/contact/email",
                0,
                "preferredcontact"
            ),
            Some("1")
        );
        assert_eq!(
            texts(&els, "adf/prospect/customer/comments"),
            ["Contact only by: email."]
        );
        assert_eq!(
            texts(&els, "adf/prospect/vendor/vendorname"),
            ["Demo Toyota"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/vendor/contact/name"),
            ["Demo Toyota SF"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/vendor/contact/email"),
            ["leads@sf.example"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/vendor/contact/address/country"),
            ["US"]
        );
        assert_eq!(texts(&els, "adf/prospect/provider/name"), ["buyer-agent"]);
        assert_eq!(
            texts(&els, "adf/prospect/provider/url"),
            ["https://agent.example"]
        );
        assert!(texts(&els, "adf/prospect/provider/service").is_empty());
    }

    #[test]
    fn vehicle_fills_from_listing_and_maps_price_odometer_transmission() {
        let mut req = base();
        req["vehicle_of_interest"] = json!({"vin": "1HGCY2F57RA000001", "condition": "used"});
        req["submitted_at"] = json!("2026-12-05T09:59:00-08:00");
        let listing = json!({"vin": "1HGCY2F57RA000001", "year": 2024, "make": "Honda", "model": "Accord",
            "trim": "EX", "stock": "S1", "body": "sedan", "transmission": "CVT", "mileage": 12000,
            "price": 28500, "exterior_color": "Blue", "rooftop": "Demo Toyota Oakland", "condition": "new"});
        let els = read(&doc(&req, Some(&listing), None));
        let v = "adf/prospect/vehicle";
        assert_eq!(attr(&els, v, 0, "interest"), Some("buy"));
        assert_eq!(
            attr(&els, v, 0, "status"),
            Some("used"),
            "the request's condition wins"
        );
        assert_eq!(texts(&els, &format!("{v}/year")), ["2024"]);
        assert_eq!(texts(&els, &format!("{v}/make")), ["Honda"]);
        assert_eq!(texts(&els, &format!("{v}/model")), ["Accord"]);
        assert_eq!(texts(&els, &format!("{v}/stock")), ["S1"]);
        assert_eq!(texts(&els, &format!("{v}/bodystyle")), ["sedan"]);
        assert_eq!(texts(&els, &format!("{v}/transmission")), ["A"]);
        assert_eq!(texts(&els, &format!("{v}/odometer")), ["12000"]);
        assert_eq!(attr(&els, &format!("{v}/odometer"), 0, "units"), Some("mi"));
        assert_eq!(texts(&els, &format!("{v}/price")), ["28500"]);
        assert_eq!(
            attr(&els, &format!("{v}/price"), 0, "currency"),
            Some("USD")
        );
        assert_eq!(attr(&els, &format!("{v}/price"), 0, "type"), Some("quote"));
        assert_eq!(
            texts(&els, &format!("{v}/colorcombination/exteriorcolor")),
            ["Blue"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/requestdate"),
            ["2026-12-05T09:59:00-08:00"]
        );
        // The listing's rooftop sells it.
        assert_eq!(
            texts(&els, "adf/prospect/vendor/contact/name"),
            ["Demo Toyota Oakland"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/vendor/contact/phone"),
            ["+15105550100"]
        );
    }

    #[test]
    fn one_price_the_msrp_beside_it_or_alone() {
        let mut req = base();
        req["vehicle_of_interest"] = json!({"year": 2025, "make": "Toyota", "model": "Camry", "price": 30100, "msrp": 31000});
        let els = read(&doc(&req, None, None));
        let v = "adf/prospect/vehicle";
        assert_eq!(texts(&els, &format!("{v}/price")), ["30100"]);
        assert_eq!(attr(&els, &format!("{v}/price"), 0, "type"), Some("quote"));
        assert_eq!(
            texts(&els, &format!("{v}/pricecomments")),
            ["MSRP: 31000 USD"]
        );
        req["vehicle_of_interest"] =
            json!({"year": 2025, "make": "Toyota", "model": "Camry", "msrp": 31000});
        let els = read(&doc(&req, None, None));
        assert_eq!(texts(&els, &format!("{v}/price")), ["31000"]);
        assert_eq!(attr(&els, &format!("{v}/price"), 0, "type"), Some("msrp"));
        assert!(texts(&els, &format!("{v}/pricecomments")).is_empty());
    }

    #[test]
    fn an_address_without_a_street_goes_to_the_comments() {
        let mut req = base();
        req["customer"]["address"] = json!({"city": "Oakland", "state": "CA", "zip": "94601"});
        let els = read(&doc(&req, None, None));
        assert!(texts(&els, "adf/prospect/customer/contact/address").is_empty());
        let comments = texts(&els, "adf/prospect/customer/comments");
        assert_eq!(comments.len(), 1);
        assert!(
            comments[0].starts_with("Address (no street given): Oakland, CA 94601, US."),
            "{comments:?}"
        );
    }

    #[test]
    fn cpo_is_used_with_one_merged_comments() {
        let mut req = base();
        req["vehicle_of_interest"] = json!({"year": 2021, "make": "Yamaha", "model": "MT-09",
            "condition": "cpo", "vehicle_type": "motorcycle", "displacement_cc": 890, "transmission": "manual",
            "price": 8999.6});
        let els = read(&doc(&req, None, None));
        let v = "adf/prospect/vehicle";
        assert_eq!(attr(&els, v, 0, "status"), Some("used"));
        let comments = texts(&els, &format!("{v}/comments"));
        assert_eq!(
            comments,
            ["certified pre-owned; Vehicle type: motorcycle; Displacement: 890cc"]
        );
        assert_eq!(texts(&els, &format!("{v}/transmission")), ["M"]);
        assert_eq!(texts(&els, &format!("{v}/price")), ["9000"]);
    }

    #[test]
    fn trade_in_is_a_second_vehicle_with_condition() {
        let mut req = base();
        req["vehicle_of_interest"] =
            json!({"year": 2025, "make": "Toyota", "model": "Camry", "condition": "new"});
        req["trade_in"] = json!({"year": 2015, "make": "Ford", "model": "Focus", "mileage": 98000,
            "condition": "fair", "vin": "1FADP3F20FL000001", "transmission": "sequential"});
        req["appointment"] =
            json!({"appointment_type": "trade_in", "appointment_at": "2026-12-07T10:00:00-08:00"});
        let els = read(&doc(&req, None, None));
        let v = "adf/prospect/vehicle";
        assert_eq!(attr(&els, v, 0, "interest"), Some("buy"));
        assert_eq!(attr(&els, v, 0, "status"), Some("new"));
        assert_eq!(attr(&els, v, 1, "interest"), Some("trade-in"));
        assert_eq!(texts(&els, &format!("{v}/make")), ["Toyota", "Ford"]);
        assert_eq!(texts(&els, &format!("{v}/condition")), ["fair"]);
        assert_eq!(texts(&els, &format!("{v}/odometer")), ["98000"]);
        assert_eq!(texts(&els, &format!("{v}/vin")), ["1FADP3F20FL000001"]);
        assert_eq!(
            texts(&els, &format!("{v}/comments")),
            ["Transmission: sequential"]
        );
        let cc = texts(&els, "adf/prospect/customer/comments");
        assert_eq!(cc.len(), 1);
        assert!(cc[0]
            .contains("Appointment requested: trade-in appraisal at 2026-12-07T10:00:00-08:00."));
    }

    #[test]
    fn test_drive_sets_interest_and_sales_goes_to_customer_comments() {
        let mut req = base();
        req["vehicle_of_interest"] = json!({"year": 2025, "make": "Toyota", "model": "Camry"});
        req["appointment"] = json!({"appointment_type": "test_drive", "appointment_at": "2026-12-06T15:00:00Z", "duration_minutes": 30});
        req["message"] = json!("Is it still there?");
        let els = read(&doc(&req, None, None));
        assert_eq!(
            attr(&els, "adf/prospect/vehicle", 0, "interest"),
            Some("test-drive")
        );
        assert_eq!(attr(&els, "adf/prospect/vehicle", 0, "status"), None);
        assert_eq!(
            texts(&els, "adf/prospect/customer/comments"),
            ["Is it still there?\n\nAppointment requested: test drive at 2026-12-06T15:00:00Z (30 minutes).\n\nContact only by: email."]
        );

        req["appointment"] = json!({"appointment_type": "sales", "notes": "after work"});
        let els = read(&doc(&req, None, None));
        assert_eq!(
            attr(&els, "adf/prospect/vehicle", 0, "interest"),
            Some("buy")
        );
        let cc = texts(&els, "adf/prospect/customer/comments");
        assert!(cc[0].contains("Appointment requested: sales consultation, time to be proposed by the dealer. Notes: after work"));
    }

    #[test]
    fn network_brand_is_the_provider_and_the_agent_its_service() {
        let net = AdfNetwork {
            name: "Lead Net",
            url: Some("https://net.example"),
        };
        let els = read(&doc(&base(), None, Some(net)));
        assert_eq!(texts(&els, "adf/prospect/provider/name"), ["Lead Net"]);
        assert_eq!(
            texts(&els, "adf/prospect/provider/service"),
            ["buyer-agent"]
        );
        assert_eq!(
            texts(&els, "adf/prospect/provider/url"),
            ["https://net.example"]
        );
    }

    #[test]
    fn hostile_values_stay_text_and_illegal_characters_are_removed() {
        let mut req = base();
        req["customer"]["first_name"] = json!("</name><script>alert(1)</script>");
        req["customer"]["last_name"] = json!("O'Brien & \"Sons\"\u{0}\u{1b}\u{7f}\u{85}\u{fffe}x");
        req["message"] = json!("a]]>b <![CDATA[ c");
        req["source_agent"]["name"] = json!("\"><provider>");
        let xml = doc(&req, None, None);
        assert!(!xml.contains("<script>"));
        let els = read(&xml);
        assert_eq!(
            texts(&els, "adf/prospect/customer/contact/name"),
            [
                "</name><script>alert(1)</script>",
                "O'Brien & \"Sons\"x",
                "</name><script>alert(1)</script> O'Brien & \"Sons\"x"
            ]
        );
        assert!(texts(&els, "adf/prospect/customer/comments")[0].starts_with("a]]>b <![CDATA[ c"));
        assert_eq!(texts(&els, "adf/prospect/provider/name"), ["\"><provider>"]);
        assert_eq!(texts(&els, "adf/prospect/provider").len(), 1);
    }

    #[test]
    fn xml_text_keeps_tab_newline_and_astral_characters() {
        assert_eq!(
            xml_text("a\tb\nc\rd\u{1F697}\u{b}\u{c}"),
            "a\tb\nc\rd\u{1F697}"
        );
    }

    #[test]
    fn transmission_codes() {
        for (t, c) in [
            ("automatic", Some("A")),
            ("CVT", Some("A")),
            ("8-speed DCT", Some("A")),
            ("6-speed manual", Some("M")),
            ("M", Some("M")),
            ("sequential", None),
        ] {
            assert_eq!(transmission_code(t), c, "{t}");
        }
    }
}
