// tollgate/redis on a redis-server that has tollgate's module loaded (crates/redis-module,
// built by the suite script into target/debug/): the entry detects it once (COMMAND INFO) and
// decides each round in the module, one round trip, on the same keys and bytes as the
// script path, so the two kinds of client share one limit exactly.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Redis from "ioredis";
import { createClient } from "redis";
import { RedisLimiter, WaitTimeoutError, TESTING } from "tollgate/redis";
import { Server, FIFTY, repo, assertDecision, closeAll } from "./support.js";
import { replayOnRedis, settleVectors } from "./settle-vectors.js";

const MODULE = join(process.env.CARGO_TARGET_DIR ?? join(repo, "target"), "debug/libtollgate_redis_module.so");

let server;
const clients = [];

before(async () => {
  assert.ok(existsSync(MODULE), `${MODULE} is missing: cargo build -p tollgate-redis-module`);
  // TESTCLOCK: the module accepts NOW <ms>, so the shared vectors replay at their own times.
  server = await Server.start(["--save", "", "--appendonly", "no", "--loadmodule", MODULE, "TESTCLOCK"]);
});

after(async () => {
  await closeAll(clients);
  await server.stop();
});

function ioredis(options = {}) {
  const c = new Redis({ port: server.port, host: "127.0.0.1", ...options });
  c.on("error", () => {});
  clients.push(c);
  return c;
}

async function nodeRedis() {
  const c = createClient({ url: server.url });
  c.on("error", () => {});
  await c.connect();
  clients.push(c);
  return c;
}

/** `INFO commandstats` as { command: calls }. */
function commandCalls() {
  const calls = {};
  for (const m of server.cli("INFO", "commandstats").matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) calls[m[1]] = Number(m[2]);
  return calls;
}

test("with the module loaded, each check is one round trip of TOLLGATE.CHECK (no script); useModule: false keeps the scripts", async () => {
  const c = ioredis();
  const limiter = new RedisLimiter(c, "gcra 5/s", { namespace: "rt", fallback: "closed", denyCache: false });
  await limiter.check("warm"); // the detection (COMMAND INFO) happens once, before the first round
  server.cli("CONFIG", "RESETSTAT");
  for (let i = 0; i < 8; i++) {
    const d = await limiter.check("k");
    assert.equal(d.source, "redis");
    assert.equal(d.allowed, i < 5, `check ${i}`);
  }
  const calls = commandCalls();
  assert.equal(calls["tollgate.check"], 8, JSON.stringify(calls));
  assert.equal(calls.evalsha, undefined, JSON.stringify(calls));
  assert.equal(calls.eval, undefined, JSON.stringify(calls));
  assert.equal(calls.command, undefined, "detected once, before: " + JSON.stringify(calls));
  assert.equal(limiter.stats().roundTrips, 9);

  const scripts = new RedisLimiter(c, "gcra 5/s", { namespace: "rt", fallback: "closed", useModule: false });
  server.cli("CONFIG", "RESETSTAT");
  const d = await scripts.check("k");
  assert.equal(d.allowed, false, "the script path sees the module's writes");
  assert.equal(commandCalls()["tollgate.check"], undefined);
  assert.ok(commandCalls().evalsha >= 1);
});

test("module and script clients share one limit exactly: 400 concurrent checks against 50 admit 50, every algorithm", async () => {
  const limiters = [];
  for (const [i, connect] of [ioredis, nodeRedis, ioredis, nodeRedis].entries()) {
    limiters.push({ connect, useModule: i < 2 });
  }
  for (const policy of FIFTY) {
    const built = [];
    for (const { connect, useModule } of limiters) {
      built.push(new RedisLimiter(await connect(), policy, { namespace: "mixed", fallback: "closed", timeout: 5000, useModule }));
    }
    for (let round = 0; round < 2; round++) {
      const key = `${policy}/${round}/${Math.random()}`;
      const decisions = await Promise.all(Array.from({ length: 400 }, (_, i) => built[i % 4].check(key)));
      for (const d of decisions) assert.ok(d.source === "redis" || d.source === "deny-cache", JSON.stringify(d));
      assert.equal(decisions.filter((d) => d.allowed).length, 50, `${policy} round ${round}`);
    }
    const stats = built.map((l) => l.stats());
    assert.equal(stats[0].conflicts + stats[1].conflicts, 0, "the module never conflicts");
  }
});

