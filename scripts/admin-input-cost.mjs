/**
 * What hostile admin input costs. Two parts, figures only (no pass/fail):
 * 1. A governance expression with a catastrophic regular expression,
 *    `"aaa…a!".matches("^(a+)+$")`: one evaluation as the aggregators run it (RE2), beside
 *    JavaScript's RegExp on the same pattern at lengths it can still finish.
 * 2. A rule text near the 1 MiB bound applied through the admin API of a real `sluice serve`
 *    (the built CLI, embedded store) while one closed-loop client asks for decisions: how long
 *    the apply took, how many decisions were answered meanwhile, and the longest gap between
 *    two answers (the stall a decision sees).
 * Run after `npm run build`: `node scripts/admin-input-cost.mjs`.
 */
import { Buffer } from 'node:buffer';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { URL, fileURLToPath } from 'node:url';
import { compileExpression } from '@sluice/rules';

const { fetch } = globalThis;
const INPUT = { requests: 0n, errors: 0n, status2xx: 0n, status3xx: 0n, status4xx: 0n, status5xx: 0n, windowSeconds: 1, rate: 0 };
const ms = (start) => Number(process.hrtime.bigint() - start) / 1e6;

console.log('1. "aaa…a!".matches("^(a+)+$"), one evaluation');
for (const length of [20, 24, 26]) {
  const input = `${'a'.repeat(length - 1)}!`;
  const start = process.hrtime.bigint();
  new RegExp('^(a+)+$').test(input);
  console.log(`   RegExp (JavaScript), ${length} characters: ${ms(start).toFixed(1)} ms`);
}
for (const length of [26, 30, 900]) {
  const fires = compileExpression(`"${'a'.repeat(length - 1)}!".matches("^(a+)+$")`);
  const start = process.hrtime.bigint();
  fires(INPUT);
  console.log(`   RE2 (governance expression), ${length} characters: ${ms(start).toFixed(2)} ms`);
}

const TOKEN = 'admin-input-cost-token-0123456789';
const BASE = 'resources:\n  api:\n    limits: { algorithm: fixed-window, limit: 1000000000, windowMs: 60000 }\n';

/** A native rule text of about `bytes` bytes: `api` and as many filler resources as fit. */
function largeRules(bytes) {
  const parts = [BASE];
  let size = BASE.length;
  for (let i = 0; ; i++) {
    const r = `  filler-${i}:\n    limits:\n      - { algorithm: gcra, limit: ${1000 + i}, windowMs: 60000, burst: 50 }\n`;
    if (size + r.length > bytes) break;
    parts.push(r);
    size += r.length;
  }
  return parts.join('');
}

function serve(rules) {
  const bin = fileURLToPath(new URL('../packages/server/bin/sluice.js', import.meta.url));
  const child = spawn(
    process.execPath,
    [bin, 'serve', '--host', '127.0.0.1', '--port', '0', '--grpc-port', '0', '--rules', rules],
    {
      env: { ...process.env, SLUICE_ADMIN_TOKEN: TOKEN },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      buffered += chunk;
      const lines = buffered.split('\n');
      buffered = lines.pop();
      for (const line of lines) {
        if (line.includes('"sluice serving"')) resolve({ child, url: JSON.parse(line).url });
      }
    });
    child.once('exit', (code) => reject(new Error(`sluice serve exited with ${code}`)));
  });
}

const dir = mkdtempSync(join(tmpdir(), 'admin-input-cost-'));
const rulesPath = join(dir, 'rules.yaml');
writeFileSync(rulesPath, BASE);
const { child, url } = await serve(rulesPath);
try {
  const decide = async () => {
    const res = await fetch(new URL('/v1/check', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ resource: 'api', key: 'k' }),
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`decision answered ${res.status}`);
  };
  for (let i = 0; i < 200; i++) await decide(); // warm-up
  const text = largeRules(1024 * 1024 - 1024);
  for (const round of [1, 2]) {
    let applying = true;
    const answers = [];
    const loop = (async () => {
      while (applying) {
        await decide();
        answers.push(process.hrtime.bigint());
      }
    })();
    const start = process.hrtime.bigint();
    const res = await fetch(new URL('/v1/admin/rules', url), {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
      // Each round changes one limit, so it is a new version.
      body: JSON.stringify({
        text: text.replace('limit: 1000,', `limit: ${1000 + round * 7},`),
        author: 'bench',
        reason: 'large',
      }),
    });
    await res.arrayBuffer();
    const end = process.hrtime.bigint();
    applying = false;
    await loop;
    if (res.status !== 201) throw new Error(`apply answered ${res.status}`);
    const during = answers.filter((t) => t >= start && t <= end);
    let gap = 0;
    let last = start;
    for (const t of [...during, end]) {
      gap = Math.max(gap, Number(t - last) / 1e6);
      last = t;
    }
    console.log(
      `2. round ${round}: ${Buffer.byteLength(text)} bytes applied in ${ms(start) > 0 ? (Number(end - start) / 1e6).toFixed(0) : 0} ms; ` +
        `${during.length} decisions answered meanwhile; longest gap between answers ${gap.toFixed(0)} ms`,
    );
  }
} finally {
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  rmSync(dir, { recursive: true, force: true });
}
