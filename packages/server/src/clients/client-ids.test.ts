import { describe, expect, it } from 'vitest';
import { ClientCounter, MAX_TRACKED_CLIENTS } from './client-ids.js';

describe('ClientCounter', () => {
  it('counts distinct ids over a sliding window when they name no heartbeat, bounded', () => {
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

  it('counts a client until it misses three heartbeats, and not at all once it said goodbye', () => {
    let now = 0;
    const c = new ClientCounter(60_000, () => now);
    c.note('poller', '2000'); // polls every 2 s: counted for 6 s
    c.note('quick', '100'); // 300 ms would be too short a grace: at least 3 s
    c.note('silent'); // no heartbeat: the 60 s window
    c.note('odd', 'soon'); // a malformed heartbeat is no heartbeat
    expect(c.count()).toBe(4);
    now = 3_500;
    expect(c.count()).toBe(3); // quick missed its heartbeats
    now = 6_500;
    expect(c.count()).toBe(2); // so did poller
    c.note('restarted', '1000');
    expect(c.goodbye('restarted')).toBe(true);
    expect(c.goodbye('never-seen')).toBe(false);
    now = 7_600;
    expect(c.count()).toBe(2);
    now = 60_001;
    expect(c.count()).toBe(0);
  });
});
