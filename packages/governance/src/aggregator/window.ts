/**
 * Sliding windows of event counts, as pure functions over plain arrays: a window of `windowMs`
 * is a ring of `slices` slices of `windowMs / slices` ms each (1 s as 10 slices of 100 ms by
 * default). An event lands in the slice of its timestamp; a window's total is the sum of the
 * slices that lie within `(now - windowMs, now]` at slice resolution, so a total is exact to
 * one slice: coarser slices cost less memory and work, finer ones react more precisely.
 * Nothing here reads a clock: `now` is always an argument.
 */

/** What a window counts per slice, in this order. */
export const STAT_FIELDS = ['requests', 'errors', 'status2xx', 'status3xx', 'status4xx', 'status5xx'] as const;
/** Number of counters per slice. */
export const FIELD_COUNT = STAT_FIELDS.length;

/** A window's totals. */
export type WindowStats = Record<(typeof STAT_FIELDS)[number], number>;

/** The geometry of a window. */
export interface WindowShape {
  readonly windowMs: number;
  readonly slices: number;
  /** `windowMs / slices`, an integer. */
  readonly sliceMs: number;
}

/** The shape of a `windowMs` window cut into `slices` slices. */
export function windowShape(windowMs: number, slices: number): WindowShape {
  return Object.freeze({ windowMs, slices, sliceMs: windowMs / slices });
}

/** One value's window: per ring position, the absolute slice number it holds and its counters. */
export interface SlidingWindow {
  /** Absolute slice number (`floor(t / sliceMs)`) held at each ring position; -1 = empty. */
  readonly sliceIds: Float64Array;
  /** `slices * FIELD_COUNT` counters, ring position-major. */
  readonly counts: Float64Array;
}

/** An empty window of the given shape. */
export function emptyWindow(shape: WindowShape): SlidingWindow {
  return { sliceIds: new Float64Array(shape.slices).fill(-1), counts: new Float64Array(shape.slices * FIELD_COUNT) };
}

/** The absolute slice number of a time. */
export function sliceOf(shape: WindowShape, t: number): number {
  return Math.floor(t / shape.sliceMs);
}

/** What {@link addEvent} did with an event. */
export const AddResult = Object.freeze({ ADDED: 0, TOO_OLD: 1 } as const);

/**
 * Counts one event (with `weight`, 1 unless sampled) in its slice. An event from the future
 * (a gateway clock ahead of the aggregator's) is counted in the current slice; an event older
 * than the window, or than the window of a newer slice already counted, is not counted
 * ({@link AddResult.TOO_OLD}).
 */
export function addEvent(
  w: SlidingWindow,
  shape: WindowShape,
  now: number,
  timestampMs: number,
  status: number,
  isError: boolean,
  weight = 1,
): number {
  const current = sliceOf(shape, now);
  const slice = Math.min(sliceOf(shape, timestampMs), current);
  if (slice <= current - shape.slices) return AddResult.TOO_OLD;
  const pos = slice % shape.slices;
  const base = pos * FIELD_COUNT;
  // Its ring position holds a slice a whole window newer (counted at a later `now`): too old for it.
  if (w.sliceIds[pos]! > slice) return AddResult.TOO_OLD;
  if (w.sliceIds[pos] !== slice) {
    // The ring position still holds an older slice: reuse it.
    w.sliceIds[pos] = slice;
    w.counts.fill(0, base, base + FIELD_COUNT);
  }
  const c = w.counts;
  c[base] = c[base]! + weight;
  if (isError) c[base + 1] = c[base + 1]! + weight;
  const cls = Math.floor(status / 100);
  if (cls >= 2 && cls <= 5) c[base + cls] = c[base + cls]! + weight;
  return AddResult.ADDED;
}

/** Requests in the window at `now` (the cheap total the threshold rules need). */
export function windowRequests(w: SlidingWindow, shape: WindowShape, now: number): number {
  const current = sliceOf(shape, now);
  let total = 0;
  for (let pos = 0; pos < shape.slices; pos++) {
    const id = w.sliceIds[pos]!;
    if (id > current - shape.slices && id <= current) total += w.counts[pos * FIELD_COUNT]!;
  }
  return total;
}

/** Every total of the window at `now`. */
export function windowStats(w: SlidingWindow, shape: WindowShape, now: number): WindowStats {
  const current = sliceOf(shape, now);
  const sums = [0, 0, 0, 0, 0, 0];
  for (let pos = 0; pos < shape.slices; pos++) {
    const id = w.sliceIds[pos]!;
    if (id <= current - shape.slices || id > current) continue;
    for (let f = 0; f < FIELD_COUNT; f++) sums[f]! += w.counts[pos * FIELD_COUNT + f]!;
  }
  return {
    requests: sums[0]!,
    errors: sums[1]!,
    status2xx: sums[2]!,
    status3xx: sums[3]!,
    status4xx: sums[4]!,
    status5xx: sums[5]!,
  };
}

/** True when no slice of the window lies within it at `now` (the value is idle). */
export function isIdle(w: SlidingWindow, shape: WindowShape, now: number): boolean {
  const oldest = sliceOf(shape, now) - shape.slices;
  for (let pos = 0; pos < shape.slices; pos++) if (w.sliceIds[pos]! > oldest) return false;
  return true;
}

/** The newest slice number a window holds (-1 when empty). */
export function newestSlice(w: SlidingWindow): number {
  let newest = -1;
  for (let pos = 0; pos < w.sliceIds.length; pos++) newest = Math.max(newest, w.sliceIds[pos]!);
  return newest;
}
