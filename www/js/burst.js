// The burst experiment (tests/burst.rs), side by side: the trace data/burst80.csv (copied from
// tests/data by www/build.sh) through five algorithms, decided by the core, charted as the
// number admitted in the sliding second (t - 1 s, t]. For the queue, what counts is its
// output: arrival + the core's delay. Only the counting happens here.
import { decide } from "../pkg/index.js";
import { EXPERIMENT } from "./content.js";
import { el } from "./draw.js";

/** Arrival times (ms) of the trace. */
async function trace() {
  const text = await (await fetch(new URL("../data/burst80.csv", import.meta.url))).text();
  return text.trim().split("\n").slice(1).map((line) => Number(line.split(",")[0]));
}

/** Admitted instants (queue: departures), sorted, from the core's decisions. */
function run(policy, arrivals) {
  let state = null;
  const out = [];
  for (const t of arrivals) {
    const r = decide(policy, state, t, 1);
    state = r.state;
    if (r.decision.allowed) out.push(t + r.decision.delay);
  }
  return out.sort((a, b) => a - b);
}

/** How many of `times` lie in (end - 1000, end]. */
const inSecond = (times, end) => times.filter((t) => t <= end && t > end - 1000).length;

/** Runs the experiment and draws the chart into `svg` (viewBox 640 x 300) and `table`. */
export async function runExperiment(svg, table) {
  const arrivals = await trace();
  const end = Math.ceil((Math.max(...arrivals) + 1200) / 100) * 100;
  const X0 = 48, X1 = 620, Y0 = 250, Y1 = 56, YMAX = 22;
  const x = (t) => X0 + (t / end) * (X1 - X0);
  const y = (n) => Y0 - (n / YMAX) * (Y0 - Y1);
  const desc = svg.querySelector("desc");
  svg.replaceChildren(desc);
  for (let n = 0; n <= 20; n += 5) {
    svg.append(el("line", { x1: X0, x2: X1, y1: y(n), y2: y(n), class: "grid" }));
    svg.append(el("text", { x: X0 - 8, y: y(n) + 4, "text-anchor": "end", class: "tiny" }, String(n)));
  }
  for (let s = 0; s <= end; s += 1000) {
    svg.append(el("text", { x: x(s), y: Y0 + 18, "text-anchor": "middle", class: "tiny" }, `${s / 1000} s`));
  }
  svg.append(el("line", { x1: X0, x2: X1, y1: y(10), y2: y(10), class: "limit" }));
  svg.append(el("text", { x: X1, y: y(10) - 4, "text-anchor": "end", class: "tiny" }, "limit 10"));
  // The arrivals, as a rug under the axis.
  for (const t of arrivals) svg.append(el("line", { x1: x(t), x2: x(t), y1: Y0 + 24, y2: Y0 + 32, class: "rug" }));
  svg.append(el("text", { x: X0 - 8, y: Y0 + 32, "text-anchor": "end", class: "tiny" }, "in"));
  const body = table.tBodies[0];
  body.replaceChildren();
  const results = [];
  for (const series of EXPERIMENT) {
    const out = run(series.policy, arrivals);
    const max = Math.max(0, ...out.map((t) => inSecond(out, t)));
    // The step curve: the count changes only when an instant enters or leaves the second.
    const changes = [...new Set([0, ...out, ...out.map((t) => t + 1000), end])].filter((t) => t <= end).sort((a, b) => a - b);
    let d = "";
    let prev = 0;
    for (const t of changes) {
      const n = inSecond(out, t);
      d += d === "" ? `M${x(t)} ${y(n)}` : ` H${x(t)} V${y(n)}`;
      prev = n;
    }
    d += ` H${x(end)} V${y(prev)}`;
    const path = el("path", { d, stroke: series.color, class: "series", "data-series": series.id, "data-max": max });
    path.append(el("title", {}, `${series.name}: at most ${max} in any second`));
    svg.append(path);
    results.push({ ...series, admitted: out.length, max });
    const row = document.createElement("tr");
    row.dataset.series = series.id;
    const swatch = `<span class="swatch" style="background:${series.color}"></span>`;
    row.innerHTML = `<th scope="row">${swatch}${series.name}</th><td>${out.length}</td><td class="max">${max}</td>`;
    body.append(row);
  }
  // Direct labels at each series' maximum, staggered so they do not overlap.
  results.forEach((r, i) => {
    svg.append(el("rect", { x: X0 + (i % 3) * 195, y: 6 + Math.floor(i / 3) * 18, width: 10, height: 10, fill: r.color }));
    svg.append(el("text", { x: X0 + 14 + (i % 3) * 195, y: 15 + Math.floor(i / 3) * 18, class: "tiny strong" }, `${r.name}: max ${r.max}`));
  });
  svg.dataset.ready = "true";
  return results;
}
