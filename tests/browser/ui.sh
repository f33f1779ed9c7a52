#!/usr/bin/env bash
# The main page in a real browser (Debian's Chromium, headless, driven by
# playwright-core): run controls, the diagram, layer cards, the input pane and
# reconnecting to a restarted server. Screenshots of each state go to
# build/browser-screenshots/.
#
# The page comes from the demo's embedded UI; NANSENSE_WEB_DIR=<dist> serves
# another build instead (UI development without relinking).
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${NANSENSE_BUILD_DIR:-build}
demo=$build/examples/fashion_mnist/fashion_mnist_demo
chromium=${CHROMIUM:-/usr/bin/chromium}

fail() {
  echo "FAIL ui: $*"
  exit 1
}
[[ -x $demo ]] || fail "$demo not built"
[[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
[[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

shots=$build/browser-screenshots
mkdir -p "$shots"
rm -f "$shots"/*.png
# The test writes the demo's pid here each time it starts one, so this trap
# can end it even if node itself is killed.
pidfile=$(mktemp)
cleanup() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
}
trap cleanup EXIT INT TERM

node tests/browser/ui_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
