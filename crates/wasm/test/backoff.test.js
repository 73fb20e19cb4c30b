// fetchWithBackoff against a real HTTP server on 127.0.0.1: retries 429/503 for idempotent
// or keyed requests, honours Retry-After, gives up after maxAttempts. Small baseMs/capMs keep
// it quick; assertions are on attempts and statuses, never on elapsed time.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { fetchWithBackoff, Backoff, isRetryable, parseRetryAfter } from "tollgate";

let server;
let base;
/** Per path: the statuses to answer in turn (the last one repeats), and requests seen. */
const plans = new Map();
const seen = new Map();

before(async () => {
  server = createServer((req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    const n = (seen.get(path) ?? []).length;
    seen.set(path, [...(seen.get(path) ?? []), { method: req.method, key: req.headers["idempotency-key"] }]);
    const plan = plans.get(path) ?? [[200]];
    const [status, retryAfter] = plan[Math.min(n, plan.length - 1)];
    const headers = retryAfter === undefined ? {} : { "Retry-After": retryAfter };
    req.resume();
    req.on("end", () => {
      res.writeHead(status, headers);
      res.end(String(status));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
});
after(() => new Promise((r) => server.close(r)));

const quick = { baseMs: 1, capMs: 4, maxAttempts: 4 };

test("retries 429 then succeeds", async () => {
  plans.set("/a", [[429], [429], [200]]);
  const res = await fetchWithBackoff(`${base}/a`, undefined, quick);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "200");
  assert.equal(seen.get("/a").length, 3);
});

test("503 is retried; 500 is not", async () => {
  plans.set("/b", [[503], [200]]);
  assert.equal((await fetchWithBackoff(`${base}/b`, undefined, quick)).status, 200);
  assert.equal(seen.get("/b").length, 2);
  plans.set("/c", [[500], [200]]);
  assert.equal((await fetchWithBackoff(`${base}/c`, undefined, quick)).status, 500);
  assert.equal(seen.get("/c").length, 1);
});

test("gives up after maxAttempts and returns the last response", async () => {
  plans.set("/d", [[429]]);
  const res = await fetchWithBackoff(`${base}/d`, undefined, quick);
  assert.equal(res.status, 429);
  assert.equal(seen.get("/d").length, 4);
  plans.set("/d1", [[429]]);
  await fetchWithBackoff(`${base}/d1`, undefined, { ...quick, maxAttempts: 1 });
  assert.equal(seen.get("/d1").length, 1);
});

test("POST is retried only with an Idempotency-Key", async () => {
  plans.set("/e", [[429], [201]]);
  const plain = await fetchWithBackoff(`${base}/e`, { method: "POST", body: "x" }, quick);
  assert.equal(plain.status, 429);
  assert.equal(seen.get("/e").length, 1);
  plans.set("/f", [[429], [201]]);
  const keyed = await fetchWithBackoff(
    `${base}/f`,
    { method: "POST", body: "x", headers: { "Idempotency-Key": "k-1" } },
    quick,
  );
  assert.equal(keyed.status, 201);
  assert.deepEqual(seen.get("/f").map((s) => s.key), ["k-1", "k-1"]);
});

test("a Request input is cloned per attempt (its body is sent each time)", async () => {
  plans.set("/g", [[503], [200]]);
  const req = new Request(`${base}/g`, { method: "PUT", body: "payload" });
  assert.equal((await fetchWithBackoff(req, undefined, quick)).status, 200);
  assert.deepEqual(seen.get("/g").map((s) => s.method), ["PUT", "PUT"]);
});

test("Retry-After takes precedence over the jitter draw", () => {
  const b = new Backoff({ baseMs: 1, capMs: 4, maxAttempts: 5 });
  assert.equal(b.delay(1, "3"), 3000);
  const now = Date.UTC(1994, 10, 6, 8, 49, 37);
  assert.equal(b.delay(1, "Sun, 06 Nov 1994 08:49:47 GMT", now), 10_000);
  assert.equal(b.delay(5, "3"), -1); // attempts spent: give up even with a hint
  for (let i = 0; i < 200; i++) {
    const d = b.delay(3, null);
    assert.ok(d >= 0 && d <= 4, `full jitter within [0, min(cap, base*2^2)]: ${d}`);
  }
  assert.equal(b.ceiling(1), 1);
  assert.equal(b.ceiling(10), 4);
  assert.equal(parseRetryAfter("soon"), -1);
  assert.equal(isRetryable("GET", false, 429), true);
  assert.equal(isRetryable("POST", false, 503), false);
  assert.equal(isRetryable("POST", true, 503), true);
  assert.throws(() => new Backoff({ maxAttempts: 0 }), (e) => e instanceof RangeError && e.field === "maxAttempts");
});

test("parseRetryAfter: delay-seconds and the three HTTP-date forms, by the core", () => {
  const now = Date.UTC(1994, 10, 6, 8, 49, 37); // 784111777 s
  assert.equal(parseRetryAfter(" 0 ", 5), 0);
  assert.equal(parseRetryAfter("120", now), 120_000);
  assert.equal(parseRetryAfter("99999999999999999999999", 0), 18_446_744_073_710); // u64::MAX ns
  for (const form of ["Sun, 06 Nov 1994 08:49:47 GMT", "Sunday, 06-Nov-94 08:49:47 GMT", "Sun Nov  6 08:49:47 1994"]) {
    assert.equal(parseRetryAfter(form, now), 10_000, form);
    assert.equal(parseRetryAfter(` \t${form}\u0085`, now + 999), 10_000, "trimmed like Rust's str::trim; now in whole seconds");
  }
  assert.equal(parseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", 2_000_000_000_000), 0); // in the past: no wait
  assert.equal(parseRetryAfter("Wed, 02 Dec 2026 00:00:00 GMT", (1_796_169_600 - 60) * 1000), 60_000);
  assert.equal(parseRetryAfter("Thu, 01-Jan-70 00:00:10 GMT", 0), 10_000); // two-digit year 70 is 1970
  assert.equal(parseRetryAfter("Sat, 01-Jan-00 00:00:00 GMT", 0), 946_684_800_000); // 00 is 2000
  assert.equal(parseRetryAfter("Sun, 31 Feb 2030 00:00:00 GMT", 0), Date.UTC(2030, 1, 31)); // days run on, as in the core
  assert.equal(parseRetryAfter("Mon, 01 Jan 9999999 00:00:00 GMT", 0), 18_446_744_073_710); // saturates
  for (const bad of [
    "",
    "soon",
    "-1",
    "1.5",
    "Sun, 06 Nov 1994 08:49:37 PST",
    "Sun, 32 Nov 1994 08:49:37 GMT",
    "Sun, 00 Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 1994 25:49:37 GMT",
    "Sun, 06 Nov 1994 08:60:37 GMT",
    "Sun, 06 Nov 1994 08:49:61 GMT",
    "Sun, 06 Nov 1994 08:49 GMT",
    "Sun, 06 Nov 1994 08:49:37:00 GMT",
    "Sun, 06 nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 1969 08:49:37 GMT",
    "Sun, 06 Nov 1994 08:49:37 GMT extra",
    "Sun, 06 Nov 1994 08:49:37",
    "Sun, 06 Nov 4294967296 08:49:37 GMT",
    "Sunday, 06-Nov 08:49:37 GMT",
    "Sun Nov  6 08:49:37",
    "Sun Nov 6 08:49:37 1994 GMT",
    "1994-11-06T08:49:37Z",
  ]) {
    assert.equal(parseRetryAfter(bad, 0), -1, bad);
  }
  const b = new Backoff({ baseMs: 1, capMs: 4, maxAttempts: 5 });
  assert.equal(b.delay(1, "Sunday, 06-Nov-94 08:49:47 GMT", now), 10_000);
  const d = b.delay(1, "soon", now); // not valid: the jitter draw
  assert.ok(d >= 0 && d <= 1, `${d}`);
});

test("fetchWithBackoff honours an HTTP-date Retry-After", { timeout: 20_000 }, async () => {
  plans.set("/i", [[503, new Date(Date.now() - 5000).toUTCString()], [200]]);
  assert.equal((await fetchWithBackoff(`${base}/i`, undefined, { ...quick, baseMs: 60_000, capMs: 60_000 })).status, 200);
  assert.equal(seen.get("/i").length, 2);
});

test("fetchWithBackoff waits for Retry-After (0 s here), not the 60 s jitter ceiling", { timeout: 20_000 }, async () => {
  plans.set("/h", [[429, "0"], [200]]);
  assert.equal((await fetchWithBackoff(`${base}/h`, undefined, { ...quick, baseMs: 60_000, capMs: 60_000 })).status, 200);
  assert.equal(seen.get("/h").length, 2);
});
