// tollgate/redis on a local 3-node Redis Cluster (real redis-server processes, started here on
// free loopback ports with temporary directories, stopped afterwards), with ioredis' Cluster and
// node-redis' cluster client: every request's slots share one hash tag, so its scripts run on
// one node (no CROSSSLOT), and stacks and fair shares stay all or nothing.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Redis from "ioredis";
import { createCluster } from "redis";
import { RedisLimiter, TESTING } from "tollgate/redis";
import { Cluster, closeAll } from "./support.js";

let cluster;
const clients = [];

before(async () => {
  cluster = await Cluster.start();
});

after(async () => {
  await closeAll(clients);
  await cluster.stop();
});

const CLIENTS = {
  "ioredis Cluster": async () => {
    const c = new Redis.Cluster(cluster.nodes.map((n) => ({ host: "127.0.0.1", port: n.port })));
    c.on("error", () => {});
    clients.push(c);
    return c;
  },
  "node-redis cluster": async () => {
    const c = createCluster({ rootNodes: cluster.nodes.map((n) => ({ url: n.url })) });
    c.on("error", () => {});
    await c.connect();
    clients.push(c);
    return c;
  },
};

// A fixed test clock: every check in the same instant, so the counts below are exact. A
// timeout of 5 s (as the other storms here have): 120 checks of one key retry their writes
// past the default 250 ms on a loaded machine, and then the fallback would answer.
const options = (namespace) => ({
  namespace: namespace.replace(/ /g, "-"),
  fallback: "closed",
  timeout: 5000,
  [TESTING]: { clock: () => 1_000 },
});

for (const [name, connect] of Object.entries(CLIENTS)) {
  test(`a stack is all or nothing on a cluster (${name})`, async () => {
    const limiter = new RedisLimiter(await connect(), ["fixed-window 3/s", "fixed-window 4/min"], options(`stack-${name}`));
    const got = [];
    for (let i = 0; i < 5; i++) {
      const d = await limiter.check("k");
      assert.equal(d.source, "redis", JSON.stringify(d));
      got.push(d.allowed);
    }
    assert.deepEqual(got, [true, true, true, false, false]);
    const peek = await limiter.peek("k");
    assert.equal(peek.each[1].remaining, 1, "the denied requests charged the per-minute window nothing");
  });

  test(`a fair share is all or nothing on a cluster (${name})`, async () => {
    const limiter = new RedisLimiter(
      await connect(),
      { fairShare: { shared: "fixed-window 4/min", tenant: "fixed-window 2/min" } },
      options(`fair-${name}`),
    );
    const admitted = {};
    for (const tenant of ["a", "a", "a", "b", "b", "b", "c"]) {
      const d = await limiter.check("shared", { tenant });
      assert.equal(d.source, "redis", JSON.stringify(d));
      admitted[tenant] = (admitted[tenant] ?? 0) + Number(d.allowed);
    }
    assert.deepEqual(admitted, { a: 2, b: 2, c: 0 }, "the shared bucket is spent");
    const c = await limiter.peek("shared", { tenant: "c" });
    assert.equal(c.each[1].remaining, 2, "c's denied request charged its window nothing");
  });

  test(`keys spread over the nodes, and concurrent checks of one key stay exact (${name})`, async () => {
    const limiter = new RedisLimiter(await connect(), "fixed-window 50/min", options(`spread-${name}`));
    const many = await Promise.all(Array.from({ length: 60 }, (_, i) => limiter.check(`key${i}`)));
    assert.ok(many.every((d) => d.allowed && d.source === "redis"));
    const pattern = `tollgate:{spread-${name.replace(/ /g, "-")}:key*`;
    const held = cluster.nodes.map((n) => n.cli("KEYS", pattern).split("\n").filter(Boolean).length);
    assert.equal(held.reduce((a, b) => a + b), 60);
    assert.ok(held.every((k) => k > 0), `every node holds some of the keys: ${held}`);
    const storm = await Promise.all(Array.from({ length: 120 }, () => limiter.check("hot")));
    assert.ok(storm.every((d) => d.source === "redis"));
    assert.equal(storm.filter((d) => d.allowed).length, 50);
  });
}
