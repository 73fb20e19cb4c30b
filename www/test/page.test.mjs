// The demo page from a plain static server in headless Chromium: it loads without console
// errors, the playground's decisions are the core's, the reader's clock (pause, step, scrub)
// gives exactly the decisions of an uninterrupted run, labels fit their figures (desktop and
// phone, SVG text at least 12 px on the phone), the comparison draws the core's experiment
// maxima, and the controls work by keyboard with a visible focus. Screenshots of every view
// go to artifacts/demo/ (git-ignored).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { serveWww, launch, open, artifacts, labelProblems, smallestSvgText } from "./browser.mjs";

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

const ALGORITHMS = ["token-bucket", "gcra", "sliding-window", "fixed-window", "sliding-log", "leaky-bucket", "leaky-queue"];

async function choose(p, algorithm, { limit = "10", window = "1000", burst = "" } = {}) {
  await p.selectOption("#algorithm", algorithm);
  await p.fill("#limit", limit);
  await p.dispatchEvent("#limit", "change");
  await p.selectOption("#window", window);
  if (!(await p.isDisabled("#burst"))) {
    await p.fill("#burst", burst);
    await p.dispatchEvent("#burst", "change");
  }
}

/** A fresh session with the clock paused at 0. */
async function freshPaused(p = page) {
  if ((await p.getAttribute("#play", "aria-pressed")) === "true") await p.click("#play");
  assert.equal(await p.getAttribute("#play", "aria-pressed"), "false");
  await p.click("#reset");
}

/** Waits for the next two frames (the page redraws on requestAnimationFrame). */
const frames = (p = page) => p.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

const counts = async (p = page) => ({
  admitted: Number(await p.textContent("#count-admitted")),
  rejected: Number(await p.textContent("#count-rejected")),
});

/** The decisions the page lists for its session (the "every decision so far" table). */
async function pageDecisions() {
  await page.evaluate(() => { document.querySelector("#log-table").closest("details").open = true; });
  await frames();
  await frames();
  return page.$$eval("#log-table tbody tr", (rs) => rs.map((r) => JSON.parse(r.dataset.decision)));
}

/** An independent, uninterrupted run of `events` through the core (the page's own module). */
function independentRun(policy, events, peekAt) {
  return page.evaluate(async ({ policy, events, peekAt }) => {
    const { decide } = await import("/pkg/index.js");
    let state = null;
    const decisions = events.map((e) => {
      const r = decide(policy, state, e.t, e.cost);
      state = r.state;
      return r.decision;
    });
    return { decisions, peek: peekAt === undefined ? null : decide(policy, state, peekAt, 0).state };
  }, { policy, events, peekAt });
}

/** Loads a CLI-format CSV into the playground with `algorithm` (the paste box's button). */
async function playTrace(algorithm, csv, limit = "5") {
  await choose(page, algorithm, { limit });
  await page.evaluate(() => { document.getElementById("paste").open = true; });
  await page.fill("#trace-csv", csv);
  await page.fill("#trace-limit", limit);
  await page.selectOption("#trace-window", "1000");
  await page.click("#trace-play");
}

const setScrub = (ms) => page.evaluate((ms) => {
  const s = document.getElementById("scrub");
  s.value = String(ms);
  s.dispatchEvent(new Event("input", { bubbles: true }));
}, ms);

/** How many requests have happened, as the page shows it after its next frame. */
const index = async () => {
  await frames();
  return Number(await page.getAttribute("body", "data-index"));
};

test("the page loads the core with no console errors", async () => {
  assert.match(await page.textContent("#boot"), /Core loaded/);
  assert.equal(await page.textContent("#policy-text"), "token-bucket 10/s");
  assert.deepEqual(page.problems, []);
});

test("token bucket, limit 10: a burst of 20 shows 10 admitted and 10 rejected", async () => {
  await choose(page, "token-bucket", { limit: "10" });
  await freshPaused();
  await page.fill("#burst-size", "20");
  await page.click("#fire-burst");
  await frames();
  assert.deepEqual(await counts(), { admitted: 10, rejected: 10 });
  assert.match(await page.textContent("#verdict"), /20 at 0 s: 10 admitted, 10 rejected/);
  assert.equal(await page.textContent("#d-remaining"), "0 of 10");
  assert.equal(await page.textContent("#d-retry"), "100 ms");
  // The drawn state is the core's: an empty bucket at the paused instant.
  const json = JSON.parse(await page.textContent("#state-json"));
  assert.equal(json["token-bucket"].credit, 0);
  assert.equal(await page.textContent("#formula b"), "0");
  assert.deepEqual(page.problems, []);
});

