import { ErrorCodes, invalid } from '@sluice/core';

export { intOption } from '@sluice/core';

/** Throws `SLUICE_ERR_INVALID_OPTIONS` unless `value` is undefined or a function. */
export function fnOption<T>(value: T | undefined, field: string): T | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw invalid(ErrorCodes.INVALID_OPTIONS, field, `must be a function, got ${typeof value}`);
  }
  return value;
}
