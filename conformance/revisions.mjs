// Per-revision conformance: drives the crosstalk MCP server once per protocol
// revision with the official MCP TypeScript client v2
// (@modelcontextprotocol/client, which speaks 2026-07-28 as well as the
// 2025-era revisions), and checks on every tool that structuredContent
// validates against its outputSchema (AJV, independently of the SDK's own
// check) and equals the JSON of the text block, for a success and a failure.
//
// CROSSTALK_BIN names the server binary (default ../crosstalk-mcp).
// CROSSTALK_TRANSPORT=http runs the second agent of every run over Streamable
// HTTP (`crosstalk-mcp serve --http` on the same groups directory) while the
// first stays on stdio, and adds a 2025-11-25 wakeup through a GET stream.
// Output: "ok"/"not ok" lines, then "N passed, M failed" alone on the last line.

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import Ajv2020 from 'ajv/dist/2020.js';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

// TIMEOUT_MS bounds each request and each awaited notification: generous,
// because CI machines are slow and the server polls SQLite for changes.
const TIMEOUT_MS = 15_000;
const REVISIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28'];
const TYPED = new Set(['2025-06-18', '2025-11-25', '2026-07-28']);

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.CROSSTALK_BIN?.trim() || path.resolve(here, '..', 'crosstalk-mcp');
const HTTP = process.env.CROSSTALK_TRANSPORT === 'http';
const httpServers = new Map(); // groups dir -> { proc, url }
let passed = 0;
let failed = 0;

function check(ok, what, detail) {
  if (ok) {
    passed++;
    console.log('ok - ' + what);
  } else {
    failed++;
    const text = detail === undefined ? '' : ': ' + JSON.stringify(detail)?.slice(0, 500);
    console.log('not ok - ' + what + text);
  }
  return ok;
}

