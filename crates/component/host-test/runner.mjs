// Replays tollgate's shared conformance vectors (tests/vectors/*.json at the repository
// root) through the component, loaded by jco in Node. The same files are replayed by the Rust
// core's own test (tests/vectors.rs); a mismatch here means the component decides
// differently from the core.
import { readdirSync, readFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));

/** The repository's shared vector folder (override with TOLLGATE_VECTORS). */
export const vectorDir = process.env.TOLLGATE_VECTORS ?? join(here, '..', '..', '..', 'tests', 'vectors');

/** The transpiled component (built by crates/component/build.sh). */
export const componentJs = process.env.TOLLGATE_COMPONENT_JS ?? join(here, '..', 'build', 'js', 'tollgate.js');

/** Every `*.json` file of `dir`, sorted, parsed. */
export function vectorFiles(dir = vectorDir) {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => ({ file: f, vector: JSON.parse(readFileSync(join(dir, f), 'utf8')) }));
}

/** The runners' key bound ("a large max_keys"), as in tests/vectors.rs. */
export const MAX_KEYS = 10_000;

/** A u64 from the component as a JSON number; refuses values a double cannot hold exactly. */
function num(big) {
  if (typeof big !== 'bigint') throw new TypeError(`expected a u64 (BigInt), got ${typeof big}`);
  if (big > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`u64 ${big} is beyond 2^53`);
  return Number(big);
}

/** A WIT `decision` in the vectors' JSON shape (MillisDecision's camelCase names). */
export function decisionJson(d) {
  return {
    allowed: d.allowed,
    limit: num(d.limit),
    remaining: num(d.remaining),
    resetAfter: num(d.resetAfterMs),
    retryAfter: num(d.retryAfterMs),
    delay: num(d.delayMs),
  };
}

/** The payload of a WIT `result` error that jco threw (a ComponentError), or rethrows. */
export function payload(err) {
  if (err && typeof err === 'object' && 'payload' in err) return err.payload;
  throw err;
}

/** Calls `f`; returns `{ok}` or `{err}` with the WIT error payload. */
export function attempt(f) {
  try {
    return { ok: f() };
  } catch (e) {
    return { err: payload(e) };
  }
}

/** The WIT `field` enum case as the core's `Field::name()` spells it. */
export const coreFieldName = (field) => (field === 'max-in-flight' ? 'max_in_flight' : field);

/** Makes the keyed limiter a vector file names. */
export function makeLimiter(keyed, spec, maxKeys = MAX_KEYS) {
  const { KeyedLimiter } = keyed;
  if ('policy' in spec) return KeyedLimiter.create(spec.policy, maxKeys);
  if ('stack' in spec) return KeyedLimiter.createStack(spec.stack, maxKeys);
  if ('fairShare' in spec) {
    return KeyedLimiter.createFairShare(spec.fairShare.shared, spec.fairShare.tenant, maxKeys);
  }
  throw new Error(`limiter spec needs policy, stack or fairShare: ${JSON.stringify(spec)}`);
}

/**
 * Runs one step; returns what a vector file would say about it (`undefined` for steps that
 * answer nothing), with the defaults of tests/vectors.rs (op check, t 0, cost 1); `stacked`
 * (a stack or fair share) adds each limit's decision to a check's answer.
 */
export function runStep(limiter, step, stacked = false) {
  const op = step.op ?? 'check';
  if (typeof step.key !== 'string') throw new Error(`step without a key: ${JSON.stringify(step)}`);
  const now = BigInt(step.t ?? 0);
  const cost = BigInt(step.cost ?? 1);
  const decided = (f) => {
    const r = attempt(f);
    return 'ok' in r ? decisionJson(r.ok) : { error: r.err.tag };
  };
  switch (op) {
    case 'check': {
      if (!stacked) return decided(() => limiter.checkTenant(step.key, step.tenant ?? undefined, now, cost));
      // A stack or fair share: each limit's decision too (`each`, as tests/vectors.rs says).
      const r = attempt(() => limiter.checkDetailed(step.key, step.tenant ?? undefined, now, cost));
      if ('err' in r) return { error: r.err.tag };
      return { ...decisionJson(r.ok.decision), each: r.ok.each.map(decisionJson) };
    }
    case 'peek':
      return decided(() => limiter.peek(step.key, now));
    case 'release': {
      const r = attempt(() => limiter.release(step.key, cost));
      return 'err' in r ? { error: r.err.tag } : undefined;
    }
    case 'reset':
      limiter.reset(step.key);
      return undefined;
    default:
      throw new Error(`unknown op ${op}`);
  }
}
