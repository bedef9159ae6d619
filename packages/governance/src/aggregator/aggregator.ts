import type { GovernanceRules } from '@sluice/rules';
import {
  ANNOUNCEMENT_KIND,
  BatchKind,
  LAYOUT_VERSION,
  MAX_DECISIONS_PER_MESSAGE,
  batchKind,
  batchLayout,
  decodeAnnouncement,
  decodeEvents,
  decodeTallies,
  encodeAnnouncement,
  encodeDecisions,
  type AggregatorAnnouncement,
  type BatchInfo,
  type BatchLayout,
  type OwnershipKind,
  type GatewayEvent,
  type GovernanceDecision,
  type RejectionTally,
  type Subscription,
} from '@sluice/stream';
import { PartitionOwnership } from '../ownership/coordinator.js';
import { MemoryOwnershipStore, type OwnershipStore } from '../ownership/store.js';
import { DecisionTracker } from './decisions.js';
import { compileAggregatorOptions, isRuleStore, type AggregatorOptions, type CompiledAggregatorOptions } from './options.js';
import { PartitionState, type Hold } from './partition-state.js';
import { Peers } from './peers.js';
import { compileRules, type CompiledRule } from './rules.js';
import type { AggregatorStats, ConsumeMode, LayoutMismatch, OwnershipConflict, PartitionStats } from './stats.js';
import { MAX_SNAPSHOT_BYTES, encodeSnapshot, restoreSnapshot } from './snapshot.js';

interface Owned {
  readonly state: PartitionState;
  /** When it was taken (`now()`). */
  readonly since: number;
  sub: Subscription | undefined;
  lagBatches: number;
  lagMs: number;
  mode: ConsumeMode;
  /** The newest record time read (event timestamp or tally end, at most when it was read), 0 before any. */
  readUpTo: number;
  /** When the batch that carried `readUpTo` was read. */
  readAt: number;
  /** When a batch was last read (0 before any). */
  lastReadAt: number;
  /**
   * The longest silence between two reads the stream has shown lately (fading as reads go on;
   * silences over {@link MAX_SILENCE_MS} are idleness, not counted): a silence no longer than
   * that is the stream's delivery, not the end of the traffic.
   */
  silenceMs: number;
  /** Partition lost: in-flight batches are ignored. */
  gone: boolean;
  /** The held values at the last snapshot, to snapshot again as soon as they change. */
  snapshotHolds: string;
}

/** The longest silence between two reads taken for the stream's delivery; a longer one is idleness. */
const MAX_SILENCE_MS = 2_000;

/**
 * The partition's watermark at `now`: the time up to which its stream is known to have been
 * read. The newest record read was `now - readAt` ago and was then `readAt - readUpTo` old
 * (the stream's delivery lag); the watermark trails `now` by that lag, so a lagging stream's
 * windows are judged where they are complete. It moves on with the clock only once the
 * partition has been silent for longer than its stream's usual silences (`silenceMs`: a
 * stream that delivers in lumps is not idle between them), and only as far as the aggregator
 * ran to read: no further than `runningUntil` (a tick after a stall of the process comes
 * before the reads the stall held up). Before anything was read: `now`.
 */
function watermark(o: Owned, now: number, runningUntil = now): number {
  if (o.readAt === 0) return now;
  return Math.min(now, runningUntil, o.readUpTo + Math.max(0, now - o.readAt - o.silenceMs));
}

/** Records that `newest` (a record time) was read at `now`. */
function read(o: Owned, newest: number, now: number): void {
  if (o.lastReadAt !== 0) {
    // The silence since the last read; the longest one fades by half the time read since.
    const gap = now - o.lastReadAt;
    o.silenceMs = gap > MAX_SILENCE_MS ? o.silenceMs : Math.max(gap, o.silenceMs - gap / 2);
  }
  o.lastReadAt = now;
  const t = Math.min(newest, now);
  if (o.readAt === 0 || t >= o.readUpTo) {
    o.readUpTo = t;
    o.readAt = now;
  }
}

function holdsOf(o: Owned): string {
  return [...o.state.holds().keys()].sort().join(',');
}

