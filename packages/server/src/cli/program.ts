import { createRequire } from 'node:module';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { stringify as stringifyYaml } from 'yaml';
import { isRulesError, formatIssue } from '@sluice/rules';
import { runBench } from './bench.js';
import { CliError } from './client.js';
import {
  applyRules,
  defaultAuthor,
  diffRules,
  rollbackRules,
  ruleHistory,
  showRules,
  validateRules,
  type AdminTarget,
} from './rules.js';
import { runStatus } from './status.js';
import { addRolloutCommands } from './rollout.js';
import { effectiveConfig, readConfigFile } from '../config-file.js';
import cluster from 'node:cluster';
import { createLogger, redactingLogger } from '../logging.js';
import { startServer, type RunningServer } from '../serve.js';
import { WorkerLink } from '../workers/link.js';
import { runPrimary } from '../workers/primary.js';
import { WORKER_SLOT_ENV } from '../workers/protocol.js';
import {
  RENAMED_SETTINGS,
  SETTINGS,
  SettingsError,
  configKeyOf,
  loadSettings,
  renamedSettingError,
  type SettingFlags,
  type Settings,
} from '../settings.js';

const out = { log: (line: string) => console.log(line) };

/** The installed package's version (`sluice --version`, `sluice version`). */
export const VERSION = (createRequire(import.meta.url)('../../package.json') as { version: string }).version;

/** Exit code of a usage error (unknown option or command, missing or bad argument): 2, as getopt tools do. */
export const USAGE_EXIT = 2;

/**
 * The placeholder a setting's flag shows in `--help`: what kind of value it takes, from the
 * setting's name (`<ms>`, `<port>`, `<url>`...), `<value>` when the name says nothing.
 */
export function placeholderOf(name: string): string {
  const named: Record<string, string> = {
    rules: 'file',
    logLevel: 'level',
    logFormat: 'format',
    rulesMode: 'seed|files',
    tlsCert: 'file',
    tlsKey: 'file',
    tlsClientCa: 'file',
    onStoreFailure: 'policy',
    redisPrefix: 'prefix',
    maxBodyBytes: 'bytes',
    openOutcomes: 'on|off',
    overridesPerMinute: 'n',
    rateLimitHeaders: 'draft|legacy|both',
    workers: 'n|auto',
  };
  if (named[name] !== undefined) return named[name];
  if (/Dir$/.test(name)) return 'dir';
  if (/Ms$/.test(name)) return 'ms';
  if (/Port$/.test(name) || name === 'port') return 'port';
  if (/Url$/.test(name)) return 'url';
  if (/Token$/.test(name)) return 'token';
  if (name === 'host') return 'host';
  if (name === 'redisCluster') return 'host:port,...';
  if (/^(max|min)[A-Z]/.test(name)) return 'n';
  return 'value';
}

function positiveInt(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new InvalidArgumentError('must be a positive integer');
  return Number(value);
}

function nonNegativeInt(value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError('must be a non-negative integer');
  return Number(value);
}

const collect = (value: string, previous: string[] | undefined) => [...(previous ?? []), value];

