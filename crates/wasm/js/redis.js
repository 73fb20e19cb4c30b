// tollgate/redis: one exact limit for a fleet of Node (and Rust) processes sharing one Redis.
// The core (wasm, FleetLimits) makes every decision and holds the fleet protocol's rules
// (tollgate::store::fleet: the key layout, the stored values, their times to live, which
// failures fall back and the fallback's decisions); this file moves the bytes, as the Rust
// crate tollgate-redis does: the same keys, the same values and the same two Lua scripts
// (read, then a compare-and-set commit), so Node and Rust processes can share one limit.
// See index.d.ts (redis.d.ts) and crates/redis/src/lib.rs for the design.

import { createHash } from "node:crypto";
import glue from "./redis/tollgate_wasm.cjs";
import { READ_SCRIPT, COMMIT_SCRIPT } from "./redis/scripts.js";
import { WaitTimeoutError, checkMs, throttled } from "./web/api.js";
import { waitInLine, LOOK } from "./web/waiting.js";

export { WaitTimeoutError };

const { FleetLimits } = glue;

// FleetLimits' statuses (0 denied, 1 allowed, as a decision's `allowed`) and request kinds
// (crates/wasm/src/fleet.rs).
const FAILED = 2;
const RELEASED = 3;
const OP_CHECK = 0;
const OP_PEEK = 1;
const OP_RELEASE = 2;
const OP_ACQUIRE = 3;
/** FleetLimits.handle's answers for a failed call (the core's `fleet::handle`). */
const FATAL = 0;
const SEND_BODY = 1;
const FALLBACK_WHY = [undefined, undefined, "unreachable", "timeout", "indeterminate"];
/** How many bytes of a stored value are its version (the core's `fleet::VERSION_BYTES`). */
const VERSION_BYTES = FleetLimits.versionBytes();
/** The module's command for each request kind. */
const MODULE_COMMAND = ["TOLLGATE.CHECK", "TOLLGATE.PEEK", "TOLLGATE.RELEASE", "TOLLGATE.CHECK"];

/** The most commands written to ioredis' socket in one piece (see `ioredis`). */
const WRITE_EVERY = 16;
/** The most keys one merged script call carries (see `Merged`). */
const MERGE_AT_MOST = 16;

/** The most denials remembered; past it the memory is cleared (it is only a shortcut). */
const MAX_DENIALS = 100_000;

/**
 * Test-only options (the Rust crate's `testing` feature): `options[TESTING] = { clock, blindCommit }`.
 * `clock()` returns the time in whole ms to decide at instead of Redis `TIME` (and turns the deny
 * cache off; with the module, it is sent as `NOW <ms>`, which needs the module loaded with
 * `TESTCLOCK`); `blindCommit` commits without comparing versions (a control run that must over-admit).
 */
export const TESTING = Symbol.for("tollgate.redis.testing");

const sha1 = (text) => createHash("sha1").update(text).digest("hex");
const READ_SHA = sha1(READ_SCRIPT);
const COMMIT_SHA = sha1(COMMIT_SCRIPT);

/** node-redis' RESP type codes for bulk and simple strings: answered as Buffers. */
const NODE_REDIS_BUFFERS = { 36: Buffer, 43: Buffer };

function optionError(Kind, field, value, rule, explanation) {
  const e = new Kind(`invalid option: ${field}: ${explanation} [${rule}]`);
  e.field = field;
  e.rule = rule;
  e.value = value;
  return e;
}

/** An error of the Redis store: `code` is `corrupt-state`, `contended` or `redis`. */
export class RedisLimiterError extends Error {
  constructor(code, message, extra) {
    super(message);
    this.name = "RedisLimiterError";
    this.code = code;
    Object.assign(this, extra);
  }
}

/**
 * `sendCommand(args) => Promise<reply>` for the caller's client: ioredis (`callBuffer`; a
 * `Cluster` too), node-redis 5 or 6 (`sendCommand` with Buffers for strings; its cluster
 * client too, told each command's first key), or an object that already has a
 * `sendCommand(args)` of that form (any other client, a cluster router).
 */
function adapter(client) {
  if (client !== null && typeof client === "object") {
    if (typeof client.callBuffer === "function") return ioredis(client);
    if (typeof client.sendCommand === "function" && typeof client.withTypeMapping === "function" && "masters" in client) {
      // node-redis' cluster client routes by the command's first key, which it is told.
      return (args) => client.sendCommand(firstKey(args), false, args, { typeMapping: NODE_REDIS_BUFFERS });
    }
    if (typeof client.sendCommand === "function" && typeof client.withTypeMapping === "function") {
      return (args) => client.sendCommand(args, { typeMapping: NODE_REDIS_BUFFERS });
    }
    if (typeof client.sendCommand === "function") {
      return (args) => client.sendCommand(args);
    }
  }
  throw optionError(
    TypeError,
    "client",
    client,
    "not-a-client",
    "must be an ioredis client or cluster, a node-redis 5 or 6 client or cluster, or { sendCommand(args) => Promise }",
  );
}

