import { MAX_RULES_BYTES, rolloutPercent, type RolloutState } from '@sluice/rules';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import { fromZod } from '../errors.js';
import type { RolloutRunner } from '../rollout/runner.js';

const label = z.string({ error: 'must be a string' }).min(1, 'must not be empty').max(256, 'must be at most 256 characters');
const startBody = z.strictObject({
  text: z.string({ error: 'must be a string' }).max(MAX_RULES_BYTES, `must be at most ${MAX_RULES_BYTES} characters`),
  author: label,
  reason: label,
  file: label.optional(),
  // Checked in full by compileRolloutPlan; bounded here before it is read.
  steps: z.array(z.unknown()).max(100, 'must have at most 100 steps').optional(),
  watchMs: z.unknown().optional(),
  thresholds: z.record(z.string(), z.unknown()).optional(),
});
const actionBody = z.strictObject({ author: label, reason: label });

function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (!r.success) throw fromZod(r.error);
  return r.data;
}

/**
 * A rollout as the public summary (`GET /v1/rollout`) shows it: no candidate text, and neither
 * who started or acted on it nor why (the admin API has those); a rollback's measured reason is
 * kept, it names only resources and figures. Nor its id: the id salts the hash that sorts keys
 * into cohorts, and with it anyone could aim forged reports at one cohort.
 */
export function rolloutSummary(s: RolloutState | undefined, percent: number) {
  if (s === undefined) return { rollout: null };
  const { candidate, author: _a, reason: _r, note, id: _id, ...rest } = s;
  return {
    rollout: {
      ...rest,
      ...(s.status === 'rolled_back' && note !== undefined ? { note } : {}),
      candidateHash: candidate.hash,
      // What this server applies now (0 while it does not yet follow the rollout's baseline).
      percent,
      plannedPercent: rolloutPercent(s),
    },
  };
}

type Handle = (
  fn: (request: FastifyRequest) => Promise<{ status?: number; body: unknown }>,
) => (request: FastifyRequest, reply: import('fastify').FastifyReply) => Promise<unknown>;

/** `GET /v1/rollout`: public and read-only, as `/v1/stats` (the dashboard and `sluice status` read it). */
export function registerRolloutSummary(app: FastifyInstance, runner: RolloutRunner): void {
  app.get('/v1/rollout', async () => rolloutSummary(runner.state, runner.percent));
}

/** The rollout's admin routes, under the admin API's token: start, pause, resume, promote, abort. */
export function registerRolloutAdmin(admin: FastifyInstance, handle: Handle, runner: RolloutRunner, logger: Logger): void {
  admin.get(
    '/rollout',
    handle(async () => ({ body: { rollout: runner.state ?? null, percent: runner.percent } })),
  );
  admin.post(
    '/rollout',
    { bodyLimit: 2 * MAX_RULES_BYTES + 64 * 1024 },
    handle(async (request) => {
      const b = parse(startBody, request.body);
      const state = await runner.begin(b as Parameters<RolloutRunner['begin']>[0]);
      logger.info(
        { rollout: state.id, baseline: state.baseline, resources: state.resources, author: state.author },
        'rollout started',
      );
      return { status: 201, body: { rollout: state } };
    }),
  );
  for (const action of ['pause', 'resume', 'promote', 'abort'] as const) {
    admin.post(
      `/rollout/${action}`,
      handle(async (request) => {
        const b = parse(actionBody, request.body);
        const state = await runner[action](b.author, b.reason);
        logger.info({ rollout: state.id, status: state.status, author: b.author, reason: b.reason }, `rollout ${action}`);
        return { body: { rollout: state } };
      }),
    );
  }
}
