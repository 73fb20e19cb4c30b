// The demo page: wires the controls to the core's stateless `decide` (the npm package's web
// build, copied to ../pkg by www/build.sh) and draws the state the core returns. No
// algorithm is computed here: admissions, remaining, retry times, delays and every state
// come from the core. Time is the reader's: the playground's clock can be paused, slowed,
// stepped one request at a time and scrubbed back, because every state is a pure function of
// the session's trace (session.js replays the core's decisions up to the clock).
import init, { decide, parsePolicy } from "../pkg/index.js";
import { ALGORITHMS, EXPERIMENTS, CHOOSE } from "./content.js";
import { drawState, msText, num } from "./draw.js";
import { drawTimeline } from "./timeline.js";
import { compare, parseTrace } from "./compare.js";
import { Session, upperBound } from "./session.js";
import { setupLive } from "./live.js";
import { setupAdaptive } from "./adaptive.js";
import { setupStreams } from "./streams.js";

const $ = (id) => document.getElementById(id);
const WINDOW_TEXT = { 500: "500ms", 1000: "s", 2000: "2s", 5000: "5s", 10000: "10s" };

const sim = {
  algorithm: ALGORITHMS[0],
  policy: "token-bucket 10/s",
  windowMs: 1000,
  limit: 10,
  capacity: 10,
  session: new Session("token-bucket 10/s"),
  playing: true,
  speed: 1,
  stream: { on: false, rate: 15, next: 0 },
  preview: null, // { index, now } while the reader points at the timeline
  zoom: 10_000,
  shown: -1, // the index the decision panel shows (redrawn when it changes)
  noneAhead: null, // { session, now, requests } after a Step found no request ahead
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

/** The Burst field: only the buckets have one; a window algorithm shows it empty. */
function syncBurstField(algorithm) {
  const f = $("burst");
  if (!algorithm.bucket && !f.disabled) {
    f.dataset.saved = f.value;
    f.value = "";
    f.placeholder = "–";
  } else if (algorithm.bucket && f.disabled) {
    f.value = f.dataset.saved ?? "";
    f.placeholder = "= limit";
  }
  f.disabled = !algorithm.bucket;
  $("burst-hint").textContent = algorithm.bucket
    ? algorithm.id === "leaky-queue" ? "(queue size)" : "(bucket size)"
    : "(not used by windows)";
}

/**
 * Applies the knobs: validates the policy with the core, then replays this session's trace
 * with it (the same requests, the new policy's decisions).
 */
function applyKnobs() {
  syncBurstField(ALGORITHMS.find((a) => a.id === $("algorithm").value) ?? ALGORITHMS[0]);
  const k = readKnobs();
  const error = $("policy-error");
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
  Object.assign(sim, k, { policy: canonical });
  // The bucket's capacity as the core reports it (a peek on a fresh key).
  sim.capacity = decide(canonical, null, 0, 0).decision.limit;
  $("policy-text").textContent = canonical;
  showAlgorithm(k.algorithm);
  const old = sim.session;
  const s = new Session(canonical);
  Object.assign(s, { events: old.events, now: old.now, index: old.index, head: old.head });
  sim.session = s;
  sim.shown = -1;
  return true;
}

function showAlgorithm(a) {
  $("alg-name").textContent = a.name;
  $("alg-about").textContent = a.about;
  $("alg-rule").textContent = a.rule;
  $("alg-watch").textContent = a.watch;
  $("state-title").textContent = `${a.name}: state`;
  for (const [id, items] of [["alg-pros", a.pros], ["alg-cons", a.cons]]) {
    $(id).replaceChildren(...items.map((t) => Object.assign(document.createElement("li"), { textContent: t })));
  }
}

/** A new session: no requests, the clock at 0 (still playing or paused, as it was). */
function resetSession() {
  stopStream();
  sim.session = new Session(sim.policy);
  sim.shown = -1;
  sim.preview = null;
}

const sizeOf = (id, max) => Math.min(max, Math.max(1, Math.round(Number($(id).value)) || 1));

// ---------------------------------------------------------------------------------------
// The clock.

function setPlaying(on) {
  sim.playing = on;
  const b = $("play");
  b.textContent = on ? "Pause" : "Play";
  b.setAttribute("aria-pressed", String(on));
}

function setSpeed(v) {
  sim.speed = v;
  for (const r of document.querySelectorAll("input[name=speed]")) r.checked = Number(r.value) === v;
}

/** Adds the stream's requests due up to the clock (the stream runs on the reader's clock). */
function pumpStream() {
  const s = sim.session;
  while (sim.stream.on && sim.stream.next <= s.now) {
    s.add(Math.floor(sim.stream.next));
    sim.stream.next += 1000 / sim.stream.rate;
  }
}

function stopStream() {
  sim.stream.on = false;
  $("stream").setAttribute("aria-pressed", "false");
  $("stream").textContent = "Start a stream at";
}

function toggleStream() {
  if (sim.stream.on) return stopStream();
  sim.stream = { on: true, rate: sizeOf("stream-rate", 50), next: sim.session.instant };
  $("stream").setAttribute("aria-pressed", "true");
  $("stream").textContent = "Stop the stream at";
  if (!sim.playing) setPlaying(true);
  pumpStream();
}

/** One request forward (pausing first); a running stream's next request counts too. */
function step() {
  setPlaying(false);
  const s = sim.session;
  const next = s.nextTime();
  if (sim.stream.on && (next === undefined || sim.stream.next < next)) {
    s.seek(Math.floor(sim.stream.next));
    pumpStream();
  } else if (!s.step()) {
    // render() says so while the clock stays here and no request is added.
    sim.noneAhead = { session: s, now: s.now, requests: s.events.length };
  }
}

const clockText = () => `${(sim.session.now / 1000).toFixed(3)} s`;

// ---------------------------------------------------------------------------------------
// Drawing.

function verdictFor(d) {
  if (!d.allowed) return `Rejected: retry in ${msText(d.retryAfter)}`;
  return d.delay > 0 ? `Admitted, waits ${msText(d.delay)} in the queue` : "Admitted";
}

/** The decision panel for the request the cursor is just past (redrawn when it changes). */
function showDecision(index) {
  const s = sim.session;
  const happened = s.happened(index);
  let admitted = 0, rejected = 0;
  for (const e of happened) if (e.decision.allowed) admitted += e.cost; else rejected += e.cost;
  $("count-admitted").textContent = String(admitted);
  $("count-rejected").textContent = String(rejected);
  const v = $("verdict");
  if (index === 0) {
    v.textContent = "No request yet.";
    v.className = "verdict idle";
    for (const id of ["d-remaining", "d-retry", "d-reset", "d-delay"]) $(id).textContent = "–";
  } else {
    const last = happened.at(-1);
    const d = last.decision;
    const group = happened.filter((e) => e.t === last.t);
    const what = verdictFor(d);
    if (group.length === 1) {
      v.textContent = `${what}.`;
    } else {
      const ok = group.filter((e) => e.decision.allowed).length;
      v.textContent = `${group.length} at ${num(last.t / 1000, 3)} s: ${ok} admitted, ${group.length - ok} rejected. Last: ${what.toLowerCase()}.`;
    }
    v.className = `verdict ${d.allowed ? "ok" : "no"}`;
    $("d-remaining").textContent = `${d.remaining} of ${d.limit}`;
    $("d-retry").textContent = d.allowed ? "0 (allowed)" : msText(d.retryAfter);
    $("d-reset").textContent = msText(d.resetAfter);
    $("d-delay").textContent = sim.algorithm.id !== "leaky-queue" ? "– (no queue)" : d.allowed ? msText(d.delay) : "– (rejected: not queued)";
  }
  if ($("log-table").closest("details").open) fillLog(happened);
}

function fillLog(happened) {
  const rows = happened.map((e) => {
    const tr = document.createElement("tr");
    tr.className = e.decision.allowed ? "ok" : "no";
    tr.dataset.t = String(e.t);
    tr.dataset.decision = JSON.stringify(e.decision);
    for (const text of [e.i + 1, `${num(e.t / 1000, 3)} s`, e.decision.allowed ? "admitted" : "rejected", e.decision.remaining, e.decision.allowed ? msText(e.decision.delay) : "–"]) {
      tr.append(Object.assign(document.createElement("td"), { textContent: String(text) }));
    }
    return tr;
  });
  $("log-table").tBodies[0].replaceChildren(...rows);
}

function render() {
  const s = sim.session;
  const at = sim.preview ?? { index: s.index, now: s.instant };
  const view = s.view(at.index, at.now);
  // Only the requests a drawing can show: those in the timeline's span, or still waiting in
  // the queue (at most capacity × window/limit), or still arriving (animated).
  const maxWait = sim.algorithm.id === "leaky-queue" ? (sim.capacity * sim.windowMs) / sim.limit : 0;
  const since = Math.min(at.now, s.instant) - sim.zoom - maxWait - 1000;
  const events = s.happened(at.index, since);
  drawState($("state-svg"), $("formula"), {
    algorithm: sim.algorithm.id,
    ...view,
    windowMs: sim.windowMs,
    limit: sim.limit,
    capacity: sim.capacity,
    events,
  });
  $("state-json").textContent = view.peek.state ?? "null (fresh: the core stores nothing for this key)";
  // The note keeps its place whether or not it previews (no layout shift under the pointer).
  const note = $("preview-note");
  note.classList.toggle("previewing", sim.preview !== null);
  note.textContent = sim.preview
    ? `Showing the state at ${num(at.now / 1000, 3)} s, after request #${at.index} (the clock is at ${clockText()}). Click the stack to move the clock there.`
    : "Point at a stack in the timeline to see the state at that instant; click or tap it to move the clock there.";
  if (sim.shown !== s.index) {
    sim.shown = s.index;
    showDecision(s.index);
  }
  const all = s.happened(s.index, since);
  const counts = drawTimeline($("timeline-svg"), {
    events: all,
    ahead: s.events.slice(s.index).map((e) => e.t),
    now: s.instant,
    span: sim.zoom,
    queue: sim.algorithm.id === "leaky-queue",
  });
  $("timeline-counts").textContent = `In view: ${counts.admitted} admitted, ${counts.rejected} rejected${sim.algorithm.id === "leaky-queue" ? `, ${counts.left} left the queue` : ""}`;
  const scrub = $("scrub");
  // Back through the whole session, and a little ahead of it (an instant with no request
  // ahead is as much a pure function of the trace as any other).
  scrub.max = String(Math.ceil(Math.max(s.end, s.now) + 2 * sim.windowMs));
  if (document.activeElement !== scrub || sim.playing) scrub.value = String(Math.floor(s.now));
  scrub.setAttribute("aria-valuetext", clockText());
  // The read-out follows the clock, however it moved (play, Step, scrub, Home/End, "Jump to
  // the latest"); "no request ahead" (a Step with nothing ahead) only while the clock and the
  // trace are still as that Step left them.
  const none = sim.noneAhead;
  const stuck = !sim.playing && none !== null && none.session === s && none.now === s.now && none.requests === s.events.length;
  if (!stuck) sim.noneAhead = null;
  const text = stuck ? `${clockText()} (no request ahead: send one, or play)` : `${clockText()} · request ${s.index} of ${s.events.length}`;
  const out = $("clock-time");
  if (out.textContent !== text) out.textContent = text;
  document.body.dataset.index = String(s.index);
}

/** Pointing at a stack previews the state at its instant; clicking (tapping) moves the clock there. */
function setupTimelinePointer() {
  const svg = $("timeline-svg");
  const target = (e) => {
    const g = e.target.closest?.("g.stack");
    if (!g) return null;
    const i = Number(g.dataset.index);
    return { i, at: g.dataset.at === undefined ? undefined : Math.floor(Number(g.dataset.at)) };
  };
  svg.addEventListener("pointermove", (e) => {
    const hit = target(e);
    const s = sim.session;
    sim.preview = hit === null ? null : hit.at === undefined ? { index: hit.i + 1, now: s.events[hit.i].t } : { index: upperBound(s.events, hit.at), now: hit.at };
  });
  svg.addEventListener("pointerleave", () => { sim.preview = null; });
  svg.addEventListener("pointerdown", (e) => {
    const hit = target(e);
    if (!hit) return;
    setPlaying(false);
    if (hit.at === undefined) sim.session.goTo(hit.i); else sim.session.seek(hit.at);
    // On a touch screen the tap shows the state there (the clock has moved to it).
    sim.preview = null;
  });
}

let lastTs = null;
function loop(ts) {
  const dt = lastTs === null ? 0 : Math.min(100, ts - lastTs);
  lastTs = ts;
  if (sim.playing) {
    sim.session.advance(dt * sim.speed);
    pumpStream();
  }
  render();
  requestAnimationFrame(loop);
}

// ---------------------------------------------------------------------------------------
// Side by side, experiments, the summary.

let lastCompare = null;
function runCompare(opts, title) {
  lastCompare = { opts, title };
  $("compare-title").textContent = title;
  return compare($("multiples"), $("burst-table"), opts);
}

/** Sets the knobs and loads `trace` into the playground at 0, at `speed`. */
function playInPlayground({ algorithm, limit, windowMs, burst, speed = 0.25 }, trace) {
  stopStream();
  $("algorithm").value = algorithm;
  $("limit").value = String(limit);
  $("window").value = String(windowMs);
  syncBurstField(ALGORITHMS.find((a) => a.id === algorithm));
  if (!$("burst").disabled) $("burst").value = burst === undefined ? "" : String(burst);
  if (!applyKnobs()) return;
  sim.session.load(trace);
  sim.shown = -1;
  setSpeed(speed);
  const last = trace.at(-1)?.t ?? 0;
  $("zoom").value = last < 1500 ? "2000" : last < 4000 ? "5000" : "10000";
  sim.zoom = Number($("zoom").value);
  setPlaying(true);
  $("playground").scrollIntoView({ behavior: "instant", block: "start" });
}

function setupExperiments() {
  const list = $("guided");
  for (const x of EXPERIMENTS) {
    const li = document.createElement("li");
    li.className = "card";
    li.dataset.experiment = x.id;
    li.innerHTML = `<h3></h3><p class="question"></p><div class="actions"><button type="button" class="watch"></button><button type="button" class="secondary all">Compare all algorithms</button></div><details><summary>Answer</summary><p class="explain"></p><p class="numbers-line"></p></details>`;
    li.querySelector("h3").textContent = x.title;
    li.querySelector(".question").textContent = x.question;
    const name = ALGORITHMS.find((a) => a.id === x.algorithm).name.toLowerCase();
    li.querySelector(".watch").textContent = `Watch it: ${name}, 0.25×`;
    // Each experiment's buttons say which experiment they belong to (their names are unique).
    li.querySelector(".watch").setAttribute("aria-label", `Watch it: ${name}, 0.25×, “${x.title}”`);
    li.querySelector(".all").setAttribute("aria-label", `Compare all algorithms, “${x.title}”`);
    li.querySelector(".explain").textContent = x.explain;
    const opts = { events: x.trace, limit: x.limit, windowMs: x.windowMs, burst: x.burst ?? x.limit, label: ` (“${x.title}”)` };
    const all = () => runCompare(opts, `Side by side: ${x.title.toLowerCase()}`);
    li.querySelector(".watch").addEventListener("click", () => playInPlayground(x, x.trace));
    li.querySelector(".all").addEventListener("click", () => { all(); $("experiment").scrollIntoView({ behavior: "instant" }); });
    li.querySelector("details").addEventListener("toggle", (e) => {
      if (!e.target.open) return;
      const results = all();
      li.querySelector(".numbers-line").textContent = "The core's decisions, the most admitted in one window: " +
        results.map((r) => `${r.name} ${r.max}`).join(", ") + ".";
    });
    list.append(li);
  }
  const body = $("choose-table").tBodies[0];
  for (const row of CHOOSE) {
    const tr = document.createElement("tr");
    row.forEach((text, i) => tr.append(Object.assign(document.createElement(i === 0 ? "th" : "td"), { textContent: text, scope: i === 0 ? "row" : undefined })));
    body.append(tr);
  }
}

async function burstExperiment() {
  const text = await (await fetch(new URL("../data/burst80.csv", import.meta.url))).text();
  const { events } = parseTrace(text);
  return runCompare({ events, limit: 10, windowMs: 1000, burst: 10, label: " (tests/data/burst80.csv)" }, "The burst experiment: 80 requests, limit 10 per second");
}

function pastedTrace() {
  const err = $("trace-error");
  try {
    const parsed = parseTrace($("trace-csv").value);
    err.hidden = true;
    return parsed;
  } catch (e) {
    err.hidden = false;
    err.textContent = `Trace: ${e.message}`;
    return null;
  }
}

function setupCompare() {
  $("cmp-burst").addEventListener("click", burstExperiment);
  $("cmp-session").addEventListener("click", () => {
    const s = sim.session;
    const b = sim.algorithm.bucket ? sim.capacity : sim.limit;
    runCompare({ events: s.events, limit: sim.limit, windowMs: sim.windowMs, burst: b, label: " (this session)" }, "Side by side: this session's trace");
  });
  $("trace-run").addEventListener("click", () => {
    const p = pastedTrace();
    if (!p) return;
    const limit = sizeOf("trace-limit", 1000), windowMs = Number($("trace-window").value);
    runCompare({ events: p.events, limit, windowMs, burst: limit, label: ` (key “${p.key}”${p.keys > 1 ? `; ${p.keys - 1} other key(s) not shown` : ""})` }, "Side by side: your trace");
  });
  $("trace-play").addEventListener("click", () => {
    const p = pastedTrace();
    if (!p) return;
    const t0 = p.events[0].t;
    playInPlayground({ algorithm: $("algorithm").value, limit: sizeOf("trace-limit", 1000), windowMs: Number($("trace-window").value) }, p.events.map((e) => ({ t: e.t - t0, cost: e.cost })));
  });
  let width = 0;
  new ResizeObserver(([entry]) => {
    const w = Math.round(entry.contentRect.width);
    if (lastCompare && w !== width) runCompare(lastCompare.opts, lastCompare.title);
    width = w;
  }).observe($("multiples"));
}

async function main() {
  await init({ module_or_path: new URL("../pkg/tollgate_wasm_bg.wasm", import.meta.url) });
  const select = $("algorithm");
  for (const a of ALGORITHMS) select.append(new Option(a.name, a.id));
  for (const id of ["algorithm", "limit", "window", "burst"]) $(id).addEventListener("change", applyKnobs);
  $("knobs").addEventListener("submit", (e) => e.preventDefault());
  $("fire-one").addEventListener("click", () => { sim.session.sendNow(1); });
  $("fire-burst").addEventListener("click", () => { sim.session.sendNow(sizeOf("burst-size", 200)); });
  $("stream").addEventListener("click", toggleStream);
  $("reset").addEventListener("click", resetSession);
  $("play").addEventListener("click", () => setPlaying(!sim.playing));
  $("step").addEventListener("click", step);
  $("to-end").addEventListener("click", () => { sim.session.seek(sim.session.end); });
  for (const r of document.querySelectorAll("input[name=speed]")) r.addEventListener("change", () => setSpeed(Number(r.value)));
  $("scrub").addEventListener("input", (e) => {
    setPlaying(false);
    sim.session.seek(Number(e.target.value));
  });
  $("zoom").addEventListener("change", (e) => { sim.zoom = Number(e.target.value); });
  setupTimelinePointer();
  $("log-table").closest("details").addEventListener("toggle", () => { sim.shown = -1; });
  applyKnobs();
  setupExperiments();
  setupCompare();
  requestAnimationFrame(loop);
  await burstExperiment();
  setupStreams();
  setupAdaptive();
  setupLive();
  $("boot").textContent = "Core loaded: decisions below are made by tollgate's WebAssembly build.";
  document.body.dataset.ready = "true";
}

main().catch((e) => {
  $("boot").textContent = `The core failed to load: ${e.message}. Run www/build.sh to create www/pkg/.`;
  $("boot").classList.add("error");
  throw e;
});