const vectors = readdirSync(join(repo, "tests/vectors"))
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => JSON.parse(readFileSync(join(repo, "tests/vectors", f), "utf8")))
  .filter((v) => v.limiter !== undefined);

test("every shared vector through the module gives the core's decisions (test clock: NOW)", async () => {
  const client = ioredis();
  server.cli("CONFIG", "RESETSTAT");
  let replayed = 0;
  for (const v of vectors) {
    let now = 0;
    const limiter = new RedisLimiter(client, v.limiter, {
      namespace: `module-vectors-${v.name}`,
      fallback: "closed",
      timeout: 5000,
      [TESTING]: { clock: () => now },
    });
    for (const [i, step] of v.steps.entries()) {
      now = step.t ?? 0;
      const where = `${v.name} step ${i} ${JSON.stringify(step)}`;
      const op = step.op ?? "check";
      const run = () =>
        op === "check"
          ? limiter.check(step.key, { cost: step.cost ?? 1, tenant: step.tenant })
          : op === "peek"
            ? limiter.peek(step.key)
            : op === "release"
              ? limiter.release(step.key, { cost: step.cost ?? 1 })
              : limiter.reset(step.key);
      const expect = step.expect;
      if (expect?.error !== undefined) {
        await assert.rejects(run(), (e) => e instanceof RangeError && e.rule === expect.error, where);
      } else {
        const got = await run();
        if (expect !== undefined) {
          assert.equal(got.source, "redis", where);
          assertDecision(got, expect, where);
        }
      }
      replayed++;
    }
  }
  assert.ok(replayed > 500, `only ${replayed} steps replayed`);
  const calls = commandCalls();
  assert.ok(calls["tollgate.check"] > 400, JSON.stringify(calls));
  assert.equal(calls.evalsha, undefined, "decided in the module, not by the scripts");
});

test("the module's refusals are the core's errors: a release without a concurrency limit", async () => {
  const limiter = new RedisLimiter(ioredis(), "10/s", { namespace: "module-errors", fallback: "closed" });
  await limiter.check("k");
  await assert.rejects(limiter.release("k"), (e) => e instanceof RangeError && e.rule === "not-concurrency" && e.field === "policy");
  const slots = new RedisLimiter(ioredis(), "concurrency 2", { namespace: "module-errors", fallback: "closed" });
  assert.equal((await slots.check("c")).remaining, 1);
  await slots.release("c");
  assert.equal((await slots.peek("c")).remaining, 2);
});

test("acquire through the module: waits to the retry time, and a queue delay that does not fit is not kept (MAXDELAY)", async () => {
  const c = ioredis();
  const limiter = new RedisLimiter(c, "gcra 10/s burst 1", { namespace: "module-acquire", fallback: "closed" });
  const key = `k${Math.random()}`;
  const t0 = performance.now(); // before the check: its admission starts the 100 ms
  assert.equal((await limiter.check(key)).allowed, true);
  const d = await limiter.acquire(key, { maxWait: 1000 });
  assert.equal(d.allowed, true);
  assert.ok(performance.now() - t0 >= 99, "waited for the retry time");

  const queue = new RedisLimiter(c, "leaky-queue 10/s burst 5", { namespace: "module-acquire", fallback: "closed" });
  const q = `q${Math.random()}`;
  const first = await queue.check(q);
  const before = await queue.peek(q);
  await assert.rejects(queue.acquire(q, { maxWait: first.delay + 50 }), (e) => e instanceof WaitTimeoutError && e.retryAfter > first.delay + 50);
  // Uncharged: the queue holds what it held.
  const after = await queue.peek(q);
  assert.equal(after.remaining, before.remaining, JSON.stringify([before, after]));
  // A wait that fits is admitted, after its place's delay.
  const t1 = performance.now();
  const ok = await queue.acquire(q, { maxWait: 1000 });
  assert.ok(ok.allowed && ok.delay > first.delay, JSON.stringify(ok));
  assert.ok(performance.now() - t1 >= ok.delay - 2);
});

