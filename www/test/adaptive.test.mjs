// The adaptive concurrency experiment, in headless Chromium from a plain static server: the
// page's simulation (the wasm `Simulation`, the CLI's simulator) follows a capacity halving
// and comes back within the bounds `tollgate adapt simulate` holds its scenario 2 to
// (crates/cli/tests/adapt.rs, crates/cli/src/adapt/scenario.rs): 2x capacity offered, the
// workers halve at 60 s and return at 90 s; within 5 s of the halving the limit (a second's
// mean) is at most 65 and the p99 at most 1.5x the unloaded p99 (constant 10 ms service:
// 10 ms unloaded, so 15 ms), and it stays so until the capacity returns; within 10 s of the
// return the limit is back to at least 90. Time is stepped by the page's "Step 1 s" button
// (ten ticks of virtual time), never by the wall clock. Controls by keyboard, with a visible
// focus; on a phone, the chart's text is at least 12 px and no label is clipped.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { serveWww, launch, open, artifacts, labelProblems, smallestSvgText, slide } from "./browser.mjs";

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

/** The read-out after the last step: the time, the last second's mean limit and worst tick p99. */
async function now(p = page) {
  const d = await p.$eval("#ad-now", (e) => ({ ...e.dataset }));
  return { time: Number(d.time), limit: Number(d.limitMean), p99: Number(d.p99Max) };
}

/** Steps `seconds` seconds by keyboard on "Step 1 s"; returns the read-out after each. */
async function seconds(n) {
  const out = [];
  await page.focus("#ad-step");
  for (let i = 0; i < n; i++) {
    await page.keyboard.press("Enter");
    out.push(await now());
  }
  return out;
}


test("the simulation follows a capacity halving within the CLI's scenario 2 bounds, and comes back", async () => {
  await page.$eval("#adaptive", (e) => e.scrollIntoView());
  await slide(page, "ad-workers", 100);
  await slide(page, "ad-load", 20000); // 2x the capacity of 100 workers at 10 ms
  assert.equal(await page.textContent("#ad-load-out"), "20,000/s = 2× capacity");
  await page.click("#ad-restart");
  assert.equal(await page.getAttribute("#ad-play", "aria-pressed"), "false", "paused: only the test moves time");
  const first = await seconds(60);
  assert.equal(first.at(-1).time, 60);
  // Settled at the knee before the halving (scenario 1's band).
  assert.ok(first.slice(10).every((s) => s.limit >= 90 && s.limit <= 130), JSON.stringify(first.slice(10).map((s) => s.limit)));

  await slide(page, "ad-workers", 50);
  assert.equal(await page.textContent("#ad-workers-out"), "50 workers = 5,000 requests/s");
  const halved = await seconds(30);
  const ok = (s) => s.limit <= 65 && s.p99 <= 1.5 * 10;
  // From the 5th second after the halving to the return, every second within the bounds.
  const late = halved.slice(4);
  assert.ok(late.every(ok), `after the halving: ${JSON.stringify(halved)}`);
  // The limit fell because of the halving (it was above the bound before it), and never to
  // its floor (5): it sheds what the halved server cannot take, not the rest.
  assert.ok(first.at(-1).limit > 65, `before the halving: ${first.at(-1).limit}`);
  assert.ok(halved.every((s) => s.limit > 5), `at the floor: ${JSON.stringify(halved.map((s) => s.limit))}`);

  await slide(page, "ad-workers", 100);
  const back = await seconds(10);
  assert.ok(back.some((s) => s.limit >= 90), `back up within 10 s: ${JSON.stringify(back.map((s) => s.limit))}`);
  await (await page.$("#adaptive")).screenshot({ path: join(shots, "adaptive.png") });
  assert.deepEqual(page.problems, []);
});

test("the same slider moves at the same seed give the same run", async () => {
  const run = async () => {
    await page.click("#ad-restart");
    const a = await seconds(5);
    await slide(page, "ad-workers", 60);
    const b = await seconds(5);
    await slide(page, "ad-workers", 100);
    return [...a, ...b];
  };
  assert.deepEqual(await run(), await run());
});

