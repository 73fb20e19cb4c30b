// Issue 41, "done when": 1,400 concurrent requests of one pro caller (a verified JWT whose
// plan claim is pro, 1,000/min) admit exactly 1,000 across two isolates. Two workers of the
// built script in one Miniflare, each its own isolate (its own wasm instance, token cache
// and deny cache), bound to ONE Durable Object namespace: worker "b" names worker "a"'s
// Limiter class. The requests are split between them and sent at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import path from "node:path";
import { Miniflare } from "miniflare";
import { CRATE, clearOfMinuteEdge } from "./harness.mjs";

const PRO = 1000;
const SENT = 1400;
const SECRET = "a shared secret of at least 32 bytes!";

function token(sub, plan) {
  const b64 = (s) => Buffer.from(s).toString("base64url");
  const claims = { sub, plan, exp: Math.floor(Date.now() / 1000) + 3600 };
  const input = `${b64(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64(JSON.stringify(claims))}`;
  return `${input}.${crypto.createHmac("sha256", SECRET).update(input).digest("base64url")}`;
}

const config = {
  settings: {
    // Long enough that the one object decides all 1,400 in time locally: a request that
    // timed out would be answered by on_error (closed: a 503), never counted as admitted.
    timeout_ms: 30000,
    api_keys: [crypto.createHash("sha256").update("unused").digest("hex")],
    jwt: { keys: [{ alg: "HS256", secret: "JWT_SECRET" }], plan_claim: "plan" },
  },
  policies: {
    api: {
      key: "api-key",
      default: "free",
      plans: [
        { name: "free", limit: "fixed-window 100/min" },
        { name: "pro", limit: `fixed-window ${PRO}/min` },
      ],
    },
  },
  routes: [{ path: "/api/", policies: ["api"], on_error: "closed" }],
};

test("1,400 concurrent requests of one pro caller across two isolates admit exactly 1,000", async (t) => {
  const worker = (name, limiter) => ({
    name,
    modules: true,
    scriptPath: path.join(CRATE, "js/entry.mjs"),
    modulesRoot: CRATE,
    modulesRules: [
      { type: "ESModule", include: ["**/*.js", "**/*.mjs"] },
      { type: "CompiledWasm", include: ["**/*.wasm"] },
    ],
    compatibilityDate: "2026-04-01",
    durableObjects: { LIMITER: limiter },
    bindings: { TOLLGATE_CONFIG: JSON.stringify(config), JWT_SECRET: SECRET },
  });
  const mf = new Miniflare({
    cf: false,
    durableObjectsPersist: false,
    workers: [
      worker("a", { className: "Limiter", useSQLite: true }),
      worker("b", { className: "Limiter", scriptName: "a", useSQLite: true }),
    ],
  });
  try {
    await mf.ready;
    const isolates = [await mf.getWorker("a"), await mf.getWorker("b")];
    const headers = { authorization: `Bearer ${token("acme", "pro")}`, "cf-connecting-ip": "203.0.113.200" };
    // One fixed window for the whole burst (about 10 s locally on 2 shared cores).
    await clearOfMinuteEdge(25_000);
    const started = Date.now();
    const statuses = await Promise.all(
      Array.from({ length: SENT }, async (_, i) => {
        const r = await isolates[i % 2].fetch("http://edge.test/api/x", { headers });
        await r.arrayBuffer();
        return [i % 2, r.status];
      }),
    );
    t.diagnostic(`${SENT} requests over two isolates in ${Date.now() - started} ms`);
    const count = (status) => statuses.filter(([, st]) => st === status).length;
    const crossed = Math.floor(started / 60_000) !== Math.floor(Date.now() / 60_000);
    assert.deepEqual(
      { admitted: count(200), denied: count(429), other: SENT - count(200) - count(429) },
      { admitted: PRO, denied: SENT - PRO, other: 0 },
      crossed ? "the burst outlasted its margin and crossed into the next minute's window" : undefined,
    );
  } finally {
    await mf.dispose();
  }
});
