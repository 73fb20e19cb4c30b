// A real limiter (in memory or on Redis) whose settles a test can wait for: the middleware
// settles after the response is sent, so a test awaits `settled(n)`, the first n settles'
// answers, instead of sleeping.

/** Wraps `limiter.settle` (the real one, called as it is) and adds `settled(n)`. */
export function watchSettles(limiter) {
  const settles = [];
  let wake = () => {};
  const settle = limiter.settle.bind(limiter);
  limiter.settle = (...args) => {
    const s = settle(...args);
    settles.push(s);
    wake();
    return s;
  };
  limiter.settled = async (n) => {
    while (settles.length < n) await new Promise((r) => (wake = r));
    return Promise.all(settles);
  };
  return limiter;
}
