#!/usr/bin/env bash
# The diagram's module groups in a real browser, against synthetic 200- and
# 1,000-layer networks served by the demo: the opening depth (<= 40 nodes),
# opening and closing by click and keyboard (remembered), the edges between
# groups, the search box revealing a deep layer, and the NaN producer's
# groups opened by themselves.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner groups browser-screenshots/groups

node tests/browser/groups_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
