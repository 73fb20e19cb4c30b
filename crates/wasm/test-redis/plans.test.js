// tollgate/redis' RedisPlans against real redis-servers: one without tollgate's module (the
// scripts: read.lua, the core decides in wasm, commit.lua) and one with it loaded with
// TESTCLOCK (TOLLGATE.PLAN), each with ioredis and node-redis: the shared plan vectors
// (tests/vectors/plans/, which the Rust client replays too), spend kept across plan switches,
// and an override set by one client applying at another's next check.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Redis from "ioredis";
import { createClient } from "redis";
import { RedisPlans, TESTING } from "tollgate/redis";
import { Server, repo, closeAll, lineClient } from "./support.js";

const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
const MODULE = join(target, "debug/libtollgate_redis_module.so");
/** The Rust client's RedisPlans as a line client (crates/redis/examples/planner.rs). */
const PLANNER = join(target, "debug/examples/planner");
const dir = fileURLToPath(new URL("../../../tests/vectors/plans", import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();

const servers = {};
const clients = [];

before(async () => {
  assert.ok(existsSync(MODULE), `${MODULE} is missing: cargo build -p tollgate-redis-module`);
  assert.ok(existsSync(PLANNER), `${PLANNER} is missing: cargo build -p tollgate-redis --example planner`);
  servers.scripts = await Server.start();
  servers.module = await Server.start(["--save", "", "--appendonly", "no", "--loadmodule", MODULE, "TESTCLOCK"]);
});

after(async () => {
  await closeAll(clients);
  for (const s of Object.values(servers)) await s.stop();
});

/** A connected client of `kind` for the server of `way`. */
async function client(way, kind) {
  const server = servers[way];
  if (kind === "ioredis") {
    const c = new Redis({ port: server.port, host: "127.0.0.1" });
    c.on("error", () => {});
    clients.push(c);
    return c;
  }
  const c = createClient({ url: server.url });
  c.on("error", () => {});
  await c.connect();
  clients.push(c);
  return c;
}

/** A test clock (ms) that `at(ms)` moves. */
function testClock() {
  let now = 0;
  return { clock: () => now, at: (ms) => (now = ms) };
}

/** A RedisPlans over `plans` in `namespace` on a client of `kind` for `way`'s server, deciding at `clock`. */
async function plansOn(way, kind, namespace, plans, clock) {
  return new RedisPlans(await client(way, kind), {
    plans,
    namespace,
    fallback: "closed",
    timeout: 10_000,
    [TESTING]: { clock: clock.clock },
  });
}

/** A vector's decision form: the six numbers, and `each` for a stack. */
function asVector(d) {
  const pick = ({ allowed, limit, remaining, resetAfter, retryAfter, delay }) => ({ allowed, limit, remaining, resetAfter, retryAfter, delay });
  const out = pick(d);
  if (d.each.length > 1) out.each = d.each.map(pick);
  return out;
}

/** What one vector step answers (an error as `{ error: rule }`). */
async function run(limiter, step, way) {
  try {
    switch (step.op) {
      case "check": {
        const d = await limiter.check(step.key, step.plan, { cost: step.cost ?? 1 });
        assert.equal(d.source, "redis", `${way}: decided in Redis`);
        return asVector(d);
      }
      case "set":
        await limiter.set(step.key, step.override);
        return null;
      case "get":
        return (await limiter.get(step.key)) ?? null;
      case "clear":
        return await limiter.clear(step.key);
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  } catch (e) {
    if (e.rule === undefined) throw e;
    return { error: e.rule };
  }
}

const WAYS = [
  ["scripts", "ioredis"],
  ["module", "node-redis"],
];

for (const [way, kind] of WAYS) {
  test(`the plan vectors replay through RedisPlans (${way}, ${kind})`, async () => {
    assert.ok(files.length >= 5, `only ${files.length} plan vector files in ${dir}`);
    for (const file of files) {
      const v = JSON.parse(readFileSync(join(dir, file), "utf8"));
      const plans = Object.fromEntries(v.plans.map((p) => [p.name, p.policies]));
      const clock = testClock();
      const limiter = await plansOn(way, kind, `vectors-${v.name}`, plans, clock);
      for (const [i, step] of v.steps.entries()) {
        if (step.t !== undefined) clock.at(step.t);
        assert.deepEqual(await run(limiter, step, way), step.expect, `${file} step ${i + 1} (${way})`);
      }
    }
    // Each way decided as it says: one TOLLGATE.PLAN a check, or the two scripts.
    const calls = servers[way].cli("INFO", "commandstats");
    assert.equal(/cmdstat_tollgate\.plan:/.test(calls), way === "module", calls);
    assert.equal(/cmdstat_evalsha:/.test(calls), way === "scripts", calls);
  });

  test(`a cost above the limits' capacity is the core's error, nothing charged (${way})`, async () => {
    const clock = testClock();
    const limiter = await plansOn(way, kind, "cost", { free: "100/min", pro: "1000/min" }, clock);
    await assert.rejects(limiter.check("k", "free", { cost: 101 }), { name: "RangeError", rule: "cost-exceeds-capacity" });
    // Under pro's override the same cost fits.
    await limiter.set("k", { plan: "pro" });
    assert.equal((await limiter.check("k", "free", { cost: 101 })).remaining, 899);
  });

  test(`free -> pro -> free within a window keeps the spend (${way})`, async () => {
    const clock = testClock();
    const limiter = await plansOn(way, kind, "switch", { free: "100/min", pro: "1000/min" }, clock);
    const untilDenied = async (plan) => {
      let n = 0;
      for (;;) {
        const d = await limiter.check("k", plan, { cost: 1 });
        assert.equal(d.plan, plan);
        if (!d.allowed) return n;
        n++;
        assert.ok(n <= 2_000, "never denied");
      }
    };
    const seen = [];
    for (const [t, plan] of [[0, "free"], [0, "pro"], [0, "free"], [30_000, "free"], [30_000, "pro"]]) {
      clock.at(t);
      seen.push(await untilDenied(plan));
    }
    // Free's 100; pro's 1,000 less the 100 spent; back on free with 1,000 spent, 900 owed at
    // free's 100/min: nothing, still nothing at 30 s; pro at 30 s: the debt was repaid at
    // free's rate (the carry is written at a denial too), 50 of the 1,000 in 30 s.
    assert.deepEqual(seen, [100, 900, 0, 0, 50]);
    assert.ok(seen.reduce((a, b) => a + b) <= 1_000 + 500, "never more than pro's 1,000/min allows over 30 s");
  });

  test(`an override set by one client applies at another client's next check and is gone when cleared (${way})`, async () => {
    const clock = testClock();
    const plans = { free: "100/min", pro: "1000/min" };
    const a = await plansOn(way, kind, "overrides", plans, clock);
    // The other process is on the other client library.
    const b = await plansOn(way, kind === "ioredis" ? "node-redis" : "ioredis", "overrides", plans, clock);
    const first = await a.check("alice", "free", { cost: 10 });
    assert.deepEqual([first.limit, first.remaining, first.plan, first.overridden], [100, 90, "free", false]);
    await b.set("alice", { plan: "pro" });
    assert.deepEqual(await a.get("alice"), { plan: "pro" });
    const raised = await a.check("alice", "free");
    // Pro, with the 10 spent on free kept.
    assert.deepEqual([raised.limit, raised.remaining, raised.plan, raised.overridden], [1000, 989, "pro", true]);
    await b.set("alice", { limits: ["5/s"] });
    const own = await a.check("alice", "free");
    assert.deepEqual([own.limit, own.allowed, own.plan, own.overridden], [5, false, null, true]);
    assert.equal(await b.clear("alice"), true);
    assert.equal(await b.clear("alice"), false);
    assert.equal(await a.get("alice"), undefined);
    const back = await a.check("alice", "free");
    assert.deepEqual([back.limit, back.plan, back.overridden], [100, "free", false]);
  });
}

for (const [way, kind] of WAYS) {
  test(`a Node client and the Rust client share one caller's count and override (${way})`, async () => {
    const clock = testClock();
    const node = await plansOn(way, kind, "mixed", { free: "100/min", pro: "1000/min" }, clock);
    const rust = await lineClient(PLANNER, [servers[way].url, "mixed", "0", String(way === "module"), "free=100/min", "pro=1000/min"]);
    try {
      const n = async (plan, cost) => {
        const d = await node.check("alice", plan, { cost });
        return { allowed: d.allowed, limit: d.limit, remaining: d.remaining, overridden: d.overridden };
      };
      const r = (line) => rust.run(line);
      assert.deepEqual(await n("free", 30), { allowed: true, limit: 100, remaining: 70, overridden: false });
      assert.deepEqual(await r("check\talice\tfree\t20"), { allowed: true, limit: 100, remaining: 50, overridden: false });
      assert.deepEqual(await n("free", 1), { allowed: true, limit: 100, remaining: 49, overridden: false });
      // Node's override, at Rust's next check: pro, with the 51 spent kept.
      await node.set("alice", { plan: "pro" });
      assert.deepEqual(await r("check\talice\tfree\t1"), { allowed: true, limit: 1000, remaining: 948, overridden: true });
      // Rust's override, read and applied by Node; Rust clears it, and Node is back on free.
      assert.deepEqual(await r("set\talice\tpro"), {});
      assert.deepEqual(await node.get("alice"), { plan: "pro" });
      assert.deepEqual(await r("clear\talice"), { had: true });
      assert.deepEqual(await n("free", 1), { allowed: true, limit: 100, remaining: 47, overridden: false });
    } finally {
      await rust.stop();
    }
  });
}

test("two clients' concurrent checks of one caller admit exactly its plan's limit (scripts: the compare-and-set)", async () => {
  const clock = testClock();
  const plans = { free: "100/min", pro: "1000/min" };
  const a = await plansOn("scripts", "ioredis", "storm", plans, clock);
  const b = await plansOn("scripts", "node-redis", "storm", plans, clock);
  const all = await Promise.all(Array.from({ length: 300 }, (_, i) => (i % 2 ? a : b).check("k", "free")));
  assert.equal(all.filter((d) => d.allowed).length, 100);
});

test("RedisPlans refuses bad plans, keys and overrides by name, before any round trip", async () => {
  const c = await client("scripts", "ioredis");
  const options = { namespace: "bad", fallback: "open" };
  assert.throws(() => new RedisPlans(c, { ...options, plans: { free: "100/mni" } }), { field: "plans.free" });
  assert.throws(() => new RedisPlans(c, { ...options, plans: { c: "concurrency 5" } }), { rule: "concurrency" });
  assert.throws(() => new RedisPlans(c, { ...options, plans: { free: "1/s" }, default: "gold" }), { rule: "unknown-plan" });
  const limiter = new RedisPlans(c, { ...options, plans: { free: "1/s" } });
  await assert.rejects(limiter.check("k", "gold"), { field: "plan", rule: "unknown-plan" });
  await assert.rejects(limiter.check(7, "free"), { field: "key", rule: "not-a-string" });
  await assert.rejects(limiter.set("k", { plan: "gold" }), { rule: "unknown-plan" });
  await assert.rejects(limiter.set("k", { limits: ["5/s", "1/min"] }), { rule: "too-many-layers" });
  await assert.rejects(limiter.set("k", {}), { rule: "not-an-override" });
  assert.deepEqual(limiter.stats().roundTrips, 0);
});

test("when Redis is unreachable, RedisPlans' declared fallback decides under the plan named", async () => {
  const port = servers.scripts.port;
  const dead = new Redis({ port: port + 1 === servers.module.port ? port + 2 : port + 1, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false });
  dead.on("error", () => {});
  clients.push(dead);
  const local = new RedisPlans(dead, { plans: { free: "2/min", pro: "5/min" }, namespace: "down", fallback: "local", timeout: 200 });
  const seen = [];
  for (let i = 0; i < 3; i++) seen.push((await local.check("k", "free")).allowed);
  assert.deepEqual(seen, [true, true, false], "this process's own plan limiter, free's 2");
  const d = await local.check("k", "pro");
  assert.deepEqual([d.source, d.plan, d.limit], ["fallback", "pro", 5]);
  const closed = new RedisPlans(dead, { plans: { free: "2/min" }, namespace: "down", fallback: "closed", timeout: 200 });
  assert.equal((await closed.check("k")).allowed, false);
});
