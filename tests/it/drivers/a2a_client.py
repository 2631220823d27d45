#!/usr/bin/env python3
"""A2A client driver for tests/it/a2a_inbound.rs, built on PyPI ``a2a-sdk==1.3.0`` (its Client).

Reads a JSON list of calls on stdin and prints one JSON line with the list of outcomes:

    [{"data": {AAP request}, "media": "<stem>", "extension": true, "accept": ["..."]?}, ...]
    -> [{"ok": true, "message": {A2A Message as JSON, numbers integral}, "sent": {headers}}
        | {"ok": false, "sdk_error": "<exception class>", "sdk_code": <int|null>,
           "sdk_data": {...}|null, "raw": {the JSON-RPC error object as received}, "sent": {...}}]

The client is the SDK's own (``ClientFactory`` → ``JsonRpcTransport``, non-streaming), built from
an AgentCard constructed here from ``--url`` (one JSONRPC interface, protocol 1.0, the AAP
extension required). With ``--card-base URL`` the card is resolved instead, with the SDK's
``ClientFactory.create_from_url`` (``<URL>/.well-known/agent-card.json``, or
``--card-path``), as the every-skill tests do with the card the gateway publishes.

The AAP extension is activated per call with the SDK's ``with_a2a_extensions`` service
parameter (the ``A2A-Extensions`` header); ``A2A-Version`` is the SDK's ``PROTOCOL_VERSION_CURRENT``.
The SDK keeps only the first ErrorInfo's metadata of an error, so the raw JSON-RPC error is read
from the response body through an httpx event hook.

    a2a_client.py --url http://127.0.0.1:N/aap/3.0.0/demo-toyota/a2a [--token T] < calls.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import ClientCallContext
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

EXTENSION_URI = "https://autoagentprotocol.org/extensions/aap/v3.0"


def integralize(value: Any) -> Any:
    """google.protobuf.Value holds doubles only: give integral numbers back as ints."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integralize(v) for v in value]
    if isinstance(value, dict):
        return {k: integralize(v) for k, v in value.items()}
    return value


def constructed_card(url: str) -> AgentCard:
    return AgentCard(
        name="Demo Toyota (constructed by the test driver)",
        description="The gateway tenant's inbound A2A binding.",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=False,
            extensions=[AgentExtension(uri=EXTENSION_URI, required=True)],
        ),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
    )


async def run(args: argparse.Namespace, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last: dict[str, Any] = {}

    async def on_response(response: httpx.Response) -> None:
        await response.aread()
        last["body"] = response.content
        last["status"] = response.status_code
        last["url"] = str(response.request.url)
        last["sent"] = {k.lower(): v for k, v in response.request.headers.items() if k.lower().startswith("a2a-")}

    headers = {VERSION_HEADER: PROTOCOL_VERSION_CURRENT}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    http = httpx.AsyncClient(headers=headers, timeout=30.0, event_hooks={"response": [on_response]})
    config = ClientConfig(streaming=False, httpx_client=http)
    factory = ClientFactory(config)
    if args.card_base:
        client = await factory.create_from_url(args.card_base, relative_card_path=args.card_path)
    else:
        client = factory.create(constructed_card(args.url))
    out: list[dict[str, Any]] = []
    try:
        for call in calls:
            stem = call["media"]
            part = Part(media_type=f"application/vnd.autoagent.{stem}-request+json")
            part.data.CopyFrom(ParseDict(call["data"], struct_pb2.Value()))
            request = SendMessageRequest(
                message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[part]),
                configuration=SendMessageConfiguration(
                    accepted_output_modes=call.get("accept") or [f"application/vnd.autoagent.{stem}-response+json"]
                ),
            )
            params = ServiceParametersFactory.create([with_a2a_extensions([EXTENSION_URI] if call.get("extension", True) else [])])
            context = ClientCallContext(service_parameters=params)
            last.clear()
            try:
                events = [e async for e in client.send_message(request, context=context)]
                if len(events) != 1 or not events[0].HasField("message"):
                    raise RuntimeError(f"expected exactly one Message, got {events!r}")
                message = integralize(MessageToDict(events[0].message))
                out.append({"ok": True, "message": message, "sent": last.get("sent", {}), "url": last.get("url")})
            except Exception as e:  # noqa: BLE001 - reported to the Rust test, which asserts on it
                raw = None
                try:
                    raw = json.loads(last.get("body") or b"null")
                except ValueError:
                    pass
                out.append(
                    {
                        "ok": False,
                        "sdk_error": type(e).__name__,
                        "sdk_code": getattr(e, "code", None) if isinstance(getattr(e, "code", None), int) else None,
                        "sdk_data": getattr(e, "data", None) if isinstance(getattr(e, "data", None), dict) else None,
                        "sdk_message": str(e),
                        "status": last.get("status"),
                        "raw": integralize(raw.get("error")) if isinstance(raw, dict) else None,
                        "sent": last.get("sent", {}),
                    }
                )
    finally:
        await client.close()
        await http.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=None, help="the tenant's A2A endpoint URL (a card is built for it)")
    ap.add_argument("--token", default=None, help="Bearer token for the gateway (auth-enabled tenants)")
    ap.add_argument("--card-base", default=None, help="resolve the AgentCard from this base URL instead")
    ap.add_argument("--card-path", default=None, help="card path relative to --card-base")
    args = ap.parse_args()
    if (args.url is None) == (args.card_base is None):
        ap.error("give exactly one of --url and --card-base")
    calls = json.load(sys.stdin)
    print(json.dumps(asyncio.run(run(args, calls))), flush=True)


if __name__ == "__main__":
    main()
