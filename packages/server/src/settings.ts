import { RATE_LIMIT_HEADER_FORMS, STORE_FAILURE_POLICIES, type RateLimitHeaderForm } from '@sluice/core';
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { LOG_FORMATS, type LogFormat } from './logging.js';
import { RULES_MODES, type RulesMode } from './seed.js';

/**
 * Process settings of `sluice serve`, read once at start. Each has a command-line flag, an
 * environment variable, a key in the configuration file (`--config`) and a default; a flag wins
 * over the variable, the variable over the file, the file over the default. The README's
 * settings table lists the same entries.
 */
export interface Settings {
  /** Rule files seeding the rule store when it has no version yet. */
  readonly rules: readonly string[];
  /** Directory of the file rule store (embedded store only). */
  readonly rulesDir: string | undefined;
  /** Whether the rule files only seed an empty store or are the source of truth. */
  readonly rulesMode: RulesMode;
  readonly host: string;
  /** The HTTP listener's port; undefined: `off`, no HTTP listener. */
  readonly port: number | undefined;
  /** The gRPC listener's port; undefined: `off`, no gRPC listener. */
  readonly grpcPort: number | undefined;
  readonly redisUrl: string | undefined;
  readonly redisCluster: readonly string[] | undefined;
  readonly redisPrefix: string;
  /** A fixed bound on one Redis call; undefined: adaptive. */
  readonly storeTimeoutMs: number | undefined;
  readonly onStoreFailure: (typeof STORE_FAILURE_POLICIES)[number];
  /** How often Redis' clock is read to measure this server's skew to it. */
  readonly skewIntervalMs: number;
  /** A clock skew to Redis larger than this is warned about. */
  readonly skewThresholdMs: number;
  readonly adminToken: string | undefined;
  readonly apiToken: string | undefined;
  /** The bearer token of outcome reports (the admin token is accepted too). */
  readonly outcomesToken: string | undefined;
  /** Take outcome reports from anyone on an open data plane (no api or outcomes token). */
  readonly openOutcomes: boolean;
  /** Most calls one outcome report may stand for (the sum of its items' counts). */
  readonly maxOutcomeCalls: number;
  readonly maxBodyBytes: number;
  readonly maxBatch: number;
  /** Most live bookings one client may hold (see `BookingClients`). */
  readonly maxBookingsPerClient: number;
  /** Most clients with live bookings tracked at once. */
  readonly maxBookingClients: number;
  readonly maxWaitMs: number;
  readonly maxKeyLength: number;
  readonly maxDescriptors: number;
  readonly maxOverrides: number;
  readonly overridesPerMinute: number;
  readonly overrideIdleMs: number;
  /** Most keys the embedded in-memory store holds (not used with Redis). */
  readonly maxKeys: number;
  readonly shutdownGraceMs: number;
  readonly bodyTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly maxConnections: number;
  readonly maxClientConnections: number;
  readonly maxClientWaits: number;
  /** Most decision items of one remote address waiting for their turn of the event loop. */
  readonly maxClientQueued: number;
  /** Most gRPC calls in progress over all connections of one remote address. */
  readonly maxClientStreams: number;
  /** How long a gRPC answer may wait for the peer to take it before its connection is cut. */
  readonly writeTimeoutMs: number;
  /** PEM certificate (chain) both listeners serve TLS with; undefined: plaintext. */
  readonly tlsCert: string | undefined;
  /** PEM private key of `tlsCert`. */
  readonly tlsKey: string | undefined;
  /** PEM CA bundle client certificates must chain to (mutual TLS); undefined: none asked. */
  readonly tlsClientCa: string | undefined;
  /** Serve the web dashboard at `/dashboard`. */
  readonly dashboard: boolean;
  readonly logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** How the log is written: JSON lines, pretty lines, or `auto` (pretty on a terminal, else JSON). */
  readonly logFormat: LogFormat;
  readonly rateLimitHeaders: RateLimitHeaderForm;
  /** How often the rollout is read and, by the decider, advanced and judged (ms). */
  readonly rolloutPollMs: number;
  /** How long the rollout decider's leadership lasts unrenewed (ms): another server takes over this long after it stops. */
  readonly rolloutLeadershipMs: number;
  /** Worker processes sharing the listeners (node:cluster); 1: the process serves itself. */
  readonly workers: number;
}

/** Most worker processes (`--workers`). */
export const MAX_WORKERS = 64;
const WORKERS_ERROR = `must be a number of workers (1-${MAX_WORKERS}) or auto`;

