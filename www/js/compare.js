// Side by side: one trace through several algorithms, decided by the core, drawn as small
// multiples (one panel per algorithm, same time axis): the cost admitted in the sliding
// window (t − W, t], the limit, each algorithm's bound for one window, and where its busiest
// window is ("max here"). For the leaky queue what counts is its output (arrival + the core's
// delay), as the service behind it sees it. Only counting happens here; also parses the
// CLI's trace CSV (crates/cli/README.md).
import { el, fit, num } from "./draw.js";
import { replay } from "./session.js";

/** The algorithms compared (each with limit L per W; the buckets' capacity B, = L by default). */
export const COMPARED = [
  { id: "fixed-window", name: "Fixed window", color: "#d9480f", bound: (L) => [2 * L, "2 × limit: a burst on each side of a boundary"] },
  { id: "sliding-log", name: "Sliding log", color: "#2b8a3e", bound: (L) => [L, "the limit, exactly"] },
  { id: "sliding-window", name: "Sliding counter", color: "#1c7ed6", bound: () => [null, "no exact bound: an estimate; its excess over the limit is its error"] },
  { id: "token-bucket", name: "Token bucket (GCRA and leaky-bucket meter decide the same)", short: "Token bucket", color: "#ae3ec9", bound: (L, B) => [B + L, "B + r × W: the stored burst plus one window's refill"] },
  { id: "leaky-queue", name: "Leaky bucket queue (its output)", short: "Leaky queue (output)", color: "#495057", bound: (L) => [L, "r × W: the drain rate, whatever comes in"] },
];

/**
 * Parses the CLI's CSV trace: a header naming `time_ms` and `key` (any order), optional
 * `cost`; `#` comment lines. Returns { events: [{ t, cost }] for the first key, key, keys,
 * skipped } or throws an Error naming the line and the field.
 */
export function parseTrace(text) {
  const lines = text.split(/\r?\n/);
  let header = null;
  const byKey = new Map();
  lines.forEach((raw, n) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const cells = line.split(",").map((c) => c.trim());
    if (header === null) {
      header = cells;
      for (const need of ["time_ms", "key"]) {
        if (!header.includes(need)) throw new Error(`line ${n + 1}: the header has no "${need}" column (need time_ms and key; cost is optional)`);
      }
      return;
    }
    const get = (name) => cells[header.indexOf(name)];
    const time = get("time_ms");
    if (!/^\d+$/.test(time ?? "")) throw new Error(`line ${n + 1}: time_ms "${time ?? ""}" is not a whole number of milliseconds`);
    const costText = header.includes("cost") ? get("cost") : "";
    if (costText !== "" && costText !== undefined && !/^\d+$/.test(costText)) throw new Error(`line ${n + 1}: cost "${costText}" is not a whole number`);
    const key = get("key") ?? "";
    if (!byKey.has(key)) byKey.set(key, []);
    byKey.get(key).push({ t: Number(time), cost: costText ? Number(costText) : 1, line: n + 1 });
  });
  if (header === null) throw new Error("the trace is empty: paste a header (time_ms,key,cost) and one line per request");
  if (byKey.size === 0) throw new Error("the trace has a header but no requests");
  const [key, events] = byKey.entries().next().value;
  for (let i = 1; i < events.length; i++) {
    if (events[i].t < events[i - 1].t) throw new Error(`line ${events[i].line}: time_ms ${events[i].t} goes backwards (the trace must be in time order)`);
  }
  return { events: events.map(({ t, cost }) => ({ t, cost })), key, keys: byKey.size };
}

/** The policy text for algorithm `id`, limit L per `windowMs`, bucket capacity `burst`. */
export const policyFor = (id, limit, windowMs, burst) =>
  `${id} ${limit}/${windowMs}ms${burst !== undefined && (id === "token-bucket" || id === "leaky-queue") ? ` burst ${burst}` : ""}`;

/** Cost in (end − W, end] of `times` ({ t, cost }, sorted). */
const inWindow = (times, end, W) => times.reduce((s, e) => (e.t <= end && e.t > end - W ? s + e.cost : s), 0);

/** The step curve of the windowed count, its maximum and where it is reached first. */
function curve(times, W, end) {
  const changes = [...new Set([0, ...times.map((e) => e.t), ...times.map((e) => e.t + W), end])].filter((t) => t >= 0 && t <= end).sort((a, b) => a - b);
  const points = changes.map((t) => [t, inWindow(times, t, W)]);
  let max = 0, at = 0;
  for (const [t, n] of points) if (n > max) { max = n; at = t; }
  return { points, max, at };
}

/**
 * Runs `events` ({ t, cost }) through every compared algorithm and draws the panels into
 * `container` and the summary into `table`. Returns the results per algorithm.
 */
