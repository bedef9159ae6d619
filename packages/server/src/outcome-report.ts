import { ServerError, ServerErrorCodes } from './errors.js';
import type { OutcomeItem } from './service.js';

/**
 * Refuses a report whose items stand for more than `max` calls in all (each item `count` calls,
 * 1 by default; refused items count nothing). Refused whole rather than clamped: a clamped
 * report would be tallied as calls nobody observed, and the reporter hears why.
 */
export function checkOutcomeCalls(items: readonly (OutcomeItem | undefined)[], max: number): void {
  let calls = 0;
  for (const item of items) if (item !== undefined) calls += item.count ?? 1;
  if (calls > max) {
    throw new ServerError(
      ServerErrorCodes.BATCH_TOO_LARGE,
      `one outcome report may stand for at most ${max} calls (the sum of its counts), got ${calls}`,
    );
  }
}
