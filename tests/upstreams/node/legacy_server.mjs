// Legacy MCP upstream peer for aap-gateway tests, built on npm @modelcontextprotocol/sdk@1.32.2.
//
// Started through ../legacy_mcp_server.mjs (module resolution needs this file to sit next to
// node_modules). Streamable HTTP at /mcp, handshake era only (the SDK's LATEST_PROTOCOL_VERSION
// is 2025-11-25; it has no 2026-07-28 support): initialize -> Mcp-Session-Id ->
// notifications/initialized -> tools/list, tools/call with that session. One McpServer and one
// StreamableHTTPServerTransport per session (the SDK's stateful pattern).
//
// McpServer.registerTool() only accepts Zod schemas in 1.32.2 (getZodSchemaObject() throws
// "inputSchema must be a Zod schema or raw shape"), so the canonical AAP JSON Schemas are served
// by registering tools/list and tools/call on the McpServer's underlying low-level Server
// (mcpServer.server.setRequestHandler), which is the SDK's own route for raw JSON Schema tools.

import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  isInitializeRequest,
  LATEST_PROTOCOL_VERSION,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { Dealer, SKILL_BY_TOOL, isError } from './aap_dealer.mjs';

const MCP_PATH = '/mcp';
const MAX_BODY = 4 * 1024 * 1024;

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
    leads: { type: 'string' },
    'json-response': { type: 'boolean', default: false },
    'data-dir': { type: 'string' },
    'schemas-dir': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help || !args.port || !args.leads) {
  console.error('usage: node legacy_mcp_server.mjs --port N --leads FILE [--host H] [--json-response] [--data-dir D] [--schemas-dir D]');
  process.exit(args.help ? 0 : 2);
}

const dealer = new Dealer({ leads: args.leads, dataDir: args['data-dir'], schemasDir: args['schemas-dir'], peer: 'legacy-mcp' });
const tools = dealer.toolCatalog();
const token = process.env.AAP_MCP_TOKEN || null;

function newSessionServer() {
  const mcp = new McpServer(
    { name: 'aap-upstream-legacy-mcp', title: 'AAP legacy MCP upstream (test peer)', version: '1.0.0' },
    { instructions: 'Demo Toyota AAP 3.0 tools (test peer for aap-gateway).' },
  );
  // Not via the constructor's `capabilities.tools`: that makes McpServer install its own Zod-based
  // tool handlers (and advertise listChanged: true) before ours replace them.
  mcp.server.registerCapabilities({ tools: { listChanged: false } });
  mcp.server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  mcp.server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const { name, arguments: toolArgs } = request.params;
    const skill = SKILL_BY_TOOL[name];
    if (!skill) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    const payload = dealer.execute(skill.id, toolArgs ?? {});
    return {
      content: [{ type: 'text', text: JSON.stringify(payload) }],
      structuredContent: payload,
      isError: isError(payload),
    };
  });
  return mcp;
}

/** sessionId -> { transport, mcp } */
const sessions = new Map();

function sendJson(res, status, body, headers = {}) {
  const raw = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(raw), ...headers });
  res.end(raw);
}

const rpcError = (id, code, message) => ({ jsonrpc: '2.0', id: id ?? null, error: { code, message } });

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(Object.assign(new Error('too large'), { status: 413 }));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

async function handle(req, res) {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname !== MCP_PATH) {
    sendJson(res, 404, { error: 'not found' });
    return;
  }
  if (token && req.headers.authorization !== `Bearer ${token}`) {
    sendJson(res, 401, rpcError(null, -32001, 'Unauthorized: a valid Bearer token is required'), {
      'www-authenticate': 'Bearer realm="aap-upstream", error="invalid_token"',
    });
    return;
  }
  const sessionId = req.headers['mcp-session-id'];
  let body;
  if (req.method === 'POST') {
    let text;
    try {
      text = await readBody(req);
    } catch (e) {
      sendJson(res, e.status ?? 400, rpcError(null, -32000, 'Bad Request: could not read body'));
      return;
    }
    try {
      body = JSON.parse(text);
    } catch {
      sendJson(res, 400, rpcError(null, -32700, 'Parse error'));
      return;
    }
  }

  if (typeof sessionId === 'string') {
    const entry = sessions.get(sessionId);
    if (!entry) {
      // Spec (2025-11-25): a terminated or unknown session answers 404; the client re-initializes.
      sendJson(res, 404, rpcError(body?.id, -32001, 'Session not found'));
      return;
    }
    await entry.transport.handleRequest(req, res, body);
    return;
  }

  if (req.method === 'POST' && isInitializeRequest(body)) {
    const mcp = newSessionServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: args['json-response'],
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, mcp });
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
    return;
  }

  // No session and not an initialize request: let a fresh, uninitialized SDK transport give its
  // own answer (e.g. 400 -32000 "Bad Request: Server not initialized" to a 2026-07-28 probe, 406,
  // 415, or 405 for GET/DELETE without a session), exactly as a plain SDK deployment would.
  const mcp = newSessionServer();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: args['json-response'],
  });
  await mcp.connect(transport);
  try {
    await transport.handleRequest(req, res, body);
  } finally {
    await mcp.close();
  }
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((e) => {
    console.error('legacy-mcp: request failed', e);
    if (!res.headersSent) sendJson(res, 500, rpcError(null, -32603, 'Internal error'));
    else res.end();
  });
});

server.listen(Number(args.port), args.host, () => {
  console.log(
    `legacy-mcp: listening on http://${args.host}:${args.port}${MCP_PATH} (@modelcontextprotocol/sdk 1.32.2; ` +
      `MCP ${LATEST_PROTOCOL_VERSION} stateful sessions; ${args['json-response'] ? 'JSON' : 'SSE'} responses; leads -> ${args.leads}` +
      `${token ? '; bearer token required' : ''})`,
  );
});

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    for (const { mcp } of sessions.values()) await mcp.close().catch(() => {});
    server.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 1000).unref();
  });
}
