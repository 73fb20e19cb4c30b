// The demo page: wires the controls to the core's stateless `decide` (the npm package's web
// build, copied to ../pkg by www/build.sh) and draws the state the core returns. No
// algorithm is computed here: admissions, remaining, retry times, delays and every state
// (including the refilled one shown between requests, a cost-0 peek) come from the core.
import init, { decide, parsePolicy } from "../pkg/index.js";
import { ALGORITHMS } from "./content.js";
import { drawState } from "./draw.js";
import { drawTimeline } from "./timeline.js";
import { runExperiment } from "./burst.js";
import { setupLive } from "./live.js";

const $ = (id) => document.getElementById(id);
const WINDOW_TEXT = { 500: "500ms", 1000: "s", 2000: "2s", 5000: "5s", 10000: "10s" };

/** Page time in ms since load: the `now` given to the core (small numbers, monotonic). */
const clock = () => performance.now();

const sim = {
  algorithm: ALGORITHMS[0],
  policy: "token-bucket 10/s",
  windowMs: 1000,
  limit: 10,
  burst: 10,
  state: null, // the core's JSON state after the last charged decision
  events: [], // { t, allowed, departure? } for the timeline
  admitted: 0,
  rejected: 0,
  streamTimer: null,
};

function readKnobs() {
  const algorithm = ALGORITHMS.find((a) => a.id === $("algorithm").value) ?? ALGORITHMS[0];
  const limit = Number($("limit").value);
  const windowMs = Number($("window").value);
  const burstText = $("burst").value.trim();
  let policy = `${algorithm.id} ${limit}/${WINDOW_TEXT[windowMs] ?? `${windowMs}ms`}`;
  if (algorithm.bucket && burstText !== "") policy += ` burst ${burstText}`;
  return { algorithm, limit, windowMs, policy };
}

/** Applies the knobs: validates the policy with the core and starts a fresh key. */
function applyKnobs() {
  const k = readKnobs();
  const error = $("policy-error");
  $("burst").disabled = !k.algorithm.bucket;
  $("burst-hint").textContent = k.algorithm.bucket
    ? k.algorithm.id === "leaky-queue" ? "(queue size)" : "(bucket size)"
    : "(not used by windows)";
  let canonical;
  try {
    canonical = parsePolicy(k.policy);
  } catch (e) {
    error.hidden = false;
    error.textContent = `${e.message}`;
    $("policy-text").textContent = k.policy;
    return false;
  }
  error.hidden = true;
  stopStream();
  Object.assign(sim, k, { policy: canonical });
  // The bucket's capacity as the core reports it (a peek on a fresh key).
  sim.burst = decide(canonical, null, clock(), 0).decision.limit;
  $("policy-text").textContent = canonical;
  showAlgorithm(k.algorithm);
  resetKey();
  return true;
}

function showAlgorithm(a) {
  $("alg-name").textContent = a.name;
  $("alg-about").textContent = a.about;
  $("alg-rule").textContent = a.rule;
  $("alg-watch").textContent = a.watch;
  $("state-title").textContent = `${a.name}: state`;
  for (const [id, items] of [["alg-pros", a.pros], ["alg-cons", a.cons]]) {
    const ul = $(id);
    ul.replaceChildren(...items.map((t) => Object.assign(document.createElement("li"), { textContent: t })));
  }
}

function resetKey() {
  sim.state = null;
  sim.events = [];
  sim.admitted = 0;
  sim.rejected = 0;
  $("count-admitted").textContent = "0";
  $("count-rejected").textContent = "0";
  $("verdict").textContent = "No request yet.";
  $("verdict").className = "verdict idle";
  for (const id of ["d-remaining", "d-retry", "d-reset", "d-delay"]) $(id).textContent = "–";
}

const ms = (v) => (v >= 10_000 ? `${(v / 1000).toFixed(1)} s` : `${v} ms`);

