"""AAP gateway over MCP 2025-11-25 with the official Python SDK (PyPI mcp==2.3.0).

`Client(mode="legacy")` forces the `initialize` handshake at LATEST_HANDSHAKE_VERSION
(2025-11-25) followed by `notifications/initialized` (mcp/client/session.py
`ClientSession.initialize`), the same handshake a pre-2026 client performs.
"""

from __future__ import annotations

import pytest

from aap_e2e import ClientScenario


@pytest.mark.anyio
class TestLegacyHandshake(ClientScenario):
    mode = "legacy"
    modern = False