export function compare(container, table, { events, limit, windowMs, burst = limit, label = "" }) {
  const runs = COMPARED.map((a) => {
    const policy = policyFor(a.id, limit, windowMs, burst);
    const results = replay(policy, events);
    const out = [];
    results.forEach((r, i) => { if (r.decision.allowed) out.push({ t: events[i].t + r.decision.delay, cost: events[i].cost }); });
    out.sort((p, q) => p.t - q.t);
    return { ...a, policy, out, admitted: out.reduce((s, e) => s + e.cost, 0), requests: results.length };
  });
  const last = Math.max(0, ...events.map((e) => e.t), ...runs.flatMap((r) => r.out.map((e) => e.t)));
  const end = Math.ceil((last + windowMs + 200) / 500) * 500;
  const input = curve(events, windowMs, end);
  // One scale for the algorithms' panels (the input has its own: it may be far above them).
  const shared = Math.max(2 * limit, burst + limit, ...runs.map((r) => curve(r.out, windowMs, end).max)) * 1.12;
  container.replaceChildren();
  const panel = (title, sub, color, c, bound, id) => {
    const yMax = id ? shared : Math.max(c.max, limit) * 1.12;
    const box = document.createElement("div");
    box.className = "panel";
    if (id) box.dataset.series = id;
    const h = document.createElement("h4");
    h.innerHTML = `<span class="swatch"></span>`;
    h.firstChild.style.background = color;
    h.append(title);
    const p = document.createElement("p");
    p.className = "panel-sub";
    p.textContent = sub;
    const svg = el("svg", { role: "img", "aria-label": `${title}: ${sub}` });
    box.append(h, p, svg);
    container.append(box);
    const Hh = 150;
    const W = fit(svg, Hh);
    const x0 = 34, x1 = W - 10, top = 24, bottom = 118;
    const x = (t) => x0 + (t / end) * (x1 - x0);
    const y = (n) => bottom - (n / yMax) * (bottom - top);
    // The busiest window, shaded and labelled.
    if (c.max > 0) {
      svg.append(el("rect", { x: x(Math.max(0, c.at - windowMs)), y: top, width: x(c.at) - x(Math.max(0, c.at - windowMs)), height: bottom - top, class: "maxband" }));
      const lx = x(c.at - windowMs / 2);
      const text = `max ${c.max} here`;
      const half = text.length * 3.6;
      svg.append(el("text", { x: Math.min(Math.max(lx, x0 + half), x1 - half), y: top - 8, "text-anchor": "middle", class: "label strong" }, text));
    }
    // Value labels on the left: the limit, then the bound and the maximum where they differ
    // and there is room.
    const ticks = [0];
    for (const n of [limit, bound, id ? null : c.max, 2 * limit]) {
      if (n === null || n === undefined || ticks.some((m) => Math.abs(y(m) - y(n)) < 15)) continue;
      ticks.push(n);
    }
    for (const n of ticks) {
      svg.append(el("text", { x: x0 - 4, y: y(n) + 4, "text-anchor": "end", class: "label" }, String(n)));
    }
    svg.append(el("line", { x1: x0, x2: x1, y1: y(limit), y2: y(limit), class: "limit" }));
    if (bound !== null && bound !== limit) svg.append(el("line", { x1: x0, x2: x1, y1: y(bound), y2: y(bound), class: "bound" }));
    let d = "";
    for (const [t, n] of c.points) d += d === "" ? `M${x(t)} ${y(n)}` : ` H${x(t)} V${y(n)}`;
    d += ` H${x(end)}`;
    svg.append(el("path", { d: `${d} V${y(0)} H${x(0)} Z`, fill: color, class: "area" }));
    svg.append(el("path", { d, stroke: color, class: "series", "data-series": id ?? "input", "data-max": c.max }));
    svg.append(el("line", { x1: x0, x2: x1, y1: bottom, y2: bottom, class: "axis" }));
    const step = [500, 1000, 2000, 5000, 10000].find((s) => ((x1 - x0) * s) / end >= 48) ?? 20000;
    for (let s = 0; s <= end; s += step) {
      svg.append(el("line", { x1: x(s), x2: x(s), y1: bottom, y2: bottom + 4, class: "axis" }));
      if (x(s) + 14 < x1) svg.append(el("text", { x: Math.max(x(s), x0 + 10), y: bottom + 20, "text-anchor": "middle", class: "label" }, `${num(s / 1000, 1)} s`));
    }
    svg.dataset.max = String(c.max);
    return svg;
  };
  panel("What arrives", `${events.reduce((s, e) => s + e.cost, 0)} requests${label}; the most in any ${num(windowMs / 1000, 3)} s: ${input.max}`, "#868e96", input, null);
  const body = table.tBodies[0];
  body.replaceChildren();
  const results = runs.map((r) => {
    const c = curve(r.out, windowMs, end);
    const [bound, why] = r.bound(limit, burst);
    const sub = `admitted ${r.admitted} of ${r.requests}; at most ${c.max} in one window${bound === null ? "" : `; bound ${bound}`} (${why})`;
    panel(r.name, sub, r.color, c, bound, r.id);
    const row = document.createElement("tr");
    row.dataset.series = r.id;
    const cells = [r.short ?? r.name, r.admitted, c.max, bound ?? "none"];
    row.innerHTML = `<th scope="row"><span class="swatch"></span></th><td></td><td class="max"></td><td></td>`;
    row.querySelector(".swatch").style.background = r.color;
    row.children[0].append(cells[0]);
    row.children[1].textContent = String(cells[1]);
    row.children[2].textContent = String(cells[2]);
    row.children[3].textContent = String(cells[3]);
    body.append(row);
    return { id: r.id, name: r.short ?? r.name, admitted: r.admitted, max: c.max, at: c.at, bound };
  });
  container.dataset.end = String(end);
  container.dataset.ready = "true";
  return results;
}