test("the experiment's controls by keyboard, with a visible focus; Play runs and pauses", async () => {
  const outline = () => page.evaluate(() => {
    const s = getComputedStyle(document.activeElement);
    return { id: document.activeElement.id, style: s.outlineStyle, width: parseFloat(s.outlineWidth) };
  });
  await page.focus("#ad-workers");
  const reached = [];
  for (let i = 0; i < 6; i++) {
    const o = await outline();
    reached.push(o.id);
    assert.ok(o.style !== "none" && o.width >= 2, `focus on ${o.id} is visible: ${JSON.stringify(o)}`);
    await page.keyboard.press("Tab");
  }
  for (const id of ["ad-workers", "ad-load", "ad-play", "ad-step", "ad-restart"]) {
    assert.ok(reached.includes(id), `${id} reached by Tab: ${reached.join(" ")}`);
  }
  await page.click("#ad-restart");
  await page.focus("#ad-play");
  await page.keyboard.press("Space");
  assert.equal(await page.getAttribute("#ad-play", "aria-pressed"), "true");
  assert.equal(await page.textContent("#ad-play"), "Pause the simulation");
  // Running: virtual time moves with the page's frames (how far is not asserted).
  await page.waitForFunction(() => Number(document.getElementById("ad-now").dataset.time) > 0);
  await page.keyboard.press("Space");
  assert.equal(await page.getAttribute("#ad-play", "aria-pressed"), "false");
  const paused = await now();
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  assert.equal((await now()).time, paused.time, "paused: time stays");
});

test("on a phone: the chart's text is at least 12 px, no label clipped or overlapping, no sideways scrolling", async () => {
  const phone = await open(chrome.context, `${server.base}/`, { viewport: { width: 390, height: 844 } });
  await phone.$eval("#adaptive", (e) => e.scrollIntoView());
  await phone.click("#ad-step");
  const [px, text] = await smallestSvgText(phone, "#adaptive");
  assert.ok(px >= 12, `"${text}" is ${px.toFixed(1)} px`);
  assert.deepEqual(await labelProblems(phone, "#adaptive", "figcaption, .ad-now, .slider-head output"), []);
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `scrolls sideways by ${overflow}px`);
  await (await phone.$("#adaptive")).screenshot({ path: join(shots, "phone-adaptive.png") });
  assert.deepEqual(phone.problems, []);
  await phone.close();
});

test("a bad capacity or load is a RangeError naming the field and rule, and the run keeps its values", async () => {
  const errors = await page.evaluate(async () => {
    // The module the page initialised (same URL, same instance).
    const { Simulation } = await import("/pkg/tollgate_wasm.js");
    const caught = (f) => { try { f(); return null; } catch (e) { return `${e.name} ${e.field} ${e.rule}`; } };
    const sim = new Simulation(100, 20000, false, 1);
    const out = {
      fraction: caught(() => { sim.workers = 2.5; }),
      tooMany: caught(() => { sim.workers = 1001; }),
      zero: caught(() => { sim.load = 0; }),
      negative: caught(() => { sim.load = -5; }),
      nan: caught(() => { sim.load = NaN; }),
      tooMuch: caught(() => { sim.load = 1e9; }),
      ticks: caught(() => sim.step(1001)),
      constructed: caught(() => new Simulation(-1, 1000, false, 1)),
      kept: [sim.workers, sim.load],
    };
    sim.free();
    return out;
  });
  assert.deepEqual(errors, {
    fraction: "RangeError workers out-of-range",
    tooMany: "RangeError workers out-of-range",
    zero: "RangeError load zero",
    negative: "RangeError load negative",
    nan: "RangeError load not-a-number",
    tooMuch: "RangeError load too-large",
    ticks: "RangeError ticks too-large",
    constructed: "RangeError workers out-of-range",
    kept: [100, 20000],
  });
});
