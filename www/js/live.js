// Live mode: a burst of real requests to the edge worker serving this page (same origin),
// showing each answer's status and its RateLimit, RateLimit-Policy and Retry-After headers.

const $ = (id) => document.getElementById(id);

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text ?? "–";
  return td;
}

/** One request; resolves to its status and headers, or { error }. */
async function one(method, path) {
  try {
    const r = await fetch(path, { method, cache: "no-store", headers: { accept: "application/json" } });
    await r.body?.cancel();
    const h = (n) => r.headers.get(n);
    return { status: r.status, ok: r.ok, rateLimit: h("ratelimit"), policy: h("ratelimit-policy"), retryAfter: h("retry-after") };
  } catch (e) {
    return { error: e.message };
  }
}

async function send() {
  const button = $("live-send");
  const method = $("live-method").value;
  const path = $("live-path").value.trim() || "/api/demo";
  const count = Math.min(100, Math.max(1, Number($("live-count").value) || 1));
  const body = $("live-table").tBodies[0];
  const strip = $("live-strip");
  const status = $("live-status");
  button.disabled = true;
  body.replaceChildren();
  strip.replaceChildren();
  status.textContent = `Sending ${count} × ${method} ${path}…`;
  try {
    // A burst: every request leaves at once (the browser queues beyond its connection limit).
    const answers = await Promise.all(Array.from({ length: count }, () => one(method, path)));
    const failed = answers.find((a) => a.error);
    if (failed) {
      status.textContent = `No answer from ${location.origin} (${failed.error}). Live mode needs the edge worker: run ./scripts/run and open http://127.0.0.1:8787/.`;
      return;
    }
    if (answers.every((a) => !a.policy)) {
      status.textContent = `${path} answered ${answers[0].status} without rate-limit headers: this origin is not the edge worker (run ./scripts/run and open http://127.0.0.1:8787/).`;
      return;
    }
    let ok = 0, limited = 0, other = 0;
    answers.forEach((a, i) => {
      if (a.status === 429) limited++; else if (a.ok) ok++; else other++;
      const row = document.createElement("tr");
      row.className = a.status === 429 ? "no" : a.ok ? "ok" : "other";
      row.append(cell(String(i + 1)), cell(String(a.status)), cell(a.rateLimit), cell(a.policy), cell(a.retryAfter));
      body.append(row);
      const mark = document.createElement("span");
      mark.className = row.className;
      mark.title = `#${i + 1}: ${a.status}`;
      strip.append(mark);
    });
    status.textContent = `${count} sent: ${ok} allowed, ${limited} limited (429)${other ? `, ${other} other` : ""}.`;
  } finally {
    button.disabled = false;
  }
}

/** Wires the live-mode controls. */
export function setupLive() {
  $("live-send").addEventListener("click", send);
}