type Counter = Exclude<
  keyof AggregatorStats,
  | 'id'
  | 'partitions'
  | 'activeBlocks'
  | 'ruleVersion'
  | 'evictions'
  | 'layout'
  | 'ownership'
  | 'lastLayoutMismatch'
  | 'lastOwnershipConflict'
  | 'yielded'
>;

/** A layout mismatch of the same kind is logged again at most this often. */
const MISMATCH_LOG_MS = 60_000;

/**
 * A governance aggregator: owns a share of the event partitions (see `OwnershipStore`), counts each
 * partition's events in sliding windows per rule and value, evaluates the rules every
 * `tickMs`, and broadcasts block and lift decisions to every gateway. Any number of aggregators
 * can run against one stream; each partition is consumed by one of them at a time, and a dead
 * one's partitions move to the others within about `ownershipTtlMs`, with the windows restored from
 * the last snapshot.
 *
 * @example
 * const aggregator = new Aggregator({ transport, rules: store, ownership: new RedisOwnershipStore({ url }) });
 * await aggregator.start();
 * // ...
 * await aggregator.close();
 */
export class Aggregator {
  readonly #o: CompiledAggregatorOptions;
  readonly #store: OwnershipStore;
  readonly #ownsStore: boolean;
  readonly #ownership: PartitionOwnership;
  readonly #tracker: DecisionTracker;
  #rules: CompiledRule[] = [];
  #owned = new Map<number, Owned>();
  #counters: Record<Counter, number> = {
    batches: 0,
    events: 0,
    tallyBatches: 0,
    rejected: 0,
    malformedBatches: 0,
    sampledBatches: 0,
    shedBatches: 0,
    lateEvents: 0,
    expressionErrors: 0,
    blocksSent: 0,
    liftsSent: 0,
    broadcastFailures: 0,
    snapshotsSaved: 0,
    snapshotsRestored: 0,
    snapshotFailures: 0,
    acquisitions: 0,
    releases: 0,
    layoutMismatchedBatches: 0,
    layoutMismatchedAnnouncements: 0,
    ownershipConflicts: 0,
    announcementsSent: 0,
    announcementFailures: 0,
  };
  readonly #layout: BatchLayout;
  readonly #peers = new Peers();
  /** When each kind of layout mismatch was last logged, to log each once a minute, not per batch. */
  readonly #mismatchLogged = new Map<string, number>();
  #lastMismatch: LayoutMismatch | undefined;
  #lastConflict: OwnershipConflict | undefined;
  #yielding: Promise<void> | undefined;
  #announceTimer: NodeJS.Timeout | undefined;
  #announcing: Promise<void> | undefined;
  #decisionSub: Subscription | undefined;
  #evictionsOfGone = 0;
  #ruleVersion = 0;
  #unwatch: (() => void) | undefined;
  #tickTimer: NodeJS.Timeout | undefined;
  #snapshotTimer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | undefined;
  /** When the last evaluation ran (`now()`), if one did. */
  #lastTickAt: number | undefined;
  #snapshotting: Promise<void> | undefined;
  #started = false;
  #closed = false;
  /** Told of each batch of events aggregated (see {@link onEventsAggregated}). */
  readonly #aggregated = new Set<(events: readonly GatewayEvent[], now: number) => void>();

  constructor(options: AggregatorOptions) {
    this.#o = compileAggregatorOptions(options);
    this.#ownsStore = this.#o.ownership === undefined;
    this.#store = this.#o.ownership ?? new MemoryOwnershipStore();
    this.#layout = { partitions: this.#o.transport.partitions, version: LAYOUT_VERSION };
    this.#tracker = new DecisionTracker({ ttlMs: this.#o.ttlMs, refreshMs: this.#o.refreshMs });
    this.#ownership = new PartitionOwnership(
      {
        store: this.#store,
        partitions: this.#o.transport.partitions,
        owner: this.#o.id,
        ttlMs: this.#o.ownershipTtlMs,
        renewMs: Math.max(100, Math.floor(this.#o.ownershipTtlMs / 3)),
        onError: (err) => this.#o.logger?.warn({ err, aggregator: this.#o.id }, 'partition ownership store failed; retrying'),
        now: this.#o.now,
      },
      { acquired: (p) => this.#acquired(p), released: (p, voluntary) => this.#released(p, voluntary) },
    );
    if (!isRuleStore(this.#o.rules)) this.#setRules(this.#o.rules);
  }

  /** This aggregator's owner id. */
  get id(): string {
    return this.#o.id;
  }

  /** Partitions owned now. */
  get partitions(): number[] {
    return this.#ownership.owned;
  }

  /** Follows the rules, takes a share of the partitions and starts the evaluation timer. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    const rules = this.#o.rules;
    if (isRuleStore(rules)) {
      this.#unwatch = rules.watch((v) => {
        this.#ruleVersion = v.version;
        this.#setRules(v.ruleSet.governance);
        this.#o.logger?.info({ version: v.version, rules: Object.keys(v.ruleSet.governance).length }, 'governance rules loaded');
      });
    }
    if (this.#o.announceMs > 0) {
      this.#decisionSub = await this.#o.transport.subscribeDecisions((message) => this.#onMessage(message));
    }
    await this.#ownership.start();
    if (this.#o.announceMs > 0) {
      const announce = () => void this.announce();
      announce();
      this.#announceTimer = setInterval(announce, this.#o.announceMs);
      this.#announceTimer.unref();
    }
    this.#tickTimer = setInterval(() => {
      this.#ticking ??= this.tick()
        .then(
          () => undefined,
          () => undefined,
        )
        .finally(() => (this.#ticking = undefined));
    }, this.#o.tickMs);
    this.#tickTimer.unref();
    if (this.#o.snapshotMs > 0) {
      this.#snapshotTimer = setInterval(() => {
        this.#snapshotting ??= this.snapshot().finally(() => (this.#snapshotting = undefined));
      }, this.#o.snapshotMs);
      this.#snapshotTimer.unref();
    }
  }

  #setRules(governance: GovernanceRules): void {
    this.#rules = compileRules(governance);
    for (const o of this.#owned.values()) o.state.setRules(this.#rules);
  }

  async #acquired(partition: number): Promise<void> {
    this.#counters.acquisitions++;
    const notRestored = (err: unknown) => {
      this.#counters.snapshotFailures++;
      this.#o.logger?.warn({ err, partition }, 'partition snapshot not restored; starting from empty windows');
    };
    let snap: Uint8Array | undefined;
    try {
      snap = await this.#store.loadSnapshot(partition);
    } catch (err) {
      notRestored(err);
    }
    // Built after the read, with the rules in force now: rules that arrive meanwhile (the
    // first version at start-up) reach only the partitions already in #owned.
    const state = new PartitionState(partition, this.#rules, this.#o.maxValues);
    if (snap !== undefined) {
      try {
        const r = restoreSnapshot(state, snap, this.#o.now());
        this.#counters.snapshotsRestored++;
        this.#o.logger?.info(
          { partition, values: r.values, holds: r.holds, ageMs: this.#o.now() - r.takenAtMs },
          'partition state restored',
        );
      } catch (err) {
        notRestored(err);
      }
    }
    const owned: Owned = {
      state,
      since: this.#o.now(),
      sub: undefined,
      lagBatches: 0,
      lagMs: 0,
      mode: 'normal',
      readUpTo: 0,
      readAt: 0,
      lastReadAt: 0,
      silenceMs: 0,
      gone: false,
      snapshotHolds: '',
    };
    this.#owned.set(partition, owned);
    let sub: Subscription;
    try {
      sub = await this.#o.transport.consume(partition, this.#o.group, (batch, info) => this.#onBatch(owned, batch, info));
    } catch (err) {
      // The ownership round gives the partition up again (released(p, true) finds it here).
      this.#o.logger?.warn({ err, partition }, 'cannot consume the partition');
      throw err;
    }
    if (this.#owned.get(partition) !== owned) {
      // The partition was lost while the consumer started (renewals run on their own): stop it.
      await sub.stop();
      return;
    }
    owned.sub = sub;
  }

  async #released(partition: number, voluntary: boolean): Promise<void> {
    const owned = this.#owned.get(partition);
    if (owned === undefined) return;
    this.#counters.releases++;
    owned.gone = !voluntary;
    try {
      await owned.sub?.stop();
    } finally {
      owned.gone = true;
      if (voluntary) await this.#saveSnapshot(partition, owned);
      this.#owned.delete(partition);
      this.#evictionsOfGone += owned.state.evictions;
      // The successor restores these holds and refreshes or lifts them; lifting here would flap.
      const still = this.#heldValues();
      this.#tracker.forget([...owned.state.holds().keys()].filter((k) => !still.has(k)));
      if (!voluntary) this.#o.logger?.warn({ partition, aggregator: this.#o.id }, 'partition ownership lost; state dropped');
    }
  }

  #onBatch(owned: Owned, batch: Uint8Array, info: BatchInfo): Promise<void> {
    if (owned.gone) return Promise.resolve();
    const layout = batchLayout(batch);
    if (layout !== undefined && (layout.partitions !== this.#layout.partitions || layout.version !== this.#layout.version)) {
      this.#counters.layoutMismatchedBatches++;
      this.#layoutMismatch({
        source: 'batch',
        partitions: layout.partitions,
        layoutVersion: layout.version,
        partition: owned.state.partition,
        atMs: this.#o.now(),
      });
    }
    if (batchKind(batch) === BatchKind.TALLIES) return this.#onTallies(owned, batch, info);
    let events: GatewayEvent[];
    try {
      events = decodeEvents(batch);
    } catch {
      this.#counters.malformedBatches++;
      return Promise.resolve();
    }
    const now = this.#o.now();
    let newest = 0;
    for (const e of events) if (e.timestampMs > newest) newest = e.timestampMs;
    owned.lagBatches = info.lag ?? 0;
    owned.lagMs = events.length === 0 ? 0 : Math.max(0, now - newest);
    if (events.length > 0) read(owned, newest, now);
    const o = this.#o;
    const mode: ConsumeMode =
      owned.lagBatches >= o.shedLagBatches || owned.lagMs >= o.shedLagMs
        ? 'shed'
        : owned.lagBatches >= o.sampleLagBatches || owned.lagMs >= o.sampleLagMs
          ? 'sample'
          : 'normal';
    if (mode !== owned.mode) {
      o.logger?.warn(
        { partition: owned.state.partition, from: owned.mode, to: mode, lagBatches: owned.lagBatches, lagMs: owned.lagMs },
        'aggregator consume mode changed',
      );
      owned.mode = mode;
    }
    if (mode === 'shed') {
      this.#counters.shedBatches++;
      return Promise.resolve();
    }
    this.#counters.batches++;
    const before = owned.state.counters.events;
    const lateBefore = owned.state.counters.late;
    let counted = events;
    if (mode === 'sample') {
      this.#counters.sampledBatches++;
      const every = o.sampleEvery;
      counted = events.filter((_, i) => i % every === 0);
      owned.state.ingest(counted, now, every);
    } else {
      owned.state.ingest(events, now);
    }
    for (const listener of this.#aggregated) listener(counted, now);
    this.#counters.events += owned.state.counters.events - before;
    this.#counters.lateEvents += owned.state.counters.late - lateBefore;
    return Promise.resolve();
  }

  /**
   * Counts a batch of rejection tallies. Tallies are few (one per block, resource and path per
   * flush) and are what keeps a block in force, so they are counted even while the partition's
   * events are sampled or shed. They tell the stream's lag as events do and move the
   * partition's watermark: while a flood is blocked they are all that flows on its partition.
   */
  #onTallies(owned: Owned, batch: Uint8Array, info: BatchInfo): Promise<void> {
    let tallies: RejectionTally[];
    try {
      tallies = decodeTallies(batch);
    } catch {
      this.#counters.malformedBatches++;
      return Promise.resolve();
    }
    this.#counters.tallyBatches++;
    const now = this.#o.now();
    let newest = 0;
    for (const t of tallies) if (t.lastMs > newest) newest = t.lastMs;
    if (tallies.length > 0) {
      owned.lagBatches = info.lag ?? 0;
      owned.lagMs = Math.max(0, now - newest);
      read(owned, newest, now);
    }
    const before = owned.state.counters.rejected;
    owned.state.ingestTallies(tallies, now, watermark(owned, now));
    this.#counters.rejected += owned.state.counters.rejected - before;
    return Promise.resolve();
  }

  #heldValues(): Map<string, Hold> {
    const held = new Map<string, Hold>();
    for (const o of this.#owned.values()) {
      if (o.gone) continue;
      for (const [key, hold] of o.state.holds()) {
        const prev = held.get(key);
        if (prev === undefined || hold.holdUntil > prev.holdUntil) held.set(key, hold);
      }
    }
    return held;
  }

  /**
   * Runs an ownership round now (the ownership timer runs one every third of `ownershipTtlMs`):
   * renews ownership, gives up partitions beyond the fair share, takes free ones.
   */
  rebalance(): Promise<void> {
    return this.#ownership.round();
  }

  /** Evaluates the rules now and broadcasts the decisions due (the timer calls this every `tickMs`). */
  async tick(): Promise<GovernanceDecision[]> {
    if (this.#closed) return [];
    const now = this.#o.now();
    // The process ran (and read) until about one period after the last evaluation; a later tick
    // means it stalled, and what it could not read meanwhile is still to come.
    const runningUntil = this.#lastTickAt === undefined ? now : this.#lastTickAt + this.#o.tickMs;
    this.#lastTickAt = now;
    for (const o of this.#owned.values()) {
      if (o.gone) continue;
      const errorsBefore = o.state.counters.expressionErrors;
      o.state.evaluate(now, watermark(o, now, runningUntil));
      this.#counters.expressionErrors += o.state.counters.expressionErrors - errorsBefore;
    }
    const decisions = this.#tracker.update(this.#heldValues(), now);
    for (let i = 0; i < decisions.length; i += MAX_DECISIONS_PER_MESSAGE) {
      const chunk = decisions.slice(i, i + MAX_DECISIONS_PER_MESSAGE);
      try {
        await this.#o.transport.broadcast(encodeDecisions(chunk));
        for (const d of chunk) this.#counters[d.action === 'block' ? 'blocksSent' : 'liftsSent']++;
      } catch (err) {
        // Blocks are sent again at the next refresh; a lost lift is made good by the TTL.
        this.#counters.broadcastFailures++;
        this.#o.logger?.warn({ err, decisions: chunk.length }, 'decision broadcast failed');
      }
    }
    if (this.#o.snapshotMs > 0) {
      // A new or ended block is snapshotted at once, not at the next period: a successor must
      // not forget a block (a login-failure block lasts minutes) because its owner died just after.
      for (const [p, o] of this.#owned) {
        if (!o.gone && holdsOf(o) !== o.snapshotHolds) await this.#saveSnapshot(p, o);
      }
    }
    return decisions;
  }

  async #saveSnapshot(partition: number, owned: Owned): Promise<void> {
    owned.snapshotHolds = holdsOf(owned);
    try {
      const bytes = encodeSnapshot(owned.state, this.#o.now());
      if (bytes.length > MAX_SNAPSHOT_BYTES) {
        this.#counters.snapshotFailures++;
        this.#o.logger?.warn({ partition, bytes: bytes.length }, 'partition state too large to snapshot');
        return;
      }
      const saved = await this.#store.saveSnapshot(partition, this.#o.id, bytes, this.#snapshotTtlMs());
      if (saved) this.#counters.snapshotsSaved++;
    } catch (err) {
      this.#counters.snapshotFailures++;
      this.#o.logger?.warn({ err, partition }, 'partition snapshot not saved');
    }
  }

  /** A snapshot outlives the longest window and block, so a takeover never restores less than it could. */
  #snapshotTtlMs(): number {
    let longest = 60_000;
    for (const r of this.#rules) longest = Math.max(longest, r.shape.windowMs, r.blockMs);
    return longest * 2;
  }

  /** Snapshots every owned partition now (the timer calls this every `snapshotMs`). */
  async snapshot(): Promise<void> {
    for (const [p, owned] of this.#owned) if (!owned.gone) await this.#saveSnapshot(p, owned);
  }

  /**
   * Calls `listener` with every batch of events this aggregator adds to its windows (late ones
   * included; while sampling, the events it sampled; shed batches are not aggregated) and when
   * (its clock, epoch ms: `now` of the options, on the store's clock with `clockSkew`). Returns
   * the function that stops the calls. Listeners run on the consume path: they must be cheap and
   * must not throw.
   */
  onEventsAggregated(listener: (events: readonly GatewayEvent[], now: number) => void): () => void {
    this.#aggregated.add(listener);
    return () => this.#aggregated.delete(listener);
  }

  /** Counters and per-partition lag. */
  stats(): AggregatorStats {
    let evictions = this.#evictionsOfGone;
    const partitions: PartitionStats[] = [];
    for (const [partition, o] of this.#owned) {
      evictions += o.state.evictions;
      partitions.push({
        partition,
        lagBatches: o.lagBatches,
        lagMs: o.lagMs,
        mode: o.mode,
        trackedValues: o.state.trackedValues,
      });
    }
    partitions.sort((a, b) => a.partition - b.partition);
    return {
      id: this.#o.id,
      partitions,
      ...this.#counters,
      evictions,
      activeBlocks: this.#tracker.active,
      ruleVersion: this.#ruleVersion,
      layout: { ...this.#layout },
      ownership: this.#ownershipKind(),
      lastLayoutMismatch: this.#lastMismatch,
      lastOwnershipConflict: this.#lastConflict,
      yielded: this.#yielding !== undefined,
    };
  }

  #ownershipKind(): OwnershipKind {
    const kind = this.#store.kind;
    return kind === 'memory' || kind === 'redis' ? kind : 'other';
  }

  /**
   * Broadcasts this aggregator's announcement now (the timer calls this every `announceMs`):
   * its id, ownership store, partition layout and the partitions it owns. Never rejects; a
   * broadcast the stream refuses is counted (`announcementFailures`).
   */
  announce(): Promise<void> {
    this.#announcing ??= this.#announce().finally(() => (this.#announcing = undefined));
    return this.#announcing;
  }

  async #announce(): Promise<void> {
    if (this.#closed) return;
    const a: AggregatorAnnouncement = {
      id: this.#o.id,
      group: this.#o.group,
      partitions: this.#layout.partitions,
      layoutVersion: this.#layout.version,
      ownership: this.#ownershipKind(),
      issuedAtMs: this.#o.now(),
      announceMs: this.#o.announceMs,
      owned: [...this.#owned.entries()].filter(([, o]) => !o.gone).map(([p]) => p),
    };
    try {
      await this.#o.transport.broadcast(encodeAnnouncement(a));
      this.#counters.announcementsSent++;
    } catch (err) {
      this.#counters.announcementFailures++;
      this.#o.logger?.warn({ err }, 'aggregator announcement not broadcast');
    }
  }

  /** A message on the decision channel: the announcements of the others matter here. */
  #onMessage(message: Uint8Array): void {
    if (this.#closed || batchKind(message) !== ANNOUNCEMENT_KIND) return;
    let a: AggregatorAnnouncement;
    try {
      a = decodeAnnouncement(message);
    } catch {
      this.#counters.malformedBatches++;
      return;
    }
    if (a.id === this.#o.id || a.group !== this.#o.group) return;
    const now = this.#o.now();
    this.#peers.forget(now - 10 * Math.max(a.announceMs, this.#o.announceMs));
    const finding = this.#peers.heard(
      a,
      { partitions: this.#layout.partitions, layoutVersion: this.#layout.version },
      (p) => {
        const o = this.#owned.get(p);
        return o === undefined || o.gone ? undefined : o.since;
      },
      now,
    );
    if (finding.layoutDiffers) {
      this.#counters.layoutMismatchedAnnouncements++;
      this.#layoutMismatch({
        source: 'announcement',
        partitions: a.partitions,
        layoutVersion: a.layoutVersion,
        aggregator: a.id,
        atMs: now,
      });
    }
    if (finding.doublyOwned.length > 0) this.#conflict(a, finding.doublyOwned, now);
  }

  /** Counts (the caller did), remembers and logs a layout mismatch, once a minute per kind. */
  #layoutMismatch(m: LayoutMismatch): void {
    this.#lastMismatch = m;
    const key = `${m.source}:${m.partitions}:${m.layoutVersion}`;
    const logged = this.#mismatchLogged.get(key);
    if (logged !== undefined && m.atMs - logged < MISMATCH_LOG_MS) return;
    if (this.#mismatchLogged.size >= 64) this.#mismatchLogged.clear();
    this.#mismatchLogged.set(key, m.atMs);
    const own = this.#layout;
    const theirs = m.source === 'batch' ? 'a gateway' : `aggregator ${m.aggregator ?? ''}`;
    const lost =
      m.partitions > own.partitions
        ? `; what it puts on partitions ${own.partitions}..${m.partitions - 1} is read by no aggregator of ${own.partitions}`
        : '';
    this.#o.logger?.warn(
      { aggregator: this.#o.id, own, theirs: { partitions: m.partitions, version: m.layoutVersion }, ...m },
      `partition layout mismatch: ${theirs} splits the stream into ${m.partitions} partitions (layout ${m.layoutVersion}), ` +
        `this aggregator into ${own.partitions} (layout ${own.version})${lost}. ` +
        (m.source === 'batch'
          ? 'The batches that reach this aggregator are counted all the same; give every gateway and aggregator the same partition count.'
          : 'Give every gateway and aggregator the same partition count.'),
    );
  }

  /**
   * Another aggregator owns partitions this one owns. With a memory store on either side it is
   * for good (the stores do not see each other), so the aggregator whose id sorts last stops
   * owning partitions (the other keeps counting every partition it owns); with shared stores on
   * both sides it is reported only (a lapse noticed late resolves itself).
   */
  #conflict(a: AggregatorAnnouncement, partitions: number[], now: number): void {
    this.#counters.ownershipConflicts++;
    const mine = this.#ownershipKind();
    const permanent = mine === 'memory' || a.ownership === 'memory';
    const yields = permanent && this.#o.id > a.id && this.#yielding === undefined;
    this.#lastConflict = {
      peer: a.id,
      peerOwnership: a.ownership,
      partitions,
      yielded: yields || this.#yielding !== undefined,
      atMs: now,
    };
    this.#o.logger?.warn(
      { aggregator: this.#o.id, ownership: mine, peer: a.id, peerOwnership: a.ownership, partitions, group: this.#o.group },
      `aggregator ${a.id} (${a.ownership} ownership store) owns partitions this aggregator (${mine} ownership store) ` +
        `owns too: ${partitions.join(',')}. Each partition's events are then split between the two or counted twice. ` +
        (permanent
          ? `A memory ownership store is private to its process: give every aggregator of group ${this.#o.group} the same ` +
            `RedisOwnershipStore. ${yields ? 'This aggregator stops owning partitions until it is restarted.' : `Aggregator ${a.id > this.#o.id ? a.id : this.#o.id} stops owning partitions.`}`
          : 'Both stores are shared: check that they are the same Redis and prefix.'),
    );
    if (yields) this.#yielding = this.#ownership.close().catch(() => undefined);
  }

  /**
   * Stops evaluating, snapshots and gives up every partition (another aggregator takes them
   * over at once), and stops following the rules. Blocks already sent run out by their TTL or
   * are refreshed by the successor. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#tickTimer);
    clearInterval(this.#snapshotTimer);
    clearInterval(this.#announceTimer);
    this.#unwatch?.();
    await this.#ticking;
    await this.#snapshotting;
    await this.#announcing;
    await this.#decisionSub?.stop();
    await this.#yielding;
    await this.#ownership.close();
    if (this.#ownsStore) await this.#store.close();
  }
}
