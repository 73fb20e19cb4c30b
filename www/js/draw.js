// Draws a limiter's state, as the core returned it, into an SVG (viewBox 600 x 230). The
// numbers come from the core's JSON state (nanosecond integers; see the npm README's
// `decide`) and from its decision; this file only converts units and lays them out.

const NS = "http://www.w3.org/2000/svg";
const NS_PER_MS = 1e6;

/** Creates an SVG element with attributes and optional text. */
export function el(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

const fmt = (v, digits = 1) => (Math.abs(v - Math.round(v)) < 0.05 ? String(Math.round(v)) : v.toFixed(digits));
const msText = (v) => (v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${Math.max(0, Math.round(v))} ms`);

/** A vertical bucket with `fraction` filled, and scale ticks every unit when they fit. */
function bucket(svg, { x, fraction, capacity, color, label }) {
  const top = 24, h = 170, w = 150;
  svg.append(el("path", { d: `M${x} ${top} L${x + 8} ${top + h} L${x + w - 8} ${top + h} L${x + w} ${top}`, class: "vessel" }));
  const f = Math.max(0, Math.min(1, fraction));
  const fillH = f * (h - 2);
  const y = top + h - 1 - fillH;
  const inset = 8 * (1 - (y - top) / h);
  svg.append(el("path", {
    d: `M${x + inset + 1} ${y} L${x + w - inset - 1} ${y} L${x + w - 9} ${top + h - 1} L${x + 9} ${top + h - 1} Z`,
    fill: color, class: "fill",
  }));
  if (capacity <= 40) {
    for (let i = 1; i < capacity; i++) {
      const ty = top + h - (i / capacity) * h;
      svg.append(el("line", { x1: x + w - 16, x2: x + w - 4, y1: ty, y2: ty, class: "tick" }));
    }
  }
  svg.append(el("text", { x: x + w / 2, y: top + h + 24, "text-anchor": "middle", class: "label" }, label));
}

function lines(svg, x, y, rows) {
  rows.forEach(([text, cls], i) => svg.append(el("text", { x, y: y + i * 22, class: cls ?? "info" }, text)));
}

/** A horizontal time axis from `from` to `to` (ms) between x0 and x1 at y; returns x(t). */
function axis(svg, { from, to, x0 = 30, x1 = 570, y, ticksMs }) {
  const x = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
  svg.append(el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }));
  if (ticksMs) {
    for (let t = Math.ceil(from / ticksMs) * ticksMs; t <= to; t += ticksMs) {
      svg.append(el("line", { x1: x(t), x2: x(t), y1: y, y2: y + 5, class: "axis" }));
    }
  }
  return x;
}

function tokenBucket(svg, s, v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const tokens = s === null ? v.capacity : s["token-bucket"].credit / windowNs;
  bucket(svg, { x: 40, fraction: tokens / v.capacity, capacity: v.capacity, color: "var(--token)", label: `${fmt(tokens)} of ${v.capacity} tokens` });
  lines(svg, 230, 50, [
    [`Tokens now: ${fmt(tokens, 2)}`, "big"],
    [`Capacity (burst): ${v.capacity}`],
    [`Refill: ${v.limit} per ${msText(v.windowMs)}, added lazily`],
    [`Whole tokens to spend (remaining): ${v.decision.remaining}`],
    [s === null ? "Full bucket: the core keeps no state" : `Full again in ${msText(v.decision.resetAfter)}`],
    [`credit = tokens × window ns (exact integers)`, "note"],
  ]);
}

function leakyBucket(svg, s, v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const level = s === null ? 0 : s["leaky-bucket"].level / windowNs;
  bucket(svg, { x: 40, fraction: level / v.capacity, capacity: v.capacity, color: "var(--water)", label: `level ${fmt(level)} of ${v.capacity}` });
  if (level > 0) {
    const t = (v.now / 120) % 1;
    svg.append(el("circle", { cx: 115, cy: 200 + t * 22, r: 3, class: "drip" }));
  }
  lines(svg, 230, 50, [
    [`Level now: ${fmt(level, 2)}`, "big"],
    [`Capacity: ${v.capacity}`],
    [`Drains ${v.limit} per ${msText(v.windowMs)}`],
    [`Room for (remaining): ${v.decision.remaining}`],
    [s === null ? "Empty bucket: the core keeps no state" : `Empty again in ${msText(v.decision.resetAfter)}`],
    [`level = units × window ns (exact integers)`, "note"],
  ]);
}

function gcra(svg, s, v) {
  const intervalMs = v.windowMs / v.limit;
  const toleranceMs = v.capacity * intervalMs;
  const tatMs = s === null ? v.now : s.gcra.tat / v.limit / NS_PER_MS;
  const ahead = Math.max(0, tatMs - v.now);
  const x = axis(svg, { from: 0, to: toleranceMs * 1.15, y: 120, x0: 40, x1: 560 });
  svg.append(el("rect", { x: x(0), y: 90, width: x(Math.min(ahead, toleranceMs * 1.15)) - x(0), height: 30, class: "used" }));
  svg.append(el("rect", { x: x(ahead), y: 90, width: Math.max(0, x(toleranceMs) - x(ahead)), height: 30, class: "room" }));
  svg.append(el("line", { x1: x(toleranceMs), x2: x(toleranceMs), y1: 70, y2: 140, class: "limit" }));
  svg.append(el("text", { x: x(toleranceMs), y: 62, "text-anchor": "middle", class: "label" }, "now + burst tolerance"));
  svg.append(el("line", { x1: x(0), x2: x(0), y1: 80, y2: 140, class: "now" }));
  svg.append(el("text", { x: x(0), y: 156, "text-anchor": "middle", class: "label" }, "now"));
  svg.append(el("polygon", { points: `${x(ahead) - 7},80 ${x(ahead) + 7},80 ${x(ahead)},90`, class: "tat" }));
  svg.append(el("text", { x: x(ahead), y: 74, "text-anchor": "middle", class: "label strong" }, "TAT"));
  lines(svg, 40, 170, [
    [`TAT is ${msText(ahead)} ahead of now (state: tat ÷ limit)`],
    [`Each request pushes it ${fmt(intervalMs, 2)} ms; tolerance ${msText(toleranceMs)}`],
    [`Requests that fit before the tolerance (remaining): ${v.decision.remaining} of ${v.capacity}`, "info strong"],
  ]);
}

function leakyQueue(svg, s, v) {
  const intervalMs = v.windowMs / v.limit;
  const queued = v.capacity - v.decision.remaining;
  const departures = v.events.filter((e) => e.departure !== undefined && e.departure > v.now).map((e) => e.departure).sort((a, b) => a - b);
  const shown = Math.min(v.capacity, 20);
  const slotW = Math.min(40, 440 / shown);
  const x0 = 520 - shown * slotW;
  svg.append(el("rect", { x: x0 - 4, y: 56, width: shown * slotW + 8, height: 52, class: "pipe", rx: 6 }));
  for (let i = 0; i < shown; i++) {
    // Slot 0 is next to the exit (right).
    const x = 520 - (i + 1) * slotW;
    const filled = i < Math.round((queued / v.capacity) * shown);
    svg.append(el("rect", { x: x + 2, y: 62, width: slotW - 4, height: 40, rx: 4, class: filled ? "slot full" : "slot" }));
    if (filled && departures[i] !== undefined && slotW >= 30) {
      svg.append(el("text", { x: x + slotW / 2, y: 87, "text-anchor": "middle", class: "tiny" }, fmt((departures[i] - v.now) / 1000, 1)));
    }
  }
  svg.append(el("path", { d: "M528 82 L575 82 M565 72 L575 82 L565 92", class: "arrow" }));
  svg.append(el("text", { x: 550, y: 124, "text-anchor": "middle", class: "label" }, "to the service"));
  svg.append(el("text", { x: x0, y: 46, class: "label" }, `queue of ${v.capacity}${shown < v.capacity ? ` (drawn as ${shown})` : ""}: seconds until each leaves`));
  const lastMs = s === null ? null : s["leaky-queue"].last_departure / v.limit / NS_PER_MS;
  lines(svg, 40, 160, [
    [`Waiting now: ${queued} of ${v.capacity}; one leaves every ${fmt(intervalMs, 2)} ms`, "info strong"],
    [lastMs === null ? "Empty queue: the core keeps no state" : `The last one queued leaves in ${msText(lastMs - v.now)} (state: last departure)`],
    [`Longest wait: capacity ÷ rate = ${msText(v.capacity * intervalMs)}`, "note"],
  ]);
}

function windowBars(svg, { x, value, limit, label, weight, color }) {
  const top = 40, h = 130, w = 90;
  const scale = h / Math.max(limit, value, 1);
  svg.append(el("rect", { x, y: top, width: w, height: h, class: "vessel-rect" }));
  const bh = value * scale;
  svg.append(el("rect", { x, y: top + h - bh, width: w, height: bh, fill: color, class: weight === undefined ? "" : "faded" }));
  if (weight !== undefined) {
    const wh = value * weight * scale;
    svg.append(el("rect", { x, y: top + h - wh, width: w, height: wh, fill: color }));
  }
  svg.append(el("text", { x: x + w / 2, y: top + h + 20, "text-anchor": "middle", class: "label" }, label));
  return { top, h, scale };
}

function slidingWindow(svg, s, v) {
  const W = v.windowMs;
  const st = s === null ? { window: Math.floor(v.now / W), prev: 0, cur: 0 } : s["sliding-window"];
  const elapsed = Math.min(W, Math.max(0, v.now - st.window * W));
  const weight = 1 - elapsed / W;
  const estimate = st.prev * weight + st.cur;
  const a = windowBars(svg, { x: 40, value: st.prev, limit: v.limit, label: `previous: ${st.prev}`, weight, color: "var(--prev)" });
  windowBars(svg, { x: 150, value: st.cur, limit: v.limit, label: `current: ${st.cur}`, color: "var(--cur)" });
  const ly = a.top + a.h - v.limit * a.scale;
  svg.append(el("line", { x1: 32, x2: 248, y1: ly, y2: ly, class: "limit" }));
  svg.append(el("text", { x: 250, y: ly + 4, class: "label" }, `limit ${v.limit}`));
  // The sliding window over the two fixed windows.
  const x = axis(svg, { from: (st.window - 1) * W, to: (st.window + 1) * W, y: 206, x0: 300, x1: 580 });
  svg.append(el("rect", { x: x(st.window * W - W + elapsed), y: 192, width: x(W) - x(0), height: 10, class: "slide" }));
  svg.append(el("line", { x1: x(st.window * W), x2: x(st.window * W), y1: 186, y2: 212, class: "axis" }));
  svg.append(el("text", { x: 300, y: 224, class: "tiny" }, "previous window"));
  svg.append(el("text", { x: 580, y: 224, "text-anchor": "end", class: "tiny" }, "current window"));
  lines(svg, 310, 50, [
    [`estimate = prev × (1 − elapsed/W) + cur`, "note"],
    [`= ${st.prev} × ${weight.toFixed(2)} + ${st.cur} = ${estimate.toFixed(2)}`, "big"],
    [`${Math.round(elapsed)} ms into a ${msText(W)} window`],
    [`Room now (remaining): ${v.decision.remaining} of ${v.limit}`, "info strong"],
    [`The shaded part of “previous” still counts.`, "note"],
  ]);
}

function fixedWindow(svg, s, v) {
  const W = v.windowMs;
  const st = s === null ? { window: Math.floor(v.now / W), count: 0 } : s["fixed-window"];
  const a = windowBars(svg, { x: 60, value: st.count, limit: v.limit, label: `count: ${st.count}`, color: "var(--cur)" });
  const ly = a.top + a.h - v.limit * a.scale;
  svg.append(el("line", { x1: 52, x2: 160, y1: ly, y2: ly, class: "limit" }));
  svg.append(el("text", { x: 162, y: ly + 4, class: "label" }, `limit ${v.limit}`));
  const start = st.window * W;
  const x = axis(svg, { from: start - W, to: start + 2 * W, y: 206, x0: 300, x1: 580 });
  for (const b of [start, start + W]) svg.append(el("line", { x1: x(b), x2: x(b), y1: 190, y2: 214, class: "boundary" }));
  svg.append(el("rect", { x: x(start), y: 194, width: x(start + W) - x(start), height: 10, class: "slide" }));
  svg.append(el("line", { x1: x(v.now), x2: x(v.now), y1: 186, y2: 214, class: "now" }));
  svg.append(el("text", { x: x(v.now), y: 182, "text-anchor": "middle", class: "tiny" }, "now"));
  lines(svg, 300, 50, [
    [`${st.count} of ${v.limit} used in window #${st.window}`, "big"],
    [`Next boundary in ${msText(start + W - v.now)}: the count restarts at 0`],
    [`Room now (remaining): ${v.decision.remaining}`, "info strong"],
    [`Spend it just before and just after a boundary: 2 × limit.`, "note"],
  ]);
}

