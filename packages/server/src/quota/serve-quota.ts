import type { LiveRules } from '../live-rules.js';
import type { WarningThrottle } from '../logging.js';
import type { RateLimitService } from '../service/service.js';
import { QuotaService } from './quota-service.js';

/**
 * The quota service of `sluice serve`: buckets matched in the active rules' `quota` section,
 * assignments reserved and returned through the service (so a resource's rollout and store
 * failure policy apply as for every other caller, and a key's rate is that of the limits deciding
 * it, a rollout's candidate's in its cohort), failures logged. `rules` and `service` are
 * read at each use: the quota service is made before them, so rule changes can be pushed.
 */
export function quotaService(
  rules: () => LiveRules,
  service: () => Pick<RateLimitService, 'reserve' | 'adjust' | 'limitsOf'>,
  warnings: WarningThrottle,
): QuotaService {
  return new QuotaService({
    rules: () => rules().version?.ruleSet,
    reserve: (item) => service().reserve(item),
    adjust: (item) => service().adjust(item),
    limitsOf: (resource, key) => service().limitsOf(key === '' ? { resource } : { resource, key }),
    now: () => Date.now(),
    onError: (err) => warnings.warn('rlqs_assignment_failed', { err }, 'a quota assignment failed; its bucket is abandoned'),
  });
}
