//! The MCP tool catalog, generated from the schemas and a tenant's skills.

use super::compat::{self, HostCompat};
use super::schemas::{SchemaSet, AAP_RELEASE, SCHEMA_BASE_URL};
use super::skill::Skill;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub const AAP_META_KEY: &str = "autoagentprotocol.org/aap";

#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// The tenant's host compatibility profiles (all off: the canonical catalog).
    pub host_compat: HostCompat,
    pub idempotency_ttl: Duration,
}

fn describe_window(d: Duration) -> String {
    let hours = d.as_secs() / 3600;
    if hours >= 1 && d.as_secs().is_multiple_of(3600) {
        format!("{hours} hours")
    } else {
        format!("{} seconds", d.as_secs())
    }
}

fn description(skill: Skill, opts: &CatalogOptions) -> String {
    match skill {
        Skill::DealerInformation => "Return the dealership profile: name, welcome message and each rooftop (location) with address, geo position, phones, e-mails, business hours, time zone, services offered and the dealer fees included in advertised prices. Read-only; takes {\"type\":\"dealer.information.request\"}.".into(),
        Skill::InventoryFacets => "Return counts of the vehicles in stock by make, model, trim, year, condition, body style, fuel, drivetrain, colour, rooftop, status and vehicle type, plus price, mileage and year ranges. Accepts the same optional filters as aap_inventory_search, so an agent can see what is available before searching. Read-only.".into(),
        Skill::InventorySearch => "Search vehicles in stock with flat filters (make, model, trim, year range, condition new/used/cpo, status, body style, fuel, drivetrain, colours, price and mileage bounds, VIN, stock number, free-text query), a sort (price, year, mileage, …) and paging. `price` is the final advertised price including mandatory dealer fees. To get the next page, repeat the same request with pagination.cursor set to the returned data.next_cursor (cursors expire; an expired cursor returns CURSOR_EXPIRED). Read-only; works anonymously.".into(),
        Skill::InventoryVehicle => "Return full details of one vehicle identified by vin, stock or vehicle_id: status, pricing and fees, mileage, trim, equipment, fuel economy or electric range, photos and the dealer's vehicle page. A unit that has left stock returns VEHICLE_UNAVAILABLE. Read-only.".into(),
        Skill::LeadSubmit => format!(
            "Send the buyer's enquiry to the dealership: contact details, an optional vehicle of interest, trade-in and appointment request. Requires the buyer's explicit contact consent (consent.granted_at, consent.allowed_channels, the verbatim consent_text, scope [\"lead_submission\"]); tool selection or sign-in never substitutes for it. Requires an idempotency_key (a UUID per lead): a retry with the same key and payload within {} returns the original result instead of sending a second lead, and the same key with a different payload is rejected with IDEMPOTENCY_CONFLICT. After an uncertain failure, retry with the same key, never a new one.",
            describe_window(opts.idempotency_ttl)
        ),
    }
}

fn annotations(skill: Skill) -> Value {
    if skill.is_read() {
        json!({
            "title": skill.title(),
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": true
        })
    } else {
        json!({
            "title": skill.title(),
            "readOnlyHint": false,
            "destructiveHint": false,
            "idempotentHint": false,
            "openWorldHint": true
        })
    }
}

/// The output union: the skill's typed response or `aap.error`, with every
/// definition of both hoisted into one `$defs` so the schema stays
/// self-contained and uses only root-relative references.
pub fn output_schema(schemas: &SchemaSet, skill: Skill) -> Result<Value, String> {
    let mut defs = Map::new();
    let mut strip = |doc: &Value, name: &str| -> Result<(), String> {
        let mut body = doc.as_object().cloned().ok_or("schema is not an object")?;
        body.remove("$schema");
        body.remove("$id");
        if let Some(Value::Object(inner)) = body.remove("$defs") {
            for (k, v) in inner {
                if defs.insert(k.clone(), v).is_some() {
                    return Err(format!("definition {k:?} appears in two schemas"));
                }
            }
        }
        defs.insert(name.into(), Value::Object(body));
        Ok(())
    };
    let response_name = format!("{}-response", skill.schema_stem());
    strip(schemas.response_doc(skill), &response_name)?;
    strip(schemas.doc("error"), "aap-error")?;
    Ok(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": format!("{SCHEMA_BASE_URL}{}-result.schema.json", skill.schema_stem()),
        "type": "object",
        "description": format!("Either a {} payload or an aap.error payload (then isError is true).", skill.response_type()),
        "anyOf": [
            { "$ref": format!("#/$defs/{response_name}") },
            { "$ref": "#/$defs/aap-error" }
        ],
        "$defs": defs
    }))
}

/// Build one tool description.
pub fn tool(
    schemas: &SchemaSet,
    skill: Skill,
    capabilities: Option<&Value>,
    opts: &CatalogOptions,
) -> Result<Value, String> {
    let input = compat::input_schema(schemas.request_doc(skill), &opts.host_compat)
        .map_err(|e| format!("{}: {e}", skill.tool_name()))?;
    let mut aap = Map::new();
    aap.insert("version".into(), json!(AAP_RELEASE));
    aap.insert("skill".into(), json!(skill.id()));
    aap.insert("request_type".into(), json!(skill.request_type()));
    aap.insert("response_type".into(), json!(skill.response_type()));
    aap.insert(
        "request_schema".into(),
        json!(format!(
            "{SCHEMA_BASE_URL}{}-request.schema.json",
            skill.schema_stem()
        )),
    );
    aap.insert(
        "response_schema".into(),
        json!(format!(
            "{SCHEMA_BASE_URL}{}-response.schema.json",
            skill.schema_stem()
        )),
    );
    aap.insert(
        "error_schema".into(),
        json!(format!("{SCHEMA_BASE_URL}error.schema.json")),
    );
    if skill == Skill::InventorySearch {
        if let Some(c) = capabilities {
            aap.insert("capabilities".into(), c.clone());
        }
    }
    Ok(json!({
        "name": skill.tool_name(),
        "title": skill.title(),
        "description": description(skill, opts),
        "inputSchema": input,
        "outputSchema": output_schema(schemas, skill)?,
        "annotations": annotations(skill),
        "_meta": { AAP_META_KEY: aap }
    }))
}

