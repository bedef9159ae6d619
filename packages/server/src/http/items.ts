import { MAX_BOOKING_ID_LENGTH, MIN_BOOKING_TOKEN_LENGTH, MAX_COST, POLICY_BOUNDS, TIER_NAME } from '@sluice/core';
import { z } from 'zod';
import { BOOKING_ID_PATTERN, MAX_OUTCOME_COUNT, MAX_OUTCOME_DURATION_MS, type ItemBounds } from '../bounds/bounds.js';
import { ServerError, ServerErrorCodes, fromZod } from '../errors.js';
import type {
  AcquireItem,
  AdjustItem,
  BookItem,
  CancelItem,
  CheckItem,
  OutcomeItem,
  ReleaseItem,
  RenewItem,
  ReserveItem,
} from '@sluice/core/wire';

const int = (min: number, max: number) =>
  z
    .number({ error: 'must be a number' })
    .int('must be an integer')
    .min(min, `must be at least ${min}`)
    .max(max, `must be at most ${max}`);

/** The item schema of each operation, strict: unknown fields are rejected. */
export function itemSchemas(b: ItemBounds) {
  // Resource names, tenants and permit ids share one bound.
  const name = z.string({ error: 'must be a string' }).min(1, 'must not be empty').max(128, 'must be at most 128 characters');
  const resource = name;
  // A permit's id: required, under the bound of names.
  const permitId = z
    .string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') })
    .min(1, 'must not be empty')
    .max(128, 'must be at most 128 characters');
  const key = z.string({ error: 'must be a string' }).max(b.maxKeyLength, `must be at most ${b.maxKeyLength} characters`);
  const base = {
    resource,
    key: key.optional(),
    cost: int(0, MAX_COST).optional(),
    tenant: name.optional(),
    // A tier name (`core`, `normal` or one the resource declares): which ones exist is the limiter's to say.
    priority: z.string({ error: 'must be a string' }).regex(TIER_NAME, `must be a tier name (${TIER_NAME})`).optional(),
  };
  // Booking ids are the core's (`checkBookingId`): refused here with the request's own code.
  const bookingId = z
    .string({ error: 'must be a string' })
    .min(1, 'must not be empty')
    .max(MAX_BOOKING_ID_LENGTH, `must be at most ${MAX_BOOKING_ID_LENGTH} characters`)
    .regex(BOOKING_ID_PATTERN, 'must be printable ASCII characters without spaces');
  // A booking's token is the core's (`checkBookingToken`): as an id, of 16 characters or more.
  const bookingToken = z
    .string({ error: 'must be a string' })
    .min(MIN_BOOKING_TOKEN_LENGTH, `must be at least ${MIN_BOOKING_TOKEN_LENGTH} characters`)
    .max(MAX_BOOKING_ID_LENGTH, `must be at most ${MAX_BOOKING_ID_LENGTH} characters`)
    .regex(BOOKING_ID_PATTERN, 'must be printable ASCII characters without spaces');
  return {
    check: z
      .strictObject({ ...base, book: bookingId.optional(), token: bookingToken.optional() })
      .refine((c) => c.token === undefined || c.book !== undefined, {
        message: 'is only taken with `book`',
        path: ['token'],
      }) satisfies z.ZodType<CheckItem>,
    book: z.strictObject({ ...base, id: bookingId, token: bookingToken.optional() }) satisfies z.ZodType<BookItem>,
    cancel: z.strictObject({
      resource,
      key: key.optional(),
      id: bookingId,
      token: bookingToken.optional(),
    }) satisfies z.ZodType<CancelItem>,
    acquire: z.strictObject({ ...base, maxWaitMs: int(0, b.maxWaitMs).optional() }) satisfies z.ZodType<AcquireItem>,
    release: z.strictObject({ resource, key: key.optional(), permitId }) satisfies z.ZodType<ReleaseItem>,
    adjust: z.strictObject({
      resource,
      key: key.optional(),
      delta: int(-MAX_COST, MAX_COST),
      tenant: name.optional(),
      at: z.number().min(0).max(1e15).optional(),
    }) satisfies z.ZodType<AdjustItem>,
    reserve: z
      .strictObject({
        resource,
        key: key.optional(),
        min: int(1, MAX_COST),
        max: int(1, MAX_COST),
        holdMs: int(0, POLICY_BOUNDS.maxHoldMs).optional(),
      })
      .refine((r) => r.max >= r.min, { message: 'must be at least min', path: ['max'] }) satisfies z.ZodType<ReserveItem>,
    renew: z.strictObject({
      resource,
      key: key.optional(),
      permitId,
      ttlMs: int(1, 24 * 3600 * 1000).optional(),
    }) satisfies z.ZodType<RenewItem>,
    outcome: z.strictObject({
      resource,
      key: key.optional(),
      ok: z.boolean({ error: 'must be true or false' }),
      durationMs: z
        .number({ error: 'must be a number' })
        .min(0, 'must be at least 0')
        .max(MAX_OUTCOME_DURATION_MS, `must be at most ${MAX_OUTCOME_DURATION_MS}`),
      count: int(1, MAX_OUTCOME_COUNT).optional(),
    }) satisfies z.ZodType<OutcomeItem>,
  };
}

/** One decoded item: its value, or the error that is its answer. */
export type Decoded<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown };

/** A body: one item, or a batch whose items are decoded one by one. */
export type DecodedBody<T> =
  { readonly batch: false; readonly item: Decoded<T> } | { readonly batch: true; readonly items: readonly Decoded<T>[] };

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function decodeItem<T>(item: unknown, schema: z.ZodType<T>): Decoded<T> {
  const r = schema.safeParse(item);
  return r.success ? { ok: true, value: r.data } : { ok: false, error: fromZod(r.error) };
}

/**
 * Decodes a body as one item or as `{ items: [...] }`. A malformed batch (not a list, too long,
 * other fields) fails as a whole; a malformed item is that item's error only.
 */
export function decodeBody<T>(body: unknown, schema: z.ZodType<T>, maxBatch: number): DecodedBody<T> {
  if (!isObject(body)) {
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'the body must be a JSON object: one item, or { "items": [...] }');
  }
  if (!Object.hasOwn(body, 'items')) {
    return { batch: false, item: decodeItem(body, schema) };
  }
  const extra = Object.keys(body).find((k) => k !== 'items');
  if (extra !== undefined) {
    throw new ServerError(ServerErrorCodes.INVALID_REQUEST, `${extra}: unknown field next to "items"`, { field: extra });
  }
  const items = body.items;
  if (!Array.isArray(items)) throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'items: must be a list', { field: 'items' });
  if (items.length === 0) throw new ServerError(ServerErrorCodes.INVALID_REQUEST, 'items: must not be empty', { field: 'items' });
  if (items.length > maxBatch) {
    throw new ServerError(ServerErrorCodes.BATCH_TOO_LARGE, `items: at most ${maxBatch} items per call, got ${items.length}`, {
      field: 'items',
    });
  }
  return {
    batch: true,
    items: items.map((item) => decodeItem(item, schema)),
  };
}
