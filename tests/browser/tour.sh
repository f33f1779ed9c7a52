#!/usr/bin/env bash
# The guided tours and the Share dialog in a real browser against the demo:
# every step of each page's tour points at an element that is there (a
# renamed control fails here), the tour steps and closes by keyboard, ?
# replays it, it starts by itself once per page on a locked session (faked by
# intercepting the status) and never on an unlocked one, it leaves the page
# usable while open, a missing step is skipped and reported; Share copies
# the right links (this page with its state, the playground when locked, a
# recording when the server lists one, the library).
# Screenshots go to build/browser-screenshots/tour/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner tour browser-screenshots/tour

node tests/browser/tour_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