test("an invalid policy shows the core's error naming the field and rule", async () => {
  await choose(page, "fixed-window", { limit: "0" });
  assert.equal(await page.isVisible("#policy-error"), true);
  assert.match(await page.textContent("#policy-error"), /limit.*\[zero\]/);
  await choose(page, "fixed-window", { limit: "10" });
  assert.equal(await page.isVisible("#policy-error"), false);
});

test("the Burst field is empty while disabled (window algorithms) and comes back for buckets", async () => {
  await choose(page, "token-bucket", { burst: "30" });
  assert.equal(await page.textContent("#policy-text"), "token-bucket 10/s burst 30");
  await page.selectOption("#algorithm", "fixed-window");
  assert.equal(await page.isDisabled("#burst"), true);
  assert.equal(await page.inputValue("#burst"), "", "no stale value in the disabled field");
  assert.equal(await page.textContent("#policy-text"), "fixed-window 10/s");
  await page.selectOption("#algorithm", "token-bucket");
  assert.equal(await page.inputValue("#burst"), "30");
  assert.equal(await page.textContent("#policy-text"), "token-bucket 10/s burst 30");
  await page.fill("#burst", "");
  await page.dispatchEvent("#burst", "change");
});

test("the queue: a rejected request shows no queue delay; the formula gives the next departure", async () => {
  await choose(page, "leaky-queue", { limit: "10", burst: "3" });
  await freshPaused();
  await page.fill("#burst-size", "4");
  await page.click("#fire-burst");
  await frames();
  assert.deepEqual(await counts(), { admitted: 3, rejected: 1 });
  assert.equal(await page.textContent("#d-delay"), "– (rejected: not queued)");
  assert.match(await page.textContent("#formula"), /= max\(0 s, 0\.3 s\) \+ 100 ms = 0\.4 s/);
  await page.fill("#burst-size", "1");
});

test("the sliding counter's worked formula is consistent: operands and result rounded alike", async () => {
  const csv = ["time_ms,key", ...Array.from({ length: 10 }, (_, i) => `${900 + i * 7},a`), "1248,a", "1249,a"].join("\n");
  await playTrace("sliding-window", csv, "10");
  await page.click("#play"); // pause
  for (const at of [1248, 1249, 1333, 1999]) {
    await setScrub(at);
    await frames();
    const text = await page.textContent("#formula");
    const m = text.match(/= (\d+) × ([\d.]+) \+ (\d+) = ([\d.]+)/);
    assert.ok(m, text);
    const [, prev, weight, cur, estimate] = m.map(Number);
    assert.equal(Number((prev * weight + cur).toFixed(4)), estimate, `${at} ms: ${m[0]}`);
    assert.equal(weight, Number((1 - (at - 1000) / 1000).toFixed(4)), `${at} ms: the weight is the exact 1 − elapsed/W`);
    // The verdict line agrees with the core's remaining.
    const remaining = Number(await page.getAttribute("#state-svg", "data-remaining"));
    assert.match(text, remaining >= 1 ? /Next request now: admitted/ : /Next request now: rejected/);
  }
});

test("the token bucket's worked formula: '=' only when the shown numbers give the shown result", async () => {
  // 7 per 3 s: a token is 428.571... ms, so the numbers do not all round exactly.
  const csv = ["time_ms,key", "0,a", "0,a", "0,a", "0,a", "0,a", "0,a", "0,a", "100,a", "333,a"].join("\n");
  await playTrace("token-bucket", csv, "7");
  await page.selectOption("#window", "5000");
  await page.click("#play"); // pause
  let exact = 0;
  for (const at of [333, 334, 500, 777, 1001, 1234, 2500, 3001]) {
    await setScrub(at);
    await frames();
    const text = await page.textContent("#formula");
    const m = text.match(/= min\((\d+), ([\d.]+) \+ ([\d.]+)\/s × ([\d.]+) s\) ([=≈]) ([\d.]+)/);
    assert.ok(m, text);
    const [, cap, t0, r, dt, sign, tokens] = m;
    const fromShown = Number(Math.min(Number(cap), Number(t0) + Number(r) * Number(dt)).toFixed(3));
    if (sign === "=") {
      exact++;
      assert.equal(fromShown, Number(tokens), `${at} ms: ${m[0]}`);
    } else {
      assert.notEqual(fromShown, Number(tokens), `${at} ms: ≈ only when rounding moved the result: ${m[0]}`);
    }
    // The result is the core's state, rounded like every other number.
    const credit = JSON.parse(await page.textContent("#state-json"))["token-bucket"].credit;
    assert.equal(Number(tokens), Number((credit / 5e9).toFixed(3)), `${at} ms`);
  }
  assert.ok(exact > 0);
});

