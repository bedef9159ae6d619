/**
 * A throwaway Prometheus for tests (the binary scripts/prometheus.sh found), and the PromQL that
 * the monitoring kit ships: every query of the Grafana dashboard (deploy/grafana/sluice.json) with
 * its template variables filled in, and every alert rule's expression
 * (deploy/prometheus/sluice-alerts.yaml) with and without its threshold.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { parse } from 'yaml';
import { prometheusBinary } from './env.js';

/** One PromQL expression and where it comes from, for messages naming it. */
export interface NamedQuery {
  /** e.g. `panel "Rejection ratio" A` or `alert SluiceStoreUnavailable`. */
  readonly name: string;
  readonly expr: string;
}

/**
 * Values for the dashboard's variables when its queries run outside Grafana: the resource
 * variable matches every resource, and the rate window spans a whole test run, so a counter that
 * moved once in it still has two samples.
 */
export const DASHBOARD_VARIABLES: Readonly<Record<string, string>> = {
  resource: '.*',
  __rate_interval: '1m',
  __interval: '15s',
  __range: '5m',
};

/** `text` with every `$name`, `${name}` and `[[name]]` replaced from `vars`; an unknown name throws. */
export function substituteVariables(text: string, vars: Readonly<Record<string, string>>, where: string): string {
  return text.replace(/\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]/g, (_, a?: string, b?: string, c?: string) => {
    const name = (a ?? b ?? c)!;
    const value = vars[name];
    if (value === undefined) throw new Error(`${where}: no test value for the variable $${name}`);
    return value;
  });
}

/** A dashboard panel, as far as these tests read it. */
export interface Panel {
  readonly id?: number;
  readonly type: string;
  readonly title?: string;
  readonly datasource?: unknown;
  readonly targets?: readonly { readonly refId?: string; readonly expr?: string; readonly datasource?: unknown }[];
  readonly panels?: readonly Panel[];
}

/** A Grafana dashboard, as far as these tests read it. */
export interface Dashboard {
  readonly templating: { readonly list: readonly { readonly name: string; readonly type: string }[] };
  readonly panels?: readonly Panel[];
}

/** The dashboard's panels, rows' nested panels included. */
export function dashboardPanels(dashboard: { panels?: readonly Panel[] }): Panel[] {
  return (dashboard.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]);
}

/** Every panel query of `dashboard`, variables filled in with {@link DASHBOARD_VARIABLES}. */
export function dashboardQueries(dashboard: { panels?: readonly Panel[] }): NamedQuery[] {
  return dashboardPanels(dashboard).flatMap((p) =>
    (p.targets ?? []).map((t) => {
      const name = `panel "${p.title ?? '(untitled)'}" ${t.refId ?? '?'}`;
      if (t.expr === undefined || t.expr.trim() === '') throw new Error(`${name}: a target without an expression`);
      return { name, expr: substituteVariables(t.expr, DASHBOARD_VARIABLES, name) };
    }),
  );
}

/** An alert rule as the rule file holds it. */
export interface AlertRule {
  readonly alert: string;
  readonly expr: string;
  readonly for?: string;
  readonly labels?: Record<string, string>;
  readonly annotations?: Record<string, string>;
}

/** The alerting rules of a Prometheus rule file's text. */
export function alertRules(text: string): AlertRule[] {
  const file = parse(text) as { groups?: { rules?: (AlertRule | { record: string })[] }[] };
  return (file.groups ?? []).flatMap((g) => (g.rules ?? []).filter((r): r is AlertRule => 'alert' in r));
}

// A comparison with a number at the very end of an expression; comparisons bind loosest in
// PromQL, so what stands before it is the whole left-hand side.
const THRESHOLD = /^([\s\S]*\S)\s*(?:==|!=|>=|<=|>|<)(?:\s*bool)?\s*-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?\s*$/i;

/**
 * A rule's expression without its final threshold comparison (`sluice_store_healthy == 0` ->
 * `sluice_store_healthy`): it yields series whether or not the alert would fire. An expression
 * that ends in no such comparison is returned as it is.
 */
export function withoutThreshold(expr: string): string {
  const m = THRESHOLD.exec(expr.trim());
  if (m === null) return expr.trim();
  const lhs = m[1]!;
  // `a > 0 or b` ends in `b`, not in a comparison of the whole: only strip when the brackets
  // before the operator balance (the comparison is at the top level).
  let depth = 0;
  for (const ch of lhs) depth += ch === '(' ? 1 : ch === ')' ? -1 : 0;
  return depth === 0 ? lhs : expr.trim();
}

/** A port free on loopback when asked (the kernel's pick). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const address = s.address();
      s.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** The answer of `/api/v1/query` for an instant vector. */
export interface Sample {
  readonly metric: Record<string, string>;
  readonly value: [number, string];
}

/** A Prometheus server this test started; {@link RunningPrometheus.stop} ends it. */
export interface RunningPrometheus {
  readonly url: string;
  /** Everything it logged (stderr), for failure messages. */
  readonly logs: string[];
  /** Evaluates `expr` now (or at `time`, epoch seconds); a query Prometheus refuses throws, naming it. */
  query(expr: string, time?: number): Promise<Sample[]>;
  /** GET `path` of the HTTP API, `data` of its answer. */
  api<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts `prometheus` on a free loopback port with `config` (prometheus.yml text) and its TSDB
 * under `dir`; resolves once /-/ready answers 200. Fails (and stops it) if it exits or is not
 * ready within `readyMs`.
 */
export async function startPrometheus(dir: string, config: string, readyMs = 30_000): Promise<RunningPrometheus> {
  mkdirSync(join(dir, 'data'), { recursive: true });
  const configFile = join(dir, 'prometheus.yml');
  writeFileSync(configFile, config);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(
    prometheusBinary(),
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const logs: string[] = [];
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => logs.push(chunk));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const running = () => child.exitCode === null && child.signalCode === null;
  const stop = async () => {
    if (running()) child.kill('SIGTERM');
    await exited;
  };
  const api = async <T>(path: string): Promise<T> => {
    const res = await fetch(new URL(path, url));
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`${path}: ${res.status} ${body.error ?? ''}`);
    return body.data;
  };
  const query = async (expr: string, time?: number): Promise<Sample[]> => {
    const params = new URLSearchParams({ query: expr });
    if (time !== undefined) params.set('time', String(time));
    const res = await fetch(new URL(`/api/v1/query?${params.toString()}`, url));
    const body = (await res.json()) as { status: string; data?: { resultType: string; result: Sample[] }; error?: string };
    if (body.status !== 'success') throw new Error(`Prometheus refused the query ${expr}: ${body.error ?? res.status}`);
    if (body.data!.resultType !== 'vector') throw new Error(`${expr}: a ${body.data!.resultType}, not an instant vector`);
    return body.data!.result;
  };
  const deadline = Date.now() + readyMs;
  for (;;) {
    if (!running()) throw new Error(`prometheus exited before it was ready:\n${logs.join('')}`);
    const ready = await fetch(new URL('/-/ready', url)).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus was not ready within ${readyMs} ms:\n${logs.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, logs, query, api, stop };
}
