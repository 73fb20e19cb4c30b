// The npm Redis client's own work per check, counted rather than timed (issues 26 and 27):
// `RedisLimiter.check` in process against a canned client, an object with ioredis' shape
// (`callBuffer`, `status`) that answers every command at once with a reply recorded from a
// real redis-server (bench/redis-replies.json). No socket, no server, no other process: what
// is left is this package's JavaScript, its wasm calls and the promise plumbing of a client.
// bench/redis-counts.sh runs it under valgrind (Node's instructions, made deterministic
// with V8's --predictable and --single-threaded; PERF.md), at N and 2N checks after the same
// set-up: the difference over N is one check. (Not scripts/counts.sh: not held by CI.)
//
//   node bench/redis-counts.js PATH N [--warm W] [--pkg DIR]   N checks on PATH (prints nothing; exits 1
//                                                   if a check was not admitted by "redis")
//   node bench/redis-counts.js --record [--module SO]
//                                                   records the replies again from a
//                                                   redis-server it starts (with tollgate's
//                                                   module loaded from SO for the module path)
//                                                   and writes bench/redis-replies.json
//
// PATH: `scripts-fresh` (the key is absent at each read: the read script's reply for a new
// key, then the commit's `ok`), `scripts-existing` (each read finds the value the first check
// wrote: the reply for an existing key, then `ok`), `module` (the server has tollgate's
// module: `COMMAND INFO` once, then one TOLLGATE.CHECK a check, answered with its recorded
// reply). Each check is awaited before the next (one in flight, one key), so no merging of
// several keys' calls: the per-check floor of the client. The policy is bench/redis.js's
// (`fixed-window 1000/s`); every canned reply carries the same server time, so every check
// decides the same state at the same time and is admitted.
//
// --warm W: W more checks first, in both runs (V8 optimizes before the N that differ).
// --pkg DIR: the built package to load (default ../pkg; PERF.md compares the package built
// at an older commit this way: the same harness and replies, only the package differs).
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createHash } from "node:crypto";

const POLICY = "fixed-window 1000/s";
const KEY = "user-1";
const OPTIONS = { namespace: "counts", fallback: "closed", timeout: 5000 };
const REPLIES = fileURLToPath(new URL("./redis-replies.json", import.meta.url));

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
}

/** A reply as JSON: Buffers as `{ b: base64 }`, arrays as arrays, numbers and strings as they are. */
const encode = (v) => (Buffer.isBuffer(v) ? { b: v.toString("base64") } : Array.isArray(v) ? v.map(encode) : v);
const decode = (v) => (Array.isArray(v) ? v.map(decode) : v !== null && typeof v === "object" ? Buffer.from(v.b, "base64") : v);

/**
 * A client with ioredis' shape answering from `replies` (name -> reply): EVALSHA of the read
 * script with `read`, of the commit script with `commit`, `COMMAND INFO` with `commandInfo`
 * (or an error: no module), TOLLGATE.CHECK with `check`. Each answer is an already
 * resolved promise, as a client's reply would be once the socket delivered it.
 */
function canned(replies, readSha, module) {
  const read = Promise.resolve(replies.read);
  const commit = Promise.resolve(replies.commit);
  const check = Promise.resolve(replies.check);
  return {
    status: "ready",
    isCluster: false,
    callBuffer(command, args) {
      if (command === "EVALSHA") return args[0] === readSha ? read : commit;
      if (command === "TOLLGATE.CHECK" && module) return check;
      if (command === "COMMAND" && module) return Promise.resolve(replies.commandInfo);
      if (command === "COMMAND") return Promise.reject(Object.assign(new Error("ERR unknown command"), { name: "ReplyError" }));
      return Promise.reject(new Error(`canned client: no reply recorded for ${command}`));
    },
  };
}