// A trace with bursts at one instant, a boundary and a stream: for the clock test.
const TRACE = [
  ...Array.from({ length: 6 }, () => 0),
  ...Array.from({ length: 8 }, (_, i) => 120 * (i + 1)),
  999, 999, 999, 1000, 1000, 1000, 1000, 1001,
  1300, 1300, 1300,
  ...Array.from({ length: 9 }, (_, i) => 1500 + 50 * i),
];
const TRACE_CSV = ["time_ms,key,cost", ...TRACE.map((t) => `${t},k,1`)].join("\n");
const TRACE_EVENTS = TRACE.map((t) => ({ t, cost: 1 }));

test("pause, step and scrub give the same decisions as an uninterrupted run of the same trace", async () => {
  for (const algorithm of ALGORITHMS) {
    // Uninterrupted: the clock plays at 1x through the whole trace.
    await playTrace(algorithm, TRACE_CSV, "5");
    const policy = await page.textContent("#policy-text");
    await page.check("input[name=speed][value='1']");
    await page.waitForFunction((n) => Number(document.body.dataset.index) === n, TRACE.length, { timeout: 15_000 });
    const played = await pageDecisions();
    await page.evaluate(() => { document.querySelector("#log-table").closest("details").open = false; });
    // Interrupted: pause, step, slow play, scrub back and forth, step again, jump to the end.
    await playTrace(algorithm, TRACE_CSV, "5");
    await page.click("#play");
    await setScrub(0);
    assert.equal(await index(), 6, `${algorithm}: the 6 requests at 0 ms have happened at 0 ms`);
    for (let i = 0; i < 7; i++) await page.click("#step");
    assert.equal(await index(), 13, `${algorithm}: one request per step`);
    // Into the middle of the bursts at 999 and 1000 ms, one request at a time.
    await setScrub(960);
    for (let i = 0; i < 5; i++) await page.click("#step");
    assert.equal(await index(), 19);
    assert.match(await page.textContent("#clock-time"), /^1\.000 s · request 19 of 34/);
    await page.check("input[name=speed][value='0.1']");
    await page.click("#play");
    await page.waitForTimeout(300);
    await page.click("#play");
    await setScrub(1000);
    await frames();
    // The state at a scrubbed instant is the core's after the requests up to it.
    const upTo = TRACE_EVENTS.filter((e) => e.t <= 1000);
    assert.equal(await index(), upTo.length);
    const independent = await independentRun(policy, upTo, 1000);
    const shown = await page.textContent("#state-json");
    assert.deepEqual(JSON.parse(shown.startsWith("null") ? "null" : shown), JSON.parse(independent.peek), `${algorithm}: state at 1000 ms`);
    await setScrub(300);
    for (let i = 0; i < 3; i++) await page.click("#step");
    await setScrub(1300);
    await page.click("#to-end");
    await frames();
    assert.equal(await index(), TRACE.length);
    const stepped = await pageDecisions();
    await page.evaluate(() => { document.querySelector("#log-table").closest("details").open = false; });
    const { decisions } = await independentRun(policy, TRACE_EVENTS);
    assert.equal(decisions.length, TRACE.length);
    assert.ok(decisions.some((d) => !d.allowed), `${algorithm}: the trace exercises rejections`);
    assert.deepEqual(played, decisions, `${algorithm}: played at 1x = an uninterrupted run`);
    assert.deepEqual(stepped, decisions, `${algorithm}: paused, stepped and scrubbed = an uninterrupted run`);
  }
  assert.deepEqual(page.problems, []);
});

