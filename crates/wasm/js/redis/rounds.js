// tollgate/redis: how requests are served (see ../redis.js). The requests for one group (a key,
// and a tenant) are queued while a round of them is out; a round reads the group's slots,
// decides every queued request in order in the core, and commits the writes with a
// compare-and-set, read again on a conflict (merged.js sends the scripts); or, when the server
// has tollgate's module, sends each request as one command (module.js). When Redis cannot
// serve, the declared fallback decides, and Redis is probed again after `probeEvery` ms.
// Denials are remembered in the core's deny cache and answered without a round trip.

import { Unavailable, RedisLimiterError, keyed } from "./errors.js";
import { text } from "./clients.js";
import { DECISION_LEN } from "../web/decision.js";
import {
  FAILED,
  FALLBACK,
  FleetLimits,
  OP_ACQUIRE,
  OP_CHECK,
  OP_RELEASE,
  RELEASED,
  STORE,
  answerDecision,
  classify,
  commitArgs,
  decide,
  decisionAt,
  deniedAnswer,
  fallbackDecision,
  readReply,
} from "./fleet.js";
import { Module } from "./module.js";
import { Scripts } from "./merged.js";
import { behaviourIndex, reasonIndex } from "../web/counts.js";

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The rounds of one RedisLimiter: its requests' way to Redis, the module, the fallback and the deny cache. */
export class Rounds {
  /** The limiter's options, checked (options.js). */
  #o;
  /** The limits (FleetLimits): every decision. */
  #limits;
  /** The protocol's two scripts ({@link Scripts}). */
  #scripts;
  /** The module's commands ({@link Module}), when `useModule`. */
  #module;
  /** Where decisions were made (the limiter's `stats()`). */
  #stats;
  #epoch = performance.now();
  /** Group id -> the requests queued behind the round that is out. */
  #groups = new Map();
  /** How many denials the deny cache held when last told (never fewer than it holds: 0 skips asking it). */
  #denials = 0;
  /** Until when (`performance.now()`) Redis is taken as down: the fallback decides without trying it. */
  #downUntil = 0;

  /**
   * `call(args)` sends a command, bounded by the timeout; `oneServer`: merge the scripts'
   * calls; `stats`: the counts of `stats()`, kept up to date here.
   */
  constructor(limits, options, call, oneServer, stats) {
    this.#o = options;
    this.#limits = limits;
    this.#stats = stats;
    this.#scripts = new Scripts(call, oneServer, stats);
    if (options.useModule) this.#module = new Module(limits, call);
  }

