/** Helpers shared by the rule store tests (unit and integration). */
import type { RuleStore, RuleVersion } from '../src/index.js';

/** The error `p` rejects with; fails when it resolves. */
export async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a rejection');
}

/** The next version a listener is called with, beyond `after`. */
export function nextVersion(store: RuleStore, after: number): Promise<RuleVersion> {
  return new Promise((resolve) => {
    const stop = store.watch((v) => {
      if (v.version > after) {
        stop();
        resolve(v);
      }
    });
  });
}
