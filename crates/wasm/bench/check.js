// Side-by-side benchmark of a synchronous rate-limit check in Node:
//   tollgate        Limiter.check(key)                      (this package, wasm core)
//   tg-allow        Limiter.allow(key): the same decision, answered as a boolean
//   js-map          a hand-written lazy-refill token bucket in a JS Map (returns the same
//                   decision object shape as tollgate, so both do the same work)
//   js-allow        the same bucket answering only a boolean (allow's counterpart)
//   limiter         npm `limiter` TokenBucket.tryRemoveTokens(1), one bucket per key in a Map
//   rlf             npm `rate-limiter-flexible` RateLimiterMemory.consume(key), a Promise,
//                   awaited one by one (a caller awaiting its limiter per request)
//   rlf-batch       the same, 1000 calls in flight at a time (Promise.all): its best case
//   clock-only      not a limiter: Date.now() and the same decision object, no state. The
//                   floor for anything that reads the clock per check (a reference row)
//   wasm-floor      not a limiter: Date.now(), a JS Map get of the key (a number), one call of
//                   an empty wasm function (number in, number out) and the decision object:
//                   the floor of any binding that crosses into wasm once per check with a
//                   key interned to a number (a reference row)
//   slot, slot-allow  with --slot (bench/slot/build.sh first): a prototype of the design where
//                   JS keeps the key -> slot map (a Map, evicting first-in first-out when
//                   full) and wasm decides on the slot (the core's decide_in_place over a
//                   Vec of states): check's and allow's counterparts. Not the package.
// for 1 key, 10k keys and 1M keys (keys visited round-robin), plus memory per key after every
// key was checked once. Every case runs in its own child process (node --expose-gc) so heaps
// do not mix. Every check calls Date.now() (each implementation reads the clock itself).
// Policy: a token bucket of 1e9/s, burst 1e9, so every check is admitted (the common path).
//
// Usage: node bench/check.js [--ms 1500] [--only 10000] [--rounds 3] [--slot]   (from crates/wasm, after build.sh)
// Prints, for each round (every case once, in turn), a table with ops/s, CPU time per check
// (steadier than ops/s on a shared machine) and tollgate's ratio to each, and the memory per
// key; then tollgate's ratios to the JS Map bucket and to npm `limiter` over the rounds.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

// The size of the .wasm every build ships (goal: 40 KB gzipped; the npm suite fails above
// its 46,000-byte budget), printed with every run so that a change's cost is seen.
{
  const wasm = readFileSync(new URL("../pkg/web/tollgate_wasm_bg.wasm", import.meta.url));
  console.log(`wasm: ${wasm.length} bytes raw, ${gzipSync(wasm, { level: 9 }).length} bytes gzipped (zlib -9)`);
}

const RATE = 1e9; // per second
const KEYS = [1, 10_000, 1_000_000];
const IMPLS = ["tollgate", "tg-allow", "js-map", "js-allow", "limiter", "rlf", "rlf-batch", "clock-only", "wasm-floor"];
if (process.argv.includes("--slot")) IMPLS.push("slot", "slot-allow");

/** The slot prototype (bench/slot/): JS maps keys to slots, wasm decides on the slot. */
class SlotLimiter {
  constructor(x, maxKeys) {
    this.x = x;
    this.max = maxKeys;
    this.ids = new Map();
    this.keys = [];
    this.hand = 0;
    this.out = x.init(RATE, maxKeys) >>> 3;
    this.f64 = new Float64Array(x.memory.buffer);
  }
  /** The key's slot; a new key takes the next free slot, or evicts the oldest key's. */
  slot(key) {
    let s = this.ids.get(key);
    if (s === undefined) {
      if (this.ids.size < this.max) s = this.ids.size;
      else {
        s = this.hand;
        this.hand = s + 1 === this.max ? 0 : s + 1;
        this.ids.delete(this.keys[s]);
        this.x.clear(s);
      }
      this.ids.set(key, s);
      this.keys[s] = key;
    }
    return s;
  }
  allow(key) {
    return this.x.allow(this.slot(key), Date.now(), 1) === 1;
  }
  check(key) {
    const status = this.x.check(this.slot(key), Date.now(), 1);
    let f = this.f64;
    if (f.length === 0) f = this.f64 = new Float64Array(this.x.memory.buffer);
    const i = this.out;
    return { allowed: status === 1, limit: f[i], remaining: f[i + 1], resetAfter: f[i + 2], retryAfter: f[i + 3], delay: f[i + 4] };
  }
}

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** The pure-JS baseline: a lazy-refill token bucket per key in a Map. */
class MapBucket {
  constructor(ratePerSec, burst) {
    this.perMs = ratePerSec / 1000;
    this.burst = burst;
    this.map = new Map();
  }
  /** The key's bucket, refilled to `now`. */
  refill(key, now) {
    let s = this.map.get(key);
    if (s === undefined) {
      s = { tokens: this.burst, last: now };
      this.map.set(key, s);
    } else if (now > s.last) {
      s.tokens = Math.min(this.burst, s.tokens + (now - s.last) * this.perMs);
      s.last = now;
    }
    return s;
  }
  allow(key) {
    const s = this.refill(key, Date.now());
    const allowed = s.tokens >= 1;
    if (allowed) s.tokens -= 1;
    return allowed;
  }
  check(key) {
    const s = this.refill(key, Date.now());
    const allowed = s.tokens >= 1;
    if (allowed) s.tokens -= 1;
    const missing = this.burst - s.tokens;
    return {
      allowed,
      limit: this.burst,
      remaining: Math.floor(s.tokens),
      resetAfter: Math.ceil(missing / this.perMs),
      retryAfter: allowed ? 0 : Math.ceil((1 - s.tokens) / this.perMs),
      delay: 0,
    };
  }
}

