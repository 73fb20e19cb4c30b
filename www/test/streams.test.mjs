// The streams experiment (costs known after the response), in headless Chromium from a
// plain static server: parallel LLM calls on a budget of 10,000 tokens a minute, charged two
// ways by the page's wasm build of the core. Reserve-then-settle never charges past the
// budget while calls use at most their estimate; charge-after passes it once calls overlap;
// with calls that all fit, the two agree. The page's figures are the same as the npm
// package's in Node for the same calls (the model file run against the Node build).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { serveWww, launch, open, artifacts, labelProblems, ROOT, WWW, slide } from "./browser.mjs";

let server, chrome, page, shots;

before(async () => {
  server = await serveWww();
  chrome = await launch();
  page = await open(chrome.context, `${server.base}/`);
  shots = await artifacts();
});

after(async () => {
  await chrome?.close();
  await server?.close();
});

/** The table's rows: way -> { admitted, spent, peak }. */
async function rows() {
  const list = await page.$$eval("#st-table tbody tr", (trs) => trs.map((tr) => ({ ...tr.dataset })));
  return Object.fromEntries(list.map((r) => [r.way, { admitted: Number(r.admitted), spent: Number(r.spent), peak: Number(r.peak) }]));
}


test("reserve-then-settle holds the budget where charge-after overspends it", async () => {
  await page.$eval("#streams", (e) => e.scrollIntoView());
  await slide(page, "st-streams", 100);
  await slide(page, "st-estimate", 1000);
  const r = await rows();
  const settle = r["reserve-then-settle"], charge = r["charge-after"];
  assert.ok(settle.peak <= 10_000 && settle.spent <= 10_000, JSON.stringify(r));
  assert.ok(charge.spent > 10_000, JSON.stringify(r));
  assert.ok(charge.admitted > settle.admitted, JSON.stringify(r));
  await (await page.$("#streams")).screenshot({ path: join(shots, "streams.png") });
  assert.deepEqual(await labelProblems(page, "#streams"), []);
  assert.deepEqual(page.problems, []);
});

test("calls that all fit are charged the same both ways", async () => {
  await slide(page, "st-streams", 10);
  await slide(page, "st-estimate", 1000);
  const r = await rows();
  assert.equal(r["reserve-then-settle"].admitted, 10);
  assert.equal(r["charge-after"].admitted, 10);
  assert.equal(r["reserve-then-settle"].spent, r["charge-after"].spent);
});

test("the page's figures are the npm package's in Node for the same calls", async () => {
  await slide(page, "st-streams", 150);
  await slide(page, "st-estimate", 700);
  const shown = await rows();
  const { Limiter } = await import(pathToFileURL(join(ROOT, "crates/wasm/pkg-page/node/index.js")));
  const { calls, run } = await import(pathToFileURL(join(WWW, "js/streams-model.js")));
  const list = calls(150, 700);
  for (const way of ["charge-after", "reserve-then-settle"]) {
    const r = run(Limiter, way, list);
    assert.deepEqual(shown[way], { admitted: r.admitted, spent: r.spent, peak: r.peak }, way);
  }
});
