import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  CONNECTION_COST,
  FairTurns,
  LEAD,
  MAX_IN_FLIGHT,
  PAUSE_MS,
  RETURN_MS,
  WORK_PER_TURN,
  type FairTurnsOptions,
} from './fair-turns.js';

/** One turn of the loop: the runs scheduled by the turns before it have happened. */
const turn = () => new Promise<void>((r) => setImmediate(r));

/** A FairTurns on a manual clock whose loop is as busy as `load.utilization` says. */
function harness(options: Partial<FairTurnsOptions> = {}) {
  const clock = { now: 0 };
  const load = { utilization: 1 };
  const turns = new FairTurns({ now: () => clock.now, utilization: () => load.utilization, ...options });
  const started: Record<string, number> = {};
  const enter = (client: string, cost: number, then?: () => void) =>
    turns.enter(client, cost, () => {
      started[client] = (started[client] ?? 0) + cost;
      then?.();
    });
  /** A client that always has 8 requests of 20 units waiting (each one started sends the next). */
  const flood = () => {
    const next = () => enter('flood', 20, next);
    for (let i = 0; i < 8; i++) next();
  };
  /**
   * A client that sends one-unit requests one at a time, the next `thinkMs` after each one
   * started (at once when 0), until stopped.
   */
  const neighbour = (thinkMs: number) => {
    let stopped = false;
    const next = () => {
      if (!stopped) enter('neighbour', 1, () => (thinkMs === 0 ? next() : setTimeout(next, thinkMs)));
    };
    next();
    return { stop: () => (stopped = true) };
  };
  /** Moves the clock on by `ms` and lets the turns (and any timer that fell due) run. */
  const advance = async (ms: number) => {
    clock.now += ms;
    vi.advanceTimersByTime(ms);
    await turn();
  };
  return { turns, clock, load, started, enter, advance, flood, neighbour };
}

