/* global fetch, sessionStorage */
import { AdaptivePanel } from './adaptive.js';
import { Charts } from './charts.js';
import { showClockSkew } from './clock.js';
import { byId } from './dom.js';
import { RateHistory, limitPerSecond } from './lib/rates.js';
import { RulesPanel, TOKEN_KEY } from './rules.js';
import { BreakersPanel } from './breakers.js';
import { HotKeysPanel } from './hot-keys.js';
import { HealthStrip } from './health.js';
import { TiersPanel } from './tiers.js';
import { RolloutPanel } from './rollout.js';

/** How often `/v1/stats` is read; rates are the differences between consecutive reads. */
const POLL_MS = 1000;

const history = new RateHistory({ windowMs: 5 * 60_000, maxResources: 200 });
const charts = new Charts(byId('charts'), byId('charts-empty'));
const rules = new RulesPanel();
const adaptive = new AdaptivePanel(byId('adaptive-panel'), byId('adaptive').querySelector('tbody'));
const breakers = new BreakersPanel(byId('breakers'), byId('breakers-empty'));
const hotKeys = new HotKeysPanel(byId('hot-keys'), byId('hot-keys-empty'));
const tiersTable = byId('tiers');
const tiers = new TiersPanel(byId('tiers-panel'), tiersTable.querySelector('tbody') ?? tiersTable);
const rollout = new RolloutPanel();
const health = new HealthStrip();
const connection = byId('connection');
const statsVersion = byId('stats-version');
/** Limit per second per key, by resource, from `/v1/resources` (read again when the rules change). */
let limitRates = new Map();
let limitsVersion = -1;

async function getJson(path, token) {
  const headers = token === undefined ? {} : { authorization: `Bearer ${token}` };
  const res = await fetch(path, { cache: 'no-store', headers });
  if (!res.ok) throw new Error(`${path} answered ${res.status}`);
  return res.json();
}

async function refreshLimits(version) {
  const view = await getJson('/v1/resources');
  limitRates = new Map(Object.entries(view.resources ?? {}).map(([name, r]) => [name, limitPerSecond(r.limits ?? [])]));
  limitsVersion = version;
}

async function poll() {
  try {
    // With the admin token the snapshot names the hot keys (callers' data); without it, counts only.
    const snapshot = await getJson('/v1/stats', sessionStorage.getItem(TOKEN_KEY) ?? undefined);
    if (snapshot.version !== limitsVersion) await refreshLimits(snapshot.version);
    health.render(snapshot.health);
    history.add(snapshot);
    charts.render(history, limitRates);
    adaptive.render(snapshot.adaptive);
    tiers.render(snapshot);
    statsVersion.textContent = `v${snapshot.version}`;
    showClockSkew(snapshot.clockSkew);
    connection.textContent = 'live';
    connection.setAttribute('data-state', 'live');
    rules.onVersion(snapshot.version);
    hotKeys.render(snapshot.hotKeys);
    // Read on their own: a panel that cannot be read says so without taking the page down.
    await Promise.all([
      getJson('/v1/breakers').then(
        (answer) => breakers.render(answer),
        (err) => breakers.unreadable(err instanceof Error ? err.message : String(err)),
      ),
      rollout.refresh(getJson),
    ]);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    health.stale(why);
    connection.textContent = `server unreachable (${why})`;
    connection.setAttribute('data-state', 'down');
  } finally {
    setTimeout(() => void poll(), POLL_MS);
  }
}

void poll();
