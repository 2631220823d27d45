#!/usr/bin/env node
// Fixture MCP server for the official conformance suite (npm @modelcontextprotocol/conformance,
// server scenarios), built on the official TypeScript SDK (npm @modelcontextprotocol/sdk 1.32.2,
// low-level `Server` + `StreamableHTTPServerTransport`, MCP 2025-11-25, stateful sessions).
//
//   node tests/conformance/everything_server.mjs --port N [--host 127.0.0.1]
//
// Endpoint: http://HOST:N/mcp (POST, GET for the standalone SSE stream, DELETE ends a session).
// It exposes the fixture tools, resources and prompts that the suite's server scenarios call
// (test_simple_text, test_image_content, test://static-text, test_simple_prompt, ...), sends log
// and progress notifications on the request's SSE stream, asks the client for sampling and
// elicitation, supports resumable SSE (an in-memory event store and a `retry` hint) and
// rejects requests whose Host or Origin is not a loopback name (DNS rebinding protection).
// Everything here is fixture behaviour for the conformance scenarios; it has nothing to do
// with AAP. It stands behind the gateway's `relay` backend in tests/conformance/run.sh.

import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

// ---- command line ---------------------------------------------------------------------------
function argValue(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const PORT = Number(argValue('--port', '0'));
const HOST = argValue('--host', '127.0.0.1');

// ---- fixture payloads -----------------------------------------------------------------------
// A 1x1 PNG (one opaque red pixel), assembled here so the bytes are visible.
const PNG_1PX = Buffer.from(
  '89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de' +
    '0000000c4944415408d763f8cfc0000003010100c9fe92ef0000000049454e44ae426082',
  'hex',
).toString('base64');

// A 44-byte RIFF/WAVE header plus 8 silent 8-bit mono samples at 8 kHz.
function tinyWav() {
  const samples = Buffer.alloc(8, 0x80);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0, 'ascii');
  h.writeUInt32LE(36 + samples.length, 4);
  h.write('WAVE', 8, 'ascii');
  h.write('fmt ', 12, 'ascii');
  h.writeUInt32LE(16, 16); // PCM chunk size
  h.writeUInt16LE(1, 20); // format: PCM
  h.writeUInt16LE(1, 22); // channels
  h.writeUInt32LE(8000, 24); // sample rate
  h.writeUInt32LE(8000, 28); // byte rate
  h.writeUInt16LE(1, 32); // block align
  h.writeUInt16LE(8, 34); // bits per sample
  h.write('data', 36, 'ascii');
  h.writeUInt32LE(samples.length, 40);
  return Buffer.concat([h, samples]).toString('base64');
}
const WAV_SILENCE = tinyWav();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ type: 'text', text: t });
const noArgs = { type: 'object', properties: {} };

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns one fixed text block', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns one PNG image block', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns one WAV audio block', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns one embedded text resource', inputSchema: noArgs },
  { name: 'test_multiple_content_types', description: 'Returns text, image and resource blocks', inputSchema: noArgs },
  { name: 'test_tool_with_logging', description: 'Emits three info log notifications while running', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress 0, 50 and 100 of 100', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails with isError true', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client to sample an LLM completion for a prompt',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user (via the client) for a username and an email',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicitation whose fields all carry defaults', inputSchema: noArgs },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicitation with every enum schema form', inputSchema: noArgs },
  { name: 'test_reconnection', description: 'Closes its SSE stream mid-call; the answer arrives on resume', inputSchema: noArgs },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Input schema that uses JSON Schema 2020-12 keywords',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
];

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'A fixed text resource', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A fixed PNG resource', mimeType: 'image/png' },
  { uri: 'test://watched-resource', name: 'watched-resource', description: 'A resource clients may subscribe to', mimeType: 'text/plain' },
];
const TEMPLATE_RE = /^test:\/\/template\/([^/]+)\/data$/;

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt that quotes its two arguments',
    arguments: [
      { name: 'arg1', description: 'First argument', required: true },
      { name: 'arg2', description: 'Second argument', required: true },
    ],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt that embeds the resource it is given',
    arguments: [{ name: 'resourceUri', description: 'URI to embed', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt carrying an image' },
];

// ---- one MCP server per session -------------------------------------------------------------
function buildServer() {
  const server = new Server(
    { name: 'aap-conformance-fixture', version: '1.0.0' },
    {
      capabilities: {
        tools: { listChanged: false },
        resources: { subscribe: true, listChanged: false },
        prompts: { listChanged: false },
        logging: {},
        completions: {},
      },
    },
  );
  const subscriptions = new Set();

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args = {} } = request.params;
    switch (name) {
      case 'test_simple_text':
        return { content: [text('This is a simple text response for testing.')] };
      case 'test_image_content':
        return { content: [{ type: 'image', data: PNG_1PX, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: WAV_SILENCE, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return {
          content: [
            {
              type: 'resource',
              resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
            },
          ],
        };
      case 'test_multiple_content_types':
        return {
          content: [
            text('Multiple content types test:'),
            { type: 'image', data: PNG_1PX, mimeType: 'image/png' },
            {
              type: 'resource',
              resource: {
                uri: 'test://mixed-content-resource',
                mimeType: 'application/json',
                text: JSON.stringify({ test: 'data', value: 123 }),
              },
            },
          ],
        };
      case 'test_tool_with_logging': {
        const steps = ['Tool execution started', 'Tool processing data', 'Tool execution completed'];
        for (let i = 0; i < steps.length; i++) {
          if (i > 0) await sleep(50);
          await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', logger: 'fixture', data: steps[i] } });
        }
        return { content: [text('Logging tool finished after 3 log messages.')] };
      }
      case 'test_tool_with_progress': {
        const token = request.params._meta?.progressToken;
        for (const [i, progress] of [0, 50, 100].entries()) {
          if (i > 0) await sleep(50);
          if (token !== undefined) {
            await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
          }
        }
        return { content: [text('Progress tool finished at 100/100.')] };
      }
      case 'test_error_handling':
        return { isError: true, content: [text('This tool intentionally returns an error for testing')] };
      case 'test_sampling': {
        const sampled = await extra.sendRequest(
          {
            method: 'sampling/createMessage',
            params: { messages: [{ role: 'user', content: text(String(args.prompt ?? '')) }], maxTokens: 100 },
          },
          CreateMessageResultSchema,
        );
        const reply = sampled.content?.type === 'text' ? sampled.content.text : JSON.stringify(sampled.content);
        return { content: [text(`LLM response: ${reply}`)] };
      }
      case 'test_elicitation': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: String(args.message ?? ''),
              requestedSchema: {
                type: 'object',
                properties: {
                  username: { type: 'string', description: "User's response" },
                  email: { type: 'string', description: "User's email address" },
                },
                required: ['username', 'email'],
              },
            },
          },
          ElicitResultSchema,
        );
        return { content: [text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
      }
      case 'test_elicitation_sep1034_defaults': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: 'Confirm these details (every field has a default)',
              requestedSchema: {
                type: 'object',
                properties: {
                  name: { type: 'string', description: 'Name', default: 'John Doe' },
                  age: { type: 'integer', description: 'Age', default: 30 },
                  score: { type: 'number', description: 'Score', default: 95.5 },
                  status: { type: 'string', description: 'Status', enum: ['active', 'inactive', 'pending'], default: 'active' },
                  verified: { type: 'boolean', description: 'Verified', default: true },
                },
              },
            },
          },
          ElicitResultSchema,
        );
        return { content: [text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
      }
      case 'test_elicitation_sep1330_enums': {
        const answer = await extra.sendRequest(
          {
            method: 'elicitation/create',
            params: {
              message: 'Pick options (every enum schema form)',
              requestedSchema: {
                type: 'object',
                properties: {
                  untitledSingle: { type: 'string', description: 'Untitled single-select', enum: ['option1', 'option2', 'option3'] },
                  titledSingle: {
                    type: 'string',
                    description: 'Titled single-select',
                    oneOf: [
                      { const: 'value1', title: 'First Option' },
                      { const: 'value2', title: 'Second Option' },
                      { const: 'value3', title: 'Third Option' },
                    ],
                  },
                  legacyEnum: {
                    type: 'string',
                    description: 'Legacy titled enum',
                    enum: ['opt1', 'opt2', 'opt3'],
                    enumNames: ['Option One', 'Option Two', 'Option Three'],
                  },
                  untitledMulti: {
                    type: 'array',
                    description: 'Untitled multi-select',
                    items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
                  },
                  titledMulti: {
                    type: 'array',
                    description: 'Titled multi-select',
                    items: {
                      anyOf: [
                        { const: 'value1', title: 'First Choice' },
                        { const: 'value2', title: 'Second Choice' },
                        { const: 'value3', title: 'Third Choice' },
                      ],
                    },
                  },
                },
              },
            },
          },
          ElicitResultSchema,
        );
        return { content: [text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`)] };
      }
      case 'test_reconnection': {
        // Let the priming event go out, drop the POST stream, answer after the client resumed.
        await sleep(100);
        if (typeof extra.closeSSEStream === 'function') extra.closeSSEStream();
        await sleep(300);
        return { content: [text('Reconnection test completed successfully')] };
      }
      case 'json_schema_2020_12_tool':
        return { content: [text(`Received: ${JSON.stringify(args)}`)] };
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: RESOURCES }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      { uriTemplate: 'test://template/{id}/data', name: 'template-data', description: 'Data for one id', mimeType: 'application/json' },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    const { uri } = request.params;
    if (uri === 'test://static-text') {
      return { contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] };
    }
    if (uri === 'test://static-binary') return { contents: [{ uri, mimeType: 'image/png', blob: PNG_1PX }] };
    if (uri === 'test://watched-resource') return { contents: [{ uri, mimeType: 'text/plain', text: 'Watched resource, version 1.' }] };
    const m = TEMPLATE_RE.exec(uri);
    if (m) {
      const id = decodeURIComponent(m[1]);
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (request) => {
    const { name, arguments: a = {} } = request.params;
    switch (name) {
      case 'test_simple_prompt':
        return { messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] };
      case 'test_prompt_with_arguments':
        return { messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'`) }] };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            {
              role: 'user',
              content: { type: 'resource', resource: { uri: a.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } },
            },
            { role: 'user', content: text('Please process the embedded resource above.') },
          ],
        };
      case 'test_prompt_with_image':
        return {
          messages: [
            { role: 'user', content: { type: 'image', data: PNG_1PX, mimeType: 'image/png' } },
            { role: 'user', content: text('Please analyze the image above.') },
          ],
        };
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${name}`);
    }
  });

  server.setRequestHandler(CompleteRequestSchema, async (request) => {
    const prefix = String(request.params.argument?.value ?? '');
    const words = ['paris', 'park', 'party', 'pasta', 'hello', 'world'];
    const values = words.filter((w) => w.startsWith(prefix));
    return { completion: { values, total: values.length, hasMore: false } };
  });

  return server;
}

// ---- resumability: a small in-memory event store --------------------------------------------
class MemoryEventStore {
  constructor() {
    this.events = []; // [{ id, streamId, message }]
    this.seq = 0;
  }
  async storeEvent(streamId, message) {
    const id = `${streamId}::${++this.seq}`;
    this.events.push({ id, streamId, message });
    if (this.events.length > 1000) this.events.shift();
    return id;
  }
  async getStreamIdForEventId(eventId) {
    const i = eventId.lastIndexOf('::');
    return i > 0 ? eventId.slice(0, i) : undefined;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const streamId = await this.getStreamIdForEventId(lastEventId);
    if (!streamId) return '';
    const start = this.events.findIndex((e) => e.id === lastEventId);
    for (const e of this.events.slice(start + 1)) {
      if (e.streamId === streamId) await send(e.id, e.message);
    }
    return streamId;
  }
}

// ---- HTTP front: DNS rebinding guard + session routing --------------------------------------
const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]', '::1']);
function hostnameOf(value) {
  if (!value) return null;
  try {
    return new URL(value.includes('://') ? value : `http://${value}`).hostname;
  } catch {
    return '';
  }
}

