// Runs the official MCP conformance suite against `crosstalk-mcp serve --http`
// on a fresh groups directory, with baseline.yml listing the scenarios that
// cannot apply. Usage: node run.mjs (CROSSTALK_BIN names the binary).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const bin = process.env.CROSSTALK_BIN ?? join(here, '..', '..', 'crosstalk-mcp');
const groups = mkdtempSync(join(tmpdir(), 'crosstalk-conformance-http-'));
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CROSSTALK_')));
const server = spawn(bin, ['serve', '--http', '127.0.0.1:0'], {
  env: { ...env, CROSSTALK_GROUPS_DIR: groups },
  stdio: ['ignore', 'pipe', 'inherit'],
});
const url = await new Promise((resolve, reject) => {
  server.on('exit', (code) => reject(new Error(`serve --http exited with ${code} before printing its URL`)));
  createInterface({ input: server.stdout }).once('line', resolve);
});
console.log(`conformance: crosstalk-mcp serve --http at ${url}`);
let status = 1;
try {
  for (const suite of ['active', 'pending']) {
    const run = spawnSync(process.execPath, [
      join(here, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js'),
      'server', '--url', url, '--suite', suite, '--expected-failures', join(here, 'baseline.yml'),
      '-o', join(groups, 'results'),
    ], { stdio: 'inherit' });
    status = run.status ?? 1;
    if (status !== 0) break;
  }
} finally {
  server.kill('SIGTERM');
  rmSync(groups, { recursive: true, force: true });
}
process.exit(status);
