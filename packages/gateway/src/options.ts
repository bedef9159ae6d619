import { ErrorCodes, invalid } from '@sluice/core';

/** Reads an optional integer option in `min..max`, or throws `SLUICE_ERR_INVALID_OPTIONS`. */
export function intOption(value: unknown, field: string, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be an integer in ${min}..${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** Throws `SLUICE_ERR_INVALID_OPTIONS` unless `value` is undefined or a function. */
export function fnOption<T>(value: T | undefined, field: string): T | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be a function, got ${typeof value}`);
  }
  return value;
}
