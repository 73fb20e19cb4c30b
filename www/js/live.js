// Live mode: real requests to the edge worker serving this page (same origin), showing
// each answer's status and its RateLimit, RateLimit-Policy and Retry-After headers.

const $ = (id) => document.getElementById(id);

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text ?? "–";
  return td;
}

async function send() {
  const button = $("live-send");
  const path = $("live-path").value.trim() || "/api/demo";
  const count = Math.min(100, Math.max(1, Number($("live-count").value) || 1));
  const body = $("live-table").tBodies[0];
  const strip = $("live-strip");
  const status = $("live-status");
  button.disabled = true;
  body.replaceChildren();
  strip.replaceChildren();
  status.textContent = `Sending ${count} requests to ${path}…`;
  let ok = 0, limited = 0, other = 0, limitedSeen = false;
  try {
    for (let i = 1; i <= count; i++) {
      let r;
      try {
        r = await fetch(path, { cache: "no-store", headers: { accept: "application/json" } });
      } catch (e) {
        status.textContent = `No answer from ${location.origin} (${e.message}). Live mode needs the edge worker: run ./scripts/run and open http://127.0.0.1:8787/.`;
        return;
      }
      await r.body?.cancel();
      const h = (n) => r.headers.get(n);
      if (r.status === 429) limited++; else if (r.ok) ok++; else other++;
      const row = document.createElement("tr");
      row.className = r.status === 429 ? "no" : r.ok ? "ok" : "other";
      row.append(cell(String(i)), cell(String(r.status)), cell(h("ratelimit")), cell(h("ratelimit-policy")), cell(h("retry-after")));
      body.append(row);
      const mark = document.createElement("span");
      mark.className = row.className;
      mark.title = `#${i}: ${r.status}`;
      strip.append(mark);
      if (r.status === 429) limitedSeen = true;
      if (!h("ratelimit-policy") && !limitedSeen && i === 1 && !r.ok) {
        status.textContent = `${path} answered ${r.status} without rate-limit headers: this origin is not the edge worker (run ./scripts/run and open http://127.0.0.1:8787/).`;
        return;
      }
    }
    status.textContent = `${count} sent: ${ok} allowed, ${limited} limited (429)${other ? `, ${other} other` : ""}.`;
  } finally {
    button.disabled = false;
  }
}

/** Wires the live-mode controls. */
export function setupLive() {
  $("live-send").addEventListener("click", send);
}