/**
 * Whether `client` talks to one Redis server (not a cluster), so that one script call may
 * touch keys of any slot: ioredis' and node-redis' plain clients. Unknown clients (a
 * `{ sendCommand }`, which may route to a cluster) are not assumed to.
 */
function oneServer(client) {
  if (typeof client.callBuffer === "function") return client.isCluster !== true;
  return typeof client.withTypeMapping === "function" && !("masters" in client);
}

/** The first key of a command this file sends (EVALSHA and EVAL: after the script and the key count; COMMAND INFO: none). */
function firstKey(args) {
  if (args[0] === "EVALSHA" || args[0] === "EVAL") return args[3];
  return args[0] === "COMMAND" ? undefined : args[1];
}

/**
 * ioredis writes each command to its socket as it is sent: one system call per command in
 * this process and one read in Redis. Like node-redis (which does this by itself), the
 * commands sent in one turn of the event loop are written together instead: the socket is
 * corked until the microtasks of this turn have run (`process.nextTick`). Measured with
 * ioredis alone sending this file's two scripts per check, 64 in flight: the socket writes
 * were 29% of the client's CPU, and each check cost 30% less client CPU and 30% less Redis
 * CPU written together. (A cluster client has no one socket: its commands go as they are.)
 *
 * But not all of them at once: written in one piece, a turn's commands reach Redis together
 * and their replies come back together, so from then on this process and Redis take turns,
 * each idle while the other works (measured with the module, 64 in flight on 2 cores: the
 * process idle 29% of its time, 31k checks/s). Written {@link WRITE_EVERY} commands at a
 * time, Redis starts on the first while the rest are prepared: 55-65k checks/s.
 */
function ioredis(client) {
  let corked;
  let written = 0;
  const uncork = () => {
    corked.uncork();
    corked = undefined;
  };
  return (args) => {
    if (corked === undefined) {
      const socket = client.stream;
      if (client.status === "ready" && typeof socket?.cork === "function") {
        socket.cork();
        corked = socket;
        written = 0;
        process.nextTick(uncork);
      }
    }
    const reply = client.callBuffer(args[0], args.slice(1));
    if (corked !== undefined && ++written === WRITE_EVERY) {
      corked.uncork();
      corked.cork();
      written = 0;
    }
    return reply;
  };
}

/** The error classes of an error reply: ioredis' ReplyError, node-redis' ErrorReply and its subclasses. */
const REPLY_ERRORS = ["ReplyError", "ErrorReply", "SimpleError", "BlobError"];

/**
 * A reply error from Redis itself (as opposed to a connection that failed). node-redis 6's
 * are named `Error`: their class tells.
 */
function isReply(e) {
  return e?.reply === true || REPLY_ERRORS.includes(e?.name) || REPLY_ERRORS.includes(e?.constructor?.name);
}

class Timeout extends Error {}

/**
 * Bounds calls by one timeout with one timer for all of them (a timer and a race per call
 * cost more than the rest of a check's work in this file). Every call has the same timeout,
 * so the order they were sent in is the order of their deadlines: the timer waits for the
 * oldest unanswered one.
 */
class Deadlines {
  #ms;
  /** Calls in the order sent, from `#head`: `{ at, reject, done }`. */
  #queue = [];
  #head = 0;
  #timer = undefined;

  constructor(ms) {
    this.#ms = ms;
  }

  /** `promise`'s outcome, or a `Timeout` when it has none within the timeout (a late one is dropped). */
  watch(promise) {
    return new Promise((resolve, reject) => {
      const call = { at: performance.now() + this.#ms, reject, done: false };
      promise.then(
        (value) => this.#settle(call, resolve, value),
        (error) => this.#settle(call, reject, error),
      );
      this.#queue.push(call);
      this.#timer ??= setTimeout(() => this.#expire(), this.#ms);
    });
  }

  #settle(call, settle, outcome) {
    if (call.done) return; // timed out already
    call.done = true;
    settle(outcome);
    this.#drop();
  }

  /** Forgets the answered calls at the front; stops the timer when none is left. */
  #drop() {
    const q = this.#queue;
    while (this.#head < q.length && q[this.#head].done) this.#head++;
    if (this.#head === q.length) {
      q.length = 0;
      this.#head = 0;
      clearTimeout(this.#timer);
      this.#timer = undefined;
    } else if (this.#head >= 1024 && 2 * this.#head >= q.length) {
      this.#queue = q.slice(this.#head);
      this.#head = 0;
    }
  }

  #expire() {
    this.#timer = undefined;
    const now = performance.now();
    const q = this.#queue;
    for (let i = this.#head; i < q.length && q[i].at <= now; i++) {
      if (!q[i].done) {
        q[i].done = true;
        q[i].reject(new Timeout());
      }
    }
    this.#drop();
    if (this.#head < this.#queue.length) {
      this.#timer = setTimeout(() => this.#expire(), Math.max(1, this.#queue[this.#head].at - now));
    }
  }
}
class Unavailable extends Error {
  constructor(why, cause) {
    super(why);
    this.why = why;
    this.cause = cause;
  }
}

