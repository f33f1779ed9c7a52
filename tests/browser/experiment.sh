#!/usr/bin/env bash
# The Experiment page in a real browser against the demo: the card's button
# opens it on its layer, unusable layers are disabled, an empty number is
# named, Grad-CAM runs and its overlay redraws, Deep Dream shows progress and
# Cancel stops it. Screenshots go to build/browser-screenshots/experiment/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner experiment browser-screenshots/experiment

node tests/browser/experiment_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
