// The playground's timeline: every request that has happened, in lanes (admitted, left the
// queue, rejected), zoomable from 10 s to 1 s, plus the requests still ahead in the trace
// (grey ticks). Requests close together are drawn as one stack that says how many it holds;
// hovering a stack shows the state at that instant, and clicking (or tapping) it moves the
// clock there. The decisions drawn are the core's (the session's cached results).
import { el, fit, num } from "./draw.js";

const X0 = 84; // left margin for the lane names

/**
 * Redraws `svg` for `events` (happened: { i, t, cost, decision }) and `ahead` (times of
 * requests not yet happened), around `now`, `span` ms wide. `queue`: draw the departure lane.
 * Each stack is a `g.stack` with `data-index` (its last request) and, for departures,
 * `data-at` (the instant it left).
 * Returns the counts drawn: { admitted, rejected, left }.
 */
export function drawTimeline(svg, { events, ahead, now, span, queue }) {
  const lanes = queue ? { ok: 36, out: 76, no: 116 } : { ok: 36, no: 84 };
  const H = queue ? 176 : 144;
  const W = fit(svg, H);
  svg.replaceChildren();
  const X1 = W - 12;
  const from = now - span * 0.8, to = now + span * 0.2;
  const x = (t) => X0 + ((t - from) / (to - from)) * (X1 - X0);
  const names = { ok: "admitted", out: "left queue", no: "rejected" };
  for (const [lane, y] of Object.entries(lanes)) {
    svg.append(el("text", { x: 4, y: y + 4, class: "label" }, names[lane]));
    svg.append(el("line", { x1: X0, x2: X1, y1: y, y2: y, class: "lane" }));
  }
  // Second marks, labelled at a spacing that leaves room for the text.
  const axisY = H - 20;
  const step = [100, 200, 250, 500, 1000, 2000].find((s) => ((X1 - X0) * s) / span >= 64) ?? 5000;
  for (let s = Math.ceil(from / step) * step; s <= to; s += step) {
    if (s < 0) continue;
    svg.append(el("line", { x1: x(s), x2: x(s), y1: 18, y2: axisY, class: "gridline" }));
    if (x(s) > X0 + 20 && x(s) < X1 - 20 && Math.abs(x(s) - x(now)) > 34) {
      svg.append(el("text", { x: x(s), y: H - 4, "text-anchor": "middle", class: "label" }, `${num(s / 1000, 2)} s`));
    }
  }
  svg.append(el("line", { x1: X0, x2: X1, y1: axisY, y2: axisY, class: "axis" }));
  svg.append(el("line", { x1: x(now), x2: x(now), y1: 10, y2: axisY + 4, class: "now" }));
  svg.append(el("text", { x: x(now), y: H - 4, "text-anchor": "middle", class: "label strong" }, "now"));
  // The requests still ahead in the trace (a guided or pasted one): grey ticks on the axis.
  for (const t of ahead) {
    if (t > to) break;
    svg.append(el("line", { x1: x(t), x2: x(t), y1: axisY - 8, y2: axisY, class: "ahead" }));
  }
  // Stacks: requests in the same lane within one 10-pixel column.
  const stacks = new Map();
  const put = (lane, t, i, cost) => {
    if (t < from || t > to) return;
    const col = Math.floor((x(t) - X0) / 10);
    const key = `${lane}:${col}`;
    const s = stacks.get(key) ?? { lane, col, n: 0, first: i, last: i, t };
    s.n += cost;
    s.last = Math.max(s.last, i);
    s.t = Math.max(s.t, t);
    stacks.set(key, s);
  };
  const counts = { admitted: 0, rejected: 0, left: 0 };
  for (const e of events) {
    const lane = e.decision.allowed ? "ok" : "no";
    put(lane, e.t, e.i, e.cost);
    if (e.t >= from && e.t <= to) counts[e.decision.allowed ? "admitted" : "rejected"] += e.cost;
    if (queue && e.decision.allowed) {
      const d = e.t + e.decision.delay;
      if (d <= now) {
        put("out", d, e.i, e.cost);
        if (d >= from && d <= to) counts.left += e.cost;
      }
    }
  }
  let labelRight = { ok: -Infinity, out: -Infinity, no: -Infinity };
  for (const s of [...stacks.values()].sort((a, b) => a.col - b.col)) {
    const cx = X0 + s.col * 10 + 5, cy = lanes[s.lane];
    const g = el("g", { class: `stack ${s.lane}`, "data-count": s.n, "data-index": s.last, "data-lane": s.lane });
    g.append(el("title", {}, `${s.n} ${names[s.lane]} at ${num(s.t / 1000, 3)} s (click: move the clock here)`));
    if (s.n <= 4) {
      for (let k = 0; k < s.n; k++) g.append(el("circle", { cx, cy: cy + (k - (s.n - 1) / 2) * 8, r: 3.6, class: s.lane }));
    } else {
      g.append(el("rect", { x: cx - 4.5, y: cy - 15, width: 9, height: 30, rx: 4.5, class: `bar ${s.lane}` }));
      // The count, where there is room for it (every request is counted in the caption).
      const text = String(s.n);
      const wText = 8 * text.length;
      if (cx + 7 > labelRight[s.lane] + 4 && cx + 7 + wText < X1) {
        g.append(el("text", { x: cx + 7, y: cy - 6, class: "label count" }, text));
        labelRight[s.lane] = cx + 7 + wText;
      }
    }
    g.append(el("rect", { x: cx - 5, y: cy - 18, width: 10, height: 36, class: "hit" }));
    // A departure stack stands for the instant the request left; the others, the instant its
    // decision was made (right after it). The page listens on the SVG (it is redrawn every
    // frame while the clock runs).
    if (s.lane === "out") g.dataset.at = String(s.t);
    svg.append(g);
  }
  return counts;
}
