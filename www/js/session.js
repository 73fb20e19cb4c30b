// The playground's session: a trace of requests (time in whole ms since the session began,
// cost) and a cursor (the reader's clock: `now` and how many requests have happened). Every
// state shown is a pure function of the trace up to the cursor: the core's `decide` is
// replayed over the requests in order, each call given the state the previous one returned
// (cached, recomputed from the first changed request when the trace changes), and the state
// at `now` is a cost-0 peek on the last one. Nothing here decides anything itself.
import { decide } from "../pkg/index.js";

/** The first index in sorted `events` whose time is greater than `t`. */
export function upperBound(events, t) {
  let lo = 0, hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (events[mid].t <= t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/**
 * Replays `events` ({ t, cost }) through the core with `policy`, uninterrupted; returns one
 * { decision, state } per request (what an independent run gives, for comparison).
 */
export function replay(policy, events) {
  let state = null;
  return events.map((e) => {
    const r = decide(policy, state, e.t, e.cost);
    state = r.state;
    return r;
  });
}

export class Session {
  /** A fresh session for `policy` (the core's canonical policy text). */
  constructor(policy) {
    this.policy = policy;
    this.events = []; // { t (whole ms), cost }, sorted by t (stable for equal times)
    this.results = []; // results[i]: the core's { decision, state } after events[i]
    this.now = 0; // the reader's clock, ms (fractional while playing)
    this.index = 0; // events[0 .. index) have happened
    this.head = 0; // the latest instant the clock has reached
  }

  /** The core's results for events[0 .. n), computing the missing ones in order. */
  resultsUpTo(n) {
    for (let i = this.results.length; i < n; i++) {
      const before = i === 0 ? null : this.results[i - 1].state;
      const e = this.events[i];
      this.results.push(decide(this.policy, before, e.t, e.cost));
    }
    return this.results.slice(0, n);
  }

  /** The core's result for events[i]. */
  result(i) {
    if (i >= this.results.length) this.resultsUpTo(i + 1);
    return this.results[i];
  }

  /** The whole-ms instant given to the core for the clock's `now`. */
  get instant() {
    return Math.floor(this.now);
  }

  /** Adds `n` requests of `cost` at the clock's instant; they happen at once. */
  sendNow(n, cost = 1) {
    const t = this.instant;
    // Requests at this instant not yet stepped through stay after the new ones.
    this.insertAt(this.index, t, n, cost);
    this.index += n;
    return t;
  }

  /** Adds `n` requests of `cost` at `t` (ms) in time order, after any at the same instant. */
  add(t, n = 1, cost = 1) {
    const at = upperBound(this.events, t);
    this.insertAt(at, t, n, cost);
    if (t <= this.instant && at <= this.index) this.index += n;
  }

  insertAt(at, t, n, cost) {
    const fresh = Array.from({ length: n }, () => ({ t, cost }));
    this.events.splice(at, 0, ...fresh);
    if (this.results.length > at) this.results.length = at;
  }

  /** Replaces the trace (e.g. a pasted or guided one) and puts the clock at 0. */
  load(events) {
    this.events = events.map((e) => ({ t: Math.round(e.t), cost: e.cost ?? 1 })).sort((a, b) => a.t - b.t);
    this.results = [];
    this.now = 0;
    this.index = upperBound(this.events, 0);
    this.head = 0;
  }

  /** Moves the clock to `t` ms (forwards or back); every request at or before it has happened. */
  seek(t) {
    this.now = Math.max(0, t);
    this.index = upperBound(this.events, this.instant);
    this.head = Math.max(this.head, this.now);
  }

  /** Moves the clock to the instant of request `i`, right after it was decided. */
  goTo(i) {
    this.now = this.events[i].t;
    this.index = i + 1;
    this.head = Math.max(this.head, this.now);
  }

  /** Advances the clock by `dt` ms (playing). */
  advance(dt) {
    this.seek(this.now + dt);
  }

  /**
   * One event forward: the next request not yet happened (at the clock's instant, or the
   * clock jumps to its time). Returns false when no request is ahead.
   */
  step() {
    if (this.index >= this.events.length) return false;
    const next = this.events[this.index];
    if (next.t > this.instant) this.now = next.t;
    this.index++;
    this.head = Math.max(this.head, this.now);
    return true;
  }

  /** The time of the next request ahead of the cursor, or undefined. */
  nextTime() {
    return this.events[this.index]?.t;
  }

  /** The latest time worth scrubbing to: the head, or past the last request. */
  get end() {
    const last = this.events.at(-1)?.t ?? 0;
    return Math.max(this.head, last);
  }

  /**
   * The view at the cursor (or at `index`/`now` given): the state after the last request
   * that happened, brought up to `now` by a cost-0 peek, and the last charged result.
   */
  view(index = this.index, now = this.instant) {
    const lastResult = index === 0 ? null : this.result(index - 1);
    const peek = decide(this.policy, lastResult?.state ?? null, now, 0);
    return {
      now,
      index,
      last: lastResult,
      lastEvent: index === 0 ? null : this.events[index - 1],
      lastState: lastResult?.state ? JSON.parse(lastResult.state) : null,
      peek,
      state: peek.state === null ? null : JSON.parse(peek.state),
    };
  }

  /**
   * Happened requests (those before `index`, from the first at or after `since` ms) with the
   * core's decisions: { i, t, cost, decision }.
   */
  happened(index = this.index, since = -Infinity) {
    this.resultsUpTo(index);
    const from = since === -Infinity ? 0 : Math.min(index, upperBound(this.events, Math.ceil(since) - 1));
    return this.events.slice(from, index).map((e, k) => ({ i: from + k, ...e, decision: this.results[from + k].decision }));
  }
}
