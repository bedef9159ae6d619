/* global fetch, sessionStorage */
import { byId, el } from './dom.js';
import { classifyDiffLines } from './lib/diff-lines.js';

/** Where the admin token is kept: this tab only, never the URL or a cookie. */
export const TOKEN_KEY = 'sluice.adminToken';
/** How many versions the history shows. */
const HISTORY_LIMIT = 50;

/** An admin API error, as the page shows it. */
class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

/**
 * Calls the admin API with the bearer token; throws an {@link ApiError} for any non-2xx answer.
 * @param {string} token
 * @param {string} path
 * @param {unknown} [body]
 */
export async function admin(token, path, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`/v1/admin${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    cache: 'no-store',
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  let json;
  try {
    json = await res.json();
  } catch {
    json = undefined;
  }
  if (!res.ok) {
    const error = json?.error ?? {};
    throw new ApiError(res.status, String(error.code ?? 'SLUICE_ERR_UNKNOWN'), String(error.message ?? res.statusText));
  }
  return json;
}

/** "2026-01-02T03:04:05.678Z" as "2026-01-02 03:04:05". */
const when = (iso) => String(iso).replace('T', ' ').slice(0, 19);

/** The rules panel: token, active version, history, diff and rollback. */
export class RulesPanel {
  constructor() {
    this.tokenInput = byId('token');
    this.message = byId('rules-message');
    this.body = byId('rules-body');
    this.active = byId('active-version');
    this.historyBody = /** @type {HTMLElement} */ (byId('history').querySelector('tbody'));
    this.diffFrom = byId('diff-from');
    this.diffTo = byId('diff-to');
    this.diff = byId('diff');
    this.rollbackVersion = byId('rollback-version');
    this.rollbackAuthor = byId('rollback-author');
    this.rollbackReason = byId('rollback-reason');
    /** The version the panel shows as active; undefined until loaded. */
    this.shown = undefined;
    /** Bumped by every load, so an older answer never overwrites a newer one. */
    this.loads = 0;

    byId('token-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const token = this.tokenInput.value.trim();
      this.tokenInput.value = '';
      if (token === '') return;
      sessionStorage.setItem(TOKEN_KEY, token);
      this.say('info', 'Loading the rule versions…');
      void this.load();
    });
    byId('forget-token').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      this.locked();
    });
    byId('diff-form').addEventListener('submit', (event) => {
      event.preventDefault();
      void this.showDiff();
    });
    byId('rollback-form').addEventListener('submit', (event) => {
      event.preventDefault();
      void this.rollback();
    });
    if (this.token() === undefined) this.locked();
    else void this.load();
  }

  /** @returns {string | undefined} */
  token() {
    return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  }

  /** Without a token: say so, show nothing of the rules. */
  locked() {
    this.shown = undefined;
    this.body.hidden = true;
    this.say('info', 'Enter the admin token to see the rule versions and roll back.');
  }

  /**
   * @param {'info' | 'ok' | 'error'} kind
   * @param {string} text
   * @param {string} [code]
   */
  say(kind, text, code) {
    this.message.textContent = text;
    this.message.className = kind;
    if (code === undefined) this.message.removeAttribute('data-code');
    else this.message.setAttribute('data-code', code);
  }

  /** @param {unknown} err */
  fail(err) {
    if (err instanceof ApiError) {
      this.say('error', err.message, err.code);
      if (err.status === 401) this.body.hidden = true;
    } else {
      this.say('error', `the server did not answer: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** The server reports rule version `version` (from `/v1/stats`): reload when it is new to the panel. */
  onVersion(version) {
    if (this.token() !== undefined && this.shown !== undefined && version !== this.shown) void this.load();
  }

  /** Loads the history and shows it. */
  async load() {
    const token = this.token();
    if (token === undefined) return this.locked();
    const load = ++this.loads;
    try {
      const { versions } = await admin(token, `/rules/history?limit=${HISTORY_LIMIT}`);
      if (load !== this.loads) return;
      this.render(versions);
      // The outcome of the last rollback stays until the next action.
      if (this.message.className !== 'ok') this.say('info', `${versions.length} version(s) shown, newest first.`);
    } catch (err) {
      if (load === this.loads) this.fail(err);
    }
  }

  /** @param {readonly Record<string, unknown>[]} versions newest first */
  render(versions) {
    const current = versions[0];
    this.shown = current === undefined ? 0 : Number(current.version);
    this.active.textContent =
      current === undefined
        ? 'none'
        : `v${current.version} by ${current.author} at ${when(current.createdAt)}: ${current.reason}`;
    this.active.setAttribute('data-version', String(this.shown));
    this.historyBody.replaceChildren(
      ...versions.map((v) =>
        el(
          'tr',
          { 'data-version': Number(v.version) },
          el('td', {}, `v${v.version}`),
          el('td', {}, when(v.createdAt)),
          el('td', {}, String(v.author)),
          el('td', {}, String(v.reason)),
          el('td', {}, v.rolledBackFrom === undefined ? '' : `v${v.rolledBackFrom}`),
        ),
      ),
    );
    const options = (selected) =>
      versions.map((v) => {
        const option = el('option', { value: Number(v.version) }, `v${v.version}`);
        option.selected = Number(v.version) === selected;
        return option;
      });
    const older = versions[1] === undefined ? this.shown : Number(versions[1].version);
    this.diffFrom.replaceChildren(...options(older));
    this.diffTo.replaceChildren(...options(this.shown));
    this.rollbackVersion.replaceChildren(...options(older));
    this.body.hidden = false;
  }

  async showDiff() {
    const token = this.token();
    if (token === undefined) return this.locked();
    const from = Number(this.diffFrom.value);
    const to = Number(this.diffTo.value);
    try {
      const diff = await admin(token, `/rules/diff?from=${from}&to=${to}`);
      const lines = classifyDiffLines(String(diff.text ?? ''));
      this.diff.replaceChildren(
        ...(lines.length === 0
          ? [el('span', { class: 'note' }, `v${from} and v${to} are the same.`)]
          : lines.map((l) => el('span', { class: `diff-${l.kind}` }, l.text, '\n'))),
      );
      this.diff.setAttribute('data-from', String(from));
      this.diff.setAttribute('data-to', String(to));
    } catch (err) {
      this.fail(err);
    }
  }

  async rollback() {
    const token = this.token();
    if (token === undefined) return this.locked();
    const version = Number(this.rollbackVersion.value);
    this.say('info', `Rolling back to v${version}…`);
    const body = {
      version,
      author: this.rollbackAuthor.value.trim(),
      reason: this.rollbackReason.value.trim(),
      // Refused with 409 if someone changed the rules since this page loaded them.
      ...(this.shown === undefined ? {} : { expectedVersion: this.shown }),
    };
    try {
      const made = await admin(token, '/rules/rollback', body);
      await this.load();
      // Said after the reload, which has its own message (an error from it stays visible).
      if (this.message.className !== 'error') {
        this.say('ok', `Rolled back: v${made.version} is active, with the rules of v${made.rolledBackFrom ?? version}.`);
      }
    } catch (err) {
      this.fail(err);
    }
  }
}
