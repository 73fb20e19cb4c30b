// tollgate/redis given a client that is not open (a real redis-server is running, so only the
// client's state can be the reason): the check rejects with `not-connected`, never a silent
// fallback for every check; once connected, the same limiter decides through Redis.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import Redis from "ioredis";
import { createClient } from "redis";
import { createClient as createClient6 } from "redis6";
import { RedisLimiter, RedisLimiterError } from "tollgate/redis";
import { Server, closeAll } from "./support.js";

let server;
const clients = [];

before(async () => {
  server = await Server.start();
});

after(async () => {
  await closeAll(clients);
  await server.stop();
});

const limiter = (client) => new RedisLimiter(client, "5/s", { namespace: "connect", fallback: "open" });

function assertNotConnected(e, kind) {
  assert.ok(e instanceof RedisLimiterError, String(e));
  assert.equal(e.code, "not-connected");
  assert.match(e.message, new RegExp(`the ${kind} client is not connected`));
  return true;
}

for (const [name, create] of [["node-redis 5", createClient], ["node-redis 6", createClient6]]) {
  test(`${name} without connect(): the check rejects with not-connected, then decides once connected`, async () => {
    const client = create({ url: server.url });
    client.on("error", () => {});
    clients.push(client);
    const l = limiter(client);
    // A key of its own per client: both tests share the server and the namespace.
    const key = `alice-${name}`;
    await assert.rejects(l.check(key), (e) => assertNotConnected(e, "node-redis"));
    assert.match((await l.check(key).catch((e) => e)).message, /await client\.connect\(\)/);
    assert.equal(l.stats().fallback, 0, "nothing was decided by the fallback");
    await client.connect();
    const d = await l.check(key);
    assert.equal(d.source, "redis");
    assert.equal(d.remaining, 4);
  });
}

test("node-redis after quit(): not-connected, not a fallback decision", async () => {
  const client = createClient({ url: server.url });
  client.on("error", () => {});
  await client.connect();
  const l = limiter(client);
  assert.equal((await l.check("bob")).source, "redis");
  await client.quit();
  await assert.rejects(l.check("bob"), (e) => assertNotConnected(e, "node-redis"));
});

test("ioredis after disconnect(): not-connected; with lazyConnect it connects on the first check", async () => {
  const closed = new Redis({ port: server.port, host: "127.0.0.1" });
  closed.on("error", () => {});
  await closed.ping();
  closed.disconnect();
  await assert.rejects(limiter(closed).check("carol"), (e) => assertNotConnected(e, "ioredis"));

  const lazy = new Redis({ port: server.port, host: "127.0.0.1", lazyConnect: true });
  lazy.on("error", () => {});
  clients.push(lazy);
  assert.equal((await limiter(lazy).check("carol")).source, "redis");
});
