// Shared helpers for the Node SDK end-to-end suites (legacy-client.test.mjs with
// @modelcontextprotocol/sdk 1.32.2 and modern-client.test.mjs with @modelcontextprotocol/client 2.4.0).
// Not a test file itself: `node --test` only picks up *.test.mjs.

import assert from 'node:assert/strict';

export const URL_ENV = process.env.AAP_GATEWAY_URL;
export const LEGACY_VERSION = '2025-11-25';
export const MODERN_VERSION = '2026-07-28';
export const EXPECTED_TOOLS = [
  'aap_dealer_information',
  'aap_inventory_facets',
  'aap_inventory_search',
  'aap_inventory_vehicle',
  'aap_lead_submit',
];
export const READ_TOOLS = new Set(EXPECTED_TOOLS.filter((n) => n !== 'aap_lead_submit'));
export const SEARCH_ARGS = {
  type: 'inventory.search.request',
  filters: { make: ['Toyota'], status: ['available'] },
  pagination: { limit: 5 },
  sort: { field: 'price', order: 'asc' },
};

/** Wrap fetch so the tests can see what went over the wire. */
export function recordingFetch(log) {
  return async (url, init = {}) => {
    let rpcMethod = null;
    let rpcParams = null;
    if (typeof init.body === 'string') {
      try {
        const msg = JSON.parse(init.body);
        rpcMethod = msg.method ?? null;
        rpcParams = msg.params ?? null;
      } catch {
        /* not JSON */
      }
    }
    const reqHeaders = Object.fromEntries(new Headers(init.headers ?? {}).entries());
    const entry = { httpMethod: init.method ?? 'GET', rpcMethod, rpcParams, reqHeaders, status: null, resHeaders: null };
    log.push(entry);
    const res = await fetch(url, init);
    entry.status = res.status;
    entry.resHeaders = Object.fromEntries(res.headers.entries());
    // Keep JSON response bodies so tests can check wire-only fields the SDK strips (resultType).
    if (String(entry.resHeaders['content-type'] ?? '').startsWith('application/json')) {
      entry.resBody = res
        .clone()
        .text()
        .then((t) => JSON.parse(t))
        .catch(() => null);
    }
    return res;
  };
}

export function describeWire(log) {
  return log
    .map((e) => `${e.httpMethod} ${String(e.rpcMethod).padEnd(28)} -> ${e.status} ${e.resHeaders?.['content-type'] ?? ''}`)
    .join('\n');
}

export function textJson(result) {
  const text = (result.content ?? []).find((c) => c.type === 'text');
  assert.ok(text, `tool result has no text content block: ${JSON.stringify(result.content)}`);
  try {
    return JSON.parse(text.text);
  } catch (e) {
    assert.fail(`text content block is not JSON: ${text.text.slice(0, 300)}`);
  }
}

export function checkSuccess(result, responseType) {
  const sc = result.structuredContent;
  assert.equal(result.isError ?? false, false, `expected isError false, got: ${JSON.stringify(sc)}`);
  assert.equal(typeof sc, 'object', 'structuredContent is not an object');
  assert.equal(sc.type, responseType, `structuredContent.type = ${sc.type}`);
  assert.deepEqual(textJson(result), sc, 'text content JSON differs from structuredContent');
  return sc;
}

export function checkAapError(result, code) {
  const sc = result.structuredContent;
  assert.equal(result.isError, true, `expected isError true, got: ${JSON.stringify(sc)}`);
  assert.equal(typeof sc, 'object', 'structuredContent is not an object');
  assert.equal(sc.type, 'aap.error');
  assert.equal(sc.code, code, `aap.error code = ${sc.code}`);
  assert.deepEqual(textJson(result), sc, 'text content JSON differs from structuredContent');
  return sc;
}

export function checkSearch(sc) {
  const vehicles = sc.data?.vehicles;
  assert.ok(Array.isArray(vehicles) && vehicles.length > 0, `data.vehicles empty or missing: ${JSON.stringify(sc.data)}`);
  assert.ok(vehicles.length <= 5, `limit 5 requested, got ${vehicles.length}`);
  for (const v of vehicles) assert.equal(v.make, 'Toyota', `non-Toyota vehicle returned: ${v.make} ${v.vin}`);
  const prices = vehicles.map((v) => v.price);
  const isNum = (p) => typeof p === 'number';
  const priced = prices.filter(isNum);
  assert.ok(priced.length > 0, `no vehicle has a numeric price: ${JSON.stringify(prices)}`);
  assert.deepEqual(priced, [...priced].sort((a, b) => a - b), `not sorted by price asc: ${JSON.stringify(prices)}`);
  const firstUnpriced = prices.findIndex((p) => !isNum(p));
  if (firstUnpriced >= 0) assert.ok(prices.slice(firstUnpriced).every((p) => !isNum(p)), `price order: ${prices}`);
  return vehicles;
}

export function vehicleRef(v) {
  if (v.vin) return { vin: v.vin };
  assert.ok(v.stock, `vehicle has neither vin nor stock: ${JSON.stringify(v)}`);
  return { stock: v.stock };
}

export function rfc3339Z(date) {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function leadArgs(vehicle, key) {
  return {
    type: 'lead.submit.request',
    customer: {
      first_name: 'Test',
      last_name: 'Buyer',
      email: 'test.buyer@example.com',
      preferred_contact: 'email',
    },
    consent: {
      granted_at: rfc3339Z(new Date(Date.now() - 60_000)),
      allowed_channels: ['email'],
      consent_text: 'I agree that Demo Toyota may contact me by email about this vehicle.',
      scope: ['lead_submission'],
    },
    vehicle_of_interest: vehicleRef(vehicle),
    source_agent: { name: 'sdk-e2e' },
    idempotency_key: key,
  };
}
