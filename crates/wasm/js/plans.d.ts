// Types of `tollgate/plans`: limits that depend on who calls (plans), per-key overrides, and
// spend kept across plan changes (the core's PlanLimiter, in its own .wasm).
import type { Decision, RateLimitHeaders } from "./index.js";

/** A plan's limits: one policy string (`"100/min"`) or an all-or-nothing stack (`["1000/min", "50/s"]`). */
export type PlanLimits = string | string[];

/** Options of a {@link PlanLimiter}. */
export interface PlanLimiterOptions {
  /** The plans by name, in order: `{ free: "100/min", pro: ["1000/min", "50/s"] }` (at least one). */
  plans: Record<string, PlanLimits>;
  /** The plan of a check that names none (`undefined`); default: the first plan. */
  default?: string;
  /** The most keys kept in memory (default 100,000; fresh keys are not stored; an idle key is evicted when full). */
  maxKeys?: number;
  /** The most keys with an override (default 10,000; an override is never evicted: `set` beyond it throws). */
  maxOverrides?: number;
}

/** A decision of a {@link PlanLimiter}: a {@link Decision}, and what it was made by. */
export interface PlanDecision extends Decision {
  /** The plan whose limits decided (the call's, or the key's override's); `null` for the key's own limits (an override of `limits`). */
  plan: string | null;
}

/** {@link PlanLimiter.checkDetailed}'s decision: each limit's decision too, in stack order. */
export interface DetailedPlanDecision extends PlanDecision {
  each: Decision[];
}

/** A key's override: another plan, or limits of its own (canonical policy strings when read back). */
export type PlanOverride = { plan: string } | { limits: string | string[] };

/** Options of a check. */
export interface PlanCheckOptions {
  /** What the request costs (default 1). */
  cost?: number;
  /** The time in ms (default `Date.now()`). */
  now?: number;
}

/**
 * A keyed limiter whose limits depend on the caller's plan. Each check names the key's plan;
 * a key may have an override (another plan, or limits of its own) set at run time, which
 * applies from its next check until cleared; a key whose limits change keeps what it has
 * spent (what was spent stays spent, clamped to the new capacity), so switching plans never
 * frees a key. Errors are `TypeError`/`RangeError` with `field` and `rule` (a bad plan names
 * the plan: `field: "plans.pro[1]"`, `rule: "invalid-policy"`).
 */
export class PlanLimiter {
  constructor(options: PlanLimiterOptions);
  /** The plans' names, in order. */
  readonly plans: string[];
  /** The plan of a check that names none. */
  readonly defaultPlan: string;
  /** The number of limited keys held (fresh keys are not stored). */
  readonly size: number;
  /** The policies of a plan in canonical form (stack order). */
  policiesOf(plan: string): string[];
  /**
   * Decides a request for `key` under `plan` (`undefined`/`null`: the default plan), or its
   * override's limits, charging `cost` when admitted. A denial is a decision; an unknown
   * plan throws (`rule: "unknown-plan"`).
   */
  check(key: string, plan?: string | null, options?: PlanCheckOptions): PlanDecision;
  /** {@link check} with each limit's decision. */
  checkDetailed(key: string, plan?: string | null, options?: PlanCheckOptions): DetailedPlanDecision;
  /** Gives `key` an override from its next check on (throws for an unknown plan, invalid limits, or `maxOverrides` reached). */
  set(key: string, override: PlanOverride): void;
  /** The override of `key`, or `undefined`. */
  get(key: string): { plan: string } | { limits: string[] } | undefined;
  /** Clears the override of `key`; whether it had one. */
  clear(key: string): boolean;
  /**
   * The response headers for a decision of this limiter, its limits named by their plan
   * (`"pro"`, `"pro.1"`, ... for a stack; `"own"` for a key's own limits). For a plan of
   * several limits, pass `checkDetailed()`'s decision (it names them from `each`).
   */
  headers(decision: PlanDecision | DetailedPlanDecision, options?: { legacy?: boolean }): RateLimitHeaders;
  /** The application/problem+json body of a 429 for a denied decision; `undefined` when allowed. */
  problem(decision: PlanDecision | DetailedPlanDecision): string | undefined;
  /** Frees the wasm memory now (otherwise when garbage collected). */
  free(): void;
}
