// tollgate/redis: the deny cache, this process's memory of denials, so that a key known to be
// denied is denied again without a round trip until its retry time (see ../redis.js). The same
// rule as the core's `store::DenyCache` (the Rust crate's and the edge worker's), still written
// here in JavaScript: it is asked before every check, and asking wasm instead (a string passed
// in each time) is not yet measured against the Map lookup it would replace.

/** The most denials remembered; past it the memory is cleared (it is only a shortcut). */
const MAX_DENIALS = 100_000;

export class Denials {
  /** group id -> `{ key, cost, until, at, decision }` (ms of `performance.now()`). */
  #denials = new Map();

  /** The remembered denial of `group` that still holds now for `cost`, its waits counted down; else undefined. */
  get(group, cost) {
    const d = this.#denials.get(group.id);
    if (d === undefined) return undefined; // the common case: no clock read
    const now = performance.now();
    if (now >= d.until) {
      this.#denials.delete(group.id);
      return undefined;
    }
    if (cost < d.cost) return undefined;
    const elapsed = now - d.at;
    const age = (x) => ({
      ...x,
      resetAfter: Math.max(0, Math.ceil(x.resetAfter - elapsed)),
      retryAfter: Math.max(0, Math.ceil(x.retryAfter - elapsed)),
    });
    const out = age(d.decision);
    out.each = d.decision.each.map(age);
    out.source = "deny-cache";
    return out;
  }

  /**
   * Remembers `decision` for `group` and `cost`, decided on a read sent at `sent`. Only a
   * denial with a retry time (a concurrency limit frees on release, which no clock predicts),
   * measured from when the read was sent. retryAfter is whole ms rounded up, so the memory
   * ends 1 ms earlier: it never outlasts the true retry time.
   */
  remember(group, cost, sent, decision) {
    const retry = decision.retryAfter;
    if (decision.allowed || retry === 0) return;
    if (this.#denials.size >= MAX_DENIALS) this.#denials.clear();
    const until = sent + retry - 1;
    const old = this.#denials.get(group.id);
    if (old === undefined || old.until < until || old.cost > cost) {
      this.#denials.set(group.id, { key: group.key, cost, until, at: sent, decision });
    }
  }

  /** Forgets the denials of `key`. */
  forget(key) {
    for (const [id, d] of this.#denials) if (d.key === key) this.#denials.delete(id);
  }
}
