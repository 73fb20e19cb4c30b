// Issue 16, item 3: a call the isolate gave up on (503 coordinator-timeout) must not be
// charged. The isolate sends its deadline; the object refuses, charging nothing, a call
// that reaches it after the deadline. Forced here with a tiny timeout and a burst on one
// object (workerd runs the worker and the object on one thread, so most calls are late).
import { test } from "node:test";
import assert from "node:assert/strict";
import { start, hit } from "./harness.mjs";

test("timed-out calls are (nearly all) not charged; admitted ones are", async () => {
  const edge = await start({
    config: {
      settings: { timeout_ms: 30, deny_cache: false, stats_flush_ms: 3600000 },
      policies: { big: { limit: "fixed-window 1000/h", key: "ip" } },
      routes: [{ path: "/api/", policies: ["big"] }],
    },
  });
  try {
    const ip = "203.0.113.90";
    const got = await Promise.all(Array.from({ length: 400 }, () => hit(edge, "/api/x", { ip })));
    const n = (s) => got.filter((r) => r.status === s).length;
    const [ok, late] = [n(200), n(503)];
    assert.equal(ok + late, 400, "nothing denied: the limit is 1000");
    // How many time out depends on the machine's load (93 to 390 of 400 seen); a few dozen
    // are enough for the charge count below to say something.
    assert.ok(late >= 20, `the burst must time out (${late} did) for this test to say anything`);
    for (const r of got.filter((r) => r.status === 503)) {
      assert.equal(JSON.parse(r.text).error, "coordinator-timeout");
    }
    // Read once every call has reached the object (the read queues behind them).
    const read = await edge.admin("/admin/v1/keys/read", { policy: "big", ip });
    const charged = 1000 - read.body.decision.remaining;
    assert.ok(charged >= ok, `every admitted call is charged (${charged} >= ${ok})`);
    // Before the deadline every timed-out call that reached the object was charged
    // (charged - ok = late). A call decided in time whose answer came back after the
    // timeout is still charged (see the README): measured 0-8% of the 503s here.
    assert.ok(charged - ok <= late / 4, `${charged - ok} of ${late} timed-out calls were charged`);
  } finally {
    await edge.dispose();
  }
});
