//! The five AAP skills and their names in each vocabulary.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Skill {
    #[serde(rename = "dealer.information")]
    DealerInformation,
    #[serde(rename = "inventory.facets")]
    InventoryFacets,
    #[serde(rename = "inventory.search")]
    InventorySearch,
    #[serde(rename = "inventory.vehicle")]
    InventoryVehicle,
    #[serde(rename = "lead.submit")]
    LeadSubmit,
}

impl Skill {
    /// Canonical catalog order.
    pub const ALL: [Skill; 5] = [
        Skill::DealerInformation,
        Skill::InventoryFacets,
        Skill::InventorySearch,
        Skill::InventoryVehicle,
        Skill::LeadSubmit,
    ];

    /// This skill's place in [`Skill::ALL`] (tables kept per skill index by it).
    pub fn index(self) -> usize {
        match self {
            Skill::DealerInformation => 0,
            Skill::InventoryFacets => 1,
            Skill::InventorySearch => 2,
            Skill::InventoryVehicle => 3,
            Skill::LeadSubmit => 4,
        }
    }

    pub fn id(self) -> &'static str {
        match self {
            Skill::DealerInformation => "dealer.information",
            Skill::InventoryFacets => "inventory.facets",
            Skill::InventorySearch => "inventory.search",
            Skill::InventoryVehicle => "inventory.vehicle",
            Skill::LeadSubmit => "lead.submit",
        }
    }

    pub fn from_id(id: &str) -> Option<Skill> {
        Skill::ALL.into_iter().find(|s| s.id() == id)
    }

    /// MCP tool name: `aap_` + the skill id with dots as underscores.
    pub fn tool_name(self) -> &'static str {
        match self {
            Skill::DealerInformation => "aap_dealer_information",
            Skill::InventoryFacets => "aap_inventory_facets",
            Skill::InventorySearch => "aap_inventory_search",
            Skill::InventoryVehicle => "aap_inventory_vehicle",
            Skill::LeadSubmit => "aap_lead_submit",
        }
    }

    pub fn from_tool_name(name: &str) -> Option<Skill> {
        Skill::ALL.into_iter().find(|s| s.tool_name() == name)
    }

    pub fn request_type(self) -> &'static str {
        match self {
            Skill::DealerInformation => "dealer.information.request",
            Skill::InventoryFacets => "inventory.facets.request",
            Skill::InventorySearch => "inventory.search.request",
            Skill::InventoryVehicle => "inventory.vehicle.request",
            Skill::LeadSubmit => "lead.submit.request",
        }
    }

    pub fn response_type(self) -> &'static str {
        match self {
            Skill::DealerInformation => "dealer.information.response",
            Skill::InventoryFacets => "inventory.facets.response",
            Skill::InventorySearch => "inventory.search.response",
            Skill::InventoryVehicle => "inventory.vehicle.response",
            Skill::LeadSubmit => "lead.submit.response",
        }
    }

    /// File stem of the schema files, e.g. `inventory-search` →
    /// `inventory-search-request.schema.json`.
    pub fn schema_stem(self) -> &'static str {
        match self {
            Skill::DealerInformation => "dealer-information",
            Skill::InventoryFacets => "inventory-facets",
            Skill::InventorySearch => "inventory-search",
            Skill::InventoryVehicle => "inventory-vehicle",
            Skill::LeadSubmit => "lead-submit",
        }
    }

    /// The skill's display name: the tool's `title` and the Agent Card skill's `name`.
    pub fn title(self) -> &'static str {
        match self {
            Skill::DealerInformation => "Dealer information",
            Skill::InventoryFacets => "Inventory facets",
            Skill::InventorySearch => "Inventory search",
            Skill::InventoryVehicle => "Vehicle detail",
            Skill::LeadSubmit => "Submit a consented lead",
        }
    }

    /// The A2A media type stem (`vehicle-detail` for inventory.vehicle).
    pub fn media_stem(self) -> &'static str {
        match self {
            Skill::InventoryVehicle => "vehicle-detail",
            other => other.schema_stem(),
        }
    }

    pub fn is_read(self) -> bool {
        self != Skill::LeadSubmit
    }
}

#[cfg(test)]
mod index_tests {
    use super::Skill;

    #[test]
    fn index_is_the_place_in_all() {
        for (i, skill) in Skill::ALL.into_iter().enumerate() {
            assert_eq!(skill.index(), i, "{skill:?}");
        }
    }
}
