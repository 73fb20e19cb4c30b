// tollgate/redis against a real redis-server (started here on a free loopback port with a
// temporary directory, stopped afterwards), with the supported clients (ioredis, node-redis 5
// and 6): the shared vectors through Redis, exactness under concurrency, the key
// layout and value bytes, expiry, script cache loss, outages and bad input.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Redis from "ioredis";
import { createClient } from "redis";
import { createClient as createClient6 } from "redis6";
import { RedisLimiter, RedisLimiterError, TESTING } from "tollgate/redis";
import { Server, FIFTY, repo, assertDecision, closeAll } from "./support.js";

let server;
const clients = [];

before(async () => {
  server = await Server.start();
});

after(async () => {
  await closeAll(clients);
  await server.stop();
});

function ioredis(s = server, options = {}) {
  const c = new Redis({ port: s.port, host: "127.0.0.1", lazyConnect: false, ...options });
  c.on("error", () => {}); // connection errors reach the limiter through its calls
  clients.push(c);
  return c;
}

async function nodeRedis(s = server, create = createClient) {
  const c = create({ url: s.url, socket: { reconnectStrategy: 50 } });
  c.on("error", () => {});
  await c.connect();
  clients.push(c);
  return c;
}

const nodeRedis6 = (s = server) => nodeRedis(s, createClient6);
const CLIENTS = { ioredis: async () => ioredis(), "node-redis 5": () => nodeRedis(), "node-redis 6": () => nodeRedis6() };

const vectors = readdirSync(join(repo, "tests/vectors"))
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => JSON.parse(readFileSync(join(repo, "tests/vectors", f), "utf8")))
  .filter((v) => v.limiter !== undefined); // policy-errors.json: parsing only

