// Shared set-up for the demo page's tests: a static server for www/ on 127.0.0.1 (the page
// must work from any static server), and Debian's headless Chromium via playwright-core.
import { createServer } from "node:http";
import { readFile, mkdtemp, rm, mkdir } from "node:fs/promises";
import { existsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, normalize, extname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const WWW = fileURLToPath(new URL("..", import.meta.url));
export const ROOT = join(WWW, "..");
export const ARTIFACTS = join(ROOT, "artifacts", "demo");

const TYPES = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css",
  ".wasm": "application/wasm", ".csv": "text/csv", ".json": "application/json",
};

/** Serves www/ on a free loopback port; resolves to { base, close }. */
export async function serveWww() {
  const server = createServer(async (req, res) => {
    let path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    if (path.endsWith("/")) path += "index.html";
    const file = normalize(join(WWW, path));
    if (!file.startsWith(WWW) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404, { "content-type": "text/plain" });
      return res.end("not found");
    }
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    res.end(await readFile(file));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { base: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

/** Launches headless Chromium with a fresh profile; resolves to { browser, close }. */
export async function launch() {
  const userDataDir = await mkdtemp(join(tmpdir(), "tollgate-demo-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1200, height: 900 },
  });
  return {
    context,
    close: async () => {
      await context.close();
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Opens `url` in a new page and records console errors and uncaught exceptions in
 * `page.problems`. `ignore` filters messages that are expected (e.g. the browser's own
 * "Failed to load resource ... 429" line in live mode).
 */
export async function open(context, url, { ignore = () => false, viewport } = {}) {
  const page = await context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  page.problems = [];
  page.on("console", (m) => {
    if (m.type() === "error" && !ignore(m.text())) page.problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => page.problems.push(`pageerror: ${e.message}`));
  await page.goto(url);
  await page.waitForSelector("body[data-ready=true]", { timeout: 20_000 });
  return page;
}

export async function artifacts() {
  await mkdir(ARTIFACTS, { recursive: true });
  return ARTIFACTS;
}

/**
 * Labels that do not fit: every SVG <text> inside `root` must lie within its <svg> (1 px
 * tolerance) and overlap no other text of the same SVG; every element matching `html` must not
 * be wider than its box (clipped or scrolling text). Returns a list of problems (empty: fine).
 */
export async function labelProblems(page, root = "body", html = ".formula, .panel-sub, .verdict, figcaption, .hint, .numbers dd, #clock-time") {
  return page.evaluate(({ root, html }) => {
    const problems = [];
    const box = (r) => ({ l: r.left, r: r.right, t: r.top, b: r.bottom });
    const name = (t) => `"${t.textContent}"`;
    for (const svg of document.querySelector(root).querySelectorAll("svg")) {
      const s = svg.getBoundingClientRect();
      if (s.width === 0) continue; // hidden (a closed <details>)
      const texts = [...svg.querySelectorAll("text")].map((t) => ({ t, b: box(t.getBoundingClientRect()) }));
      for (const { t, b } of texts) {
        // An outline around the letters (the old page's layout class .grid also stroked SVG
        // grid lines, and every label inherited the stroke).
        if (getComputedStyle(t).stroke !== "none") problems.push(`${svg.id || "svg"}: ${name(t)} is outlined (stroke ${getComputedStyle(t).stroke})`);
        if (b.l < s.left - 1 || b.r > s.right + 1 || b.t < s.top - 1 || b.b > s.bottom + 1) {
          problems.push(`${svg.id || svg.getAttribute("aria-label")?.slice(0, 30)}: ${name(t)} outside its figure (${Math.round(b.l - s.left)}..${Math.round(b.r - s.left)} of ${Math.round(s.width)})`);
        }
      }
      for (let i = 0; i < texts.length; i++) {
        for (let j = i + 1; j < texts.length; j++) {
          const a = texts[i].b, c = texts[j].b;
          const w = Math.min(a.r, c.r) - Math.max(a.l, c.l), h = Math.min(a.b, c.b) - Math.max(a.t, c.t);
          if (w > 1 && h > 1) problems.push(`${svg.id || "svg"}: ${name(texts[i].t)} overlaps ${name(texts[j].t)}`);
        }
      }
    }
    for (const e of document.querySelector(root).querySelectorAll(html)) {
      if (e.offsetParent === null) continue;
      if (e.scrollWidth > e.clientWidth + 1) problems.push(`${e.id || e.className}: "${e.textContent.slice(0, 40)}" is wider than its box (${e.scrollWidth} > ${e.clientWidth})`);
    }
    return problems;
  }, { root, html });
}

/** The smallest rendered SVG text in `root`, in CSS pixels: [size, text]. */
export async function smallestSvgText(page, root = "body") {
  return page.evaluate((root) => {
    let min = [Infinity, ""];
    for (const svg of document.querySelector(root).querySelectorAll("svg")) {
      const r = svg.getBoundingClientRect();
      if (r.width === 0) continue;
      const vb = svg.viewBox.baseVal;
      const scale = vb && vb.width ? r.width / vb.width : 1;
      for (const t of svg.querySelectorAll("text")) {
        const px = parseFloat(getComputedStyle(t).fontSize) * scale;
        if (px < min[0]) min = [px, t.textContent];
      }
    }
    return min;
  }, root);
}

/** Moves the slider `#id` of `page` by keyboard (its step at a time) to `value`. */
export async function slide(page, id, value) {
  await page.focus(`#${id}`);
  for (let i = 0; i < 100; i++) {
    const v = Number(await page.inputValue(`#${id}`));
    if (v === value) return;
    await page.keyboard.press(v < value ? "ArrowRight" : "ArrowLeft");
  }
  throw new Error(`${id} did not reach ${value}`);
}
