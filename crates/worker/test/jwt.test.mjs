// Issue 41 at the edge: plans chosen by a verified JWT. Real tokens, signed here with Node's
// crypto (RS256 and EdDSA keys given in the config as PEM and JWK, HS256 by a secret binding,
// ES256 from a JWKS served on a loopback port), verified by the worker with WebCrypto. The
// plan claim chooses free (5/min) or pro (20/min); refused tokens (forged, expired, not yet
// valid, another audience, alg none, algorithm confusion, oversized, malformed, an unknown
// kid) count as anonymous in the ONE bucket of their IP, or are answered 401 as configured;
// a rotated JWKS is followed (a new kid accepted, a removed one refused); an override set on
// a subject applies.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import http from "node:http";
import { start, hit, clearOfMinuteEdge } from "./harness.mjs";

const ANONYMOUS = 10;
const FREE = 5;
const PRO = 20;
const SECRET = "a shared secret of at least 32 bytes!";

const pair = (type, opts) => crypto.generateKeyPairSync(type, opts);
const rsa = pair("rsa", { modulusLength: 2048 });
const ec = pair("ec", { namedCurve: "P-256" });
const ec2 = pair("ec", { namedCurve: "P-256" });
const ed = pair("ed25519");
const other = pair("rsa", { modulusLength: 2048 });
const rsaPem = rsa.publicKey.export({ type: "spki", format: "pem" });

const b64 = (b) => Buffer.from(b).toString("base64url");
const now = () => Math.floor(Date.now() / 1000);

/** A JWS of `header` and `claims` signed by `sign(input) -> bytes`. */
function jws(header, claims, sign) {
  const input = `${b64(JSON.stringify(header))}.${b64(JSON.stringify(claims))}`;
  return `${input}.${b64(sign(Buffer.from(input)))}`;
}

const signers = {
  RS256: (key) => (d) => crypto.sign("sha256", d, key),
  ES256: (key) => (d) => crypto.sign("sha256", d, { key, dsaEncoding: "ieee-p1363" }),
  EdDSA: (key) => (d) => crypto.sign(null, d, key),
  HS256: (secret) => (d) => crypto.createHmac("sha256", secret).update(d).digest(),
};

/** A token of `sub` on `plan` for audience "api", signed with `alg` by `key` under `kid`. */
function token(alg, key, kid, sub, plan, extra = {}) {
  const claims = { sub, plan, aud: "api", exp: now() + 3600, ...extra };
  return jws({ alg, kid, typ: "JWT" }, claims, signers[alg](key));
}

const jwk = (publicKey, kid) => ({ ...publicKey.export({ format: "jwk" }), kid, use: "sig" });

