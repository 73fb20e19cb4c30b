// tollgate/redis: the core's side of the protocol (wasm, FleetLimits, crates/wasm/src/fleet.rs):
// every decision and the fleet protocol's rules (tollgate::store::fleet) are made there; this
// file passes the bytes and numbers in and out of wasm memory (see ../redis.js).

import glue from "./tollgate_wasm.cjs";
import { DECISION_LEN, detailedAt } from "../web/decision.js";
import { Timeout } from "./deadlines.js";
import { isReply, number, toBuffer } from "./clients.js";
import { RedisLimiterError, Unavailable, fatal, optionError } from "./errors.js";

export const { FleetLimits, waitStep } = glue;

// FleetLimits' statuses (0 denied, 1 allowed, as a decision's `allowed`) and request kinds
// (crates/wasm/src/fleet.rs).
export const FAILED = 2;
export const RELEASED = 3;
export const OP_CHECK = 0;
export const OP_PEEK = 1;
export const OP_RELEASE = 2;
export const OP_ACQUIRE = 3;
/** Where a decision was made: the core's `Source` index (FleetLimits.record, .waited). */
export const STORE = 0;
export const DENY_CACHE = 1;
export const FALLBACK = 2;
/** FleetLimits.handle's answers for a failed call (the core's `fleet::handle`). */
const FATAL = 0;
export const SEND_BODY = 1;
const FALLBACK_WHY = [undefined, undefined, "unreachable", "timeout", "indeterminate"];
/** How many bytes of a stored value are its version (the core's `fleet::VERSION_BYTES`). */
export const VERSION_BYTES = FleetLimits.versionBytes();

