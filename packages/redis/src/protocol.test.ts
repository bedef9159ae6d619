import {
  DEFAULT_BOOKING,
  ErrorCodes,
  MAX_CORE_SHARE,
  compileLimits,
  policyText,
  type BookingBounds,
  type CompiledLimit,
} from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION, ScriptCodes } from './codes.js';
import { toStoreError } from './errors.js';
import { keyNames } from './keys.js';
import type { BatchItem, BookItem, CancelItem, ConsumeItem } from './items.js';
import { decodeReply, encodeBatch } from './protocol.js';
import { policyArg, storeCoreShare } from './validate.js';
import { unpack } from '../test/msgpack.js';

const limits = compileLimits([
  { algorithm: 'token-bucket', limit: 10, windowMs: 1000, burst: 5 },
  { algorithm: 'concurrency', limit: 2, permitTtlMs: 500, id: 'c' },
]);
const other = compileLimits({ algorithm: 'fixed-window', limit: 3 });

/** The fields every item has: `key`'s state under the policy `l`. */
function on(key: string, l: readonly CompiledLimit[]) {
  return { stateKey: keyNames('p:', key).state, limits: l, policy: policyArg(l) };
}

function consume(key: string, cost: number, permitId = '', l = limits, coreShare = 0): ConsumeItem {
  return { op: 'consume', ...on(key, l), cost, permitId, coreShare };
}

function book(
  key: string,
  cost: number,
  id: string,
  l: readonly CompiledLimit[],
  create: boolean,
  bounds: BookingBounds,
): BookItem {
  return { op: 'book', ...on(key, l), cost, id, create, bounds, maxBooked: 0, token: '' };
}

function cancel(key: string, id: string, l: readonly CompiledLimit[], token = ''): CancelItem {
  return { op: 'cancel', ...on(key, l), id, token };
}

describe('batch encoding', () => {
  it('sends each policy and each key once, permit keys only where a policy has concurrency permits', () => {
    const call = encodeBatch([
      { op: 'adjust', ...on('b', other), delta: -2, at: 0 },
      consume('a', 1, 'l1'),
      consume('b', 1, 'l2'),
      consume('a', 3, 'l3', other),
      consume('c', 3, '', other),
    ]);
    // Groups: b = 1, a = 2, c = 3; b and a have concurrency permits (listed in group order).
    expect(call.keys).toEqual(['p:{b}', 'p:{a}', 'p:{c}', 'p:{b}:l', 'p:{b}:c', 'p:{a}:l', 'p:{a}:c']);
    expect(call.args.slice(0, -1)).toEqual([
      PROTOCOL_VERSION,
      '2',
      '4,3,1000,3,10,30000,0',
      '1,10,1000,5,10,30000,0,6,2,1000,2,10,500,c',
      ...['2', '1', '2'],
    ]);
    expect(unpack(call.args.at(-1) as Buffer)).toEqual([
      ...[2, 1, 1, -2, '', 0],
      ...[1, 2, 2, 1, 'l1', 0],
      ...[1, 2, 1, 1, 'l2', 0],
      ...[1, 1, 2, 3, 'l3', 0],
      // One fixed window, no permit, nothing held back: the short consume.
      ...[6, 1, 3, 3],
    ]);
  });

  it("sends each consume's reserve as the exact double it was given", () => {
    const reserves = [0.1, 0.25, 0.1 + 0.2, 1 / 3, 0.9, 0.5000000000000001, Number.MIN_VALUE];
    const call = encodeBatch([
      ...reserves.map((r, i) => consume(`k${i}`, 1, '', other, r)),
      // Two limits: a consume that holds nothing back still goes in six values.
      consume('none', 1, '', limits),
    ]);
    const values = unpack(call.args.at(-1) as Buffer) as unknown[];
    expect(values).toHaveLength(6 * (reserves.length + 1));
    const sent = values.filter((_, i) => i % 6 === 5);
    // Object.is: the same bits, not merely close; a missing reserve is the integer 0.
    sent.forEach((r, i) => expect(Object.is(r, [...reserves, 0][i]), `reserve ${i}: ${String(r)}`).toBe(true));
  });
});

