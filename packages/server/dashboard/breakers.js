import { el } from './dom.js';

/** The fleet-wide circuit breakers (`GET /v1/breakers`) as a table: one row per resource. */
export class BreakersPanel {
  /**
   * @param {HTMLElement} table
   * @param {HTMLElement} empty
   */
  constructor(table, empty) {
    this.table = table;
    this.empty = empty;
  }

  /** The breakers could not be read: say so instead of the last rows. @param {string} why */
  unreadable(why) {
    this.table.hidden = true;
    this.empty.hidden = false;
    this.empty.textContent = `The breakers could not be read: ${why}`;
  }

  /** @param {{ breakers?: { resource: string, state: string, policy: { windowMs: number, halfOpenProbes: number }, window?: { calls: number, failures: number, slow: number } }[] }} snapshot */
  render(snapshot) {
    const list = snapshot.breakers ?? [];
    this.table.hidden = list.length === 0;
    this.empty.hidden = list.length > 0;
    this.empty.textContent = 'No fleet-wide breakers.';
    const body = this.table.querySelector('tbody');
    if (body === null) return;
    const figure = (v) => (v === undefined ? '?' : String(v));
    body.replaceChildren(
      ...list.map((b) =>
        el(
          'tr',
          { 'data-resource': b.resource, 'data-state': b.state },
          el('td', {}, b.resource),
          el('td', { class: `state ${b.state}` }, b.state.replace('_', '-')),
          el('td', { class: 'calls' }, figure(b.window?.calls)),
          el('td', { class: 'failures' }, figure(b.window?.failures)),
          el('td', { class: 'slow' }, figure(b.window?.slow)),
          el('td', {}, `${b.policy.windowMs / 1000} s`),
          el('td', {}, String(b.policy.halfOpenProbes)),
        ),
      ),
    );
  }
}
