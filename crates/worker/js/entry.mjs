// The worker's entry module: the Rust worker (built by worker-build into ../build) plus the
// Durable Object class as Workers RPC needs it (`extends DurableObject`). The class only
// forwards to the Rust object: `decide(json)` is the limiter's RPC call, `fetch` and
// `alarm` the usual handlers.
import { DurableObject } from "cloudflare:workers";
import worker, { Limiter as RustLimiter } from "../build/index.js";

export class Limiter extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.inner = new RustLimiter(ctx, env);
  }
  /** Decides a JSON batch of requests; answers a JSON array of decisions. */
  decide(body) {
    return this.inner.decide(body);
  }
  fetch(request) {
    return this.inner.fetch(request);
  }
  alarm(info) {
    return this.inner.alarm(info);
  }
}

export default worker;
