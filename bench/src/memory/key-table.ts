/**
 * Micro-benchmark of the in-memory store's key table: the cost of a new key at 10k, 100k and 1M
 * keys held. Run after `npm run build`:
 *
 *   node bench/dist/memory/key-table.js [--sizes 10000,100000,1000000] [--inserts 50000]
 *
 * Per size, a `MemoryStore` of that `maxKeys` on a manual clock is filled with live keys (one
 * token bucket each, 100 per hour), then three cells are timed, each over `--inserts` calls:
 *
 * - fill: a new key while the table still has room (the last `--inserts` keys of the fill);
 * - full, at rest: a new key when every held key has come to rest (the clock moved past their
 *   expiry), so each new key makes room by removing one;
 * - full, live: a new key when every held key still counts (it has to be refused or, in older
 *   versions, evict a live key);
 *
 * and, in the full table before any of those, a call on a held key. Figures are microseconds per call
 * (wall time of the loop) and calls per second.
 */
import { compileLimits, ManualClock, MemoryStore } from '@sluice/core';

interface Cell {
  readonly name: string;
  readonly usPerCall: number;
}

const limits = compileLimits({ algorithm: 'token-bucket', limit: 100, windowMs: 3_600_000 });

function parseArgs(argv: readonly string[]): { sizes: number[]; inserts: number } {
  let sizes = [10_000, 100_000, 1_000_000];
  let inserts = 50_000;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--sizes') sizes = argv[++i]!.split(',').map(Number);
    else if (argv[i] === '--inserts') inserts = Number(argv[++i]);
    else throw new Error(`usage: node bench/dist/memory/key-table.js [--sizes a,b,c] [--inserts n]`);
  }
  return { sizes, inserts };
}

/** Microseconds per call of `n` calls of `fn(i)`. */
function time(n: number, fn: (i: number) => void): number {
  const started = performance.now();
  for (let i = 0; i < n; i++) fn(i);
  return ((performance.now() - started) * 1000) / n;
}

function cellsAt(size: number, inserts: number): Cell[] {
  const clock = new ManualClock(1_000_000);
  const store = new MemoryStore({ clock, maxKeys: size, sweepIntervalMs: 0 });
  const take = (key: string) => store.consumeSync({ key, limits, cost: 1, permitId: '' });
  const head = Math.max(0, size - inserts);
  for (let i = 0; i < head; i++) take(`fill|${i}`);
  const fill = time(size - head, (i) => take(`fill|${head + i}`));
  const existing = time(inserts, (i) => take(`fill|${(i * 7919) % size}`));
  const live = time(inserts, (i) => take(`live|${i}`));
  // Every state written so far comes to rest within the hour.
  clock.advance(3_600_000 + 1);
  const atRest = time(inserts, (i) => take(`rest|${i}`));
  void store.close();
  return [
    { name: 'fill', usPerCall: fill },
    { name: 'full, at rest', usPerCall: atRest },
    { name: 'full, live', usPerCall: live },
    { name: 'existing key', usPerCall: existing },
  ];
}

function main(): void {
  const { sizes, inserts } = parseArgs(process.argv.slice(2));
  console.log(`key table: us per call (calls/s), ${inserts} calls per cell`);
  console.log(['keys held', 'fill', 'full, at rest', 'full, live', 'existing key'].join(' | '));
  for (const size of sizes) {
    const cells = cellsAt(size, Math.min(inserts, size));
    const shown = cells.map((c) => `${c.usPerCall.toFixed(2)} (${Math.round(1e6 / c.usPerCall).toLocaleString('en-US')})`);
    console.log([size.toLocaleString('en-US'), ...shown].join(' | '));
  }
}

main();
