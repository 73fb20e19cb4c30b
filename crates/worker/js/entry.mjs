// The worker's entry module: the Rust worker (built by worker-build into ../build) plus the
// Durable Object class as Workers RPC needs it (`extends DurableObject`). The class forwards
// to the Rust object: `decide(json)` is the limiter's RPC call, `fetch` and `alarm` the
// usual handlers.
import { DurableObject } from "cloudflare:workers";
import worker, { Limiter as RustLimiter } from "../build/index.js";

export class Limiter extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.inner = new RustLimiter(ctx, env);
    /** The next group commit, shared by every call decided before it runs. */
    this.flushing = null;
  }
  /** Decides a JSON batch of requests; answers a JSON array of decisions. */
  decide(body) {
    const answer = this.inner.decide(body);
    // Nothing pending: every state this call saw is already written (and the output gate
    // holds the answer until it is committed).
    if (!this.inner.pending()) return answer;
    return this.flush().then(() => answer);
  }
  /**
   * Group commit: the pending states of every call decided until the flush runs (calls
   * the runtime delivers while this one waits for its turn) are written in one
   * transaction, so they share one SQLite commit. No answer leaves before the flush that
   * follows its decision: the writes happen in the flush, and the output gate holds the
   * answers until they are committed. A failed flush rejects every waiting call.
   */
  flush() {
    this.flushing ??= new Promise((resolve, reject) => {
      setTimeout(() => {
        this.flushing = null;
        try {
          this.inner.flush();
          resolve();
        } catch (e) {
          reject(e);
        }
      }, 0);
    });
    return this.flushing;
  }
  fetch(request) {
    return this.inner.fetch(request);
  }
  alarm(info) {
    return this.inner.alarm(info);
  }
}

export default worker;
