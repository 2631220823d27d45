#!/usr/bin/env python3
"""A2A 1.0 AAP dealer agent for aap-gateway tests, built on PyPI ``a2a-sdk==1.3.0``.

* Agent Card (SDK ``create_agent_card_routes``) at ``/.well-known/agent-card.json``: the AAP
  extension ``https://autoagentprotocol.org/extensions/aap/v3.0`` with ``required: true``,
  the five AAP skills, one ``JSONRPC`` ``supportedInterfaces`` entry (``protocolVersion 1.0``).
* JSON-RPC endpoint (SDK ``JsonRpcDispatcher``) at ``/a2a``; only ``SendMessage`` is served.
  - ``A2A-Version`` must be 1.x (SDK ``validate_version``; missing = 0.3): else -32009.
  - ``A2A-Extensions`` must list the exact AAP URI: else -32008 with an ErrorInfo
    (``domain a2a-protocol.org``, ``reason EXTENSION_SUPPORT_REQUIRED``,
    ``metadata.extensionUri`` / ``metadata.requiredHeader``).
  - ``params.message``: ``role ROLE_USER``, first part a data part whose ``mediaType`` is
    ``application/vnd.autoagent.<x>-request+json``; ``configuration.acceptedOutputModes``
    must include the matching ``-response+json`` type.
  - Success: ``result.message`` (``ROLE_AGENT``, new ``messageId``, one data part with the AAP
    response). ``--task-mode`` answers ``result.task`` instead (invalid for AAP, on purpose).
  - AAP errors: a JSON-RPC error whose ``data`` is the AAP 2.0-draft array
    ``[ErrorInfo(domain autoagentprotocol.org, reason = code), BadRequest?, aap.error + @type]``.
* ``AAP_A2A_TOKEN`` (env): when set, the JSON-RPC endpoint needs ``Authorization: Bearer <token>``
  (HTTP 401 otherwise); the card stays public and declares the bearer scheme.

    a2a_agent.py --port N --leads FILE [--task-mode] [--int-numbers] [--public-url URL]
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aap_dealer  # noqa: E402
import uvicorn  # noqa: E402
from a2a.server.context import ServerCallContext  # noqa: E402
from a2a.server.request_handlers.request_handler import RequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes  # noqa: E402
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher  # noqa: E402
from a2a.types import (  # noqa: E402
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Artifact,
    ContentTypeNotSupportedError,
    ExtensionSupportRequiredError,
    HTTPAuthSecurityScheme,
    InvalidParamsError,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    Task,
    TaskState,
    TaskStatus,
    UnsupportedOperationError,
)
from a2a.utils.errors import A2AError  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402
from google.protobuf.json_format import MessageToDict, ParseDict  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402

log = logging.getLogger("a2a-agent")

RPC_PATH = "/a2a"
EXTENSION_URI = aap_dealer.EXTENSION_URI
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
AAP_DOMAIN = "autoagentprotocol.org"
STATE_KEY = "aap_jsonrpc_error"

# AAP error code -> JSON-RPC code on the A2A wire (AAP 2.0 draft table; the 3.0 additions that
# are caller mistakes map to -32602, the rest to -32000).
JSONRPC_CODE = {
    "UNSUPPORTED_SKILL": -32004,
    "SCHEMA_VALIDATION_FAILED": -32602,
    "MISSING_REQUIRED_FIELD": -32602,
    "INVALID_CONDITION": -32602,
    "INVALID_CURSOR": -32602,
    "CURSOR_EXPIRED": -32602,
    "UNSUPPORTED_FILTER": -32602,
    "INTERNAL_ERROR": -32603,
}


def media_type(skill: dict[str, Any], kind: str, stem: str | None = None) -> str:
    return f"application/vnd.autoagent.{stem or skill['media']}-{kind}+json"


def uuid7() -> str:
    ms = int(time.time() * 1000)
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def build_card(url: str, token_required: bool) -> AgentCard:
    skills_params = {
        s["id"]: {
            "request_schema": f"{aap_dealer.SCHEMA_BASE_URL}{s['stem']}-request.schema.json",
            "response_schema": f"{aap_dealer.SCHEMA_BASE_URL}{s['stem']}-response.schema.json",
        }
        for s in aap_dealer.SKILLS["skills"]
    }
    params = struct_pb2.Struct()
    params.update(
        {
            "id": uuid7(),
            "version": aap_dealer.AAP_RELEASE,
            "schema_base_url": aap_dealer.SCHEMA_BASE_URL,
            "skills": skills_params,
            "capabilities": aap_dealer.capabilities(),
        }
    )
    card = AgentCard(
        name="Demo Toyota",
        description="Auto Agent Protocol dealer agent for Demo Toyota (aap-gateway A2A upstream test peer): dealer information, inventory facets, search and vehicle detail, consented leads.",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        provider=AgentProvider(organization="aap-gateway tests", url="https://www.demo-toyota.example"),
        version="1.0.0",
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=False,
            extensions=[
                AgentExtension(
                    uri=EXTENSION_URI,
                    description=f"Auto Agent Protocol {aap_dealer.AAP_RELEASE}: A2A automotive retail profile.",
                    required=True,
                    params=params,
                )
            ],
        ),
        default_input_modes=[media_type(s, "request") for s in aap_dealer.SKILLS["skills"]],
        default_output_modes=[media_type(s, "response") for s in aap_dealer.SKILLS["skills"]],
        skills=[
            AgentSkill(
                id=s["id"],
                name=s["name"],
                description=s["description"],
                tags=s["tags"],
                input_modes=[media_type(s, "request")],
                output_modes=[media_type(s, "response")],
            )
            for s in aap_dealer.SKILLS["skills"]
        ],
    )
    if token_required:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description="Static test token (env AAP_A2A_TOKEN)"))
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList(list=[])}))
    return card


class AapSkillError(A2AError):
    """Raised for an aap.error; the dispatcher below swaps in the AAP array-form error."""


def aap_jsonrpc_error(payload: dict[str, Any]) -> dict[str, Any]:
    code = payload["code"]
    tagged = {"@type": aap_dealer.ERROR_TYPE_TAG, **payload}
    data: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO_TYPE,
            "reason": code,
            "domain": AAP_DOMAIN,
            "metadata": {
                "code": code,
                "error_id": payload["error_id"],
                "retryable": "true" if payload["retryable"] else "false",
                "created_at": payload["created_at"],
            },
        }
    ]
    errors = (payload.get("details") or {}).get("errors")
    if isinstance(errors, list) and errors and code in ("SCHEMA_VALIDATION_FAILED", "MISSING_REQUIRED_FIELD", "INVALID_CONDITION"):
        data.append(
            {
                "@type": BAD_REQUEST_TYPE,
                "fieldViolations": [
                    {"field": e.get("instanceLocation", ""), "description": f"{e.get('keyword', '')}: {e.get('error', '')}"} for e in errors
                ],
            }
        )
    data.append(tagged)
    return {"code": JSONRPC_CODE.get(code, -32000), "message": payload["message"], "data": data}


class AapRequestHandler(RequestHandler):
    """SendMessage only: the AAP A2A binding (no streaming, tasks, push or extended card)."""

    def __init__(self, dealer: aap_dealer.Dealer, task_mode: bool):
        self.dealer = dealer
        self.task_mode = task_mode

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        if EXTENSION_URI not in context.requested_extensions:
            raise ExtensionSupportRequiredError(
                message=f"This agent requires the Auto Agent Protocol extension {EXTENSION_URI}: "
                f"activate it by sending that exact URI in the A2A-Extensions header.",
                data={"extensionUri": EXTENSION_URI, "requiredHeader": "A2A-Extensions"},
            )
        msg = params.message
        if msg.role != Role.ROLE_USER:
            raise InvalidParamsError(message="params.message.role must be ROLE_USER")
        if not msg.parts or msg.parts[0].WhichOneof("content") != "data":
            raise ContentTypeNotSupportedError(
                message="The AAP request must be the first part of the message, as a data part with an application/vnd.autoagent.<skill>-request+json mediaType."
            )
        first = msg.parts[0]
        payload = aap_dealer.integralize(MessageToDict(first.data))
        skill = None
        if isinstance(payload, dict) and isinstance(payload.get("type"), str) and payload["type"].endswith(".request"):
            skill_id = payload["type"][: -len(".request")]
            skill = aap_dealer.SKILL_BY_ID.get(skill_id)
            if skill is None:
                self._raise_aap(context, aap_dealer.aap_error("UNSUPPORTED_SKILL", f"This dealer does not implement the skill {skill_id!r}."))
        if skill is None:
            self._raise_aap(
                context,
                aap_dealer.aap_error(
                    "SCHEMA_VALIDATION_FAILED",
                    "The data part is not a typed AAP request.",
                    {"errors": [aap_dealer.field_error("/type", "required", "an AAP request type such as inventory.search.request is required")]},
                ),
            )
        stems = [skill["media"], *skill["media_aliases"]]
        if first.media_type not in [media_type(skill, "request", st) for st in stems]:
            raise ContentTypeNotSupportedError(
                message=f"mediaType {first.media_type!r} is not accepted for {skill['id']}; use {media_type(skill, 'request')}."
            )
        response_mt = media_type(skill, "response", first.media_type.split("vnd.autoagent.", 1)[1].rsplit("-request+json", 1)[0])
        accepted = list(params.configuration.accepted_output_modes)
        if not accepted:
            raise InvalidParamsError(message=f"configuration.acceptedOutputModes is required; include {response_mt}.")
        if response_mt not in accepted:
            raise ContentTypeNotSupportedError(message=f"None of acceptedOutputModes is served for {skill['id']}; this agent answers {response_mt}.")

        caller = "bearer" if (context.state.get("headers") or {}).get("authorization") else "anonymous"
        result = self.dealer.execute(skill["id"], payload, caller=caller)
        if aap_dealer.is_error(result):
            self._raise_aap(context, result)

        part = Part(media_type=response_mt)
        part.data.CopyFrom(ParseDict(result, struct_pb2.Value()))
        context_id = msg.context_id or str(uuid.uuid4())
        if self.task_mode:
            return Task(
                id=str(uuid.uuid4()),
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
                artifacts=[Artifact(artifact_id=str(uuid.uuid4()), name=f"{skill['id']}.response", parts=[part])],
            )
        return Message(message_id=str(uuid.uuid4()), context_id=context_id, role=Role.ROLE_AGENT, parts=[part])

    @staticmethod
    def _raise_aap(context: ServerCallContext, payload: dict[str, Any]) -> None:
        context.state[STATE_KEY] = aap_jsonrpc_error(payload)
        raise AapSkillError(message=payload["message"])

    # Everything else is out of the AAP profile.
    async def _unsupported(self, *_: Any, **__: Any) -> Any:
        raise UnsupportedOperationError(message="This AAP dealer agent serves SendMessage only.")

    on_get_task = on_list_tasks = on_cancel_task = _unsupported
    on_create_task_push_notification_config = on_get_task_push_notification_config = _unsupported
    on_list_task_push_notification_configs = on_delete_task_push_notification_config = _unsupported
    on_get_extended_agent_card = _unsupported

    async def on_message_send_stream(self, *_: Any, **__: Any) -> Any:  # type: ignore[override]
        raise UnsupportedOperationError(message="Streaming is not offered by this AAP dealer agent.")
        yield  # pragma: no cover

    async def on_subscribe_to_task(self, *_: Any, **__: Any) -> Any:  # type: ignore[override]
        raise UnsupportedOperationError(message="Tasks are not offered by this AAP dealer agent.")
        yield  # pragma: no cover


class AapDispatcher(JsonRpcDispatcher):
    """SDK dispatcher; only swaps in the AAP array-form error for aap.error outcomes.

    a2a-sdk's own ``build_error_details`` always leads with an ErrorInfo of domain
    ``a2a-protocol.org`` and cannot carry the typed aap.error payload.
    """

    def __init__(self, *a: Any, int_numbers: bool = False, **kw: Any):
        super().__init__(*a, **kw)
        self.int_numbers = int_numbers

    def _create_response(self, context: ServerCallContext, handler_result: Any) -> Any:
        if isinstance(handler_result, dict):
            aap_err = context.state.get(STATE_KEY)
            if aap_err is not None and "error" in handler_result:
                handler_result = {"jsonrpc": "2.0", "id": handler_result.get("id"), "error": aap_err}
            elif self.int_numbers and "result" in handler_result:
                handler_result = {**handler_result, "result": aap_dealer.integralize(handler_result["result"])}
        return super()._create_response(context, handler_result)


class BearerGate:
    """ASGI middleware: ``Authorization: Bearer <AAP_A2A_TOKEN>`` on the JSON-RPC path."""

    def __init__(self, app: Any, token: str | None):
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.token is not None and scope["type"] == "http" and scope.get("path") == RPC_PATH:
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if auth != f"Bearer {self.token}":
                resp = JSONResponse(
                    {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Unauthorized: a valid Bearer token is required"}},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="aap-a2a-upstream", error="invalid_token"'},
                )
                await resp(scope, receive, send)
                return
        await self.app(scope, receive, send)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--leads", type=Path, required=True, help="JSONL file that accepted leads are appended to")
    ap.add_argument("--task-mode", action="store_true", help="answer SendMessage with a task instead of a message (invalid for AAP)")
    ap.add_argument("--int-numbers", action="store_true", help="send integral numbers as integers (the SDK's protobuf Value makes every number a double, e.g. 18080.0)")
    ap.add_argument("--public-url", default=None, help="interface URL published in the Agent Card (default http://HOST:PORT/a2a)")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--schemas-dir", type=Path, default=None)
    ap.add_argument("--log-level", default="warning")
    args = ap.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    token = os.environ.get("AAP_A2A_TOKEN") or None
    dealer = aap_dealer.Dealer(args.leads, args.data_dir, args.schemas_dir, peer="a2a")
    url = args.public_url or f"http://{args.host}:{args.port}{RPC_PATH}"
    card = build_card(url, token_required=token is not None)
    dispatcher = AapDispatcher(request_handler=AapRequestHandler(dealer, args.task_mode), int_numbers=args.int_numbers)
    from starlette.routing import Route

    routes = create_agent_card_routes(card) + [Route(RPC_PATH, endpoint=dispatcher.handle_requests, methods=["POST"])]
    app = BearerGate(Starlette(routes=routes), token)
    print(
        f"a2a-agent: listening on http://{args.host}:{args.port} (a2a-sdk 1.3.0; card /.well-known/agent-card.json; "
        f"JSON-RPC {RPC_PATH}; {'task' if args.task_mode else 'message'} replies; leads -> {args.leads}"
        f"{'; bearer token required' if token else ''})",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
