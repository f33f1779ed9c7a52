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

source tests/browser/runner.sh
browser_runner ui browser-screenshots

node tests/browser/ui_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