test("the timeline counts every request, zooms to 1 s, and a stack shows its instant's state", async () => {
  await choose(page, "token-bucket", { limit: "10" });
  await freshPaused();
  await page.fill("#burst-size", "25");
  await page.click("#fire-burst");
  await page.check("input[name=speed][value='1']");
  await page.click("#play");
  await page.waitForFunction(() => Number(document.getElementById("clock-time").textContent.split(" ")[0]) >= 0.3);
  await page.click("#play");
  await page.fill("#burst-size", "1");
  await page.click("#fire-burst");
  await page.selectOption("#zoom", "1000");
  await frames();
  const lanes = await page.$$eval("#timeline-svg g.stack", (gs) => gs.reduce((m, g) => {
    m[g.dataset.lane] = (m[g.dataset.lane] ?? 0) + Number(g.dataset.count);
    return m;
  }, {}));
  assert.deepEqual(lanes, { ok: 11, no: 15 }, "25 at once: 10 admitted and 15 rejected, then 1 admitted, all counted");
  assert.equal(await page.textContent("#timeline-counts"), "In view: 11 admitted, 15 rejected");
  // Pointing at the burst's rejected stack previews the state right after its last request.
  // (Queried in one call: the timeline is redrawn every frame.)
  const target = await page.evaluate(() => {
    document.getElementById("timeline-svg").scrollIntoView({ block: "center" });
    const g = document.querySelector("#timeline-svg g.stack[data-lane=no]");
    const r = g.querySelector(".hit").getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2, index: Number(g.dataset.index) };
  });
  assert.equal(target.index, 24);
  await page.mouse.move(target.x - 3, target.y);
  await page.mouse.move(target.x, target.y);
  await frames();
  assert.equal(await page.getAttribute("#preview-note", "class"), "preview-note previewing");
  assert.match(await page.textContent("#preview-note"), /after request #25/);
  const policy = await page.textContent("#policy-text");
  const expected = await independentRun(policy, Array.from({ length: 25 }, () => ({ t: 0, cost: 1 })), 0);
  assert.deepEqual(JSON.parse(await page.textContent("#state-json")), JSON.parse(expected.peek));
  await page.screenshot({ path: join(shots, "timeline-hover.png"), clip: await (await page.$(".timeline")).boundingBox() });
  // Clicking (tapping) it moves the clock there.
  await page.mouse.down();
  await page.mouse.up();
  await page.mouse.move(5, 5);
  await frames();
  assert.equal(await index(), 25);
  assert.match(await page.textContent("#clock-time"), /^0\.000 s/);
  await page.selectOption("#zoom", "10000");
});

test("every algorithm's view: the core's state, labels inside their figures, none overlapping (screenshots)", async () => {
  for (const id of ALGORITHMS) {
    // A 5 s window: the state is still there (not back to fresh) after the clock has run a little.
    await choose(page, id, { limit: "10", window: "5000", burst: id === "leaky-queue" ? "8" : "" });
    await freshPaused();
    await page.fill("#burst-size", "6");
    await page.click("#fire-burst");
    await page.check("input[name=speed][value='1']");
    await page.click("#play");
    await page.waitForTimeout(250);
    await page.click("#play");
    await page.click("#fire-one");
    await page.check("input[name=speed][value='0.25']");
    await page.click("#play");
    await page.waitForTimeout(250);
    await page.click("#play");
    await frames();
    const c = await counts();
    assert.deepEqual(c, { admitted: 7, rejected: 0 }, id);
    const json = JSON.parse(await page.textContent("#state-json"));
    assert.ok(json[id], `${id}: state ${JSON.stringify(json)}`);
    assert.ok((await page.$$("#state-svg > *")).length > 5, `${id}: state drawn`);
    assert.deepEqual(await labelProblems(page, "#playground"), [], id);
    await (await page.$("#playground")).screenshot({ path: join(shots, `${id}.png`) });
  }
  assert.deepEqual(page.problems, []);
});

