// Draws a limiter's state, as the core returned it, into an SVG laid out in CSS pixels (the
// viewBox is the element's own width, so 13 px text is 13 px on every screen), and writes the
// algorithm's rule filled in with the live numbers into an HTML panel. The numbers come from
// the core's JSON state (nanosecond integers; see the npm README's `decide`) and decisions;
// this file converts units, lays them out and shows the arithmetic, it decides nothing.

const NS = "http://www.w3.org/2000/svg";
const NS_PER_MS = 1e6;

/** Creates an SVG element with attributes and optional text. */
export function el(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * A number rounded to `digits` decimals, trailing zeros dropped. Every number on the page
 * goes through it, so an operand and a result are rounded the same way.
 */
export const num = (v, digits = 3) => {
  const r = Number(v.toFixed(digits));
  return String(Object.is(r, -0) ? 0 : r);
};
/** A duration: whole ms below 10 s, else seconds with one decimal. */
export const msText = (v) => (v >= 10_000 ? `${num(v / 1000, 1)} s` : `${Math.max(0, Math.round(v))} ms`);
/** Seconds with up to 3 decimals (a whole ms is exact). */
const sec = (msv) => `${num(msv / 1000, 3)} s`;
const winText = (msv) => (msv % 1000 === 0 ? `${msv / 1000} s` : `${msv} ms`);

/** Sizes `svg` to its rendered width (at least `min`) and `h`; returns the width. */
export function fit(svg, h, min = 240) {
  const w = Math.max(min, Math.round(svg.getBoundingClientRect().width || svg.parentElement.clientWidth || 500));
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("height", String(h));
  return w;
}

const H = 230;
const ANIM_MS = 400; // how long (clock time) a request's arrival is animated

/** Requests that happened in the last ANIM_MS of clock time: { age 0..1, allowed, ... }. */
function recent(v) {
  return v.events.filter((e) => v.now - e.t < ANIM_MS && v.now >= e.t).slice(-12).map((e) => ({ ...e, age: (v.now - e.t) / ANIM_MS }));
}

/** A vertical vessel (bucket) with `fraction` filled and a tick per unit when they fit. */
function vessel(svg, { x, top, w, h, fraction, capacity, color }) {
  svg.append(el("path", { d: `M${x} ${top} L${x + 8} ${top + h} L${x + w - 8} ${top + h} L${x + w} ${top}`, class: "vessel" }));
  const f = Math.max(0, Math.min(1, fraction));
  const y = top + h - 1 - f * (h - 2);
  const inset = 8 * (1 - (y - top) / h);
  svg.append(el("path", {
    d: `M${x + inset + 1} ${y} L${x + w - inset - 1} ${y} L${x + w - 9} ${top + h - 1} L${x + 9} ${top + h - 1} Z`,
    fill: color, class: "fill",
  }));
  if (capacity <= 40) {
    for (let i = 1; i < capacity; i++) {
      const ty = top + h - (i / capacity) * h;
      svg.append(el("line", { x1: x + w - 18, x2: x + w - 6, y1: ty, y2: ty, class: "tick" }));
    }
  }
  svg.append(el("text", { x: x + w + 6, y: top + 5, class: "label" }, String(capacity)));
  svg.append(el("text", { x: x + w + 6, y: top + h, class: "label" }, "0"));
  return y;
}

function tokenBucket(svg, W, v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const tokens = v.state === null ? v.capacity : v.state["token-bucket"].credit / windowNs;
  const bw = Math.min(170, W * 0.45), x = 30, top = 40, h = 140;
  const level = vessel(svg, { x, top, w: bw, h, fraction: tokens / v.capacity, capacity: v.capacity, color: "var(--token)" });
  // The tap: tokens drip in while the bucket is not full.
  svg.append(el("rect", { x: x + 10, y: 8, width: 26, height: 10, rx: 2, class: "pipe" }));
  svg.append(el("text", { x: x + 44, y: 18, class: "label" }, `+${v.limit} per ${winText(v.windowMs)}`));
  if (tokens < v.capacity) {
    const t = (v.now / 200) % 1;
    svg.append(el("circle", { cx: x + 23, cy: 22 + t * (level - 24), r: 4, class: "token" }));
  }
  svg.append(el("text", { x: x + bw / 2, y: top + h + 24, "text-anchor": "middle", class: "label strong" }, `${num(tokens)} of ${v.capacity} tokens`));
  // Each request arriving: an admitted one takes a token out to the right; a rejected one
  // finds none and turns back.
  const outX = Math.min(W - 20, x + bw + 120);
  for (const r of recent(v)) {
    if (r.decision.allowed) {
      svg.append(el("circle", { cx: x + bw / 2 + r.age * (outX - x - bw / 2), cy: level + 6 + (1 - r.age) * 4, r: 6, class: "token moving", opacity: 1 - r.age * 0.6 }));
    } else {
      svg.append(el("circle", { cx: outX - r.age * 40, cy: top + 10, r: 6, class: "rejected moving", opacity: 1 - r.age }));
    }
  }
}

function leakyBucket(svg, W, v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const level = v.state === null ? 0 : v.state["leaky-bucket"].level / windowNs;
  const bw = Math.min(170, W * 0.45), x = 30, top = 40, h = 140;
  const y = vessel(svg, { x, top, w: bw, h, fraction: level / v.capacity, capacity: v.capacity, color: "var(--water)" });
  if (level > 0) {
    const t = (v.now / 150) % 1;
    svg.append(el("circle", { cx: x + bw / 2, cy: top + h + 4 + t * 8, r: 3, class: "drip" }));
  }
  svg.append(el("text", { x: x + bw / 2, y: 24, "text-anchor": "middle", class: "label" }, "requests pour in"));
  svg.append(el("text", { x: x + bw / 2, y: top + h + 30, "text-anchor": "middle", class: "label strong" }, `level ${num(level)} of ${v.capacity}`));
  svg.append(el("text", { x: x + bw + 6, y: top + h / 2, class: "label" }, `drains ${v.limit} per ${winText(v.windowMs)}`));
  for (const r of recent(v)) {
    const cx = x + bw / 2;
    if (r.decision.allowed) svg.append(el("circle", { cx, cy: 30 + r.age * (y - 30), r: 6, class: "drip moving", opacity: 1 - r.age * 0.5 }));
    else svg.append(el("circle", { cx: cx + r.age * 60, cy: 30, r: 6, class: "rejected moving", opacity: 1 - r.age }));
  }
}

function gcra(svg, W, v) {
  const intervalMs = v.windowMs / v.limit;
  const toleranceMs = v.capacity * intervalMs;
  const tatMs = v.state === null ? v.now : v.state.gcra.tat / v.limit / NS_PER_MS;
  const ahead = Math.max(0, tatMs - v.now);
  const span = toleranceMs * 1.15;
  const x0 = 20, x1 = W - 20;
  const x = (t) => x0 + (Math.min(t, span) / span) * (x1 - x0);
  const y = 110;
  svg.append(el("rect", { x: x(0), y: y - 30, width: x(ahead) - x(0), height: 30, class: "used" }));
  svg.append(el("rect", { x: x(ahead), y: y - 30, width: Math.max(0, x(toleranceMs) - x(ahead)), height: 30, class: "room" }));
  svg.append(el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }));
  svg.append(el("line", { x1: x(toleranceMs), x2: x(toleranceMs), y1: y - 44, y2: y + 16, class: "limit" }));
  svg.append(el("text", { x: x(toleranceMs), y: y + 52, "text-anchor": "end", class: "label" }, `tolerance: now + ${msText(toleranceMs)}`));
  svg.append(el("line", { x1: x(0), x2: x(0), y1: y - 44, y2: y + 16, class: "now" }));
  svg.append(el("text", { x: x(0), y: y + 32, class: "label" }, "now"));
  // The TAT marker; its label stays inside the figure.
  const tx = x(ahead);
  svg.append(el("polygon", { points: `${tx - 7},${y - 44} ${tx + 7},${y - 44} ${tx},${y - 32}`, class: "tat" }));
  const anchor = tx < 80 ? "start" : tx > W - 80 ? "end" : "middle";
  svg.append(el("text", { x: anchor === "start" ? Math.max(x0, tx - 7) : anchor === "end" ? Math.min(x1, tx + 7) : tx, y: y - 52, "text-anchor": anchor, class: "label strong" }, `TAT: now + ${msText(ahead)}`));
  for (const r of recent(v)) {
    if (r.decision.allowed) svg.append(el("rect", { x: x(ahead) - 4, y: y - 30, width: 4 + (1 - r.age) * 16, height: 30, class: "pushed", opacity: 1 - r.age }));
  }
}

