// Starts the README's run command (`scripts/run`: wrangler dev with the worker, the demo
// origin and www/) on a free loopback port with fresh storage, for the tests that need the
// real thing: the worker's smoke test and the demo page's live mode. Stops it with SIGINT
// (then SIGKILL after 15 s) and removes the storage.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** A loopback port that is free right now (asked from the OS, then released). */
export async function freePort() {
  const s = createServer();
  await new Promise((r, e) => {
    s.once("error", e);
    s.listen(0, "127.0.0.1", r);
  });
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * Runs `scripts/run` until `/health` answers (at most 5 minutes: the first run builds).
 * `port` defaults to a free one; `env` adds to the environment (e.g. secrets).
 * Returns `{ base, stop, log }` (`log()`: the output so far); a failure to start throws
 * with the output.
 */
export async function startRun({ port, env = {} } = {}) {
  port ??= await freePort();
  const base = `http://127.0.0.1:${port}`;
  const state = mkdtempSync(join(tmpdir(), "tollgate-wrangler-"));
  const child = spawn("bash", ["scripts/run", "--persist-to", state], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), CI: "true", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGINT");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    rmSync(state, { recursive: true, force: true });
  };
  const deadline = Date.now() + 300_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`scripts/run exited ${child.exitCode}:\n${log}`);
    }
    try {
      if ((await fetch(`${base}/health`)).ok) break;
    } catch {}
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`wrangler dev not up in time:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return { base, stop, log: () => log };
}
