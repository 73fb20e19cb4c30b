#!/usr/bin/env bash
# Installs the pinned tools tollgate builds with, once per machine, and skips
# any whose exact version is already there. Sourced by .ci/run and scripts/*.
# Everything lands in $TOLLGATE_TOOLS (default ~/.cache/tollgate-tools), outside
# the clone, so a later clean clone on the same machine reuses it.
set -euo pipefail

WASM_BINDGEN_VERSION=0.2.130
WORKER_BUILD_VERSION=0.8.7
CARGO_FUZZ_VERSION=0.13.2
TOLLGATE_TOOLS=${TOLLGATE_TOOLS:-$HOME/.cache/tollgate-tools}
export TOLLGATE_TOOLS
export PATH="$TOLLGATE_TOOLS/bin:$HOME/.cargo/bin:$PATH"

log() { echo "[tools] $*" >&2; }

# cargo_tool CRATE VERSION BINARY: cargo install CRATE@VERSION unless BINARY
# already reports VERSION.
cargo_tool() {
  local crate=$1 version=$2 bin=$3
  if [ -x "$TOLLGATE_TOOLS/bin/$bin" ] && "$TOLLGATE_TOOLS/bin/$bin" --version 2>/dev/null | grep -q "$version"; then
    return 0
  fi
  log "installing $crate $version (takes minutes the first time)"
  cargo install --quiet "$crate" --version "=$version" --root "$TOLLGATE_TOOLS"
}

rust_targets() {
  rustup target list --installed | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
  rustup target list --installed | grep -q wasm32-wasip2 || rustup target add wasm32-wasip2
}

apt_packages() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

wasm_tools() {
  rust_targets
  cargo_tool wasm-bindgen-cli "$WASM_BINDGEN_VERSION" wasm-bindgen
}

worker_tools() {
  wasm_tools
  cargo_tool worker-build "$WORKER_BUILD_VERSION" worker-build
}

# cargo-fuzz from the crates registry. The fuzz targets need nightly's -Z flags (sanitizer,
# coverage passes); scripts run them with RUSTC_BOOTSTRAP=1 on the stable toolchain.
fuzz_tools() {
  cargo_tool cargo-fuzz "$CARGO_FUZZ_VERSION" cargo-fuzz
}

# npm_ci DIR: installs DIR's locked npm dependencies unless node_modules matches the lock.
npm_ci() {
  local dir=${1:-.}
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || ! cmp -s "$dir/package-lock.json" "$dir/.npm-ci-stamp" 2>/dev/null; then
    log "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) && cp "$dir/package-lock.json" "$dir/.npm-ci-stamp"
  fi
}

# Quiet, offline-friendly defaults for wrangler and workerd.
export WRANGLER_SEND_METRICS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false