test("a module round whose answer is lost is indeterminate: the fallback decides, it is never sent again, applied once", async () => {
  const c = ioredis({ autoResendUnfulfilledCommands: false });
  const admin = ioredis();
  let checks = 0;
  const send = async (args) => {
    if (args[0] === "TOLLGATE.CHECK") {
      checks++;
      // Redis stops serving clients for 400 ms as the check is sent: its answer comes after
      // the limiter's 100 ms timeout.
      await admin.call("CLIENT", "PAUSE", "400", "ALL");
    }
    return c.callBuffer(args[0], args.slice(1));
  };
  const limiter = new RedisLimiter({ sendCommand: send }, "fixed-window 10/hour", {
    namespace: "module-indeterminate",
    fallback: "open",
    timeout: 100,
    probeEvery: 50,
  });
  await limiter.peek("warm"); // detects the module
  const d = await limiter.check("k");
  assert.equal(d.source, "fallback");
  assert.equal(d.why, "indeterminate");
  assert.equal(limiter.stats().indeterminate, 1);
  await new Promise((r) => setTimeout(r, 500)); // the pause ends; Redis runs the check it holds
  const after = await limiter.peek("k");
  assert.equal(after.source, "redis");
  assert.equal(checks, 1, "never sent again");
  assert.equal(after.remaining, 9, "applied once, by Redis, after the answer was lost");
});

test("the module's denials are remembered by the core's deny cache: each limit's answer, counted down, no round trip until the retry time", async () => {
  const limiter = new RedisLimiter(ioredis(), ["gcra 2/400ms", "fixed-window 100/min"], { namespace: "mdeny", fallback: "closed" });
  await limiter.check("k");
  await limiter.check("k");
  const denied = await limiter.check("k");
  assert.equal(denied.source, "redis");
  assert.equal(denied.allowed, false);
  assert.equal(denied.each.length, 2);
  server.cli("CONFIG", "RESETSTAT");
  await new Promise((r) => setTimeout(r, 50));
  const cached = await limiter.check("k");
  assert.equal(cached.source, "deny-cache");
  assert.equal(cached.allowed, false);
  assert.deepEqual(cached.each.map((e) => e.limit), [2, 100]);
  assert.deepEqual(cached.each.map((e) => e.remaining), denied.each.map((e) => e.remaining));
  // At least 50 ms passed (a timer never fires early by a whole ms): the waits counted down.
  assert.ok(cached.retryAfter > 0 && cached.retryAfter <= denied.retryAfter - 49, `${cached.retryAfter} counted down from ${denied.retryAfter}`);
  assert.equal(cached.each[1].resetAfter <= denied.each[1].resetAfter, true);
  // A cheaper request than the one denied may fit: asked of Redis, not of the memory.
  assert.equal((await limiter.check("k", { cost: 0 })).source, "redis");
  assert.equal(commandCalls()["tollgate.check"], 1, "only the cost-0 check went to Redis");
  await new Promise((r) => setTimeout(r, cached.retryAfter + 5));
  const again = await limiter.check("k");
  assert.equal(again.source, "redis");
  assert.equal(again.allowed, true);
});

test("a module reply is read by the core's rule in wasm: the real replies as they are, a stack's each limit, anything else not a decision", async () => {
  const { ModuleReplies, fleetLimits } = await import("../pkg/redis/fleet.js");
  const policies = ["gcra 2/400ms", "fixed-window 100/min", "sliding-window 5/s"];
  const replies = new ModuleReplies(fleetLimits(policies, undefined));
  const c = ioredis();
  const send = (...limits) => c.callBuffer("TOLLGATE.CHECK", [`mreply-${Math.random()}`, ...limits]);
  // Real replies (integers, durations in whole ms): the answer is the status, then the same
  // numbers (ms -> the core's ns -> ms is exact), the combined decision first.
  const flat = (r) => [r[0], ...r.slice(0, 6), ...r[6].flat()];
  const stack = await send("STACK", "3", ...policies);
  assert.equal(stack[6].length, 3);
  assert.deepEqual(replies.answer(stack), flat(stack));
  const single = await send("10/s");
  assert.deepEqual(replies.answer(single), flat(single)); // after a larger reply: the room is reused
  const key = `mreply-deny-${Math.random()}`;
  let denied;
  for (let i = 0; i < 3; i++) denied = await c.callBuffer("TOLLGATE.CHECK", [key, "STACK", "3", ...policies]);
  assert.equal(denied[0], 0);
  assert.ok(denied[4] > 0, "a retry time");
  assert.deepEqual(replies.answer(denied), flat(denied));
  // Fields as bulk strings (a client that answers integers as Buffers or strings) read the same.
  const asText = (r) => [...r.slice(0, 6).map(String), r[6].map((e) => e.map((x) => Buffer.from(String(x))))];
  assert.deepEqual(replies.answer(asText(denied)), flat(denied));
  // Not decisions: the core's rule (whole numbers 0..2^53-1, allowed 0 or 1) and the shape.
  const ok = [1, 10, 9, 382, 0, 0];
  const withField = (i, v) => [...ok, [ok.map((x, j) => (j === i ? v : x))]];
  const notDecisions = {
    "non-integer": withField(2, 9.5),
    negative: withField(2, -1),
    "above 2^53": withField(3, 2 ** 53 + 2),
    "above 2^53, as text": withField(3, Buffer.from("123456789012345678901")),
    "not a number": withField(1, "ten"),
    "empty bulk string": withField(1, Buffer.alloc(0)),
    infinite: withField(4, Infinity),
    "allowed 2 in a limit": withField(0, 2),
    "allowed 2 in the combined decision": [2, 10, 9, 382, 0, 0, [ok]],
    "no limits": [...ok, []],
    "no array of limits": [...ok],
    "a limit of five fields": [...ok, [[1, 10, 9, 382, 0]]],
    "a limit not an array": [...ok, ["OK"]],
    "five fields, then the limits": [1, 10, 9, 382, 0, [ok]],
    "not an array": "OK",
    null: null,
  };
  for (const [what, reply] of Object.entries(notDecisions)) assert.equal(replies.answer(reply), undefined, what);
  assert.deepEqual(replies.answer(stack), flat(stack), "read after replies that were not decisions");
});

