// Types of `tollgate/web`: the same API as `tollgate`, after `await init()`.
export * from "./index.js";

/** What `init` accepts: a URL or path of the .wasm, its bytes, a Response, or a compiled module. */
export type InitInput = RequestInfo | URL | Response | BufferSource | WebAssembly.Module;

/**
 * Loads the wasm core; call once before using the API. Without an argument it fetches
 * `tollgate_wasm_bg.wasm` next to the module.
 */
export default function init(
  module_or_path?: { module_or_path: InitInput | Promise<InitInput> } | InitInput | Promise<InitInput>,
): Promise<unknown>;

/** Instantiates the core synchronously from bytes or a compiled module. */
export function initSync(module: { module: BufferSource | WebAssembly.Module } | BufferSource | WebAssembly.Module): unknown;