function positive(options, field, fallback) {
  const v = options[field];
  if (v === undefined) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw optionError(TypeError, field, v, "not-a-number", "must be a number of milliseconds");
  }
  if (v <= 0) throw optionError(RangeError, field, v, "zero", "must be more than zero");
  return v;
}

function layoutPart(field, value) {
  if (typeof value !== "string") throw optionError(TypeError, field, value, "not-a-string", "must be a string");
  return value; // the brace rule is the core's (FleetLimits.keyHead)
}

/** FleetLimits from a limiter spec: a policy, an array (a stack), `{ policy }`, `{ stack }` or `{ fairShare: { shared, tenant } }`. */
function fleetLimits(spec, localMaxKeys) {
  if (Array.isArray(spec)) return FleetLimits.stack(spec, localMaxKeys);
  if (spec !== null && typeof spec === "object") {
    if (spec.stack !== undefined) {
      if (!Array.isArray(spec.stack)) throw optionError(TypeError, "stack", spec.stack, "not-an-array", "must be an array of policies");
      return FleetLimits.stack(spec.stack, localMaxKeys);
    }
    if (spec.fairShare !== undefined) {
      const f = spec.fairShare;
      if (f === null || typeof f !== "object") {
        throw optionError(TypeError, "fairShare", f, "not-an-object", "must be { shared, tenant }");
      }
      return FleetLimits.fairShare(f.shared, f.tenant, localMaxKeys);
    }
    if (spec.policy !== undefined) return FleetLimits.single(spec.policy, localMaxKeys);
  }
  return FleetLimits.single(spec, localMaxKeys);
}

/** Views over the wasm instance's memory (FleetLimits' buffers), made again after it grew. */
const memory = { u8: new Uint8Array(0), f64: new Float64Array(0) };
function views() {
  if (memory.u8.byteLength === 0) {
    const { buffer } = glue.wasmMemory();
    memory.u8 = new Uint8Array(buffer);
    memory.f64 = new Float64Array(buffer);
  }
  return memory;
}