/** FleetLimits from a limiter spec: a policy, an array (a stack), `{ policy }`, `{ stack }` or `{ fairShare: { shared, tenant } }`. */
export function fleetLimits(spec, localMaxKeys) {
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

/**
 * The decision of the request answered at `at` of FleetLimits' output (its status, then the
 * combined decision and each of the `n` limits', as decision.js reads them), made at
 * `source` ("redis", "deny-cache" or "fallback"; `why` it fell back).
 */
export function decisionAt(out, at, n, source, why) {
  const d = detailedAt(out, at + 1, n);
  d.source = source;
  if (why !== undefined) d.why = why;
  return d;
}

/** {@link decisionAt} for an output of one request's answer (as many limits as it holds). */
export function answerDecision(out, source, why) {
  return decisionAt(out, 0, (out.length - 1) / DECISION_LEN - 1, source, why);
}

/**
 * Module replies (six integers, durations in ms, then an array of each limit's six) read by
 * the core's rule (FleetLimits.moduleReply) for one limiter's limits. The reply's numbers
 * go straight into wasm memory (no array of its fields first), where the core turns them
 * in place into the answer; the room's address is kept (it moves only when asked for more:
 * FleetLimits.moduleBuffer), so a reply is one wasm call (PERF.md, "The module reply read
 * in place").
 */
export class ModuleReplies {
  #limits;
  /** Where the room is in wasm memory (index of f64s), and how many reply numbers it takes. */
  #at = 0;
  #room = 0;

  constructor(limits) {
    this.#limits = limits;
  }

  /**
   * The answer's numbers of `reply` (a request's answer, as FleetLimits.decide writes it),
   * or undefined when the reply is not a decision.
   */
  answer(reply) {
    if (!Array.isArray(reply)) return undefined;
    const each = reply[6];
    if (!Array.isArray(each)) return undefined;
    const len = DECISION_LEN * (1 + each.length);
    if (len > this.#room) {
      this.#at = this.#limits.moduleBuffer(len) / 8;
      this.#room = len;
    }
    let f64 = views().f64;
    const at = this.#at;
    if (!putFields(f64, at + 1, reply)) return undefined;
    for (let k = 0; k < each.length; k++) {
      if (!putFields(f64, at + 1 + DECISION_LEN * (k + 1), each[k])) return undefined;
    }
    const n = this.#limits.moduleReply(len);
    if (n === 0) return undefined;
    f64 = views().f64;
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = f64[at + i];
    return out;
  }
}

/** Writes the first six fields of `f` (an array of at least six) as numbers at `at`; false when `f` is not one. */
function putFields(f64, at, f) {
  if (!Array.isArray(f) || f.length < DECISION_LEN) return false;
  for (let j = 0; j < DECISION_LEN; j++) f64[at + j] = number(f[j]);
  return true;
}

/** The deny cache's answer (FleetLimits.denied, the core's DenyCache) for `group` and `cost` at `now` ms, or undefined. */
export function deniedAnswer(limits, group, cost, now) {
  return outNumbers(limits, limits.denied(group.key, group.tenant, cost, now));
}

/** The `len` numbers of FleetLimits' last output (undefined for none), copied out of wasm memory. */
function outNumbers(limits, len) {
  if (len === 0) return undefined;
  const from = limits.outPtr() / 8;
  const f64 = views().f64;
  const out = new Array(len);
  for (let i = 0; i < len; i++) out[i] = f64[from + i];
  return out;
}

/**
 * Sorts a failed call by the core's rule (FleetLimits.handle: the one table of Redis error
 * replies): Redis unavailable (the fallback decides, and says why) or an error for the
 * caller. `write`: the call may have written (a commit, a module command).
 */
export function classify(e, write) {
  if (e instanceof RedisLimiterError) return e; // not-connected: the caller's to fix
  const timeout = e instanceof Timeout;
  const handling = FleetLimits.handle(write, timeout, !timeout && isReply(e) ? String(e.message) : undefined);
  if (handling === FATAL || handling === SEND_BODY) return fatal(e);
  return new Unavailable(FALLBACK_WHY[handling], e);
}

/**
 * FleetLimits.decide for the requests of `round` on the states `read`: the input goes
 * into the limits' buffers in wasm memory, the output numbers come back as a copy (the
 * next round reuses the buffer). The states to write stay at `bytesPtr` until then.
 */
export function decide(limits, group, read, round) {
  const n = group.keys.length;
  const numbers = putRead(limits, read, n, 3 * round.length);
  const memory = views();
  for (let i = 0; i < round.length; i++) {
    const op = numbers + n + 3 * i;
    memory.f64[op] = round[i].kind;
    memory.f64[op + 1] = round[i].cost;
    memory.f64[op + 2] = round[i].maxDelay;
  }
  // Copied into a plain array: a typed array this size gets its own backing store,
  // which cost more to make than the copy.
  return outNumbers(limits, limits.decide(group.tenant, read.secs, read.micros)) ?? [];
}

/**
 * Writes the states `read` of `n` slots into the limits' input buffers (their values, then
 * their lengths, with room for `extra` numbers after them); returns where the numbers are
 * (index of f64s in wasm memory).
 */
function putRead(limits, read, n, extra) {
  limits.prepare(read.size, n + extra);
  const memory = views();
  let at = limits.statesPtr();
  for (const part of read.parts) {
    memory.u8.set(part, at);
    at += part.length;
  }
  const numbers = limits.numbersPtr() / 8;
  for (let i = 0; i < n; i++) memory.f64[numbers + i] = read.lens[i];
  return numbers;
}

/**
 * FleetLimits.settle of a reservation (`estimate` charged at `at`, ns, a BigInt) with
 * `actual` (`upTo`: an overage up to the limit only) on the states `read` of `n` slots: its
 * output numbers (the settlement's count and numbers, then the writes, whose values stay at
 * `bytesPtr` until the next call), or the core's error.
 */
export function settleAnswer(limits, read, n, estimate, at, actual, upTo) {
  putRead(limits, read, n, 0);
  return outNumbers(limits, limits.settle(read.secs, read.micros, estimate, at, actual, upTo));
}

/**
 * The commit script's arguments for the last decision's writes (at `w` in `out`, with the
 * values at `bytesPtr`), or undefined when nothing changed (unless `always`): `cas` (or
 * `blind`), then per slot its version read, the action, the new value (a fresh write id and
 * the state, made by the core) and its time to live (the core's rule).
 */
export function commitArgs(limits, versions, out, w, blind, always = false) {
  const n = versions.length;
  let changed = always;
  for (let i = 0; i < n; i++) if (out[w + 3 * i] !== 0) changed = true;
  if (!changed) return undefined;
  const args = [blind ? "blind" : "cas"];
  const bytes = views().u8;
  let at = limits.bytesPtr();
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

/**
 * Parses a read's answer (`{ seconds, microseconds, value of each slot }`, starting at `at`)
 * for FleetLimits.decide: the clock (the test clock's, if any), each value's version (its
 * first bytes, for the commit to compare; "" when absent) and the values, one after the
 * other (the core decodes them).
 */
export function readReply(group, reply, at, clock) {
  const n = group.keys.length;
  if (!Array.isArray(reply) || reply.length !== at + n + 2) {
    throw new RedisLimiterError("redis", "redis: unexpected script reply");
  }
  let secs = number(reply[at]);
  let micros = number(reply[at + 1]);
  if (clock !== undefined) {
    const ms = clock();
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

/** The core's error for a release the limits refuse (decided on absent states: nothing is read or written). */
export function releaseError(limits, group, cost) {
  const absent = { secs: 0, micros: 0, lens: new Array(group.keys.length).fill(0), parts: [], size: 0 };
  const out = decide(limits, group, absent, [{ kind: OP_RELEASE, cost, maxDelay: 0 }]);
  return out[0] === FAILED ? limits.error(0) : fatal(new Error("the module refused a release the core allows"));
}

/**
 * A request's decision by the declared fallback (`local`, `open` or `closed`), at `now` ms of
 * this process's clock for the local limiter; `why` it fell back; `maxDelay`: an acquire's
 * (the local charge is kept only as the core's waiting rule says).
 */
export function fallbackDecision(limits, fallback, probeEvery, now, group, cost, why, maxDelay = Infinity) {
  if (fallback === "local") {
    const out = limits.localCheck(group.key, group.tenant, now, cost, maxDelay);
    if (out[0] === FAILED) throw limits.error(0);
    return answerDecision(out, "fallback", why);
  }
  const out = fallback === "closed" ? limits.failClosed(Math.ceil(probeEvery)) : limits.failOpen();
  return answerDecision(out, "fallback", why);
}
