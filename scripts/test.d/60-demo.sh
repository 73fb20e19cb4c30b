#!/usr/bin/env bash
# The demo page (www/): builds the npm package's web build into www/pkg/ (www/build.sh),
# then drives Debian's headless Chromium with playwright-core (root node_modules): the page
# from a plain static server (no console errors, the playground's decisions, pause/step/scrub
# giving an uninterrupted run's decisions, worked formulas, labels inside their figures and
# SVG text >= 12 px on a phone, the small multiples' maxima, keyboard with visible focus), and
# live mode against `wrangler dev` (scripts/run) showing a 429 with its headers, its clock
# controls disabled. Screenshots of every view: artifacts/demo/ (git-ignored).
set -euo pipefail
source scripts/tools.sh
worker_tools
apt_packages chromium
npm_ci .
export CI=${CI:-true}

echo "--- build (www/pkg, www/data)"
bash www/build.sh

echo "--- page tests (static server), then live mode (wrangler dev)"
node --test --test-concurrency=1 --test-reporter=spec www/test/page.test.mjs www/test/streams.test.mjs www/test/controls.test.mjs www/test/adaptive.test.mjs www/test/live.test.mjs
echo "screenshots: $(ls artifacts/demo/*.png | wc -l) in artifacts/demo/"
