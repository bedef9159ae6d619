import { byId, el } from './dom.js';
import { healthFigures } from './lib/health.js';

/** The state in words, first on the strip: never told by colour alone. */
const STATE_TEXT = {
  ok: 'Healthy',
  degraded: 'DEGRADED: the store is unreachable; the store-failure policy decides',
  unknown: 'Health: not reported by this server',
};

/**
 * The health strip under the header: the state in words (and colour), then the `health` of
 * `/v1/stats` figure by figure, each labelled with its period, from the same code as the first
 * line of `sluice status` (`src/stats/health.ts`). `data-state` is `ok`, `degraded`, `unknown`
 * or `stale` (the server did not answer the last read: the figures are the last ones read).
 */
export class HealthStrip {
  constructor() {
    this.root = byId('health');
    this.state = byId('health-state');
    this.figures = byId('health-figures');
  }

  /** @param {import('./lib/health.js').HealthView | undefined} view the `health` of a snapshot */
  render(view) {
    const state = view === undefined ? 'unknown' : view.reachable ? 'ok' : 'degraded';
    this.root.setAttribute('data-state', state);
    this.state.textContent = STATE_TEXT[state];
    this.figures.replaceChildren(
      ...(view === undefined ? [] : healthFigures(view)).map((f) =>
        el('div', { 'data-name': f.name, 'data-state': f.state }, el('dt', {}, f.label), el('dd', {}, f.value)),
      ),
    );
  }

  /** The server did not answer: say so, keep the last figures. @param {string} why */
  stale(why) {
    this.root.setAttribute('data-state', 'stale');
    this.state.textContent = `Health: no answer from the server (${why}); figures as last read`;
  }
}