  /**
   * A denial remembered for `group` that still holds for `cost` (not under a test clock):
   * the deny cache is the core's (FleetLimits.denied: tollgate::store::DenyCache, the Rust
   * crate's and the edge worker's), its waits counted down.
   */
  remembered(group, cost) {
    if (this.#denials === 0 || !this.#o.denyCache || this.#o.clock !== undefined) return undefined;
    const out = deniedAnswer(this.#limits, group, cost, performance.now());
    if (out === undefined) return undefined;
    this.#stats.denyCache++;
    return answerDecision(out, "deny-cache");
  }

  /** Forgets the denials remembered for `key` (a reset). */
  forget(key) {
    this.#denials = this.#limits.forget(key);
  }

  /**
   * Remembers the answer `numbers` (a decision's six numbers and each limit's) decided for
   * `group` and `cost` on a read sent at `sent`: the core keeps a denial with a retry time,
   * until a lower bound of it (the whole ms were rounded up).
   */
  #remember(group, cost, sent, numbers) {
    if (this.#o.denyCache && this.#o.clock === undefined) this.#denials = this.#limits.remember(group.key, group.tenant, cost, sent, numbers);
  }

  /**
   * Queues a request for its group; the first of an idle group runs the group's rounds.
   * `reserve` (a reserve's check): an object whose `at` is set to the instant decided at
   * (ns, a BigInt) when Redis decided it.
   */
  submit(group, kind, cost, maxDelay = Infinity, reserve = undefined) {
    return new Promise((resolve, reject) => {
      const pending = { kind, cost, maxDelay, reserve, resolve, reject };
      const queue = this.#groups.get(group.id);
      if (queue !== undefined) {
        queue.push(pending);
        return;
      }
      this.#groups.set(group.id, []);
      this.#run(group, [pending]);
    });
  }

  /** Serves a group until its queue is empty, one round (every request queued so far) at a time. */
  async #run(group, round) {
    for (;;) {
      try {
        await this.#round(group, round);
      } catch (e) {
        for (const p of round) p.reject(e);
      }
      const queue = this.#groups.get(group.id);
      if (queue.length === 0) {
        this.#groups.delete(group.id);
        return;
      }
      round = queue.splice(0);
    }
  }

  /** One round: read the slots, decide every queued request in order, commit (retrying on conflicts), answer. */
  async #round(group, round) {
    const n = group.keys.length;
    if (this.#downUntil !== 0) {
      if (performance.now() < this.#downUntil) return this.#fallBack(group, round, "unreachable");
      this.#downUntil = 0; // time to probe: this round tries Redis again
    }
    if (this.#module !== undefined && (this.#module.known ?? (await this.#module.ask()))) return this.#moduleRound(group, round);
    const started = performance.now();
    let reply;
    try {
      reply = await this.#scripts.read(group.keys);
    } catch (e) {
      const c = classify(e, false);
      if (!(c instanceof Unavailable)) throw c;
      return this.#down(group, round, c.why);
    }
    let read = readReply(group, reply, 0, this.#o.clock);
    let sent = started;
    let retries = 0;
    const stride = 1 + DECISION_LEN * (1 + n);
    for (;;) {
      let out;
      try {
        out = decide(this.#limits, group, read, round);
      } catch (e) {
        throw keyed(group, e);
      }
      // The errors of failed requests are taken now: the next round's decide replaces them.
      let errors;
      for (let i = 0; i < round.length; i++) {
        if (out[i * stride] === FAILED) (errors ??= [])[i] = this.#limits.error(i);
      }
      const args = commitArgs(this.#limits, read.versions, out, round.length * stride, this.#o.blind);
      if (args !== undefined) {
        let answer;
        try {
          answer = await this.#scripts.commit(group.keys, args);
        } catch (e) {
          const c = classify(e, true);
          if (!(c instanceof Unavailable)) throw c;
          // The commit may have been applied: never sent again; the fallback decides.
          this.#stats.indeterminate++;
          return this.#down(group, round, c.why);
        }
        const status = Array.isArray(answer) ? text(answer[0]) : undefined;
        if (status === "conflict") {
          this.#stats.conflicts++;
          const waited = performance.now() - started;
          if (waited >= this.#o.retryFor) {
            throw new RedisLimiterError("contended", `gave up after ${Math.round(waited)} ms of conflicting writes by other clients`, { waited });
          }
          retries++;
          // Jitter: clients that collided do not collide again in step.
          await sleep(Math.random() * Math.min(retries, 10));
          read = readReply(group, answer, 1, this.#o.clock);
          sent = performance.now();
          continue;
        }
        if (status !== "ok") throw new RedisLimiterError("redis", "redis: unexpected script reply");
      }
      for (let i = 0; i < round.length; i++) {
        const p = round[i];
        const at = i * stride;
        if (p.reserve !== undefined) p.reserve.at = FleetLimits.instant(read.secs, read.micros);
        const status = out[at];
        if (status === FAILED) p.reject(errors[i]);
        else if (status === RELEASED) p.resolve(undefined);
        else this.#answer(group, p, decisionAt(out, at, n, "redis"), sent, out, at + 1, at + stride);
      }
      return;
    }
  }

  /**
   * Answers `p` with `d`, decided in Redis on a read (or command) sent at `sent`: counted,
   * and a denial of a check remembered (its answer's numbers after the status: `out` from
   * `from` to `to`).
   */
  #answer(group, p, d, sent, out, from, to) {
    if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) {
      this.#stats.redis++;
      if (!d.allowed) this.#remember(group, p.cost, sent, out.slice(from, to));
    }
    if (p.kind === OP_CHECK) this.#limits.record(STORE, d.allowed, d.limit, d.remaining, p.cost);
    p.resolve(d);
  }

  /**
   * One round in the module: every queued request one command, all sent at once (one round
   * trip, pipelined by the client), each decided atomically inside Redis.
   */
  async #moduleRound(group, round) {
    const limits = this.#module.limitArgs(group.tenant);
    const now = this.#o.clock?.();
    const sent = performance.now();
    this.#stats.roundTrips++;
    if (round.length === 1) return this.#moduleCommand(group, round[0], limits, now, sent);
    await Promise.all(round.map((p) => this.#moduleCommand(group, p, limits, now, sent)));
  }

  /** One request's module command, answered (or decided by the fallback when its answer was lost). */
  async #moduleCommand(group, p, limits, now, sent) {
    let out;
    try {
      out = await this.#module.send(group, p, limits, now);
    } catch (e) {
      if (!(e instanceof Unavailable)) return p.reject(e);
      // The command may have run: never sent again; the fallback decides it.
      this.#stats.indeterminate++;
      return this.#down(group, [p], e.why);
    }
    if (p.kind === OP_RELEASE) return p.resolve(undefined);
    this.#answer(group, p, answerDecision(out, "redis"), sent, out, 1, out.length);
  }

  /**
   * The way to Redis of a settle (settles.js), which never falls back: the scripts, the
   * module (when `useModule`), the counts, whether Redis is taken as down, and how to count
   * a failure and take it as down until the next probe.
   */
  get ways() {
    return {
      scripts: this.#scripts,
      module: this.#module,
      stats: this.#stats,
      down: () => this.#downUntil !== 0 && performance.now() < this.#downUntil,
      failed: (why) => this.#failed(why),
    };
  }

  /** Counts a failure (`why`) and takes Redis as down until the next probe. */
  #failed(why) {
    this.#limits.recordFailure(behaviourIndex(this.#o.fallback), reasonIndex(why));
    this.#downUntil = performance.now() + this.#o.probeEvery;
  }

  /**
   * Redis could not serve (`why`: unreachable, timeout, indeterminate): counts the failure,
   * takes Redis as down until the next probe, and decides `round` with the fallback.
   */
  #down(group, round, why) {
    this.#failed(why);
    return this.#fallBack(group, round, why);
  }

  /** Decides a round with the declared fallback. */
  #fallBack(group, round, why) {
    for (const p of round) {
      try {
        if (p.kind === OP_RELEASE) {
          if (this.#o.fallback === "local" && this.#limits.localRelease(group.key, p.cost) === FAILED) {
            p.reject(this.#limits.error(0));
          } else p.resolve(undefined);
          continue;
        }
        if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) this.#stats.fallback++;
        const d = fallbackDecision(this.#limits, this.#o.fallback, this.#o.probeEvery, performance.now() - this.#epoch, group, p.cost, why, p.maxDelay);
        if (p.kind === OP_CHECK) this.#limits.record(FALLBACK, d.allowed, d.limit, d.remaining, p.cost);
        p.resolve(d);
      } catch (e) {
        p.reject(e);
      }
    }
  }
}