/// The tenant's catalog in canonical skill order.
pub fn build(
    schemas: &SchemaSet,
    skills: &[Skill],
    capabilities: Option<&Value>,
    opts: &CatalogOptions,
) -> Result<Vec<Value>, String> {
    let mut ordered: Vec<Skill> = skills.to_vec();
    ordered.sort();
    ordered.dedup();
    ordered
        .into_iter()
        .map(|s| tool(schemas, s, capabilities, opts))
        .collect()
}

/// A tenant's tool catalog and its `tools/list` pages, serialized once. Immutable, so every
/// tenant with the same skills, capabilities, options and page size holds the same one
/// ([`CatalogInterner`]): 10,000 demo tenants keep one catalog, not 10,000 `Value` trees.
#[derive(Debug)]
pub struct ToolCatalog {
    pub tools: Vec<Value>,
    page_size: usize,
    /// The JSON array text of `tools[k * page_size ..][..page_size]`, page k.
    pages: Vec<Box<[u8]>>,
    /// Bit `skill.index()` set when `tools` holds `skill`'s tool (a call
    /// asks on every `tools/call`; looking the name up in each tool's
    /// `Value` hashed it with SipHash, about 260 instructions a tool).
    served: u8,
}

impl ToolCatalog {
    pub fn new(tools: Vec<Value>, page_size: usize) -> ToolCatalog {
        let size = page_size.max(1);
        let pages = tools
            .chunks(size)
            .map(|page| {
                serde_json::to_vec(page)
                    .unwrap_or_default()
                    .into_boxed_slice()
            })
            .collect();
        let served = tools
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .filter_map(Skill::from_tool_name)
            .fold(0u8, |bits, skill| bits | 1 << skill.index());
        ToolCatalog {
            tools,
            page_size: size,
            pages,
            served,
        }
    }

    /// Whether the catalog holds `skill`'s tool.
    pub fn serves(&self, skill: Skill) -> bool {
        self.served >> skill.index() & 1 == 1
    }

    /// The serialized array of the page that starts at `offset`, when it is one of the pages
    /// this catalog was cut into (`None` for any other offset or page size).
    pub fn page(&self, offset: usize, page_size: usize) -> Option<&[u8]> {
        if page_size != self.page_size || !offset.is_multiple_of(self.page_size) {
            return None;
        }
        self.pages.get(offset / self.page_size).map(|p| &p[..])
    }
}

impl std::ops::Deref for ToolCatalog {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.tools
    }
}

/// Catalogs of one config generation by everything that shapes them. Use one interner with
/// one [`SchemaSet`] (the schemas are part of the key only by that rule).
#[derive(Debug, Default)]
pub struct CatalogInterner {
    built: HashMap<String, Arc<ToolCatalog>>,
}

impl CatalogInterner {
    /// The catalog of `skills` (any order, duplicates ignored) with `capabilities`, `opts`
    /// and `page_size`: built on first use, then the same `Arc`.
    pub fn get(
        &mut self,
        schemas: &SchemaSet,
        skills: &[Skill],
        capabilities: Option<&Value>,
        opts: &CatalogOptions,
        page_size: usize,
    ) -> Result<Arc<ToolCatalog>, String> {
        let mut ordered: Vec<Skill> = skills.to_vec();
        ordered.sort();
        ordered.dedup();
        let key = format!(
            "{ordered:?}|{}|{}|{}|{page_size}",
            capabilities.map(Value::to_string).unwrap_or_default(),
            opts.host_compat.names().join(","),
            opts.idempotency_ttl.as_millis(),
        );
        if let Some(c) = self.built.get(&key) {
            return Ok(c.clone());
        }
        let c = Arc::new(ToolCatalog::new(
            build(schemas, &ordered, capabilities, opts)?,
            page_size,
        ));
        self.built.insert(key, c.clone());
        Ok(c)
    }

    /// Forget the catalogs no tenant holds any more (an interner kept from
    /// one generation to the next does not grow with removed shapes).
    pub fn prune(&mut self) {
        self.built.retain(|_, c| Arc::strong_count(c) > 1);
    }

    /// Distinct catalogs built so far.
    pub fn len(&self) -> usize {
        self.built.len()
    }

    pub fn is_empty(&self) -> bool {
        self.built.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_exactly_the_skills_whose_tools_it_holds() {
        let tools = vec![
            json!({"name": Skill::InventorySearch.tool_name()}),
            json!({"name": Skill::LeadSubmit.tool_name()}),
            json!({"name": "not_an_aap_tool"}),
            json!({"title": "a tool without a name"}),
        ];
        let catalog = ToolCatalog::new(tools, 10);
        for skill in Skill::ALL {
            let expected = matches!(skill, Skill::InventorySearch | Skill::LeadSubmit);
            assert_eq!(catalog.serves(skill), expected, "{skill:?}");
        }
        assert!(!ToolCatalog::new(Vec::new(), 10).serves(Skill::InventorySearch));
    }
}