function leakyQueue(svg, W, v) {
  const intervalMs = v.windowMs / v.limit;
  const waiting = v.events.filter((e) => e.decision.allowed && e.t + e.decision.delay > v.now).map((e) => e.t + e.decision.delay).sort((a, b) => a - b);
  const shown = Math.min(v.capacity, 20);
  const slotW = Math.min(44, (W - 70) / shown);
  const exitX = 20 + shown * slotW;
  const y = 70;
  svg.append(el("rect", { x: 16, y: y - 6, width: shown * slotW + 8, height: 52, class: "pipe", rx: 6 }));
  const perSlot = v.capacity / shown;
  for (let i = 0; i < shown; i++) {
    // Slot 0 is next to the exit (right).
    const x = exitX - (i + 1) * slotW;
    const filled = i < Math.ceil(waiting.length / perSlot);
    svg.append(el("rect", { x: x + 2, y, width: slotW - 4, height: 40, rx: 4, class: filled ? "slot full" : "slot" }));
    if (filled && perSlot === 1 && slotW >= 36) {
      svg.append(el("text", { x: x + slotW / 2, y: y + 25, "text-anchor": "middle", class: "label" }, num((waiting[i] - v.now) / 1000, 1)));
    }
  }
  svg.append(el("path", { d: `M${exitX + 8} ${y + 20} L${exitX + 40} ${y + 20} M${exitX + 30} ${y + 10} L${exitX + 40} ${y + 20} L${exitX + 30} ${y + 30}`, class: "arrow" }));
  svg.append(el("text", { x: 16, y: y - 16, class: "label" }, `${waiting.length} waiting of ${v.capacity}${shown < v.capacity ? ` (a slot is ${num(perSlot, 1)})` : ""}`));
  svg.append(el("text", { x: exitX + 4, y: y + 62, "text-anchor": "end", class: "label" }, `one leaves every ${num(intervalMs, 2)} ms →`));
  if (perSlot === 1 && slotW >= 36) svg.append(el("text", { x: 16, y: y + 84, class: "label" }, "in each slot: seconds until it leaves"));
  for (const r of recent(v)) {
    const from = 0;
    if (r.decision.allowed) svg.append(el("circle", { cx: from + 20 + r.age * (exitX - shown * slotW), cy: y + 20, r: 7, class: "drip moving", opacity: 1 - r.age }));
    else svg.append(el("circle", { cx: 20, cy: y + 20 + r.age * 50, r: 7, class: "rejected moving", opacity: 1 - r.age }));
  }
  // Departures: a request leaving the exit.
  for (const e of v.events) {
    const d = e.t + e.decision.delay;
    if (e.decision.allowed && d <= v.now && v.now - d < ANIM_MS) {
      const age = (v.now - d) / ANIM_MS;
      svg.append(el("circle", { cx: exitX + 10 + age * 40, cy: y + 20, r: 6, class: "drip moving", opacity: 1 - age }));
    }
  }
}

