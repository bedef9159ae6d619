import { ErrorCodes, invalid, shown, type ErrorCode } from './errors.js';

/**
 * Reads an integer option: `value`, or `fallback` when it is undefined, must be an integer in
 * `min..max`; otherwise throws a `SluiceError` (`code`, by default `SLUICE_ERR_INVALID_OPTIONS`)
 * naming `field`. The one check every package's option compiler uses.
 */
export function intOption(
  value: unknown,
  field: string,
  fallback: number | undefined,
  min: number,
  max: number,
  code: ErrorCode = ErrorCodes.INVALID_OPTIONS,
): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalid(code, field, `must be an integer between ${min} and ${max}, got ${shown(v)}`);
  }
  return v;
}
