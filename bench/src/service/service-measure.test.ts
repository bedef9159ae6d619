import { describe, expect, it } from 'vitest';
import {
  WRK_REPORT_MARK,
  coresUsed,
  mergeSamples,
  parseMachineStat,
  parseProcStat,
  parseWrkReport,
  percentile,
  sumMetric,
  wrkErrors,
} from './service-measure.js';

describe('percentile', () => {
  it('takes the nearest rank', () => {
    const sorted = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).toBe(50);
    expect(percentile(sorted, 99)).toBe(99);
    expect(percentile(sorted, 99.9)).toBe(100);
    expect(percentile(sorted, 100)).toBe(100);
    expect(percentile(sorted, 0.1)).toBe(1);
  });

  it('handles one value and none', () => {
    expect(percentile([7], 50)).toBe(7);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });

  it('rounds the rank up on small sets', () => {
    // 3 values: p50 is the 2nd (1.5 rounded up), p99 the 3rd.
    expect(percentile([10, 20, 30], 50)).toBe(20);
    expect(percentile([10, 20, 30], 99)).toBe(30);
    expect(percentile([10, 20, 30], 33)).toBe(10);
  });

  it('rejects a p outside (0, 100]', () => {
    expect(() => percentile([1], 0)).toThrow(RangeError);
    expect(() => percentile([1], 101)).toThrow(RangeError);
    expect(() => percentile([1], NaN)).toThrow(RangeError);
  });
});

describe('mergeSamples', () => {
  it('merges the parts into one ascending array', () => {
    const merged = mergeSamples([new Float64Array([5, 1, 3]), [4, 2], []]);
    expect([...merged]).toEqual([1, 2, 3, 4, 5]);
    expect(percentile(merged, 50)).toBe(3);
  });

  it('sorts numerically, not as text', () => {
    expect([...mergeSamples([[100, 9, 20]])]).toEqual([9, 20, 100]);
  });
});

const report = {
  requests: 123456,
  duration_us: 2000123,
  connect: 0,
  read: 1,
  write: 2,
  status: 3,
  timeout: 4,
  p50: 850,
  p99: 4100,
  p999: 9000,
  max: 12000,
};

describe('parseWrkReport', () => {
  it('reads the report line among the rest of the output', () => {
    const stdout = `Running 2s test @ http://127.0.0.1:1234/v1/check\n  1 threads and 256 connections\n${WRK_REPORT_MARK}${JSON.stringify(report)}\n`;
    const r = parseWrkReport(stdout);
    expect(r.requests).toBe(123456);
    expect(r.durationUs).toBe(2000123);
    expect(r.errors).toEqual({ connect: 0, read: 1, write: 2, status: 3, timeout: 4 });
    expect([r.p50Us, r.p99Us, r.p999Us, r.maxUs]).toEqual([850, 4100, 9000, 12000]);
    expect(wrkErrors(r)).toBe(10);
  });

  it('fails when the line is missing', () => {
    expect(() => parseWrkReport('unable to connect to 127.0.0.1:1 Connection refused\n')).toThrow(/no report line/);
  });

  it('fails on a line that is not JSON', () => {
    expect(() => parseWrkReport(`${WRK_REPORT_MARK}{requests: 1}\n`)).toThrow(/not JSON/);
  });

  it('fails when a field is missing or not a count', () => {
    const { p99: _drop, ...noP99 } = report;
    expect(() => parseWrkReport(`${WRK_REPORT_MARK}${JSON.stringify(noP99)}`)).toThrow(/no valid p99/);
    expect(() => parseWrkReport(`${WRK_REPORT_MARK}${JSON.stringify({ ...report, read: -1 })}`)).toThrow(/no valid read/);
    expect(() => parseWrkReport(`${WRK_REPORT_MARK}${JSON.stringify({ ...report, requests: '5' })}`)).toThrow(
      /no valid requests/,
    );
  });
});

describe('parseProcStat', () => {
  // 52 fields as in proc(5); utime..cstime (14..17) are 1234 567 89 10.
  const tail = 'S 1 2 3 4 5 6 7 8 9 10 1234 567 89 10 20 0 1 0 100 200 300 ' + Array(29).fill('0').join(' ');

  it('reads user, system and children times', () => {
    expect(parseProcStat(`4242 (node) ${tail}\n`)).toEqual({ user: 1234, system: 567, childUser: 89, childSystem: 10 });
  });

  it('counts fields from the last parenthesis of the command name', () => {
    expect(parseProcStat(`4242 (we ird) (name)) ${tail}`).user).toBe(1234);
  });

  it('rejects text that is not a stat line', () => {
    expect(() => parseProcStat('')).toThrow(/not a \/proc/);
    expect(() => parseProcStat('1 (x) S 1 2')).toThrow(/field 14/);
  });
});

describe('coresUsed', () => {
  it('divides CPU seconds by wall seconds', () => {
    expect(coresUsed(150, 2, 100)).toBeCloseTo(0.75);
    expect(coresUsed(0, 2, 100)).toBe(0);
    expect(coresUsed(10, 0, 100)).toBeNaN();
  });
});

describe('sumMetric', () => {
  const text = [
    '# HELP sluice_fallback_decisions_total Decisions made by the store-failure policy',
    '# TYPE sluice_fallback_decisions_total counter',
    'sluice_fallback_decisions_total{resource="a"} 3',
    'sluice_fallback_decisions_total{resource="b b"} 4',
    'sluice_fallback_decisions_total_extra 100',
    'sluice_other{resource="a"} 50',
    'sluice_plain 7',
  ].join('\n');

  it('adds the samples of every label set, and only of that metric', () => {
    expect(sumMetric(text, 'sluice_fallback_decisions_total')).toBe(7);
    expect(sumMetric(text, 'sluice_plain')).toBe(7);
  });

  it('is 0 for a metric with no samples yet', () => {
    expect(sumMetric(text, 'sluice_missing')).toBe(0);
    expect(sumMetric('', 'sluice_plain')).toBe(0);
  });
});

describe('parseMachineStat', () => {
  it('reads the all-cores line', () => {
    const text = 'cpu  100 5 20 1000 7 1 2 3 0 0\ncpu0 50 2 10 500 3 0 1 1 0 0\nintr 12345\n';
    expect(parseMachineStat(text)).toEqual({ busy: 128, idle: 1007, steal: 3 });
  });

  it('rejects text without a cpu line', () => {
    expect(() => parseMachineStat('intr 1\n')).toThrow(/no cpu line/);
    expect(() => parseMachineStat('cpu  1 2 3\n')).toThrow(/not a cpu line/);
  });
});