/** A bar of `value` against `limit` (scale shared with the caller); returns the scale. */
function bar(svg, { x, w, top, h, value, scaleMax, color, weight }) {
  const scale = h / scaleMax;
  svg.append(el("rect", { x, y: top, width: w, height: h, class: "vessel-rect" }));
  const bh = value * scale;
  svg.append(el("rect", { x, y: top + h - bh, width: w, height: bh, fill: color, class: weight === undefined ? "" : "faded" }));
  if (weight !== undefined) {
    const wh = value * weight * scale;
    svg.append(el("rect", { x, y: top + h - wh, width: w, height: wh, fill: color }));
  }
  return scale;
}

/** The limit line across the bars, labelled to their left (on nothing else). */
function limitLine(svg, { x0, x1, top, h, scale, limit }) {
  const ly = top + h - limit * scale;
  svg.append(el("line", { x1: x0, x2: x1, y1: ly, y2: ly, class: "limit" }));
  svg.append(el("text", { x: x0 - 6, y: ly + 4, "text-anchor": "end", class: "label" }, `limit ${limit}`));
}

function slidingWindow(svg, W, v) {
  const Wm = v.windowMs;
  const st = v.state === null ? { window: Math.floor(v.now / Wm), prev: 0, cur: 0 } : v.state["sliding-window"];
  const elapsed = Math.min(Wm, Math.max(0, v.now - st.window * Wm));
  const weight = 1 - elapsed / Wm;
  const top = 16, h = 120, bw = Math.min(80, (W - 110) / 2 - 10), bx = 76;
  const scaleMax = Math.max(v.limit, st.prev, st.cur, 1) * 1.1;
  const scale = bar(svg, { x: bx, w: bw, top, h, value: st.prev, scaleMax, color: "var(--prev)", weight });
  bar(svg, { x: bx + bw + 16, w: bw, top, h, value: st.cur, scaleMax, color: "var(--cur)" });
  limitLine(svg, { x0: bx, x1: bx + 2 * bw + 16, top, h, scale, limit: v.limit });
  svg.append(el("text", { x: bx + bw / 2, y: top + h + 18, "text-anchor": "middle", class: "label" }, `prev ${st.prev}`));
  svg.append(el("text", { x: bx + bw * 1.5 + 16, y: top + h + 18, "text-anchor": "middle", class: "label" }, `cur ${st.cur}`));
  // The sliding window [now − W, now] over the two fixed windows.
  const x0 = 20, x1 = W - 20, y = 190;
  const x = (t) => x0 + ((t - (st.window - 1) * Wm) / (2 * Wm)) * (x1 - x0);
  svg.append(el("rect", { x: x(st.window * Wm - Wm + elapsed), y: y - 14, width: x(Wm) - x(0), height: 12, class: "slide" }));
  svg.append(el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }));
  for (const b of [st.window - 1, st.window, st.window + 1]) svg.append(el("line", { x1: x(b * Wm), x2: x(b * Wm), y1: y - 18, y2: y + 4, class: "boundary" }));
  svg.append(el("text", { x: x((st.window - 0.5) * Wm), y: y + 20, "text-anchor": "middle", class: "label" }, "previous window"));
  svg.append(el("text", { x: x((st.window + 0.5) * Wm), y: y + 20, "text-anchor": "middle", class: "label" }, "current window"));
  for (const r of recent(v)) {
    if (r.decision.allowed) svg.append(el("circle", { cx: bx + bw * 1.5 + 16, cy: top + r.age * (h - st.cur * scale), r: 6, class: "entry moving", opacity: 1 - r.age * 0.6 }));
    else svg.append(el("circle", { cx: bx + 2 * bw + 16 + 12 + r.age * 20, cy: top + 10, r: 6, class: "rejected moving", opacity: 1 - r.age }));
  }
}

