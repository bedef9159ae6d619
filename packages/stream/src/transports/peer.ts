/**
 * Loading a broker client, an optional peer dependency of `@sluice/stream`. The broker subpaths
 * import their client through {@link loadPeer} (a dynamic import, awaited at module load)
 * instead of a static import: a static import of a package that is not installed fails while
 * Node links the modules, before any code of ours runs, with "Cannot find package 'nats'
 * imported from .../dist/transports/nats/transport.js", which does not say that the package is
 * an optional peer the user must install.
 */
import { StreamError, StreamErrorCodes } from '../errors.js';

/** True when `err` says that `pkg` itself (not one of its own dependencies) cannot be found. */
function isMissing(err: unknown, pkg: string): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  const notFound = code === 'ERR_MODULE_NOT_FOUND' || /Cannot find (package|module)|Failed to (load|resolve)/.test(err.message);
  return notFound && (err.message.includes(`'${pkg}'`) || err.message.includes(`"${pkg}"`));
}

/**
 * Imports `specifier` (the package `pkg`, or one of its subpaths) for the subpath `entry`; when
 * `pkg` is not installed, fails with `SLUICE_ERR_STREAM_MISSING_PEER` naming what to install.
 */
export async function loadPeer<T>(specifier: string, pkg: string, entry: string, install = pkg): Promise<T> {
  try {
    return (await import(specifier)) as T;
  } catch (e) {
    if (!isMissing(e, pkg)) throw e;
    throw new StreamError(
      StreamErrorCodes.MISSING_PEER,
      `${entry} needs the package ${pkg}, an optional peer dependency of @sluice/stream that is not installed: run npm install ${install}`,
      { cause: e },
    );
  }
}
