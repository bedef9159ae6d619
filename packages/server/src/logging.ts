import { pino, type Logger } from 'pino';

/**
 * How `sluice serve` writes its log: `json` (one pino JSON object a line), `pretty` (pino-pretty's
 * coloured, human-readable lines) or `auto`: pretty when stdout is a terminal, JSON otherwise
 * (pipes, files, CI, log collectors).
 */
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** The format a log written to a terminal (`isTty`) or elsewhere gets for the `format` setting. */
export function chooseLogFormat(format: LogFormat, isTty: boolean): 'json' | 'pretty' {
  if (format !== 'auto') return format;
  return isTty ? 'pretty' : 'json';
}

/**
 * The server's logger at `level` on stdout, in the format {@link chooseLogFormat} picks (`isTty`:
 * whether stdout is a terminal). Pretty lines are formatted in this process and written
 * synchronously (no worker thread, nothing lost at exit), coloured only on a terminal and without
 * `NO_COLOR`;
 * pino-pretty is loaded only then (JSON, the default off a terminal, does not pay for it).
 */
export async function createLogger(
  level: string,
  format: LogFormat,
  isTty = process.stdout.isTTY === true,
  /** Where pretty lines go (a test's stream); JSON always goes to stdout. @default stdout */
  destination: number | NodeJS.WritableStream = 1,
): Promise<Logger> {
  // Levels as words ("level":"warn"), as the library and the client write them: one format for
  // every line a Sluice process writes.
  if (chooseLogFormat(format, isTty) === 'json') return pino({ level, formatters: { level: (label) => ({ level: label }) } });
  const { default: pretty } = await import('pino-pretty');
  // NO_COLOR (https://no-color.org): any non-empty value turns colour off.
  const colorize = isTty && !process.env.NO_COLOR;
  return pino({ level }, pretty({ destination, sync: true, colorize, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' }));
}

/** What a redacted value is logged as. */
export const REDACTED = '[REDACTED]';

/**
 * Names of query parameters, headers and metadata entries whose values are credentials: any
 * `authorization` header, and anything named like a token, key, secret or password.
 */
const SENSITIVE_NAME = /auth|token|key|secret|passw|pwd|credential|signature|cookie/i;

/** Whether a query parameter, header or metadata entry named `name` carries a credential. */
export function isSensitiveName(name: string): boolean {
  return SENSITIVE_NAME.test(name);
}

/**
 * `url` (a path with a query, or an absolute URL) with the values of sensitive query parameters
 * and any user info replaced by {@link REDACTED}. Text that is not a URL is returned as it is.
 */
export function redactUrl(url: unknown): unknown {
  if (typeof url !== 'string') return url;
  const withoutUserInfo = url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@?#]*@/i, `$1${REDACTED}@`);
  const q = withoutUserInfo.indexOf('?');
  if (q < 0) return withoutUserInfo;
  const hash = withoutUserInfo.indexOf('#', q);
  const end = hash < 0 ? withoutUserInfo.length : hash;
  const query = withoutUserInfo
    .slice(q + 1, end)
    .split('&')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const rawName = eq < 0 ? pair : pair.slice(0, eq);
      let name = rawName;
      try {
        name = decodeURIComponent(rawName.replace(/\+/g, ' '));
      } catch {
        // A malformed escape: judge the name as written.
      }
      return eq >= 0 && isSensitiveName(name) ? `${rawName}=${REDACTED}` : pair;
    })
    .join('&');
  return `${withoutUserInfo.slice(0, q + 1)}${query}${withoutUserInfo.slice(end)}`;
}

/**
 * A copy of headers or gRPC metadata (a plain object, or anything with `getMap()` such as
 * `grpc.Metadata`) with the values of sensitive entries replaced by {@link REDACTED}.
 */
export function redactFields(fields: unknown): unknown {
  const map =
    typeof fields === 'object' && fields !== null && typeof (fields as { getMap?: unknown }).getMap === 'function'
      ? (fields as { getMap(): Record<string, unknown> }).getMap()
      : fields;
  if (typeof map !== 'object' || map === null) return map;
  return Object.fromEntries(Object.entries(map).map(([name, value]) => [name, isSensitiveName(name) ? REDACTED : value]));
}

/**
 * `logger` with credentials kept out of its lines: URLs logged as `url` or `route` lose sensitive
 * query values, `headers` and `metadata` lose sensitive entries, and any `authorization` field up
 * to three levels deep is censored. The server logs only through such a logger, whoever made it.
 */
export function redactingLogger(logger: Logger): Logger {
  return logger.child(
    {},
    {
      serializers: { url: redactUrl, route: redactUrl, headers: redactFields, metadata: redactFields },
      redact: {
        paths: [
          'authorization',
          '*.authorization',
          '*.*.authorization',
          'req.headers.authorization',
          'req.headers.cookie',
          'headers.cookie',
        ],
        censor: REDACTED,
      },
    },
  );
}

/** Counts each warning, logged or not (a Prometheus counter in the server). */
export type WarningCounter = (event: string) => void;

/** One kind of warning while it repeats. */
interface Burst {
  readonly level: 'warn' | 'error';
  readonly msg: string;
  suppressed: number;
  readonly timer: NodeJS.Timeout;
}

/**
 * Warnings that outsiders can cause at will (refused admin calls, failed requests) logged without
 * letting them flood the log: the first of a kind is logged in full, repeats within `intervalMs`
 * are only counted, and at most one summary line per interval says how many there were. Every
 * occurrence is counted through `count`. `close()` logs what is still pending and stops the timers.
 */
export class WarningThrottle {
  readonly #bursts = new Map<string, Burst>();

  constructor(
    private readonly logger: Logger,
    private readonly count: WarningCounter = () => undefined,
    private readonly intervalMs = 60_000,
  ) {}

  warn(event: string, fields: Record<string, unknown>, msg: string): void {
    this.#log('warn', event, fields, msg);
  }

  error(event: string, fields: Record<string, unknown>, msg: string): void {
    this.#log('error', event, fields, msg);
  }

  /** A fault log whose lines are throttled as `event` (for `sendError`). */
  faults(event: string): { error(fields: object, msg: string): void } {
    return { error: (fields, msg) => this.error(event, { ...fields }, msg) };
  }

  /** Logs the pending summaries and stops the timers. */
  close(): void {
    for (const event of [...this.#bursts.keys()]) this.#flush(event, true);
  }

  #log(level: Burst['level'], event: string, fields: Record<string, unknown>, msg: string): void {
    this.count(event);
    const burst = this.#bursts.get(event);
    if (burst !== undefined) {
      burst.suppressed++;
      return;
    }
    this.logger[level]({ ...fields, event }, msg);
    const timer = setInterval(() => this.#flush(event, false), this.intervalMs);
    timer.unref();
    this.#bursts.set(event, { level, msg, suppressed: 0, timer });
  }

  /** Ends an interval: a summary if anything repeated, else the burst is over. */
  #flush(event: string, closing: boolean): void {
    const burst = this.#bursts.get(event);
    if (burst === undefined) return;
    if (burst.suppressed > 0) {
      this.logger[burst.level](
        { event, repeated: burst.suppressed, intervalMs: this.intervalMs },
        `${burst.msg} (repeated ${burst.suppressed} times, not logged one by one)`,
      );
      burst.suppressed = 0;
      if (!closing) return;
    }
    clearInterval(burst.timer);
    this.#bursts.delete(event);
  }
}
