// What the page says about each algorithm: one paragraph, the rule it applies, pros and cons
// (after the core's module docs). Text only: every decision the page
// shows comes from the core (the npm package's web build).

/** @typedef {{ id: string, name: string, bucket: boolean, about: string, rule: string, pros: string[], cons: string[], watch: string }} Algorithm */

/** @type {Algorithm[]} */
export const ALGORITHMS = [
  {
    id: "token-bucket",
    name: "Token bucket",
    bucket: true,
    about:
      "Picture a bucket of tokens. Each request pays a token; a tap drips new tokens in at a steady rate, " +
      "but the bucket only holds so many (the burst) and the rest spill over. Nobody needs a timer: the " +
      "core keeps the balance and the instant of the last refill, and tops the bucket up lazily when the " +
      "next request arrives. An idle client saves up to a full bucket and may spend it at once.",
    rule: "tokens = min(burst, tokens + rate × elapsed); admit when tokens ≥ cost, then pay cost. Any interval T admits at most burst + rate × T.",
    pros: ["Burst and sustained rate are two separate knobs", "Smooth: capacity comes back continuously", "Two numbers of state per key"],
    cons: ["A full bucket lets a whole burst through at once", "Choose the rate with burst + rate × T ≤ N if a peer allows at most N per T"],
    watch: "Watch the level drop with each request and refill at the rate.",
  },
  {
    id: "gcra",
    name: "GCRA",
    bucket: true,
    about:
      "The generic cell rate algorithm makes exactly the token bucket's decisions with one timestamp: the " +
      "theoretical arrival time (TAT), the instant at which the bucket would be full again. Each admitted " +
      "request pushes the TAT one emission interval (window ÷ limit) later; a request is admitted when the " +
      "pushed TAT lies no further ahead of now than the burst tolerance.",
    rule: "TAT' = max(TAT, now) + cost × window/limit; admit when TAT' − now ≤ burst × window/limit.",
    pros: ["The smallest state: a single number", "Same admissions as the token bucket, no refill arithmetic"],
    cons: ["The state is less intuitive than a token count"],
    watch: "Watch the TAT run ahead of now with each request and now catch up with it.",
  },
  {
    id: "sliding-window",
    name: "Sliding window counter",
    bucket: false,
    about:
      "Keeps only two counts per key: the previous fixed window's and the current one's. It estimates the " +
      "last W seconds as a share of the previous window plus all of the current one, and the share fades " +
      "from 1 to 0 as the current window goes by, so capacity comes back gradually. The estimate assumes " +
      "the previous window's requests were spread evenly, which is not always true.",
    rule: "estimate = prev × (1 − elapsed/W) + cur, computed before counting the request; admit when estimate < limit.",
    pros: ["Two counters per key", "No boundary burst", "Capacity returns gradually"],
    cons: ["An approximation: requests bunched at the end of the previous window are under-counted (it can admit a little more than the limit)"],
    watch: "Watch the previous window's weight fade as the current window fills.",
  },
  {
    id: "fixed-window",
    name: "Fixed window",
    bucket: false,
    about:
      "Cuts time into windows aligned to the clock and counts what each key spends in the current one. " +
      "At the boundary every count restarts at zero, for everyone at once. It is the simplest rule, and " +
      "its classic flaw is the boundary: a client can spend the limit at the end of one window and again " +
      "at the start of the next.",
    rule: "windows [kW, (k+1)W); admit when count + cost ≤ limit; the count restarts at every boundary.",
    pros: ["The simplest state: a count and a window number", "Memory does not depend on the limit"],
    cons: ["Up to 2 × limit in a short interval around a boundary", "Waiting clients all retry at the same instant"],
    watch: "Watch the count climb and drop to zero at each boundary.",
  },
  {
    id: "sliding-log",
    name: "Sliding log",
    bucket: false,
    about:
      "Writes down the time of every admitted request, like a doorman noting when each guest came in. " +
      "When a request arrives it crosses out the notes older than the window, counts the rest, and admits " +
      "the newcomer if there is room. Each note expires exactly W after it was written, so no window of " +
      "length W ever holds more than the limit.",
    rule: "window (t − W, t]; admit when the cost logged in it + cost ≤ limit; only admitted requests are logged.",
    pros: ["Exact: never more than the limit in any window", "No boundary effect, no estimate"],
    cons: ["Memory grows with the limit: up to one entry per admitted request"],
    watch: "Watch each logged request slide left and expire after one window.",
  },
  {
    id: "leaky-bucket",
    name: "Leaky bucket (meter)",
    bucket: true,
    about:
      "A bucket with a small hole in the bottom: each admitted request pours its cost in, and the level " +
      "drains at a steady rate. A request that would overflow the bucket is rejected at once; nothing " +
      "waits. It is the token bucket's mirror image (tokens = capacity − level): the two admit exactly " +
      "the same requests.",
    rule: "level = max(0, level − rate × elapsed); admit when level + cost ≤ capacity, then add cost.",
    pros: ["Reads naturally as “how full is the bucket”", "Same admissions as the token bucket"],
    cons: ["Like the token bucket, lets a full burst through at once"],
    watch: "Watch the water rise with each request and drain at the rate.",
  },
  {
    id: "leaky-queue",
    name: "Leaky bucket (queue)",
    bucket: true,
    about:
      "Requests join a queue of limited size that drains at a steady rate, one every window ÷ limit. A " +
      "burst is not rejected: it waits in line and leaves evenly spaced, so the service behind it never " +
      "sees more than the drain rate. A request that finds the queue full is dropped. The price is " +
      "latency: the queue's size is also the longest wait.",
    rule: "an admitted request leaves at max(now, last departure) + cost × window/limit and waits until then; a full queue rejects.",
    pros: ["Smooth output whatever the bursts", "Bursts wait instead of failing"],
    cons: ["Adds latency, up to capacity ÷ rate", "Idle time earns no credit"],
    watch: "Watch the queue fill and drain one request per interval.",
  },
];

/** The burst experiment's five algorithms (limit 10 per 1 s; bucket capacity 10, rate 10/s). */
export const EXPERIMENT = [
  { id: "fixed-window", name: "Fixed window", policy: "fixed-window 10/s", color: "#d9480f" },
  { id: "sliding-log", name: "Sliding log", policy: "sliding-log 10/s", color: "#2b8a3e" },
  { id: "sliding-window", name: "Sliding counter", policy: "sliding-window 10/s", color: "#1c7ed6" },
  { id: "token-bucket", name: "Token bucket", policy: "token-bucket 10/s", color: "#ae3ec9" },
  { id: "leaky-queue", name: "Leaky bucket queue (output)", policy: "leaky-queue 10/s", color: "#495057" },
];