const int = (min: number, max: number) => z.coerce.number().int('must be an integer').min(min).max(max);
/** A port, or `off` (undefined): that listener is not opened. */
const portOrOff = z.union([z.literal('off').transform(() => undefined), int(0, 65_535)], {
  error: 'must be a port number (0-65535) or off',
});
const list = z
  .string()
  .transform((s) => s.split(',').map((x) => x.trim()))
  .pipe(z.array(z.string().min(1, 'must not have empty entries')));

/** One setting: its flag, environment variable, default and how its text is read. */
interface SettingSpec {
  readonly flag: string;
  readonly env: string;
  readonly default: string | undefined;
  readonly schema: z.ZodType;
  readonly doc: string;
}

/** Every setting, in the order the README lists them. */
export const SETTINGS = {
  rules: {
    flag: '--rules',
    env: 'SLUICE_RULES',
    default: undefined,
    schema: list,
    doc: 'Rule files (comma-separated in the variable; the flag repeats) that seed the rule store while it is empty',
  },
  rulesDir: {
    flag: '--rules-dir',
    env: 'SLUICE_RULES_DIR',
    default: undefined,
    schema: z.string().min(1),
    doc: 'Directory of the versioned rule store on the embedded store (default: `<first rules file>.versions`)',
  },
  rulesMode: {
    flag: '--rules-mode',
    env: 'SLUICE_RULES_MODE',
    default: 'seed',
    schema: z.enum(RULES_MODES, { error: `must be ${RULES_MODES.join(' or ')}` }),
    doc: '`seed`: the rule files seed an empty store, whose versions then win (changes through the admin API); `files`: the files win: content that differs from the version in force becomes a new version, at start, on SIGHUP and when a file changes',
  },
  host: {
    flag: '--host',
    env: 'SLUICE_HOST',
    default: '127.0.0.1',
    schema: z.string().min(1),
    doc: 'Address both listeners bind: loopback by default; `0.0.0.0` (or `::`) serves other machines (set `--api-token` then)',
  },
  port: {
    flag: '--port',
    env: 'SLUICE_PORT',
    default: '8080',
    schema: portOrOff,
    doc: 'HTTP port (0: any free port; `off`: no HTTP listener, so no JSON API, health, readiness or metrics)',
  },
  grpcPort: {
    flag: '--grpc-port',
    env: 'SLUICE_GRPC_PORT',
    default: '8081',
    schema: portOrOff,
    doc: 'gRPC port of the Envoy rate limit service (0: any free port; `off`: no gRPC listener)',
  },
  redisUrl: {
    flag: '--redis',
    env: 'SLUICE_REDIS_URL',
    default: undefined,
    schema: z.string().regex(/^rediss?:\/\//, 'must be a redis:// or rediss:// URL'),
    doc: 'Share limits and rules through this Redis',
  },
  redisCluster: {
    flag: '--redis-cluster',
    env: 'SLUICE_REDIS_CLUSTER',
    default: undefined,
    schema: list.pipe(z.array(z.string().regex(/^[^:,\s]+:\d{1,5}$/, 'must be host:port'))),
    doc: 'Share limits and rules through this Redis Cluster (`host:port,...` seed nodes)',
  },
  redisPrefix: {
    flag: '--redis-prefix',
    env: 'SLUICE_REDIS_PREFIX',
    default: 'sluice:',
    schema: z.string().max(128),
    doc: 'Prefix of every Redis key (limits, rules, peers)',
  },
  storeTimeoutMs: {
    flag: '--store-timeout-ms',
    env: 'SLUICE_STORE_TIMEOUT_MS',
    default: undefined,
    schema: int(1, 600_000),
    doc: 'Fixed bound on one Redis call (default: adaptive, 3 x the recent p99.9 between 50 ms and 1 s); past it the store-failure policy answers that call',
  },
  onStoreFailure: {
    flag: '--on-store-failure',
    env: 'SLUICE_ON_STORE_FAILURE',
    default: 'local',
    schema: z.enum(STORE_FAILURE_POLICIES),
    doc: 'Default policy while Redis is away: `local` (fair share), `open` or `closed`; rules may override per resource',
  },
  skewIntervalMs: {
    flag: '--skew-interval-ms',
    env: 'SLUICE_SKEW_INTERVAL_MS',
    default: '30000',
    schema: int(1000, 3_600_000),
    doc: "How often Redis' clock is read to measure this server's clock skew to it (exported as `sluice_clock_skew_seconds`, see docs/control-plane.md)",
  },
  skewThresholdMs: {
    flag: '--skew-threshold-ms',
    env: 'SLUICE_SKEW_THRESHOLD_MS',
    default: '1000',
    schema: int(1, 3_600_000),
    doc: "A clock skew to Redis' clock larger than this is logged as a warning (and again once back within)",
  },
  adminToken: {
    flag: '--admin-token',
    env: 'SLUICE_ADMIN_TOKEN',
    default: undefined,
    schema: z.string().min(16, 'must be at least 16 characters').max(1024),
    doc: 'Bearer token of the admin API; without one the admin API answers 401',
  },
  apiToken: {
    flag: '--api-token',
    env: 'SLUICE_API_TOKEN',
    default: undefined,
    schema: z.string().min(16, 'must be at least 16 characters').max(1024),
    doc: 'Bearer token every decision call needs (HTTP check, acquire, release, adjust, renew, reserve, book, claim, cancel; gRPC `authorization` metadata); without one they are open to whoever reaches the port. While no `--outcomes-token` is set it also lets its holders report outcomes',
  },
  outcomesToken: {
    flag: '--outcomes-token',
    env: 'SLUICE_OUTCOMES_TOKEN',
    default: undefined,
    schema: z.string().min(16, 'must be at least 16 characters').max(1024),
    doc: 'Bearer token of outcome reports (HTTP `/v1/outcomes`, gRPC `Outcomes/Report`), which steer fleet breakers, rollouts and adaptive limits; the admin token is accepted too, the api token no longer is. Without it: the api token, or on an open data plane only the admin token (see `--open-outcomes`)',
  },
  openOutcomes: {
    flag: '--open-outcomes',
    env: 'SLUICE_OPEN_OUTCOMES',
    default: 'off',
    schema: z.enum(['on', 'off'], { error: 'must be on or off' }).transform((v) => v === 'on'),
    doc: '`on`: take outcome reports from anyone while neither `--api-token` nor `--outcomes-token` is set (off: only with the admin token); refused at start beside either token',
  },
  maxOutcomeCalls: {
    flag: '--max-outcome-calls',
    env: 'SLUICE_MAX_OUTCOME_CALLS',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: "Most calls one outcome report may stand for: the sum of its items' `count` (1 each by default); a report claiming more is refused whole (`SLUICE_ERR_BATCH_TOO_LARGE`)",
  },
  maxBodyBytes: {
    flag: '--max-body-bytes',
    env: 'SLUICE_MAX_BODY_BYTES',
    default: '65536',
    schema: int(1024, 16 * 1024 * 1024),
    doc: 'Largest request body (HTTP) or message (gRPC); admin rule changes may be up to 2 MiB',
  },
  maxBatch: {
    flag: '--max-batch',
    env: 'SLUICE_MAX_BATCH',
    default: '100',
    schema: int(1, 10_000),
    doc: 'Most items in one batch call',
  },
  maxBookingsPerClient: {
    flag: '--max-bookings-per-client',
    env: 'SLUICE_MAX_BOOKINGS_PER_CLIENT',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: 'Most live bookings one client (remote address) may hold; a booking call past it answers SLUICE_ERR_BOOKING_LIMIT',
  },
  maxBookingClients: {
    flag: '--max-booking-clients',
    env: 'SLUICE_MAX_BOOKING_CLIENTS',
    default: '10000',
    schema: int(1, 1_000_000),
    doc: 'Most clients with live bookings the server tracks at once; a new one past it answers SLUICE_ERR_BOOKING_LIMIT',
  },
  maxWaitMs: {
    flag: '--max-wait-ms',
    env: 'SLUICE_MAX_WAIT_MS',
    default: '30000',
    schema: int(0, 3_600_000),
    doc: 'Longest `maxWaitMs` an acquire may ask for (also its default)',
  },
  maxKeyLength: {
    flag: '--max-key-length',
    env: 'SLUICE_MAX_KEY_LENGTH',
    default: '512',
    schema: int(16, 65_536),
    doc: 'Longest key (HTTP `key`, or the joined entries of an Envoy descriptor)',
  },
  maxDescriptors: {
    flag: '--max-descriptors',
    env: 'SLUICE_MAX_DESCRIPTORS',
    default: '64',
    schema: int(1, 4096),
    doc: 'Most descriptors in one ShouldRateLimit call, and most entries in one descriptor',
  },
  maxOverrides: {
    flag: '--max-overrides',
    env: 'SLUICE_MAX_OVERRIDES',
    default: '1000',
    schema: int(0, 1_000_000),
    doc: 'Most distinct limit overrides (Envoy `RateLimitDescriptor.limit`) the server keeps limits for at once',
  },
  overridesPerMinute: {
    flag: '--override-rate',
    env: 'SLUICE_OVERRIDE_RATE',
    default: '100',
    schema: int(0, 1_000_000),
    doc: 'Most new limit overrides admitted a minute (all of them at once after a quiet minute)',
  },
  overrideIdleMs: {
    flag: '--override-idle-ms',
    env: 'SLUICE_OVERRIDE_IDLE_MS',
    default: '60000',
    schema: int(1000, 86_400_000),
    doc: 'A limit override unused this long makes room for a new one',
  },
  maxKeys: {
    flag: '--max-keys',
    env: 'SLUICE_MAX_KEYS',
    default: '1000000',
    schema: int(1, 50_000_000),
    doc: 'Most keys the embedded store holds (not used with Redis), shared between resources; past it, live rate state leaves for a conservative per-resource summary and only new leases or bookings are refused (see docs/algorithms.md, "Full key tables")',
  },
  shutdownGraceMs: {
    flag: '--shutdown-grace-ms',
    env: 'SLUICE_SHUTDOWN_GRACE_MS',
    default: '10000',
    schema: int(0, 600_000),
    doc: 'On SIGTERM/SIGINT, how long in-flight calls may finish before waits are ended',
  },
  bodyTimeoutMs: {
    flag: '--body-timeout-ms',
    env: 'SLUICE_BODY_TIMEOUT_MS',
    default: '10000',
    schema: int(100, 600_000),
    doc: 'Longest time to receive an HTTP request (head and body) from its first byte or from the connection opening: past it 408, connection closed',
  },
  idleTimeoutMs: {
    flag: '--idle-timeout-ms',
    env: 'SLUICE_IDLE_TIMEOUT_MS',
    default: '30000',
    schema: int(100, 3_600_000),
    doc: 'How long an HTTP or gRPC connection may stay open with no call in progress',
  },
  maxConnections: {
    flag: '--max-connections',
    env: 'SLUICE_MAX_CONNECTIONS',
    default: '10000',
    schema: int(1, 1_000_000),
    doc: 'Most open connections of each listener (HTTP, gRPC); more are closed as they arrive',
  },
  maxClientConnections: {
    flag: '--max-client-conns',
    env: 'SLUICE_MAX_CLIENT_CONNS',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: 'Most open connections of each listener (HTTP, gRPC) from one remote address; more are closed as they arrive',
  },
  maxClientWaits: {
    flag: '--max-client-waits',
    env: 'SLUICE_MAX_CLIENT_WAITS',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: "Most acquires of one remote address waiting at once (more answer `queue_full`); a key's waiters of several addresses take turns, and when every waiting key is taken the address holding the most gives one up to an address holding fewer",
  },
  maxClientQueued: {
    flag: '--max-client-queued',
    env: 'SLUICE_MAX_CLIENT_QUEUED',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: 'Most API requests (HTTP requests, gRPC calls) of one remote address waiting for their turn; more are refused `SLUICE_ERR_CLIENT_BUSY` (addresses share the event loop by what their requests cost)',
  },
  maxClientStreams: {
    flag: '--max-client-streams',
    env: 'SLUICE_MAX_CLIENT_STREAMS',
    default: '1000',
    schema: int(1, 1_000_000),
    doc: 'Most gRPC calls in progress over all connections of one remote address (100 per connection); more are refused (`REFUSED_STREAM`)',
  },
  writeTimeoutMs: {
    flag: '--write-timeout-ms',
    env: 'SLUICE_WRITE_TIMEOUT_MS',
    default: '5000',
    schema: int(100, 600_000),
    doc: 'Longest a gRPC answer may wait for the peer to take it (its HTTP/2 flow-control window shut); past it the connection is cut (GOAWAY `ENHANCE_YOUR_CALM`)',
  },
  tlsCert: {
    flag: '--tls-cert',
    env: 'SLUICE_TLS_CERT',
    default: undefined,
    schema: z.string().min(1),
    doc: 'PEM certificate (with its chain) both listeners serve TLS with (HTTPS, gRPC over TLS); read again on SIGHUP',
  },
  tlsKey: {
    flag: '--tls-key',
    env: 'SLUICE_TLS_KEY',
    default: undefined,
    schema: z.string().min(1),
    doc: 'PEM private key of `--tls-cert`; read again on SIGHUP',
  },
  tlsClientCa: {
    flag: '--tls-client-ca',
    env: 'SLUICE_TLS_CLIENT_CA',
    default: undefined,
    schema: z.string().min(1),
    doc: 'PEM CA bundle: both listeners then require a client certificate that chains to it (mutual TLS); read again on SIGHUP',
  },
  dashboard: {
    // The flag only turns the dashboard off; the variable takes `on` or `off`.
    flag: '--no-dashboard',
    env: 'SLUICE_DASHBOARD',
    default: 'on',
    schema: z.enum(['on', 'off'], { error: 'must be on or off' }).transform((v) => v === 'on'),
    doc: 'Serve the web dashboard at `/dashboard` (`off`, or the flag, turns it off)',
  },
  logLevel: {
    flag: '--log-level',
    env: 'SLUICE_LOG_LEVEL',
    default: 'info',
    schema: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
    doc: 'pino log level',
  },
  logFormat: {
    flag: '--log-format',
    env: 'SLUICE_LOG_FORMAT',
    default: 'auto',
    schema: z.enum(LOG_FORMATS, { error: 'must be auto, json or pretty' }),
    doc: 'How the log is written: `json` (one JSON object a line), `pretty` (pino-pretty, for reading by hand) or `auto`: pretty when stdout is a terminal, JSON otherwise (pipes, files, CI)',
  },
  rateLimitHeaders: {
    flag: '--ratelimit-headers',
    env: 'SLUICE_RATELIMIT_HEADERS',
    default: 'draft',
    schema: z.enum(RATE_LIMIT_HEADER_FORMS, { error: 'must be draft, legacy or both' }),
    doc: "Rate-limit header fields on a single HTTP decision: the IETF draft's `RateLimit-Policy` / `RateLimit` (`draft`), the earlier drafts' `RateLimit-Limit` / `-Remaining` / `-Reset` (`legacy`), or `both`",
  },
  rolloutPollMs: {
    flag: '--rollout-poll-ms',
    env: 'SLUICE_ROLLOUT_POLL_MS',
    default: '1000',
    schema: int(50, 60_000),
    doc: 'How often the rule rollout is read and counts are flushed; the decider then advances and judges it (see docs/control-plane.md)',
  },
  rolloutLeadershipMs: {
    flag: '--rollout-leadership-ms',
    env: 'SLUICE_ROLLOUT_LEADERSHIP_MS',
    default: '10000',
    schema: int(200, 600_000),
    doc: "How long the rollout decider's leadership lasts unrenewed: if the deciding server stops, another takes over after this long",
  },
  workers: {
    flag: '--workers',
    env: 'SLUICE_WORKERS',
    default: '1',
    schema: z.coerce
      .string()
      .regex(/^(auto|\d{1,3})$/, WORKERS_ERROR)
      .transform((v) => (v === 'auto' ? Math.min(MAX_WORKERS, availableParallelism()) : Number(v)))
      .pipe(z.number().min(1, WORKERS_ERROR).max(MAX_WORKERS, WORKERS_ERROR)),
    doc: `Worker processes serving the same HTTP and gRPC ports (node:cluster), one per core: \`auto\` starts one per available core (at most ${MAX_WORKERS}). More than 1 needs Redis (\`--redis\` or \`--redis-cluster\`): the embedded store keeps its state in one process. See docs/deploying.md, "Workers"`,
  },
} as const satisfies Record<keyof Settings, SettingSpec>;

/** Raw values from the command line, by setting name (strings, or lists for repeatable flags). */
export type SettingFlags = Partial<Record<keyof Settings, string | readonly string[] | undefined>>;

/** A setting could not be read; the message names its flag and variable. */
export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingsError';
  }
}

