// Starts the built worker (crates/worker/build) under Miniflare, the local Workers runtime
// (workerd), with the limiter's Durable Object on SQLite storage.
import { Miniflare } from "miniflare";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const CRATE = path.resolve(here, "..");
export const BUILD = path.join(CRATE, "build");
export const CHECK_SECRET = "check-secret-for-tests";
export const ADMIN_SECRET = "admin-secret-for-tests";

/**
 * @param {object} o
 * @param {object|string} [o.config] TOLLGATE_CONFIG (object -> JSON); omitted: the bundled file
 * @param {boolean} [o.withObject=true] bind the Durable Object (false: the coordinator is missing)
 * @param {string} [o.persist] directory for durable state (restart tests)
 * @param {object} [o.bindings] extra vars
 * @param {false|"simulator"|"recorder"} [o.analytics=false] bind a Workers Analytics Engine
 *   dataset as ANALYTICS: "simulator" is Miniflare's own (it accepts data points and keeps
 *   none); "recorder" is a wrapped binding with the dataset's one method, `writeDataPoint`,
 *   that logs each point, collected in the returned `dataPoints`
 */
export async function start({ config, withObject = true, persist, bindings = {}, analytics = false } = {}) {
  const vars = { CHECK_SECRET, ADMIN_SECRET, ...bindings };
  if (config !== undefined) vars.TOLLGATE_CONFIG = typeof config === "string" ? config : JSON.stringify(config);
  const edge = {
    modules: true,
    scriptPath: path.join(CRATE, "js/entry.mjs"),
    modulesRoot: CRATE,
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    durableObjects: withObject ? { LIMITER: { className: "Limiter", useSQLite: true } } : {},
    bindings: vars,
  };
  const shared = { durableObjectsPersist: persist ?? false, cf: false };
  const dataPoints = [];
  let mf;
  if (analytics === "recorder") {
    const sink = `export default function () {
      return { writeDataPoint(point) { console.log("tollgate-test-data-point " + JSON.stringify(point)); } };
    }`;
    mf = new Miniflare({
      ...shared,
      workers: [
        { ...edge, name: "edge", wrappedBindings: { ANALYTICS: { scriptName: "analytics-recorder" } } },
        { name: "analytics-recorder", modules: true, script: sink },
      ],
      handleStructuredLogs: ({ message }) => {
        const m = /^tollgate-test-data-point (.*)$/.exec(message);
        if (m) dataPoints.push(JSON.parse(m[1]));
        else console.log(message);
      },
    });
  } else {
    const simulator = analytics === "simulator" ? { analyticsEngineDatasets: { ANALYTICS: { dataset: "tollgate_test" } } } : {};
    mf = new Miniflare({ ...shared, ...edge, ...simulator });
  }
  await mf.ready;
  const base = "http://edge.test";
  const fetch = (p, init = {}) => mf.dispatchFetch(base + p, init);
  const api = async (p, body, secret = CHECK_SECRET) => {
    const r = await fetch(p, {
      method: "POST",
      headers: { authorization: `Bearer ${secret}`, "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    return { status: r.status, headers: r.headers, body: await r.json() };
  };
  const admin = (p, body) => api(p, body, ADMIN_SECRET);
  const stats = async () => {
    const r = await fetch("/admin/v1/stats", { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
    return (await r.json()).policies;
  };
  return { mf, fetch, api, admin, stats, dataPoints, dispose: () => mf.dispose() };
}

/** GET `p` as client `ip` with extra headers; returns status, headers and the body text. */
export async function hit(edge, p, { ip, headers = {}, method = "GET", body } = {}) {
  const h = { ...headers };
  if (ip) h["cf-connecting-ip"] = ip;
  const r = await edge.fetch(p, { method, headers: h, body });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

/**
 * Waits, when a minute boundary is less than `marginMs` away, until just past it. The
 * per-minute fixed windows these tests count in start on the wall clock's minute; a test that
 * expects "the fifth is denied" fails when a new window opens between its requests. Called
 * before each test that counts in such a window (the waits are up to `marginMs`, about one
 * test in twenty).
 */
export async function clearOfMinuteEdge(marginMs = 3000) {
  const left = 60_000 - (Date.now() % 60_000);
  if (left < marginMs) await new Promise((r) => setTimeout(r, left + 50));
}