async function serve(flags: SettingFlags, config: { file?: string; print: boolean }): Promise<void> {
  const file = config.file === undefined ? undefined : { path: config.file, values: readConfigFile(config.file) };
  const settings = loadSettings(flags, process.env, file);
  if (config.print) {
    out.log(stringifyYaml(effectiveConfig(settings)).trimEnd());
    return;
  }
  if (settings.workers > 1 && cluster.isPrimary) {
    const logger = redactingLogger(await createLogger(settings.logLevel, settings.logFormat));
    process.exit(await runPrimary(settings, logger));
  }
  const link = cluster.isWorker ? new WorkerLink(Number(process.env[WORKER_SLOT_ENV])) : undefined;
  // Signals are handled from the start: one that arrives while the server is still starting up
  // (after its first log lines) shuts it down gracefully once it is up.
  const started: { server?: Awaited<ReturnType<typeof startServer>>; pending?: NodeJS.Signals } = {};
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    const server = started.server;
    if (server === undefined) {
      started.pending ??= signal;
      return;
    }
    if (stopping) {
      server.logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    server.logger.info({ signal }, 'signal received');
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        server.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  // SIGHUP reloads (the configuration file, then the rule files) and never ends the process.
  let reloading: Promise<void> = Promise.resolve();
  const hangup = () => {
    const server = started.server;
    if (server === undefined || stopping) return;
    reloading = reloading.then(() => reload(server, settings, flags, config.file));
  };
  process.on('SIGTERM', stop);
  if (link === undefined) {
    process.on('SIGINT', stop);
    process.on('SIGHUP', hangup);
  } else {
    // A worker drains when its primary says so (and on a SIGTERM of its own); a terminal's SIGINT
    // or SIGHUP reaches the primary too, which passes it on once: here they are ignored.
    process.on('SIGINT', () => {});
    process.on('SIGHUP', () => {});
    const drain = () => {
      if (!stopping) stop('SIGTERM');
    };
    link.onShutdown = drain;
    link.onReload = hangup;
    // The primary is gone (killed): nobody hands this worker connections any more.
    process.once('disconnect', drain);
  }
  const logger =
    link === undefined ? undefined : (await createLogger(settings.logLevel, settings.logFormat)).child({ worker: link.slot });
  started.server = await startServer(settings, {
    ...(logger === undefined ? {} : { logger }),
    ...(link === undefined ? {} : { worker: link }),
  });
  if (started.pending !== undefined) stop(started.pending);
}

/**
 * What SIGHUP does: reads the configuration file again (a bad one is logged and changes
 * nothing), applies what can change while serving (the log level) and names the settings that
 * changed but take effect only at a restart; then reads the rule files again.
 */
async function reload(
  server: RunningServer,
  settings: Settings,
  flags: SettingFlags,
  configFile: string | undefined,
): Promise<void> {
  if (configFile !== undefined) {
    try {
      const next = loadSettings(flags, process.env, { path: configFile, values: readConfigFile(configFile) });
      if (next.logLevel !== server.logger.level) server.logger.level = next.logLevel;
      const atRestart = (Object.keys(next) as (keyof Settings)[]).filter(
        (k) => k !== 'logLevel' && JSON.stringify(next[k]) !== JSON.stringify(settings[k]),
      );
      server.logger.info({ file: configFile, logLevel: next.logLevel }, 'SIGHUP: configuration file read again');
      if (atRestart.length > 0) {
        server.logger.warn(
          { file: configFile, settings: atRestart.map(configKeyOf) },
          'settings changed in the configuration file take effect at the next restart',
        );
      }
    } catch (err) {
      server.logger.error({ err, file: configFile }, 'SIGHUP: configuration file not read again: the settings in force stay');
    }
  }
  await server.reload();
}

function adminOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--server <url>', 'the server to talk to').env('SLUICE_SERVER').default('http://127.0.0.1:8080'))
    .addOption(new Option('--token <token>', 'admin bearer token').env('SLUICE_ADMIN_TOKEN'));
}

function changeOptions(cmd: Command): Command {
  return cmd
    .option('--author <name>', 'who makes the change', defaultAuthor())
    .requiredOption('--reason <text>', 'why (recorded with the version) (required)')
    .option(
      '--expected-version <n>',
      'apply only if this is still the current version (0: only into an empty store)',
      nonNegativeInt,
    );
}

const target = (o: { server: string; token?: string }): AdminTarget => ({ server: o.server, token: o.token });

