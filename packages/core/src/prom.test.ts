import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { promMetrics, registerBuildInfo } from './prom.js';

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

describe('registerBuildInfo', () => {
  it("sets sluice_build_info to 1 with the manifest's version, one family shared by the packages of a registry", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-build-info-'));
    try {
      const manifest = (name: string, body: object) => {
        writeFileSync(join(dir, name), JSON.stringify(body));
        return pathToFileURL(join(dir, name));
      };
      const registry = new Registry();
      registerBuildInfo(registry, manifest('a.json', { name: '@sluice/a', version: '1.2.3' }));
      registerBuildInfo(registry, manifest('b.json', { name: '@sluice/b', version: '1.2.3' }));
      registerBuildInfo(registry, manifest('c.json', { name: '@sluice/c', version: '1.3.0' }));
      const text = await registry.metrics();
      expect(text.match(/^sluice_build_info\{.*$/gm)).toEqual([
        `sluice_build_info{version="1.2.3",node_version="${process.version}"} 1`,
        `sluice_build_info{version="1.3.0",node_version="${process.version}"} 1`,
      ]);
      // A manifest that cannot be read (a bundled package) or has no version: said so, not thrown.
      const unknown = new Registry();
      registerBuildInfo(unknown, manifest('d.json', { name: 'x' }));
      registerBuildInfo(unknown, pathToFileURL(join(dir, 'missing.json')));
      expect((await unknown.metrics()).match(/^sluice_build_info\{.*$/gm)).toEqual([
        `sluice_build_info{version="unknown",node_version="${process.version}"} 1`,
      ]);
      const taken = new Registry();
      promMetrics({ registry: taken }).counter({ name: 'sluice_build_info', help: 'Not a gauge' });
      expect(() => registerBuildInfo(taken, manifest('a.json', { version: '1' }))).toThrow(/is no gauge/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("reads this package's own manifest", async () => {
    const registry = new Registry();
    registerBuildInfo(registry, new URL('../package.json', import.meta.url));
    const [value] = (await registry.getSingleMetric('sluice_build_info')!.get()).values;
    expect(value?.labels.version).toMatch(/^\d+\.\d+\.\d+/);
  });
});
