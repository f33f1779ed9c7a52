#!/usr/bin/env bash
# Probes in a real browser against the demo: the input pane pins the batch
# (every card then shows the probe, no gradients), switches the forward mode,
# paints a pixel by clicking the input with perturb on (the cards show
# perturbed - original, the count and Clear appear), clears, and every
# visitor sees the same probe; each state is held to the server's.
# Screenshots go to build/browser-screenshots/probe/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner probe browser-screenshots/probe

node tests/browser/probe_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
