import { el } from './dom.js';

/** Most characters of a key shown (the full key is in the cell's title). */
const SHOWN_KEY_LENGTH = 64;

/**
 * The hot-keys panel: for each resource that tracks hot keys (`hotKeys` in its rules), its
 * heaviest keys as this server counts them, with their rate, share of the resource's calls and
 * whether they are mitigated. Keys are caller data: they only ever become text.
 */
export class HotKeysPanel {
  /**
   * @param {HTMLElement} body where the tables go
   * @param {HTMLElement} empty shown while no resource tracks hot keys
   */
  constructor(body, empty) {
    this.body = body;
    this.empty = empty;
  }

  /** @param {readonly any[] | undefined} reports the `hotKeys` of a `/v1/stats` snapshot */
  render(reports) {
    const list = reports ?? [];
    this.empty.hidden = list.length > 0;
    // Each table in a box of its own that scrolls when the table is wider than the panel.
    this.body.replaceChildren(...list.map((r) => el('div', { class: 'table-scroll' }, this.#table(r))));
  }

  #table(r) {
    const caption = el(
      'caption',
      {},
      el('strong', {}, String(r.resource)),
      ` ${Math.round(r.calls)} calls in ${r.windowMs / 1000} s, ${r.mitigated} mitigated`,
    );
    const head = el(
      'thead',
      {},
      el('tr', {}, el('th', {}, 'Key'), el('th', {}, 'Calls/s'), el('th', {}, 'Share of calls'), el('th', {}, 'Mitigation')),
    );
    if (r.keysHidden === true) {
      const note = el(
        'td',
        { colspan: '4', class: 'hidden-keys' },
        'Keys are shown with the admin token (enter it in the rules panel).',
      );
      return el(
        'table',
        { class: 'hot-keys', 'data-resource': String(r.resource) },
        caption,
        head,
        el('tbody', {}, el('tr', {}, note)),
      );
    }
    if (r.keys.length === 0) {
      const none = el('td', { colspan: '4', class: 'no-keys' }, `No calls in the last ${r.windowMs / 1000} s.`);
      return el(
        'table',
        { class: 'hot-keys', 'data-resource': String(r.resource) },
        caption,
        head,
        el('tbody', {}, el('tr', {}, none)),
      );
    }
    const rows = r.keys.map((k) => {
      const key = String(k.key);
      const shown = key.length > SHOWN_KEY_LENGTH ? `${key.slice(0, SHOWN_KEY_LENGTH - 1)}…` : key;
      return el(
        'tr',
        { 'data-key': key, 'data-mitigation': k.mitigation ?? 'none' },
        el('td', { class: 'key', title: key }, shown),
        el('td', { class: 'rate' }, Number(k.rate).toFixed(1)),
        el('td', { class: 'share' }, `${(Number(k.share) * 100).toFixed(1)}%`),
        el('td', { class: 'mitigation' }, k.mitigation ?? '—'),
      );
    });
    return el('table', { class: 'hot-keys', 'data-resource': String(r.resource) }, caption, head, el('tbody', {}, ...rows));
  }
}