function jsonError(res, status, code, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code, message } }));
}

async function readJson(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString('utf8');
  return raw ? JSON.parse(raw) : undefined;
}

const sessions = new Map(); // session id -> transport

const http = createServer(async (req, res) => {
  const url = new URL(req.url ?? '/', 'http://fixture');
  if (url.pathname !== '/mcp') return jsonError(res, 404, -32601, 'Not found');

  const host = hostnameOf(req.headers.host);
  const origin = req.headers.origin;
  if (host === null || !LOOPBACK.has(host) || (origin !== undefined && !LOOPBACK.has(hostnameOf(origin)))) {
    return jsonError(res, 403, -32000, 'Forbidden: Host/Origin is not a loopback name');
  }

  try {
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'POST') {
      let body;
      try {
        body = await readJson(req);
      } catch {
        return jsonError(res, 400, -32700, 'Parse error');
      }
      if (typeof sid === 'string') {
        const t = sessions.get(sid);
        if (!t) return jsonError(res, 404, -32001, 'Session not found');
        return await t.handleRequest(req, res, body);
      }
      if (body?.method !== 'initialize') return jsonError(res, 400, -32000, 'Bad Request: no session; send initialize first');
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new MemoryEventStore(),
        retryInterval: 500,
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) sessions.delete(transport.sessionId);
      };
      await buildServer().connect(transport);
      return await transport.handleRequest(req, res, body);
    }
    if (req.method === 'GET' || req.method === 'DELETE') {
      const t = typeof sid === 'string' ? sessions.get(sid) : undefined;
      if (!t) return jsonError(res, typeof sid === 'string' ? 404 : 400, -32000, 'Missing or unknown Mcp-Session-Id');
      return await t.handleRequest(req, res);
    }
    res.writeHead(405, { Allow: 'GET, POST, DELETE' }).end();
  } catch (e) {
    process.stderr.write(`fixture: request failed: ${e?.stack ?? e}\n`);
    if (!res.headersSent) jsonError(res, 500, -32603, 'Internal error');
  }
});

http.listen(PORT, HOST, () => {
  const { port } = http.address();
  process.stderr.write(`fixture listening on http://${HOST}:${port}/mcp\n`);
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    for (const t of sessions.values()) t.close().catch(() => {});
    http.close(() => process.exit(0));
    setTimeout(() => process.exit(0), 500).unref();
  });
}