const toBuffer = (v) => (Buffer.isBuffer(v) ? v : v == null ? Buffer.alloc(0) : Buffer.from(String(v)));
const text = (v) => (Buffer.isBuffer(v) ? v.toString("latin1") : String(v));
/** A number from a reply: a Buffer of decimal digits (bulk strings, parsed here), a string or a number. */
function number(v) {
  if (!Buffer.isBuffer(v)) return Number(v);
  let x = 0;
  for (let i = 0; i < v.length; i++) {
    const digit = v[i] - 48;
    if (digit < 0 || digit > 9) return Number(v.toString("latin1")); // a sign, or not a number
    x = 10 * x + digit;
  }
  return v.length === 0 ? NaN : x;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A decision from FleetLimits' output at `at`: the combined one, with `each` limit's. */
function decisionAt(out, at, n, source, why) {
  const one = (i) => ({
    allowed: out[i] === 1,
    limit: out[i + 1],
    remaining: out[i + 2],
    resetAfter: out[i + 3],
    retryAfter: out[i + 4],
    delay: out[i + 5],
  });
  const d = one(at + 1);
  d.each = [];
  for (let k = 0; k < n; k++) d.each.push(one(at + 7 + 6 * k));
  d.source = source;
  if (why !== undefined) d.why = why;
  return d;
}

/** A module reply: six integers (durations in ms), then an array of each limit's six. */
function moduleDecision(reply) {
  const one = (f) => {
    if (!Array.isArray(f) || f.length < 6) return undefined;
    const n = f.slice(0, 6).map(number);
    if (n.some((x) => !Number.isFinite(x))) return undefined;
    return { allowed: n[0] === 1, limit: n[1], remaining: n[2], resetAfter: n[3], retryAfter: n[4], delay: n[5] };
  };
  const d = one(reply);
  if (d === undefined || !Array.isArray(reply[6])) return undefined;
  d.each = reply[6].map(one);
  if (d.each.some((e) => e === undefined)) return undefined;
  d.source = "redis";
  return d;
}

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

/** The requests for one key (and tenant) and the Redis keys of their slots. */
class Group {
  #suffixes;
  #keys;

  constructor(id, key, base, tenant, suffixes) {
    /** Names the group among the ones running (and the deny cache's entry). */
    this.id = id;
    this.key = key;
    /** `<prefix>:{<namespace>:<key>}`. */
    this.base = base;
    /** The tenant, for a fair share's tenant window (else undefined). */
    this.tenant = tenant;
    this.#suffixes = suffixes;
  }

  /** Each slot's Redis key, the base and the slot's suffix (made when first asked: the module needs only the base). */
  get keys() {
    return (this.#keys ??= this.#suffixes.map((s) => this.base + s));
  }
}

/**
 * A fleet-wide limiter on Redis. See redis.d.ts.
 */
export class RedisLimiter {
  #send;
  /** The read's and the commit's {@link Merged} calls, by SHA1, on one server (else undefined). */
  #merged;
  #limits;
  /** The smallest capacity of the limits. */
  #capacity;
  #base;
  #fair;
  /** What every key's base starts with, `<prefix>:{<namespace>:` (FleetLimits.keyHead). */
  #head;
  #fallback;
  #timeout;
  #deadlines;
  #retryFor;
  #probeEvery;
  #grace;
  #lease;
  #denyCache;
  #clock;
  #blind;
  #useModule;
  /** Whether the server has tollgate's module: undefined until asked (once). */
  #module;
  /** The module commands' limiter arguments without a tenant (made once). */
  #moduleArgs;
  #epoch = performance.now();
  #groups = new Map();
  /** `acquire`'s lines of waiters: group id -> waiters, the first deciding. */
  #lines = new Map();
  #denials = new Map();
  #downUntil = 0;
  #stats = { redis: 0, denyCache: 0, fallback: 0, indeterminate: 0, conflicts: 0, roundTrips: 0 };

  constructor(client, spec, options) {
    if (options === null || typeof options !== "object") {
      throw optionError(TypeError, "options", options, "not-an-object", "must be an object like { namespace, fallback }");
    }
    this.#send = adapter(client);
    if (oneServer(client)) {
      const call = (args) => this.#call(args);
      this.#merged = { [READ_SHA]: new Merged(call, READ_SHA, false), [COMMIT_SHA]: new Merged(call, COMMIT_SHA, true) };
    }
    const namespace = layoutPart("namespace", options.namespace);
    this.#head = FleetLimits.keyHead(layoutPart("prefix", options.prefix ?? "tollgate"), namespace);
    const fallback = options.fallback;
    if (fallback !== "local" && fallback !== "open" && fallback !== "closed") {
      throw optionError(
        fallback === undefined ? TypeError : RangeError,
        "fallback",
        fallback,
        fallback === undefined ? "missing" : "unknown",
        "must be declared: 'local' (this process's memory), 'open' (admit) or 'closed' (deny)",
      );
    }
    this.#fallback = fallback;
    this.#timeout = positive(options, "timeout", 250);
    this.#deadlines = new Deadlines(this.#timeout);
    this.#retryFor = positive(options, "retryFor", this.#timeout);
    this.#probeEvery = positive(options, "probeEvery", 1000);
    this.#grace = options.grace === 0 ? 0 : positive(options, "grace", 1000);
    this.#lease = positive(options, "lease", 60_000);
    this.#denyCache = options.denyCache ?? true;
    if (typeof this.#denyCache !== "boolean") {
      throw optionError(TypeError, "denyCache", options.denyCache, "not-a-boolean", "must be true or false");
    }
    this.#useModule = options.useModule ?? true;
    if (typeof this.#useModule !== "boolean") {
      throw optionError(TypeError, "useModule", options.useModule, "not-a-boolean", "must be true or false");
    }
    const testing = options[TESTING];
    this.#clock = testing?.clock;
    this.#blind = testing?.blindCommit === true;
    if (this.#clock !== undefined && typeof this.#clock !== "function") {
      throw optionError(TypeError, "clock", this.#clock, "not-a-function", "must return the time in ms");
    }
    if (fallback === "local" && options.maxKeys !== undefined && typeof options.maxKeys !== "number") {
      throw optionError(TypeError, "maxKeys", options.maxKeys, "not-a-number", "must be a whole number");
    }
    this.#limits = fleetLimits(spec, fallback === "local" ? options.maxKeys ?? 100_000 : undefined);
    this.#limits.timesToLive(this.#grace, this.#lease, this.#clock !== undefined);
    this.#base = this.#limits.slots(undefined);
    this.#capacity = this.#limits.capacity();
    const policies = this.#limits.policies();
    this.#fair = policies.length > this.#base.length;
    this.#moduleArgs = this.#fair ? [policies[0]] : policies.length === 1 ? policies : ["STACK", String(policies.length), ...policies];
  }

  /** The limits in canonical compact form, in slot order (a fair share's tenant policy last). */
  get policies() {
    return this.#limits.policies();
  }

  /**
   * A key's name without its slot, `<prefix>:{<namespace>:<key>}` (the core's KeyLayout::base;
   * the module's `<base>`): the head, the key with `%` and `}` percent-encoded by the core
   * (`keyPart`; keys without them are used as they are, without a call), and the tag's end.
   */
  #baseKey(key) {
    const part = key.includes("}") || key.includes("%") ? FleetLimits.keyPart(key) : key;
    return `${this.#head}${part}}`;
  }

  /** The requests for one key (and tenant, for a fair share's tenant window) share their slots. */
  #group(key, tenant) {
    if (typeof key !== "string") throw optionError(TypeError, "key", key, "not-a-string", "must be a string");
    if (tenant !== undefined && tenant !== null && typeof tenant !== "string") {
      throw optionError(TypeError, "tenant", tenant, "not-a-string", "must be a string");
    }
    const suffixes = this.#fair && tenant != null ? this.#limits.slots(tenant) : this.#base;
    const withTenant = suffixes.length > this.#base.length;
    return new Group(withTenant ? `t${key.length}:${key}${tenant}` : `k${key}`, key, this.#baseKey(key), withTenant ? tenant : undefined, suffixes);
  }

  #cost(cost) {
    if (cost === undefined) return 1;
    if (typeof cost !== "number" || !Number.isInteger(cost)) {
      throw optionError(TypeError, "cost", cost, "not-a-number", "must be a whole number");
    }
    if (cost < 0) throw optionError(RangeError, "cost", cost, "negative", "must be 0 or more");
    return cost;
  }

  /** Decides one request of `cost` (default 1) for `key` (on behalf of `tenant`, for a fair share). */
  async check(key, options) {
    const cost = this.#cost(options?.cost);
    const group = this.#group(key, options?.tenant);
    // Refused before any round trip, with the core's error (no cost up to the smallest
    // capacity can be refused: then the core is not asked).
    if (cost > this.#capacity) this.#limits.checkCost(cost, group.tenant);
    const remembered = this.#remembered(group, cost);
    if (remembered !== undefined) return remembered;
    return this.#submit(group, OP_CHECK, cost);
  }

  /** The key's standing without charging it. */
  async peek(key, options) {
    return this.#submit(this.#group(key, options?.tenant), OP_PEEK, 0);
  }

  /**
   * Waits for a turn: resolves to the admitting decision (after a leaky queue's `delay`), or
   * rejects with a `WaitTimeoutError` (`waited`, `retryAfter`) when the request cannot
   * proceed within `maxWait` ms (at once when the retry time is already beyond it, or
   * unknown: a full concurrency limit), with the signal's reason when `signal` aborts, or
   * like `check` for invalid arguments. The waiting rule is the core's
   * (`FleetLimits.waitStep`: `tollgate::wait::step`); an admission whose queue delay does not
   * fit the remaining wait is not kept. Waiters for one key (and tenant) in this process are
   * served in arrival order, one decision at a time. Nothing is charged until admitted.
   */
  async acquire(key, options) {
    const cost = this.#cost(options?.cost);
    const group = this.#group(key, options?.tenant);
    const maxWait = options?.maxWait === undefined ? Infinity : checkMs("maxWait", options.maxWait, true);
    const jitter = options?.jitter === undefined ? 0 : checkMs("jitter", options.jitter, false);
    this.#limits.checkCost(cost, group.tenant);
    const step = (d, waited, max, drawn) => FleetLimits.waitStep(d.allowed, d.retryAfter, d.delay, waited, max, drawn);
    return waitInLine(this.#lines, group.id, {
      maxWait,
      signal: options?.signal,
      clock: () => performance.now(),
      // `left` ms before the deadline (LOOK: keep nothing), sent with the request: the round
      // (or the module's MAXDELAY) keeps the charge only as the core's rule says.
      decide: (left) => this.#remembered(group, cost) ?? this.#submit(group, OP_ACQUIRE, cost, left),
      step,
      jitter: () => (jitter === 0 ? 0 : Math.random() * jitter),
    });
  }

  /**
   * Wraps the async function `fn`: each call waits for a turn (`acquire` with `options`:
   * `key`, a string or a function of the call's arguments, default `"default"`; `cost`,
   * `maxWait`, `signal`, `tenant`, `jitter`), then calls `fn` with the same `this` and
   * arguments and returns its result. A timeout rejects with `WaitTimeoutError` and does not
   * call `fn`.
   */
  throttle(fn, options) {
    return throttled(this, fn, options);
  }

  /** Gives back `cost` (default 1) slots of the concurrency limits for `key`. */
  async release(key, options) {
    await this.#submit(this.#group(key, undefined), OP_RELEASE, this.#cost(options?.cost));
  }

  /** Forgets `key` in every limit of the stack (tenant windows expire by themselves); whether anything was stored. */
  async reset(key) {
    const group = this.#group(key, undefined);
    for (const [id, d] of this.#denials) if (d.key === key) this.#denials.delete(id);
    if (this.#fallback === "local") this.#limits.localReset(key);
    this.#stats.roundTrips++;
    try {
      return number(await this.#call(["DEL", ...group.keys])) > 0;
    } catch (e) {
      throw e instanceof Timeout ? new RedisLimiterError("redis", "redis: reset timed out") : this.#fatal(e);
    }
  }

  /** Where decisions were made so far: `{ redis, denyCache, fallback, indeterminate, conflicts, roundTrips }`. */
  stats() {
    return { ...this.#stats };
  }

  /** Frees the wasm memory now (otherwise at garbage collection). */
  free() {
    this.#limits.free();
  }

  /** One command, bounded by the timeout (a late answer is ignored). */
  #call(args) {
    return this.#deadlines.watch(this.#send(args));
  }

  /** A script by its SHA1; when Redis lost its script cache (NOSCRIPT), once more with its text. */
  async #script(sha, text, keys, args) {
    this.#stats.roundTrips++;
    try {
      const merged = this.#merged?.[sha];
      if (merged !== undefined) return await merged.send(keys, args);
      return await this.#call(["EVALSHA", sha, String(keys.length), ...keys, ...args]);
    } catch (e) {
      if (!(isReply(e) && FleetLimits.handle(false, false, String(e.message)) === SEND_BODY)) throw e;
    }
    // NOSCRIPT: the script did not run, so sending it again charges nothing twice.
    this.#stats.roundTrips++;
    return this.#call(["EVAL", text, String(keys.length), ...keys, ...args]);
  }

  #fatal(e) {
    return new RedisLimiterError("redis", `redis: ${e?.message ?? e}`, { cause: e });
  }

  /**
   * Sorts a failed call by the core's rule (FleetLimits.handle: the one table of Redis error
   * replies): Redis unavailable (the fallback decides, and says why) or an error for the
   * caller. `write`: the call may have written (a commit, a module command).
   */
  #classify(e, write) {
    const timeout = e instanceof Timeout;
    const handling = FleetLimits.handle(write, timeout, !timeout && isReply(e) ? String(e.message) : undefined);
    if (handling === FATAL || handling === SEND_BODY) return this.#fatal(e);
    return new Unavailable(FALLBACK_WHY[handling], e);
  }

  /** A denial remembered for `group` that still holds for `cost`. */
  #remembered(group, cost) {
    if (!this.#denyCache || this.#clock !== undefined) return undefined;
    const d = this.#denials.get(group.id);
    if (d === undefined) return undefined;
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
    this.#stats.denyCache++;
    return out;
  }

  #remember(group, cost, sent, decision) {
    // Only a denial with a retry time (a concurrency limit frees on release, which no clock
    // predicts), measured from when the read was sent. retryAfter is whole ms rounded up, so
    // the memory ends 1 ms earlier: it never outlasts the true retry time.
    const retry = decision.retryAfter;
    if (!this.#denyCache || this.#clock !== undefined || decision.allowed || retry === 0) return;
    if (this.#denials.size >= MAX_DENIALS) this.#denials.clear();
    const until = sent + retry - 1;
    const old = this.#denials.get(group.id);
    if (old === undefined || old.until < until || old.cost > cost) {
      this.#denials.set(group.id, { key: group.key, cost, until, at: sent, decision });
    }
  }

  /** Queues a request for its group; the first of an idle group runs the group's rounds. */
  #submit(group, kind, cost, maxDelay = Infinity) {
    return new Promise((resolve, reject) => {
      const pending = { kind, cost, maxDelay, resolve, reject };
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
    if (this.#useModule && (this.#module ?? (await this.#hasModule()))) return this.#moduleRound(group, round);
    const started = performance.now();
    let reply;
    try {
      reply = await this.#script(READ_SHA, READ_SCRIPT, group.keys, []);
    } catch (e) {
      const c = this.#classify(e, false);
      if (!(c instanceof Unavailable)) throw c;
      this.#downUntil = performance.now() + this.#probeEvery;
      return this.#fallBack(group, round, c.why);
    }
    let read = this.#read(group, reply, 0);
    let sent = started;
    let retries = 0;
    const stride = 1 + 6 * (1 + n);
    for (;;) {
      let out;
      try {
        out = this.#decide(group, read, round);
      } catch (e) {
        if (e?.rule === "corrupt-state") {
          throw new RedisLimiterError("corrupt-state", `key ${group.keys[e.value]}: ${e.message}`, { key: group.keys[e.value] });
        }
        throw e;
      }
      // The errors of failed requests are taken now: the next round's decide replaces them.
      let errors;
      for (let i = 0; i < round.length; i++) {
        if (out[i * stride] === FAILED) (errors ??= [])[i] = this.#limits.error(i);
      }
      const args = this.#commitArgs(read.versions, out, round.length * stride);
      if (args !== undefined) {
        let answer;
        try {
          answer = await this.#script(COMMIT_SHA, COMMIT_SCRIPT, group.keys, args);
        } catch (e) {
          const c = this.#classify(e, true);
          if (!(c instanceof Unavailable)) throw c;
          // The commit may have been applied: never sent again; the fallback decides.
          this.#stats.indeterminate++;
          this.#downUntil = performance.now() + this.#probeEvery;
          return this.#fallBack(group, round, c.why);
        }
        const status = Array.isArray(answer) ? text(answer[0]) : undefined;
        if (status === "conflict") {
          this.#stats.conflicts++;
          const waited = performance.now() - started;
          if (waited >= this.#retryFor) {
            throw new RedisLimiterError("contended", `gave up after ${Math.round(waited)} ms of conflicting writes by other clients`, { waited });
          }
          retries++;
          // Jitter: clients that collided do not collide again in step.
          await sleep(Math.random() * Math.min(retries, 10));
          read = this.#read(group, answer, 1);
          sent = performance.now();
          continue;
        }
        if (status !== "ok") throw new RedisLimiterError("redis", "redis: unexpected script reply");
      }
      for (let i = 0; i < round.length; i++) {
        const p = round[i];
        const at = i * stride;
        const status = out[at];
        if (status === FAILED) p.reject(errors[i]);
        else if (status === RELEASED) p.resolve(undefined);
        else {
          const d = decisionAt(out, at, n, "redis");
          if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) {
            this.#stats.redis++;
            this.#remember(group, p.cost, sent, d);
          }
          p.resolve(d);
        }
      }
      return;
    }
  }

  /**
   * FleetLimits.decide for the requests of `round` on the states `read`: the input goes
   * into the limits' buffers in wasm memory, the output numbers come back as a copy (the
   * next round reuses the buffer). The states to write stay at `bytesPtr` until then.
   */
  #decide(group, read, round) {
    const limits = this.#limits;
    const n = group.keys.length;
    limits.prepare(read.size, n + 3 * round.length);
    const memory = views();
    let at = limits.statesPtr();
    for (const part of read.parts) {
      memory.u8.set(part, at);
      at += part.length;
    }
    const numbers = limits.numbersPtr() / 8;
    for (let i = 0; i < n; i++) memory.f64[numbers + i] = read.lens[i];
    for (let i = 0; i < round.length; i++) {
      const op = numbers + n + 3 * i;
      memory.f64[op] = round[i].kind;
      memory.f64[op + 1] = round[i].cost;
      memory.f64[op + 2] = round[i].maxDelay;
    }
    const len = limits.decide(group.tenant, read.secs, read.micros);
    // Copied into a plain array: a typed array this size gets its own backing store,
    // which cost more to make than the copy.
    const from = limits.outPtr() / 8;
    const f64 = views().f64;
    const out = new Array(len);
    for (let i = 0; i < len; i++) out[i] = f64[from + i];
    return out;
  }

  /**
   * The commit script's arguments for the last decision's writes (at `w` in `out`, with the
   * values at `bytesPtr`), or undefined when nothing changed: `cas` (or `blind`), then per
   * slot its version read, the action, the new value (a fresh write id and the state, made
   * by the core) and its time to live (the core's rule).
   */
  #commitArgs(versions, out, w) {
    const n = versions.length;
    let changed = false;
    for (let i = 0; i < n; i++) if (out[w + 3 * i] !== 0) changed = true;
    if (!changed) return undefined;
    const args = [this.#blind ? "blind" : "cas"];
    const bytes = views().u8;
    let at = this.#limits.bytesPtr();
    for (let i = 0; i < n; i++) {
      const action = out[w + 3 * i];
      args.push(versions[i]);
      if (action === 0) args.push("k", "", "");
      else if (action === 1) args.push("d", "", "");
      else {
        const len = out[w + 3 * i + 2];
        const value = Buffer.allocUnsafe(len);
        value.set(bytes.subarray(at, at + len));
        at += len;
        args.push("p", value, String(out[w + 3 * i + 1]));
      }
    }
    return args;
  }

  /** Whether to decide with the server's module (asked once, with `COMMAND INFO tollgate.check`). */
  async #hasModule() {
    if (!this.#useModule) return false;
    if (this.#module !== undefined) return this.#module;
    let reply;
    try {
      reply = await this.#call(["COMMAND", "INFO", "tollgate.check"]);
    } catch {
      return false; // not known yet: the read that follows reports the failure
    }
    this.#module = Array.isArray(reply) && Array.isArray(reply[0]);
    return this.#module;
  }

  /** The limiter's arguments of a module command: the policy, a stack, or a fair share's shared policy and tenant window. */
  #moduleLimits(tenant) {
    if (tenant === undefined) return this.#moduleArgs;
    const policies = this.#limits.policies();
    return [policies[0], "TENANT", tenant, policies[1]];
  }

  /**
   * One round in the module: every queued request one command, all sent at once (one round
   * trip, pipelined by the client), each decided atomically inside Redis.
   */
  async #moduleRound(group, round) {
    const limits = this.#moduleLimits(group.tenant);
    const now = this.#clock?.();
    const sent = performance.now();
    this.#stats.roundTrips++;
    if (round.length === 1) return this.#moduleCommand(group, round[0], limits, now, sent);
    await Promise.all(round.map((p) => this.#moduleCommand(group, p, limits, now, sent)));
  }

  /** One request's module command, answered (or decided by the fallback when its answer was lost). */
  async #moduleCommand(group, p, limits, now, sent) {
    const args = [MODULE_COMMAND[p.kind], group.base, ...limits];
    if (p.kind !== OP_PEEK && p.cost !== 1) args.push("COST", String(p.cost));
    if (p.kind === OP_ACQUIRE && p.maxDelay === LOOK) {
      // A waiter's look: what the request would get, nothing kept (PEEK with its COST).
      args[0] = "TOLLGATE.PEEK";
      if (p.cost === 1) args.push("COST", "1");
    } else if (p.kind === OP_ACQUIRE && p.maxDelay !== Infinity) args.push("MAXDELAY", String(p.maxDelay));
    if (now !== undefined) args.push("NOW", String(now)); // a server loaded with TESTCLOCK
    let value;
    try {
      value = await this.#call(args);
    } catch (error) {
      const c = this.#classify(error, true);
      if (c instanceof Unavailable) {
        // The command may have run: never sent again; the fallback decides it.
        this.#stats.indeterminate++;
        this.#downUntil = performance.now() + this.#probeEvery;
        return this.#fallBack(group, [p], c.why);
      }
      const message = String(error.message);
      // The server lost the module (restarted without it): ask again next round.
      if (/unknown command/i.test(message)) this.#module = undefined;
      // A release without a concurrency limit: the core's own error, as on the script path.
      if (p.kind === OP_RELEASE && /^(ERR )?not-concurrency/.test(message)) return p.reject(this.#releaseError(group, p.cost));
      return p.reject(this.#fatal(error));
    }
    if (p.kind === OP_RELEASE) return p.resolve(undefined);
    const d = moduleDecision(value);
    if (d === undefined) return p.reject(new RedisLimiterError("redis", "redis: unexpected module reply"));
    if (p.kind !== OP_PEEK) {
      this.#stats.redis++;
      this.#remember(group, p.cost, sent, d); // retryAfter is whole ms rounded up: remembered 1 ms less
    }
    p.resolve(d);
  }

  /** The core's error for a release the limits refuse (decided on absent states: nothing is read or written). */
  #releaseError(group, cost) {
    const absent = { secs: 0, micros: 0, lens: new Array(group.keys.length).fill(0), parts: [], size: 0 };
    const out = this.#decide(group, absent, [{ kind: OP_RELEASE, cost, maxDelay: 0 }]);
    return out[0] === FAILED ? this.#limits.error(0) : this.#fatal(new Error("the module refused a release the core allows"));
  }

  /**
   * Parses a read's answer (`{ seconds, microseconds, value of each slot }`, starting at `at`)
   * for FleetLimits.decide: the clock (the test clock's, if any), each value's version (its
   * first bytes, for the commit to compare; "" when absent) and the values, one after the
   * other (the core decodes them).
   */
  #read(group, reply, at) {
    const n = group.keys.length;
    if (!Array.isArray(reply) || reply.length !== at + n + 2) {
      throw new RedisLimiterError("redis", "redis: unexpected script reply");
    }
    let secs = number(reply[at]);
    let micros = number(reply[at + 1]);
    if (this.#clock !== undefined) {
      const ms = this.#clock();
      secs = Math.floor(ms / 1000);
      micros = (ms % 1000) * 1000;
    }
    const versions = new Array(n);
    const lens = new Array(n).fill(0);
    const parts = [];
    let size = 0;
    for (let i = 0; i < n; i++) {
      const v = toBuffer(reply[at + 2 + i]);
      if (v.length === 0) {
        versions[i] = "";
        continue;
      }
      versions[i] = v.subarray(0, VERSION_BYTES);
      parts.push(v);
      lens[i] = v.length;
      size += v.length;
    }
    return { secs, micros, versions, lens, parts, size };
  }

  /** Decides a round with the declared fallback. */
  #fallBack(group, round, why) {
    for (const p of round) {
      try {
        if (p.kind === OP_RELEASE) {
          if (this.#fallback === "local" && this.#limits.localRelease(group.key, p.cost) === FAILED) {
            p.reject(this.#limits.error(0));
          } else p.resolve(undefined);
          continue;
        }
        if (p.kind === OP_CHECK || p.kind === OP_ACQUIRE) this.#stats.fallback++;
        p.resolve(this.#fallbackDecide(group, p.cost, why, p.maxDelay));
      } catch (e) {
        p.reject(e);
      }
    }
  }

  /** `maxDelay`: an acquire's (the charge is kept only as the core's waiting rule says). */
  #fallbackDecide(group, cost, why, maxDelay = Infinity) {
    if (this.#fallback === "local") {
      const now = performance.now() - this.#epoch;
      const out = this.#limits.localCheck(group.key, group.tenant, now, cost, maxDelay);
      if (out[0] === FAILED) throw this.#limits.error(0);
      return decisionAt(out, 0, (out.length - 7) / 6, "fallback", why);
    }
    const out = this.#fallback === "closed" ? this.#limits.failClosed(Math.ceil(this.#probeEvery)) : this.#limits.failOpen();
    return decisionAt(out, 0, (out.length - 7) / 6, "fallback", why);
  }
}
