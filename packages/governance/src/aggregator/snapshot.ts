/**
 * Binary snapshots of a partition's governance state, saved by its owner and restored by the
 * next one on takeover, so a takeover does not forget a burst or a login-failure count.
 *
 * Layout (big-endian): magic "SL", kind "W", version 1, f64 taken-at (epoch ms), u16 rule count;
 * per rule: u8 id length + id (UTF-8), u32 hash of the rule's signature, u32 windowMs, u8
 * slices, u32 value count; per value: u32 value, u8 slice count; per slice: f64 slice number
 * and 6 x u32 counters. Then u32 hold count; per hold: u8 dimension, u32 value, f64 hold-until,
 * u8 id length + id. Windows of a rule whose signature or shape changed are not restored.
 */
import { DIMENSIONS, StreamError, StreamErrorCodes, hashValue } from '@sluice/stream';
import type { PartitionState } from './partition-state.js';
import { FIELD_COUNT, emptyWindow, isIdle, type SlidingWindow } from './window.js';

const MAGIC = [0x53, 0x4c, 0x57, 1] as const;
const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });
const MAX_U32 = 0xffff_ffff;

/** Largest snapshot written or read; a larger state is not snapshotted (and counted). */
export const MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024;

class Writer {
  #buf = new Uint8Array(4096);
  #view = new DataView(this.#buf.buffer);
  length = 0;

