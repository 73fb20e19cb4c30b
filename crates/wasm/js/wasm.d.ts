// Types of `tollgate/tollgate.wasm`: the core's .wasm file itself, for bundlers. With a file
// loader (esbuild `--loader:.wasm=file`, Vite `?url`) the import is the URL the bundle serves
// it at; pass it to `init` of `tollgate/web`.
declare const url: string;
export default url;