async function makeCheck(impl, nKeys) {
  switch (impl) {
    case "tollgate": {
      const { Limiter } = await import("tollgate");
      const l = new Limiter(`${RATE}/s`, { maxKeys: Math.max(nKeys, 1) * 2 });
      return { check: (k) => l.check(k).allowed, size: () => l.size };
    }
    case "tg-allow": {
      const { Limiter } = await import("tollgate");
      const l = new Limiter(`${RATE}/s`, { maxKeys: Math.max(nKeys, 1) * 2 });
      return { check: (k) => l.allow(k), size: () => l.size };
    }
    case "slot":
    case "slot-allow": {
      const bytes = readFileSync(new URL("../../../target/slot/slot.wasm", import.meta.url));
      const { instance } = await WebAssembly.instantiate(bytes);
      const l = new SlotLimiter(instance.exports, Math.max(nKeys, 1) * 2);
      if (impl === "slot") return { check: (k) => l.check(k).allowed, size: () => l.ids.size };
      return { check: (k) => l.allow(k), size: () => l.ids.size };
    }
    case "js-allow": {
      const b = new MapBucket(RATE, RATE);
      return { check: (k) => b.allow(k), size: () => b.map.size };
    }
    case "wasm-floor": {
      // (module (func (export "f") (param f64) (result i32) i32.const 1))
      const bytes = new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 6, 1, 0x60, 1, 0x7c, 1, 0x7f, 3, 2, 1, 0, 7, 5, 1, 1, 0x66, 0, 0, 10, 6, 1, 4, 0, 0x41, 1, 0x0b]);
      const f = (await WebAssembly.instantiate(bytes)).instance.exports.f;
      const ids = new Map();
      const check = (k) => {
        const now = Date.now();
        let id = ids.get(k);
        if (id === undefined) ids.set(k, (id = ids.size));
        const status = f(id + now);
        return { allowed: status === 1, limit: RATE, remaining: RATE - 1, resetAfter: 1, retryAfter: 0, delay: 0 };
      };
      return { check: (k) => check(k).allowed, size: () => ids.size };
    }
    case "js-map": {
      const b = new MapBucket(RATE, RATE);
      return { check: (k) => b.check(k).allowed, size: () => b.map.size };
    }
    case "clock-only": {
      let last = 0;
      const check = () => {
        const now = Date.now();
        const d = { allowed: now >= last, limit: RATE, remaining: RATE - 1, resetAfter: 1, retryAfter: 0, delay: 0 };
        last = now;
        return d;
      };
      return { check: (k) => check(k).allowed, size: () => NaN };
    }
    case "limiter": {
      const { TokenBucket } = await import("limiter");
      const map = new Map();
      return {
        check: (k) => {
          let b = map.get(k);
          if (b === undefined) {
            b = new TokenBucket({ bucketSize: RATE, tokensPerInterval: RATE, interval: "second" });
            map.set(k, b);
          }
          return b.tryRemoveTokens(1);
        },
        size: () => map.size,
      };
    }
    case "rlf":
    case "rlf-batch": {
      const { RateLimiterMemory } = await import("rate-limiter-flexible");
      const r = new RateLimiterMemory({ points: RATE, duration: 1 });
      return {
        checkAsync: (k) => r.consume(k).then(() => true, () => false),
        batch: impl === "rlf-batch" ? 1000 : 1,
        size: () => NaN,
      };
    }
  }
  throw new Error(impl);
}

