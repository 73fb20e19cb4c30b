// The adaptive concurrency experiment: the simulator of `tollgate adapt simulate` (the
// `Simulation` class of the page's wasm build: the same server model and the core's
// gradient controller) stepped in virtual time, 100 ms a tick, while the reader moves the
// server's capacity and the offered load. Every number drawn is the simulation's; this file
// keeps the last minute of rows, draws them and averages them for the read-out.
import { Simulation } from "../pkg/tollgate_wasm.js";
import { el, fit, num } from "./draw.js";

const $ = (id) => document.getElementById(id);
/** The seed of every run: the same slider moves give the same run (the test relies on it). */
const SEED = 1;
/** What the chart shows: the last minute of virtual time. */
const SPAN_TICKS = 600;
/** The virtual time shown when the page opens: the limit's climb from 20 and its settling. */
const WARM_TICKS = 300;
/** Each worker serves one request per 10 ms (the simulator's service time). */
const PER_WORKER = 100;

const state = {
  sim: null,
  columns: [],
  rows: [], // the last SPAN_TICKS rows, each an object keyed by the simulation's columns
  workers: [], // the workers each shown tick ran with (the knee's line)
  playing: false,
  owed: 0, // virtual ms of real time not yet stepped
};

const thousands = (v) => Math.round(v).toLocaleString("en");
const perSecond = (v) => (v >= 10_000 ? `${num(v / 1000, 1)}k` : thousands(v));

function sliderValues() {
  return { workers: Number($("ad-workers").value), load: Number($("ad-load").value) };
}

/** The sliders' read-outs: capacity in requests/s, the load as a multiple of it. */
function describeSliders() {
  const { workers, load } = sliderValues();
  const capacity = workers * PER_WORKER;
  const workersText = `${workers} workers = ${thousands(capacity)} requests/s`;
  const loadText = `${thousands(load)}/s = ${num(load / capacity, 2)}× capacity`;
  $("ad-workers-out").textContent = workersText;
  $("ad-load-out").textContent = loadText;
  $("ad-workers").setAttribute("aria-valuetext", workersText);
  $("ad-load").setAttribute("aria-valuetext", loadText);
}

/** Steps `ticks` ticks and keeps their rows. */
function step(ticks) {
  const flat = state.sim.step(ticks);
  const n = state.columns.length;
  const workers = state.sim.workers;
  for (let i = 0; i < flat.length; i += n) {
    const row = {};
    state.columns.forEach((c, j) => { row[c] = flat[i + j]; });
    state.rows.push(row);
    state.workers.push(workers);
  }
  const extra = state.rows.length - SPAN_TICKS;
  if (extra > 0) {
    state.rows.splice(0, extra);
    state.workers.splice(0, extra);
  }
}

function restart() {
  const { workers, load } = sliderValues();
  state.sim?.free();
  state.sim = new Simulation(workers, load, false, SEED);
  state.rows = [];
  state.workers = [];
  state.owed = 0;
}

function setPlaying(on) {
  state.playing = on;
  const b = $("ad-play");
  b.textContent = on ? "Pause the simulation" : "Play the simulation";
  b.setAttribute("aria-pressed", String(on));
}

/** The read-out: the last tick, and the last second's mean limit and worst tick p99. */
function readout() {
  const out = $("ad-now");
  const last = state.rows.at(-1);
  if (!last) {
    out.textContent = "0 s: nothing simulated yet.";
    return;
  }
  const second = state.rows.slice(-10);
  const meanLimit = second.reduce((s, r) => s + r.limit, 0) / second.length;
  const p99 = Math.max(...second.map((r) => r.p99));
  out.dataset.time = String(last.time);
  out.dataset.limitMean = String(meanLimit);
  out.dataset.p99Max = String(p99);
  out.textContent = `${num(last.time, 1)} s: limit ${last.limit} (in flight ${last.inFlight}, queued at the server ${last.queue}); ` +
    `p99 ${num(last.p99, 1)} ms; served ${thousands(last.goodput)}/s, shed ${thousands(last.shed)}/s of ${thousands(last.offered)}/s offered.`;
}

/** One panel of the chart: lines over the shown ticks, with its title, 0 and maximum. */
function panel(svg, { top, h, x, W, X0, title, lines, max, reference }) {
  const y = (v) => top + h - (Math.min(v, max) / max) * h;
  svg.append(el("text", { x: X0, y: top - 6, class: "label strong" }, title));
  svg.append(el("text", { x: X0 - 4, y: top + 5, "text-anchor": "end", class: "label" }, perSecond(max)));
  svg.append(el("text", { x: X0 - 4, y: top + h, "text-anchor": "end", class: "label" }, "0"));
  svg.append(el("line", { x1: X0, x2: W - 12, y1: top + h, y2: top + h, class: "axis" }));
  if (reference !== undefined) {
    svg.append(el("line", { x1: X0, x2: W - 12, y1: y(reference), y2: y(reference), class: "ad-reference" }));
  }
  for (const { values, cls } of lines) {
    const d = values.map((v, i) => `${i === 0 ? "M" : "L"}${x(i).toFixed(1)} ${y(v).toFixed(1)}`).join(" ");
    if (d) svg.append(el("path", { d, class: `ad-line ${cls}` }));
  }
}

