/** The subset of a pino logger Sluice uses. */
export interface Logger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** What {@link createStderrLogger} writes lines to. */
export type LineWriter = (line: string) => void;

function plain(value: unknown): unknown {
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    return {
      message: value.message,
      ...(typeof code === 'string' ? { code } : {}),
      ...(value.cause ? { cause: plain(value.cause) } : {}),
    };
  }
  return value;
}

/**
 * A minimal logger writing one JSON line per entry (pino's shape: level, time, msg and the
 * fields) to stderr. It is the default wherever Sluice reports a degradation, so a store that
 * cannot be reached is never silent; give your own logger, or `false` to silence it.
 */
export function createStderrLogger(write: LineWriter = (line) => void process.stderr.write(line)): Logger {
  const entry = (level: 'info' | 'warn', obj: object, msg: string): void => {
    const fields: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) fields[k] = plain(v);
    let line: string;
    try {
      line = JSON.stringify({ level, time: Date.now(), name: 'sluice', msg, ...fields });
    } catch {
      line = JSON.stringify({ level, time: Date.now(), name: 'sluice', msg });
    }
    write(`${line}\n`);
  };
  return {
    info: (obj, msg) => entry('info', obj, msg),
    warn: (obj, msg) => entry('warn', obj, msg),
  };
}

/** The default logger: JSON lines to stderr. */
export const stderrLogger: Logger = createStderrLogger();

/** Resolves a `logger` option: `undefined` means the default, `false` means none. */
export function resolveLogger(logger: Logger | false | undefined): Logger | undefined {
  if (logger === false) return undefined;
  return logger ?? stderrLogger;
}

/** An error as a degradation's log line carries it: no stack, the network detail kept. */
export interface ErrorSummary {
  /** The error's code (`SLUICE_ERR_STORE_UNAVAILABLE`, `ECONNREFUSED`), when it has one. */
  readonly code?: string;
  readonly message: string;
  /** The system error underneath (`ECONNREFUSED 127.0.0.1:6379`), when there is one. */
  readonly cause?: string;
}

/** Causes followed at most (a cycle of causes must not hang a log line). */
const MAX_CAUSES = 8;

/** `code address:port` of a Node system error (`ECONNREFUSED 127.0.0.1:6379`), else undefined. */
function systemError(e: Error): string | undefined {
  const { code, address, port, syscall } = e as { code?: unknown; address?: unknown; port?: unknown; syscall?: unknown };
  if (typeof code !== 'string' || code.startsWith('SLUICE_ERR_')) return undefined;
  if (typeof address === 'string') return typeof port === 'number' ? `${code} ${address}:${port}` : `${code} ${address}`;
  return typeof syscall === 'string' ? code : undefined;
}

/**
 * What a degradation's log line says of `err`: its code and message, and the system error under
 * it (`ECONNREFUSED 127.0.0.1:6379`), found down its causes. Never a stack: a store that cannot
 * be reached is a condition, not a bug.
 */
export function errorSummary(err: unknown): ErrorSummary {
  if (!(err instanceof Error)) return { message: String(err) };
  const code = (err as { code?: unknown }).code;
  let cause: string | undefined;
  let e: unknown = err.cause;
  for (let i = 0; i < MAX_CAUSES && e instanceof Error && cause === undefined; i++, e = e.cause) cause = systemError(e);
  return {
    ...(typeof code === 'string' ? { code } : {}),
    message: err.message,
    ...(cause === undefined ? {} : { cause }),
  };
}

/** The reason in a degradation's line: the system error (`ECONNREFUSED 127.0.0.1:6379`), else the message. */
export function reasonOf(err: unknown): string {
  const own = err instanceof Error ? systemError(err) : undefined;
  if (own !== undefined) return own;
  const s = errorSummary(err);
  return s.cause ?? (s.code !== undefined && !s.code.startsWith('SLUICE_ERR_') ? `${s.code}: ${s.message}` : s.message);
}
