/**
 * Bytes per live booking in the embedded store: the heap after GC with `perKey` bookings on each
 * of `keys` keys, less the same keys without them. Prints one JSON line.
 *
 * Run after `npm run build`: `node --expose-gc scripts/booking-memory.mjs [algorithm] [perKey] [keys]`
 * (e.g. `gcra 1 100000` for a key's first booking, `gcra 100 2000` for the ones after it).
 */
import { DEFAULT_BOOKING, ManualClock, MemoryStore, compileLimits, newBookingToken } from '@sluice/core';

const [algorithm = 'gcra', perKey = '100', keys = '2000'] = process.argv.slice(2);
if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc');
const limits = compileLimits({ algorithm, limit: 10, windowMs: 1000, burst: 10 });
// Far enough ahead and large enough bounds that every booking asked for is made.
const bounds = { ...DEFAULT_BOOKING, maxBookings: 10_000, maxShare: 1, maxAheadMs: 3_600_000 };
const heap = () => {
  globalThis.gc();
  globalThis.gc();
  return process.memoryUsage().heapUsed;
};
const store = new MemoryStore({ clock: new ManualClock(1_000_000), sweepIntervalMs: 0, maxKeys: 10_000_000 });
for (let k = 0; k < +keys; k++) await store.consume({ key: `key-${k}`, limits, cost: 10, permitId: '' });
const before = heap();
let booked = 0;
for (let k = 0; k < +keys; k++) {
  for (let i = 0; i < +perKey; i++) {
    const request = { key: `key-${k}`, limits, cost: 1, id: `job-${k}-${i}`, token: newBookingToken(), create: true, bounds };
    if ((await store.book(request)).outcome === 'booked') booked++;
  }
}
const bytesPerBooking = Math.round((heap() - before) / booked);
console.log(JSON.stringify({ algorithm, keys: +keys, booked, bytesPerBooking }));
await store.close();