  #room(n: number): void {
    if (this.length + n <= this.#buf.length) return;
    let size = this.#buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.length));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }
  u8(v: number): void {
    this.#room(1);
    this.#view.setUint8(this.length, v);
    this.length += 1;
  }
  u16(v: number): void {
    this.#room(2);
    this.#view.setUint16(this.length, v);
    this.length += 2;
  }
  u32(v: number): void {
    this.#room(4);
    this.#view.setUint32(this.length, Math.min(MAX_U32, Math.max(0, Math.round(v))));
    this.length += 4;
  }
  f64(v: number): void {
    this.#room(8);
    this.#view.setFloat64(this.length, v);
    this.length += 8;
  }
  str(s: string): void {
    const bytes = encoder.encode(s);
    this.u8(bytes.length);
    this.#room(bytes.length);
    this.#buf.set(bytes, this.length);
    this.length += bytes.length;
  }
  bytes(): Uint8Array {
    return this.#buf.slice(0, this.length);
  }
}

class Reader {
  readonly #view: DataView;
  readonly #bytes: Uint8Array;
  #at = 0;
  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  #need(n: number): void {
    if (this.#at + n > this.#bytes.length) throw malformed('truncated');
  }
  u8(): number {
    this.#need(1);
    return this.#view.getUint8(this.#at++);
  }
  u16(): number {
    this.#need(2);
    const v = this.#view.getUint16(this.#at);
    this.#at += 2;
    return v;
  }
  u32(): number {
    this.#need(4);
    const v = this.#view.getUint32(this.#at);
    this.#at += 4;
    return v;
  }
  f64(): number {
    this.#need(8);
    const v = this.#view.getFloat64(this.#at);
    this.#at += 8;
    if (!Number.isFinite(v)) throw malformed('a number is not finite');
    return v;
  }
  str(): string {
    const n = this.u8();
    this.#need(n);
    const s = decoder.decode(this.#bytes.subarray(this.#at, this.#at + n));
    this.#at += n;
    return s;
  }
  get done(): boolean {
    return this.#at === this.#bytes.length;
  }
}

function malformed(why: string): StreamError {
  return new StreamError(StreamErrorCodes.MALFORMED, `not a window snapshot: ${why}`);
}

/** Encodes a partition's state at `now` (idle windows left out). */
export function encodeSnapshot(state: PartitionState, now: number): Uint8Array {
  const w = new Writer();
  for (const b of MAGIC) w.u8(b);
  w.f64(now);
  w.u16(state.rules.length);
  for (const rule of state.rules) {
    const table = state.table(rule.id)!;
    w.str(rule.id);
    w.u32(hashValue(rule.signature));
    w.u32(rule.shape.windowMs);
    w.u8(rule.shape.slices);
    const live = [...table.entries()].filter(([, win]) => !isIdle(win, rule.shape, now));
    w.u32(live.length);
    for (const [value, win] of live) {
      w.u32(value);
      const used: number[] = [];
      for (let pos = 0; pos < rule.shape.slices; pos++) if (win.sliceIds[pos]! >= 0) used.push(pos);
      w.u8(used.length);
      for (const pos of used) {
        w.f64(win.sliceIds[pos]!);
        for (let f = 0; f < FIELD_COUNT; f++) w.u32(win.counts[pos * FIELD_COUNT + f]!);
      }
    }
  }
  const holds = state.allHolds();
  w.u32(holds.length);
  for (const h of holds) {
    w.u8(DIMENSIONS.indexOf(h.dimension));
    w.u32(h.value);
    w.f64(h.holdUntil);
    w.str(h.ruleId);
  }
  return w.bytes();
}

/** What {@link restoreSnapshot} restored. */
export interface RestoreResult {
  readonly values: number;
  readonly holds: number;
  readonly takenAtMs: number;
}

/**
 * Restores a snapshot into `state` (which has its current rules). Windows of rules that are
 * gone or changed what they count are skipped. Throws {@link StreamError}
 * `SLUICE_ERR_STREAM_MALFORMED` for bytes that are not a snapshot; `state` is then untouched.
 */
export function restoreSnapshot(state: PartitionState, bytes: Uint8Array, now: number): RestoreResult {
  if (bytes.length > MAX_SNAPSHOT_BYTES) throw malformed(`${bytes.length} bytes, the bound is ${MAX_SNAPSHOT_BYTES}`);
  const r = new Reader(bytes);
  for (const b of MAGIC) if (r.u8() !== b) throw malformed('bad magic or version');
  const takenAtMs = r.f64();
  const ruleCount = r.u16();
  const windows: { ruleId: string; value: number; window: SlidingWindow }[] = [];
  for (let i = 0; i < ruleCount; i++) {
    const id = r.str();
    const sig = r.u32();
    const windowMs = r.u32();
    const slices = r.u8();
    const count = r.u32();
    const rule = state.rules.find((x) => x.id === id);
    const usable =
      rule !== undefined && hashValue(rule.signature) === sig && rule.shape.windowMs === windowMs && rule.shape.slices === slices;
    for (let j = 0; j < count; j++) {
      const value = r.u32();
      const used = r.u8();
      if (used > slices) throw malformed('more slices than the window has');
      const win = usable ? emptyWindow(rule.shape) : undefined;
      for (let k = 0; k < used; k++) {
        const sliceId = r.f64();
        const counts: number[] = [];
        for (let f = 0; f < FIELD_COUNT; f++) counts.push(r.u32());
        if (win === undefined || sliceId < 0 || !Number.isInteger(sliceId)) continue;
        const pos = sliceId % slices;
        win.sliceIds[pos] = sliceId;
        win.counts.set(counts, pos * FIELD_COUNT);
      }
      if (win !== undefined) windows.push({ ruleId: id, value, window: win });
    }
  }
  const holdCount = r.u32();
  const holds: { ruleId: string; dimension: (typeof DIMENSIONS)[number]; value: number; holdUntil: number }[] = [];
  for (let i = 0; i < holdCount; i++) {
    const d = r.u8();
    const value = r.u32();
    const holdUntil = r.f64();
    const ruleId = r.str();
    const dimension = DIMENSIONS[d];
    if (dimension === undefined) throw malformed(`unknown dimension ${d}`);
    holds.push({ ruleId, dimension, value, holdUntil });
  }
  if (!r.done) throw malformed('trailing bytes');
  for (const { ruleId, value, window } of windows) state.table(ruleId)!.restore(value, window, now);
  for (const h of holds) state.restoreHold(h);
  return { values: windows.length, holds: holds.length, takenAtMs };
}