/**
 * Flags and variables of 0.1 that were renamed: start refuses them (instead of ignoring a value
 * the operator meant) with a message naming the setting's new flag and variable.
 */
export const RENAMED_SETTINGS: readonly { readonly flag: string; readonly env: string; readonly setting: keyof Settings }[] = [
  { flag: '--rollout-lease-ms', env: 'SLUICE_ROLLOUT_LEASE_MS', setting: 'rolloutLeadershipMs' },
];

/** The error for a renamed flag or variable given at start (see {@link RENAMED_SETTINGS}). */
export function renamedSettingError(given: string): SettingsError | undefined {
  const old = RENAMED_SETTINGS.find((r) => r.flag === given || r.env === given);
  if (old === undefined) return undefined;
  const now = SETTINGS[old.setting];
  return new SettingsError(`${given} was renamed: use ${given === old.flag ? now.flag : now.env} (${now.flag} / ${now.env})`);
}

/**
 * A setting's key in a configuration file: its flag without the dashes (`--max-batch` is
 * `max-batch`), and for the flags that only turn something off (`--no-dashboard`) the thing itself
 * (`dashboard: false`).
 */
export function configKeyOf(name: keyof Settings): string {
  return SETTINGS[name].flag.replace(/^--(no-)?/, '');
}

