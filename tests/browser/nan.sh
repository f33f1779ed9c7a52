#!/usr/bin/env bash
# A NaN caught in a real browser (Debian's Chromium, headless, driven by
# playwright-core): the demo's --nan loss at batch size 8 trips the numerical
# checks; the amber banner, the details dialog, the producer's node and card,
# Silence and the error-check settings are read and driven like a user would.
# Screenshots go to build/browser-screenshots/nan/.
#
# The page comes from the demo's embedded UI; NANSENSE_WEB_DIR=<dist> serves
# another build instead (UI development without relinking).
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner nan-ui browser-screenshots/nan
# NaN capsules of this run, removed with it.
capsules=$(mktemp -d)
cleanup_paths+=("$capsules")

node tests/browser/nan_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile" --capsules "$capsules"
