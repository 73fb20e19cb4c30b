// The Express server of adaptive.test.js's convergence test, run in a worker thread so that
// the load the test's clients generate (and the 503s they read) does not share the server's
// event loop: the latency the limiter sees is the server's. Does nothing on a main thread.
import { isMainThread, parentPort, workerData } from "node:worker_threads";
import express from "express";
import { AdaptiveLimiter } from "tollgate";
import { adaptiveLimit } from "tollgate/express";

/** `n` workers, each taking `ms`: a request waits for a worker, so latency grows with concurrency beyond `n`. */
function workers(n, ms) {
  let free = n;
  const waiting = [];
  return async () => {
    if (free > 0) free--;
    else await new Promise((r) => waiting.push(r));
    await new Promise((r) => setTimeout(r, ms));
    const next = waiting.shift();
    if (next) next();
    else free++;
  };
}

if (!isMainThread) {
  const { workers: n, serviceMs, retryAfter, options } = workerData;
  const limiter = new AdaptiveLimiter(options);
  const work = workers(n, serviceMs);
  const app = express();
  app.use("/work", adaptiveLimit({ limiter, retryAfter }));
  app.get("/work", async (req, res) => {
    await work();
    res.send("done");
  });
  // Not limited: the test reads the limiter here.
  app.get("/limit", (req, res) => res.json({ limit: limiter.limit, inFlight: limiter.inFlight }));
  const server = app.listen(0, "127.0.0.1", () => parentPort.postMessage(server.address().port));
  parentPort.on("message", () => server.close(() => process.exit(0)));
}
