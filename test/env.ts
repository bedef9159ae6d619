/**
 * Where the real servers started by scripts/test-all.sh listen. Integration tests fail loudly
 * when these are missing instead of skipping, so a misconfigured run cannot pass silently.
 */
function required(name: string): string {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the tests with "npm run test:all", which starts the servers`);
  }
  return value;
}

/** URL of the standalone Redis, e.g. redis://127.0.0.1:6390. */
export function redisUrl(): string {
  return required('SLUICE_REDIS_URL');
}

/** Redis Cluster seed nodes as host:port pairs. */
export function redisClusterNodes(): { host: string; port: number }[] {
  return required('SLUICE_REDIS_CLUSTER_NODES')
    .split(',')
    .map((hp) => {
      const [host, port] = hp.trim().split(':');
      return { host: host!, port: Number(port) };
    });
}

/** A random prefix so tests never see each other's keys. */
export function randomPrefix(label = 't'): string {
  return `${label}:${Math.random().toString(36).slice(2, 10)}:`;
}
