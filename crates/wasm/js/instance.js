
// tollgate: the instance guard, appended to each wasm-bindgen glue by build.sh (a plain
// function declaration, for the CommonJS and ES module glue alike; the glue calls it on the
// instance's exports).
//
// A call into wasm returns (an error from the core is a returned value the glue throws).
// Anything thrown out of a raw export is a trap (an allocation failure, a panic's
// `unreachable`) or the engine's stack limit hit inside wasm: the call stopped part way,
// leaving wasm memory as it was then (the shadow stack pointer moved, RefCell borrows held,
// the allocator or a limiter's table perhaps half updated). No later call can be trusted,
// whichever limiter it is on, so from then on every call throws `TollgateInstanceLost`
// instead of deciding on broken state or failing with "memory access out of bounds".
/** The instance's exports, each function throwing `TollgateInstanceLost` once one has trapped. */
function __tollgate_guard(exports) {
  let trap;
  function lost() {
    const e = new Error(
      `tollgate's WebAssembly instance is lost: a call trapped (${trap}), so the limiters' state in its memory can no longer be trusted; restart the process (or reload the page) for a fresh one`,
      { cause: trap },
    );
    e.name = "TollgateInstanceLost";
    return e;
  }
  const guarded = {};
  for (const [name, value] of Object.entries(exports)) {
    if (typeof value !== "function") {
      guarded[name] = value;
      continue;
    }
    // Fixed parameters rather than rest and spread where they suffice: the hot calls stay
    // plain calls (a wasm function ignores arguments past its own).
    guarded[name] =
      value.length <= 8
        ? function (a, b, c, d, e, f, g, h) {
            if (trap !== undefined) throw lost();
            try {
              return value(a, b, c, d, e, f, g, h);
            } catch (thrown) {
              trap = thrown;
              throw lost();
            }
          }
        : function (...args) {
            if (trap !== undefined) throw lost();
            try {
              return value(...args);
            } catch (thrown) {
              trap = thrown;
              throw lost();
            }
          };
  }
  return guarded;
}