// httpURL starts (once per groups directory) `serve --http` on a free
// loopback port and returns its endpoint URL, the first line it prints.
async function httpURL(dir) {
  if (!httpServers.has(dir)) {
    const proc = spawn(bin, ['serve', '--http', '127.0.0.1:0'], {
      env: { ...process.env, CROSSTALK_GROUPS_DIR: dir, CROSSTALK_POLL_INTERVAL_SECONDS: '0.1' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const url = new Promise((resolve, reject) => {
      proc.on('exit', code => reject(new Error('serve --http exited with ' + code)));
      createInterface({ input: proc.stdout }).once('line', resolve);
    });
    httpServers.set(dir, { proc, url });
  }
  return httpServers.get(dir).url;
}

function stopHTTP(dir) {
  httpServers.get(dir)?.proc.kill('SIGTERM');
  httpServers.delete(dir);
}

async function connect(revision, dir, viaHTTP = false) {
  const modern = revision >= '2026-07-28';
  const client = new Client({ name: 'crosstalk-revisions', version: '1.0.0' }, modern
    ? { versionNegotiation: { mode: { pin: revision } } }
    : { supportedProtocolVersions: [revision] });
  const transport = viaHTTP ? new StreamableHTTPClientTransport(new URL(await httpURL(dir))) : new StdioClientTransport({
    command: bin,
    args: [],
    env: { ...process.env, CROSSTALK_GROUPS_DIR: dir, CROSSTALK_POLL_INTERVAL_SECONDS: '0.1' },
    stderr: 'inherit',
  });
  await client.connect(transport, { timeout: TIMEOUT_MS });
  return client;
}

function textJSON(result) {
  const text = (result.content ?? []).find(c => c.type === 'text');
  try {
    return JSON.parse(text?.text);
  } catch {
    return undefined;
  }
}

// Arguments that make each tool succeed (ok) and fail (bad) in a group where
// ctx-a created the group and both ctx-a and ctx-b joined.
function cases(group) {
  const me = { group_id: group, context_id: 'ctx-b', name: 'b' };
  const missing = { group_id: 'grp_00000000000000000000000000000000', context_id: 'ctx-b', name: 'b' };
  return {
    create_group: [{ context_id: 'ctx-c' }, { context_id: '' }],
    list_groups: [{}, { unexpected: 1 }],
    get_group_metadata: [{ group_id: group }, { group_id: missing.group_id }],
    update_group_metadata: [{ group_id: group, context_id: 'ctx-a', name: 'renamed' }, { group_id: group, context_id: 'ctx-b', name: 'x' }],
    get_users: [{ group_id: group }, { group_id: missing.group_id }],
    join_group: [me, missing],
    get_all_messages: [me, missing],
    get_latest_messages: [me, missing],
    get_unread_messages: [me, missing],
    get_messages_after: [{ ...me, after_message_id: 0 }, { ...me, after_message_id: -1 }],
    search_messages: [{ ...me, query: 'hello' }, { ...me, query: '' }],
    send_message: [{ ...me, message: 'hello @a' }, { ...me, message: '' }],
    // This port's 15th tool (a deliberate deviation): timeout 0 answers at once.
    wait_for_messages: [{ ...me, timeout_seconds: 0 }, { ...missing, timeout_seconds: 0 }],
    leave_group: [me, missing],
    delete_group: [{ group_id: group, context_id: 'ctx-a' }, { group_id: group, context_id: 'ctx-b' }],
  };
}

const ORDER = ['create_group', 'list_groups', 'get_group_metadata', 'update_group_metadata', 'get_users', 'join_group',
  'send_message', 'get_all_messages', 'get_latest_messages', 'get_unread_messages', 'get_messages_after',
  'search_messages', 'wait_for_messages', 'leave_group', 'delete_group'];

async function callTool(client, name, args) {
  return client.callTool({ name, arguments: { caller_name: 'revisions', ...args } }, { timeout: TIMEOUT_MS });
}

async function runRevision(revision) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crosstalk-revisions-'));
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  let a;
  let b;
  try {
    a = await connect(revision, dir);
    b = await connect(revision, dir, HTTP);
    check(true, revision + ': two clients connect');
    const tools = (await b.listTools({}, { timeout: TIMEOUT_MS })).tools;
    check(tools.length === 15, revision + ': 15 tools', tools.length);
    const byName = Object.fromEntries(tools.map(t => [t.name, t]));
    for (const t of tools) {
      if (TYPED.has(revision)) {
        check(typeof t.title === 'string' && t.title.length > 0, revision + ': ' + t.name + ' has a title', t.title);
        const an = t.annotations ?? {};
        check(['readOnlyHint', 'destructiveHint', 'idempotentHint'].every(k => typeof an[k] === 'boolean') && an.openWorldHint === false,
          revision + ': ' + t.name + ' has all four annotations, openWorldHint false', an);
        check(t.outputSchema?.type === 'object', revision + ': ' + t.name + ' has an object outputSchema', t.outputSchema);
      } else {
        check(t.title === undefined && t.outputSchema === undefined, revision + ': ' + t.name + ' has no title or outputSchema', t);
      }
    }
    const created = textJSON(await callTool(a, 'create_group', { context_id: 'ctx-a' }));
    const group = created?.group_id;
    if (!check(typeof group === 'string', revision + ': create_group', created)) return;
    await callTool(a, 'join_group', { group_id: group, context_id: 'ctx-a', name: 'a' });
    const all = cases(group);
    for (const name of ORDER) {
      for (const [i, args] of all[name].entries()) {
        const label = revision + ': ' + name + (i === 0 ? ' success' : ' failure');
        let result;
        try {
          result = await callTool(b, name, args);
        } catch (error) {
          check(false, label + ' is a tool result', String(error?.message ?? error));
          continue;
        }
        check(result.isError === (i === 1), label + ' isError ' + (i === 1), result);
        const payload = textJSON(result);
        if (!TYPED.has(revision)) {
          check(result.structuredContent === undefined, label + ' has no structuredContent', result);
          continue;
        }
        check(JSON.stringify(result.structuredContent) === JSON.stringify(payload), label + ' structuredContent equals the text block', result);
        const schema = byName[name].outputSchema;
        const valid = schema ? ajv.validate(schema, result.structuredContent) : false;
        check(valid, label + ' structuredContent validates against outputSchema', ajv.errors);
        if (name === 'join_group' && i === 0) {
          const link = result.content.find(c => c.type === 'resource_link');
          check(link?.uri === payload?.wakeup_resource_uri, label + ' carries a resource_link to the wakeup URI', result.content);
        }
      }
    }
    if (TYPED.has(revision)) {
      const templates = await b.listResourceTemplates({}, { timeout: TIMEOUT_MS });
      const names = (templates.resourceTemplates ?? []).map((t) => t.name).join(',');
      check(names === 'group-messages,context-wakeups,context-receipts', revision + ': three resource templates', templates);
    }
  } catch (error) {
    check(false, revision + ': run completes', String(error?.stack ?? error));
  } finally {
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    stopHTTP(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// listenWakeup checks the 2026-07-28 wakeup path: a listen on a joined
// member's wakeup URI is acknowledged and then receives the update.
async function listenWakeup() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crosstalk-revisions-'));
  let a;
  let b;
  try {
    a = await connect('2026-07-28', dir);
    b = await connect('2026-07-28', dir, HTTP);
    const group = textJSON(await callTool(a, 'create_group', { context_id: 'ctx-a' })).group_id;
    await callTool(a, 'join_group', { group_id: group, context_id: 'ctx-a', name: 'a' });
    const uri = textJSON(await callTool(b, 'join_group', { group_id: group, context_id: 'ctx-b', name: 'b' })).wakeup_resource_uri;
    const updates = [];
    let wake;
    const woken = new Promise(resolve => { wake = resolve; });
    b.setNotificationHandler('notifications/resources/updated', n => { updates.push(n); wake(); });
    const sub = await b.listen({ resourceSubscriptions: [uri] }, { timeout: TIMEOUT_MS });
    check(JSON.stringify(sub.honoredFilter?.resourceSubscriptions) === JSON.stringify([uri]), '2026-07-28: listen acknowledged for the wakeup URI', sub.honoredFilter);
    await callTool(a, 'send_message', { group_id: group, context_id: 'ctx-a', name: 'a', message: 'hi @b' });
    const timer = new Promise(resolve => setTimeout(resolve, TIMEOUT_MS, 'timeout'));
    const outcome = await Promise.race([woken, timer]);
    check(outcome !== 'timeout' && updates[0]?.params?.uri === uri, '2026-07-28: wakeup arrives on the listen stream', updates);
    await sub.close();
  } catch (error) {
    check(false, '2026-07-28: listen run completes', String(error?.stack ?? error));
  } finally {
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    stopHTTP(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (!fs.existsSync(bin)) {
  console.error('revisions: server binary ' + bin + ' not found; build it (make build) or set CROSSTALK_BIN');
  process.exit(2);
}
// subscribeWakeup checks the 2025-era wakeup path across transports: b, on
// HTTP, subscribes to its wakeup URI and receives the update a's message
// (over stdio) causes, on the session's GET stream.
async function subscribeWakeup(revision) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crosstalk-revisions-'));
  let a;
  let b;
  try {
    a = await connect(revision, dir);
    b = await connect(revision, dir, true);
    const group = textJSON(await callTool(a, 'create_group', { context_id: 'ctx-a' })).group_id;
    await callTool(a, 'join_group', { group_id: group, context_id: 'ctx-a', name: 'a' });
    const uri = textJSON(await callTool(b, 'join_group', { group_id: group, context_id: 'ctx-b', name: 'b' })).wakeup_resource_uri;
    let wake;
    const woken = new Promise(resolve => { wake = resolve; });
    b.setNotificationHandler('notifications/resources/updated', n => { if (n.params?.uri === uri) wake(n); });
    await b.subscribeResource({ uri }, { timeout: TIMEOUT_MS });
    await callTool(a, 'send_message', { group_id: group, context_id: 'ctx-a', name: 'a', message: 'hi @b' });
    const timer = new Promise(resolve => setTimeout(resolve, TIMEOUT_MS, 'timeout'));
    check(await Promise.race([woken, timer]) !== 'timeout', revision + ' over HTTP: wakeup from a stdio agent arrives on the GET stream');
    const unread = textJSON(await callTool(b, 'get_unread_messages', { group_id: group, context_id: 'ctx-b', name: 'b' }));
    check(unread?.messages?.length === 1 && unread.messages[0].message === 'hi @b', revision + ' over HTTP: reads the stdio agent\'s message', unread);
  } catch (error) {
    check(false, revision + ' over HTTP: subscribe run completes', String(error?.stack ?? error));
  } finally {
    await a?.close().catch(() => {});
    await b?.close().catch(() => {});
    stopHTTP(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (HTTP) console.log('revisions: second agent over Streamable HTTP (serve --http), first over stdio');
for (const revision of REVISIONS) await runRevision(revision);
await listenWakeup();
if (HTTP) await subscribeWakeup('2025-11-25');
console.log(passed + ' passed, ' + failed + ' failed');
process.exit(failed === 0 ? 0 : 1);
