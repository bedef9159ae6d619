import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { promMetrics } from './prom.js';

describe('promMetrics', () => {
  it("names each metric after the caller's prefix, else the default, on the given registry", async () => {
    const registry = new Registry();
    promMetrics({ registry }, 'sluice_x_').counter({ name: 'calls_total', help: 'Calls' }).inc(2);
    promMetrics({ registry, prefix: 'mine_' }, 'sluice_x_').gauge({ name: 'level', help: 'Level' }).set(3);
    promMetrics({ registry })
      .histogram({ name: 'bare_seconds', help: 'Bare', buckets: [1] })
      .observe(0.5);
    const text = await registry.metrics();
    expect(text).toContain('# HELP sluice_x_calls_total Calls\n# TYPE sluice_x_calls_total counter\nsluice_x_calls_total 2');
    expect(text).toContain('# TYPE mine_level gauge\nmine_level 3');
    expect(text).toContain('bare_seconds_bucket{le="1"} 1');
  });

  it('passes labels and collect callbacks through', async () => {
    const registry = new Registry();
    let reads = 0;
    promMetrics({ registry }, 'p_').gauge({
      name: 'reads',
      help: 'Reads',
      labelNames: ['side'] as const,
      collect() {
        this.set({ side: 'a' }, ++reads);
      },
    });
    expect(await registry.metrics()).toContain('p_reads{side="a"} 1');
    expect(await registry.metrics()).toContain('p_reads{side="a"} 2');
  });

  it('refuses a name registered twice on one registry, as prom-client does', () => {
    const m = promMetrics({ registry: new Registry() }, 'p_');
    m.counter({ name: 'calls_total', help: 'Calls' });
    expect(() => m.counter({ name: 'calls_total', help: 'Calls' })).toThrow(/already been registered/);
  });
});
