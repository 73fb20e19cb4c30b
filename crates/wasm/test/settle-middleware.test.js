// The Express and Hono middleware charging a request by its response, over real HTTP on
// 127.0.0.1 (Express's server; Hono on @hono/node-server): a login route that counts only
// failed attempts, an LLM-like route streaming tokens whose usage is settled at the end, and
// an aborted stream, settled at what it reported (or kept at its estimate).
import { test } from "node:test";
import assert from "node:assert/strict";
import express from "express";
import { Hono } from "hono";
import { serve as honoServe } from "@hono/node-server";
import { Limiter } from "tollgate";
import { rateLimit } from "tollgate/express";
import { rateLimiter } from "tollgate/hono";
import { watchSettles } from "./watch-settles.js";

/** A real limiter whose settles the test can wait for (the middleware settles after the response is sent). */
const watched = (policy) => watchSettles(new Limiter(policy));

const express_ = {
  name: "Express",
  async serve(limiterOptions, routes) {
    const app = express();
    app.use(rateLimit(limiterOptions));
    routes.express(app);
    const server = await new Promise((r) => {
      const s = app.listen(0, "127.0.0.1", () => r(s));
    });
    return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
  },
};

const hono_ = {
  name: "Hono",
  async serve(limiterOptions, routes) {
    const app = new Hono();
    app.use(rateLimiter(limiterOptions));
    routes.hono(app);
    const server = await new Promise((r) => {
      const s = honoServe({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => r(s));
    });
    return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
  },
};

const login = {
  express: (app) => app.post("/login", (req, res) => res.status(req.get("x-password") === "right" ? 200 : 401).send("")),
  hono: (app) => app.post("/login", (c) => c.body(null, c.req.header("x-password") === "right" ? 200 : 401)),
};

/** A stream of `n` token chunks ("tok "), then its usage: what the route reports. */
const TOKENS = 7;
const tick = () => new Promise((r) => setImmediate(r));

const llm = (usage) => ({
  express: (app) =>
    app.get("/chat", async (req, res) => {
      res.type("text/plain");
      for (let i = 0; i < TOKENS; i++) {
        res.write("tok ");
        await tick();
      }
      res.locals.usage = usage;
      res.end();
    }),
  hono: (app) =>
    app.get("/chat", (c) => {
      let i = 0;
      const body = new ReadableStream({
        async pull(ctrl) {
          await tick();
          if (i++ < TOKENS) return ctrl.enqueue(new TextEncoder().encode("tok "));
          c.set("usage", usage);
          ctrl.close();
        },
      });
      return c.body(body, 200, { "content-type": "text/plain" });
    }),
});

/** An endless stream of tokens; `sent.n` counts what went out, reported when the client goes away. */
const endless = (sent) => ({
  express: (app) =>
    app.get("/chat", (req, res) => {
      res.type("text/plain");
      const timer = setInterval(() => {
        res.write("tok ");
        sent.n++;
      }, 1);
      res.on("close", () => {
        clearInterval(timer);
        if (sent.report) res.locals.usage = sent.n;
      });
    }),
  hono: (app) =>
    app.get("/chat", (c) => {
      const body = new ReadableStream({
        async pull(ctrl) {
          await tick();
          ctrl.enqueue(new TextEncoder().encode("tok "));
          sent.n++;
        },
        cancel() {
          if (sent.report) c.set("usage", sent.n);
        },
      });
      return c.body(body, 200, { "content-type": "text/plain" });
    }),
});

/** The usage the route reported: Express's res.locals, Hono's context variable. */
const usage = (ctx, res) => res?.locals?.usage ?? ctx.get?.("usage");

for (const fw of [express_, hono_]) {
  test(`${fw.name}: a login route that counts only failed attempts (skipSuccessfulRequests)`, async () => {
    const limiter = watched("fixed-window 3/min");
    const { base, close } = await fw.serve({ limiter, key: () => "alice", skipSuccessfulRequests: true }, login);
    const attempt = async (password) => (await fetch(`${base}/login`, { method: "POST", headers: { "x-password": password } })).status;
    try {
      for (let i = 0; i < 5; i++) assert.equal(await attempt("right"), 200);
      await limiter.settled(5);
      assert.equal(limiter.peek("alice").remaining, 3);
      for (let i = 0; i < 3; i++) assert.equal(await attempt("wrong"), 401);
      await limiter.settled(8);
      assert.equal(limiter.peek("alice").remaining, 0);
      assert.equal(await attempt("right"), 429);
    } finally {
      await close();
    }
  });

  test(`${fw.name}: skipFailedRequests gives back the failures (requestWasSuccessful decides)`, async () => {
    const limiter = watched("fixed-window 3/min");
    const wasSuccessful = (_req, res) => (res.statusCode ?? res.status) !== 401;
    const { base, close } = await fw.serve({ limiter, key: () => "k", skipFailedRequests: true, requestWasSuccessful: wasSuccessful }, login);
    try {
      for (let i = 0; i < 4; i++) assert.equal((await fetch(`${base}/login`, { method: "POST" })).status, 401);
      await limiter.settled(4);
      assert.equal(limiter.peek("k").remaining, 3);
      assert.equal((await fetch(`${base}/login`, { method: "POST", headers: { "x-password": "right" } })).status, 200);
      await limiter.settled(5);
      assert.equal(limiter.peek("k").remaining, 2);
    } finally {
      await close();
    }
  });

  test(`${fw.name}: a streamed LLM-like response is charged its reported usage when it ends`, async () => {
    const limiter = watched("fixed-window 1000/min");
    const { base, close } = await fw.serve({ limiter, key: () => "u", cost: { estimate: () => 500, actual: usage } }, llm(120));
    try {
      const res = await fetch(`${base}/chat`);
      assert.match(res.headers.get("ratelimit"), /^"default";r=500;t=\d+$/);
      assert.equal(await res.text(), "tok ".repeat(TOKENS));
      const [s] = await limiter.settled(1);
      assert.deepEqual(s, { refunded: 380, charged: 0, unpaid: 0 });
      assert.equal(limiter.peek("u").remaining, 880);
    } finally {
      await close();
    }
  });

  for (const report of [true, false]) {
    test(`${fw.name}: an aborted stream is settled at ${report ? "what it reported" : "its estimate, having reported nothing"}`, async () => {
      const limiter = watched("fixed-window 1000/min");
      const sent = { n: 0, report };
      const { base, close } = await fw.serve({ limiter, key: () => "u", cost: { estimate: () => 500, actual: usage } }, endless(sent));
      try {
        const abort = new AbortController();
        const res = await fetch(`${base}/chat`, { signal: abort.signal });
        const reader = res.body.getReader();
        for (let got = ""; got.length < 12; ) got += new TextDecoder().decode((await reader.read()).value);
        abort.abort();
        const [s] = await limiter.settled(1);
        assert.ok(sent.n >= 3, `sent ${sent.n}`);
        const charged = report ? sent.n : 500;
        assert.equal(limiter.peek("u").remaining, 1000 - charged);
        assert.deepEqual(s, { refunded: 500 - charged, charged: 0, unpaid: 0 });
      } finally {
        await close();
      }
    });
  }
}

for (const fw of [express_, hono_]) {
  test(`${fw.name}: an actual that is not a whole number keeps the estimate and goes to onSettleError`, async () => {
    const limiter = new Limiter("fixed-window 1000/min");
    let reported;
    const failed = new Promise((r) => (reported = r));
    const options = { limiter, key: () => "u", cost: { estimate: () => 500, actual: () => 1.5 }, onSettleError: (err) => reported(err) };
    const { base, close } = await fw.serve(options, llm(0));
    try {
      assert.equal((await fetch(`${base}/chat`)).status, 200);
      const err = await failed;
      assert.ok(err instanceof TypeError && err.field === "actual" && err.rule === "not-a-number", String(err));
      assert.equal(limiter.peek("u").remaining, 500);
    } finally {
      await close();
    }
  });
}

test("settle options are checked, naming the field", () => {
  const limiter = new Limiter("10/s");
  const bad = (opts, field) => assert.throws(() => rateLimit({ limiter, ...opts }), (e) => e instanceof TypeError && e.field === field);
  bad({ skipSuccessfulRequests: "yes" }, "skipSuccessfulRequests");
  bad({ skipFailedRequests: 1 }, "skipFailedRequests");
  bad({ requestWasSuccessful: true }, "requestWasSuccessful");
  bad({ cost: { estimate: () => 1 } }, "cost.actual");
  assert.throws(() => rateLimiter({ limiter: Limiter.all(["10/s", "100/min"]), skipFailedRequests: true }), (e) => e.field === "limiter" && e.rule === "not-one-policy");
});