for (const [name, connect] of [
  ["ioredis", ioredis],
  ["node-redis", nodeRedis],
]) {
  test(`the settle vectors replay through the module with the core's answers (${name}, test clock: NOW)`, async () => {
    const client = await connect();
    let steps = 0;
    for (const v of settleVectors()) {
      const r = await replayOnRedis(client, v, `module-settle-${name}`);
      assert.deepEqual(r.failures, [], v.name);
      steps += r.steps;
    }
    assert.ok(steps > 100, `only ${steps} steps`);
  });
}

test("with the module, a reserve is one TOLLGATE.CHECK ... WITHTIME and a settle one TOLLGATE.SETTLE; a script client settles it again, once", async () => {
  const c = ioredis();
  const limiter = new RedisLimiter(c, "sliding-window 1000/1d", { namespace: "module-settle", fallback: "closed", denyCache: false });
  await limiter.check("warm"); // the detection (COMMAND INFO), before
  server.cli("CONFIG", "RESETSTAT");
  const before = limiter.stats().roundTrips;
  const d = await limiter.reserve("k", 800);
  assert.equal(d.remaining, 200);
  // The instant is Redis's clock in whole microseconds: exact, though ioredis rounds
  // integers above 2^53.
  assert.equal(BigInt(d.reservation.at) % 1000n, 0n);
  const nowNs = BigInt(Date.now()) * 1_000_000n;
  assert.ok(BigInt(d.reservation.at) <= nowNs + 1_000_000_000n && BigInt(d.reservation.at) > nowNs - 60_000_000_000n);
  const done = await limiter.settle(d.reservation, 300);
  assert.deepEqual(done, { refunded: 500, charged: 0, unpaid: 0 });
  assert.equal(limiter.stats().roundTrips - before, 2, "1 + 1 round trips");
  const calls = commandCalls();
  assert.equal(calls["tollgate.check"], 1, JSON.stringify(calls));
  assert.equal(calls["tollgate.settle"], 1, JSON.stringify(calls));
  assert.equal(calls.evalsha, undefined, JSON.stringify(calls));
  // The same record for the scripts: a client without the module answers the first settle.
  const scripts = new RedisLimiter(await nodeRedis(), "sliding-window 1000/1d", { namespace: "module-settle", fallback: "closed", useModule: false });
  assert.deepEqual(await scripts.settle(JSON.parse(JSON.stringify(d.reservation)), 100), done);
  assert.equal((await scripts.peek("k")).remaining, 700, "800 reserved, 300 settled: charged 300, once");
});

test("the module's settle refusals are the core's errors: a concurrency limit cannot be settled", async () => {
  const limiter = new RedisLimiter(ioredis(), "concurrency 5", { namespace: "module-settle-conc", fallback: "closed" });
  const d = await limiter.reserve("k", 2);
  await assert.rejects(limiter.settle(d.reservation, 1), { name: "RangeError", field: "policy", rule: "not-settleable" });
});
