// Conformance check: drives a crosstalk MCP server with the official MCP
// TypeScript SDK client, the way real MCP hosts talk to it.
//
// Two Client instances each spawn their own server process over stdio on one
// shared, fresh CROSSTALK_GROUPS_DIR, so every cross-session expectation below
// also exercises cross-process change detection through SQLite.
//
// CROSSTALK_BIN names the server command (default: ../crosstalk-mcp relative
// to this folder). It may be a command line split on whitespace, for example
// CROSSTALK_BIN="python3 /path/to/src/main.py" to check the Python original.
// CROSSTALK_BIN_B, when set, is the command for the second session only: run
// one Go and one Python server on the same groups directory to check that
// they share it. CROSSTALK_EXPECT_VERSION, when set, must equal
// serverInfo.version of the first session.
//
// Output: one "ok"/"not ok" line per check, then "N passed, M failed" alone on
// the last line. The exit status is 0 only when nothing failed.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { McpError, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// TIMEOUT_MS bounds every request and every awaited notification. It is
// generous because CI machines are slow and the server polls subscriptions.
const TIMEOUT_MS = 10_000;
// RUN_TIMEOUT_MS stops a hung run as a whole so CI never waits forever.
const RUN_TIMEOUT_MS = 180_000;

const here = path.dirname(fileURLToPath(import.meta.url));

const EXPECTED_REQUIRED = {
  create_group: ['context_id', 'caller_name'],
  list_groups: ['caller_name'],
  get_group_metadata: ['group_id', 'caller_name'],
  update_group_metadata: ['group_id', 'context_id', 'caller_name'],
  get_users: ['group_id', 'caller_name'],
  delete_group: ['group_id', 'context_id', 'caller_name'],
  join_group: ['group_id', 'context_id', 'name', 'caller_name'],
  leave_group: ['group_id', 'context_id', 'name', 'caller_name'],
  get_all_messages: ['group_id', 'context_id', 'name', 'caller_name'],
  get_latest_messages: ['group_id', 'context_id', 'name', 'caller_name'],
  get_unread_messages: ['group_id', 'context_id', 'name', 'caller_name'],
  get_messages_after: ['group_id', 'context_id', 'name', 'after_message_id', 'caller_name'],
  search_messages: ['group_id', 'context_id', 'name', 'query', 'caller_name'],
  send_message: ['group_id', 'context_id', 'name', 'message', 'caller_name'],
  wait_for_messages: ['group_id', 'context_id', 'name', 'caller_name'],
};

// The original's timestamp format: UTC, six fractional digits or none.
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?\+00:00$/;
const GROUP_ID = /^grp_[0-9a-f]{32}$/;

// Contexts. Beta's id needs percent-encoding (space, slash, colon) in its
// wakeup URI, which checks that the server encodes like the original.
const ALPHA = { context_id: 'alpha-ctx', name: 'alpha' };
const BETA = { context_id: 'beta:ctx/2 b', name: 'beta' };
const GAMMA = { context_id: 'gamma-ctx', name: 'gamma' };

let passed = 0;
let failed = 0;

class Abort extends Error {}

function show(value) {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text === undefined ? String(value) : text.length > 600 ? text.slice(0, 600) + '…' : text;
}

// check records one assertion and keeps going; need aborts the run, for
// results that later steps depend on.
function check(ok, description, detail) {
  if (ok) {
    passed++;
    console.log('ok - ' + description);
  } else {
    failed++;
    console.log('not ok - ' + description + (detail === undefined ? '' : ': ' + show(detail)));
  }
  return ok;
}

function need(ok, description, detail) {
  if (!check(ok, description, detail)) throw new Abort(description);
}

function equal(got, want, description) {
  const ok = JSON.stringify(got) === JSON.stringify(want);
  return check(ok, description, ok ? undefined : 'got ' + show(got) + '; want ' + show(want));
}

function sameSet(got, want, description) {
  const g = [...(got ?? [])].sort();
  const w = [...want].sort();
  return equal(g, w, description);
}

function info(text) {
  console.log('# ' + text);
}

