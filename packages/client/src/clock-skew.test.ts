import { ClockSkewMonitor, ManualClock, isSluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { clientClockSkew, serviceTimeSource } from './clock-skew.js';
import type { Answer, Transport } from './transport.js';

/** A service answering `/v1/time` with `body` (status 200 unless given). */
function service(body: unknown, status = 200) {
  const paths: string[] = [];
  const transport: Transport = {
    call: (path) => {
      paths.push(path);
      return Promise.resolve({ status, body } satisfies Answer);
    },
    close: () => Promise.resolve(),
  };
  return { transport, paths };
}

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  return undefined;
}

describe('serviceTimeSource', () => {
  it("reads the service's estimate of the store clock with its uncertainty", async () => {
    const { transport, paths } = service({ timeMs: 1_780_000_000_123.5, uncertaintyMs: 0.7, store: 'redis' });
    expect(await serviceTimeSource(transport)()).toEqual({ timeMs: 1_780_000_000_123.5, uncertaintyMs: 0.7 });
    expect(paths).toEqual(['/v1/time']);
  });

  it("passes the service's error on and refuses an answer without a time", async () => {
    const notReady = service({ error: { code: 'SLUICE_ERR_NOT_READY', message: "Redis' clock has not been read yet" } }, 503);
    expect(await failure(serviceTimeSource(notReady.transport)())).toMatchObject({ code: 'SLUICE_ERR_NOT_READY' });
    for (const body of [{}, { timeMs: 'x', uncertaintyMs: 0 }, { timeMs: 5, uncertaintyMs: -1 }, null]) {
      const err = await failure(serviceTimeSource(service(body).transport)());
      expect(isSluiceError(err, 'SLUICE_ERR_STORE_PROTOCOL')).toBe(true);
    }
  });
});

describe('clientClockSkew', () => {
  const { transport } = service({ timeMs: 0, uncertaintyMs: 0 });
  const clock = new ManualClock();

  it('is off unless asked for, and takes the settings given', async () => {
    expect(clientClockSkew(undefined, transport, clock, undefined)).toBeUndefined();
    expect(clientClockSkew(false, transport, clock, undefined)).toBeUndefined();
    const m = clientClockSkew({ intervalMs: 5000, thresholdMs: 200 }, transport, clock, undefined)!;
    expect(m).toBeInstanceOf(ClockSkewMonitor);
    expect(m.options).toMatchObject({ intervalMs: 5000, thresholdMs: 200, name: 'sluice service' });
    await m.close();
  });

  it('refuses bad settings with the field named', () => {
    for (const [setting, field] of [
      ['yes', 'clockSkew'],
      [{ intervalMs: 1 }, 'intervalMs'],
    ] as const) {
      let error: unknown;
      try {
        clientClockSkew(setting as never, transport, clock, undefined);
      } catch (err) {
        error = err;
      }
      expect(isSluiceError(error, 'SLUICE_ERR_INVALID_OPTIONS')).toBe(true);
      expect((error as { field?: string }).field).toBe(field);
    }
  });
});
