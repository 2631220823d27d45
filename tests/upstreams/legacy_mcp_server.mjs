#!/usr/bin/env node
// Legacy MCP upstream peer (npm @modelcontextprotocol/sdk@1.32.2, MCP 2025-11-25, stateful sessions).
//
//   node tests/upstreams/legacy_mcp_server.mjs --port N --leads FILE [--json-response]
//
// The implementation lives in node/legacy_server.mjs so that it resolves its dependencies from
// tests/upstreams/node/node_modules (installed by tests/upstreams/setup.sh with `npm ci`).
await import('./node/legacy_server.mjs');