async function count(path, n, pkg, warm) {
  const recorded = JSON.parse(readFileSync(REPLIES, "utf8"));
  const { RedisLimiter } = await import(pathToFileURL(`${pkg}/redis.js`).href);
  const { READ_SCRIPT } = await import(pathToFileURL(`${pkg}/redis/scripts.js`).href);
  const readSha = createHash("sha1").update(READ_SCRIPT).digest("hex");
  const replies = {
    "scripts-fresh": { read: recorded.readFresh, commit: recorded.commit },
    "scripts-existing": { read: recorded.readExisting, commit: recorded.commit },
    module: { commandInfo: recorded.commandInfo, check: recorded.moduleCheck },
  }[path];
  if (replies === undefined) throw new Error(`unknown path ${path} (scripts-fresh, scripts-existing, module)`);
  for (const k of Object.keys(replies)) replies[k] = decode(replies[k]);
  const client = canned(replies, readSha, path === "module");
  const limiter = new RedisLimiter(client, POLICY, { ...OPTIONS, useModule: path === "module" });
  let bad = 0;
  for (let i = 0; i < warm + n; i++) {
    const d = await limiter.check(KEY);
    if (!d.allowed || d.source !== "redis") bad++;
  }
  if (bad > 0) {
    console.error(`${bad} of ${n} checks were not admitted by redis (stale bench/redis-replies.json?)`);
    process.exit(1);
  }
}

/**
 * Records the replies from a real redis-server (started here on a free port), through
 * ioredis' `callBuffer` as the package calls it: a check of a new key (the read of an
 * absent key, the commit), a second check of it (the read of the value the first wrote),
 * and with `--module SO` a check on a server with the module (COMMAND INFO, TOLLGATE.CHECK).
 */
async function record(modulePath) {
  const { Server } = await import("../test-redis/support.js");
  const { default: Redis } = await import("ioredis");
  const { RedisLimiter } = await import("../pkg/redis.js");
  const out = {};
  const recording = (real, log) => ({
    isCluster: false,
    get status() {
      return real.status;
    },
    callBuffer: (command, args) => real.callBuffer(command, args).then((reply) => (log.push([command, reply]), reply)),
  });
  const session = async (extra, useModule, checks) => {
    const server = await Server.start(["--save", "", "--appendonly", "no", ...extra]);
    const real = new Redis({ port: server.port, host: "127.0.0.1" });
    const log = [];
    try {
      const limiter = new RedisLimiter(recording(real, log), POLICY, { ...OPTIONS, useModule });
      for (let i = 0; i < checks; i++) {
        const d = await limiter.check(KEY);
        if (!d.allowed || d.source !== "redis") throw new Error(`check ${i} not admitted by redis: ${JSON.stringify(d)}`);
      }
    } finally {
      real.disconnect();
      await server.stop();
    }
    return log;
  };
  const scripts = await session([], false, 2);
  // The first call of each script is an EVAL (the new server answered NOSCRIPT to its SHA1).
  const evalsha = scripts.filter(([c]) => c === "EVALSHA" || c === "EVAL").map(([, r]) => r);
  if (evalsha.length !== 4) throw new Error(`expected read, commit, read, commit; got ${scripts.map(([c]) => c)}`);
  [out.readFresh, out.commit, out.readExisting] = evalsha.map(encode);
  if (modulePath !== undefined) {
    const module = await session(["--loadmodule", modulePath], true, 1);
    out.commandInfo = encode(module.find(([c]) => c === "COMMAND")[1]);
    out.moduleCheck = encode(module.find(([c]) => c === "TOLLGATE.CHECK")[1]);
  } else {
    const old = JSON.parse(readFileSync(REPLIES, "utf8"));
    out.commandInfo = old.commandInfo;
    out.moduleCheck = old.moduleCheck;
  }
  const lines = Object.entries(out).map(([name, reply]) => `  ${JSON.stringify(name)}: ${JSON.stringify(reply)}`);
  writeFileSync(REPLIES, `{\n${lines.join(",\n")}\n}\n`);
  console.log(`wrote ${REPLIES}`);
}

if (process.argv.includes("--record")) {
  await record(arg("--module", undefined));
} else {
  const [path, n] = process.argv.slice(2);
  await count(path, Number(n), arg("--pkg", fileURLToPath(new URL("../pkg", import.meta.url))), Number(arg("--warm", 0)));
}
