import { MAX_RULES_BYTES, type RuleStore, type RuleVersion, type RuleVersionMeta } from '@sluice/rules';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import { ServerError, ServerErrorCodes, fromZod } from '../errors.js';
import type { LiveRules } from '../live-rules.js';
import { authorized } from '../auth/auth.js';
import { redactUrl, type WarningThrottle } from '../logging.js';
import { sendError, sendUnauthorized } from './reply.js';
import type { RolloutRunner } from '../rollout/runner.js';
import { registerRolloutAdmin } from './rollout.js';

/** What the admin API needs. */
export interface AdminDeps {
  readonly store: RuleStore;
  readonly rules: LiveRules;
  /** The bearer token; without one every admin call is refused. */
  readonly token: string | undefined;
  readonly logger: Logger;
  /** Refused calls are logged through it (an outsider can repeat them at will). */
  readonly warnings: WarningThrottle;
  /** The fleet's rollout, when the rule store keeps one. */
  readonly rollout?: RolloutRunner | undefined;
}

const label = z.string({ error: 'must be a string' }).min(1, 'must not be empty').max(256, 'must be at most 256 characters');
const version = z.number({ error: 'must be a number' }).int('must be an integer').min(1, 'must be at least 1');
const expected = z.number({ error: 'must be a number' }).int('must be an integer').min(0, 'must be at least 0');
const queryVersion = z
  .string()
  .regex(/^[1-9]\d{0,14}$/, 'must be a positive integer')
  .transform(Number);

const applyBody = z.strictObject({
  text: z.string({ error: 'must be a string' }).max(MAX_RULES_BYTES, `must be at most ${MAX_RULES_BYTES} characters`),
  author: label,
  reason: label,
  file: label.optional(),
  expectedVersion: expected.optional(),
});
const rollbackBody = z.strictObject({ version, author: label, reason: label, expectedVersion: expected.optional() });
const getQuery = z.strictObject({ version: queryVersion.optional() });
const historyQuery = z.strictObject({
  limit: z
    .string()
    .regex(/^[1-9]\d{0,3}$/, 'must be an integer between 1 and 1000')
    .transform(Number)
    .refine((n) => n <= 1000, 'must be an integer between 1 and 1000')
    .optional(),
});
const diffQuery = z.strictObject({ from: queryVersion, to: queryVersion.optional() });

function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (!r.success) throw fromZod(r.error);
  return r.data;
}

/** A version's record and text, as the admin API answers it. */
function encodeVersion(v: RuleVersion): RuleVersionMeta & { source: string } {
  const { ruleSet: _ruleSet, ...rest } = v;
  return rest;
}

/** The admin API under `/v1/admin`, behind the bearer token (checked before the body is read). */
export function registerAdmin(app: FastifyInstance, deps: AdminDeps): void {
  const { store, rules, token, logger, warnings } = deps;
  void app.register(
    async (admin) => {
      admin.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
        // No token configured: the admin API is off (unlike the data plane, which is then open).
        if (token === undefined || !authorized(request.headers.authorization, token)) {
          warnings.warn(
            'admin_refused',
            { route: redactUrl(request.url), ip: request.ip },
            'admin call refused: missing or wrong token',
          );
          return sendUnauthorized(
            reply,
            token === undefined ? 'the admin API is disabled: no admin token is configured' : 'a valid bearer token is required',
            logger,
          );
        }
        return undefined;
      });
      const handle =
        (fn: (request: FastifyRequest) => Promise<{ status?: number; body: unknown }>) =>
        async (request: FastifyRequest, reply: FastifyReply) => {
          try {
            const { status, body } = await fn(request);
            return reply.code(status ?? 200).send(body);
          } catch (err) {
            return sendError(reply, err, logger);
          }
        };
      admin.get(
        '/rules',
        handle(async (request) => {
          const q = parse(getQuery, request.query);
          const v = q.version === undefined ? await store.current() : await store.get(q.version);
          if (v === undefined) throw new ServerError(ServerErrorCodes.NOT_READY, 'no rule version yet');
          return { body: encodeVersion(v) };
        }),
      );
      // A rule text may be far larger than a decision call.
      const bodyLimit = 2 * MAX_RULES_BYTES + 64 * 1024;
      admin.post(
        '/rules',
        { bodyLimit },
        handle(async (request) => {
          const b = parse(applyBody, request.body);
          const v = await store.apply(b.text, {
            author: b.author,
            reason: b.reason,
            ...(b.file === undefined ? {} : { file: b.file }),
            ...(b.expectedVersion === undefined ? {} : { expectedVersion: b.expectedVersion }),
          });
          logger.info(
            { version: v.version, author: v.author, reason: v.reason, hash: v.hash },
            'rules applied through the admin API',
          );
          // Active on this server before the answer; checked in slices, so decisions go on meanwhile.
          await rules.update(v);
          return { status: 201, body: encodeVersion(v) };
        }),
      );
      admin.get(
        '/rules/history',
        handle(async (request) => {
          const q = parse(historyQuery, request.query);
          return { body: { versions: await store.history(q.limit === undefined ? {} : { limit: q.limit }) } };
        }),
      );
      admin.get(
        '/rules/diff',
        handle(async (request) => {
          const q = parse(diffQuery, request.query);
          const to = q.to ?? (await store.current())?.version;
          if (to === undefined) throw new ServerError(ServerErrorCodes.NOT_READY, 'no rule version yet');
          return { body: await store.diff(q.from, to) };
        }),
      );
      admin.post(
        '/rules/rollback',
        handle(async (request) => {
          const b = parse(rollbackBody, request.body);
          const v = await store.rollback(b.version, {
            author: b.author,
            reason: b.reason,
            ...(b.expectedVersion === undefined ? {} : { expectedVersion: b.expectedVersion }),
          });
          logger.info(
            { version: v.version, rolledBackFrom: v.rolledBackFrom, author: v.author, reason: v.reason },
            'rules rolled back',
          );
          // Active on this server before the answer; checked in slices, so decisions go on meanwhile.
          await rules.update(v);
          return { status: 201, body: encodeVersion(v) };
        }),
      );
      if (deps.rollout !== undefined) registerRolloutAdmin(admin, handle, deps.rollout, logger);
    },
    { prefix: '/v1/admin' },
  );
}
