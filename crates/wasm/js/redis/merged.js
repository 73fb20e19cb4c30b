// tollgate/redis: the protocol's scripts (crates/redis/lua/), sent by SHA1, and on one
// server the calls of several keys merged into one (see ../redis.js).

import { createHash } from "node:crypto";
import { READ_SCRIPT, COMMIT_SCRIPT, SETTLE_SCRIPT } from "./scripts.js";
import { isReply, toBuffer, text } from "./clients.js";
import { FleetLimits, SEND_BODY, VERSION_BYTES } from "./fleet.js";

const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const READ_SHA = sha1(READ_SCRIPT);
const COMMIT_SHA = sha1(COMMIT_SCRIPT);
const SETTLE_SHA = sha1(SETTLE_SCRIPT);

/**
 * The read and the commit script: by SHA1 (the server's script cache), and when Redis lost
 * it (NOSCRIPT), once more with the script's text; merged ({@link Merged}) on one server.
 */
export class Scripts {
  #call;
  #stats;
  /** The read's and the commit's {@link Merged} calls, by SHA1, on one server (else undefined). */
  #merged;

  /** `call(args)` sends a command; `oneServer`: merge calls; `stats.roundTrips` counts calls. */
  constructor(call, oneServer, stats) {
    this.#call = call;
    this.#stats = stats;
    if (oneServer) this.#merged = { [READ_SHA]: new Merged(call, READ_SHA, false), [COMMIT_SHA]: new Merged(call, COMMIT_SHA, true) };
  }

  /** The read script's reply for `keys`: `{ seconds, microseconds, value of each key }`. */
  read(keys) {
    return this.#send(READ_SHA, READ_SCRIPT, keys, []);
  }

  /** The commit script's reply for `keys` and `args` (the mode, then four per key). */
  commit(keys, args) {
    return this.#send(COMMIT_SHA, COMMIT_SCRIPT, keys, args);
  }

  /**
   * The settle script's reply for `keys` (the slots, then the settle record) and `args`
   * (the commit's, then the record and its time to live). Never merged: its reply is its own.
   */
  settle(keys, args) {
    return this.#send(SETTLE_SHA, SETTLE_SCRIPT, keys, args);
  }

  async #send(sha, text, keys, args) {
    this.#stats.roundTrips++;
    try {
      const merged = this.#merged?.[sha];
      if (merged !== undefined) return await merged.send(keys, args);
      return await this.#call(["EVALSHA", sha, String(keys.length), ...keys, ...args]);
    } catch (e) {
      // The core's rule (one table of error replies): NOSCRIPT means it did not run.
      if (!(isReply(e) && FleetLimits.handle(false, false, String(e.message)) === SEND_BODY)) throw e;
    }
    // NOSCRIPT: the script did not run, so sending it again charges nothing twice.
    this.#stats.roundTrips++;
    return this.#call(["EVAL", text, String(keys.length), ...keys, ...args]);
  }
}

/** The most keys one merged script call carries (see `Merged`). */
const MERGE_AT_MOST = 16;

/**
 * One script call for the requests of several keys: on one Redis server (not a cluster,
 * where keys of different slots cannot share a script), the reads sent in one turn of the
 * event loop (and the commits) go as one call over all their keys, each request answered
 * with its own part of the reply. The scripts are the same: the read reads any keys; the
 * commit compares every version before it writes anything, so each request's commit stays
 * all or nothing. A commit refused for another request's conflict (its own versions still
 * current) is sent again: nothing was written, so nothing is charged twice. Two commits
 * that share a key (a fair share's shared slot, for two tenants) never share a call.
 * Measured at 10k keys, 64 in flight: ioredis' own work for the two calls a check cost more
 * client CPU than rate-limiter-flexible's whole check; merged, a call served ~30 checks.
 * A call carries at most {@link MERGE_AT_MOST} keys, for the reason writes are split (see
 * `ioredis`): one call for every key in flight makes the process and Redis take turns
 * (35-40k checks/s at 10k keys, idle machine); calls of 16 let them overlap (50-55k).
 */
class Merged {
  #call;
  #sha;
  #commit;
  /** The call being gathered in this turn: `{ keys, args, parts, keySet }`. */
  #pending = null;

  /** `call(args)` sends a command; `sha` is the read script's or the commit script's. */
  constructor(call, sha, commit) {
    this.#call = call;
    this.#sha = sha;
    this.#commit = commit;
  }

  /** The script's reply for `keys` (and, for a commit, `args`: the mode, then four per key). */
  send(keys, args) {
    return new Promise((resolve, reject) => this.#add({ keys, args, resolve, reject }));
  }

  #add(part) {
    let batch = this.#pending;
    if (batch !== null && this.#commit && part.keys.some((k) => batch.keySet.has(k))) {
      this.#flush(); // a key already in this call: the new commit goes in the next one
      batch = null;
    }
    if (batch !== null && batch.keys.length >= MERGE_AT_MOST) {
      this.#flush(); // full: Redis starts on it while the next is gathered
      batch = null;
    }
    if (batch === null) {
      batch = this.#pending = { keys: [], args: this.#commit ? [part.args[0]] : [], parts: [], keySet: new Set() };
      process.nextTick(() => {
        if (this.#pending === batch) this.#flush();
      });
    }
    part.at = batch.keys.length;
    for (const k of part.keys) {
      batch.keys.push(k);
      if (this.#commit) batch.keySet.add(k);
    }
    for (let i = 1; i < part.args.length; i++) batch.args.push(part.args[i]);
    batch.parts.push(part);
  }

  #flush() {
    const { keys, args, parts } = this.#pending;
    this.#pending = null;
    const command = ["EVALSHA", this.#sha, String(keys.length), ...keys, ...args];
    let sent;
    try {
      sent = this.#call(command);
    } catch (e) {
      sent = Promise.reject(e);
    }
    sent.then(
      (reply) => this.#answer(reply, keys.length, parts),
      (error) => {
        for (const p of parts) p.reject(error);
      },
    );
  }

  /** Each request's part of `reply` (read: the clock and its values; commit: ok, or a conflict). */
  #answer(reply, n, parts) {
    if (!Array.isArray(reply)) {
      for (const p of parts) p.resolve(reply); // the caller reports the unexpected reply
      return;
    }
    const head = this.#commit ? 3 : 2; // [conflict,] seconds, microseconds
    if (this.#commit && text(reply[0]) !== "conflict") {
      for (const p of parts) p.resolve(reply);
      return;
    }
    if (reply.length !== head + n) {
      for (const p of parts) p.resolve(reply);
      return;
    }
    for (const p of parts) {
      const count = p.keys.length;
      if (this.#commit && p.keys.every((_, i) => sameVersion(reply[head + p.at + i], p.args[1 + 4 * i]))) {
        this.#add(p); // refused for another request's conflict: its own commit still holds
        continue;
      }
      const mine = reply.slice(0, head + count);
      for (let i = 0; i < count; i++) mine[head + i] = reply[head + p.at + i];
      p.resolve(mine);
    }
  }
}

/** Whether a stored value (Buffer or "") carries `version` (its first bytes, or "" for an absent key). */
function sameVersion(value, version) {
  const v = toBuffer(value);
  if (version === "") return v.length === 0;
  return v.length >= VERSION_BYTES && v.compare(version, 0, VERSION_BYTES, 0, VERSION_BYTES) === 0;
}