function slidingLog(svg, s, v) {
  const W = v.windowMs;
  const entries = s === null ? [] : s["sliding-log"].entries;
  const x = axis(svg, { from: v.now - W, to: v.now, y: 150, x0: 40, x1: 560, ticksMs: W / 10 });
  svg.append(el("text", { x: 40, y: 170, class: "tiny" }, `now − ${msText(W)} (expired)`));
  svg.append(el("text", { x: 560, y: 170, "text-anchor": "end", class: "tiny" }, "now"));
  let used = 0;
  for (const e of entries) {
    const at = e.at / NS_PER_MS;
    used += e.cost;
    for (let i = 0; i < Math.min(e.cost, 12); i++) {
      svg.append(el("circle", { cx: x(at), cy: 140 - i * 11, r: 5.5, class: "entry" }));
    }
    if (e.cost > 1) svg.append(el("text", { x: x(at), y: 140 - Math.min(e.cost, 12) * 11 - 2, "text-anchor": "middle", class: "tiny" }, `×${e.cost}`));
  }
  const oldest = entries[0];
  lines(svg, 40, 192, [
    [`${used} of ${v.limit} logged in (now − ${msText(W)}, now]; room (remaining): ${v.decision.remaining}`, "info strong"],
    [oldest ? `Oldest entry expires in ${msText(oldest.at / NS_PER_MS + W - v.now)}; ${entries.length} entr${entries.length === 1 ? "y" : "ies"} kept` : "Empty log: the core keeps no state", "note"],
  ]);
}

const DRAW = {
  "token-bucket": tokenBucket,
  gcra,
  "sliding-window": slidingWindow,
  "fixed-window": fixedWindow,
  "sliding-log": slidingLog,
  "leaky-bucket": leakyBucket,
  "leaky-queue": leakyQueue,
};

/**
 * Redraws `svg` for `view`: { algorithm, state (parsed JSON or null), decision (the peek's),
 * now (ms), windowMs, limit, capacity, events }.
 */
export function drawState(svg, view) {
  const desc = svg.querySelector("desc");
  svg.replaceChildren(desc);
  DRAW[view.algorithm](svg, view.state, view);
  svg.dataset.remaining = String(view.decision.remaining);
}