describe('consume encoding', () => {
  // The item's values in a call of two (the second a long consume on another key), which goes as
  // a MessagePack array.
  const values = (item: ConsumeItem) =>
    (unpack(encodeBatch([item, consume('z', 1)]).args.at(-1) as Buffer) as unknown[]).slice(0, -6);

  it('sends a lone one-limit consume to the lean entry, as its policy and cost', () => {
    const sliding = compileLimits({ algorithm: 'sliding-window', limit: 10 });
    expect(encodeBatch([consume('k', 7, '', other)])).toEqual({
      keys: ['p:{k}'],
      args: [policyArg(other), '7'],
      entry: 'consume_one',
    });
    // Any other lone item still goes as an array.
    expect(unpack(encodeBatch([consume('k', 7, '', sliding)]).args.at(-1) as Buffer)).toEqual([1, 1, 1, 7, '', 0]);
  });

  it('sends a consume in four values only for one token bucket, GCRA or fixed window, no permit, nothing held back', () => {
    const gcra = compileLimits({ algorithm: 'gcra', limit: 10 });
    const bucket = compileLimits({ algorithm: 'token-bucket', limit: 10, burst: 5 });
    const sliding = compileLimits({ algorithm: 'sliding-window', limit: 10 });
    for (const l of [gcra, bucket, other]) expect(values(consume('k', 2, '', l))).toEqual([6, 1, 1, 2]);
    expect(values(consume('k', 2, '', sliding))).toEqual([1, 1, 1, 2, '', 0]);
    expect(values(consume('k', 2, '', gcra, 0.25))).toEqual([1, 1, 1, 2, '', 0.25]);
    expect(values(consume('k', 2, 'p', gcra))).toEqual([1, 1, 1, 2, 'p', 0]);
    expect(values(consume('k', 2, '', limits))).toEqual([1, 1, 1, 2, '', 0]);
  });

  it("reads a short consume's result, allowed in three values and denied in four, beside a long one", () => {
    const fw = compileLimits({ algorithm: 'fixed-window', limit: 3, id: 'f' });
    const out = decodeReply(
      [0, '1700000000', '123456', ...[1, 2, 40], ...[0, 3, 40, 40], ...[1, 1, 2, 0, 40]],
      [consume('a', 1, '', fw), consume('b', 5, '', fw), consume('c', 1, '', fw, 0.5)],
    );
    const now = 1700000000123.456;
    const status = (allowed: boolean, remaining: number, retryAfterMs: number) => ({
      id: 'f',
      algorithm: 'fixed-window',
      allowed,
      limit: 3,
      remaining,
      retryAfterMs,
      resetAfterMs: 40,
    });
    expect(out).toEqual([
      { ok: true, value: { allowed: true, statuses: [status(true, 2, 0)], now } },
      { ok: true, value: { allowed: false, statuses: [status(false, 3, 40)], now } },
      { ok: true, value: { allowed: true, statuses: [status(true, 2, 0)], now } },
    ]);
  });
});

