import { describe, expect, it } from 'vitest';
import { ServerMetrics } from './metrics.js';

describe('hot-key metrics', () => {
  it('count mitigations by resource and action, never by key, and drop back when a key cools', async () => {
    const metrics = new ServerMetrics();
    const hot = (key: string, active: boolean) =>
      metrics.observer.hotKey?.({ resource: 'api:payments', key, mitigation: 'lease', active });
    hot('channel-1', true);
    hot('channel-2', true);
    hot('channel-1', false);
    const text = await metrics.registry.metrics();
    expect(text).toContain('sluice_hot_keys_mitigated{resource="api:payments",action="lease"} 1');
    expect(text).toContain('sluice_hot_key_mitigations_total{resource="api:payments",action="lease"} 2');
    expect(text).not.toContain('channel-');
  });
});
