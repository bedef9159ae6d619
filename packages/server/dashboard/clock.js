import { byId } from './dom.js';
import { clockSkewSummary } from './lib/clock.js';

const clockSkew = byId('clock-skew');

/**
 * Shows the server's clock against its store's (the `clockSkew` of `/v1/stats`) in the header;
 * `data-state` is `ok`, `skewed` (over the warning threshold) or `unknown`.
 */
export function showClockSkew(view) {
  const { text, state } = clockSkewSummary(view);
  clockSkew.textContent = text;
  clockSkew.setAttribute('data-state', state);
}
