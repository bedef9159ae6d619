/** The shared store conformance suite, against standalone Redis and Redis Cluster. */
import { afterAll } from 'vitest';
import { runConformance } from '../../../test/conformance.js';
import { cleanUp, cluster, sleep, standalone, type Target } from './helpers.js';

for (const target of [standalone('conf'), cluster('conf')] satisfies Target[]) {
  runConformance({
    name: `redis ${target.name}`,
    makeStore: () => target.store(),
    advance: sleep,
    realTime: true,
  });
  afterAll(() => cleanUp(target.admin(), target.prefix));
}