describe('booking encoding', () => {
  it('sends a booking in eleven values and a cancel in seven, the policy as the core spells it', () => {
    const token = 'the-makers-token-0123';
    const booking: BookItem = {
      ...book('a', 2, 'order-7', other, true, { maxAheadMs: 5000, claimWindowMs: 250, maxBookings: 3, maxShare: 0.5 }),
      maxBooked: 12,
      token,
    };
    const call = encodeBatch([booking, cancel('a', 'order-6', other, token)]);
    expect(call.args.slice(0, -1)).toEqual([PROTOCOL_VERSION, '1', policyText(other), '0']);
    expect(unpack(call.args.at(-1) as Buffer)).toEqual([
      ...[7, 1, 1, 2, 'order-7', 1, 5000, 250, 3, 12, token],
      ...[8, 1, 1, 0, 'order-6', 0, token],
    ]);
    expect(policyArg(limits)).toBe(policyText(limits));
  });

  it('decodes every outcome, and a span exactly as the script formatted it', () => {
    const fw = compileLimits({ algorithm: 'fixed-window', limit: 3, id: 'f' });
    const booking = (create: boolean) => book('b', 1, 'x', fw, create, DEFAULT_BOOKING);
    // Arbitrary bits, as a booking's start on a token bucket has.
    const start = 1700000000123 + 1 / 7;
    const end = start + 1 / 3;
    const status = [0, 0, 40, 40];
    const [booked, claimed, denied, missing, admitted, cancelled] = decodeReply(
      [
        ...[0, '1700000000', '123456'],
        ...[1, ...status, start.toPrecision(17), end.toPrecision(17)],
        ...[2, 1, 2, 0, 40, start.toPrecision(17), end.toPrecision(17)],
        ...[3, ...status],
        ...[4, ...status],
        ...[0, 1, 2, 0, 40],
        1,
      ],
      [booking(true), booking(true), booking(true), booking(false), booking(true), cancel('b', 'x', fw)],
    );
    const statuses = (allowed: boolean, remaining: number, retryAfterMs: number) => [
      { id: 'f', algorithm: 'fixed-window', allowed, limit: 3, remaining, retryAfterMs, resetAfterMs: 40 },
    ];
    const now = 1700000000123.456;
    expect(booked).toEqual({
      ok: true,
      value: { allowed: false, outcome: 'booked', statuses: statuses(false, 0, 40), now, booking: { start, end } },
    });
    // Object.is: the very doubles, not merely close.
    const span = (booked as { value: { booking: { start: number; end: number } } }).value.booking;
    expect(Object.is(span.start, start) && Object.is(span.end, end)).toBe(true);
    expect(claimed).toEqual({
      ok: true,
      value: { allowed: true, outcome: 'claimed', statuses: statuses(true, 2, 0), now, booking: { start, end } },
    });
    expect(denied).toEqual({ ok: true, value: { allowed: false, outcome: 'denied', statuses: statuses(false, 0, 40), now } });
    expect(missing).toEqual({ ok: true, value: { allowed: false, outcome: 'missing', statuses: statuses(false, 0, 40), now } });
    expect(admitted).toEqual({ ok: true, value: { allowed: true, outcome: 'admitted', statuses: statuses(true, 2, 0), now } });
    expect(cancelled).toEqual({ ok: true, value: true });
  });

  it('refuses booking results it cannot read, and maps the not-bookable code', () => {
    const fw = compileLimits({ algorithm: 'fixed-window', limit: 3, id: 'f' });
    const booking = book('b', 1, 'x', fw, true, DEFAULT_BOOKING);
    const code = (reply: unknown[]) =>
      decodeReply([0, '1', '0', ...reply], [booking]).map((o) => (o.ok ? 'ok' : toStoreError(o.failure).code));
    expect(code([5, 0, 0, 0, 0])).toEqual([ErrorCodes.STORE_PROTOCOL]);
    // A span as integer replies (truncated doubles) is not the protocol.
    expect(code([1, 0, 0, 0, 0, 12, 13])).toEqual([ErrorCodes.STORE_PROTOCOL]);
    expect(code([1, 0, 0, 0, 0])).toEqual([ErrorCodes.STORE_PROTOCOL]);
    expect(code([ScriptCodes.ERR_NOT_BOOKABLE])).toEqual([ErrorCodes.INVALID_OPTIONS]);
    expect(code([ScriptCodes.ERR_BOOKING_TOKEN])).toEqual([ErrorCodes.BOOKING_TOKEN]);
  });
});

describe('consume validation', () => {
  it('takes a core share between 0 and 0.9, 0 when omitted', () => {
    expect(storeCoreShare(undefined)).toBe(0);
    expect(storeCoreShare(0)).toBe(0);
    expect(storeCoreShare(0.3)).toBe(0.3);
    expect(storeCoreShare(MAX_CORE_SHARE)).toBe(0.9);
    for (const bad of [-0.1, 0.95, 1, Number.NaN, Infinity, '0.5', null]) {
      expect(() => storeCoreShare(bad), String(bad)).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_OPTIONS, field: 'coreShare' }),
      );
    }
  });
});