test("the burst experiment: small multiples with the core's maxima, bounds, and the queue's whole output", async () => {
  await page.click("#cmp-burst");
  await page.waitForSelector("#multiples[data-ready=true]");
  const series = await page.$$eval("#multiples path.series", (ps) =>
    Object.fromEntries(ps.map((p) => [p.dataset.series, Number(p.dataset.max)])));
  assert.deepEqual(series, {
    input: series.input,
    "fixed-window": 20,
    "sliding-log": 10,
    "sliding-window": 11,
    "token-bucket": 19,
    "leaky-queue": 10,
  });
  const rows = await page.$$eval("#burst-table tbody tr", (rs) => rs.map((r) => [r.querySelector(".max").textContent, r.lastElementChild.textContent]));
  assert.deepEqual(rows, [["20", "20"], ["10", "10"], ["11", "none"], ["19", "20"], ["10", "10"]]);
  // The chart runs past the queue's last departure (the old one stopped at 6.3 s).
  const end = Number(await page.getAttribute("#multiples", "data-end"));
  const policy = "leaky-queue 10/s";
  const csv = await (await fetch(`${server.base}/data/burst80.csv`)).text();
  const events = csv.trim().split("\n").slice(1).filter((l) => !l.startsWith("#")).map((l) => ({ t: Number(l.split(",")[0]), cost: 1 }));
  const { decisions } = await independentRun(policy, events);
  const lastOut = Math.max(...decisions.map((d, i) => (d.allowed ? events[i].t + d.delay : 0)));
  assert.ok(end >= lastOut + 1000, `chart ends at ${end} ms, the queue's output at ${lastOut} ms`);
  assert.deepEqual(await labelProblems(page, "#experiment"), []);
  await (await page.$("#experiment")).screenshot({ path: join(shots, "burst-experiment.png") });
  await page.screenshot({ path: join(shots, "desktop.png"), fullPage: true });
});

test("a pasted trace: a bad line is named; a good one is compared side by side", async () => {
  await page.evaluate(() => { document.getElementById("paste").open = true; });
  await page.fill("#trace-csv", "time_ms,key\n0,a\nsoon,a\n");
  await page.click("#trace-run");
  assert.equal(await page.textContent("#trace-error"), 'Trace: line 3: time_ms "soon" is not a whole number of milliseconds');
  await page.fill("#trace-csv", "time_ms,key,cost\n# ten before the boundary, ten after\n950,a,10\n1000,a,10\n0,b,1\n");
  await page.fill("#trace-limit", "10");
  await page.click("#trace-run");
  assert.equal(await page.isVisible("#trace-error"), false);
  const max = await page.$$eval("#burst-table tbody tr", (rs) => Object.fromEntries(rs.map((r) => [r.dataset.series, Number(r.querySelector(".max").textContent)])));
  assert.deepEqual(max, { "fixed-window": 20, "sliding-log": 10, "sliding-window": 10, "token-bucket": 10, "leaky-queue": 10 });
  assert.match(await page.textContent("#multiples .panel-sub"), /key “a”; 1 other key/);
});

test("guided experiments: load the trace into the playground and answer with the core's numbers", async () => {
  const items = await page.$$("#guided > li");
  assert.equal(items.length, 4);
  const boundary = await page.$("#guided li[data-experiment=boundary]");
  await (await boundary.$(".watch")).click();
  assert.equal(await page.inputValue("#algorithm"), "fixed-window");
  assert.equal(await page.isChecked("input[name=speed][value='0.25']"), true);
  assert.equal(await page.getAttribute("#play", "aria-pressed"), "true");
  // The answer's numbers are written by the details' toggle event, which the browser
  // dispatches as a task after the click: wait for them rather than read at once.
  const answerOf = async (li) => {
    await (await li.$("summary")).click();
    await page.waitForFunction((el) => el.querySelector(".numbers-line").textContent !== "", li, { timeout: 5_000 });
    return (await li.$(".numbers-line")).textContent();
  };
  assert.match(await answerOf(boundary), /Fixed window 20, Sliding log 10/);
  await boundary.screenshot({ path: join(shots, "experiment-boundary.png") });
  const guess = await page.$("#guided li[data-experiment=guess]");
  assert.match(await answerOf(guess), /Sliding counter 15/);
  assert.equal(await page.$$eval("#choose-table tbody tr", (rs) => rs.length), 6);
});

