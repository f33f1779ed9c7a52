# Sourced by the browser test runners (ui.sh, nan.sh, time_travel.sh) from the
# repository root, under set -euo pipefail: `browser_runner TAG SHOTS` checks
# that the demo, Chromium and playwright-core are there, empties SHOTS of its
# screenshots and sets demo, chromium, shots and pidfile. The test writes the
# demo's pid to $pidfile each time it starts one, so the EXIT trap can end it
# even if node itself is killed; the trap also removes the paths a runner adds
# to cleanup_paths.

cleanup_paths=()

browser_runner() {
  # Global: fail() is called after this function returned too.
  browser_tag=$1
  local build=${NANSENSE_BUILD_DIR:-build}
  demo=$build/examples/fashion_mnist/fashion_mnist_demo
  chromium=${CHROMIUM:-/usr/bin/chromium}
  fail() {
    echo "FAIL $browser_tag: $*"
    exit 1
  }
  [[ -x $demo ]] || fail "$demo not built"
  [[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
  [[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

  shots=$build/$2
  mkdir -p "$shots"
  rm -f "$shots"/*.png
  pidfile=$(mktemp)
  cleanup_paths+=("$pidfile")
  trap browser_runner_cleanup EXIT INT TERM
}

browser_runner_cleanup() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "${cleanup_paths[@]}"
}
