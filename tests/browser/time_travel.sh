#!/usr/bin/env bash
# The Time Travel dialog in a real browser against the demo (2 epochs of 5
# batches): open it, see epoch 0 cached, jump back to epoch 0 from a later
# batch, and see a refusal shown as "Time travel failed".
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${NANSENSE_BUILD_DIR:-build}
demo=$build/examples/fashion_mnist/fashion_mnist_demo
chromium=${CHROMIUM:-/usr/bin/chromium}

fail() {
  echo "FAIL time_travel: $*"
  exit 1
}
[[ -x $demo ]] || fail "$demo not built"
[[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
[[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

shots=$build/browser-screenshots/time-travel
mkdir -p "$shots"
rm -f "$shots"/*.png
pidfile=$(mktemp)
cleanup() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
}
trap cleanup EXIT INT TERM

node tests/browser/time_travel_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
