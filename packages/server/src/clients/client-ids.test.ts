import { describe, expect, it } from 'vitest';
import { ClientCounter, MAX_TRACKED_CLIENTS } from './client-ids.js';

describe('ClientCounter', () => {
  it('counts distinct ids over a sliding window, bounded', () => {
    let now = 0;
    const c = new ClientCounter(60_000, () => now);
    c.note('a');
    c.note('b');
    c.note('a');
    c.note(undefined);
    c.note('x'.repeat(65));
    expect(c.count()).toBe(2);
    now = 30_000;
    c.note('a');
    now = 70_000;
    expect(c.count()).toBe(1);
    for (let i = 0; i < MAX_TRACKED_CLIENTS + 50; i++) c.note(`id-${i}`);
    expect(c.count()).toBe(MAX_TRACKED_CLIENTS);
  });
});