describe('reply decoding', () => {
  const items: BatchItem[] = [
    consume('a', 1, 'l'),
    { op: 'adjust', ...on('a', limits), delta: 1, at: 0 },
    { op: 'renew', ...on('a', limits), permitId: 'l', ttlMs: 100 },
    { op: 'reserve', ...on('b', other), min: 1, max: 5, holdMs: 0 },
  ];

  it('decodes every kind of result exactly', () => {
    const out = decodeReply(
      [0, '1700000000', '123456', ...[0, 1, 4, 0, 1000, 0, 0, 250, 499], 0, 1, ...[3, 1, 1, 0, 0, 59877]],
      items,
    );
    expect(out).toEqual([
      {
        ok: true,
        value: {
          allowed: false,
          now: 1700000000123.456,
          statuses: [
            { id: '0', algorithm: 'token-bucket', allowed: true, limit: 10, remaining: 4, retryAfterMs: 0, resetAfterMs: 1000 },
            { id: 'c', algorithm: 'concurrency', allowed: false, limit: 2, remaining: 0, retryAfterMs: 250, resetAfterMs: 499 },
          ],
        },
      },
      { ok: true, value: undefined },
      { ok: true, value: true },
      {
        ok: true,
        value: {
          allowed: true,
          granted: 3,
          now: 1700000000123.456,
          statuses: [
            { id: '0', algorithm: 'fixed-window', allowed: true, limit: 3, remaining: 0, retryAfterMs: 0, resetAfterMs: 59877 },
          ],
        },
      },
    ]);
  });

  it('keeps huge figures that Redis integers could not carry', () => {
    const [r] = decodeReply(
      [0, '1', '0', 0, 0, 0, '31536000000000000000', '31536000000000000000', 0, 0, 0, 0],
      items.slice(0, 1),
    );
    expect(r).toMatchObject({ ok: true, value: { statuses: [{ retryAfterMs: 31536000000000000000 }, {}] } });
  });

  it('turns script codes and malformed replies into typed failures', () => {
    const code = (reply: unknown) => decodeReply(reply, items).map((o) => (o.ok ? 'ok' : toStoreError(o.failure).code));
    expect(code([ScriptCodes.ERR_PROTOCOL_VERSION, 'v2'])).toEqual(Array(4).fill(ErrorCodes.STORE_PROTOCOL));
    expect(code([ScriptCodes.ERR_BAD_ARGUMENT, 'item 1'])).toEqual(Array(4).fill(ErrorCodes.STORE_PROTOCOL));
    expect(code('OK')).toEqual(Array(4).fill(ErrorCodes.STORE_PROTOCOL));
    expect(code([0, '1', '0', 1, 1, 1, 1, 1])).toEqual(Array(4).fill(ErrorCodes.STORE_PROTOCOL));
    expect(code([0, 'x', '0', 1, 1, 1, 1, 1])).toEqual(Array(4).fill(ErrorCodes.STORE_PROTOCOL));
    expect(code([0, '1', '0', ScriptCodes.ERR_CORRUPT_STATE, 0, 7, -3])).toEqual([
      ErrorCodes.STORE_PROTOCOL,
      'ok',
      ErrorCodes.STORE_PROTOCOL,
      ErrorCodes.STORE_PROTOCOL,
    ]);
  });
});

describe('error mapping', () => {
  const reply = (message: string) => Object.assign(new Error(message), { name: 'ReplyError' });

  it('gives every failure a store error code', () => {
    const code = (failure: Parameters<typeof toStoreError>[0]) => toStoreError(failure).code;
    expect(code({ kind: 'client', error: new Error('Command timed out') })).toBe(ErrorCodes.STORE_TIMEOUT);
    expect(code({ kind: 'client', error: new Error('Connection is closed.') })).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(code({ kind: 'client', error: reply('LOADING Redis is loading the dataset in memory') })).toBe(
      ErrorCodes.STORE_UNAVAILABLE,
    );
    expect(code({ kind: 'client', error: reply('CLUSTERDOWN The cluster is down') })).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(code({ kind: 'client', error: reply('ERR Error running script') })).toBe(ErrorCodes.STORE_PROTOCOL);
    expect(code({ kind: 'not-ready', status: 'reconnecting' })).toBe(ErrorCodes.STORE_UNAVAILABLE);
    expect(code({ kind: 'timeout', ms: 50 })).toBe(ErrorCodes.STORE_TIMEOUT);
    expect(code({ kind: 'closed' })).toBe(ErrorCodes.CLOSED);
    expect(code({ kind: 'script', code: 99 })).toBe(ErrorCodes.STORE_PROTOCOL);
    const cause = new Error('Connection is closed.');
    expect(toStoreError({ kind: 'client', error: cause }).cause).toBe(cause);
  });
});
