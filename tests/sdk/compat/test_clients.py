"""Agent frameworks that bend MCP, through the real gateway, with and without their profile.

- openai-agents 0.24.0: MCPServerStreamableHttp + MCPUtil.to_function_tool with strict schema
  conversion (OpenAI's recommended setting). Tools are invoked directly, as the Runner does
  after a model's tool call; the arguments are what a strict-mode model must produce: every
  property present, null for the ones it does not use (checked against the converted schema).
- mcp-use 1.7.1: LangChainAdapter tools (pydantic args model from the input schema), invoked
  with explicit nulls for the unset optionals, as its tool calls carry them.
- autogen-ext 0.7.5: mcp_server_tools() over Streamable HTTP.

Each client first runs against the canonical tenant (demo-toyota) and fails the way it does
today, then against the tenant with its profile and completes.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import jsonschema
import pytest

pytestmark = pytest.mark.anyio

TOOLS = {
    "aap_dealer_information",
    "aap_inventory_facets",
    "aap_inventory_search",
    "aap_inventory_vehicle",
    "aap_lead_submit",
}

SEARCH = {
    "type": "inventory.search.request",
    "filters": {"make": ["Toyota"], "status": ["available"]},
    "pagination": {"limit": 3},
}


def lead(vin: str) -> dict[str, Any]:
    granted = (datetime.now(timezone.utc) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "lead.submit.request",
        "customer": {"first_name": "Compat", "last_name": "Buyer", "email": "compat.buyer@example.com",
                     "preferred_contact": "email"},
        "consent": {"granted_at": granted, "allowed_channels": ["email"],
                    "consent_text": "I agree that Demo Toyota may contact me by email about this vehicle.",
                    "scope": ["lead_submission"]},
        "source_agent": {"name": "compat-e2e"},
        "idempotency_key": str(uuid.uuid4()),
        "vehicle_of_interest": {"vin": vin},
    }


def _resolve(root: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in s:
        s = root["$defs"][s["$ref"].split("/")[-1]]
    return s


def _object_branch(root: dict[str, Any], s: dict[str, Any]) -> dict[str, Any] | None:
    s = _resolve(root, s)
    if "properties" in s:
        return s
    for b in s.get("anyOf", []):
        found = _object_branch(root, b)
        if found is not None:
            return found
    return None


def fill_nulls(root: dict[str, Any], schema: dict[str, Any], value: Any) -> Any:
    """`value` as a strict-mode model writes it: every declared property present, null when unused."""
    obj = _object_branch(root, schema)
    if not isinstance(value, dict) or obj is None:
        return value
    return {k: fill_nulls(root, p, value[k]) if k in value else None for k, p in obj["properties"].items()}


def structured(output: Any) -> dict[str, Any]:
    assert isinstance(output, str), f"tool output is not text: {output!r}"
    try:
        return json.loads(output)
    except ValueError:
        raise AssertionError(f"tool answered an error, not a result: {output[:600]}") from None


# ---------------------------------------------------------------- openai-agents ----------------

async def _openai_tools(url: str):
    from agents.mcp import MCPServerStreamableHttp, MCPUtil

    server = MCPServerStreamableHttp(params={"url": url}, use_structured_content=True,
                                     client_session_timeout_seconds=30)
    await server.connect()
    tools = await server.list_tools()
    converted = {t.name: MCPUtil.to_function_tool(t, server, convert_schemas_to_strict=True) for t in tools}
    return server, converted


async def _openai_call(tool, args: dict[str, Any]) -> Any:
    from agents.tool_context import ToolContext

    text = json.dumps(args)
    ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="call_1", tool_arguments=text)
    return await tool.on_invoke_tool(ctx, text)


async def test_openai_agents_canonical_catalog_is_not_strict(gateway) -> None:
    server, tools = await _openai_tools(gateway.url("demo-toyota"))
    try:
        assert set(tools) == TOOLS
        refused = {n for n, t in tools.items() if not t.strict_json_schema}
        # Root anyOf (vehicle) and the open Vehicle object (lead): strict conversion refused.
        assert refused == {"aap_inventory_vehicle", "aap_lead_submit"}, refused
        # What a strict model would send (nulls for unused optionals) is refused canonically.
        search = tools["aap_inventory_search"]
        args = fill_nulls(search.params_json_schema, search.params_json_schema, SEARCH)
        out = await _openai_call(search, args)
        assert "SCHEMA_VALIDATION_FAILED" in str(out), out
    finally:
        await server.cleanup()


async def test_openai_agents_strict_profile_completes_search_vehicle_and_lead(gateway) -> None:
    server, tools = await _openai_tools(gateway.url("compat-strict"))
    try:
        assert set(tools) == TOOLS
        assert all(t.strict_json_schema for t in tools.values()), \
            {n: t.strict_json_schema for n, t in tools.items()}

        def strict_args(name: str, args: dict[str, Any]) -> dict[str, Any]:
            schema = tools[name].params_json_schema
            filled = fill_nulls(schema, schema, args)
            jsonschema.validate(filled, schema)  # a strict-mode model can produce exactly this
            return filled

        found = structured(await _openai_call(tools["aap_inventory_search"],
                                              strict_args("aap_inventory_search", SEARCH)))
        assert found["type"] == "inventory.search.response", found
        vin = found["data"]["vehicles"][0]["vin"]
        detail = structured(await _openai_call(
            tools["aap_inventory_vehicle"],
            strict_args("aap_inventory_vehicle", {"type": "inventory.vehicle.request", "vin": vin})))
        assert detail["type"] == "inventory.vehicle.response" and detail["data"]["vin"] == vin, detail
        sent = structured(await _openai_call(tools["aap_lead_submit"],
                                             strict_args("aap_lead_submit", lead(vin))))
        assert sent["type"] == "lead.submit.response" and sent["data"]["status"] == "received", sent
    finally:
        await server.cleanup()
    # The access line names the dropped properties, never their values.
    lines = [l for l in gateway.access_lines() if '"tenant":"compat-strict"' in l and "nulls_dropped" in l]
    assert any("/customer/phone" in l for l in lines), lines
    assert not any("compat.buyer@example.com" in l for l in gateway.access_lines())


# ---------------------------------------------------------------- mcp-use --------------------

async def _mcp_use_tools(url: str):
    from mcp_use import MCPClient
    from mcp_use.agents.adapters.langchain_adapter import LangChainAdapter

    client = MCPClient(config={"mcpServers": {"aap": {"url": url}}})
    tools = await LangChainAdapter().create_tools(client)
    return client, {t.name: t for t in tools}


def _all_optionals_null(tool, args: dict[str, Any]) -> dict[str, Any]:
    """What the adapter's tool call carries: every field of its args model, null when unset."""
    model = tool.args_schema.model_validate(args)
    return model.model_dump(mode="json")


