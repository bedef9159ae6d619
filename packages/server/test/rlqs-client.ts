// The simulated Envoy of the rate limit quota service lives with the bench, which loads gateways
// with it too.
export { SimBucket, SimEnvoy, mostInWindow, type Fallback } from '../../../bench/src/service/rlqs-envoy.js';