// pyQuote percent-encodes like Python's urllib.parse.quote(s, safe=''):
// only ASCII letters, digits and "_.-~" stay literal.
function pyQuote(text) {
  return encodeURIComponent(text).replace(/[!'()*]/g, c => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

function serverCommand(label = 'A') {
  const raw = (label === 'B' && process.env.CROSSTALK_BIN_B?.trim()) || process.env.CROSSTALK_BIN?.trim();
  if (!raw) {
    const bin = path.resolve(here, '..', process.platform === 'win32' ? 'crosstalk-mcp.exe' : 'crosstalk-mcp');
    if (!fs.existsSync(bin)) {
      console.error('conformance: server binary ' + bin + ' not found; build it (make build) or set CROSSTALK_BIN');
      process.exit(2);
    }
    return { command: bin, args: [] };
  }
  const [command, ...args] = raw.split(/\s+/);
  return { command, args };
}

// Session is one MCP client connected to its own server process.
class Session {
  constructor(label, groupsDir) {
    this.label = label;
    this.groupsDir = groupsDir;
    this.notifications = [];
    this.waiters = [];
    this.errors = [];
    this.stderr = '';
    this.received = [];
  }

  async connect() {
    const { command, args } = serverCommand(this.label);
    this.transport = new StdioClientTransport({
      command,
      args,
      env: { CROSSTALK_GROUPS_DIR: this.groupsDir, CROSSTALK_POLL_INTERVAL_SECONDS: '0.1' },
      stderr: 'pipe',
    });
    this.transport.stderr?.on('data', chunk => { this.stderr += chunk.toString(); });
    // Record every message that passed the SDK's envelope validation, to
    // read the raw initialize result and to explain timeouts.
    let handler;
    Object.defineProperty(this.transport, 'onmessage', {
      configurable: true,
      get: () => handler && (message => { this.received.push(message); handler(message); }),
      set: h => { handler = h; },
    });
    this.client = new Client({ name: 'crosstalk-conformance-' + this.label, version: '1.0.0' });
    this.client.onerror = error => this.errors.push(String(error?.message ?? error));
    // The SDK's own schema for notifications/resources/updated strips the
    // server's extra params (priority, relevance), so read raw notifications
    // through the fallback handler and validate them against the schema here.
    this.client.fallbackNotificationHandler = async notification => {
      const parsed = ResourceUpdatedNotificationSchema.safeParse(notification);
      const record = { ...notification, valid: notification.method !== 'notifications/resources/updated' || parsed.success };
      this.notifications.push(record);
      for (const waiter of [...this.waiters]) waiter();
    };
    // The process handle is private to the SDK and dropped when it exits;
    // keep it from the moment of spawning to check and report the exit status.
    const start = this.transport.start.bind(this.transport);
    this.transport.start = () => {
      const started = start();
      this.process = this.transport._process;
      return started;
    };
    await this.client.connect(this.transport, { timeout: TIMEOUT_MS });
    this.connected = true;
  }

  // mark returns a position; waitFor only considers notifications after it.
  mark() {
    return this.notifications.length;
  }

  // waitFor resolves with the first notification after `from` matching
  // `match`, or rejects after TIMEOUT_MS.
  waitFor(from, match, description) {
    return new Promise((resolve, reject) => {
      const look = () => {
        const found = this.notifications.slice(from).find(match);
        if (!found) return false;
        this.waiters = this.waiters.filter(w => w !== look);
        clearTimeout(timer);
        resolve(found);
        return true;
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter(w => w !== look);
        reject(new Error(this.label + ': no ' + description + ' within ' + TIMEOUT_MS + ' ms; got ' +
          show(this.notifications.slice(from).map(n => n.params))));
      }, TIMEOUT_MS);
      if (!look()) this.waiters.push(look);
    });
  }

  async expectUpdate(from, uri, relevance, description) {
    try {
      const n = await this.waitFor(from, n => n.method === 'notifications/resources/updated' && n.params?.uri === uri &&
        n.params?.relevance === relevance, description);
      check(true, this.label + ' receives ' + description);
      check(n.valid, this.label + ' ' + description + ' passes the SDK notification schema', n);
      return n.params;
    } catch (error) {
      check(false, this.label + ' receives ' + description, error.message);
      return undefined;
    }
  }

  // call invokes a tool and returns {result, payload}: the SDK-validated
  // result and the JSON decoded from its single text content.
  async call(tool, args) {
    const result = await this.client.callTool({ name: tool, arguments: { caller_name: 'conformance-' + this.label, ...args } },
      undefined, { timeout: TIMEOUT_MS });
    let payload;
    const content = result.content;
    // The JSON text block comes first; from 2025-06-18 on join_group adds a
    // resource_link to the wakeup URI after it (issue 11).
    const links = Array.isArray(content) ? content.slice(1) : [];
    if (Array.isArray(content) && content[0]?.type === 'text' && links.every(c => c.type === 'resource_link')) {
      try {
        payload = JSON.parse(content[0].text);
      } catch {
        payload = undefined;
      }
    }
    return { result, payload };
  }

  // ok calls a tool that must succeed and returns its decoded payload.
  async ok(tool, args) {
    const { result, payload } = await this.call(tool, args);
    need(result.isError === false && payload !== undefined,
      this.label + ' ' + tool + ' succeeds with a JSON text content first and isError false', result);
    return payload;
  }

  // fails calls a tool that must fail as a tool error (isError true, a JSON
  // {"error": ...} text), not as a JSON-RPC error; returns the error text.
  async fails(tool, args, wantError, description) {
    let outcome;
    try {
      outcome = await this.call(tool, args);
    } catch (error) {
      check(false, this.label + ' ' + description + ' is a tool error, not a protocol error', error.message);
      return undefined;
    }
    const { result, payload } = outcome;
    check(result.isError === true && typeof payload?.error === 'string',
      this.label + ' ' + description + ' returns isError true with an error text', result);
    if (wantError instanceof RegExp) {
      check(wantError.test(payload?.error ?? ''), this.label + ' ' + description + ' error text', 'got ' + show(payload?.error) + '; want ' + wantError);
    } else if (wantError !== undefined) {
      equal(payload?.error, wantError, this.label + ' ' + description + ' error text');
    }
    return payload?.error;
  }

  async close() {
    if (!this.client) return;
    await this.client.close();
    const proc = this.process;
    if (proc && this.connected) {
      if (proc.exitCode === null && proc.signalCode === null) {
        await new Promise(resolve => { proc.once('exit', resolve); setTimeout(resolve, TIMEOUT_MS).unref(); });
      }
      equal({ exitCode: proc.exitCode, signal: proc.signalCode }, { exitCode: 0, signal: null },
        this.label + ' server exits 0 on stdin EOF');
    }
    this.client = undefined;
  }

  diagnostics() {
    const lines = [];
    if (this.errors.length) lines.push(this.label + ' client errors:\n  ' + this.errors.join('\n  '));
    if (this.process && (this.process.exitCode !== null || this.process.signalCode !== null)) {
      lines.push(this.label + ' server process exited: code ' + this.process.exitCode + ', signal ' + this.process.signalCode);
    }
    if (this.stderr.trim()) lines.push(this.label + ' server stderr:\n  ' + this.stderr.trim().split('\n').slice(-30).join('\n  '));
    return lines.join('\n');
  }
}

function checkMessage(m, want, description) {
  for (const [key, value] of Object.entries(want)) equal(m?.[key], value, description + ' ' + key);
  sameSet(Object.keys(m ?? {}), ['id', 'context_id', 'name', 'message', 'priority', 'mentions', 'wakeup_targets', 'routing_reason', 'sent_at'],
    description + ' has exactly the original message keys');
  check(TIMESTAMP.test(m?.sent_at ?? ''), description + ' sent_at uses the original timestamp format', m?.sent_at);
}

async function scenario(a, b, groupsDir) {
  await a.connect();
  need(true, 'A connects (initialize handshake through the SDK client)');

  const initialize = a.received.find(m => m.result?.protocolVersion);
  info('server answered protocolVersion ' + initialize?.result?.protocolVersion + ' to the SDK client');
  const serverInfo = a.client.getServerVersion();
  equal(serverInfo?.name, 'crosstalk', 'serverInfo.name');
  check(typeof serverInfo?.version === 'string' && serverInfo.version.length > 0, 'serverInfo.version is a non-empty string', serverInfo);
  info('serverInfo.version ' + serverInfo?.version);
  if (process.env.CROSSTALK_EXPECT_VERSION) equal(serverInfo?.version, process.env.CROSSTALK_EXPECT_VERSION, 'serverInfo.version');
  const caps = a.client.getServerCapabilities();
  equal(caps?.resources?.subscribe, true, 'capabilities.resources.subscribe');
  check(caps?.tools !== undefined, 'capabilities.tools is present', caps);

  await a.client.ping({ timeout: TIMEOUT_MS });
  check(true, 'ping answers (empty result accepted by the SDK)');

  const { tools } = await a.client.listTools(undefined, { timeout: TIMEOUT_MS });
  sameSet(tools.map(t => t.name), Object.keys(EXPECTED_REQUIRED), 'tools/list has exactly the 15 tools');
  for (const tool of tools) {
    const schema = tool.inputSchema ?? {};
    check(schema.type === 'object' && schema.additionalProperties === false && schema.required?.includes('caller_name') &&
      schema.properties?.caller_name?.type === 'string',
    tool.name + ' schema is a closed object requiring caller_name', schema);
    if (EXPECTED_REQUIRED[tool.name]) sameSet(schema.required, EXPECTED_REQUIRED[tool.name], tool.name + ' required inputs');
    check(typeof tool.description === 'string' && tool.description.length > 0, tool.name + ' has a description');
  }
  equal(tools.find(t => t.name === 'delete_group')?.annotations?.destructiveHint, true, 'delete_group is annotated destructive');

  await b.connect();
  need(true, 'B connects with its own server process on the same groups directory');

  // Group lifecycle and metadata, across both processes.
  const created = await a.ok('create_group', { context_id: ALPHA.context_id, name: 'Conformance', description: 'SDK client check' });
  need(GROUP_ID.test(created.group_id ?? ''), 'create_group returns a grp_<32 hex> group_id', created);
  const gid = created.group_id;
  equal([created.name, created.description], ['Conformance', 'SDK client check'], 'create_group returns name and description');
  check(TIMESTAMP.test(created.created_at ?? '') && TIMESTAMP.test(created.updated_at ?? ''), 'create_group timestamps use the original format', created);
  check(fs.existsSync(path.join(groupsDir, gid + '.sqlite3')), 'the group database file is <dir>/<group_id>.sqlite3');

  const listed = await b.ok('list_groups', {});
  const entry = listed.groups?.find(g => g.group_id === gid);
  check(entry?.name === 'Conformance', 'B lists the group A created', listed);
  const metadata = await b.ok('get_group_metadata', { group_id: gid });
  sameSet(Object.keys(metadata), ['group_id', 'name', 'description', 'created_at', 'updated_at'], 'get_group_metadata keys');
  equal(metadata.description, 'SDK client check', 'B reads the metadata');

  await b.fails('update_group_metadata', { group_id: gid, context_id: BETA.context_id, name: 'Hijack' },
    'Only the context that created this group can update its metadata.', 'update_group_metadata by a non-creator');
  const updated = await a.ok('update_group_metadata', { group_id: gid, context_id: ALPHA.context_id, description: 'Updated by alpha' });
  equal([updated.name, updated.description], ['Conformance', 'Updated by alpha'], 'update_group_metadata changes only the given field');
  equal((await b.ok('get_group_metadata', { group_id: gid })).description, 'Updated by alpha', 'B sees the update');

  // Membership; join_group hands out the session's wakeup resource.
  await a.fails('send_message', { group_id: gid, ...ALPHA, message: 'too early' },
    'Context has not joined this group. Call join_group first.', 'send_message before join_group');
  // Later steps use the URIs the server handed out, so that an encoding
  // difference fails here once instead of cascading.
  const joinA = await a.ok('join_group', { group_id: gid, ...ALPHA });
  equal(joinA, { group_id: gid, joined: true, wakeup_resource_uri: 'crosstalk://groups/' + gid + '/wakeups/' + pyQuote(ALPHA.context_id) },
    'A join_group result');
  const wakeA = joinA.wakeup_resource_uri;
  const joinB = await b.ok('join_group', { group_id: gid, ...BETA });
  equal(joinB, { group_id: gid, joined: true, wakeup_resource_uri: 'crosstalk://groups/' + gid + '/wakeups/' + pyQuote(BETA.context_id) },
    'B join_group result (wakeup URI percent-encoded like the original)');
  const wakeB = joinB.wakeup_resource_uri;
  need(typeof wakeA === 'string' && typeof wakeB === 'string', 'join_group returns wakeup_resource_uri strings');

  const groupUri = 'crosstalk://groups/' + gid + '/messages';
  for (const [session, uri] of [[a, groupUri], [a, wakeA], [b, groupUri], [b, wakeB]]) {
    const result = await session.client.subscribeResource({ uri }, { timeout: TIMEOUT_MS });
    equal(result, {}, session.label + ' resources/subscribe ' + uri + ' returns {}');
  }

  const users = await a.ok('get_users', { group_id: gid });
  equal(users.users?.map(u => [u.context_id, u.name]), [[ALPHA.context_id, ALPHA.name], [BETA.context_id, BETA.name]],
    'get_users lists both members sorted by context_id');
  check(users.users?.every(u => TIMESTAMP.test(u.joined_at ?? '') && u.latest_message_id === null), 'get_users joined_at and latest_message_id null', users);
  await a.fails('get_unread_messages', { group_id: gid, context_id: ALPHA.context_id, name: 'wrong-name' },
    "name does not match this context's joined group name. Call join_group to update it.", 'get_unread_messages with the wrong name');

  // 1: B mentions alpha by name -> A gets a group change and a targeted wakeup.
  let markA = a.mark();
  const sent1 = await b.ok('send_message', { group_id: gid, ...BETA, message: 'Hello @alpha, please review the cache design.' });
  equal(sent1, { message_id: 1, group_id: gid, priority: 'normal', mentions: [ALPHA.context_id], routing_reason: 'mentioned', wakeup_targets: [ALPHA.context_id] },
    'send_message with @mention result');
  const change1 = await a.expectUpdate(markA, groupUri, 'group_change', 'group_change for B\'s message (cross-process)');
  if (change1) equal(change1, { uri: groupUri, priority: 'normal', relevance: 'group_change' }, 'group_change notification params');
  const wake1 = await a.expectUpdate(markA, wakeA, 'mentioned', 'wakeup notification for the mention');
  if (wake1) equal(wake1, { uri: wakeA, priority: 'normal', relevance: 'mentioned' }, 'mention wakeup notification params');

  const unreadA = await a.ok('get_unread_messages', { group_id: gid, ...ALPHA });
  equal(unreadA.messages?.length, 1, 'A has 1 unread message');
  checkMessage(unreadA.messages?.[0], { id: 1, context_id: BETA.context_id, name: BETA.name, message: 'Hello @alpha, please review the cache design.',
    priority: 'normal', mentions: [ALPHA.context_id], wakeup_targets: [ALPHA.context_id], routing_reason: 'mentioned' }, 'unread message 1');
  equal((await a.ok('get_unread_messages', { group_id: gid, ...ALPHA })).messages, [], 'reading marks it read: A has 0 unread');
  equal((await b.ok('get_unread_messages', { group_id: gid, ...BETA })).messages, [], 'the sender has 0 unread for its own message');

  const wakeRead = await a.client.readResource({ uri: wakeA }, { timeout: TIMEOUT_MS });
  const wakeSnapshot = JSON.parse(wakeRead.contents?.[0]?.text ?? 'null');
  equal([wakeRead.contents?.[0]?.uri, wakeRead.contents?.[0]?.mimeType], [wakeA, 'application/json'], 'resources/read wakeup content uri and mimeType');
  equal(wakeSnapshot?.wakeups?.map(w => [w.message_id, w.relevance, w.priority]), [[1, 'mentioned', 'normal']], 'wakeup snapshot lists the event');
  check(TIMESTAMP.test(wakeSnapshot?.wakeups?.[0]?.acknowledged_at ?? '') && TIMESTAMP.test(wakeSnapshot?.wakeups?.[0]?.last_notified_at ?? ''),
    'reading the message acknowledged the wakeup, which was notified', wakeSnapshot);
  try {
    await b.client.readResource({ uri: wakeA }, { timeout: TIMEOUT_MS });
    check(false, 'B cannot read A\'s wakeup resource (not joined through B\'s session)', 'read succeeded');
  } catch (error) {
    check(error instanceof McpError && !/timed out/i.test(error.message), 'B cannot read A\'s wakeup resource (JSON-RPC error)', error.message);
    info('unauthorized wakeup read answered code ' + error.code + ': ' + error.message);
  }

  // 2: explicit wake_context_ids win over mentions.
  let markB = b.mark();
  const sent2 = await a.ok('send_message', { group_id: gid, ...ALPHA, message: 'Explicit ping, see @alpha notes.', priority: 'high',
    wake_context_ids: [BETA.context_id, 'nobody-here'] });
  equal([sent2.message_id, sent2.priority, sent2.routing_reason, sent2.wakeup_targets, sent2.mentions], [2, 'high', 'explicit', [BETA.context_id], []],
    'send_message with explicit wake_context_ids (unknown ids ignored)');
  const wake2 = await b.expectUpdate(markB, wakeB, 'explicit', 'wakeup notification for explicit targeting');
  if (wake2) equal(wake2, { uri: wakeB, priority: 'high', relevance: 'explicit' }, 'explicit wakeup notification params');
  await b.expectUpdate(markB, groupUri, 'group_change', 'group_change for A\'s message (cross-process)');

  // 3: urgent reaches every other member.
  markB = b.mark();
  const sent3 = await a.ok('send_message', { group_id: gid, ...ALPHA, message: 'Urgent: the build is broken.', priority: 'urgent' });
  equal([sent3.message_id, sent3.priority, sent3.routing_reason, sent3.wakeup_targets], [3, 'urgent', 'urgent', [BETA.context_id]], 'urgent send_message result');
  const wake3 = await b.expectUpdate(markB, wakeB, 'urgent', 'wakeup notification for the urgent message');
  if (wake3) equal(wake3, { uri: wakeB, priority: 'urgent', relevance: 'urgent' }, 'urgent wakeup notification params');

  // Retrieval tools on B's side.
  const latestB = await b.ok('get_latest_messages', { group_id: gid, ...BETA });
  equal(latestB.messages?.map(m => m.id), [2, 3], 'get_latest_messages returns messages after B\'s own latest');
  checkMessage(latestB.messages?.[0], { context_id: ALPHA.context_id, priority: 'high', routing_reason: 'explicit', wakeup_targets: [BETA.context_id] }, 'latest message 2');
  equal((await b.ok('get_unread_messages', { group_id: gid, ...BETA })).messages, [], 'get_latest_messages marked them read: B has 0 unread');
  const allB = await b.ok('get_all_messages', { group_id: gid, ...BETA });
  equal(allB.messages?.map(m => [m.id, m.routing_reason]), [[1, 'mentioned'], [2, 'explicit'], [3, 'urgent']], 'get_all_messages returns the full history');
  equal((await b.ok('get_messages_after', { group_id: gid, ...BETA, after_message_id: 2 })).messages?.map(m => m.id), [3], 'get_messages_after 2');
  equal((await b.ok('get_messages_after', { group_id: gid, ...BETA, after_message_id: 3 })).messages, [], 'get_messages_after the last id is empty');
  await b.fails('get_messages_after', { group_id: gid, ...BETA, after_message_id: -1 }, undefined, 'get_messages_after -1');
  equal((await a.ok('search_messages', { group_id: gid, ...ALPHA, query: 'CACHE DESIGN' })).messages?.map(m => m.id), [1], 'search_messages is case-insensitive');
  equal((await a.ok('search_messages', { group_id: gid, ...ALPHA, query: 'b_ild%broken' })).messages?.map(m => m.id), [3], 'search_messages honours LIKE wildcards');
  equal((await a.ok('search_messages', { group_id: gid, ...ALPHA, query: 'no such text' })).messages, [], 'search_messages without a match');

  // A third context joining late sees the whole history as unread.
  const joinC = await b.ok('join_group', { group_id: gid, ...GAMMA });
  equal(joinC.joined, true, 'gamma joins through B\'s session');
  const unreadC = await b.ok('get_unread_messages', { group_id: gid, ...GAMMA });
  equal(unreadC.messages?.map(m => m.id), [1, 2, 3], 'a first join makes the existing history unread');
  const sent4 = await b.ok('send_message', { group_id: gid, ...GAMMA, message: 'Joined; catching up.' });
  equal(sent4.routing_reason, 'fallback', 'a message without targets routes as fallback');
  sameSet(sent4.wakeup_targets, [ALPHA.context_id, BETA.context_id], 'fallback targets every other member');
  equal((await a.ok('get_unread_messages', { group_id: gid, ...ALPHA })).messages?.map(m => m.id), [4], 'A has exactly the fallback message unread');

  // Resources.
  const { resources } = await a.client.listResources(undefined, { timeout: TIMEOUT_MS });
  const resource = resources.find(r => r.uri === groupUri);
  check(resource !== undefined, 'resources/list includes the group resource', resources);
  equal([resource?.name, resource?.mimeType], ['Crosstalk ' + gid, 'application/json'], 'group resource name and mimeType');
  const read = await b.client.readResource({ uri: groupUri }, { timeout: TIMEOUT_MS });
  equal(JSON.parse(read.contents?.[0]?.text ?? 'null'), { group_id: gid, message_count: 4, latest_message_id: 4 }, 'resources/read group snapshot');

  // One JSON-RPC line far beyond 64 KiB, with non-ASCII text, round-trips.
  const big = 'Größe ✓ 日本 🚀 '.repeat(40_000) + 'end';
  const sent5 = await a.ok('send_message', { group_id: gid, ...ALPHA, message: big, wake_context_ids: [BETA.context_id] });
  equal(sent5.message_id, 5, 'a ' + Math.round(Buffer.byteLength(big) / 1024) + ' KiB message is accepted');
  const bigBack = (await b.ok('get_messages_after', { group_id: gid, ...BETA, after_message_id: 4 })).messages;
  check(bigBack?.length === 1 && bigBack[0].message === big, 'the large non-ASCII message comes back unchanged',
    bigBack?.map(m => ({ id: m.id, length: m.message?.length })));

  // Unsubscribing: a group resource just stops; a wakeup resource leaves the group.
  equal(await a.client.unsubscribeResource({ uri: groupUri }, { timeout: TIMEOUT_MS }), {}, 'A resources/unsubscribe of the group resource returns {}');
  equal(await b.client.unsubscribeResource({ uri: joinC.wakeup_resource_uri }, { timeout: TIMEOUT_MS }), {},
    'B resources/unsubscribe of gamma\'s wakeup resource returns {}');
  equal((await a.ok('get_users', { group_id: gid })).users?.map(u => u.context_id), [ALPHA.context_id, BETA.context_id],
    'unsubscribing a wakeup resource left the group');

  // Bad input is a tool error, never a protocol error (but an unknown tool is one).
  await a.fails('get_group_metadata', { group_id: 'grp_' + '0'.repeat(32) },
    'Group does not exist: grp_' + '0'.repeat(32) + '. Create it first or check the group_id.', 'get_group_metadata of a missing group');
  await a.fails('send_message', { group_id: gid, ...ALPHA, message: 'x', priority: 'extreme' },
    'priority must be one of: low, normal, high, urgent.', 'send_message with a bad priority');
  await a.fails('join_group', { group_id: gid, ...ALPHA, colour: 'blue' }, undefined, 'join_group with an unknown argument');
  // From 2025-06-18 on an unknown tool is a protocol error, -32602, as
  // server/tools.mdx "Error Handling" says (a deliberate deviation from the
  // original's tool error; testdata/golden/README.md).
  try {
    const { result } = await a.call('no_such_tool', {});
    check(false, 'an unknown tool is a -32602 protocol error', result);
  } catch (error) {
    check(error instanceof McpError && error.code === -32602 && /Unknown tool: no_such_tool/.test(error.message),
      'an unknown tool is a -32602 protocol error', error.code + ' ' + error.message);
  }
  try {
    const { result } = await a.call('list_groups', { caller_name: '' });
    check(result.isError === true, 'an empty caller_name is rejected', result);
    info('empty caller_name answered with a tool error (isError true)');
  } catch (error) {
    check(error instanceof McpError && !/timed out/i.test(error.message), 'an empty caller_name is rejected', error.message);
    info('empty caller_name answered JSON-RPC error ' + error.code + ': ' + error.message);
  }

  // Leaving, then deleting from the other session.
  const left = await a.ok('leave_group', { group_id: gid, ...ALPHA });
  equal(left, { group_id: gid, left: true }, 'leave_group result');
  equal((await b.ok('get_users', { group_id: gid })).users?.map(u => u.context_id), [BETA.context_id], 'get_users after A left');
  await a.fails('get_all_messages', { group_id: gid, ...ALPHA }, 'Context has not joined this group. Call join_group first.', 'get_all_messages after leaving');
  await b.fails('delete_group', { group_id: gid, context_id: BETA.context_id }, 'Only the context that created this group can delete it.', 'delete_group by a non-creator');

  markB = b.mark();
  const deleted = await a.ok('delete_group', { group_id: gid, context_id: ALPHA.context_id });
  equal(deleted, { group_id: gid, deleted: true }, 'delete_group result');
  const leftovers = fs.readdirSync(groupsDir).filter(f => f.startsWith(gid));
  equal(leftovers, [], 'delete_group removes the database and its -wal/-shm files');
  const gone1 = await b.expectUpdate(markB, groupUri, 'deleted', 'relevance "deleted" on the group resource');
  if (gone1) equal(gone1, { uri: groupUri, relevance: 'deleted' }, 'group deleted notification params');
  const gone2 = await b.expectUpdate(markB, wakeB, 'deleted', 'relevance "deleted" on its wakeup resource');
  if (gone2) equal(gone2, { uri: wakeB, relevance: 'deleted' }, 'wakeup deleted notification params');
  await b.fails('get_group_metadata', { group_id: gid }, 'Group does not exist: ' + gid + '. Create it first or check the group_id.', 'get_group_metadata after deletion');
  await a.fails('delete_group', { group_id: gid, context_id: ALPHA.context_id }, 'Group does not exist: ' + gid + '. It may already have been deleted.', 'delete_group twice');
  equal((await b.ok('list_groups', {})).groups, [], 'list_groups is empty after deletion');

  const malformed = [...a.notifications, ...b.notifications].filter(n => !n.valid);
  equal(malformed, [], 'every notification passed the SDK schema');
  equal([...a.errors, ...b.errors], [], 'the SDK client reported no transport or protocol errors');
}

async function main() {
  const groupsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crosstalk-conformance-'));
  for (const label of ['A', 'B']) {
    const { command, args } = serverCommand(label);
    info('server ' + label + ': ' + [command, ...args].join(' '));
  }
  info('groups dir: ' + groupsDir);
  const a = new Session('A', groupsDir);
  const b = new Session('B', groupsDir);
  const watchdog = setTimeout(() => {
    console.log('not ok - the whole run finished within ' + RUN_TIMEOUT_MS / 1000 + ' s');
    for (const s of [a, b]) if (s.diagnostics()) console.log(s.diagnostics());
    console.log(passed + ' passed, ' + (failed + 1) + ' failed');
    process.exit(1);
  }, RUN_TIMEOUT_MS);
  watchdog.unref();
  try {
    await scenario(a, b, groupsDir);
  } catch (error) {
    if (!(error instanceof Abort)) check(false, 'the scenario ran to the end', error?.stack ?? String(error));
  }
  for (const s of [a, b]) {
    try {
      await s.close();
    } catch (error) {
      check(false, s.label + ' closes cleanly', error.message);
    }
  }
  if (failed > 0) {
    for (const s of [a, b]) if (s.diagnostics()) console.log(s.diagnostics());
  }
  fs.rmSync(groupsDir, { recursive: true, force: true });
  clearTimeout(watchdog);
  console.log(passed + ' passed, ' + failed + ' failed');
  process.exit(failed > 0 ? 1 : 0);
}

main();
