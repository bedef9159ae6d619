/** mulberry32: a small seeded generator for the server's tests, so a failing run can be replayed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Milliseconds to the next of random (Poisson) arrivals at `perSecond` a second, drawn from `random`. */
export function arrivalGapMs(random: () => number, perSecond: number): number {
  return (-Math.log(1 - random()) * 1000) / perSecond;
}
