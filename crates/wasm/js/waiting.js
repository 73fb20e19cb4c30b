// The wait of `acquire`, shared by `tollgate` (api.js, in memory) and `tollgate/redis`
// (redis.js): a key's line of waiters, the timers and the give-up, around the core's waiting
// rule (`tollgate::wait`, through wasm: `step` below is the core's `step`, `decide` keeps a
// charge only as the core's `keeps` says). It mirrors the core's `wait_in_line`, which the
// Rust limiters wait through: JavaScript owns its timers and promises, the rule is Rust's.

/** The longest delay setTimeout takes (a longer one fires at once); longer waits re-decide. */
export const MAX_TIMER = 2 ** 31 - 1;

/** `step`'s statuses (the core's `Step`): go, wait, give up. */
export const GO = 1;
export const WAIT = 0;
export const GIVE_UP = 3;

/** `decide`'s `left` for a look: decide without keeping anything. */
export const LOOK = -1;

/**
 * The rejection of `acquire` (and `throttle`'s wrapper) when the request cannot proceed by
 * its `maxWait`: at once when the retry time is already beyond it. Nothing was charged.
 */
export class WaitTimeoutError extends Error {
  /**
   * @param {number} waited ms waited before giving up
   * @param {number} retryAfter ms from now until the key itself would admit the request (0
   *   when no clock can say: a full concurrency limit), not counting the waiters ahead
   */
  constructor(waited, retryAfter) {
    super(`rate limit wait timed out after ${waited} ms (retry after ${retryAfter} ms)`);
    this.name = "WaitTimeoutError";
    this.waited = waited;
    this.retryAfter = retryAfter;
  }
}

/** Resolves after `ms` (setTimeout's reach at most); rejects with the signal's reason on abort. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    function onAbort() {
      clearTimeout(timer);
      reject(signal.reason);
    }
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Leaves a line of waiters (once; later calls do nothing): the next waiter, if this one was
 * the first, becomes the first and is woken.
 */
export function leave(lines, id, me) {
  const line = lines.get(id);
  const at = line === undefined ? -1 : line.indexOf(me);
  if (at < 0) return;
  line.splice(at, 1);
  if (line.length === 0) lines.delete(id);
  else if (at === 0) line[0].wake?.();
}

/**
 * Waits until `me` is woken as the first of its line (true), or `deadline` (a `wait`'s
 * sleep of `ms`) passes (false); rejects with the signal's reason on abort.
 */
export function turn(me, ms, signal, wait = sleep) {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (f) => {
      if (done) return;
      done = true;
      me.wake = null;
      abort.abort();
      f();
    };
    // Ends the deadline's sleep once this waiter is woken (or aborted).
    const abort = new AbortController();
    me.wake = () => finish(() => resolve(true));
    if (signal?.aborted) return finish(() => reject(signal.reason));
    signal?.addEventListener("abort", () => finish(() => reject(signal.reason)), { once: true, signal: abort.signal });
    if (ms < Infinity) {
      const ended = (async () => {
        // A deadline beyond setTimeout's reach is slept in pieces.
        for (let left = Math.max(ms, 0); ; left -= MAX_TIMER) {
          await wait(Math.min(left, MAX_TIMER), abort.signal);
          if (left <= MAX_TIMER) return;
        }
      })();
      ended.then(() => finish(() => resolve(false)), () => {});
    }
  });
}

/**
 * Waits in line `id` of `lines` (a Map of arrays) until the request is admitted, or gives up
 * by `maxWait` ms (Infinity: as long as it takes), by the core's waiting rule:
 *
 * - `clock()`: the caller's clock in ms (only differences are used);
 * - `decide(left)`: decides the request (a decision object, or a promise of one), keeping the
 *   charge only if the core's `keeps` accepts it with `left` ms before the deadline; with
 *   `left` = `LOOK`, keeping nothing;
 * - `step(decision, waited, maxWait, jitter)`: the core's `step`, `[status, ms]`;
 * - `jitter()`: the jitter drawn for a sleep, in ms (0 for none);
 * - `wait(ms, signal)`: the timer (`sleep` unless a test replays time).
 *
 * Only the first of a line decides; a waiter behind others first looks at the key and gives
 * up at once if the key alone makes it miss its deadline, then waits for its turn or its
 * deadline (then: a timeout with the key's retry time). A wake after the deadline charges
 * nothing. Resolves to the admitting decision (after a leaky queue's delay); rejects with a
 * `WaitTimeoutError`, the signal's reason on abort, or `decide`'s error.
 */
export async function waitInLine(lines, id, { maxWait, signal, clock, decide, step, jitter, wait = sleep }) {
  signal?.throwIfAborted();
  const start = clock();
  const waited = () => clock() - start;
  const timeout = (ms, retryAfter) => new WaitTimeoutError(Math.round(ms), retryAfter);
  let line = lines.get(id);
  if (line === undefined) lines.set(id, (line = []));
  const me = { wake: null };
  line.push(me);
  // Whether the request has waited yet: until it has, its first decision is the call's own,
  // made at the call (a `maxWait` of 0 asks "admitted now?", a round trip to Redis included).
  let slept = false;
  try {
    if (line[0] !== me) {
      slept = true;
      // Behind others: if the key alone already makes this request miss its deadline, the
      // line ahead can only make it later.
      const look = await decide(LOOK);
      const now = waited();
      const [status, ms] = step(look, now, maxWait, 0);
      if (status === GIVE_UP) throw timeout(now, ms);
      // (The line may have moved while the key was asked: no wake is missed.)
      if (lines.get(id)[0] !== me && !(await turn(me, maxWait - now, signal, wait))) {
        // The deadline: the key's own retry time for this request.
        const [, retryAfter] = step(await decide(LOOK), Infinity, 0, 0);
        throw timeout(waited(), retryAfter);
      }
    }
    for (;;) {
      const now = slept ? waited() : 0;
      slept = true;
      // A wake after the deadline keeps nothing (the rule then gives up, with the key's
      // retry time). Whole ms, rounded down: the core keeps a queue delay up to it, and the
      // rule on the decision's delay (rounded up) agrees that it fits.
      const left = now <= maxWait ? Math.floor(maxWait - now) : LOOK;
      const d = await decide(left);
      const [status, ms] = step(d, now, maxWait, jitter());
      if (status === GO) {
        leave(lines, id, me); // admitted and charged: the next may decide now
        if (ms > 0) await wait(ms, signal);
        return d;
      }
      if (status === GIVE_UP) throw timeout(now, ms);
      await wait(Math.min(ms, MAX_TIMER), signal);
    }
  } finally {
    leave(lines, id, me);
  }
}