/** The issuer's JWKS on a loopback port: `set(keys)` replaces it; `fetches` counts reads. */
async function issuer() {
  const state = { keys: [], fetches: 0 };
  const server = http.createServer((req, res) => {
    state.fetches++;
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ keys: state.keys }));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${server.address().port}/jwks`,
    state,
    close: () => new Promise((r) => server.close(r)),
  };
}

const config = (jwksUrl, onInvalid) => ({
  // The API key header still names keys; listing them keeps invented ones off fresh buckets.
  settings: {
    api_keys: [crypto.createHash("sha256").update("unused").digest("hex")],
    jwt: {
      keys: [
        { kid: "rsa-1", alg: "RS256", pem: rsaPem },
        { kid: "ed-1", jwk: jwk(ed.publicKey) },
        { kid: "hs-1", alg: "HS256", secret: "JWT_SECRET" },
      ],
      jwks_url: jwksUrl,
      jwks_min_refetch_secs: 1,
      plan_claim: "plan",
      audience: "api",
      on_invalid: onInvalid,
    },
  },
  policies: {
    api: {
      key: "api-key",
      default: "anonymous",
      plans: [
        { name: "anonymous", limit: `fixed-window ${ANONYMOUS}/min` },
        { name: "free", limit: `fixed-window ${FREE}/min` },
        { name: "pro", limit: `fixed-window ${PRO}/min` },
      ],
    },
  },
  routes: [
    { path: "/api/", policies: ["api"] },
    // A route of its own way with refused tokens, whatever the section's.
    { path: "/strict/", policies: ["api"], on_invalid_token: "reject" },
  ],
});

let jwks;
let anonymous;
let reject;
before(async () => {
  jwks = await issuer();
  jwks.state.keys = [jwk(ec.publicKey, "ec-1")];
  const bindings = { JWT_SECRET: SECRET };
  anonymous = await start({ config: config(jwks.url, "anonymous"), bindings });
  reject = await start({ config: config(jwks.url, "reject"), bindings });
});
after(async () => {
  await anonymous.dispose();
  await reject.dispose();
  await jwks.close();
});

const bearer = (t) => (t === undefined ? {} : { authorization: `Bearer ${t}` });
const remaining = (r) => Number(/r=(\d+)/.exec(r.headers.get("ratelimit") ?? "")?.[1]);

/** Requests `/api/x` with token `t` until the first 429 (at most `max`); how many passed. */
async function admitted(edge, t, { ip = "203.0.113.120", max = 40 } = {}) {
  for (let n = 0; n < max; n++) {
    const r = await hit(edge, "/api/x", { ip, headers: bearer(t) });
    if (r.status === 429) return n;
    assert.equal(r.status, 200, r.text);
  }
  return max;
}

/** The refused tokens, each with what makes it refused. */
function refused() {
  const claims = { sub: "mallory", plan: "pro", aud: "api", exp: now() + 3600 };
  const good = token("RS256", rsa.privateKey, "rsa-1", "mallory", "free");
  const [h] = good.split(".");
  return [
    // A valid token's signature over other claims (plan raised to pro).
    ["forged", `${h}.${b64(JSON.stringify(claims))}.${good.split(".")[2]}`],
    ["signed by another key", token("RS256", other.privateKey, "rsa-1", "mallory", "pro")],
    ["expired", token("RS256", rsa.privateKey, "rsa-1", "mallory", "pro", { exp: now() - 3600 })],
    ["not yet valid", token("EdDSA", ed.privateKey, "ed-1", "mallory", "pro", { nbf: now() + 3600 })],
    ["another audience", token("HS256", SECRET, "hs-1", "mallory", "pro", { aud: "billing" })],
    ["alg none", jws({ alg: "none" }, claims, () => Buffer.alloc(0))],
    // HS256 "signed" with the RSA public key's PEM as its secret, naming the RSA key.
    ["algorithm confusion", jws({ alg: "HS256", kid: "rsa-1" }, claims, signers.HS256(rsaPem))],
    ["oversized", token("HS256", SECRET, "hs-1", "mallory", "pro", { pad: "x".repeat(9 * 1024) })],
    ["malformed", "not.a-token"],
  ];
}

test("each algorithm verifies and the plan claim chooses free or pro, counted by subject", async () => {
  await clearOfMinuteEdge(15_000);
  const cases = [
    ["RS256", rsa.privateKey, "rsa-1", "alice", "pro", PRO],
    ["ES256", ec.privateKey, "ec-1", "bob", "free", FREE],
    ["EdDSA", ed.privateKey, "ed-1", "carol", "pro", PRO],
    ["HS256", SECRET, "hs-1", "dave", "free", FREE],
    // A plan the policy lacks: the default plan, still by subject.
    ["RS256", rsa.privateKey, "rsa-1", "erin", "platinum", ANONYMOUS],
  ];
  for (const [alg, key, kid, sub, plan, limit] of cases) {
    const t = token(alg, key, kid, sub, plan);
    assert.equal(await admitted(anonymous, t), limit, `${alg} ${sub} on ${plan}`);
  }
  // The same subject from another IP: its own counter, spent.
  const again = token("HS256", SECRET, "hs-1", "dave", "free");
  assert.equal((await hit(anonymous, "/api/x", { ip: "198.51.100.7", headers: bearer(again) })).status, 429);
  // The IP's anonymous bucket was not touched by any of them.
  const r = await hit(anonymous, "/api/x", { ip: "203.0.113.120" });
  assert.equal(r.status, 200);
  assert.equal(remaining(r), ANONYMOUS - 1);
});

test("every refused token counts as anonymous in the one bucket of its IP, never a fresh one", async () => {
  await clearOfMinuteEdge(15_000);
  const ip = "203.0.113.121";
  const tokens = refused();
  assert.ok(tokens.length < ANONYMOUS);
  for (const [i, [why, t]] of tokens.entries()) {
    const r = await hit(anonymous, "/api/x", { ip, headers: bearer(t) });
    assert.equal(r.status, 200, `${why}: ${r.text}`);
    assert.match(r.headers.get("ratelimit-policy"), new RegExp(`q=${ANONYMOUS}`), why);
    // One bucket for every refused token: the i-th spends its (i+1)-th request.
    assert.equal(remaining(r), ANONYMOUS - 1 - i, why);
  }
  const plain = await hit(anonymous, "/api/x", { ip });
  assert.equal(remaining(plain), ANONYMOUS - 1 - tokens.length, "no token: the same bucket");
});

test("a config that rejects answers each refused token 401 with a problem, never echoing it", async () => {
  for (const [why, t] of refused()) {
    const r = await hit(reject, "/api/x", { ip: "203.0.113.122", headers: bearer(t) });
    assert.equal(r.status, 401, `${why}: ${r.text}`);
    assert.equal(r.headers.get("www-authenticate"), 'Bearer error="invalid_token"', why);
    assert.equal(r.headers.get("content-type"), "application/problem+json", why);
    const body = JSON.parse(r.text);
    assert.equal(body.error, "invalid-token", why);
    assert.ok(!r.text.includes(t), `${why}: the token is not echoed`);
  }
  // A valid token and no token are answered as usual.
  const t = token("EdDSA", ed.privateKey, "ed-1", "frank", "pro");
  assert.equal((await hit(reject, "/api/x", { ip: "203.0.113.122", headers: bearer(t) })).status, 200);
  assert.equal((await hit(reject, "/api/x", { ip: "203.0.113.122" })).status, 200);
});

test("a rotated JWKS is followed: a new kid is accepted, a removed one refused, fetches bounded", async () => {
  const old = token("ES256", ec.privateKey, "ec-1", "grace", "free");
  const fresh = token("ES256", ec2.privateKey, "ec-2", "grace", "free");
  const status = async (t) => (await hit(reject, "/api/x", { ip: "203.0.113.123", headers: bearer(t) })).status;
  assert.equal(await status(old), 200);
  // An unknown kid refetches at most once per jwks_min_refetch_secs (1 s here), however many
  // tokens name it.
  await new Promise((r) => setTimeout(r, 1100));
  const before = jwks.state.fetches;
  for (let i = 0; i < 5; i++) assert.equal(await status(fresh), 401);
  assert.ok(jwks.state.fetches - before <= 1, `${jwks.state.fetches - before} fetches`);
  // The issuer rotates: ec-2 published, ec-1 removed.
  jwks.state.keys = [jwk(ec2.publicKey, "ec-2")];
  await new Promise((r) => setTimeout(r, 1100));
  assert.equal(await status(fresh), 200, "the new kid, after one refetch");
  // The old token was verified (and cached) before: refused now all the same.
  assert.equal(await status(old), 401, "the removed kid");
});

test("an override set on a JWT subject applies at its next decision and is gone when cleared", async () => {
  await clearOfMinuteEdge(15_000);
  const t = token("HS256", SECRET, "hs-1", "heidi", "free");
  const ip = "203.0.113.124";
  assert.equal(await admitted(anonymous, t, { ip }), FREE);
  const override = (op, extra = {}) => anonymous.admin(`/admin/v1/overrides/${op}`, { policy: "api", subject: "heidi", ...extra });
  const set = await override("set", { plan: "pro" });
  assert.equal(set.status, 200, JSON.stringify(set.body));
  assert.equal(await admitted(anonymous, t, { ip }), PRO - FREE, "pro, less what free spent");
  assert.equal((await override("clear")).status, 200);
  assert.equal(await admitted(anonymous, t, { ip }), 0, "back on free, spent");
});

test("a route's on_invalid_token answers refused tokens its own way", async () => {
  const forged = refused()[0][1];
  const strict = await hit(anonymous, "/strict/x", { ip: "203.0.113.125", headers: bearer(forged) });
  assert.equal(strict.status, 401, strict.text);
  assert.equal(JSON.parse(strict.text).error, "invalid-token");
  const api = await hit(anonymous, "/api/x", { ip: "203.0.113.125", headers: bearer(forged) });
  assert.equal(api.status, 200, "the section's anonymous elsewhere");
  const t = token("RS256", rsa.privateKey, "rsa-1", "ivan", "pro");
  // A valid token passes to the origin (the demo origin knows no /strict/: its 404), under pro.
  const ok = await hit(anonymous, "/strict/x", { ip: "203.0.113.125", headers: bearer(t) });
  assert.equal(ok.status, 404, ok.text);
  assert.match(ok.headers.get("ratelimit-policy"), new RegExp(`q=${PRO}`));
});