/** Sends `n` requests of cost 1 at the same instant; returns the decisions. */
function fire(n) {
  const now = clock();
  let admitted = 0;
  let last;
  for (let i = 0; i < n; i++) {
    const { decision, state } = decide(sim.policy, sim.state, now, 1);
    sim.state = state;
    last = decision;
    if (decision.allowed) admitted++;
    sim.events.push({ t: now, allowed: decision.allowed, departure: decision.delay > 0 ? now + decision.delay : undefined });
  }
  sim.admitted += admitted;
  sim.rejected += n - admitted;
  if (sim.events.length > 4000) sim.events.splice(0, sim.events.length - 4000);
  $("count-admitted").textContent = String(sim.admitted);
  $("count-rejected").textContent = String(sim.rejected);
  const v = $("verdict");
  const what = last.allowed ? (last.delay > 0 ? `Admitted, leaves the queue in ${ms(last.delay)}` : "Admitted") : `Rejected: retry in ${ms(last.retryAfter)}`;
  v.textContent = n === 1 ? `${what}.` : `Burst of ${n}: ${admitted} admitted, ${n - admitted} rejected. Last: ${what.toLowerCase()}.`;
  v.className = `verdict ${last.allowed ? "ok" : "no"}`;
  $("d-remaining").textContent = `${last.remaining} of ${last.limit}`;
  $("d-retry").textContent = last.allowed ? "0 (allowed)" : ms(last.retryAfter);
  $("d-reset").textContent = ms(last.resetAfter);
  $("d-delay").textContent = sim.algorithm.id === "leaky-queue" ? ms(last.delay) : "–";
}

function stopStream() {
  if (sim.streamTimer !== null) clearInterval(sim.streamTimer);
  sim.streamTimer = null;
  $("stream").setAttribute("aria-pressed", "false");
  $("stream").textContent = "Start a stream at";
}

function toggleStream() {
  if (sim.streamTimer !== null) return stopStream();
  const rate = Math.min(50, Math.max(1, Number($("stream-rate").value) || 1));
  sim.streamTimer = setInterval(() => fire(1), 1000 / rate);
  $("stream").setAttribute("aria-pressed", "true");
  $("stream").textContent = "Stop the stream at";
}

/** Redraws the state as the core sees it now: a cost-0 peek, which charges nothing. */
function frame() {
  const now = clock();
  const peek = decide(sim.policy, sim.state, now, 0);
  const view = peek.state === null ? null : JSON.parse(peek.state);
  drawState($("state-svg"), {
    algorithm: sim.algorithm.id,
    state: view,
    decision: peek.decision,
    now,
    windowMs: sim.windowMs,
    limit: sim.limit,
    capacity: sim.burst,
    events: sim.events,
  });
  $("state-json").textContent = peek.state ?? "null (fresh: the core stores nothing for this key)";
  drawTimeline($("timeline-svg"), sim.events, now);
}

let last = 0;
function loop(ts) {
  if (ts - last > 50) {
    last = ts;
    frame();
  }
  requestAnimationFrame(loop);
}

async function main() {
  await init({ module_or_path: new URL("../pkg/tollgate_wasm_bg.wasm", import.meta.url) });
  const select = $("algorithm");
  for (const a of ALGORITHMS) select.append(new Option(a.name, a.id));
  for (const id of ["algorithm", "limit", "window", "burst"]) $(id).addEventListener("change", applyKnobs);
  $("knobs").addEventListener("submit", (e) => e.preventDefault());
  $("fire-one").addEventListener("click", () => fire(1));
  $("fire-burst").addEventListener("click", () => fire(Math.min(200, Math.max(1, Number($("burst-size").value) || 1))));
  $("stream").addEventListener("click", toggleStream);
  $("reset").addEventListener("click", resetKey);
  applyKnobs();
  requestAnimationFrame(loop);
  await runExperiment($("burst-svg"), $("burst-table"));
  setupLive();
  $("boot").textContent = "Core loaded: decisions below are made by tollgate's WebAssembly build.";
  document.body.dataset.ready = "true";
}

main().catch((e) => {
  $("boot").textContent = `The core failed to load: ${e.message}. Run www/build.sh to create www/pkg/.`;
  $("boot").classList.add("error");
  throw e;
});
