#!/usr/bin/env python3
"""Import circles between the files of each crate of the workspace.

A file that names an item of another file (`use crate::a::b`, `crate::a::b::f()`,
`super::x` reaching a sibling) depends on it. Two files that depend on each other, directly
or through others, are a circle: neither can be read, moved or tested without the other
(issue 38 found one in the worker: counters.rs and in_use.rs). A module's own children are
not counted against it (a parent declares and re-exports its children; a child reads its
parent's private items by design); every other edge is.

    scripts/import-cycles.py            every crate: print each circle, exit 1 if any
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def crate_roots():
    yield ROOT / "src"
    for manifest in sorted(ROOT.glob("crates/**/Cargo.toml")):
        if "node_modules" in manifest.parts or "target" in manifest.parts:
            continue
        src = manifest.parent / "src"
        if src.is_dir():
            yield src


def module_path(src: Path, file: Path):
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def referenced(text: str, here: tuple):
    """Module paths named from the file whose module is `here` (a file's own path)."""
    text = strip_comments(text)
    found = []

    def resolve(head, tail):
        if head == "crate":
            base = ()
        elif head == "self":
            base = here
        else:
            base = here[:-1] if here else ()
            while tail and tail[0] == "super":
                base, tail = base[:-1], tail[1:]
        return base + tuple(tail)

    for m in PATH.finditer(text):
        tail = [t for t in m.group(2).split("::") if t]
        found.append(resolve(m.group(1), tail))
    for m in USE_GROUP.finditer(text):
        prefix = [t for t in m.group(2).split("::") if t]
        for item in re.split(r"[,\s]+", m.group(3)):
            item = item.split("::")[0].strip("{} ")
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", item or "") and item != "self":
                found.append(resolve(m.group(1), prefix + [item]))
    return found


def cycles_in(src: Path):
    files = {}
    for f in src.rglob("*.rs"):
        if "bin" in f.relative_to(src).parts:
            continue
        files[module_path(src, f)] = f
    edges = {m: set() for m in files}
    for m, f in files.items():
        for path in referenced(f.read_text(), m):
            # The deepest file that defines a prefix of the path.
            target = None
            for n in range(len(path), -1, -1):
                if path[:n] in files:
                    target = path[:n]
                    break
            if target is None or target == m:
                continue
            # A parent and its descendants are one unit.
            if target[: len(m)] == m or m[: len(target)] == target:
                continue
            edges[m].add(target)
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(files[c].relative_to(ROOT).as_posix() for c in comp))
    return out


def main():
    found = 0
    for src in crate_roots():
        for comp in cycles_in(src):
            found += 1
            print("import circle: " + " <-> ".join(comp))
    if found:
        sys.exit(1)
    print("no import circle between files")


if __name__ == "__main__":
    main()
