/* global sessionStorage, HTMLElement */
import { byId, el } from './dom.js';
import { TOKEN_KEY, admin } from './rules.js';

/** The actions each status of a rollout in progress takes (the admin API refuses the others with 409). */
const ACTIONS = {
  running: ['pause', 'promote', 'abort'],
  paused: ['resume', 'promote', 'abort'],
};

/**
 * The rollout panel: what `/v1/rollout` says (status, the version of each cohort, the share of
 * keys on the candidate, the step and the last note), and while a rollout is in progress the
 * buttons its status allows: pause or resume, promote, abort (they need the admin token).
 */
export class RolloutPanel {
  constructor() {
    this.summary = byId('rollout-summary');
    this.details = byId('rollout-details');
    this.form = byId('rollout-form');
    this.message = byId('rollout-message');
    this.form.addEventListener('click', (event) => {
      const action = event.target instanceof HTMLElement ? event.target.dataset.action : undefined;
      if (action !== undefined) void this.act(action);
    });
    this.form.addEventListener('submit', (event) => event.preventDefault());
  }

  /**
   * Reads the rollout: through the admin API with the token (who started it and why, the
   * notes), else the public summary.
   * @param {(path: string) => Promise<any>} getJson
   */
  async refresh(getJson) {
    const token = sessionStorage.getItem(TOKEN_KEY) ?? undefined;
    let answer;
    if (token !== undefined) {
      try {
        const a = await admin(token, '/rollout');
        answer = { rollout: a.rollout === null ? null : { ...a.rollout, percent: a.percent } };
      } catch {
        answer = undefined;
      }
    }
    // A server without a rollout store has no /v1/rollout: the panel then says there is none.
    answer ??= await getJson('/v1/rollout').catch(() => ({ rollout: null }));
    this.update(answer);
  }

  /** @param {{ rollout: null | Record<string, any> }} answer what `/v1/rollout` answered */
  update(answer) {
    const r = answer?.rollout ?? null;
    const status = r === null ? 'none' : String(r.status);
    this.summary.setAttribute('data-status', status);
    if (r === null) {
      this.summary.textContent = 'No rollout.';
      this.details.hidden = true;
      this.showActions([]);
      return;
    }
    const live = status === 'running' || status === 'paused';
    const cohorts = live
      ? `baseline v${r.baseline} · candidate on ${r.percent}% of keys`
      : `v${r.baseline} → ${r.version === undefined ? 'not applied' : `v${r.version}`}`;
    this.summary.textContent = `${status}: ${cohorts}`;
    const rows = [
      ['Resources', (r.resources ?? []).join(', ')],
      ...(r.domains === undefined ? [] : [['Envoy domains', r.domains.join(', ')]]),
      ['Step', `${Number(r.step) + 1} of ${(r.steps ?? []).length}`],
      ...(r.author === undefined ? [] : [['Started by', `${r.author}: ${r.reason}`]]),
      ['Note', r.note ?? ''],
    ];
    this.details.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
    this.details.hidden = false;
    this.showActions(Object.hasOwn(ACTIONS, status) ? ACTIONS[status] : []);
  }

  /** Shows the form with these actions' buttons only; hides it without any. @param {readonly string[]} actions */
  showActions(actions) {
    this.form.hidden = actions.length === 0;
    for (const button of this.form.querySelectorAll('button[data-action]')) {
      button.hidden = !actions.includes(button.getAttribute('data-action') ?? '');
    }
  }

  /** @param {string} action pause, resume, promote or abort */
  async act(action) {
    const token = sessionStorage.getItem(TOKEN_KEY) ?? undefined;
    if (token === undefined) {
      this.say('error', 'Enter the admin token (in the rules panel) first.');
      return;
    }
    const author = byId('rollout-author').value.trim();
    const reason = byId('rollout-reason').value.trim();
    if (author === '' || reason === '') {
      this.say('error', 'Give an author and a reason.');
      return;
    }
    try {
      const { rollout } = await admin(token, `/rollout/${action}`, { author, reason });
      this.update({ rollout });
      this.say('ok', `Rollout ${rollout.status}.`);
    } catch (err) {
      this.say('error', err instanceof Error ? err.message : String(err));
    }
  }

  /** @param {'ok' | 'error'} kind @param {string} text */
  say(kind, text) {
    this.message.className = kind;
    this.message.textContent = text;
  }
}
