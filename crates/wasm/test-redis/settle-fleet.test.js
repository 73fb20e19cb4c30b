// Reserve-then-settle across runtimes on one real redis-server: 2 Node processes
// (tollgate/redis, one on ioredis, one on node-redis; settler.js) and 2 Rust processes
// (tollgate-redis; crates/redis/examples/settler.rs) share a budget of 10,000 tokens a
// minute. A reservation made in one runtime is settled in the other, and settled again by a
// third process, charging once; 200 concurrent streams (50 a process) reserve 100-1,000 and
// settle random actual costs up to their estimates, every fifth settle sent twice, while a
// fifth process killed with SIGKILL holds reservations open; at rest the charged count is
// the sum of the admitted streams' actual costs and the killed reservations' estimates,
// exactly. On the scripts, and with tollgate's module loaded (the Node processes then settle
// with TOLLGATE.SETTLE, the Rust ones, at their test clock, with the scripts).
//
// Every process decides at a test clock held inside one minute's window, so that the window
// cannot roll over mid-test and every token charged stays in the one count read back (the
// accounting is what is tested; the clock is Redis's in production). The Rust example must
// be built first: cargo build -p tollgate-redis --example settler (36-redis-npm.sh does).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Server, repo, lineClient } from "./support.js";

const target = process.env.CARGO_TARGET_DIR ?? join(repo, "target");
const RUST = join(target, "debug/examples/settler");
const MODULE = join(target, "debug/libtollgate_redis_module.so");
const NODE = fileURLToPath(new URL("settler.js", import.meta.url));
const BUDGET = 10_000;
const POLICY = `fixed-window ${BUDGET}/min`;
/** The held clock, ms: inside the minute [960 s, 1020 s). */
const CLOCK = "1000000";
const STREAMS_EACH = 50;

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

/** The four processes on `server`: Node on ioredis, Node on node-redis, two Rust. */
async function fleet(server, namespace) {
  const args = [server.url, namespace, POLICY, CLOCK];
  return Promise.all([
    lineClient(process.execPath, [NODE, ...args, "--client", "ioredis"]),
    lineClient(process.execPath, [NODE, ...args, "--client", "node-redis"]),
    lineClient(RUST, args),
    lineClient(RUST, args),
  ]);
}

async function stopAll(processes) {
  await Promise.all(processes.map((p) => p.stop()));
}

/** What `p` sees left on `key` (a reserve of 0 charges nothing). */
async function remaining(p, key) {
  const d = await p.run(`reserve\t${key}\t0`);
  assert.equal(d.allowed, true, JSON.stringify(d));
  return d.remaining;
}

for (const withModule of [false, true]) {
  const where = withModule ? "with the module loaded" : "on the scripts";

  test(`a reservation made in Node is settled in Rust and the other way round, and settled again by a third process charges once (${where})`, async () => {
    assert.ok(existsSync(RUST), `${RUST} is missing: cargo build -p tollgate-redis --example settler`);
    const extra = withModule ? ["--loadmodule", MODULE, "TESTCLOCK"] : [];
    const server = await Server.start(["--save", "", "--appendonly", "no", ...extra]);
    servers.push(server);
    const processes = await fleet(server, "cross");
    const [node, node2, rust] = processes;
    try {
      const fromNode = await node.run("reserve\tk\t800");
      assert.equal(fromNode.remaining, BUDGET - 800);
      const byRust = await rust.run(`settle\t${JSON.stringify(fromNode.reservation)}\t300`);
      assert.deepEqual(byRust, { refunded: 500, charged: 0, unpaid: 0 });
      assert.deepEqual(await node2.run(`settle\t${JSON.stringify(fromNode.reservation)}\t100`), byRust, "Rust's record answers");

      const fromRust = await rust.run("reserve\tk\t600");
      assert.equal(fromRust.remaining, BUDGET - 300 - 600);
      const byNode = await node2.run(`settle\t${JSON.stringify(fromRust.reservation)}\t700`);
      assert.deepEqual(byNode, { refunded: 0, charged: 100, unpaid: 0 });
      assert.deepEqual(await rust.run(`settle\t${JSON.stringify(fromRust.reservation)}\t0`), byNode, "Node's record answers");
      assert.deepEqual(await node.run(`settle\t${JSON.stringify(fromRust.reservation)}\t0`), byNode);

      for (const p of processes) assert.equal(await remaining(p, "k"), BUDGET - 300 - 700, "300 and 700 charged, once each");
    } finally {
      await stopAll(processes);
    }
  });

  test(`2 Node and 2 Rust processes, 200 concurrent streams on one budget, a fifth killed with reservations open: at rest the count is the admitted actual costs and the killed reservations' estimates, exactly (${where})`, async () => {
    const extra = withModule ? ["--loadmodule", MODULE, "TESTCLOCK"] : [];
    const server = await Server.start(["--save", "", "--appendonly", "no", ...extra]);
    servers.push(server);
    const processes = await fleet(server, "streams");
    try {
      // A fifth process reserves and is killed (SIGKILL) with its reservations open: they
      // stay charged at their estimates, and nothing else is lost.
      const doomed = await lineClient(process.execPath, [NODE, server.url, "streams", POLICY, CLOCK]);
      const { reserved } = await doomed.run("hold\tbudget\t300\t4");
      assert.equal(reserved, 1_200);
      await doomed.kill();
      // Every process is connected and idle: the streams of the four start together.
      const results = await Promise.all(processes.map((p) => p.run(`streams\tbudget\t${STREAMS_EACH}`)));
      for (const r of results) assert.equal(r.errors, 0, JSON.stringify(results));
      const actual = results.reduce((n, r) => n + r.actual, 0);
      const admitted = results.map((r) => r.admitted);
      // Both runtimes were admitted streams on the shared key (they really raced each other).
      assert.ok(admitted[0] + admitted[1] > 0 && admitted[2] + admitted[3] > 0, JSON.stringify(results));
      const left = await remaining(processes[2], "budget");
      assert.equal(BUDGET - left, actual + reserved, `charged at rest = the admitted actual costs and the killed process' estimates (${JSON.stringify(results)})`);
      console.log(`# ${where}: admitted ${JSON.stringify(admitted)} of ${4 * STREAMS_EACH} streams, ${actual + reserved} tokens charged at rest (${reserved} of them the killed process' open reservations)`);
    } finally {
      await stopAll(processes);
    }
  });
}
