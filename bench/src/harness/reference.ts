/**
 * The reference: the least an exact limiter on Redis can do per decision, as a yardstick for
 * the throughput part (not a product path). GCRA with one number per key (its theoretical
 * arrival time), time from Redis `TIME`, and every call of one event-loop turn in one script
 * call, so it pays one round trip per turn, one `TIME` per round trip and one GET and one SET
 * per decision, and nothing else: no policies, no validation, no error handling beyond ioredis'.
 */
import { Redis } from 'ioredis';
import type { Decider } from './contenders.js';

/**
 * KEYS: one key per call of the turn (a key may repeat; the calls apply in order).
 * ARGV[1]: the emission interval T in µs (window / limit), ARGV[2]: the tolerance in µs
 * (burst x T). Returns one 1 (admitted) or 0 (denied) per key.
 */
const GCRA_LUA = `
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local T, tau = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local new_tat = tat + T
  if new_tat - now <= tau then
    redis.call('SET', KEYS[i], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`;

interface ReferenceClient extends Redis {
  referenceGcra(...args: (string | number)[]): Promise<number[]>;
}

/** The reference over its own ioredis client: `limit` per `windowMs`, burst `burst`. */
export async function referenceDecider(
  redisUrl: string,
  keyPrefix: string,
  limit: number,
  windowMs: number,
  burst: number,
): Promise<Decider> {
  const client = new Redis(redisUrl, { lazyConnect: true }) as ReferenceClient;
  // defineCommand sends EVALSHA and falls back to EVAL when the server lacks the script.
  client.defineCommand('referenceGcra', { lua: GCRA_LUA });
  await client.connect();
  const intervalUs = (windowMs * 1000) / limit;
  const interval = String(intervalUs);
  const tolerance = String(burst * intervalUs);
  let keys: string[] = [];
  let settles: ((allowed: boolean) => void)[] = [];
  let fails: ((error: unknown) => void)[] = [];
  const flush = (): void => {
    const batch = keys;
    const resolve = settles;
    const reject = fails;
    keys = [];
    settles = [];
    fails = [];
    client.referenceGcra(batch.length, ...batch, interval, tolerance).then(
      (reply) => reply.forEach((admitted, i) => resolve[i]!(admitted === 1)),
      (error: unknown) => reject.forEach((f) => f(error)),
    );
  };
  return {
    decide: (key) =>
      new Promise<boolean>((resolve, reject) => {
        if (keys.length === 0) process.nextTick(flush);
        keys.push(keyPrefix + key);
        settles.push(resolve);
        fails.push(reject);
      }),
    close: async () => {
      await client.quit();
    },
  };
}
