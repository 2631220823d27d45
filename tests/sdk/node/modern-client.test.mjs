// AAP gateway over MCP 2026-07-28 with the modern official TypeScript client
// (npm @modelcontextprotocol/client@2.4.0: Client + StreamableHTTPClientTransport).
//
// The v2 client defaults to the 2025 handshake; `versionNegotiation: { mode: 'auto' }` makes
// connect() probe with `server/discover` first and adopt the modern era only on definitive
// modern evidence, falling back to `initialize` otherwise. These tests assert that the probe
// succeeded (modern era, 2026-07-28, no `initialize` on the wire), i.e. that the gateway's
// discover answer is one a real modern client accepts. Client.listTools() compiles the tools'
// outputSchemas and Client.callTool() validates structuredContent against them.
//
// Run by tests/sdk/run.sh, which sets AAP_GATEWAY_URL. Node's built-in runner: node --test.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import {
  EXPECTED_TOOLS,
  LEGACY_VERSION,
  MODERN_VERSION,
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

// The package's `exports` hide package.json, so read it from node_modules next to this file.
const CLIENT_VERSION = JSON.parse(
  readFileSync(new URL('./node_modules/@modelcontextprotocol/client/package.json', import.meta.url), 'utf8'),
).version;

describe(`modern MCP 2026-07-28 via @modelcontextprotocol/client ${CLIENT_VERSION} (versionNegotiation auto)`, { skip: URL_ENV ? false : 'AAP_GATEWAY_URL is not set; run through tests/sdk/run.sh' }, () => {
  const wire = [];
  const errors = [];
  let client;
  let transport;
  let firstVehicle;
  let connectError;

  function connected() {
    if (connectError) throw new Error(`connect (server/discover probe) failed: ${connectError?.message ?? connectError}`, { cause: connectError });
    return client;
  }

  /** JSON bodies of every tools/call response seen so far (SSE answers have no stored body). */
  async function toolCallBodies() {
    const calls = wire.filter((e) => e.httpMethod === 'POST' && e.rpcMethod === 'tools/call' && e.resBody);
    return Promise.all(calls.map((e) => e.resBody));
  }

  before(async () => {
    transport = new StreamableHTTPClientTransport(new URL(URL_ENV), { fetch: recordingFetch(wire) });
    client = new Client(
      { name: 'aap-sdk-e2e-node-modern', version: '1.0.0' },
      { capabilities: {}, versionNegotiation: { mode: 'auto' } },
    );
    client.onerror = (e) => errors.push(e);
    try {
      await client.connect(transport);
    } catch (e) {
      connectError = e;
    }
  });

  after(async () => {
    if (!client || connectError) return;
    await client.close();
  });

  test('auto negotiation adopts 2026-07-28 via server/discover (no fallback to initialize)', () => {
    connected();
    assert.equal(client.getProtocolEra(), 'modern', `era; wire:\n${describeWire(wire)}`);
    assert.equal(client.getNegotiatedProtocolVersion(), MODERN_VERSION, 'negotiated protocol version');
    const posts = wire.filter((e) => e.httpMethod === 'POST');
    assert.equal(posts[0]?.rpcMethod, 'server/discover', describeWire(wire));
    assert.ok(!posts.some((e) => e.rpcMethod === 'initialize'), `initialize was sent:\n${describeWire(wire)}`);
    const dr = client.getDiscoverResult();
    assert.ok(dr, 'no discover result kept by the client');
    assert.ok(dr.supportedVersions?.includes(MODERN_VERSION), `supportedVersions ${JSON.stringify(dr.supportedVersions)}`);
    assert.ok(dr.supportedVersions?.includes(LEGACY_VERSION), `supportedVersions ${JSON.stringify(dr.supportedVersions)}`);
    assert.ok(client.getServerCapabilities()?.tools, 'discover result lacks capabilities.tools');
    assert.ok(client.getServerVersion()?.name, `serverInfo missing: ${JSON.stringify(client.getServerVersion())}`);
  });

  test('tools/list returns the five AAP tools in order', async () => {
    connected();
    const tools = [];
    let cursor;
    for (let i = 0; i < 50; i++) {
      const page = await client.listTools(cursor ? { cursor } : undefined, { cacheMode: 'bypass' });
      tools.push(...page.tools);
      cursor = page.nextCursor;
      if (!cursor) break;
    }
    assert.equal(cursor, undefined, 'tools/list nextCursor never ended');
    assert.deepEqual(tools.map((t) => t.name), EXPECTED_TOOLS);
    for (const t of tools) {
      assert.equal(t.inputSchema?.type, 'object', `${t.name}: inputSchema.type`);
      assert.ok(t.outputSchema && Object.keys(t.outputSchema).length > 0, `${t.name}: outputSchema missing`);
      assert.ok(t.description, `${t.name}: description`);
      assert.equal(t.annotations?.openWorldHint, true, `${t.name}: openWorldHint`);
      assert.equal(t.annotations?.readOnlyHint, READ_TOOLS.has(t.name), `${t.name}: readOnlyHint`);
    }
  });

  test('aap_dealer_information', async () => {
    connected();
    const r = await client.callTool({ name: 'aap_dealer_information', arguments: { type: 'dealer.information.request' } });
    assert.equal(typeof checkSuccess(r, 'dealer.information.response').data, 'object');
  });

  test('aap_inventory_facets', async () => {
    connected();
    const r = await client.callTool({
      name: 'aap_inventory_facets',
      arguments: { type: 'inventory.facets.request', filters: { status: ['available'] } },
    });
    assert.equal(typeof checkSuccess(r, 'inventory.facets.response').data, 'object');
  });

  test('aap_inventory_search: Toyota, available, price asc, limit 5', async () => {
    connected();
    const r = await client.callTool({ name: 'aap_inventory_search', arguments: SEARCH_ARGS });
    firstVehicle = checkSearch(checkSuccess(r, 'inventory.search.response'))[0];
  });

  test('aap_inventory_vehicle returns the same vehicle', async () => {
    connected();
    assert.ok(firstVehicle, 'search test did not produce a vehicle');
    const r = await client.callTool({
      name: 'aap_inventory_vehicle',
      arguments: { type: 'inventory.vehicle.request', ...vehicleRef(firstVehicle) },
    });
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
    const sc1 = checkSuccess(await client.callTool({ name: 'aap_lead_submit', arguments: args }), 'lead.submit.response');
    assert.equal(sc1.data?.status, 'received', `lead status ${sc1.data?.status}`);
    assert.ok(typeof sc1.data?.lead_id === 'string' && sc1.data.lead_id.length > 0, `lead_id missing: ${JSON.stringify(sc1.data)}`);
    const sc2 = checkSuccess(await client.callTool({ name: 'aap_lead_submit', arguments: args }), 'lead.submit.response');
    assert.equal(sc2.data?.lead_id, sc1.data.lead_id, 'replay with the same idempotency_key returned a different lead_id');
  });

  test('invalid argument -> isError true, aap.error SCHEMA_VALIDATION_FAILED', async () => {
    connected();
    const bad = { ...SEARCH_ARGS, filters: { ...SEARCH_ARGS.filters, price_max: 'cheap' } };
    checkAapError(await client.callTool({ name: 'aap_inventory_search', arguments: bad }), 'SCHEMA_VALIDATION_FAILED');
  });

  test('modern wire: _meta envelope and headers on every request, resultType complete, no sessions', async () => {
    connected();
    const posts = wire.filter((e) => e.httpMethod === 'POST');
    assert.ok(posts.length >= 8, `expected the calls above on the wire:\n${describeWire(wire)}`);
    for (const e of posts) {
      assert.equal(e.reqHeaders['mcp-protocol-version'], MODERN_VERSION, `${e.rpcMethod}: MCP-Protocol-Version header`);
      if (e.rpcMethod && !e.rpcMethod.startsWith('notifications/')) {
        const meta = e.rpcParams?._meta ?? {};
        assert.equal(meta['io.modelcontextprotocol/protocolVersion'], MODERN_VERSION, `${e.rpcMethod}: _meta protocolVersion`);
        assert.equal(typeof meta['io.modelcontextprotocol/clientCapabilities'], 'object', `${e.rpcMethod}: _meta clientCapabilities`);
      }
      assert.ok(!('mcp-session-id' in (e.resHeaders ?? {})), `${e.rpcMethod}: modern answer carried Mcp-Session-Id`);
    }
    const bodies = await toolCallBodies();
    assert.ok(bodies.length > 0, 'no JSON tools/call answers recorded');
    for (const b of bodies) {
      assert.equal(b?.result?.resultType, 'complete', `tools/call result lacks resultType "complete": ${JSON.stringify(b).slice(0, 300)}`);
    }
    assert.deepEqual(errors.map((e) => String(e?.message ?? e)), [], 'client/transport reported errors');
  });
});
