import { el } from './dom.js';

/**
 * The tiers table: per resource that declares priority tiers (or has a boost pool), each tier's
 * decisions since the service started, from `/v1/stats` (`tiers`, `boosted`). Rows are keyed by
 * data attributes, and names only ever become text nodes.
 */
export class TiersPanel {
  /** @param {HTMLElement} section @param {HTMLElement} body the table's tbody */
  constructor(section, body) {
    this.section = section;
    this.body = body;
  }

  /**
   * Redraws the table from one stats snapshot.
   * @param {{ resources?: { resource: string, boosted?: number, tiers?: { tier: string, allowed: number, denied: number, boosted: number, shadowDenied?: number }[] }[] }} snapshot
   */
  render(snapshot) {
    const rows = [];
    for (const r of snapshot.resources ?? []) {
      const tiers = r.tiers ?? [];
      for (const t of tiers) rows.push(row(r.resource, t.tier, t.allowed, t.denied, t.boosted, t.shadowDenied ?? 0));
      // A boost pool on the core/normal tiers: no per-tier figures, only the boosts.
      if (tiers.length === 0 && (r.boosted ?? 0) > 0) {
        rows.push(row(r.resource, '—', undefined, undefined, r.boosted ?? 0, undefined));
      }
    }
    this.body.replaceChildren(...rows);
    this.section.hidden = rows.length === 0;
  }
}

/**
 * @param {string} resource @param {string} tier
 * @param {number | undefined} allowed @param {number | undefined} denied @param {number} boosted
 * @param {number | undefined} shadowDenied of `allowed`, admitted only because the resource is in shadow mode
 */
function row(resource, tier, allowed, denied, boosted, shadowDenied) {
  const cell = (cls, v) => el('td', { class: cls }, v === undefined ? '—' : String(v));
  return el(
    'tr',
    { 'data-resource': resource, 'data-tier': tier },
    el('td', {}, resource),
    el('td', {}, tier),
    cell('allowed', allowed),
    cell('boosted', boosted),
    cell('denied', denied),
    cell('shadow-denied', shadowDenied),
  );
}
