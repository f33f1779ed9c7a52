#!/usr/bin/env bash
# Unit tests of the web UI's own logic (web/test/*.test.ts: the diagram's
# layout, groups and folding, the statistics' bins and chart tables, the
# store) under node's test runner: the tests and the page type-checked
# together, bundled by the page's Vite, then run (web/scripts/unit_tests.mjs).
# No browser, no server: a few seconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${NANSENSE_BUILD_DIR:-build}

fail() {
  echo "FAIL web unit: $*"
  exit 1
}
[[ -d web/node_modules/vite ]] || fail "web/node_modules lacks vite (scripts/setup runs npm ci in web/)"
[[ -f web/src/api/wire.gen.ts ]] || fail "web/src/api/wire.gen.ts is missing (the build writes it: scripts/setup)"

(cd web && node_modules/.bin/tsc --noEmit -p tsconfig.test.json) || fail "the tests or the page do not type-check (above)"
node web/scripts/unit_tests.mjs "$build/web-unit-tests" || fail "a test failed (above)"
echo "PASS web unit: the page's layout, groups, folding, bins, chart tables and store"
