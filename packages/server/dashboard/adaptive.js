import { el } from './dom.js';

/**
 * The adaptive limits panel: one row per adaptive resource of the active rules, from the
 * `adaptive` list of `/v1/stats` (the limit now and its bounds, both calls per the window shown
 * beside them, and its last move).
 */
export class AdaptivePanel {
  /** @param {HTMLElement} section @param {HTMLElement} body the table's tbody */
  constructor(section, body) {
    this.section = section;
    this.body = body;
  }

  /** @param {{ resource: string, policy: string, limit: number, min: number, max: number, windowMs?: number, lastMoveAt?: string, lastMoveUnknown?: true }[] | undefined} rows */
  render(rows) {
    const list = rows ?? [];
    this.section.hidden = list.length === 0;
    this.body.replaceChildren(
      ...list.map((a) =>
        el(
          'tr',
          { 'data-resource': a.resource },
          el('td', {}, a.resource),
          el('td', {}, a.policy),
          el('td', { class: 'adaptive-limit' }, String(a.limit)),
          el('td', {}, `${a.min}–${a.max}`),
          el('td', { class: 'window' }, a.windowMs === undefined ? '?' : `${a.windowMs / 1000} s`),
          el('td', {}, lastMove(a)),
        ),
      ),
    );
  }
}

/** When the limit last moved, `—` if never, or that the store did not say (it is away). */
function lastMove(a) {
  if (a.lastMoveAt !== undefined) return a.lastMoveAt.replace('T', ' ').replace(/\.\d+Z$/, '');
  return a.lastMoveUnknown === true ? 'unknown (store unreachable)' : '—';
}