async def test_mcp_use_langchain_null_as_absent(gateway) -> None:
    results = {}
    for tenant in ("demo-toyota", "compat-nulls"):
        client, tools = await _mcp_use_tools(gateway.url(tenant))
        try:
            assert set(tools) == TOOLS
            search = tools["aap_inventory_search"]
            sargs = _all_optionals_null(search, SEARCH)
            assert sargs["privacy"] is None and sargs["sort"] is None, sargs
            found = await search.ainvoke(sargs)
            vehicle = tools["aap_inventory_vehicle"]
            vin = "JTMW1RFV0RD000001"
            if tenant == "compat-nulls":
                vin = json.loads(found)["data"]["vehicles"][0]["vin"]
            vargs = _all_optionals_null(vehicle, {"type": "inventory.vehicle.request", "vin": vin})
            assert vargs["stock"] is None and vargs["vehicle_id"] is None, vargs
            detail = await vehicle.ainvoke(vargs)
            results[tenant] = (found, detail, vin)
        finally:
            await client.close_all_sessions()
    found, detail, _ = results["demo-toyota"]
    assert "SCHEMA_VALIDATION_FAILED" in str(found) and "SCHEMA_VALIDATION_FAILED" in str(detail), results
    found, detail, vin = results["compat-nulls"]
    assert json.loads(found)["type"] == "inventory.search.response", found
    d = json.loads(detail)
    assert d["type"] == "inventory.vehicle.response" and d["data"]["vin"] == vin, d
    lines = [l for l in gateway.access_lines() if '"tenant":"compat-nulls"' in l and "nulls_dropped" in l]
    assert any('/vehicle_id' in l and '/stock' in l for l in lines), lines


# ---------------------------------------------------------------- autogen-ext ----------------

async def test_autogen_mcp_server_tools_no_type_arrays(gateway) -> None:
    from autogen_core import CancellationToken
    from autogen_ext.tools.mcp import StreamableHttpServerParams, mcp_server_tools

    with pytest.raises(TypeError, match="unhashable"):
        await mcp_server_tools(StreamableHttpServerParams(url=gateway.url("demo-toyota")))
    tools = {t.name: t for t in await mcp_server_tools(StreamableHttpServerParams(url=gateway.url("compat-notypes")))}
    assert set(tools) == TOOLS
    out = await tools["aap_inventory_search"].run_json(SEARCH, CancellationToken())
    text = tools["aap_inventory_search"].return_value_as_string(out)
    assert "inventory.search.response" in text, text[:600]
