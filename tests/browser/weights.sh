#!/usr/bin/env bash
# The Weights page in a real browser against the demo: a card's Weights
# button opens it on its layer, each parameter shows its shape and dimension
# roles with the conv default, the weight, gradient and Adam state strips
# share the axis controls (a role chosen demotes the axis that held it, an
# index picks the kernel), every picture equals the server's own rendering,
# deep links work and a layer without parameters is refused with a message.
# Screenshots go to build/browser-screenshots/weights/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner weights browser-screenshots/weights

node tests/browser/weights_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
