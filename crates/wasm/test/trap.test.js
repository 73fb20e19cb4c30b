// A wasm trap never leaves the instance half-working: once a call into tollgate's wasm has
// trapped (here a genuine allocation failure: wasm memory grown to its 4 GiB limit, then a
// new key to store), every call on every limiter, old or new, throws TollgateInstanceLost
// (the trap as its cause) instead of deciding on the memory the trapping call left.
// Its own file: node --test runs each file in its own process, and this one's instance is
// lost on purpose.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Limiter } from "tollgate";
import * as glue from "../pkg/node/glue.js";

function lost(e) {
  return e instanceof Error && e.name === "TollgateInstanceLost" && e.cause instanceof WebAssembly.RuntimeError && /restart/.test(e.message);
}

test("after a trap every call on every limiter throws TollgateInstanceLost", () => {
  const before = new Limiter("10/min");
  assert.equal(before.check("a", { now: 0 }).allowed, true);
  // Take every page wasm memory may still have (the most a grow may ask shrinks to 1).
  const memory = glue.wasmMemory();
  for (let pages = 1 << 15; pages >= 1; ) {
    try {
      memory.grow(pages);
    } catch {
      pages >>= 1;
    }
  }
  console.log(`# wasm memory: ${memory.buffer.byteLength / 2 ** 20} MiB, all of it`);
  let checked = 0;
  const trap = assert.throws(() => {
    for (; checked < 1_000_000; checked++) before.check(`key-${checked}`, { now: 0 });
  }, lost);
  console.log(`# trapped after ${checked} new keys`);
  assert.throws(() => before.check("a", { now: 0 }), lost);
  assert.throws(() => before.allow("a", { now: 0 }), lost);
  assert.throws(() => before.size, lost);
  assert.throws(() => new Limiter("1/s"), lost);
  assert.throws(() => Limiter.all(["1/s", "2/s"]), lost);
  void trap;
});
