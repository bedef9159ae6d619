import { describe, expect, it } from 'vitest';
import { ManualClock } from './clock.js';
import { Degradation, secondsText } from './degradation.js';
import { ErrorCodes, SluiceError } from './errors.js';
import { errorSummary, reasonOf, type Logger } from './log.js';

/** A Node system error as ioredis and net report a refused connection. */
function refused(): Error {
  return Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), {
    code: 'ECONNREFUSED',
    errno: -111,
    syscall: 'connect',
    address: '127.0.0.1',
    port: 6379,
  });
}

function recording() {
  const lines: { level: string; fields: Record<string, unknown>; msg: string }[] = [];
  const logger: Logger = {
    info: (fields, msg) => lines.push({ level: 'info', fields: fields as Record<string, unknown>, msg }),
    warn: (fields, msg) => lines.push({ level: 'warn', fields: fields as Record<string, unknown>, msg }),
  };
  return { lines, logger };
}

describe('errorSummary', () => {
  it('keeps the code, the message and the system error under it; never the stack', () => {
    const err = new SluiceError(ErrorCodes.STORE_UNAVAILABLE, 'Redis is unavailable: connect ECONNREFUSED 127.0.0.1:6379', {
      cause: refused(),
    });
    expect(errorSummary(err)).toEqual({
      code: 'SLUICE_ERR_STORE_UNAVAILABLE',
      message: 'Redis is unavailable: connect ECONNREFUSED 127.0.0.1:6379',
      cause: 'ECONNREFUSED 127.0.0.1:6379',
    });
    expect(JSON.stringify(errorSummary(err))).not.toContain('    at ');
    expect(reasonOf(err)).toBe('ECONNREFUSED 127.0.0.1:6379');
    expect(reasonOf(refused())).toBe('ECONNREFUSED 127.0.0.1:6379');
    expect(reasonOf(new SluiceError(ErrorCodes.STORE_TIMEOUT, 'Redis did not answer within 50 ms'))).toBe(
      'Redis did not answer within 50 ms',
    );
    expect(reasonOf('plain text')).toBe('plain text');
  });

  it('stops following causes after a bound (a cycle does not hang it)', () => {
    const a = new Error('a');
    const b = new Error('b', { cause: a });
    (a as { cause?: unknown }).cause = b;
    expect(errorSummary(a)).toEqual({ message: 'a' });
  });
});

describe('Degradation', () => {
  it('logs one line when it starts and one when it ends, counting the failures between', () => {
    const clock = new ManualClock();
    const { lines, logger } = recording();
    const d = new Degradation({ logger, clock, event: 'thing_down' });
    expect(d.fail(refused(), (reason) => ({ msg: `thing unreachable (${reason})`, fields: { thing: 't' } }))).toBe(true);
    for (let i = 0; i < 50; i++) {
      clock.advance(10);
      expect(d.fail(refused(), () => ({ msg: 'never logged' }))).toBe(false);
    }
    d.repeat(new Error('other'));
    expect(d.spell).toEqual({ lastedMs: 500, repeats: 51, reason: 'other' });
    expect(d.recover((s) => ({ msg: `thing back after ${secondsText(s.lastedMs)} (${s.repeats} repeats)` }))).toBe(true);
    expect(d.recover(() => ({ msg: 'never logged' }))).toBe(false);
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: {
          event: 'thing_down',
          thing: 't',
          error: { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:6379' },
        },
        msg: 'thing unreachable (ECONNREFUSED 127.0.0.1:6379)',
      },
      {
        level: 'info',
        fields: { event: 'thing_down_ended', lastedMs: 500, repeats: 51 },
        msg: 'thing back after 0.5 s (51 repeats)',
      },
    ]);
    expect(clock.pendingTimers).toBe(0);
    expect(d.spells).toBe(1);
  });

  it('summarizes once an interval while it lasts, only when something repeated', () => {
    const clock = new ManualClock();
    const { lines, logger } = recording();
    const d = new Degradation({ logger, clock, event: 'thing_down', summaryIntervalMs: 30_000 });
    d.fail(refused(), () => ({ msg: 'thing unreachable' }));
    clock.advance(30_000);
    // Nothing repeated: no summary.
    expect(lines).toHaveLength(1);
    d.repeat(refused());
    d.repeat(refused());
    clock.advance(30_000);
    expect(lines.slice(1)).toEqual([
      {
        level: 'warn',
        fields: { event: 'thing_down', lastedMs: 60_000, repeats: 2, reason: 'ECONNREFUSED 127.0.0.1:6379' },
        msg: 'thing unreachable (still, after 60 s; 2 more failures, not logged one by one)',
      },
    ]);
    clock.advance(30_000);
    expect(lines).toHaveLength(2);
    d.close();
    expect(clock.pendingTimers).toBe(0);
  });

  it('starts a new spell after a recovery', () => {
    const clock = new ManualClock();
    const { lines, logger } = recording();
    const d = new Degradation({ logger, clock, event: 'x' });
    for (let i = 0; i < 3; i++) {
      d.fail(refused(), () => ({ msg: 'down' }));
      d.fail(refused(), () => ({ msg: 'down' }));
      d.recover(() => ({ msg: 'up' }));
    }
    expect(lines.map((l) => l.msg)).toEqual(['down', 'up', 'down', 'up', 'down', 'up']);
    expect(d.spells).toBe(3);
  });
});