describe('FairTurns', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('starts the requests of one turn together, after the turn, in order', async () => {
    const { turns } = harness();
    const order: number[] = [];
    for (const n of [1, 2, 3]) turns.enter('c', 1, () => order.push(n));
    expect(order).toEqual([]);
    await turn();
    expect(order).toEqual([1, 2, 3]);
    turns.close();
  });

  it('starts at most a turn of work per turn, clients in turn, and the rest in the next turns', async () => {
    const { turns } = harness();
    const order: string[] = [];
    for (let i = 0; i < 20; i++) turns.enter('flood', 4, () => order.push('flood'));
    turns.enter('other', 1, () => order.push('other'));
    await turn();
    // The other client's request is in the first turn, after one of the flood's.
    expect(order.slice(0, 2)).toEqual(['flood', 'other']);
    // Two clients waiting: a quarter of a turn's work, the request that crosses it included.
    expect(order.length).toBeLessThanOrEqual(Math.ceil(WORK_PER_TURN / 4 / 4) + 1);
    while (turns.size > 0) await turn();
    expect(order.length).toBe(21);
    turns.close();
  });

  it('refuses a client past its queue bound with SLUICE_ERR_CLIENT_BUSY, and still serves the others', async () => {
    const { turns, enter, started } = harness({ maxClientQueued: 3 });
    for (let i = 0; i < 3; i++) enter('flood', 1);
    expect(() => enter('flood', 1)).toThrow(expect.objectContaining({ code: 'SLUICE_ERR_CLIENT_BUSY' }));
    enter('other', 1);
    await turn();
    expect(started).toEqual({ flood: 3, other: 1 });
    turns.close();
  });

  it('keeps running the others when one run throws, and reports what it threw', async () => {
    const errors: unknown[] = [];
    const { turns, enter, started } = harness({ onError: (err) => errors.push(err) });
    turns.enter('c', 1, () => {
      throw new Error('boom');
    });
    enter('c', 1);
    await turn();
    expect(errors).toEqual([new Error('boom')]);
    expect(started).toEqual({ c: 1 });
    turns.close();
  });

  it('shares a busy loop equally by cost between a flood of big requests and a client of small ones', async () => {
    const { turns, started, advance, flood, neighbour } = harness();
    // The flood always has requests waiting; the neighbour sends one-unit requests one after
    // the other, each as soon as the last one started.
    flood();
    neighbour(0);
    for (let t = 0; t < 2000; t++) await advance(0.25);
    // Equal shares of the cost started, within the lead and a request or two.
    expect(started.neighbour!).toBeGreaterThan(1000);
    expect(Math.abs(started.flood! - started.neighbour!)).toBeLessThanOrEqual(LEAD + 2 * 20);
    turns.close();
  });

  it("keeps a closed loop's share for it while its next request is on its way", async () => {
    const { turns, started, advance, flood, neighbour } = harness();
    flood();
    // The neighbour asks again 1 ms after each start: it has nothing waiting most of the time.
    neighbour(1);
    for (let t = 0; t < 4000; t++) await advance(0.25);
    // 1,000 ms: the neighbour started about a request per ms. A scheduler that only orders
    // what waits would have started 80 units of the flood's per ms (a turn's worth every
    // 0.25 ms); here the flood waits for the neighbour, and is given as much as it.
    expect(started.neighbour!).toBeGreaterThan(900);
    expect(started.flood!).toBeLessThanOrEqual(started.neighbour! + LEAD + 20);
    turns.close();
  });

  it('holds no one back for a client that asks rarely', async () => {
    const { turns, started, advance, flood, neighbour } = harness();
    flood();
    // The neighbour asks again 4 x RETURN_MS after each start: well past RETURN_MS.
    neighbour(4 * RETURN_MS);
    for (let t = 0; t < 4000; t++) await advance(0.25);
    expect(started.neighbour!).toBeGreaterThanOrEqual(Math.floor((0.9 * 1000) / (4 * RETURN_MS)));
    // The flood had (nearly) every turn: 20 units each.
    expect(started.flood!).toBeGreaterThan(0.9 * 4000 * 20);
    turns.close();
  });

  it('holds a small request for no closed loop that takes many times its time to ask again', async () => {
    const { turns, started, advance, enter } = harness();
    // A client with one-unit requests always waiting, beside a closed loop of 20-unit requests
    // that asks again 5 ms after each start (within RETURN_MS).
    const next = () => enter('quick', 1, next);
    for (let i = 0; i < 8; i++) next();
    const loop = () => enter('loop', 20, () => setTimeout(loop, 5));
    loop();
    for (let t = 0; t < 4000; t++) await advance(0.25);
    // Held for the loop, the quick client would have started about as much as it (20 units
    // every 5 ms): a one-unit request waits for no one whose gap is HOLD_GAP_FACTOR times its time.
    expect(started.loop!).toBeGreaterThan(0.9 * 200 * 20);
    expect(started.quick!).toBeGreaterThan(10 * started.loop!);
    turns.close();
  });

  it('never holds a lone client back, however much it takes', async () => {
    const { turns, started, advance, flood } = harness();
    flood();
    for (let t = 0; t < 100; t++) await advance(0.25);
    // Every turn starts a turn's work: WORK_PER_TURN, the request that crosses it included.
    expect(started.flood!).toBeGreaterThanOrEqual(100 * WORK_PER_TURN);
    turns.close();
  });

  it('holds nobody back while the loop is not busy', async () => {
    const { turns, started, advance, load, flood, neighbour } = harness();
    load.utilization = 0.5;
    flood();
    neighbour(1);
    for (let t = 0; t < 400; t++) await advance(0.25);
    expect(started.flood!).toBeGreaterThanOrEqual(400 * 20);
    turns.close();
  });

  it('lets a client back after a pause in level with the others, not ahead of them by its pause', async () => {
    const { turns, started, advance, flood, neighbour } = harness();
    flood();
    const first = neighbour(1);
    for (let t = 0; t < 400; t++) await advance(0.25);
    // A pause of 4 x PAUSE_MS, during which the flood has the loop.
    first.stop();
    for (let t = 0; t < 16 * PAUSE_MS; t++) await advance(0.25);
    // Back in a closed loop: the flood goes on at once, level with the neighbour, not held back
    // until the neighbour has used what it did not during its pause.
    neighbour(1);
    const before = started.flood!;
    for (let t = 0; t < 40; t++) await advance(0.25);
    expect(started.flood! - before).toBeGreaterThanOrEqual(20);
    turns.close();
  });

  it('charges a request its time when its work took longer than its cost says', async () => {
    const { turns, clock, started, advance } = harness();
    // Two clients, each with 8 one-unit requests waiting at all times; the slow one's take 50
    // times as long to run (the clock moves while they run).
    const backlog = (client: string, runMs: number) => {
      const next = () =>
        turns.enter(client, 1, () => {
          clock.now += runMs;
          started[client] = (started[client] ?? 0) + 1;
          next();
        });
      for (let i = 0; i < 8; i++) next();
    };
    backlog('quick', 0.01);
    backlog('slow', 0.5);
    for (let t = 0; t < 1000; t++) await advance(0);
    // Charged by their size alone, both would start as many; charged their time, the quick
    // client starts many more (its share of the loop's time, not of the requests).
    expect(started.quick!).toBeGreaterThan(5 * started.slow!);
    turns.close();
  });

  it('charges an address for each connection it opens', async () => {
    const { turns, started, advance, enter } = harness();
    const backlog = (client: string) => {
      const next = () => enter(client, 1, next);
      for (let i = 0; i < 8; i++) next();
    };
    backlog('a');
    backlog('b');
    for (let i = 0; i < 10; i++) turns.connected('b');
    for (let t = 0; t < 200; t++) await advance(0.25);
    // b's connections count as work given to it: a starts that much more, within the lead.
    expect(started.a! - started.b!).toBeGreaterThanOrEqual(10 * CONNECTION_COST - LEAD - 2);
    turns.close();
  });

  it("bounds a client's requests in flight while another has work, and not while it is alone", async () => {
    const { turns, started, enter } = harness();
    const finishers: (() => void)[] = [];
    const follow = (finish: () => void) => void finishers.push(finish);
    // More than the bound and the two that start once two answers are out.
    const queued = Math.ceil(MAX_IN_FLIGHT / 10) + 4;
    for (let i = 0; i < queued; i++) turns.enter('flood', 10, () => (started.flood = (started.flood ?? 0) + 10), follow);
    // Another client with a request in flight (not yet answered) and one waiting.
    turns.enter(
      'other',
      1,
      () => undefined,
      () => undefined,
    );
    enter('other', 1);
    for (let t = 0; t < 20; t++) await turn();
    // Held once MAX_IN_FLIGHT units are out: the request that crosses it is the last to start.
    expect(started.flood).toBe(Math.ceil(MAX_IN_FLIGHT / 10) * 10);
    // Two answers out: two more start.
    finishers.shift()!();
    finishers.shift()!();
    for (let t = 0; t < 20; t++) await turn();
    expect(started.flood).toBe(Math.ceil(MAX_IN_FLIGHT / 10) * 10 + 20);
    turns.close();

    // Alone, nothing bounds it.
    const alone = harness();
    for (let i = 0; i < queued; i++)
      alone.turns.enter(
        'flood',
        10,
        () => (alone.started.flood = (alone.started.flood ?? 0) + 10),
        () => undefined,
      );
    for (let t = 0; t < 20; t++) await turn();
    expect(alone.started.flood).toBe(queued * 10);
    alone.turns.close();
  });
});
