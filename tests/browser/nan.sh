#!/usr/bin/env bash
# A NaN caught in a real browser (Debian's Chromium, headless, driven by
# playwright-core): the demo's --nan loss at batch size 8 trips the numerical
# checks; the amber banner, the details dialog, the producer's node and card,
# Silence and the error-check settings are read and driven like a user would.
# Screenshots go to build/browser-screenshots/nan/.
#
# The page comes from the demo's embedded UI; NANSENSE_WEB_DIR=<dist> serves
# another build instead (UI development without relinking).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${NANSENSE_BUILD_DIR:-build}
demo=$build/examples/fashion_mnist/fashion_mnist_demo
chromium=${CHROMIUM:-/usr/bin/chromium}

fail() {
  echo "FAIL nan-ui: $*"
  exit 1
}
[[ -x $demo ]] || fail "$demo not built"
[[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
[[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

shots=$build/browser-screenshots/nan
mkdir -p "$shots"
rm -f "$shots"/*.png
# The test writes the demo's pid here each time it starts one, so this trap
# can end it even if node itself is killed.
pidfile=$(mktemp)
# NaN capsules of this run, removed with it.
capsules=$(mktemp -d)
cleanup() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
  rm -rf "$capsules"
}
trap cleanup EXIT INT TERM

node tests/browser/nan_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile" --capsules "$capsules"
