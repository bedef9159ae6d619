/**
 * How test/integration/prometheus.test.ts turns the monitoring kit into PromQL it can run: the
 * dashboard's template variables filled in (an unknown one is an error, not a query with `$x`
 * left in it), and alert expressions without their threshold.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { alertRules, dashboardQueries, substituteVariables, withoutThreshold, type Dashboard } from '../prometheus.js';

describe('the monitoring kit as PromQL', () => {
  it('fills in every variable form and refuses an unknown one', () => {
    const vars = { resource: '.*', __rate_interval: '1m' };
    expect(substituteVariables('rate(x{resource=~"$resource"}[$__rate_interval])', vars, 'p')).toBe(
      'rate(x{resource=~".*"}[1m])',
    );
    expect(substituteVariables('x{resource=~"${resource}"} [[resource]] ${resource:regex}', vars, 'p')).toBe(
      'x{resource=~".*"} .* .*',
    );
    expect(() => substituteVariables('x{instance=~"$instance"}', vars, 'panel "CPU" A')).toThrow(
      'panel "CPU" A: no test value for the variable $instance',
    );
  });

  it('drops only a final top-level threshold comparison', () => {
    expect(withoutThreshold('sluice_store_healthy == 0')).toBe('sluice_store_healthy');
    expect(withoutThreshold('up{job=~".*sluice.*"} == 0')).toBe('up{job=~".*sluice.*"}');
    expect(withoutThreshold('sum by (x) (rate(a[5m]))\n/ sum by (x) (rate(b[5m]))\n> 0.05')).toBe(
      'sum by (x) (rate(a[5m]))\n/ sum by (x) (rate(b[5m]))',
    );
    expect(withoutThreshold('abs(a) - b > 1')).toBe('abs(a) - b');
    expect(withoutThreshold('a >= bool 1e-3')).toBe('a');
    // No comparison at the end, or one inside brackets: the expression stays whole.
    expect(withoutThreshold('max by (r) ((increase(a[10m]) > 0) or (a unless a offset 10m))')).toBe(
      'max by (r) ((increase(a[10m]) > 0) or (a unless a offset 10m))',
    );
    expect(withoutThreshold('sum(a > 0)')).toBe('sum(a > 0)');
  });

  it('reads every panel query and every alert of the shipped files', () => {
    const dashboard = JSON.parse(readFileSync(new URL('../../deploy/grafana/sluice.json', import.meta.url), 'utf8')) as Dashboard;
    const queries = dashboardQueries(dashboard);
    expect(queries.length).toBeGreaterThan(20);
    for (const q of queries) expect(q.expr, q.name).not.toMatch(/\$|\[\[/);
    const rules = alertRules(readFileSync(new URL('../../deploy/prometheus/sluice-alerts.yaml', import.meta.url), 'utf8'));
    expect(rules.map((r) => r.alert)).toContain('SluiceStoreUnavailable');
    expect(new Set(rules.map((r) => r.alert)).size).toBe(rules.length);
  });
});
