// The streams experiment: parallel LLM calls of one team on a budget of 10,000 tokens a
// minute, each call's cost known only when its stream ends, charged two ways side by side
// (streams-model.js plays them through the core's `Limiter.reserve`/`settle`). This file
// reads the sliders, draws the tokens charged over the minute and writes the table.
import { Limiter } from "../pkg/index.js";
import { el, fit, num } from "./draw.js";
import { BUDGET, calls, run } from "./streams-model.js";

const $ = (id) => document.getElementById(id);
const WAYS = ["charge-after", "reserve-then-settle"];
const thousands = (v) => Math.round(v).toLocaleString("en");

function values() {
  return { streams: Number($("st-streams").value), estimate: Number($("st-estimate").value) };
}

function describe() {
  const { streams, estimate } = values();
  $("st-streams-out").textContent = `${streams} calls`;
  $("st-estimate-out").textContent = `${thousands(estimate)} tokens`;
  $("st-streams").setAttribute("aria-valuetext", `${streams} calls`);
  $("st-estimate").setAttribute("aria-valuetext", `${estimate} tokens`);
}

function table(runs) {
  const body = $("st-table").tBodies[0];
  body.replaceChildren();
  for (const r of runs) {
    const over = Math.max(0, r.spent - BUDGET);
    // (HTML elements: draw.js's `el` makes SVG ones.)
    const tr = body.insertRow();
    Object.assign(tr.dataset, { way: r.way, spent: r.spent, peak: r.peak, admitted: r.admitted });
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = r.way;
    tr.append(th);
    for (const v of [r.admitted, r.denied, thousands(r.spent), over === 0 ? "none" : `${thousands(over)} (${num((100 * over) / BUDGET, 2)}% more)`]) {
      tr.insertCell().textContent = String(v);
    }
  }
}

function draw(runs) {
  const svg = $("st-chart");
  const H = 240, X0 = 56, TOP = 16, BOTTOM = 28;
  const W = fit(svg, H);
  svg.replaceChildren();
  const X1 = W - 12, h = H - TOP - BOTTOM;
  const max = Math.max(BUDGET * 1.25, ...runs.map((r) => r.peak)) * 1.05;
  const x = (ms) => X0 + (ms / 60_000) * (X1 - X0);
  const y = (v) => TOP + h - (v / max) * h;
  svg.append(el("line", { x1: X0, x2: X1, y1: TOP + h, y2: TOP + h, class: "axis" }));
  svg.append(el("line", { x1: X0, x2: X1, y1: y(BUDGET), y2: y(BUDGET), class: "ad-reference" }));
  svg.append(el("text", { x: X0 - 4, y: y(BUDGET) + 4, "text-anchor": "end", class: "label" }, "10k"));
  svg.append(el("text", { x: X0 - 4, y: TOP + h, "text-anchor": "end", class: "label" }, "0"));
  for (const r of runs) {
    // A step line: the charge holds until the next change.
    let d = "";
    r.curve.forEach(([t, v], i) => {
      d += i === 0 ? `M${x(t).toFixed(1)} ${y(v).toFixed(1)}` : `H${x(t).toFixed(1)} V${y(v).toFixed(1)}`;
    });
    d += `H${x(60_000).toFixed(1)}`;
    svg.append(el("path", { d, class: `st-line ${r.way}` }));
  }
  for (const s of [0, 20, 40, 60]) {
    // The last mark ends at the axis' end, inside the figure.
    const anchor = s === 60 ? "end" : s === 0 ? "start" : "middle";
    svg.append(el("text", { x: x(s * 1000), y: H - 8, "text-anchor": anchor, class: "label" }, `${s} s`));
  }
  const [after, settle] = runs;
  svg.setAttribute("aria-label", `Tokens charged over the minute: charge-after peaks at ${thousands(after.peak)}, ` +
    `reserve-then-settle at ${thousands(settle.peak)}, against a budget of ${thousands(BUDGET)}.`);
}

function update() {
  describe();
  const { streams, estimate } = values();
  const list = calls(streams, estimate);
  const runs = WAYS.map((w) => run(Limiter, w, list));
  table(runs);
  draw(runs);
}

/** Wires the experiment; the wasm module must be initialised. */
export function setupStreams() {
  for (const id of ["st-streams", "st-estimate"]) $(id).addEventListener("input", update);
  let width = 0;
  new ResizeObserver(([entry]) => {
    const w = Math.round(entry.contentRect.width);
    if (w !== width) {
      width = w;
      update();
    }
  }).observe($("st-figure"));
  update();
}
