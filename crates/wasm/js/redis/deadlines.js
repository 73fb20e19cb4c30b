// tollgate/redis: every call bounded by the limiter's timeout, with one timer (see ../redis.js).

/** A call that had no answer within the timeout. */
export class Timeout extends Error {}

/**
 * Bounds calls by one timeout with one timer for all of them (a timer and a race per call
 * cost more than the rest of a check's work in this file). Every call has the same timeout,
 * so the order they were sent in is the order of their deadlines: the timer waits for the
 * oldest unanswered one.
 */
export class Deadlines {
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