/** Settings read from a configuration file (`--config`): its path, for messages, and its values. */
export interface SettingsFile {
  readonly path: string;
  readonly values: SettingFlags;
}

/**
 * Reads every setting once: flag, else environment variable, else the configuration file's
 * value, else default; validates and freezes them. Throws a {@link SettingsError} naming the
 * flag and variable, or the file and its key, at fault.
 */
export function loadSettings(
  flags: SettingFlags = {},
  env: Readonly<Record<string, string | undefined>> = process.env,
  file?: SettingsFile,
): Settings {
  for (const old of RENAMED_SETTINGS) {
    if (nonEmpty(env[old.env]) !== undefined) throw renamedSettingError(old.env)!;
  }
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(SETTINGS) as [keyof Settings, SettingSpec][]) {
    const flag = flags[name];
    const given = Array.isArray(flag) ? flag.join(',') : ((flag as string | undefined) ?? nonEmpty(env[spec.env]));
    const fromFile = given === undefined ? (file?.values[name] as string | undefined) : undefined;
    const raw = given ?? fromFile ?? spec.default;
    if (raw === undefined) {
      out[name] = undefined;
      continue;
    }
    const r = spec.schema.safeParse(raw);
    if (!r.success) {
      const why = r.error.issues[0]?.message ?? 'is invalid';
      const where = fromFile !== undefined ? `${file!.path}: ${configKeyOf(name)}` : `${spec.flag} / ${spec.env}`;
      throw new SettingsError(`${where}: ${why} (got ${JSON.stringify(raw)})`);
    }
    out[name] = r.data;
  }
  const s = out as unknown as Settings;
  if ((s.tlsCert === undefined) !== (s.tlsKey === undefined)) {
    throw new SettingsError(`${SETTINGS.tlsCert.flag} and ${SETTINGS.tlsKey.flag} go together: give both or neither`);
  }
  if (s.tlsClientCa !== undefined && s.tlsCert === undefined) {
    throw new SettingsError(
      `${SETTINGS.tlsClientCa.flag} asks clients for certificates over TLS: give ${SETTINGS.tlsCert.flag} and ${SETTINGS.tlsKey.flag} too`,
    );
  }
  if (s.port === undefined && s.grpcPort === undefined) {
    throw new SettingsError(`${SETTINGS.port.flag} off and ${SETTINGS.grpcPort.flag} off: there would be nothing to serve`);
  }
  if (s.rulesMode === 'files' && (s.rules ?? []).length === 0) {
    throw new SettingsError(
      `${SETTINGS.rulesMode.flag} files makes the rule files the source of truth: give ${SETTINGS.rules.flag} FILE`,
    );
  }
  if (s.redisUrl !== undefined && s.redisCluster !== undefined) {
    throw new SettingsError(`${SETTINGS.redisUrl.flag} and ${SETTINGS.redisCluster.flag} exclude each other`);
  }
  if (s.openOutcomes && (s.apiToken !== undefined || s.outcomesToken !== undefined)) {
    throw new SettingsError(
      `${SETTINGS.openOutcomes.flag} on opens outcome reports on an open data plane only: not beside ${SETTINGS.apiToken.flag} or ${SETTINGS.outcomesToken.flag}`,
    );
  }
  if (s.workers > 1 && s.redisUrl === undefined && s.redisCluster === undefined) {
    throw new SettingsError(
      `${SETTINGS.workers.flag} ${s.workers} shares limits between worker processes through Redis: give ${SETTINGS.redisUrl.flag} or ${SETTINGS.redisCluster.flag} (the embedded store keeps its state in one process)`,
    );
  }
  return Object.freeze({ ...s, rules: Object.freeze([...(s.rules ?? [])]) });
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === '' ? undefined : v;
}