function fixedWindow(svg, W, v) {
  const Wm = v.windowMs;
  const st = v.state === null ? { window: Math.floor(v.now / Wm), count: 0 } : v.state["fixed-window"];
  const top = 16, h = 120, bw = Math.min(90, W - 140), bx = 76;
  const scale = bar(svg, { x: bx, w: bw, top, h, value: st.count, scaleMax: Math.max(v.limit, st.count, 1) * 1.1, color: "var(--cur)" });
  limitLine(svg, { x0: bx, x1: bx + bw, top, h, scale, limit: v.limit });
  svg.append(el("text", { x: bx + bw / 2, y: top + h + 18, "text-anchor": "middle", class: "label" }, `count ${st.count}`));
  const start = st.window * Wm;
  const x0 = 20, x1 = W - 20, y = 190;
  const x = (t) => x0 + ((t - (start - Wm)) / (3 * Wm)) * (x1 - x0);
  svg.append(el("rect", { x: x(start), y: y - 14, width: x(start + Wm) - x(start), height: 12, class: "slide" }));
  svg.append(el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }));
  for (const b of [start, start + Wm]) svg.append(el("line", { x1: x(b), x2: x(b), y1: y - 18, y2: y + 4, class: "boundary" }));
  svg.append(el("line", { x1: x(v.now), x2: x(v.now), y1: y - 24, y2: y + 6, class: "now" }));
  svg.append(el("text", { x: x(start - Wm / 2), y: y + 20, "text-anchor": "middle", class: "label" }, "previous"));
  svg.append(el("text", { x: x(start + Wm / 2), y: y + 20, "text-anchor": "middle", class: "label strong" }, "this window"));
  svg.append(el("text", { x: x(start + 1.5 * Wm), y: y + 20, "text-anchor": "middle", class: "label" }, "next"));
  for (const r of recent(v)) {
    if (r.decision.allowed) svg.append(el("circle", { cx: bx + bw / 2, cy: top + r.age * (h - st.count * scale), r: 6, class: "entry moving", opacity: 1 - r.age * 0.6 }));
    else svg.append(el("circle", { cx: bx + bw + 14 + r.age * 20, cy: top + 10, r: 6, class: "rejected moving", opacity: 1 - r.age }));
  }
}

