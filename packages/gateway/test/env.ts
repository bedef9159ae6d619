/**
 * Server addresses for the gateway's integration tests against real streams. A missing
 * variable fails the file loudly instead of skipping it.
 */
export function redisUrl(): string {
  const value = process.env.SLUICE_REDIS_URL;
  if (!value) throw new Error('SLUICE_REDIS_URL is not set: run the tests with "npm run test:all", which starts the servers');
  return value;
}

/** A random stream key prefix, so runs never see each other's streams. */
export function randomPrefix(): string {
  return `gw-${Math.random().toString(36).slice(2, 10)}`;
}
