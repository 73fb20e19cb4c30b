// Real redis-server processes for the tests of tollgate/redis: each on a free loopback port
// with its own temporary directory, stopped (and the directory removed) by stop(). No mock.
import { after, before } from "node:test";
import { spawn, spawnSync } from "node:child_process";
import { createInterface } from "node:readline";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import Redis from "ioredis";
import { createClient } from "redis";

export const repo = fileURLToPath(new URL("../../..", import.meta.url));

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export function cli(port, ...args) {
  const r = spawnSync("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], { encoding: "utf8" });
  return r.stdout.trim();
}

/** A running redis-server; `extra` are configuration arguments. */
export class Server {
  static async start(extra = ["--save", "", "--appendonly", "no"]) {
    const s = new Server();
    s.port = await freePort();
    s.dir = mkdtempSync(join(tmpdir(), "tollgate-redis-npm-"));
    s.extra = extra;
    await s.spawn();
    return s;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/`;
  }

  async spawn() {
    this.child = spawn(
      "redis-server",
      ["--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir, "--daemonize", "no", ...this.extra],
      { stdio: "ignore" },
    );
    const deadline = Date.now() + 20_000;
    while (cli(this.port, "PING") !== "PONG") {
      if (Date.now() > deadline) throw new Error(`redis-server on port ${this.port} did not start`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  cli(...args) {
    return cli(this.port, ...args);
  }

  /** Stops the server at once (SIGKILL). */
  async kill() {
    if (!this.child) return;
    const c = this.child;
    this.child = undefined;
    const exited = new Promise((r) => c.once("exit", r));
    c.kill("SIGKILL");
    await exited;
  }

  async restart() {
    await this.kill();
    await this.spawn();
  }

  async stop() {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** One policy of every algorithm, each admitting 50 requests at one instant. */
export const FIFTY = [
  "token-bucket 50/min",
  "gcra 50/min",
  "sliding-window 50/min",
  "fixed-window 50/min",
  "sliding-log 50/min",
  "leaky-bucket 50/min",
  "leaky-queue 50/min",
  "concurrency 50",
];

/** A local Redis Cluster of three primaries (as crates/redis/tests/support), stopped by stop(). */
export class Cluster {
  static async start() {
    const c = new Cluster();
    const conf = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"];
    c.nodes = [];
    try {
      for (let i = 0; i < 3; i++) c.nodes.push(await Server.start(conf));
      const r = spawnSync(
        "redis-cli",
        ["--cluster", "create", ...c.nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "0", "--cluster-yes"],
        { encoding: "utf8" },
      );
      if (r.status !== 0) throw new Error(`redis-cli --cluster create: ${r.stdout}${r.stderr}`);
      const deadline = Date.now() + 30_000;
      while (!c.nodes.every((n) => n.cli("CLUSTER", "INFO").includes("cluster_state:ok"))) {
        if (Date.now() > deadline) throw new Error("the cluster did not become ready");
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  async stop() {
    for (const n of this.nodes) await n.stop();
  }
}

/**
 * Asserts that a decision carries every field a vector step expects, and for a stack or a
 * fair share each limit's decision (`each`, the same fields per limit, in order).
 */
export function assertDecision(got, expect, where) {
  for (const [k, want] of Object.entries(expect)) {
    if (k !== "each") {
      assert.equal(got[k], want, `${where}: ${k}`);
      continue;
    }
    assert.equal(got.each?.length, want.length, `${where}: each.length`);
    want.forEach((limit, i) => {
      for (const [f, v] of Object.entries(limit)) assert.equal(got.each[i][f], v, `${where}: each[${i}].${f}`);
    });
  }
}

/** Closes test clients of any of the libraries (ioredis: disconnect; node-redis: destroy). */
export async function closeAll(clients) {
  for (const c of clients) {
    try {
      if (typeof c.disconnect === "function" && c.status !== undefined) c.disconnect();
      else await c.destroy();
    } catch {}
  }
}

/**
 * A client process that answers each line of its stdin with one JSON line, after a first
 * line once ready: `run(line)` sends a line and resolves with its answer; `stop()` ends its
 * input and resolves when it exited (before the server stops under it); `kill()` kills it.
 */
export function lineClient(command, args) {
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  let failed;
  lines.on("line", (line) => waiting.shift()?.resolve(JSON.parse(line)));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.on("exit", (code) => {
    failed = new Error(`${command} ${args.join(" ")} exited with ${code}`);
    for (const w of waiting.splice(0)) w.reject(failed);
  });
  const next = () => new Promise((resolve, reject) => (failed ? reject(failed) : waiting.push({ resolve, reject })));
  return next().then(() => ({
    run(line) {
      const answer = next();
      child.stdin.write(`${line}\n`);
      return answer;
    },
    stop() {
      child.stdin.end();
      return exited;
    },
    /** SIGKILL: the process ends at once, whatever it holds. */
    kill() {
      child.kill("SIGKILL");
      return exited;
    },
  }));
}

/**
 * A redis-server for the tests of one file (`extra`: its configuration arguments), started
 * before them and stopped after them, with every client made by `ioredis(options)` and
 * `nodeRedis()` (connected; errors reach the limiter through its calls).
 */
export function serverForTests(extra) {
  const clients = [];
  const shared = {
    server: undefined,
    ioredis(options = {}) {
      const c = new Redis({ port: shared.server.port, host: "127.0.0.1", ...options });
      c.on("error", () => {});
      clients.push(c);
      return c;
    },
    async nodeRedis() {
      const c = createClient({ url: shared.server.url });
      c.on("error", () => {});
      await c.connect();
      clients.push(c);
      return c;
    },
  };
  before(async () => {
    shared.server = await Server.start(extra);
  });
  after(async () => {
    await closeAll(clients);
    await shared.server.stop();
  });
  return shared;
}

/** A connected client of `kind` (`ioredis` or `node-redis`) for a child process's `url`; `close()` ends it. */
export async function connectTo(url, kind) {
  if (kind === "node-redis") {
    const client = createClient({ url });
    client.on("error", (e) => console.error(`redis: ${e.message}`));
    await client.connect();
    return { client, close: () => client.quit() };
  }
  const client = new Redis(url);
  await client.ping();
  return { client, close: () => client.disconnect() };
}