/** The `sluice` command line. */
export function buildCli(): Command {
  const program = new Command('sluice')
    .description('Global rate limits for fleets of workers and gateways')
    .version(VERSION, '-V, --version', 'print the version and exit')
    // Options of `sluice` itself only before a command: `sluice rules show --version 3` is the command's.
    .enablePositionalOptions()
    .showHelpAfterError('(run with --help for usage)')
    .configureOutput({ outputError: (str, write) => write(str) })
    // Usage errors reach `main` as CommanderErrors (subcommands inherit this), which maps them
    // to exit code 2 instead of commander's process.exit(1).
    .exitOverride();

  program
    .command('version')
    .description('print the version and exit')
    .action(() => out.log(VERSION));

  const serveCmd = program
    .command('serve')
    .description('run the rate-limit service: HTTP JSON API, Envoy gRPC RateLimitService, admin API, /metrics')
    .addHelpText(
      'after',
      '\nEvery option can also be set by its environment variable; a flag wins.\n\nExample:\n  sluice serve --rules node_modules/@sluice/server/examples/rules.yaml --port 8080 --grpc-port 8081',
    );
  const attrToSetting = new Map<string, keyof Settings>();
  for (const [name, spec] of Object.entries(SETTINGS) as [keyof Settings, (typeof SETTINGS)[keyof Settings]][]) {
    const help = `${spec.doc} [env ${spec.env}${spec.default === undefined ? '' : `, default ${spec.default}`}]`;
    // A `--no-...` flag takes no value: given, it sets its setting to `off`.
    const opt = spec.flag.startsWith('--no-')
      ? new Option(spec.flag, help)
      : new Option(`${spec.flag} <${placeholderOf(name)}>`, help);
    if (name === 'rules') opt.argParser(collect);
    serveCmd.addOption(opt);
    attrToSetting.set(opt.attributeName(), name);
  }
  serveCmd
    .addOption(
      new Option('--config <file>', "YAML file of settings, keyed by the flags' names (a flag or variable wins over it)").env(
        'SLUICE_CONFIG',
      ),
    )
    .option('--print-config', 'print the settings in force (credentials redacted) as a config file, and exit');
  // A flag of 0.1 that was renamed is refused by name rather than as an unknown option.
  const renamedAttrs = new Map<string, string>();
  for (const old of RENAMED_SETTINGS) {
    const opt = new Option(`${old.flag} <value>`).hideHelp();
    serveCmd.addOption(opt);
    renamedAttrs.set(opt.attributeName(), old.flag);
  }
  serveCmd.action(async (opts: Record<string, string | string[] | boolean | undefined>) => {
    const flags: SettingFlags = {};
    for (const [attr, value] of Object.entries(opts)) {
      const renamed = renamedAttrs.get(attr);
      if (renamed !== undefined && value !== undefined) throw renamedSettingError(renamed)!;
      const name = attrToSetting.get(attr);
      // commander gives a `--no-...` flag `true` unless it is given; only `false` is a choice.
      if (name === undefined || value === undefined || value === true) continue;
      flags[name] = value === false ? 'off' : value;
    }
    await serve(flags, { file: opts.config as string | undefined, print: opts.printConfig === true });
  });

  const rules = program.command('rules').description('validate rule files; read and change the rules of a running server');
  rules
    .command('validate')
    .description('check rule files offline (native Sluice and envoyproxy/ratelimit formats); exit 1 listing every problem')
    .argument('<files...>', 'rule files')
    .action(async (files: string[]) => validateRules(files, out));
  changeOptions(adminOptions(rules.command('apply').description('make a rule file the new version on a running server')))
    .argument('<file>', 'rule file')
    .action(
      async (file: string, o: { server: string; token?: string; author: string; reason: string; expectedVersion?: number }) =>
        applyRules(target(o), file, o, out),
    );
  adminOptions(rules.command('diff').description('show what changed between two versions'))
    .argument('<from>', 'older version', positiveInt)
    .argument('[to]', 'newer version (default: the current one)', positiveInt)
    .action(async (from: number, to: number | undefined, o: { server: string; token?: string }) =>
      diffRules(target(o), from, to, out),
    );
  adminOptions(rules.command('history').description('list versions, newest first'))
    .option('--limit <n>', 'most versions listed', positiveInt)
    .action(async (o: { server: string; token?: string; limit?: number }) => ruleHistory(target(o), o.limit, out));
  changeOptions(adminOptions(rules.command('rollback').description('make a new version with the content of an earlier one')))
    .argument('<version>', 'the version to restore', positiveInt)
    .action(
      async (version: number, o: { server: string; token?: string; author: string; reason: string; expectedVersion?: number }) =>
        rollbackRules(target(o), version, o, out),
    );
  adminOptions(rules.command('show').description("print a version's rule text (default: the current one)"))
    .option('--version <n>', 'the version', positiveInt)
    .action(async (o: { server: string; token?: string; version?: number }) => showRules(target(o), o.version, out));
  addRolloutCommands(rules, out);

  program
    .command('status')
    .description('live view of the busiest resources of a running server: rate, limit, rejections')
    .addOption(new Option('--server <url>', 'the server to watch').env('SLUICE_SERVER').default('http://127.0.0.1:8080'))
    .option('--once', 'print one frame and exit (for scripts)', false)
    .option('--interval <ms>', 'refresh interval', positiveInt, 1000)
    .option('--top <n>', 'rows shown', positiveInt, 20)
    .addOption(
      new Option('--token <token>', 'admin bearer token: hot keys are named only to the admin').env('SLUICE_ADMIN_TOKEN'),
    )
    .action(async (o: { server: string; once: boolean; interval: number; top: number; token?: string }) => {
      const abort = new AbortController();
      process.once('SIGINT', () => abort.abort());
      await runStatus(
        { server: o.server, once: o.once, intervalMs: o.interval, top: o.top, token: o.token, signal: abort.signal },
        out,
      );
    });

  program
    .command('bench')
    .description('load a running server (--server and/or --grpc) and print decisions/s and p99')
    .option('--server <url>', 'HTTP API to load (POST /v1/check)')
    .option('--grpc <host:port>', 'Envoy gRPC service to load (ShouldRateLimit)')
    .option('--resource <name>', 'resource for --server', 'bench')
    .option('--domain <name>', 'domain for --grpc', 'bench')
    .option('--descriptor <key=value>', 'descriptor entry for --grpc (repeat for nested entries)', collect)
    .option('--keys <n>', 'distinct keys to spread the load over', positiveInt, 1000)
    .option('--concurrency <n>', 'calls in flight', positiveInt, 16)
    .option('--duration <s>', 'seconds per run', positiveInt, 5)
    .addOption(new Option('--api-token <token>', "the server's data-plane bearer token").env('SLUICE_API_TOKEN'))
    .action(
      async (o: {
        server?: string;
        grpc?: string;
        resource: string;
        domain: string;
        descriptor?: string[];
        keys: number;
        concurrency: number;
        duration: number;
        apiToken?: string;
      }) =>
        runBench(
          {
            ...(o.server === undefined ? {} : { server: o.server }),
            ...(o.grpc === undefined ? {} : { grpc: o.grpc }),
            resource: o.resource,
            domain: o.domain,
            descriptor: o.descriptor ?? [],
            keys: o.keys,
            concurrency: o.concurrency,
            seconds: o.duration,
            token: o.apiToken,
          },
          out,
        ),
    );
  return program;
}

/** Runs the CLI; resolves to the exit code for commands that end (serve keeps running). */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    await buildCli().parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end here too, with their text already written.
      return err.exitCode === 0 ? 0 : USAGE_EXIT;
    }
    if (err instanceof CliError) {
      console.error(err.message);
      return err.exitCode;
    }
    if (err instanceof SettingsError) {
      console.error(`sluice: ${err.message}`);
      return 2;
    }
    if (isRulesError(err)) {
      console.error(err.issues.length > 0 ? err.issues.map(formatIssue).join('\n') : `${err.code}: ${err.message}`);
      return 1;
    }
    console.error(`sluice: ${err instanceof Error ? err.message : String(err)}`);
    return 1;
  }
}