/** A scale's top: `v` rounded up to a round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten). */
function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(Math.max(v, 1)));
  return [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map((m) => m * p).find((m) => m >= v);
}

function draw() {
  const svg = $("ad-chart");
  const PANEL = 90, GAP = 34, TOP = 22;
  const H = TOP + 3 * PANEL + 2 * GAP + 28;
  const W = fit(svg, H);
  svg.replaceChildren();
  const X0 = 44, X1 = W - 12;
  const rows = state.rows;
  const x = (i) => X0 + ((i + SPAN_TICKS - rows.length) / (SPAN_TICKS - 1)) * (X1 - X0);
  const col = (c) => rows.map((r) => r[c]);
  const concurrency = niceMax(Math.max(1, ...col("limit"), ...col("inFlight"), ...state.workers) * 1.1);
  panel(svg, {
    top: TOP, h: PANEL, x, W, X0, max: concurrency, title: "Limit, in flight and workers",
    lines: [{ values: state.workers, cls: "workers" }, { values: col("inFlight"), cls: "inflight" }, { values: col("limit"), cls: "limit" }],
  });
  panel(svg, {
    top: TOP + PANEL + GAP, h: PANEL, x, W, X0, max: niceMax(Math.max(20, ...col("p99")) * 1.1),
    title: "p99 latency of answered requests, ms", reference: 10,
    lines: [{ values: col("p99"), cls: "p99" }],
  });
  panel(svg, {
    top: TOP + 2 * (PANEL + GAP), h: PANEL, x, W, X0, max: niceMax(Math.max(1, ...col("offered")) * 1.05),
    title: "Requests per second", lines: [{ values: col("shed"), cls: "shed" }, { values: col("goodput"), cls: "goodput" }],
  });
  // Time marks: whole seconds of virtual time, spaced to leave room for their text.
  const end = rows.at(-1)?.time ?? 0;
  const axisY = H - 6;
  const every = [5, 10, 20, 30].find((s) => ((X1 - X0) * s) / 60 >= 64) ?? 60;
  for (let s = Math.ceil((end - 60) / every) * every; s <= end; s += every) {
    if (s < 0) continue;
    const i = rows.length - 1 - Math.round((end - s) * 10);
    const xs = x(i);
    if (xs < X0 + 16 || xs > X1 - 16) continue;
    svg.append(el("text", { x: xs, y: axisY, "text-anchor": "middle", class: "label" }, `${s} s`));
  }
  // The chart is redrawn whole, so its description is an attribute of the <svg>.
  svg.setAttribute("aria-label", rows.length === 0 ? "The simulation: nothing simulated yet." :
    `The simulation's last ${num(rows.length / 10, 1)} s of virtual time, to ${num(end, 1)} s: the limit went from ${rows[0].limit} to ${rows.at(-1).limit}.`);
}

function render() {
  readout();
  draw();
}

let lastTs = null;
function loop(ts) {
  const dt = lastTs === null ? 0 : Math.min(250, ts - lastTs);
  lastTs = ts;
  if (state.playing) {
    state.owed += dt;
    const ticks = Math.floor(state.owed / Simulation.tickMs());
    if (ticks > 0) {
      state.owed -= ticks * Simulation.tickMs();
      step(ticks);
      render();
    }
  }
  requestAnimationFrame(loop);
}

/** Wires the experiment's controls; the wasm module must be initialised. */
export function setupAdaptive() {
  state.columns = Simulation.columns();
  describeSliders();
  restart();
  step(WARM_TICKS);
  $("ad-workers").addEventListener("input", () => {
    describeSliders();
    state.sim.workers = sliderValues().workers; // from the next tick on
  });
  $("ad-load").addEventListener("input", () => {
    describeSliders();
    state.sim.load = sliderValues().load;
  });
  $("ad-play").addEventListener("click", () => setPlaying(!state.playing));
  $("ad-step").addEventListener("click", () => {
    setPlaying(false);
    step(10);
    render();
  });
  $("ad-restart").addEventListener("click", () => {
    restart();
    render();
  });
  // Redrawn when its width changes (the chart's text stays at its CSS size).
  let width = 0;
  new ResizeObserver(([entry]) => {
    const w = Math.round(entry.contentRect.width);
    if (w !== width) {
      width = w;
      draw();
    }
  }).observe($("ad-figure"));
  setPlaying(false);
  render();
  requestAnimationFrame(loop);
}