function slidingLog(svg, W, v) {
  const Wm = v.windowMs;
  const entries = v.state === null ? [] : v.state["sliding-log"].entries;
  const x0 = 20, x1 = W - 20, y = 170;
  const x = (t) => x0 + ((t - (v.now - Wm)) / Wm) * (x1 - x0);
  svg.append(el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "axis" }));
  for (let i = 0; i <= 10; i++) svg.append(el("line", { x1: x0 + (i / 10) * (x1 - x0), x2: x0 + (i / 10) * (x1 - x0), y1: y, y2: y + 5, class: "axis" }));
  svg.append(el("text", { x: x0, y: y + 22, class: "label" }, `now − ${winText(Wm)}: entries expire here`));
  svg.append(el("text", { x: x1, y: y + 44, "text-anchor": "end", class: "label" }, "now"));
  // One dot per request logged, stacked at its instant; a stack taller than the figure shows
  // its count instead of overflowing.
  const maxDots = 11;
  const placed = [];
  for (const e of entries) {
    const cx = x(e.at / NS_PER_MS);
    const n = Math.min(e.cost, maxDots);
    for (let i = 0; i < n; i++) svg.append(el("circle", { cx, cy: y - 8 - i * 12, r: 5.5, class: "entry" }));
    if (e.cost > 1) {
      // The count over its stack, unless a neighbour's count is already there (the panel
      // beside the figure gives the total).
      const ty = y - 8 - n * 12 - 2, half = 4 * String(e.cost).length + 2;
      const left = Math.min(Math.max(cx - half, 0), W - 2 * half);
      if (!placed.some((p) => left < p.r && left + 2 * half > p.l && Math.abs(p.y - ty) < 14)) {
        placed.push({ l: left, r: left + 2 * half, y: ty });
        svg.append(el("text", { x: left + half, y: ty, "text-anchor": "middle", class: "label" }, String(e.cost)));
      }
    }
  }
  for (const r of recent(v)) {
    if (r.decision.allowed) svg.append(el("circle", { cx: x1, cy: y - 8 - (1 - r.age) * 60, r: 6, class: "entry moving", opacity: 1 - r.age * 0.5 }));
    else svg.append(el("circle", { cx: x1 - 10 - r.age * 30, cy: 20, r: 6, class: "rejected moving", opacity: 1 - r.age }));
  }
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

// ---------------------------------------------------------------------------------------
// Worked formulas: the rule with the live numbers. Each returns HTML lines (numbers are
// inserted as text through `t`, never as markup).

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const b = (s) => `<b>${esc(s)}</b>`;

/** A number as shown (rounded by `num`). */
const shown = (v) => Number(num(v));
/**
 * "=" when the shown operands give the shown result, "≈" when rounding them (to 3 decimals)
 * moved the result: the page never prints an equation its own numbers contradict.
 */
const eq = (fromShown, exact, digits = 3) => (num(fromShown, digits) === num(exact, digits) ? "=" : "≈");

function nextLine(v, what) {
  const fits = v.peek.decision.remaining >= 1;
  return `<p class="formula verdict-line ${fits ? "ok" : "no"}">Next request now: ${fits ? "admitted" : "rejected"} <span class="why">(${esc(what)})</span></p>`;
}

