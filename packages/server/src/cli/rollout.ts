import { basename } from 'node:path';
import type { RolloutState, RolloutStep } from '@sluice/rules';
import { Command, InvalidArgumentError, Option } from 'commander';
import { request } from './client.js';
import { defaultAuthor, readRuleFile, type AdminTarget, type Out } from './rules.js';

/** `1:60000,10:60000,100:0` -> steps (percent:holdMs). */
export function parseSteps(value: string): RolloutStep[] {
  return value.split(',').map((part) => {
    const m = /^(\d+(?:\.\d{1,2})?)%?:(\d+)$/.exec(part.trim());
    if (m === null) throw new InvalidArgumentError(`"${part}" is not PERCENT:HOLD_MS (e.g. 10:300000)`);
    return { percent: Number(m[1]), holdMs: Number(m[2]) };
  });
}

/** One line about a rollout: where it is, its share, and the last note. */
export function describeRollout(s: RolloutState | null, percent?: number): string {
  if (s === null) return 'no rollout';
  const step = s.steps[s.step];
  const share =
    s.status === 'running' || s.status === 'paused' ? `${step?.percent ?? 0}%` : s.status === 'watching' ? '100%' : '-';
  const versions = `v${s.baseline} -> ${s.version === undefined ? 'candidate' : `v${s.version}`}`;
  const applied = percent === undefined ? '' : ` (this server: ${percent}%)`;
  return [
    `rollout ${s.id}  ${s.status}  ${versions}  step ${s.step + 1}/${s.steps.length} at ${share}${applied}`,
    `  resources: ${s.resources.length === 0 ? '-' : s.resources.join(', ')}`,
    ...(s.domains === undefined ? [] : [`  envoy domains: ${s.domains.join(', ')}`]),
    `  by ${s.author}: ${s.reason}`,
    ...(s.note === undefined ? [] : [`  ${s.note}`]),
    ...(s.rollbackVersion === undefined ? [] : [`  rolled back as v${s.rollbackVersion}`]),
  ].join('\n');
}

interface Target {
  server: string;
  token?: string;
}

const target = (o: Target): AdminTarget => ({ server: o.server, token: o.token });

function admin(cmd: Command): Command {
  return cmd
    .addOption(new Option('--server <url>', 'the server to talk to').env('SLUICE_SERVER').default('http://127.0.0.1:8080'))
    .addOption(new Option('--token <token>', 'admin bearer token').env('SLUICE_ADMIN_TOKEN'));
}

function change(cmd: Command): Command {
  return admin(cmd).option('--author <name>', 'who acts', defaultAuthor()).requiredOption('--reason <text>', 'why');
}

function nonNegative(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a non-negative integer');
  return Number(value);
}

/** Starts a rollout of `file` over the current version. */
export async function startRolloutCli(
  t: AdminTarget,
  file: string,
  o: { author: string; reason: string; steps?: RolloutStep[]; watchMs?: number },
  out: Out,
): Promise<void> {
  const text = await readRuleFile(file);
  const r = await request<{ rollout: RolloutState }>(t.server, '/v1/admin/rollout', {
    method: 'POST',
    token: t.token,
    body: {
      text,
      file: basename(file),
      author: o.author,
      reason: o.reason,
      ...(o.steps === undefined ? {} : { steps: o.steps }),
      ...(o.watchMs === undefined ? {} : { watchMs: o.watchMs }),
    },
  });
  out.log(`started ${describeRollout(r.rollout)}`);
}

/** Adds `sluice rules rollout start|status|pause|resume|promote|abort` to `rules`. */
export function addRolloutCommands(rules: Command, out: Out): void {
  const rollout = rules
    .command('rollout')
    .description('roll a rule file out to a growing share of keys, with automatic rollback (see docs/control-plane.md)');
  change(rollout.command('start').description('start rolling a rule file out over the current version'))
    .argument('<file>', 'rule file (the candidate)')
    .option('--steps <list>', 'PERCENT:HOLD_MS,... (default 1:300000,10:300000,50:300000,100:300000)', parseSteps)
    .option('--watch-ms <ms>', 'how long the promoted candidate is watched (default 600000)', nonNegative)
    .action(async (file: string, o: Target & { author: string; reason: string; steps?: RolloutStep[]; watchMs?: number }) =>
      startRolloutCli(target(o), file, o, out),
    );
  admin(rollout.command('status').description('show the rollout')).action(async (o: Target) => {
    const r = await request<{ rollout: RolloutState | null; percent: number }>(o.server, '/v1/admin/rollout', { token: o.token });
    out.log(describeRollout(r.rollout, r.percent));
  });
  for (const [action, help] of [
    ['pause', 'hold the share where it is'],
    ['resume', 'let a paused ramp go on'],
    ['promote', 'apply the candidate to every key now (it becomes the next version)'],
    ['abort', 'send every key back to the baseline version'],
  ] as const) {
    change(rollout.command(action).description(help)).action(async (o: Target & { author: string; reason: string }) => {
      const r = await request<{ rollout: RolloutState }>(o.server, `/v1/admin/rollout/${action}`, {
        method: 'POST',
        token: o.token,
        body: { author: o.author, reason: o.reason },
      });
      out.log(describeRollout(r.rollout));
    });
  }
}
