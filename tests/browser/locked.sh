#!/usr/bin/env bash
# A locked, parked playground session in a real browser: the page says
# "locked" in place of the run controls, offers no Refresh or watch eyes,
# offers probe controls whose probe only that browser sees (a second browser
# context shows none), still draws the layers, and an experiment runs from the
# Experiment page. The moment is frozen from random images
# (playground_demo --prepare --synthetic), so no dataset is needed.
# Screenshots go to build/browser-screenshots/locked/.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner locked browser-screenshots/locked
demo=${NANSENSE_BUILD_DIR:-build}/examples/playground/playground_demo
[[ -x $demo ]] || fail "$demo not built"
moment=$(mktemp -d)
cleanup_paths+=("$moment")
"$demo" --prepare --synthetic --epochs 1 --limit-batches 3 --moment "$moment/demo.moment" >"$shots/prepare.log" 2>&1 ||
  fail "playground_demo --prepare failed: $(tail -3 "$shots/prepare.log")"

node tests/browser/locked_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile" \
  --moment "$moment/demo.moment"