function tokenFormula(v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const B = v.capacity, r = v.limit / (v.windowMs / 1000);
  if (v.lastState === null) return [`<p class="formula">A fresh key: the bucket is full, ${b(`tokens = ${B}`)}.</p>`, nextLine(v, `${B} ≥ 1`)];
  const st = v.lastState["token-bucket"];
  const t0 = st.credit / windowNs, lastMs = st.last / NS_PER_MS;
  const dt = v.now - lastMs;
  const tokens = v.state === null ? B : v.state["token-bucket"].credit / windowNs;
  return [
    `<p class="formula">tokens = min(B, t₀ + r × Δt)</p>`,
    `<p class="formula">= min(${B}, ${num(t0)} + ${num(r)}/s × ${sec(dt)}) ${eq(Math.min(B, shown(t0) + shown(r) * shown(dt / 1000)), tokens)} ${b(num(tokens))}</p>`,
    `<p class="formula small">t₀: tokens left after the last request at ${sec(lastMs)}; Δt: time since then</p>`,
    nextLine(v, `${num(tokens)} ${tokens >= 1 ? "≥" : "<"} 1; remaining ${v.peek.decision.remaining}`),
  ];
}

function leakyFormula(v) {
  const windowNs = v.windowMs * NS_PER_MS;
  const C = v.capacity, r = v.limit / (v.windowMs / 1000);
  if (v.lastState === null) return [`<p class="formula">A fresh key: the bucket is empty, ${b("level = 0")}.</p>`, nextLine(v, `0 + 1 ≤ ${C}`)];
  const st = v.lastState["leaky-bucket"];
  const l0 = st.level / windowNs, lastMs = st.last / NS_PER_MS;
  const level = v.state === null ? 0 : v.state["leaky-bucket"].level / windowNs;
  return [
    `<p class="formula">level = max(0, l₀ − r × Δt)</p>`,
    `<p class="formula">= max(0, ${num(l0)} − ${num(r)}/s × ${sec(v.now - lastMs)}) ${eq(Math.max(0, shown(l0) - shown(r) * shown((v.now - lastMs) / 1000)), level)} ${b(num(level))}</p>`,
    `<p class="formula small">l₀: the level after the last request at ${sec(lastMs)}</p>`,
    nextLine(v, `${num(level)} + 1 ${level + 1 <= C ? "≤" : ">"} ${C}`),
  ];
}

function gcraFormula(v) {
  const T = v.windowMs / v.limit, tau = v.capacity * T;
  const tatMs = v.state === null ? v.now : v.state.gcra.tat / v.limit / NS_PER_MS;
  const ahead = Math.max(0, tatMs - v.now);
  const pushed = ahead + T;
  return [
    `<p class="formula">T = window ÷ limit = ${num(T, 2)} ms; tolerance τ = burst × T = ${num(tau, 2)} ms</p>`,
    `<p class="formula">TAT − now = ${b(`${num(ahead, 2)} ms`)}</p>`,
    `<p class="formula">next: TAT′ − now = max(TAT − now, 0) + T = ${num(ahead, 2)} + ${num(T, 2)} ${eq(Number(num(ahead, 2)) + Number(num(T, 2)), pushed, 2)} ${num(pushed, 2)} ms</p>`,
    nextLine(v, `${num(pushed, 2)} ${pushed <= tau ? "≤" : ">"} ${num(tau, 2)}`),
  ];
}

function queueFormula(v) {
  const T = v.windowMs / v.limit;
  const waiting = v.capacity - v.peek.decision.remaining;
  const lastMs = v.state === null ? null : v.state["leaky-queue"].last_departure / v.limit / NS_PER_MS;
  const start = lastMs === null ? v.now : Math.max(v.now, lastMs);
  const leaves = start + T;
  const lines = [
    `<p class="formula">leaves at max(now, last departure) + T, T = ${num(T, 2)} ms</p>`,
    lastMs === null
      ? `<p class="formula">empty queue: the next would leave at ${sec(v.now)} + ${num(T, 2)} ms ${eq(Number(num(v.now / 1000)) + Number(num(T, 2)) / 1000, leaves / 1000)} ${b(sec(leaves))}</p>`
      : `<p class="formula">= max(${sec(v.now)}, ${sec(lastMs)}) + ${num(T, 2)} ms ${eq(Math.max(Number(num(v.now / 1000)), Number(num(lastMs / 1000))) + Number(num(T, 2)) / 1000, leaves / 1000)} ${b(sec(leaves))} (waits ${msText(leaves - v.now)})</p>`,
    `<p class="formula small">waiting now: ${waiting} of ${v.capacity}; the longest wait is ${v.capacity} × T = ${msText(v.capacity * T)}</p>`,
    nextLine(v, `${waiting} + 1 ${waiting + 1 <= v.capacity ? "≤" : ">"} ${v.capacity} slots`),
  ];
  return lines;
}

