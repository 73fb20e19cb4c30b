#!/usr/bin/env bash
# Are the names tollgate publishes under still free? Asks each registry, without publishing
# and without credentials, about every package this repository would publish: the crates
# registry (`cargo info`, which fails with "could not find" for a name nobody holds) and the
# npm registry (`npm view`, E404 for a free name). Prints one line a name and exits 1 if a
# name is held by someone: that name must change before the first release (issue 39 found
# `tollgate-rls` held by an unrelated project; the server crate is `tollgate-rls`).
#
# Not a test of the suite: its answer depends on the registries on the day it runs, which is
# why it is run by hand before a release and its result recorded in the release notes.
#   scripts/names.sh
set -uo pipefail
cd "$(dirname "$0")/.."

held=0
# Every crate of the workspace that is not `publish = false`.
crates=()
for manifest in Cargo.toml crates/*/Cargo.toml; do
  grep -q '^publish = false' "$manifest" && continue
  crates+=("$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)")
done
for name in "${crates[@]}"; do
  if out=$(cargo info --registry crates-io "$name" 2>&1); then
    echo "crates  $name: HELD ($(echo "$out" | sed -n 's/^version: //p' | head -1))"
    held=1
  elif echo "$out" | grep -q "could not find"; then
    echo "crates  $name: free"
  else
    echo "crates  $name: unknown ($(echo "$out" | tail -1))"
    held=1
  fi
done
npm_name=$(node -p 'require("./crates/wasm/package.json").name')
if out=$(npm view "$npm_name" name 2>&1); then
  echo "npm     $npm_name: HELD"
  held=1
elif echo "$out" | grep -q "E404"; then
  echo "npm     $npm_name: free"
else
  echo "npm     $npm_name: unknown ($(echo "$out" | tail -1))"
  held=1
fi
exit $held
