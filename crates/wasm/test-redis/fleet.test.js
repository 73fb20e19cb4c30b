// The cross-runtime test: 4 client processes, 2 Node (tollgate/redis, one on ioredis, one
// on node-redis) and 2 Rust (tollgate-redis, crates/redis/examples/storm.rs), share one
// key on one real redis-server: 400 checks at once against a limit of 50 admit exactly 50,
// 5 rounds, every algorithm. The Rust example must be built first:
//   cargo build -p tollgate-redis --example storm   (scripts/test.d/36-redis-npm.sh does)
// The processes start once and storm on command (a line on stdin), so the four start together.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Server, FIFTY, repo, lineClient as client } from "./support.js";

const targetDir = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
const rustStorm = join(targetDir, "debug/examples/storm");
const nodeStorm = fileURLToPath(new URL("storm.js", import.meta.url));

let server;
before(async () => {
  assert.ok(existsSync(rustStorm), `${rustStorm} is missing: cargo build -p tollgate-redis --example storm`);
  server = await Server.start();
  const serve = ["serve", server.url, "fleet"];
  clients = await Promise.all([
    client(process.execPath, [nodeStorm, ...serve, "--client", "ioredis"]),
    client(process.execPath, [nodeStorm, ...serve, "--client", "node-redis"]),
    client(rustStorm, serve),
    client(rustStorm, serve),
  ]);
});
after(async () => {
  await Promise.all(clients.map((c) => c.stop()));
  await server?.stop();
});

let clients = [];

async function round(policy, key) {
  // Every process is connected and idle: the four storms start together.
  return Promise.all(clients.map((c) => c.run(`${policy}\t${key}\t100`)));
}

test("2 Node and 2 Rust processes, 400 checks at once against 50: exactly 50, 5 rounds, every algorithm", async () => {
  const byRuntime = { node: 0, rust: 0 };
  for (const policy of FIFTY) {
    const admitted = [];
    for (let r = 0; r < 5; r++) {
      const results = await round(policy, `cross/${r}/${Math.random()}`);
      for (const x of results) {
        assert.equal(x.errors, 0, `${policy}: ${JSON.stringify(results)}`);
        assert.equal(x.notRedis, 0, `${policy}: ${JSON.stringify(results)}`);
      }
      admitted.push(results.reduce((n, x) => n + x.admitted, 0));
      byRuntime.node += results[0].admitted + results[1].admitted;
      byRuntime.rust += results[2].admitted + results[3].admitted;
    }
    assert.deepEqual(admitted, [50, 50, 50, 50, 50], policy);
  }
  // Both runtimes won charges on the shared keys (they really raced each other).
  assert.ok(byRuntime.node > 0 && byRuntime.rust > 0, JSON.stringify(byRuntime));
  console.log(`# admitted by runtime over all rounds: ${JSON.stringify(byRuntime)}`);
});
