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
