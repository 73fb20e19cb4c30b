// A real HTTP origin on a free loopback port, for tests that need to see what reaches the
// origin and when, or an origin that is slow or fails. Requests are recorded in `seen`
// (path and arrival time). `/hold/*` waits until `release()`; `/fail/*` resets the
// connection; anything else answers 200 with JSON at once.
import http from "node:http";
import { start } from "./harness.mjs";

export async function startOrigin() {
  const seen = [];
  let waiting = [];
  const arrivals = [];
  const server = http.createServer((req, res) => {
    seen.push({ path: req.url, at: Date.now() });
    for (const w of arrivals.splice(0)) w();
    if (req.url.startsWith("/fail/")) {
      req.socket.destroy();
      return;
    }
    const answer = () => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ origin: "test origin", path: req.url }));
    };
    if (req.url.startsWith("/hold/")) waiting.push(answer);
    else answer();
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    seen,
    /** Answers every held request. */
    release() {
      for (const a of waiting.splice(0)) a();
    },
    /** Resolves once `n` requests in all have arrived. */
    async arrived(n, timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs;
      while (seen.length < n) {
        if (Date.now() > until) throw new Error(`origin saw ${seen.length} of ${n} requests`);
        await new Promise((r) => { arrivals.push(r); setTimeout(r, 200); });
      }
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((r) => server.close(r));
    },
  };
}

/** Polls `f` every 200 ms until it returns true (at most `ms`); returns whether it did. */
export async function eventually(f, ms = 15_000) {
  const until = Date.now() + ms;
  for (;;) {
    if (await f()) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Runs `f(edge, origin)` with an edge (`start(opts)`, its ORIGIN binding set) in front of a
 * fresh origin; releases the origin's held requests and stops both afterwards.
 */
export async function withOrigin(opts, f) {
  const origin = await startOrigin();
  const edge = await start({ ...opts, bindings: { ...opts.bindings, ORIGIN: origin.url } });
  try {
    await f(edge, origin);
  } finally {
    origin.release();
    await edge.dispose();
    await origin.close();
  }
}
