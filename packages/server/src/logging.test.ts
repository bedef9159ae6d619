import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { REDACTED, WarningThrottle, chooseLogFormat, createLogger, redactFields, redactUrl, redactingLogger } from './logging.js';

/** A logger writing its lines into an array. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { lines, logger };
}

describe('redactUrl', () => {
  it('censors sensitive query values and user info, and keeps the rest', () => {
    expect(redactUrl('/v1/admin/rules?token=s3cret&version=2')).toBe(`/v1/admin/rules?token=${REDACTED}&version=2`);
    expect(redactUrl('/x?api_key=a&Secret=b&PASSWORD=c&access%5Ftoken=d&keep=e#frag')).toBe(
      `/x?api_key=${REDACTED}&Secret=${REDACTED}&PASSWORD=${REDACTED}&access%5Ftoken=${REDACTED}&keep=e#frag`,
    );
    expect(redactUrl('redis://user:pw@host:6379/0')).toBe(`redis://${REDACTED}@host:6379/0`);
    expect(redactUrl('/plain/path')).toBe('/plain/path');
    expect(redactUrl('/x?%E0%A4%A=1&flag')).toBe('/x?%E0%A4%A=1&flag');
    expect(redactUrl(42)).toBe(42);
  });
});

describe('redactFields', () => {
  it('censors authorization and credential-like entries of headers and metadata', () => {
    const metadata = { getMap: () => ({ authorization: 'Bearer x', 'x-api-key': 'k', 'sluice-client-id': 'gw-1' }) };
    expect(redactFields(metadata)).toEqual({ authorization: REDACTED, 'x-api-key': REDACTED, 'sluice-client-id': 'gw-1' });
    expect(redactFields({ Authorization: 'Basic y', cookie: 'c', accept: '*/*' })).toEqual({
      Authorization: REDACTED,
      cookie: REDACTED,
      accept: '*/*',
    });
  });
});

describe('redactingLogger', () => {
  it('keeps credentials out of every line, whatever field carries them', () => {
    const { lines, logger } = capture();
    redactingLogger(logger).warn(
      {
        route: '/v1/admin/rules?token=t0k3n',
        url: '/a?secret=s',
        headers: { authorization: 'Bearer h' },
        req: { headers: { authorization: 'Bearer r' } },
        authorization: 'Bearer top',
      },
      'refused',
    );
    const text = JSON.stringify(lines);
    for (const secret of ['t0k3n', 'secret=s', 'Bearer']) expect(text).not.toContain(secret);
    expect(lines[0]).toMatchObject({ route: `/v1/admin/rules?token=${REDACTED}`, msg: 'refused' });
  });
});

describe('WarningThrottle', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('logs the first of a kind, then one summary per interval, and counts every one', () => {
    vi.useFakeTimers();
    const { lines, logger } = capture();
    const counted: string[] = [];
    const warnings = new WarningThrottle(logger, (e) => counted.push(e), 1000);
    for (let i = 0; i < 500; i++) warnings.warn('refused', { i }, 'call refused');
    warnings.error('failed', {}, 'call failed');
    expect(lines.map((l) => l.msg)).toEqual(['call refused', 'call failed']);
    vi.advanceTimersByTime(1000);
    expect(lines.slice(2)).toEqual([expect.objectContaining({ event: 'refused', repeated: 499, level: 40 })]);
    // A quiet interval ends the burst: the next one is logged in full again.
    vi.advanceTimersByTime(2000);
    warnings.warn('refused', { i: 500 }, 'call refused');
    warnings.warn('refused', { i: 501 }, 'call refused');
    expect(lines.slice(3).map((l) => l.msg)).toEqual(['call refused']);
    warnings.close();
    expect(lines.slice(4)).toEqual([expect.objectContaining({ event: 'refused', repeated: 1 })]);
    expect(counted.filter((e) => e === 'refused')).toHaveLength(502);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('chooseLogFormat', () => {
  it('writes pretty lines on a terminal and JSON elsewhere, unless told which', () => {
    expect(chooseLogFormat('auto', true)).toBe('pretty');
    expect(chooseLogFormat('auto', false)).toBe('json');
    expect(chooseLogFormat('json', true)).toBe('json');
    expect(chooseLogFormat('json', false)).toBe('json');
    expect(chooseLogFormat('pretty', false)).toBe('pretty');
    expect(chooseLogFormat('pretty', true)).toBe('pretty');
  });
});

describe('createLogger, pretty', () => {
  /** One line logged in the pretty format, as written. */
  async function prettyLine(isTty: boolean): Promise<string> {
    let text = '';
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        text += chunk.toString('utf8');
        done();
      },
    });
    const logger = await createLogger('info', 'pretty', isTty, sink);
    logger.warn({ resource: 'api' }, 'store unreachable');
    return text;
  }
  /** An ANSI escape sequence (ESC, then '['). */
  const ANSI = new RegExp(`${String.fromCharCode(27)}\\[`);

  afterEach(() => vi.unstubAllEnvs());

  it('colours a terminal, and not with NO_COLOR set or off a terminal', async () => {
    vi.stubEnv('NO_COLOR', '');
    const coloured = await prettyLine(true);
    expect(coloured).toContain('store unreachable');
    expect(coloured).toMatch(ANSI);
    vi.stubEnv('NO_COLOR', '1');
    const plain = await prettyLine(true);
    expect(plain).toContain('store unreachable');
    expect(plain).not.toMatch(ANSI);
    vi.stubEnv('NO_COLOR', '');
    expect(await prettyLine(false)).not.toMatch(ANSI);
  });
});
