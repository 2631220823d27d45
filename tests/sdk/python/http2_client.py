"""The official MCP Python SDK over HTTP/2: lists and calls every tool through an httpx2
client made with `http2=True` (PyPI `h2`), and checks that every exchange was HTTP/2.

    python tests/sdk/python/http2_client.py URL [CA_FILE]

An https URL negotiates HTTP/2 by ALPN, the certificate checked against CA_FILE; an http URL
speaks h2c with prior knowledge (HTTP/1 turned off in the client). Exits 0 after printing
"http2-sdk: ok ..." when everything passed; an assertion error otherwise. Run by
tests/it/http2.rs with the peers' venv (tests/upstreams/requirements.txt lists `h2`).
"""

from __future__ import annotations

import asyncio
import ssl
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from aap_e2e import (
    EXPECTED_TOOLS,
    SEARCH_ARGS,
    check_search,
    check_success,
    fresh_key,
    lead_args,
    list_all_tools,
    vehicle_ref,
)


async def main(url: str, ca_file: str | None) -> None:
    versions: list[str] = []

    async def on_response(response: httpx2.Response) -> None:
        versions.append(response.http_version)

    if url.startswith("https://"):
        assert ca_file, "an https URL needs the test CA file"
        transport_opts = {"verify": ssl.create_default_context(cafile=ca_file), "http2": True}
    else:
        transport_opts = {"http1": False, "http2": True}
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0, read=60.0),
        event_hooks={"response": [on_response]},
        **transport_opts,
    )
    async with http:
        client = Client(
            streamable_http_client(url, http_client=http),
            mode="auto",
            client_info=Implementation(name="aap-http2-python", version="1.0.0"),
            read_timeout_seconds=60.0,
        )
        async with client:
            tools = sorted(t.name for t in await list_all_tools(client))
            assert tools == EXPECTED_TOOLS, tools
            r = await client.call_tool("aap_dealer_information", {"type": "dealer.information.request"})
            check_success(r, "dealer.information.response", modern=True)
            r = await client.call_tool(
                "aap_inventory_facets",
                {"type": "inventory.facets.request", "filters": {"status": ["available"]}},
            )
            check_success(r, "inventory.facets.response", modern=True)
            r = await client.call_tool("aap_inventory_search", SEARCH_ARGS)
            first = check_search(check_success(r, "inventory.search.response", modern=True))[0]
            r = await client.call_tool(
                "aap_inventory_vehicle", {"type": "inventory.vehicle.request", **vehicle_ref(first)}
            )
            check_success(r, "inventory.vehicle.response", modern=True)
            r = await client.call_tool("aap_lead_submit", lead_args(first, fresh_key()))
            check_success(r, "lead.submit.response", modern=True)
    assert versions, "no HTTP exchange was seen"
    assert all(v == "HTTP/2" for v in versions), f"not all exchanges were HTTP/2: {versions}"
    print(f"http2-sdk: ok: {len(versions)} exchanges, all HTTP/2; tools {', '.join(tools)}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
