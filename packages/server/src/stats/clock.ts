/**
 * The clock-skew figures of `GET /v1/stats` (its `clockSkew` field) in words, shared by
 * `sluice status` and the web dashboard.
 *
 * This module runs in the browser too (the dashboard loads its compiled form as an ES module):
 * it must import nothing at run time and use nothing of Node.
 */
import type { ClockSkewStatus } from '@sluice/core';

/**
 * The server's clock against its store's: a Redis store's clock as the server measured it, or
 * `embedded` (the server keeps the limits itself: its clock is the store's, nothing to measure).
 */
export type ClockSkewView =
  ({ readonly store: 'redis' } & ClockSkewStatus) | { readonly store: 'embedded'; readonly thresholdMs: number };

/** What the dashboard and `sluice status` show: a line and its state (`ok`, `skewed`, `unknown`). */
export interface ClockSkewSummary {
  readonly text: string;
  readonly state: 'ok' | 'skewed' | 'unknown';
}

/** The view in one line, e.g. `clock: 5000 ms behind redis (± 1 ms)  OVER 1000 ms`. */
export function clockSkewSummary(view: ClockSkewView | undefined): ClockSkewSummary {
  if (view === undefined) return { text: 'clock: not reported by this server', state: 'unknown' };
  if (view.store === 'embedded') return { text: "clock: embedded store (the server's clock is the store's)", state: 'ok' };
  if (!view.measured) {
    const failed = view.failures > 0 ? `, ${view.failures} reading${view.failures === 1 ? '' : 's'} failed` : '';
    return { text: `clock: not measured against redis yet${failed}`, state: 'unknown' };
  }
  // offsetMs is the store's clock minus the server's: positive means the server is behind.
  const size = Math.round(Math.abs(view.offsetMs));
  const side = size === 0 ? 'in step with' : view.offsetMs > 0 ? `${size} ms behind` : `${size} ms ahead of`;
  const text = `clock: ${side} redis (± ${Math.ceil(view.uncertaintyMs)} ms)`;
  if (view.skewed) return { text: `${text}  OVER ${view.thresholdMs} ms`, state: 'skewed' };
  return { text, state: 'ok' };
}