test("a stream at R/s runs on the reader's clock and stops with it", async () => {
  await choose(page, "sliding-log", { limit: "5", window: "1000" });
  await freshPaused();
  await page.check("input[name=speed][value='1']");
  await page.fill("#stream-rate", "20");
  await page.click("#stream");
  assert.equal(await page.getAttribute("#stream", "aria-pressed"), "true");
  await page.waitForFunction(() => Number(document.getElementById("count-rejected").textContent) >= 3, null, { timeout: 10_000 });
  await page.click("#play");
  await frames(); // the counts are redrawn on the next frame
  const paused = await counts();
  await page.waitForTimeout(300);
  assert.deepEqual(await counts(), paused, "a paused clock sends nothing");
  await page.click("#step");
  await frames();
  const stepped = await counts();
  assert.equal(stepped.admitted + stepped.rejected, paused.admitted + paused.rejected + 1, "a step sends the stream's next request");
  await page.click("#stream");
  assert.equal(await page.getAttribute("#stream", "aria-pressed"), "false");
  assert.ok(paused.admitted >= 5 && paused.rejected >= 3, JSON.stringify(paused));
});

test("usable by keyboard with a visible focus: knobs, send, and the clock", async () => {
  await choose(page, "gcra", { limit: "3" });
  await freshPaused();
  const outline = () => page.evaluate(() => {
    const s = getComputedStyle(document.activeElement);
    return { id: document.activeElement.id || document.activeElement.name, style: s.outlineStyle, width: parseFloat(s.outlineWidth) };
  });
  await page.focus("#algorithm");
  const reached = [];
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press("Tab");
    const o = await outline();
    reached.push(o.id);
    assert.ok(o.style !== "none" && o.width >= 2, `focus on ${o.id} is visible: ${JSON.stringify(o)}`);
    if (o.id === "scrub") break;
  }
  for (const id of ["limit", "window", "burst", "fire-one", "play", "speed", "step", "to-end", "scrub"]) {
    assert.ok(reached.includes(id), `${id} reached by Tab: ${reached.join(" ")}`);
  }
  await page.focus("#fire-one");
  await page.keyboard.press("Enter");
  await page.keyboard.press("Enter");
  await frames();
  assert.deepEqual(await counts(), { admitted: 2, rejected: 0 });
  // Play and pause with the keyboard; a speed by arrow keys; scrub by arrow keys.
  await page.focus("#play");
  await page.keyboard.press("Space");
  assert.equal(await page.getAttribute("#play", "aria-pressed"), "true");
  await page.keyboard.press("Space");
  assert.equal(await page.getAttribute("#play", "aria-pressed"), "false");
  await page.focus("input[name=speed]:checked");
  const before = await page.inputValue("input[name=speed]:checked");
  await page.keyboard.press("ArrowRight");
  assert.notEqual(await page.inputValue("input[name=speed]:checked"), before);
  await page.focus("#scrub");
  const t0 = await page.inputValue("#scrub");
  await page.keyboard.press("ArrowLeft");
  await frames();
  assert.ok(Number(await page.inputValue("#scrub")) < Number(t0) || Number(t0) === 0);
  assert.equal(await page.getAttribute("#verdict", "aria-live"), "polite");
});

test("on a phone: no sideways scrolling, SVG text at least 12 px, no clipped or overlapping label", async () => {
  const phone = await open(chrome.context, `${server.base}/`, { viewport: { width: 390, height: 844 } });
  for (const id of ["token-bucket", "sliding-window", "fixed-window", "sliding-log", "leaky-queue", "gcra"]) {
    await choose(phone, id, { limit: "10", burst: id === "leaky-queue" ? "8" : "" });
    await freshPaused(phone);
    await phone.fill("#burst-size", "12");
    await phone.click("#fire-burst");
    await frames(phone);
    const [px, text] = await smallestSvgText(phone);
    assert.ok(px >= 12, `${id}: "${text}" is ${px.toFixed(1)} px`);
    assert.deepEqual(await labelProblems(phone), [], id);
    await (await phone.$("#playground .state")).screenshot({ path: join(shots, `phone-${id}-state.png`) });
    await (await phone.$("#playground .timeline")).screenshot({ path: join(shots, `phone-${id}-timeline.png`) });
  }
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `scrolls sideways by ${overflow}px`);
  await (await phone.$("#experiment")).screenshot({ path: join(shots, "phone-experiment.png") });
  await phone.screenshot({ path: join(shots, "phone.png"), fullPage: true });
  assert.deepEqual(phone.problems, []);
  await phone.close();
});
