// The demo page's clock read-out and its controls' names, in headless Chromium from a plain
// static server: after a Step that finds no request ahead, every other move of the clock
// (Home/End and arrows on the scrubber, "Jump to the latest") shows the clock again; and
// every control has an accessible name of its own (as Chromium computes it for assistive
// technology), so a screen reader user can tell "Limit" of the playground from the pasted
// trace's.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { serveWww, launch, open } from "./browser.mjs";

let server, chrome, page;

before(async () => {
  server = await serveWww();
  chrome = await launch();
  page = await open(chrome.context, `${server.base}/`);
});

after(async () => {
  await chrome?.close();
  await server?.close();
});

const frames = () => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

/** The read-out once the page has drawn, and what it should say for the clock at the scrubber. */
async function readout() {
  await frames();
  return {
    text: await page.textContent("#clock-time"),
    clock: `${(Number(await page.inputValue("#scrub")) / 1000).toFixed(3)} s`,
  };
}

/** Step (by keyboard) with no request ahead: the read-out says so. */
async function stepAtTheEnd() {
  await page.focus("#step");
  await page.keyboard.press("Enter");
  const r = await readout();
  assert.match(r.text, /no request ahead/, `after Step with nothing ahead: ${r.text}`);
}

test("the clock read-out follows the clock after Step: Home, End, arrows and Jump to the latest", async () => {
  if ((await page.getAttribute("#play", "aria-pressed")) === "true") await page.click("#play");
  await page.click("#reset");
  await page.click("#fire-one"); // one request at 0 ms
  await page.focus("#scrub");
  await page.keyboard.press("End");
  let r = await readout();
  assert.notEqual(r.clock, "0.000 s", "End moved the clock");
  assert.equal(r.text, `${r.clock} · request 1 of 1`);
  const seconds = (clock) => Number(clock.split(" ")[0]);
  let furthest = seconds(r.clock);

  // [name, move, where the clock should be: "0", "later", "earlier" or "furthest" (the latest instant reached)]
  const moves = [
    ["Home on the scrubber", () => page.focus("#scrub").then(() => page.keyboard.press("Home")), "0"],
    ["End on the scrubber", () => page.focus("#scrub").then(() => page.keyboard.press("End")), "later"],
    ["ArrowLeft on the scrubber", () => page.focus("#scrub").then(() => page.keyboard.press("ArrowLeft")), "earlier"],
    ["Jump to the latest", () => page.focus("#to-end").then(() => page.keyboard.press("Enter")), "furthest"],
  ];
  for (const [name, move, where] of moves) {
    await stepAtTheEnd();
    const before = seconds(r.clock);
    await move();
    r = await readout();
    const now = seconds(r.clock);
    const ok = { 0: now === 0, later: now > before, earlier: now < before, furthest: now === furthest }[where];
    assert.ok(ok, `${name}: the clock moved (${before} s -> ${now} s, expected ${where})`);
    furthest = Math.max(furthest, now);
    assert.equal(r.text, `${r.clock} · request 1 of 1`, `${name}: the read-out shows the clock`);
  }

  // A Step that does find a request still reads out the clock (and the message is gone).
  await page.focus("#scrub");
  await page.keyboard.press("Home");
  await page.click("#fire-one");
  await page.focus("#scrub");
  await page.keyboard.press("End");
  await page.keyboard.press("Home");
  r = await readout();
  assert.equal(r.text, "0.000 s · request 2 of 2");
});

test("every control has an accessible name, and no two share one", async () => {
  // Every folded section open (a control in a closed <details> is not in the tree), and the
  // clock playing (its button then says "Pause", as live mode's disabled one does).
  await page.evaluate(() => { for (const d of document.querySelectorAll("details")) d.open = true; });
  if ((await page.getAttribute("#play", "aria-pressed")) !== "true") await page.click("#play");
  await frames();
  const cdp = await page.context().newCDPSession(page);
  const { nodes } = await cdp.send("Accessibility.getFullAXTree");
  const controls = new Set(["button", "textbox", "spinbutton", "combobox", "slider", "checkbox", "radio", "switch", "searchbox", "listbox"]);
  const named = new Map();
  const unnamed = [];
  for (const n of nodes) {
    if (n.ignored || !controls.has(n.role?.value)) continue;
    const name = (n.name?.value ?? "").trim();
    const what = `${n.role.value} "${name}"`;
    if (name === "") unnamed.push(what);
    named.set(name, [...(named.get(name) ?? []), what]);
  }
  assert.ok(named.size > 20, `the page's controls were found (${named.size} names)`);
  assert.deepEqual(unnamed, [], "controls without a name");
  const shared = [...named].filter(([name, all]) => name !== "" && all.length > 1).map(([name, all]) => `${name}: ${all.length}x (${all.join(", ")})`);
  assert.deepEqual(shared, [], "names shared by several controls");
});
