#!/usr/bin/env bash
# The Time Travel dialog in a real browser against the demo (2 epochs of 5
# batches): open it, see epoch 0 cached, jump back to epoch 0 from a later
# batch, and see a refusal shown as "Time travel failed".
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner time_travel browser-screenshots/time-travel

node tests/browser/time_travel_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
