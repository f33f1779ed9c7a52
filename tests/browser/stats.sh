#!/usr/bin/env bash
# The Stats page and the live-update UI in a real browser against the demo:
# the eye on a card watches a layer, the gear dialog sets the update
# frequency, the main page and the Stats page follow a running loop, the
# views switch, the charts draw the collected numbers and their CSV download
# holds exactly those. Screenshots go to build/browser-screenshots/stats/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner stats browser-screenshots/stats

node tests/browser/stats_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
