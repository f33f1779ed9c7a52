#!/usr/bin/env bash
# The docs site works offline: scripts/docs builds it into build/site/, then
# tests/docs/offline_test.mjs loads every page in headless Chromium (Debian's,
# driven by playwright-core) with every request off the site aborted, and
# fails on any failed request, HTTP error, console error or uncaught script
# error; code blocks must be highlighted and the search must answer. Extra
# arguments go to scripts/docs.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "FAIL docs_offline: $*"; exit 1; }
chromium=${CHROMIUM:-/usr/bin/chromium}
[[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
[[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

built=$(scripts/docs "$@" 2>&1) || { echo "$built"; fail "scripts/docs failed"; }
node tests/docs/offline_test.mjs --site build/site --chromium "$chromium"
