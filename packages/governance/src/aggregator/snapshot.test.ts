import { compileRules as compileRuleText } from '@sluice/rules';
import { describe, expect, it } from 'vitest';
import { EventOutcome, hashValue, isStreamError, type GatewayEvent } from '@sluice/stream';
import { PartitionState } from './partition-state.js';
import { compileRules } from './rules.js';
import { encodeSnapshot, restoreSnapshot } from './snapshot.js';
import { windowStats } from './window.js';

const T0 = 1_700_000_000_000;
const RULES = `
governance:
  rules:
    burst: { type: threshold, dimension: path, limit: 5, blockMs: 4000 }
    errors: { type: expression, dimension: ip, when: 'errors >= 2 && status5xx >= 2' }
`;
const rules = (text = RULES) => compileRules(compileRuleText(text, { file: 'r.yaml' }).governance);

function ev(path: string, ip: string, status: number, at: number): GatewayEvent {
  return {
    resource: hashValue('api'),
    path: hashValue(path),
    user: 0,
    ip: hashValue(ip),
    tenant: 0,
    timestampMs: at,
    status,
    outcome: status >= 500 ? EventOutcome.ERROR : EventOutcome.PASSED,
  };
}

describe('window snapshots', () => {
  it('restores windows and holds into a fresh state', () => {
    const a = new PartitionState(3, rules(), 100);
    a.ingest(
      Array.from({ length: 6 }, (_, i) => ev('/a', '10.0.0.1', i < 2 ? 503 : 200, T0 + i * 50)),
      T0 + 300,
    );
    a.evaluate(T0 + 300);
    expect([...a.holds().keys()].sort()).toEqual([`ip:${hashValue('10.0.0.1')}`, `path:${hashValue('/a')}`]);
    const bytes = encodeSnapshot(a, T0 + 300);

    const b = new PartitionState(3, rules(), 100);
    const r = restoreSnapshot(b, bytes, T0 + 400);
    expect(r).toEqual({ values: 2, holds: 2, takenAtMs: T0 + 300 });
    const w = b.table('errors')!.get(hashValue('10.0.0.1'))!;
    expect(windowStats(w, b.rules.find((x) => x.id === 'errors')!.shape, T0 + 400)).toMatchObject({
      requests: 6,
      errors: 2,
      status5xx: 2,
    });
    expect(b.holds().get(`path:${hashValue('/a')}`)!.holdUntil).toBe(T0 + 300 + 4000);
  });

  it('skips the windows of a rule that now counts something else, keeps the others', () => {
    const a = new PartitionState(0, rules(), 100);
    a.ingest([ev('/a', '10.0.0.1', 503, T0)], T0);
    const bytes = encodeSnapshot(a, T0);
    const changed = rules(RULES.replace('dimension: path', 'dimension: tenant'));
    const b = new PartitionState(0, changed, 100);
    expect(restoreSnapshot(b, bytes, T0).values).toBe(1);
    expect(b.table('burst')!.size).toBe(0);
    expect(b.table('errors')!.size).toBe(1);
  });

  it('rejects bytes that are not a snapshot, leaving the state untouched', () => {
    const a = new PartitionState(0, rules(), 100);
    a.ingest([ev('/a', '10.0.0.1', 200, T0)], T0);
    const good = encodeSnapshot(a, T0);
    for (const bad of [new Uint8Array([1, 2, 3]), good.subarray(0, good.length - 3), new Uint8Array([...good, 0])]) {
      const b = new PartitionState(0, rules(), 100);
      let err: unknown;
      try {
        restoreSnapshot(b, bad, T0);
      } catch (e) {
        err = e;
      }
      expect(isStreamError(err, 'SLUICE_ERR_STREAM_MALFORMED')).toBe(true);
      expect(b.trackedValues).toBe(0);
    }
  });
});
