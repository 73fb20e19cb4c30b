// The reserve-and-settle vectors (tests/vectors/settle/*.json) on the in-memory Limiter's
// reserve and settle: the core's rule through wasm, the same answers as the Rust runner's
// (tests/settle.rs); and the arguments the package checks itself, each a named error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Limiter } from "tollgate";
import { replaySettle } from "./settle-replay.js";

const dir = fileURLToPath(new URL("../../../tests/vectors/settle/", import.meta.url));
const files = readdirSync(dir).filter((f) => f.endsWith(".json")).sort();

test("the settle vectors are there, one per algorithm and the stack", () => assert.ok(files.length >= 9, files.join()));

for (const file of files) {
  test(`settle vectors: ${file}`, () => {
    const v = JSON.parse(readFileSync(dir + file, "utf8"));
    assert.deepEqual(replaySettle(Limiter, { name: file, ...v }), []);
  });
}

test("a reservation is plain data: a JSON copy settles, and settling it twice charges once", () => {
  const l = new Limiter("gcra 1000/min");
  const d = l.reserve("alice", 800, { now: 0 });
  assert.equal(d.remaining, 200);
  const copy = JSON.parse(JSON.stringify(d.reservation));
  assert.deepEqual(l.settle(copy, 300, { now: 0 }), { refunded: 500, charged: 0, unpaid: 0 });
  assert.equal(l.peek("alice", { now: 0 }).remaining, 700);
  assert.deepEqual(l.settle(d.reservation, 100, { now: 0 }), { refunded: 500, charged: 0, unpaid: 0 });
  assert.equal(l.peek("alice", { now: 0 }).remaining, 700);
});

test("a denied reserve charges nothing and carries no reservation", () => {
  const l = new Limiter("fixed-window 10/min");
  assert.notEqual(l.reserve("k", 9, { now: 0 }).reservation, undefined);
  const denied = l.reserve("k", 2, { now: 0 });
  assert.equal(denied.allowed, false);
  assert.equal(denied.reservation, undefined);
  assert.equal(l.peek("k", { now: 0 }).remaining, 1);
});

test("an estimate or actual that is not a whole number from 0 is a named TypeError or RangeError", () => {
  const l = new Limiter("10/s");
  const { reservation } = l.reserve("k", 1, { now: 0 });
  const cases = [
    [-1, RangeError, "negative"],
    [1.5, TypeError, "not-a-number"],
    [NaN, TypeError, "not-a-number"],
    [Infinity, TypeError, "not-a-number"],
    ["3", TypeError, "not-a-number"],
    [2 ** 60, RangeError, "too-large"],
  ];
  for (const [bad, Kind, rule] of cases) {
    assert.throws(() => l.reserve("k", bad, { now: 0 }), (e) => e instanceof Kind && e.field === "estimate" && e.rule === rule);
    assert.throws(() => l.settle(reservation, bad, { now: 0 }), (e) => e instanceof Kind && e.field === "actual" && e.rule === rule);
  }
  // Above the core's bound on a count (2^40), the core's own error.
  assert.throws(() => l.settle(reservation, 2 ** 41, { now: 0 }), (e) => e instanceof RangeError && e.field === "actual" && e.rule === "actual-too-large");
  assert.throws(() => l.settle(reservation, 1, { now: 0, overage: "some" }), (e) => e instanceof TypeError && e.field === "overage");
  assert.throws(() => l.settle({ key: "k" }, 1), (e) => e instanceof TypeError && e.field === "reservation" && e.rule === "not-a-reservation");
  // None of those settled it: it still settles.
  assert.deepEqual(l.settle(reservation, 0, { now: 0 }), { refunded: 1, charged: 0, unpaid: 0 });
});

test("a reservation of another limiter, policy or key is the core's named error, and stays unsettled", () => {
  const a = new Limiter("10/s");
  const same = new Limiter("10/s");
  const other = new Limiter("20/s");
  const { reservation } = a.reserve("k", 4, { now: 0 });
  const refused = (l, r, rule) => assert.throws(() => l.settle(r, 0, { now: 0 }), (e) => e instanceof RangeError && e.field === "reservation" && e.rule === rule);
  refused(same, reservation, "foreign-limiter");
  refused(other, reservation, "foreign-policy");
  refused(a, { ...reservation, key: "j" }, "foreign-key");
  assert.equal(a.peek("k", { now: 0 }).remaining, 6);
  assert.equal(a.settle(reservation, 0, { now: 0 }).refunded, 4);
});

test("the record of open reservations is bounded: one dropped from it stays charged, and settling it is unknown-reservation", () => {
  const l = new Limiter("fixed-window 100/min", { maxReservations: 2 });
  const first = l.reserve("k", 10, { now: 0 }).reservation;
  l.reserve("k", 10, { now: 0 });
  const third = l.reserve("k", 10, { now: 0 }).reservation;
  assert.throws(() => l.settle(first, 0, { now: 0 }), (e) => e instanceof RangeError && e.rule === "unknown-reservation");
  assert.equal(l.peek("k", { now: 0 }).remaining, 70);
  assert.equal(l.settle(third, 0, { now: 0 }).refunded, 10);
  assert.throws(() => new Limiter("10/s", { maxReservations: 0 }), (e) => e instanceof RangeError && e.field === "maxReservations");
});
