// The record a limiter keeps of its reservations, which makes a settle idempotent: the
// reservations issued and not settled yet (`open`), and the outcome of those settled
// (`settled`). The core settles; this record only decides whether a settle reaches it.
//
// Both are bounded by `maxReservations` (each holds at most that many; the oldest entry
// goes first). The bound errs on the side of a charge, never a double count: a reservation
// dropped from `open` (never settled, and older than `maxReservations` newer ones) stays
// charged at its estimate, as any reservation never settled does, and settling it later is
// the named error `unknown-reservation`; a settle dropped from `settled` answers the same
// error to a retry instead of its first outcome. Neither settles twice.

import { optionError } from "./checks.js";

export class Reservations {
  /** The limiter number of this limiter's reservations (known from its first one). */
  issuer;
  /** id -> the reservation as issued (its numbers, which a settle uses). */
  #open = new Map();
  /** id -> `{ key, issued, answer }`: the settle's key, the reservation, the answer. */
  #settled = new Map();
  #max;

  constructor(max) {
    this.#max = max;
  }

  /** Records `r`, just issued. */
  issued(r) {
    this.issuer ??= r.limiter;
    bounded(this.#open, this.#max, r.id, r);
  }

  /**
   * For a settle of `r`: `{ settled }` with the first settle's answer when `r` was settled
   * already, `{ open }` with the reservation as issued when it waits for its settle, or
   * `{}` for a reservation of another limiter (the core names why it is foreign). Throws
   * `unknown-reservation` for one of this limiter that is in neither record.
   */
  find(r) {
    if (r.limiter !== this.issuer) return {};
    const settled = this.#settled.get(r.id);
    // Settled on another key: the core refuses it (foreign-key) on its numbers as issued.
    if (settled !== undefined) return settled.key === r.key ? { settled: settled.answer } : { open: settled.issued };
    const open = this.#open.get(r.id);
    if (open !== undefined) return { open };
    throw optionError(
      RangeError,
      "reservation",
      r.id,
      "unknown-reservation",
      "not a reservation of this limiter waiting for its settle (never issued, or dropped from the record of maxReservations)",
    );
  }

  /** Records the settle of `issued` (the reservation as issued) and its answer. */
  settled(issued, answer) {
    this.#open.delete(issued.id);
    bounded(this.#settled, this.#max, issued.id, { key: issued.key, issued, answer });
  }
}

/** Sets `map[k] = v`, first dropping the oldest entry when `map` holds `max` already. */
function bounded(map, max, k, v) {
  if (map.size >= max) map.delete(map.keys().next().value);
  map.set(k, v);
}
