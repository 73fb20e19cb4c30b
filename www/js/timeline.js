// The playground's timeline: admitted and rejected requests of the last 10 s (and, for the
// queue, when each admitted request leaves it, from the core's `delay`).
import { el } from "./draw.js";

const SPAN = 10_000;

/** Redraws `svg` (viewBox 600 x 130) with `events` ({ t, allowed, departure? }) up to `now`. */
export function drawTimeline(svg, events, now) {
  svg.replaceChildren();
  const from = now - SPAN;
  const maxDeparture = events.reduce((m, e) => Math.max(m, e.departure ?? 0), 0);
  const to = Math.max(now, Math.min(maxDeparture, now + SPAN / 2));
  const x = (t) => 70 + ((t - from) / (to - from)) * 505;
  const lanes = { ok: 40, no: 95 };
  svg.append(el("text", { x: 4, y: lanes.ok + 4, class: "tiny" }, "admitted"));
  svg.append(el("text", { x: 4, y: lanes.no + 4, class: "tiny" }, "rejected"));
  for (const y of Object.values(lanes)) svg.append(el("line", { x1: 70, x2: 580, y1: y, y2: y, class: "lane" }));
  for (let s = Math.ceil(from / 1000) * 1000; s <= to; s += 1000) {
    svg.append(el("line", { x1: x(s), x2: x(s), y1: 20, y2: 112, class: "grid" }));
  }
  svg.append(el("line", { x1: x(now), x2: x(now), y1: 14, y2: 118, class: "now" }));
  svg.append(el("text", { x: x(now), y: 128, "text-anchor": "middle", class: "tiny" }, "now"));
  svg.append(el("text", { x: 70, y: 128, class: "tiny" }, "−10 s"));
  const stack = new Map();
  for (const e of events) {
    if (e.t < from) continue;
    const lane = e.allowed ? "ok" : "no";
    const col = `${lane}:${Math.round(x(e.t) / 3)}`;
    const n = stack.get(col) ?? 0;
    stack.set(col, n + 1);
    const dy = (n % 7) * 4 * (lane === "ok" ? -1 : 1);
    if (e.departure !== undefined) {
      svg.append(el("line", { x1: x(e.t), x2: x(e.departure), y1: lanes.ok + dy, y2: lanes.ok + dy, class: "wait" }));
      svg.append(el("circle", { cx: x(e.departure), cy: lanes.ok + dy, r: 3, class: "out" }));
    }
    svg.append(el("circle", { cx: x(e.t), cy: lanes[lane] + dy, r: 3.2, class: lane }));
  }
}
