// The demo page from a plain static server in headless Chromium: it loads without console
// errors, the playground's decisions are the core's, the burst chart shows the core's own
// experiment maxima, it is usable by keyboard and fits a phone. Screenshots of every
// algorithm's view go to artifacts/demo/ (git-ignored).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { serveWww, launch, open, artifacts } from "./browser.mjs";

let server, chrome, page, shots;

before(async () => {
  server = await serveWww();
  chrome = await launch();
  shots = await artifacts();
  page = await open(chrome.context, `${server.base}/`);
});

after(async () => {
  await chrome?.close();
  await server?.close();
});

async function choose(algorithm, { limit = "10", window = "1000", burst = "" } = {}) {
  await page.selectOption("#algorithm", algorithm);
  await page.fill("#limit", limit);
  await page.dispatchEvent("#limit", "change");
  await page.selectOption("#window", window);
  if (!(await page.isDisabled("#burst"))) {
    await page.fill("#burst", burst);
    await page.dispatchEvent("#burst", "change");
  }
}

/** The state the page shows (the core's JSON), once the next frame has drawn it. */
async function shownState() {
  await page.waitForFunction(() => document.getElementById("state-json").textContent.startsWith("{"), null, { timeout: 5_000 });
  return JSON.parse(await page.textContent("#state-json"));
}

const counts = async () => ({
  admitted: Number(await page.textContent("#count-admitted")),
  rejected: Number(await page.textContent("#count-rejected")),
});

test("the page loads the core with no console errors", async () => {
  assert.match(await page.textContent("#boot"), /Core loaded/);
  assert.equal(await page.textContent("#policy-text"), "token-bucket 10/s");
  assert.deepEqual(page.problems, []);
});

test("token bucket, limit 10: a burst of 20 shows 10 admitted and 10 rejected", async () => {
  await choose("token-bucket", { limit: "10" });
  assert.equal(await page.textContent("#policy-text"), "token-bucket 10/s");
  await page.fill("#burst-size", "20");
  await page.click("#fire-burst");
  assert.deepEqual(await counts(), { admitted: 10, rejected: 10 });
  assert.match(await page.textContent("#verdict"), /Burst of 20: 10 admitted, 10 rejected/);
  assert.equal(await page.textContent("#d-remaining"), "0 of 10");
  // The core said when to retry: one token at 10/s is 100 ms away.
  assert.equal(await page.textContent("#d-retry"), "100 ms");
  // The drawn state is the core's: an empty bucket right after the burst, refilling later.
  const json = await shownState();
  assert.ok(json["token-bucket"].credit < 10 * 1e9, "the bucket is below full");
  assert.deepEqual(page.problems, []);
});

test("an invalid policy shows the core's error naming the field and rule", async () => {
  await choose("fixed-window", { limit: "0" });
  assert.equal(await page.isVisible("#policy-error"), true);
  assert.match(await page.textContent("#policy-error"), /limit.*\[zero\]/);
  await choose("fixed-window", { limit: "10" });
  assert.equal(await page.isVisible("#policy-error"), false);
});

test("the burst chart renders five series with the core experiment's maxima", async () => {
  await page.waitForSelector("#burst-svg[data-ready=true]");
  const series = await page.$$eval("#burst-svg path.series", (ps) =>
    Object.fromEntries(ps.map((p) => [p.dataset.series, Number(p.dataset.max)])));
  assert.deepEqual(series, {
    "fixed-window": 20,
    "sliding-log": 10,
    "sliding-window": 11,
    "token-bucket": 19,
    "leaky-queue": 10,
  });
  const rows = await page.$$eval("#burst-table tbody tr", (rs) => rs.map((r) => r.querySelector(".max").textContent));
  assert.deepEqual(rows, ["20", "10", "11", "19", "10"]);
  const chart = await page.$("#experiment");
  await chart.screenshot({ path: join(shots, "burst-experiment.png") });
});

const ALGORITHMS = ["token-bucket", "gcra", "sliding-window", "fixed-window", "sliding-log", "leaky-bucket", "leaky-queue"];

test("every algorithm's view draws the core's state after a burst (screenshots)", async () => {
  for (const id of ALGORITHMS) {
    await choose(id, { limit: "10", window: "5000", burst: id === "leaky-queue" ? "8" : "" });
    if (id === "fixed-window") {
      // Windows are aligned to the page clock: start early in one, so the count is still
      // there (not reset at a boundary) when the state is read.
      await page.waitForFunction(() => performance.now() % 5000 < 2500, null, { timeout: 6_000 });
    }
    await page.fill("#burst-size", "6");
    await page.click("#fire-burst");
    await page.waitForTimeout(200);
    await page.click("#fire-one");
    await page.waitForTimeout(300);
    const c = await counts();
    assert.equal(c.admitted + c.rejected, 7, id);
    assert.ok(c.admitted >= 6, `${id}: the first 6 of a fresh key fit`);
    // The state shown is the core's JSON for this algorithm (not fresh after admissions).
    const json = await shownState();
    assert.ok(json[id], `${id}: state ${JSON.stringify(json)}`);
    assert.ok((await page.$$("#state-svg > *")).length > 5, `${id}: state drawn`);
    assert.ok((await page.$$("#timeline-svg circle")).length >= 7, `${id}: timeline drawn`);
    await (await page.$("#playground")).screenshot({ path: join(shots, `${id}.png`) });
  }
  assert.deepEqual(page.problems, []);
});

test("a stream at R/s is admitted and rejected by the core as it runs", async () => {
  await choose("sliding-log", { limit: "5", window: "1000" });
  await page.fill("#stream-rate", "20");
  await page.click("#stream");
  assert.equal(await page.getAttribute("#stream", "aria-pressed"), "true");
  await page.waitForFunction(() => Number(document.getElementById("count-rejected").textContent) >= 3, null, { timeout: 10_000 });
  await page.click("#stream");
  assert.equal(await page.getAttribute("#stream", "aria-pressed"), "false");
  const c = await counts();
  assert.ok(c.admitted >= 5 && c.rejected >= 3, JSON.stringify(c));
});

test("usable by keyboard: Tab reaches every control and Enter sends a request", async () => {
  await choose("gcra", { limit: "3" });
  await page.click("#reset");
  await page.focus("#algorithm");
  const reached = [];
  for (let i = 0; i < 25; i++) {
    await page.keyboard.press("Tab");
    reached.push(await page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName));
    if (reached.at(-1) === "fire-one") break;
  }
  assert.equal(reached.at(-1), "fire-one", reached.join(" "));
  assert.ok(reached.includes("limit") && reached.includes("window") && reached.includes("burst"), reached.join(" "));
  await page.keyboard.press("Enter");
  await page.keyboard.press("Enter");
  assert.deepEqual(await counts(), { admitted: 2, rejected: 0 });
  assert.equal(await page.getAttribute("#verdict", "aria-live"), "polite");
});

test("readable on a phone-sized screen: no horizontal scrolling", async () => {
  const phone = await open(chrome.context, `${server.base}/`, { viewport: { width: 390, height: 844 } });
  await phone.click("#fire-burst");
  await phone.waitForTimeout(300);
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `scrolls sideways by ${overflow}px`);
  await phone.screenshot({ path: join(shots, "phone.png"), fullPage: true });
  assert.deepEqual(phone.problems, []);
  await phone.close();
});