async function child(impl, nKeys, ms) {
  const keys = Array.from({ length: nKeys }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  // The limiter (and for tollgate the wasm instance) exists before the first snapshot, so
  // memory per key counts only what the keys add.
  const c = await makeCheck(impl, nKeys);
  global.gc();
  const before = process.memoryUsage();
  // First pass: every key once (this is what memory per key measures).
  if (c.check) for (let i = 0; i < nKeys; i++) c.check(keys[i]);
  else for (let i = 0; i < nKeys; i += 1000) await Promise.all(keys.slice(i, i + 1000).map(c.checkAsync));
  global.gc();
  const after = process.memoryUsage();
  const perKey = (field) => (after[field] - before[field]) / nKeys;
  // Throughput: round-robin over the keys for about `ms`, best of 3 rounds.
  let best = 0;
  let bestCpu = 0;
  let i = 0;
  for (let round = 0; round < 3; round++) {
    let ops = 0;
    const cpu = process.cpuUsage();
    const start = performance.now();
    let elapsed = 0;
    if (c.check) {
      const check = c.check;
      while (elapsed < ms / 3) {
        for (let j = 0; j < 10_000; j++) {
          check(keys[i]);
          if (++i === nKeys) i = 0;
        }
        ops += 10_000;
        elapsed = performance.now() - start;
      }
    } else if (c.batch === 1) {
      while (elapsed < ms / 3) {
        for (let j = 0; j < 1000; j++) {
          await c.checkAsync(keys[i]);
          if (++i === nKeys) i = 0;
        }
        ops += 1000;
        elapsed = performance.now() - start;
      }
    } else {
      while (elapsed < ms / 3) {
        const batch = new Array(c.batch);
        for (let j = 0; j < c.batch; j++) {
          batch[j] = c.checkAsync(keys[i]);
          if (++i === nKeys) i = 0;
        }
        await Promise.all(batch);
        ops += c.batch;
        elapsed = performance.now() - start;
      }
    }
    best = Math.max(best, ops / (elapsed / 1000));
    const used = process.cpuUsage(cpu);
    bestCpu = Math.max(bestCpu, ops / ((used.user + used.system) / 1e6));
  }
  console.log(
    JSON.stringify({
      impl,
      nKeys,
      opsPerSec: best,
      opsPerCpuSec: bestCpu,
      heapPerKey: perKey("heapUsed"),
      rssPerKey: perKey("rss"),
      externalPerKey: perKey("external") + perKey("arrayBuffers"),
    }),
  );
}

function fmtOps(n) {
  return n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${(n / 1e3).toFixed(0)} k`;
}

/** CPU time per check in ns (the process's user + system time over the checks it made). */
function ns(row) {
  return (1e9 / row.opsPerCpuSec).toFixed(0);
}

function fmtBytes(n, nKeys) {
  // With one key, "per key" is the whole limiter's fixed cost: not meaningful.
  return Number.isFinite(n) && nKeys > 1 ? `${Math.round(n)} B` : "-";
}

async function main() {
  const ms = arg("--ms", 1500);
  const only = arg("--only", 0);
  const rounds = arg("--rounds", 3);
  const script = fileURLToPath(import.meta.url);
  const os = await import("node:os");
  console.log(`sync check() throughput, Node ${process.version}, token bucket ${RATE}/s (all admitted), Date.now() per check`);
  const summary = [];
  for (let round = 1; round <= rounds; round++) {
    const load = os.loadavg()[0];
    const rows = [];
    for (const nKeys of KEYS.filter((k) => !only || k === only)) {
      for (const impl of IMPLS) {
        const r = spawnSync(process.execPath, ["--expose-gc", "--max-old-space-size=4096", script, "--child", impl, String(nKeys), String(ms)], {
          encoding: "utf8",
          cwd: process.cwd(),
        });
        if (r.status !== 0) throw new Error(`${impl} ${nKeys}: ${r.stderr}`);
        rows.push(JSON.parse(r.stdout.trim().split("\n").pop()));
      }
    }
    console.log("");
    console.log(`round ${round} of ${rounds}: load average ${load.toFixed(2)} at its start, ${os.loadavg()[0].toFixed(2)} at its end (on ${os.availableParallelism()} cores; other work skews the numbers)`);
    console.log("keys      impl         ops/s   CPU ns/check  tollgate/x (CPU)   heap/key   rss/key   external+ab/key");
    for (const nKeys of [...new Set(rows.map((r) => r.nKeys))]) {
      const group = rows.filter((r) => r.nKeys === nKeys);
      const by = (impl) => group.find((r) => r.impl === impl);
      const tg = by("tollgate");
      for (const r of group) {
        const ratio = tg.opsPerSec / r.opsPerSec;
        const cpuRatio = tg.opsPerCpuSec / r.opsPerCpuSec;
        console.log(
          `${String(nKeys).padEnd(9)} ${r.impl.padEnd(10)} ${fmtOps(r.opsPerSec).padStart(9)}   ${(1e9 / r.opsPerCpuSec).toFixed(0).padStart(8)}   ${ratio.toFixed(2).padStart(8)}x (${cpuRatio.toFixed(2)}x)   ${fmtBytes(r.heapPerKey, nKeys).padStart(8)}  ${fmtBytes(r.rssPerKey, nKeys).padStart(8)}  ${fmtBytes(r.externalPerKey, nKeys).padStart(8)}`,
        );
      }
      const [js, jsAllow, allow, rlf, clock, floor, limiter] = ["js-map", "js-allow", "tg-allow", "rlf", "clock-only", "wasm-floor", "limiter"].map(by);
      summary.push(
        `round ${round}, ${nKeys} keys: check/js-map ${(tg.opsPerSec / js.opsPerSec).toFixed(2)}x (CPU ${(tg.opsPerCpuSec / js.opsPerCpuSec).toFixed(2)}x; goal >= ${nKeys >= 1_000_000 ? "1.5" : "1"}), ` +
          `allow/js-map ${(allow.opsPerSec / js.opsPerSec).toFixed(2)}x (CPU ${(allow.opsPerCpuSec / js.opsPerCpuSec).toFixed(2)}x), ` +
          `allow/js-allow ${(allow.opsPerSec / jsAllow.opsPerSec).toFixed(2)}x, check/rlf ${(tg.opsPerSec / rlf.opsPerSec).toFixed(1)}x, ` +
          // npm `limiter` answers a boolean: `allow` is its like, `check` adds the answer object.
          `check/limiter ${(tg.opsPerSec / limiter.opsPerSec).toFixed(2)}x (CPU ${(tg.opsPerCpuSec / limiter.opsPerCpuSec).toFixed(2)}x), ` +
          `allow/limiter ${(allow.opsPerSec / limiter.opsPerSec).toFixed(2)}x (CPU ${(allow.opsPerCpuSec / limiter.opsPerCpuSec).toFixed(2)}x; goal >= 1); ` +
          `CPU ns per check: tollgate ${ns(tg)}, allow ${ns(allow)}, js-map ${ns(js)}, clock-only ${ns(clock)}, wasm-floor ${ns(floor)} ` +
          `(wasm-floor/js-map ${(floor.opsPerCpuSec / js.opsPerCpuSec).toFixed(2)}x: the most any wasm binding of this shape could reach); ` +
          `rss/key tollgate ${fmtBytes(tg.rssPerKey, nKeys)}, js-map ${fmtBytes(js.rssPerKey, nKeys)}`,
      );
      const [slot, slotAllow] = ["slot", "slot-allow"].map(by);
      if (slot) {
        summary.push(
          `round ${round}, ${nKeys} keys, slot prototype: slot/js-map ${(slot.opsPerSec / js.opsPerSec).toFixed(2)}x (CPU ${(slot.opsPerCpuSec / js.opsPerCpuSec).toFixed(2)}x), ` +
            `slot/tollgate ${(slot.opsPerSec / tg.opsPerSec).toFixed(2)}x (CPU ${(slot.opsPerCpuSec / tg.opsPerCpuSec).toFixed(2)}x), ` +
            `slot-allow/tg-allow ${(slotAllow.opsPerSec / allow.opsPerSec).toFixed(2)}x (CPU ${(slotAllow.opsPerCpuSec / allow.opsPerCpuSec).toFixed(2)}x), ` +
            `slot-allow/js-allow ${(slotAllow.opsPerSec / jsAllow.opsPerSec).toFixed(2)}x; CPU ns per check: slot ${ns(slot)}, slot-allow ${ns(slotAllow)}; ` +
            `rss/key slot ${fmtBytes(slot.rssPerKey, nKeys)} (heap ${fmtBytes(slot.heapPerKey, nKeys)}, wasm ${fmtBytes(slot.externalPerKey, nKeys)}), tollgate ${fmtBytes(tg.rssPerKey, nKeys)}`,
        );
      }
    }
  }
  console.log("");
  for (const line of summary) console.log(line);
  console.log("(memory per key: after every key was checked once, after gc; tollgate's state is in wasm memory, counted in rss and external/arrayBuffers, not in the JS heap)");
}

if (process.argv[2] === "--child") {
  await child(process.argv[3], Number(process.argv[4]), Number(process.argv[5]));
} else {
  await main();
}
