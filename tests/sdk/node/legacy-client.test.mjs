// AAP gateway over MCP 2025-11-25 with the official TypeScript SDK
// (npm @modelcontextprotocol/sdk@1.32.2: Client + StreamableHTTPClientTransport).
//
// SDK 1.32.2 only speaks the handshake era: Client.connect() sends `initialize` with
// LATEST_PROTOCOL_VERSION = "2025-11-25", then `notifications/initialized`, and then sends
// `mcp-protocol-version` (and `mcp-session-id` if the server issued one) on every request.
// Client.listTools() compiles every tool's outputSchema with the SDK's default Ajv validator and
// Client.callTool() validates structuredContent against it (also for isError results).
//
// Run by tests/sdk/run.sh, which sets AAP_GATEWAY_URL. Node's built-in runner: node --test.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  EXPECTED_TOOLS,
  LEGACY_VERSION,
  READ_TOOLS,
  SEARCH_ARGS,
  URL_ENV,
  checkAapError,
  checkSearch,
  checkSuccess,
  describeWire,
  leadArgs,
  recordingFetch,
  vehicleRef,
} from './aap_checks.mjs';

describe('legacy MCP 2025-11-25 via @modelcontextprotocol/sdk 1.32.2', { skip: URL_ENV ? false : 'AAP_GATEWAY_URL is not set; run through tests/sdk/run.sh' }, () => {
  const wire = [];
  const errors = [];
  let client;
  let transport;
  let tools;
  let firstVehicle;
  let connectError;

  // A failed connect is reported by every test (with the real error) instead of a bare
  // "cancelled by parent" from a throwing before() hook.
  function connected() {
    if (connectError) throw new Error(`connect (initialize) failed: ${connectError?.message ?? connectError}`, { cause: connectError });
    return client;
  }

  before(async () => {
    transport = new StreamableHTTPClientTransport(new URL(URL_ENV), { fetch: recordingFetch(wire) });
    client = new Client({ name: 'aap-sdk-e2e-node', version: '1.0.0' }, { capabilities: {} });
    client.onerror = (e) => errors.push(e);
    try {
      await client.connect(transport);
    } catch (e) {
      connectError = e;
    }
  });

  after(async () => {
    if (!client || connectError) return;
    if (transport?.sessionId) {
      // A legacy session was issued: end it (DELETE; 405 is allowed by the spec).
      await transport.terminateSession().catch((e) => errors.push(e));
    }
    await client.close();
  });

  test('initialize handshake negotiates 2025-11-25', () => {
    connected();
    assert.equal(transport.protocolVersion, LEGACY_VERSION, 'negotiated protocol version');
    const info = client.getServerVersion();
    assert.ok(info?.name, `serverInfo missing: ${JSON.stringify(info)}`);
    assert.ok(client.getServerCapabilities()?.tools, 'initialize result lacks capabilities.tools');
    const posts = wire.filter((e) => e.httpMethod === 'POST');
    assert.equal(posts[0]?.rpcMethod, 'initialize', describeWire(wire));
    assert.equal(posts[1]?.rpcMethod, 'notifications/initialized', describeWire(wire));
    assert.equal(posts[1]?.status, 202, `notifications/initialized must be 202, wire:\n${describeWire(wire)}`);
  });

  test('tools/list returns the five AAP tools in order', async () => {
    connected();
    tools = [];
    let cursor;
    for (let i = 0; i < 50; i++) {
      const page = await client.listTools(cursor ? { cursor } : undefined);
      tools.push(...page.tools);
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    assert.equal(cursor, undefined, 'tools/list nextCursor never ended');
    // listTools() above cached only the last page's output validators; with a single page
    // (the expected case) callTool() validates structuredContent for every tool.
    assert.deepEqual(tools.map((t) => t.name), EXPECTED_TOOLS);
    for (const t of tools) {
      assert.equal(typeof t.inputSchema, 'object', `${t.name}: inputSchema`);
      assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema.type`);
      assert.equal(typeof t.outputSchema, 'object', `${t.name}: outputSchema missing`);
      assert.ok(t.outputSchema && Object.keys(t.outputSchema).length > 0, `${t.name}: empty outputSchema`);
      assert.ok(t.description, `${t.name}: description`);
      assert.equal(t.annotations?.openWorldHint, true, `${t.name}: openWorldHint`);
      if (READ_TOOLS.has(t.name)) {
        assert.equal(t.annotations?.readOnlyHint, true, `${t.name}: readOnlyHint`);
      } else {
        assert.equal(t.annotations?.readOnlyHint, false, `${t.name}: readOnlyHint`);
        assert.equal(t.annotations?.destructiveHint, false, `${t.name}: destructiveHint`);
        assert.equal(t.annotations?.idempotentHint, false, `${t.name}: idempotentHint`);
      }
    }
  });

  test('aap_dealer_information', async () => {
    connected();
    const r = await client.callTool({ name: 'aap_dealer_information', arguments: { type: 'dealer.information.request' } });
    const sc = checkSuccess(r, 'dealer.information.response');
    assert.equal(typeof sc.data, 'object');
  });

  test('aap_inventory_facets', async () => {
    connected();
    const r = await client.callTool({
      name: 'aap_inventory_facets',
      arguments: { type: 'inventory.facets.request', filters: { status: ['available'] } },
    });
    const sc = checkSuccess(r, 'inventory.facets.response');
    assert.equal(typeof sc.data, 'object');
  });

  test('aap_inventory_search: Toyota, available, price asc, limit 5', async () => {
    connected();
    const r = await client.callTool({ name: 'aap_inventory_search', arguments: SEARCH_ARGS });
    const vehicles = checkSearch(checkSuccess(r, 'inventory.search.response'));
    firstVehicle = vehicles[0];
  });

  test('aap_inventory_vehicle returns the same vehicle', async () => {
    connected();
    assert.ok(firstVehicle, 'search test did not produce a vehicle');
    const ref = vehicleRef(firstVehicle);
    const r = await client.callTool({ name: 'aap_inventory_vehicle', arguments: { type: 'inventory.vehicle.request', ...ref } });
    const sc = checkSuccess(r, 'inventory.vehicle.response');
    assert.equal(typeof sc.data, 'object', 'vehicle response has no data object');
    for (const k of ['vin', 'stock', 'vehicle_id']) {
      if (firstVehicle[k] != null) assert.equal(sc.data[k], firstVehicle[k], `vehicle detail ${k}`);
    }
    assert.equal(sc.data.make, 'Toyota');
  });

  test('aap_lead_submit with consent; replay with the same key returns the same lead_id', async () => {
    connected();
    assert.ok(firstVehicle, 'search test did not produce a vehicle');
    const args = leadArgs(firstVehicle, randomUUID());
    const r1 = await client.callTool({ name: 'aap_lead_submit', arguments: args });
    const sc1 = checkSuccess(r1, 'lead.submit.response');
    assert.equal(sc1.data?.status, 'received', `lead status ${sc1.data?.status}`);
    assert.ok(typeof sc1.data?.lead_id === 'string' && sc1.data.lead_id.length > 0, `lead_id missing: ${JSON.stringify(sc1.data)}`);

    const r2 = await client.callTool({ name: 'aap_lead_submit', arguments: args });
    const sc2 = checkSuccess(r2, 'lead.submit.response');
    assert.equal(sc2.data?.lead_id, sc1.data.lead_id, 'replay with the same idempotency_key returned a different lead_id');
  });

  test('invalid argument -> isError true, aap.error SCHEMA_VALIDATION_FAILED', async () => {
    connected();
    const bad = { ...SEARCH_ARGS, filters: { ...SEARCH_ARGS.filters, price_max: 'cheap' } };
    const r = await client.callTool({ name: 'aap_inventory_search', arguments: bad });
    checkAapError(r, 'SCHEMA_VALIDATION_FAILED');
  });

  test('requests carried the negotiated MCP-Protocol-Version; no transport errors', () => {
    connected();
    const afterInit = wire.filter((e) => e.httpMethod === 'POST' && e.rpcMethod !== 'initialize');
    for (const e of afterInit) {
      assert.equal(e.reqHeaders['mcp-protocol-version'], LEGACY_VERSION, `${e.rpcMethod} header`);
    }
    // The SDK opens a GET SSE stream after notifications/initialized; a legacy server either
    // serves text/event-stream or answers 405. Anything else surfaces as a transport error.
    const gets = wire.filter((e) => e.httpMethod === 'GET');
    for (const g of gets) {
      assert.ok(
        g.status === 405 || (g.status === 200 && String(g.resHeaders?.['content-type']).startsWith('text/event-stream')),
        `GET stream answered ${g.status} ${g.resHeaders?.['content-type'] ?? ''}`,
      );
    }
    assert.deepEqual(errors.map((e) => String(e?.message ?? e)), [], 'client/transport reported errors');
  });
});
