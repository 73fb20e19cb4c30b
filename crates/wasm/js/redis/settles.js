// tollgate/redis: the settle of a reservation on Redis (see ../redis.js), as tollgate-redis
// settles (crates/redis/src/limiter/settle.rs): a read of the slots and of the reservation's
// settle record, the core's settle (wasm, FleetLimits.settle), and the settle script
// (crates/redis/lua/settle.lua), which writes the slots (compare-and-set, read again on a
// conflict) together with the record, under the key's hash tag: two round trips. With the
// module, one command, TOLLGATE.SETTLE. The record answers a second settle of the same
// reservation, from any process, Node or Rust, with the first's outcome, and charges nothing.
// A settle is never decided by the fallback: when Redis cannot answer, or its answer was
// lost, it is a `settle-unknown` error, and a retry with the same reservation charges once.

import { RedisLimiterError, Unavailable, keyed } from "./errors.js";
import { text, toBuffer } from "./clients.js";
import { FleetLimits, classify, commitArgs, readReply, settleAnswer } from "./fleet.js";

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The error of a settle whose outcome is not known (`why`: unreachable, timeout, indeterminate): retry it. */
function unknown(why, cause) {
  return new RedisLimiterError("settle-unknown", `redis: the settle's outcome is unknown (${why}): settle again with the same reservation, which charges once`, { why, cause });
}

/** A settlement's numbers (`refunded, charged, unpaid`, then each limit's three) as the answer `Limiter.settle` gives. */
export function settlementOf(n) {
  const answer = { refunded: n[0], charged: n[1], unpaid: n[2] };
  if (n.length > 3) {
    answer.each = [];
    for (let i = 3; i < n.length; i += 3) answer.each.push({ refunded: n[i], charged: n[i + 1], unpaid: n[i + 2] });
  }
  return answer;
}

/** The settlement a settle record (the core's format) says. */
function recorded(record) {
  const n = FleetLimits.readRecord(toBuffer(record));
  if (n === undefined) throw new RedisLimiterError("redis", "redis: unexpected settle record");
  return settlementOf(n);
}

/**
 * A read of the slots and the record (`{ seconds, microseconds, value of each slot, the
 * record }` from `at`): the slots' read as readReply gives it, and the record ('' when the
 * reservation was not settled yet).
 */
function settleRead(group, reply, at, clock) {
  const n = group.keys.length;
  if (!Array.isArray(reply) || reply.length !== at + n + 3) throw new RedisLimiterError("redis", "redis: unexpected script reply");
  return { read: readReply(group, reply.slice(0, at + n + 2), at, clock), record: toBuffer(reply[at + n + 2]) };
}

/**
 * Settles reservation `r` (its `estimate` charged at `at`, ns) of `group` with `actual` (an
 * overage up to the limit only when `upTo`). `ways`: the limiter's way to Redis (`scripts`,
 * `module`, `stats`, `down()`: whether Redis is taken as down, `failed(why)`: count a failure
 * and take Redis as down until the next probe); `o` its options.
 */
export async function settleOnRedis(ways, limits, o, group, r, actual, upTo) {
  if (ways.down()) throw unknown("unreachable");
  const id = BigInt(r.id);
  const at = BigInt(r.at);
  const module = ways.module;
  if (module !== undefined && (module.known ?? (await module.ask()))) {
    let reply;
    ways.stats.roundTrips++;
    try {
      reply = await module.settle(group, FleetLimits.settleArgs(id, at, r.estimate, actual, upTo), o.clock?.());
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      // It may have run: the caller retries, and the record answers if it did.
      ways.stats.indeterminate++;
      ways.failed("indeterminate");
      throw unknown(e.why, e.cause);
    }
    return recorded(reply);
  }
  const keys = [...group.keys, FleetLimits.settledName(group.base, id)];
  const started = performance.now();
  let reply;
  try {
    reply = await ways.scripts.read(keys);
  } catch (e) {
    const c = classify(e, false);
    if (!(c instanceof Unavailable)) throw c;
    ways.failed(c.why);
    throw unknown(c.why, c.cause);
  }
  let { read, record } = settleRead(group, reply, 0, o.clock);
  let retries = 0;
  for (;;) {
    if (record.length > 0) return recorded(record);
    const out = settleOut(limits, group, read, r.estimate, at, actual, upTo);
    const k = out[0];
    // Written even when no slot changed: the record makes the settle happen once.
    const args = commitArgs(limits, read.versions, out, 1 + k, false, true);
    args.push(Buffer.from(limits.settledRecord()), String(limits.settledTtl()));
    let answer;
    try {
      answer = await ways.scripts.settle(keys, args);
    } catch (e) {
      const c = classify(e, true);
      if (!(c instanceof Unavailable)) throw c;
      // It may have been applied: the caller retries, and the record answers if it was.
      ways.stats.indeterminate++;
      ways.failed("indeterminate");
      throw unknown(c.why, c.cause);
    }
    const status = Array.isArray(answer) ? text(answer[0]) : undefined;
    if (status === "ok") return settlementOf(out.slice(1, 1 + k));
    if (status === "settled") return recorded(answer[1]);
    if (status !== "conflict") throw new RedisLimiterError("redis", "redis: unexpected script reply");
    ways.stats.conflicts++;
    const waited = performance.now() - started;
    if (waited >= o.retryFor) {
      throw new RedisLimiterError("contended", `gave up after ${Math.round(waited)} ms of conflicting writes by other clients`, { waited });
    }
    retries++;
    // Jitter: clients that collided do not collide again in step.
    await sleep(Math.random() * Math.min(retries, 10));
    ({ read, record } = settleRead(group, answer, 1, o.clock));
  }
}

/**
 * FleetLimits.settle on the states `read`: its output numbers (the settlement's count and
 * numbers, then the writes, whose values stay at `bytesPtr`), or the core's error.
 */
function settleOut(limits, group, read, estimate, at, actual, upTo) {
  try {
    return settleAnswer(limits, read, group.keys.length, estimate, at, actual, upTo);
  } catch (e) {
    throw keyed(group, e);
  }
}

/**
 * The core's error for a settle the module refused (a concurrency limit: `not-settleable`),
 * found by settling on absent states (nothing is read or written), or undefined.
 */
export function settleError(limits, group, estimate, at, actual, upTo) {
  const absent = { secs: 0, micros: 0, lens: new Array(group.keys.length).fill(0), parts: [], size: 0 };
  try {
    settleOut(limits, group, absent, estimate, at, actual, upTo);
  } catch (e) {
    return e;
  }
  return undefined;
}
