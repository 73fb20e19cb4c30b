// AdaptiveLimiter (the core's gradient controller over wasm) and its Express and Hono
// middleware, Express in a real server on 127.0.0.1 (in a worker thread: adaptive-server.js). Nothing asserts on wall-clock speed:
// the convergence test sends a bounded number of requests and asserts the range of the
// limit they leave.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Worker } from "node:worker_threads";
import { Hono } from "hono";
import { AdaptiveLimiter } from "tollgate";
import { adaptiveLimiter } from "tollgate/hono";

test("acquire admits up to the limit, then null; a release frees a slot once", () => {
  const l = new AdaptiveLimiter({ minLimit: 1, initialLimit: 2, clock: () => 0 });
  const a = l.acquire();
  const b = l.acquire();
  assert.ok(a && b);
  assert.equal(l.acquire(), null);
  assert.equal(l.inFlight, 2);
  l.release(a, { latency: 5 });
  assert.equal(l.inFlight, 1);
  assert.throws(() => l.release(a), { name: "TypeError", field: "token", rule: "not-held" });
  assert.equal(l.inFlight, 1);
  assert.throws(() => l.release(b, { outcome: "lost" }), { field: "outcome", rule: "unknown-outcome" });
  l.release(b, { outcome: "timeout" });
  assert.equal(l.inFlight, 0);
});

test("a parameter out of its bounds is a RangeError naming it, from the core", () => {
  assert.throws(() => new AdaptiveLimiter({ percentile: 100 }), {
    name: "RangeError",
    field: "percentile",
    rule: "too-large",
    value: 100,
  });
  assert.throws(() => new AdaptiveLimiter({ minLimit: 10, initialLimit: 5 }), { field: "initialLimit", rule: "too-small" });
  assert.throws(() => new AdaptiveLimiter({ windowMs: 0.5 }), { field: "windowMs", rule: "too-small", value: 0.5 });
  assert.throws(() => new AdaptiveLimiter({ maxLimit: 2.5 }), { name: "TypeError", field: "maxLimit" });
});

test("the limit falls to its floor when every request times out", () => {
  let now = 0;
  const l = new AdaptiveLimiter({ minLimit: 3, initialLimit: 50, windowMs: 10, clock: () => now });
  for (let round = 0; round < 50; round++) {
    const tokens = [];
    for (let t = l.acquire(); t !== null; t = l.acquire()) tokens.push(t);
    now += 20;
    for (const t of tokens) l.release(t, { outcome: "timeout" });
  }
  assert.equal(l.limit, 3);
});

test("Express: the limit converges near the handler's capacity, shedding with 503 + Retry-After", async () => {
  const WORKERS = 8;
  const CLIENTS = 32;
  // Converged: this many samples in a row (one every 50 requests) within the band, within
  // at most MAX_REQUESTS. A machine stall looks to the controller like a slow upstream and
  // it rightly cuts; the run goes on until the limit is back and has stayed in the band,
  // rather than averaging a recovery in (as the tower layer's test does).
  const SETTLED = 30;
  // Samples count from here on: the limit must still be near the knee after this many.
  const WARM = 2_500;
  const MAX_REQUESTS = 20_000;
  const inBand = (l) => l >= WORKERS * 0.75 && l <= WORKERS * 2.5;
  const server = new Worker(new URL("./adaptive-server.js", import.meta.url), {
    workerData: {
      workers: WORKERS,
      serviceMs: 25,
      retryAfter: 2,
      options: { minLimit: 2, initialLimit: 8, maxLimit: 500 },
    },
  });
  const port = await new Promise((r) => server.once("message", r));
  const base = `http://127.0.0.1:${port}`;
  const limit = async () => (await (await fetch(`${base}/limit`)).json());
  let sent = 0;
  let shed = 0;
  const limits = [];
  let run = 0;
  try {
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (sent < MAX_REQUESTS && run < SETTLED) {
          const n = sent++;
          const res = await fetch(`${base}/work`);
          const body = await res.text();
          if (res.status === 503) {
            if (shed++ === 0) {
              assert.equal(res.headers.get("retry-after"), "2");
              assert.match(res.headers.get("content-type"), /^application\/problem\+json/);
              const doc = JSON.parse(body);
              assert.equal(doc.error, "concurrency-limit");
              assert.equal(doc.status, 503);
            }
            // Back off, as a client told to retry would: this paces the load.
            await new Promise((r) => setTimeout(r, 50));
          } else {
            assert.equal(res.status, 200);
          }
          if (n % 50 === 0) {
            const l = (await limit()).limit;
            limits.push(l);
            run = inBand(l) ? run + Number(n >= WARM) : 0;
          }
        }
      }),
    );
    assert.equal((await limit()).inFlight, 0);
  } finally {
    server.postMessage("close");
    await new Promise((r) => server.once("exit", r));
  }
  console.log(`samples ${limits.join(",")}; shed ${shed}`);
  // Four times the 8 workers offered: the limit started at 8 and settled near the knee
  // (loose bounds: the machine is shared, timers are coarse).
  assert.ok(run >= SETTLED, `never ${SETTLED} samples in a row within 6-20: ${limits.join(",")}`);
  assert.ok(shed > 0, "nothing was shed");
});

test("Hono: a request beyond the limit is shed with 503, Retry-After and a problem document", async () => {
  const limiter = new AdaptiveLimiter({ minLimit: 1, initialLimit: 1 });
  let open;
  const gate = new Promise((r) => (open = r));
  const app = new Hono();
  app.use("/slow", adaptiveLimiter({ limiter }));
  app.get("/slow", async (c) => {
    await gate;
    return c.text("done");
  });
  const first = app.request("/slow");
  const shed = await app.request("/slow");
  assert.equal(shed.status, 503);
  assert.equal(shed.headers.get("retry-after"), "1");
  assert.equal((await shed.json()).limit, 1);
  assert.equal(limiter.inFlight, 1);
  open();
  const res = await first;
  assert.equal(await res.text(), "done");
  // Released when the body has been read to its end.
  assert.equal(limiter.inFlight, 0);
});