for (const [name, connect] of Object.entries(CLIENTS)) {
  test(`every shared vector through Redis gives the core's decisions (${name}, test clock)`, async () => {
    const client = await connect();
    server.cli("SCRIPT", "FLUSH"); // this client's first calls meet NOSCRIPT
    let replayed = 0;
    for (const v of vectors) {
      let now = 0;
      const limiter = new RedisLimiter(client, v.limiter, {
        namespace: `vectors-${name}-${v.name}`,
        fallback: "closed",
        timeout: 5000,
        [TESTING]: { clock: () => now },
      });
      for (const [i, step] of v.steps.entries()) {
        now = step.t ?? 0;
        const where = `${v.name} step ${i} ${JSON.stringify(step)}`;
        const run = () => {
          switch (step.op ?? "check") {
            case "check":
              return limiter.check(step.key, { cost: step.cost ?? 1, tenant: step.tenant });
            case "peek":
              return limiter.peek(step.key);
            case "release":
              return limiter.release(step.key, { cost: step.cost ?? 1 });
            case "reset":
              return limiter.reset(step.key);
            default:
              throw new Error(`unknown op ${step.op}`);
          }
        };
        const expect = step.expect;
        if (expect?.error !== undefined) {
          await assert.rejects(run(), (e) => {
            assert.ok(e instanceof RangeError, `${where}: ${e}`);
            assert.equal(e.rule, expect.error, where);
            return true;
          });
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
  });
}

/**
 * 400 checks at once on one key, spread over `limiters` that share nothing but Redis (each
 * with its own connection, merging and deny cache), on fresh keys. Admitted per round.
 */
async function storm(policy, { rounds = 1, blind = false } = {}) {
  const limiters = [];
  for (const [i, connect] of [ioredis, ioredis, nodeRedis, nodeRedis6].entries()) {
    const client = await connect();
    limiters.push(
      new RedisLimiter(client, policy, {
        namespace: "storm",
        fallback: "closed",
        timeout: 5000,
        [TESTING]: { blindCommit: blind },
      }),
    );
    void i;
  }
  const admitted = [];
  for (let r = 0; r < rounds; r++) {
    const key = `${policy}/${r}/${Math.random()}`;
    const decisions = await Promise.all(Array.from({ length: 400 }, (_, i) => limiters[i % 4].check(key)));
    for (const d of decisions) assert.ok(d.source === "redis" || d.source === "deny-cache", JSON.stringify(d));
    admitted.push(decisions.filter((d) => d.allowed).length);
  }
  return admitted;
}

test("400 concurrent checks from 4 clients (2 ioredis, node-redis 5 and 6) admit exactly 50, every algorithm", async () => {
  for (const policy of FIFTY) {
    assert.deepEqual(await storm(policy, { rounds: 2 }), [50, 50], policy);
  }
});

test("many keys at once from 4 clients: each client's commits of different keys share one call, and every key admits exactly 50", async () => {
  // On one server, a client's reads (and commits) of different keys in one event-loop turn
  // go as one script call; a commit refused because another key of the call conflicted is
  // sent again. 12 keys, 100 checks of each from each client: exactly 50 per key.
  const limiters = [];
  for (const connect of [ioredis, ioredis, nodeRedis, nodeRedis6]) {
    limiters.push(new RedisLimiter(await connect(), "fixed-window 50/min", { namespace: "merged", fallback: "closed", timeout: 5000 }));
  }
  const keys = Array.from({ length: 12 }, (_, i) => `k${i}/${Math.random()}`);
  server.cli("CONFIG", "RESETSTAT");
  const checks = [];
  for (let i = 0; i < 100; i++) for (const key of keys) for (const l of limiters) checks.push(l.check(key).then((d) => [key, d]));
  const admitted = Object.fromEntries(keys.map((k) => [k, 0]));
  for (const [key, d] of await Promise.all(checks)) {
    assert.ok(d.source === "redis" || d.source === "deny-cache", JSON.stringify(d));
    admitted[key] += Number(d.allowed);
  }
  assert.deepEqual(Object.values(admitted), keys.map(() => 50));
  const calls = Number(/cmdstat_evalsha:calls=(\d+)/.exec(server.cli("INFO", "commandstats"))?.[1]);
  const roundTrips = limiters.reduce((n, l) => n + l.stats().roundTrips, 0);
  assert.ok(calls < roundTrips / 2, `script calls ${calls} for ${roundTrips} reads and commits: merged`);
  assert.ok(limiters.some((l) => l.stats().conflicts > 0), "the clients did conflict");
});

test("control: without the version check the same storm over-admits (so the test above can fail)", async () => {
  const admitted = await storm("fixed-window 50/min", { rounds: 3, blind: true });
  assert.ok(admitted.some((n) => n > 50), `blind commits should over-admit: ${admitted}`);
});

test("the key layout and the value bytes are the Rust crate's (tollgate-redis keys.rs, State::to_bytes)", async () => {
  const c = ioredis();
  const limiter = new RedisLimiter(c, { fairShare: { shared: "gcra 10/s", tenant: "fixed-window 4/s" } }, {
    namespace: "whois:com",
    fallback: "closed",
    [TESTING]: { clock: () => 5 },
  });
  const d = await limiter.check("1.2.3.4", { tenant: "acme" });
  assert.equal(d.allowed, true);
  assert.equal(d.each.length, 2);
  const shared = await c.getBuffer("tollgate:{whois:com:1.2.3.4}:0");
  const tenant = await c.getBuffer("tollgate:{whois:com:1.2.3.4}:t:acme");
  // 8 bytes of version, then layout version 1, the algorithm's code, little-endian fields.
  assert.equal(shared.length, 8 + 2 + 16);
  assert.deepEqual([...shared.subarray(8, 10)], [1, 2], "GCRA is code 2");
  assert.equal(tenant.length, 8 + 2 + 16);
  assert.deepEqual([...tenant.subarray(8, 10)], [1, 4], "fixed window is code 4");
  assert.equal(tenant.readBigUInt64LE(18), 1n, "one request counted in the window");
  // A tenant-less request skips the tenant window: one slot.
  const plain = await limiter.check("1.2.3.4");
  assert.equal(plain.each.length, 1);
  assert.equal(await c.ttl("tollgate:{whois:com:1.2.3.4}:t:acme"), 86_400, "test clock: a day");
});

test("the generic { sendCommand } adapter works too", async () => {
  const c = ioredis();
  const limiter = new RedisLimiter({ sendCommand: (args) => c.callBuffer(args[0], args.slice(1)) }, "3/min", {
    namespace: "adapter",
    fallback: "closed",
  });
  const got = [];
  for (let i = 0; i < 4; i++) got.push((await limiter.check("k")).allowed);
  assert.deepEqual(got, [true, true, true, false]);
});

test("idle keys expire (TTL = fresh time + grace) and the database empties", async () => {
  const s = await Server.start();
  try {
    const limiter = new RedisLimiter(ioredis(s), ["gcra 5/200ms", "sliding-log 3/300ms"], {
      namespace: "ttl",
      fallback: "closed",
      grace: 50,
    });
    for (let i = 0; i < 20; i++) await limiter.check(`k${i % 5}`);
    assert.notEqual(s.cli("DBSIZE"), "0");
    const deadline = Date.now() + 10_000;
    while (s.cli("DBSIZE") !== "0") {
      assert.ok(Date.now() < deadline, `keys left: ${s.cli("KEYS", "*")}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const d = await limiter.check("k0");
    assert.equal(d.remaining, 2, "an expired key is exactly a fresh one");
  } finally {
    await s.stop();
  }
});

test("SCRIPT FLUSH mid-run: no error reaches the caller, nothing is charged twice", async () => {
  const c = ioredis();
  const admin = ioredis();
  const limiter = new RedisLimiter(c, "fixed-window 150/hour", { namespace: "flush", fallback: "closed", timeout: 5000 });
  let flushing = true;
  const flusher = (async () => {
    for (let i = 0; i < 30 && flushing; i++) {
      await admin.script("FLUSH");
      await new Promise((r) => setTimeout(r, 3));
    }
  })();
  const decisions = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      if (i % 10 === 0) await new Promise((r) => setTimeout(r, i / 2));
      return limiter.check("k");
    }),
  );
  flushing = false;
  await flusher;
  for (const d of decisions) assert.ok(d.source === "redis" || d.source === "deny-cache");
  assert.equal(decisions.filter((d) => d.allowed).length, 150);
  assert.equal((await limiter.peek("k")).remaining, 0, "exactly the admitted charges are stored");
});

test("a denial is remembered until its retry time (no round trip), then Redis decides again", async () => {
  const limiter = new RedisLimiter(ioredis(), "gcra 2/400ms", { namespace: "deny", fallback: "closed" });
  assert.equal((await limiter.check("k")).allowed, true);
  assert.equal((await limiter.check("k")).allowed, true);
  const denied = await limiter.check("k");
  assert.equal(denied.allowed, false);
  assert.equal(denied.source, "redis");
  const trips = limiter.stats().roundTrips;
  const cached = await limiter.check("k");
  assert.equal(cached.source, "deny-cache");
  assert.equal(cached.allowed, false);
  assert.ok(cached.retryAfter <= denied.retryAfter);
  assert.equal(limiter.stats().roundTrips, trips, "no round trip");
  assert.equal(limiter.stats().denyCache, 1);
  await new Promise((r) => setTimeout(r, denied.retryAfter + 5));
  const again = await limiter.check("k");
  assert.equal(again.source, "redis");
  assert.equal(again.allowed, true);
});

test("reset forgets the key's remembered denials, every tenant's, and no other key's", async () => {
  const limiter = new RedisLimiter(ioredis(), { fairShare: { shared: "gcra 100/min", tenant: "gcra 1/min" } }, { namespace: "deny-reset", fallback: "closed" });
  for (const key of ["k", "other"]) {
    for (const tenant of ["a", "b"]) {
      assert.equal((await limiter.check(key, { tenant })).allowed, true);
      assert.equal((await limiter.check(key, { tenant })).source, "redis");
      assert.equal((await limiter.check(key, { tenant })).source, "deny-cache", `${key}/${tenant} remembered`);
    }
  }
  await limiter.reset("k");
  // Reset deletes the shared window, not the tenant windows (they expire by themselves): a's
  // tenant window still denies, now asked of Redis, since the memory of "k" is gone.
  for (const tenant of ["a", "b"]) {
    const d = await limiter.check("k", { tenant });
    assert.equal(d.allowed, false);
    assert.equal(d.source, "redis", `k/${tenant} forgotten`);
  }
  for (const tenant of ["a", "b"]) assert.equal((await limiter.check("other", { tenant })).source, "deny-cache", `other/${tenant} kept`);
});

test("concurrency slots are released, and expire with their lease", async () => {
  const limiter = new RedisLimiter(ioredis(), "concurrency 2", { namespace: "conc", fallback: "closed", lease: 300 });
  assert.equal((await limiter.check("k")).allowed, true);
  assert.equal((await limiter.check("k")).allowed, true);
  assert.equal((await limiter.check("k")).allowed, false);
  await limiter.release("k");
  assert.equal((await limiter.check("k")).allowed, true);
  const deadline = Date.now() + 10_000;
  while (!(await limiter.check("k")).allowed) {
    assert.ok(Date.now() < deadline, "the lease never expired");
    await new Promise((r) => setTimeout(r, 50));
  }
});

test("bad input: typed errors naming the field, nothing charged", async () => {
  const s = await Server.start();
  try {
    const c = ioredis(s);
    const limiter = new RedisLimiter(c, "10/s", { namespace: "bad", fallback: "closed" });
    await assert.rejects(limiter.check("k", { cost: 11 }), (e) => e instanceof RangeError && e.rule === "cost-exceeds-capacity" && e.field === "cost");
    assert.equal(s.cli("DBSIZE"), "0");
    assert.equal(limiter.stats().roundTrips, 0, "refused before any round trip");
    assert.throws(() => new RedisLimiter(c, "10/fortnight", { namespace: "x", fallback: "closed" }), (e) => e.field === "window");
    assert.throws(() => new RedisLimiter(c, "10/s", { namespace: "x" }), (e) => e instanceof TypeError && e.field === "fallback" && e.rule === "missing");
    assert.throws(() => new RedisLimiter(c, "10/s", { namespace: "x", fallback: "maybe" }), (e) => e.field === "fallback");
    assert.throws(() => new RedisLimiter(c, "10/s", { namespace: "a{b", fallback: "open" }), (e) => e.field === "namespace" && e.rule === "brace");
    assert.throws(() => new RedisLimiter({}, "10/s", { namespace: "x", fallback: "open" }), (e) => e.field === "client");
    assert.throws(() => new RedisLimiter(c, "10/s", { namespace: "x", fallback: "open", timeout: 0 }), (e) => e.field === "timeout");
    assert.throws(
      () => new RedisLimiter(c, { fairShare: { shared: "2/s", tenant: "5/s" } }, { namespace: "x", fallback: "open" }),
      (e) => e instanceof RangeError && e.rule === "tenant-above-shared",
    );
    // Corrupt stored bytes: a typed error naming the key; the value is left as it was.
    const key = "tollgate:{bad:c}:0";
    s.cli("SET", key, "12345678garbage");
    await assert.rejects(limiter.check("c"), (e) => e instanceof RedisLimiterError && e.code === "corrupt-state" && e.key === key && e.message.includes(key));
    assert.equal(s.cli("GET", key), "12345678garbage");
    s.cli("SET", key, "abc");
    await assert.rejects(limiter.check("c"), (e) => e.code === "corrupt-state" && /8-byte version/.test(e.message));
    await assert.rejects(limiter.release("k"), (e) => e instanceof RangeError && e.rule === "not-concurrency");
    // A fair share: the tenant window's capacity binds only requests that use it (as in the
    // in-memory Limiter): cost 6 fits the shared 10 without a tenant, not with one.
    const fair = new RedisLimiter(c, { fairShare: { shared: "10/s", tenant: "4/s" } }, { namespace: "bad-fair", fallback: "closed" });
    const d = await fair.check("k", { cost: 6 });
    assert.equal(d.allowed, true);
    assert.equal(d.source, "redis");
    await assert.rejects(fair.check("k", { cost: 6, tenant: "a" }), (e) => e instanceof RangeError && e.rule === "cost-exceeds-capacity");
    // A wrong type at the key is Redis's error, not an outage: reported, not a fallback.
    s.cli("DEL", key);
    s.cli("LPUSH", key, "x");
    await assert.rejects(limiter.check("c"), (e) => e instanceof RedisLimiterError && e.code === "redis");
  } finally {
    await s.stop();
  }
});

test("Redis stopped: the declared fallback decides within the timeout, then Redis again", async () => {
  const s = await Server.start(["--save", "", "--appendonly", "yes", "--appendfsync", "always"]);
  try {
    // A timeout generous for a loaded machine (a slow answer would be a fallback too).
    const opts = (fallback) => ({ namespace: "outage", fallback, timeout: 1000, probeEvery: 300 });
    const local = new RedisLimiter(ioredis(s), "fixed-window 3/hour", opts("local"));
    const open = new RedisLimiter(await nodeRedis6(s), "fixed-window 3/hour", opts("open"));
    const closed = new RedisLimiter(ioredis(s), "fixed-window 3/hour", opts("closed"));
    assert.equal((await local.check("k")).source, "redis");

    await s.kill();
    const started = Date.now();
    let d = await local.check("k");
    assert.equal(d.source, "fallback");
    assert.equal(d.allowed, true);
    d = await local.check("k", { cost: 3 });
    assert.equal(d.allowed, false, "the local fallback counts for itself: 3 per process");
    assert.equal(d.source, "fallback");
    assert.ok(Date.now() - started < 5000, "within the timeout, not hanging");
    d = await open.check("k");
    assert.ok(d.allowed && d.source === "fallback", JSON.stringify(d));
    d = await closed.check("k");
    assert.ok(!d.allowed && d.source === "fallback", JSON.stringify(d));
    d = await closed.check("k");
    assert.equal(d.retryAfter, 300, "retry at the next probe");
    assert.ok(local.stats().fallback >= 2);

    await s.restart();
    const deadline = Date.now() + 15_000;
    for (;;) {
      d = await local.check("k");
      if (d.source === "redis") {
        assert.equal(d.remaining, 3 - 1 - 1, "Redis kept its count");
        break;
      }
      assert.ok(Date.now() < deadline, `never returned to Redis: ${JSON.stringify(d)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await s.stop();
  }
});

test("a commit whose answer is lost is indeterminate: the fallback decides, it is never sent again, applied at most once", async () => {
  const c = ioredis(server, { autoResendUnfulfilledCommands: false });
  const admin = ioredis();
  // The commit script's SHA1, to recognise it among the calls (the read script is the other one).
  const { createHash } = await import("node:crypto");
  const { COMMIT_SCRIPT } = await import("../pkg/redis/scripts.js");
  const commitSha = createHash("sha1").update(COMMIT_SCRIPT).digest("hex");
  assert.equal(await admin.script("LOAD", COMMIT_SCRIPT), commitSha); // no NOSCRIPT detour
  let commits = 0;
  const send = async (args) => {
    if (args[0] === "EVALSHA" && args[1] === commitSha) {
      commits++;
      // Redis stops serving clients for 400 ms, right as this commit is sent: its answer
      // comes after the limiter's 100 ms timeout.
      await admin.call("CLIENT", "PAUSE", "400", "ALL");
    }
    return c.callBuffer(args[0], args.slice(1));
  };
  const limiter = new RedisLimiter({ sendCommand: send }, "fixed-window 10/hour", {
    namespace: "indeterminate",
    fallback: "open",
    timeout: 100,
    probeEvery: 50,
  });
  const d = await limiter.check("k");
  assert.equal(d.source, "fallback");
  assert.equal(d.why, "indeterminate");
  assert.equal(limiter.stats().indeterminate, 1);
  assert.equal(commits, 1);
  await new Promise((r) => setTimeout(r, 500)); // the pause ends; Redis runs the commit it holds
  const after = await limiter.peek("k");
  assert.equal(after.source, "redis");
  assert.equal(commits, 1, "never sent again");
  assert.equal(after.remaining, 9, "applied once, by Redis, after the answer was lost");
});

test("a merged commit whose answer is lost: every request in it is indeterminate, the call is never sent again, applied once", async () => {
  const c = ioredis(server, { autoResendUnfulfilledCommands: false });
  const admin = ioredis();
  const { createHash } = await import("node:crypto");
  const { COMMIT_SCRIPT } = await import("../pkg/redis/scripts.js");
  const commitSha = createHash("sha1").update(COMMIT_SCRIPT).digest("hex");
  assert.equal(await admin.script("LOAD", COMMIT_SCRIPT), commitSha);
  let commits = 0;
  // The ioredis client itself (so its calls merge), with the commit calls watched: Redis stops
  // serving clients for 400 ms right as the commit is sent.
  const watched = new Proxy(c, {
    get(target, name) {
      if (name !== "callBuffer") return Reflect.get(target, name);
      return (command, args) => {
        if (command === "EVALSHA" && args[0] === commitSha) {
          commits++;
          return admin.call("CLIENT", "PAUSE", "400", "ALL").then(() => target.callBuffer(command, args));
        }
        return target.callBuffer(command, args);
      };
    },
  });
  const limiter = new RedisLimiter(watched, "fixed-window 10/hour", { namespace: "merged-lost", fallback: "open", timeout: 100, probeEvery: 50 });
  const both = await Promise.all([limiter.check("a"), limiter.check("b")]);
  for (const d of both) {
    assert.equal(d.source, "fallback");
    assert.equal(d.why, "indeterminate");
  }
  assert.equal(limiter.stats().indeterminate, 2);
  assert.equal(commits, 1, "one call for both");
  await new Promise((r) => setTimeout(r, 500)); // the pause ends; Redis runs the commit it holds
  for (const key of ["a", "b"]) {
    const after = await limiter.peek(key);
    assert.equal(after.source, "redis");
    assert.equal(after.remaining, 9, `${key}: applied once, by Redis, after the answer was lost`);
  }
  assert.equal(commits, 1, "never sent again");
});
