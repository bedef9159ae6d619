import { compileLimits, MemoryStore } from '@sluice/core';
import { fmt, fmtInt, type Table } from '../report/table.js';

/** Heap taken by `keys` live keys in the in-memory store. */
export interface MemoryResult {
  readonly keys: number;
  /** Keys the store reported holding after the inserts. */
  readonly held: number;
  readonly gcAvailable: boolean;
  /** Heap figures (V8 heap used + external memory) in MB (10^6 bytes). */
  readonly heapBeforeMb: number;
  readonly heapAfterMb: number;
  readonly heapDeltaMb: number;
  readonly rssDeltaMb: number;
  readonly bytesPerKey: number;
  readonly seconds: number;
}

const MB = 1_000_000;
const MIB = 1024 * 1024;

function collect(): boolean {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return false;
  gc();
  gc();
  return true;
}

/**
 * JS heap in use plus memory held outside it for JS objects (ArrayBuffer backing stores), so a
 * store keeping state in typed arrays is not flattered.
 */
function used(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

/**
 * Puts `keys` distinct keys (one token-bucket limit each, as the limiter stores them:
 * `resource|key`) into a MemoryStore and measures the heap after a full GC, before and after.
 * The limit (100 per hour) keeps every key live for the whole measurement.
 */
export async function runMemory(keys: number): Promise<MemoryResult> {
  const limits = compileLimits({ algorithm: 'token-bucket', limit: 100, windowMs: 3_600_000 });
  const gcAvailable = collect();
  const heapBefore = used();
  const rssBefore = process.memoryUsage().rss;
  const started = performance.now();
  const store = new MemoryStore({ maxKeys: keys, sweepIntervalMs: 0 });
  let allowed = 0;
  for (let i = 0; i < keys; i++) {
    if (store.consumeSync({ key: `api:users|user-${i}`, limits, cost: 1, permitId: '' }).allowed) allowed++;
  }
  const seconds = (performance.now() - started) / 1000;
  collect();
  const heapAfter = used();
  const rssAfter = process.memoryUsage().rss;
  const held = store.stats.keys;
  if (allowed !== keys) throw new Error(`memory part: only ${allowed} of ${keys} first calls were allowed`);
  await store.close();
  return {
    keys,
    held,
    gcAvailable,
    heapBeforeMb: heapBefore / MB,
    heapAfterMb: heapAfter / MB,
    heapDeltaMb: (heapAfter - heapBefore) / MB,
    rssDeltaMb: (rssAfter - rssBefore) / MB,
    bytesPerKey: (heapAfter - heapBefore) / keys,
    seconds,
  };
}

/** The table of the memory part. */
export function memoryTable(r: MemoryResult): Table {
  return {
    title: `Memory: ${fmtInt(r.keys)} keys in the in-memory store`,
    header: [
      'keys held',
      'heap before MB',
      'heap after MB',
      'heap delta MB',
      'heap delta MiB',
      'bytes/key',
      'RSS delta MB',
      'insert s',
    ],
    rows: [
      [
        fmtInt(r.held),
        fmt(r.heapBeforeMb),
        fmt(r.heapAfterMb),
        fmt(r.heapDeltaMb),
        fmt((r.heapDeltaMb * MB) / MIB),
        fmtInt(r.bytesPerKey),
        fmt(r.rssDeltaMb),
        fmt(r.seconds, 2),
      ],
    ],
    notes: [
      'One token-bucket limit per key, keys like "api:users|user-123456" (resource|key, as the limiter stores them);',
      'heap = V8 heap used + external (ArrayBuffers), after a full GC (global.gc()), before and after the inserts.',
      'MB = 10^6 bytes, MiB = 2^20 bytes.',
      ...(r.gcAvailable
        ? []
        : ['WARNING: node ran without --expose-gc, so no GC was forced: the figures include garbage and are unreliable.']),
    ],
  };
}
