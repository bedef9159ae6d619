import { ManualClock, MemoryStore } from '@sluice/core';
import { runConformance } from '../conformance.js';

const clock = new ManualClock(1_700_000_000_000);

runConformance({
  name: 'memory (manual clock)',
  makeStore: () => new MemoryStore({ clock }),
  advance: async (ms) => clock.advance(ms),
  realTime: false,
});