function slidingFormula(v) {
  const Wm = v.windowMs;
  const st = v.state === null ? { window: Math.floor(v.now / Wm), prev: 0, cur: 0 } : v.state["sliding-window"];
  const elapsed = Math.min(Wm, Math.max(0, v.now - st.window * Wm));
  // Whole ms over a window of whole ms: 4 decimals are exact, so every product below is too.
  const weight = Number((1 - elapsed / Wm).toFixed(4));
  const estimate = Number((st.prev * weight + st.cur).toFixed(4));
  return [
    `<p class="formula">estimate = prev × (1 − elapsed ÷ W) + cur</p>`,
    `<p class="formula">= ${st.prev} × (1 − ${Math.round(elapsed)} ms ÷ ${Wm} ms) + ${st.cur}</p>`,
    `<p class="formula">= ${st.prev} × ${num(weight, 4)} + ${st.cur} = ${b(num(estimate, 4))}</p>`,
    nextLine(v, `${num(estimate, 4)} ${v.peek.decision.remaining >= 1 ? "<" : "≥"} ${v.limit}`),
  ];
}

function fixedFormula(v) {
  const Wm = v.windowMs;
  const st = v.state === null ? { window: Math.floor(v.now / Wm), count: 0 } : v.state["fixed-window"];
  const start = st.window * Wm;
  return [
    `<p class="formula">window #${st.window}: [${sec(start)}, ${sec(start + Wm)})</p>`,
    `<p class="formula">count = ${b(st.count)}; the next boundary is in ${msText(start + Wm - v.now)}, then count = 0</p>`,
    nextLine(v, `${st.count} + 1 ${st.count + 1 <= v.limit ? "≤" : ">"} ${v.limit}`),
  ];
}

function logFormula(v) {
  const Wm = v.windowMs;
  const entries = v.state === null ? [] : v.state["sliding-log"].entries;
  const used = entries.reduce((s, e) => s + e.cost, 0);
  const lines = [
    `<p class="formula">logged in (now − ${winText(Wm)}, now] = ${b(used)} request${used === 1 ? "" : "s"}</p>`,
  ];
  if (entries.length > 0) {
    const oldest = entries[0];
    lines.push(`<p class="formula small">${entries.length} entr${entries.length === 1 ? "y" : "ies"} in the core's log: requests at the same instant share one entry with their total cost. The oldest (${sec(oldest.at / NS_PER_MS)}, ${oldest.cost} request${oldest.cost === 1 ? "" : "s"}) expires in ${msText(oldest.at / NS_PER_MS + Wm - v.now)}.</p>`);
  }
  lines.push(nextLine(v, `${used} + 1 ${used + 1 <= v.limit ? "≤" : ">"} ${v.limit}`));
  return lines;
}

const FORMULA = {
  "token-bucket": tokenFormula,
  gcra: gcraFormula,
  "sliding-window": slidingFormula,
  "fixed-window": fixedFormula,
  "sliding-log": logFormula,
  "leaky-bucket": leakyFormula,
  "leaky-queue": queueFormula,
};

/**
 * Redraws `svg` and `panel` for `view`: { algorithm, state (the peek's, parsed), lastState
 * (after the last request), peek, now (ms), windowMs, limit, capacity, events (happened,
 * with the core's decisions) }.
 */
export function drawState(svg, panel, view) {
  const W = fit(svg, H);
  const desc = svg.querySelector("desc");
  svg.replaceChildren(desc);
  DRAW[view.algorithm](svg, W, view);
  svg.dataset.remaining = String(view.peek.decision.remaining);
  panel.innerHTML = FORMULA[view.algorithm](view).join("");
}
