"""AAP gateway over MCP 2026-07-28 with the official Python SDK (PyPI mcp==2.3.0).

`TestModernAuto` uses the SDK's default `Client(mode="auto")`: it probes `server/discover`
at 2026-07-28 and adopts the result (mcp/client/_probe.py `negotiate_auto`). The tests assert
that the probe succeeded, i.e. that the SDK did NOT silently fall back to `initialize`.
`TestModernPinned` uses `Client(mode="2026-07-28")`, which adopts the revision with no probe.
"""

from __future__ import annotations

import pytest

from aap_e2e import ClientScenario


@pytest.mark.anyio
class TestModernAuto(ClientScenario):
    mode = "auto"
    modern = True


@pytest.mark.anyio
class TestModernPinned(ClientScenario):
    mode = "2026-07-28"
    modern = True
