"""pytest configuration for the MCP Python SDK end-to-end tests.

Async tests run on anyio's pytest plugin (anyio is a dependency of `mcp`), asyncio backend.
"""

from __future__ import annotations

import pytest

from aap_e2e import gateway_url as _gateway_url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway_url() -> str:
    url = _gateway_url()
    if not url:
        pytest.skip("AAP_GATEWAY_URL is not set; run these tests through tests/sdk/run.sh")
    return url
