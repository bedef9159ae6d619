/** A failure the CLI reports as one line (and exits non-zero). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** An error answer of the server, as `{ error: { code, message, issues? } }`. */
interface ErrorAnswer {
  error?: { code?: string; message?: string; issues?: { file: string; path: string; message: string }[] };
}

/** Options of {@link request}. */
export interface RequestOptions {
  readonly method?: 'GET' | 'POST';
  readonly token?: string;
  readonly body?: unknown;
  readonly timeoutMs?: number;
}

/** Calls the server's HTTP API; non-2xx answers and unreachable servers become {@link CliError}s. */
export async function request<T>(server: string, path: string, options: RequestOptions = {}): Promise<T> {
  let url: URL;
  try {
    url = new URL(path, server.endsWith('/') ? server : `${server}/`);
  } catch {
    throw new CliError(`--server ${JSON.stringify(server)} is not a URL (e.g. http://127.0.0.1:8080)`, 2);
  }
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(url, {
      method: options.method ?? 'GET',
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
    });
  } catch (err) {
    const cause = err instanceof Error ? ((err.cause as Error | undefined)?.message ?? err.message) : String(err);
    throw new CliError(`cannot reach ${url.origin}: ${cause}`);
  }
  const text = await res.text();
  let json: unknown;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  if (!res.ok) {
    const e = (json as ErrorAnswer | undefined)?.error;
    const lines = [`${res.status} ${e?.code ?? res.statusText}: ${e?.message ?? text.slice(0, 200)}`];
    // Invalid rules: the message already lists every issue, one per line.
    if (res.status === 401) lines.push('pass the admin token with --token or SLUICE_ADMIN_TOKEN');
    throw new CliError(lines.join('\n'));
  }
  if (json === undefined && path !== '/metrics') throw new CliError(`${url.href} did not answer JSON`);
  return json as T;
}
