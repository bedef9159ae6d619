import { svg, el } from './dom.js';
import { formatRate } from './lib/rates.js';

/** Most resource charts on the page; the busiest are shown. */
export const MAX_CHARTS = 24;

const WIDTH = 320;
const HEIGHT = 96;

/**
 * The per-resource charts: one card per resource, busiest first, kept across updates (keyed
 * by resource name in a Map, never by a selector built from the name).
 */
export class Charts {
  /** @param {HTMLElement} container @param {HTMLElement} empty */
  constructor(container, empty) {
    this.container = container;
    this.empty = empty;
    /** @type {Map<string, ReturnType<typeof card>>} */
    this.cards = new Map();
  }

  /**
   * Redraws every chart from the history. Every x axis spans the history's whole window (the
   * legend says it, once), ending at the latest read: a page opened a minute ago draws its
   * minute at the right end.
   * @param {import('./lib/rates.js').RateHistory} history
   * @param {Map<string, number | undefined>} limitRates limit per second per key, by resource
   */
  render(history, limitRates) {
    const names = history.resources().slice(0, MAX_CHARTS);
    const latest = history.latest()?.at ?? 0;
    for (const [name, c] of this.cards) {
      if (!names.includes(name)) {
        c.root.remove();
        this.cards.delete(name);
      }
    }
    for (const name of names) {
      let c = this.cards.get(name);
      if (c === undefined) this.cards.set(name, (c = card(name)));
      update(c, history.points(name), latest - history.windowMs, latest, limitRates.get(name));
      // append() moves an existing card: the page follows the history's order.
      this.container.append(c.root);
    }
    this.empty.hidden = names.length > 0;
  }
}

/** @param {string} name */
function card(name) {
  const value = (cls) => el('b', { class: cls }, '0.00');
  const figures = {
    allowed: value('allowed-rate'),
    denied: value('denied-rate'),
    shadow: value('shadow-rate'),
    limit: value('limit-value'),
    limitRate: value('limit-rate'),
    peakAllowed: value('peak-allowed'),
    peakDenied: value('peak-denied'),
    peakShadow: value('peak-shadow'),
  };
  const lines = {
    limit: svg('polyline', { class: 'line limit', points: '' }),
    shadow: svg('polyline', { class: 'line shadow', points: '' }),
    denied: svg('polyline', { class: 'line denied', points: '' }),
    allowed: svg('polyline', { class: 'line allowed', points: '' }),
  };
  const top = svg('text', { class: 'axis', x: 2, y: 10 }, '');
  const chart = svg(
    'svg',
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'chart', role: 'img', 'aria-label': `decisions per second of ${name}` },
    svg('line', { class: 'baseline', x1: 0, y1: HEIGHT - 1, x2: WIDTH, y2: HEIGHT - 1 }),
    lines.limit,
    lines.shadow,
    lines.denied,
    lines.allowed,
    top,
  );
  const root = el(
    'article',
    { class: 'resource', 'data-resource': name },
    el('h3', {}, name),
    el(
      'p',
      { class: 'figures' },
      el('span', { class: 'allowed' }, 'allowed ', figures.allowed, '/s'),
      el('span', { class: 'denied' }, 'denied ', figures.denied, '/s'),
      el('span', { class: 'shadow' }, 'shadow-denied ', figures.shadow, '/s'),
      el('span', { class: 'limit' }, 'limit ', figures.limit, ' (', figures.limitRate, '/s per key)'),
    ),
    el(
      'p',
      { class: 'peaks' },
      'peak allowed ',
      figures.peakAllowed,
      '/s, denied ',
      figures.peakDenied,
      '/s, shadow-denied ',
      figures.peakShadow,
      '/s',
    ),
    chart,
  );
  return { root, figures, lines, top, chart };
}

/**
 * @param {ReturnType<typeof card>} c
 * @param {readonly import('./lib/rates.js').RatePoint[]} points
 * @param {number} from
 * @param {number} to
 * @param {number | undefined} limitRate
 */
function update(c, points, from, to, limitRate) {
  const last = points.at(-1);
  const peak = (pick) => points.reduce((m, p) => Math.max(m, pick(p)), 0);
  const peakAllowed = peak((p) => p.allowedRate);
  const peakDenied = peak((p) => p.deniedRate);
  const peakShadow = peak((p) => p.shadowDeniedRate);
  c.figures.allowed.textContent = formatRate(last?.allowedRate ?? 0);
  c.figures.denied.textContent = formatRate(last?.deniedRate ?? 0);
  c.figures.shadow.textContent = formatRate(last?.shadowDeniedRate ?? 0);
  c.figures.limit.textContent = String(last?.limit ?? 0);
  c.figures.limitRate.textContent = limitRate === undefined ? 'n/a' : formatRate(limitRate);
  c.figures.peakAllowed.textContent = formatRate(peakAllowed);
  c.figures.peakDenied.textContent = formatRate(peakDenied);
  c.figures.peakShadow.textContent = formatRate(peakShadow);

  const max = Math.max(1, peakAllowed, peakDenied, peakShadow, limitRate ?? 0) * 1.1;
  const x = (at) => (((at - from) / Math.max(1, to - from)) * WIDTH).toFixed(1);
  const y = (v) => (HEIGHT - 1 - (v / max) * (HEIGHT - 12)).toFixed(1);
  const line = (pick) => points.map((p) => `${x(p.at)},${y(pick(p))}`).join(' ');
  c.lines.allowed.setAttribute(
    'points',
    line((p) => p.allowedRate),
  );
  c.lines.denied.setAttribute(
    'points',
    line((p) => p.deniedRate),
  );
  c.lines.shadow.setAttribute(
    'points',
    line((p) => p.shadowDeniedRate),
  );
  c.lines.limit.setAttribute('points', limitRate === undefined ? '' : `0,${y(limitRate)} ${WIDTH},${y(limitRate)}`);
  c.top.textContent = `${formatRate(max)}/s`;
  // The span plotted, for whoever reads the chart's scale (the tests do).
  c.chart.setAttribute('data-from', String(from));
  c.chart.setAttribute('data-to', String(to));
}
