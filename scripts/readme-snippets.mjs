#!/usr/bin/env node
// Extracts the code examples of Markdown files, so that a test can compile (and run) exactly
// what the READMEs show: nothing is copied by hand.
//
//   node scripts/readme-snippets.mjs ts   OUT_DIR FILE.md...   every js/ts fence -> OUT_DIR/NN.ts
//   node scripts/readme-snippets.mjs rust OUT_DIR FILE.md...   every rust fence  -> OUT_DIR/NN.rs
//   node scripts/readme-snippets.mjs js   OUT_DIR FILE.md...   every js/ts fence as it is -> NN.mjs,
//                                                              every sh fence -> NN.sh (to run them)
//
// ts: each snippet becomes a module of its own (so two snippets may both say `const limiter`).
// One that exports something is a whole module and is written as it is; in any other, the
// `import` lines (and `/// <reference>` directives) stay at the top and the rest becomes the
// body of an exported async function (such an example is a handler's body: it may `return`
// or `await`).
// A fence tagged `js no-check` (a shell-like fragment, not a program) is left out.
// rust: a fence whose body has `fn main` is written as it is; any other is wrapped in
// `fn main`, as rustdoc wraps a doctest (lines starting with `# ` are rustdoc's hidden lines:
// kept, without the `# `). Each file starts with a comment naming its source and its fence's
// flags (`ignore`, `no_run`), and OUT_DIR/index.json lists { file, source, flags }.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join, relative } from "node:path";

const [lang, out, ...files] = process.argv.slice(2);
if (!["ts", "rust", "js"].includes(lang) || !out || files.length === 0) {
  console.error("usage: readme-snippets.mjs ts|rust OUT_DIR FILE.md...");
  process.exit(2);
}
mkdirSync(out, { recursive: true });

/** The fenced blocks of `text`: { info, body, line }. */
function fences(text) {
  const blocks = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(.*)$/.exec(lines[i]);
    if (!open) continue;
    const indent = open[1].length;
    const body = [];
    let j = i + 1;
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]); j++) body.push(lines[j].slice(indent));
    blocks.push({ info: open[2].trim(), body: body.join("\n"), line: i + 1 });
    i = j;
  }
  return blocks;
}

const wanted = (info) => {
  const [tag, ...flags] = info.split(/[\s,]+/);
  if (lang === "js") return ["js", "mjs", "sh"].includes(tag);
  if (lang === "ts") return ["js", "ts", "javascript", "typescript", "mjs"].includes(tag) && !flags.includes("no-check");
  return tag === "rust";
};

const index = [];
let n = 0;
for (const file of files) {
  for (const block of fences(readFileSync(file, "utf8"))) {
    if (!wanted(block.info)) continue;
    n++;
    const name = String(n).padStart(2, "0");
    const source = `${relative(process.cwd(), file)}:${block.line}`;
    const flags = block.info.split(/[\s,]+/).slice(1);
    let code;
    let ext = lang === "ts" ? "ts" : "rs";
    if (lang === "js") {
      ext = block.info.startsWith("sh") ? "sh" : "mjs";
      code = `${ext === "sh" ? "#" : "//"} ${source} (extracted by scripts/readme-snippets.mjs)\n${block.body}\n`;
    } else if (lang === "ts") {
      const lines = block.body.split("\n");
      // An import may span lines: it runs to the line holding `from "..."` (or a bare `import "x"`).
      const imports = [];
      const rest = [];
      let inImport = false;
      for (const line of lines) {
        // A triple-slash directive (`/// <reference ...>`) stays at the top with the imports.
        if (!inImport && /^\/\/\/\s*</.test(line)) imports.push(line);
        else if (inImport || /^import\s/.test(line)) {
          imports.push(line);
          inImport = !/from\s+["'][^"']+["'];?\s*(\/\/.*)?$/.test(line) && !/^import\s+["']/.test(line);
        } else rest.push(line);
      }
      const head = `// ${source} (extracted by scripts/readme-snippets.mjs)\n`;
      if (rest.some((l) => /^export\s/.test(l))) {
        code = `${head}${block.body}\n`; // a whole module (it exports): as it is
      } else {
        code = `${head}${imports.join("\n")}\n\nexport async function snippet${name}(): Promise<unknown> {\n${rest.map((l) => (l ? `  ${l}` : l)).join("\n")}\n  return undefined;\n}\n`;
      }
    } else {
      const body = block.body
        .split("\n")
        .map((l) => (l === "#" ? "" : l.startsWith("# ") ? l.slice(2) : l))
        .join("\n");
      code = /\bfn main\s*\(/.test(body) ? body : `fn main() {\n${body}\n}`;
      code = `// ${source} [${flags.join(",")}] (extracted by scripts/readme-snippets.mjs)\n${code}\n`;
    }
    const outFile = `${lang === "rust" ? "readme_" : "snippet"}${name}.${ext}`;
    writeFileSync(join(out, outFile), code);
    index.push({ file: outFile, source, flags, readme: basename(file) });
  }
}
writeFileSync(join(out, "index.json"), JSON.stringify(index, null, 2) + "\n");
console.log(`${n} ${lang} snippets from ${files.length} file(s) -> ${out}`);
