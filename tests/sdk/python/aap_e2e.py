"""Shared helpers for the AAP gateway end-to-end tests with the official MCP Python SDK.

Every test opens its own `mcp.Client` against the real gateway binary (started by
tests/sdk/run.sh, URL in AAP_GATEWAY_URL). The httpx2 client that carries the MCP traffic
has event hooks that record each request's method/headers and each response's status and
headers, so the tests can also make assertions about the wire (e.g. that the modern path
never sent `initialize` and never received an `Mcp-Session-Id`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation, TextContent, Tool

EXPECTED_TOOLS = [
    "aap_dealer_information",
    "aap_inventory_facets",
    "aap_inventory_search",
    "aap_inventory_vehicle",
    "aap_lead_submit",
]

MODERN_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"

SEARCH_ARGS: dict[str, Any] = {
    "type": "inventory.search.request",
    "filters": {"make": ["Toyota"], "status": ["available"]},
    "pagination": {"limit": 5},
    "sort": {"field": "price", "order": "asc"},
}


def gateway_url() -> str | None:
    return os.environ.get("AAP_GATEWAY_URL") or None


@dataclass
class WireLog:
    """What went over HTTP for one client, recorded by httpx2 event hooks (in request order)."""

    exchanges: list[dict[str, Any]] = field(default_factory=list)
    _by_request: dict[int, dict[str, Any]] = field(default_factory=dict)

    async def on_request(self, request: httpx2.Request) -> None:
        method = None
        if request.method == "POST":
            try:
                body = json.loads(request.content or b"null")
                if isinstance(body, dict):
                    method = body.get("method")
            except ValueError:
                pass
        entry = {
            "http_method": request.method,
            "rpc_method": method,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "status": None,
            "response_headers": None,
        }
        self.exchanges.append(entry)
        self._by_request[id(request)] = entry

    async def on_response(self, response: httpx2.Response) -> None:
        entry = self._by_request.get(id(response.request))
        if entry is not None:
            entry["status"] = response.status_code
            entry["response_headers"] = {k.lower(): v for k, v in response.headers.items()}

    def posts(self) -> list[dict[str, Any]]:
        return [e for e in self.exchanges if e["http_method"] == "POST"]

    def rpc_methods(self) -> list[str | None]:
        return [e["rpc_method"] for e in self.posts()]

    def describe(self) -> str:
        return "\n".join(
            f"{e['http_method']} {e['rpc_method']!s:28} -> {e['status']} "
            f"{(e['response_headers'] or {}).get('content-type', '')}"
            for e in self.exchanges
        )


@asynccontextmanager
async def connect(url: str, mode: str) -> AsyncIterator[tuple[Client, WireLog]]:
    """Open an MCP client session over Streamable HTTP.

    `mode` is the `mcp.Client(mode=...)` value: "auto" (the SDK default: probe
    `server/discover` at 2026-07-28, fall back to `initialize` only on a non-modern answer),
    "2026-07-28" (adopt the modern revision without a probe) or "legacy" (`initialize` at
    2025-11-25, then `notifications/initialized`).
    """
    wire = WireLog()
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0, read=60.0),
        event_hooks={"request": [wire.on_request], "response": [wire.on_response]},
    )
    async with http:
        transport = streamable_http_client(url, http_client=http)
        client = Client(
            transport,
            mode=mode,
            client_info=Implementation(name="aap-sdk-e2e-python", version="1.0.0"),
            read_timeout_seconds=60.0,
        )
        async with client:
            yield client, wire


def check_negotiated(client: Client, wire: WireLog, expect_modern: bool, mode: str) -> None:
    """Assert the session really is on the era we asked for (auto mode must not silently fall back)."""
    if expect_modern:
        assert client.protocol_version == MODERN_VERSION, (
            f"mode={mode!r} negotiated {client.protocol_version!r}, expected {MODERN_VERSION}; "
            f"the SDK fell back to the legacy handshake. Wire log:\n{wire.describe()}"
        )
        assert client.session.discover_result is not None or mode != "auto"
        assert client.session.initialize_result is None
        assert "initialize" not in wire.rpc_methods(), wire.describe()
        if mode == "auto":
            dr = client.session.discover_result
            assert dr is not None
            assert MODERN_VERSION in dr.supported_versions, dr.supported_versions
            assert LEGACY_VERSION in dr.supported_versions, (
                f"server/discover must advertise both revisions, got {dr.supported_versions}"
            )
            assert dr.capabilities.tools is not None, "server/discover result lacks capabilities.tools"
            fields = dr.model_fields_set
            assert "ttl_ms" in fields and "cache_scope" in fields, (
                f"server/discover result lacks ttlMs/cacheScope (fields sent: {sorted(fields)})"
            )
    else:
        assert client.protocol_version == LEGACY_VERSION, client.protocol_version
        init = client.session.initialize_result
        assert init is not None
        assert init.capabilities.tools is not None, "initialize result lacks capabilities.tools"
        assert init.server_info is not None and init.server_info.name
        assert wire.rpc_methods()[:1] == ["initialize"], wire.describe()
        assert "server/discover" not in wire.rpc_methods()


def check_legacy_wire(wire: WireLog) -> None:
    """After the session: `notifications/initialized` went out second and was accepted with 202."""
    posts = wire.posts()
    assert len(posts) >= 2 and posts[1]["rpc_method"] == "notifications/initialized", wire.describe()
    assert posts[1]["status"] == 202, f"notifications/initialized answered {posts[1]['status']}, expected 202"
    for e in posts[1:]:
        assert e["headers"].get("mcp-protocol-version") == LEGACY_VERSION, e


def check_modern_wire(wire: WireLog) -> None:
    """2026-07-28 has no protocol sessions: the server must never mint `Mcp-Session-Id`."""
    for e in wire.exchanges:
        assert "mcp-session-id" not in (e["response_headers"] or {}), (
            f"modern response to {e['rpc_method']} carried Mcp-Session-Id: {e['response_headers']}"
        )


async def list_all_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(50):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise AssertionError("tools/list nextCursor never ended")


def text_json(result: CallToolResult) -> Any:
    texts = [c for c in result.content if isinstance(c, TextContent)]
    assert texts, f"tool result has no text content block: {result.content!r}"
    try:
        return json.loads(texts[0].text)
    except ValueError as e:
        raise AssertionError(f"text content block is not JSON: {texts[0].text[:300]!r}") from e


def check_success(result: CallToolResult, response_type: str, *, modern: bool) -> dict[str, Any]:
    sc = result.structured_content
    assert result.is_error is False, f"expected isError false, got error result: {sc!r}"
    assert isinstance(sc, dict), f"structuredContent is not an object: {sc!r}"
    assert sc.get("type") == response_type, f"structuredContent.type = {sc.get('type')!r}, expected {response_type}"
    assert text_json(result) == sc, "text content JSON differs from structuredContent"
    if modern:
        assert "result_type" in result.model_fields_set and result.result_type == "complete", (
            "modern tools/call result lacks resultType: \"complete\""
        )
    return sc


def check_aap_error(result: CallToolResult, code: str) -> dict[str, Any]:
    sc = result.structured_content
    assert result.is_error is True, f"expected isError true, got: {sc!r}"
    assert isinstance(sc, dict), f"structuredContent is not an object: {sc!r}"
    assert sc.get("type") == "aap.error", f"structuredContent.type = {sc.get('type')!r}, expected aap.error"
    assert sc.get("code") == code, f"aap.error code = {sc.get('code')!r}, expected {code}"
    assert text_json(result) == sc, "text content JSON differs from structuredContent"
    return sc


def check_search(sc: dict[str, Any]) -> list[dict[str, Any]]:
    data = sc.get("data")
    assert isinstance(data, dict), f"search response has no data object: {sc!r}"
    vehicles = data.get("vehicles")
    assert isinstance(vehicles, list) and vehicles, f"data.vehicles empty or missing: {data!r}"
    assert len(vehicles) <= 5, f"limit 5 requested, got {len(vehicles)} vehicles"
    for v in vehicles:
        assert v.get("make") == "Toyota", f"non-Toyota vehicle returned: {v.get('make')!r} {v.get('vin')!r}"
    prices = [v.get("price") for v in vehicles]
    priced = [p for p in prices if isinstance(p, (int, float))]
    assert priced, f"no vehicle has a numeric price: {prices}"
    assert priced == sorted(priced), f"vehicles not sorted by price asc: {prices}"
    # Vehicles without a price (call-for-price) may only come after the priced ones.
    first_unpriced = next((i for i, p in enumerate(prices) if not isinstance(p, (int, float))), len(prices))
    assert all(not isinstance(p, (int, float)) for p in prices[first_unpriced:]), f"price order: {prices}"
    return vehicles


def vehicle_ref(vehicle: dict[str, Any]) -> dict[str, Any]:
    if vehicle.get("vin"):
        return {"vin": vehicle["vin"]}
    assert vehicle.get("stock"), f"vehicle has neither vin nor stock: {vehicle!r}"
    return {"stock": vehicle["stock"]}


def lead_args(vehicle: dict[str, Any], key: str) -> dict[str, Any]:
    granted = (datetime.now(timezone.utc) - timedelta(minutes=1)).replace(microsecond=0)
    return {
        "type": "lead.submit.request",
        "customer": {
            "first_name": "Test",
            "last_name": "Buyer",
            "email": "test.buyer@example.com",
            "preferred_contact": "email",
        },
        "consent": {
            "granted_at": granted.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "allowed_channels": ["email"],
            "consent_text": "I agree that Demo Toyota may contact me by email about this vehicle.",
            "scope": ["lead_submission"],
        },
        "vehicle_of_interest": vehicle_ref(vehicle),
        "source_agent": {"name": "sdk-e2e"},
        "idempotency_key": key,
    }


def fresh_key() -> str:
    return str(uuid.uuid4())


READ_TOOLS = {"aap_dealer_information", "aap_inventory_facets", "aap_inventory_search", "aap_inventory_vehicle"}


def _lone_leaf(group: BaseExceptionGroup) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


class ClientScenario:
    """The AAP-over-MCP scenario, run once per client mode by the Test* subclasses.

    Not collected itself (no `Test` prefix). Each test opens its own client session, so a
    failure in one does not cascade into the others.
    """

    mode: str = "auto"
    modern: bool = True

    @asynccontextmanager
    async def session(self, url: str) -> AsyncIterator[tuple[Client, WireLog]]:
        try:
            async with connect(url, self.mode) as (client, wire):
                check_negotiated(client, wire, self.modern, self.mode)
                yield client, wire
        except BaseExceptionGroup as group:
            # The SDK's transport task group wraps whatever the test body raised; unwrap a lone
            # leaf so pytest reports the real assertion/MCPError instead of an ExceptionGroup.
            leaf = _lone_leaf(group)
            if leaf is None:
                raise
            raise leaf
        if self.modern:
            check_modern_wire(wire)
        else:
            check_legacy_wire(wire)

    async def search(self, client: Client) -> list[dict[str, Any]]:
        result = await client.call_tool("aap_inventory_search", SEARCH_ARGS)
        return check_search(check_success(result, "inventory.search.response", modern=self.modern))

    async def test_handshake(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            if self.mode != MODERN_VERSION:  # a pinned mode synthesizes its discover result
                assert client.server_capabilities.tools is not None
            # One real request, so the legacy `notifications/initialized` POST completes too.
            await client.list_tools(cache_mode="bypass")

    async def test_tools_list(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            first = await client.list_tools(cache_mode="bypass")
            if self.modern:
                fields = first.model_fields_set
                assert "ttl_ms" in fields and "cache_scope" in fields, (
                    f"tools/list result lacks ttlMs/cacheScope (fields sent: {sorted(fields)})"
                )
                assert first.cache_scope in ("public", "private")
                assert isinstance(first.ttl_ms, int) and first.ttl_ms >= 0
            tools = await list_all_tools(client)
            assert [t.name for t in tools] == EXPECTED_TOOLS
            for t in tools:
                assert isinstance(t.input_schema, dict) and t.input_schema.get("type") == "object", (
                    f"{t.name}: inputSchema is not an object schema: {str(t.input_schema)[:200]}"
                )
                assert isinstance(t.output_schema, dict) and t.output_schema, f"{t.name}: no outputSchema"
                assert t.output_schema.get("type", "object") == "object", (
                    f"{t.name}: outputSchema root type is {t.output_schema.get('type')!r}"
                )

    async def test_tool_metadata(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            tools = {t.name: t for t in await list_all_tools(client)}
            for name, t in tools.items():
                assert t.description, f"{name}: empty description"
                a = t.annotations
                assert a is not None, f"{name}: no annotations"
                assert a.open_world_hint is True, f"{name}: openWorldHint {a.open_world_hint!r}"
                if name in READ_TOOLS:
                    assert a.read_only_hint is True, f"{name}: readOnlyHint {a.read_only_hint!r}"
                else:
                    assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == (False, False, False), (
                        f"{name}: hints {a!r}"
                    )
                assert t.meta and isinstance(t.meta.get("autoagentprotocol.org/aap"), dict), (
                    f"{name}: no _meta['autoagentprotocol.org/aap']"
                )
            aap_meta = tools["aap_inventory_search"].meta["autoagentprotocol.org/aap"]
            assert isinstance(aap_meta.get("capabilities"), dict), (
                "aap_inventory_search lacks _meta['autoagentprotocol.org/aap'].capabilities"
            )

    async def test_dealer_information(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            result = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
            sc = check_success(result, "dealer.information.response", modern=self.modern)
            assert isinstance(sc.get("data"), dict)

    async def test_inventory_facets(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            result = await client.call_tool(
                "aap_inventory_facets",
                {"type": "inventory.facets.request", "filters": {"status": ["available"]}},
            )
            sc = check_success(result, "inventory.facets.response", modern=self.modern)
            assert isinstance(sc.get("data"), dict)

    async def test_inventory_search(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            await self.search(client)

    async def test_inventory_vehicle(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            first = (await self.search(client))[0]
            ref = vehicle_ref(first)
            result = await client.call_tool("aap_inventory_vehicle", {"type": "inventory.vehicle.request", **ref})
            sc = check_success(result, "inventory.vehicle.response", modern=self.modern)
            data = sc.get("data")
            assert isinstance(data, dict), f"vehicle response has no data object: {sc!r}"
            for k in ("vin", "stock", "vehicle_id"):
                if first.get(k) is not None:
                    assert data.get(k) == first[k], f"vehicle detail {k} {data.get(k)!r} != search {first[k]!r}"
            assert data.get("make") == "Toyota"

    async def test_lead_submit_idempotent(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            first = (await self.search(client))[0]
            args = lead_args(first, fresh_key())
            r1 = await client.call_tool("aap_lead_submit", args)
            sc1 = check_success(r1, "lead.submit.response", modern=self.modern)
            data1 = sc1.get("data") or {}
            assert data1.get("status") == "received", f"lead status {data1.get('status')!r}"
            lead_id = data1.get("lead_id")
            assert isinstance(lead_id, str) and lead_id, f"lead_id missing: {data1!r}"

            r2 = await client.call_tool("aap_lead_submit", args)
            sc2 = check_success(r2, "lead.submit.response", modern=self.modern)
            assert (sc2.get("data") or {}).get("lead_id") == lead_id, (
                f"replay with the same idempotency_key returned lead_id "
                f"{(sc2.get('data') or {}).get('lead_id')!r}, expected {lead_id!r}"
            )

    async def test_schema_validation_error(self, gateway_url: str) -> None:
        async with self.session(gateway_url) as (client, _wire):
            await list_all_tools(client)
            bad = {**SEARCH_ARGS, "filters": {**SEARCH_ARGS["filters"], "price_max": "cheap"}}
            result = await client.call_tool("aap_inventory_search", bad)
            check_aap_error(result, "SCHEMA_VALIDATION_FAILED")
            if self.modern:
                assert "result_type" in result.model_fields_set and result.result_type == "complete"
