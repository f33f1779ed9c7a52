#!/usr/bin/env bash
# Probe latency through a real browser: from a click on the input image
# (perturb on, the batch pinned, eval mode) to the page showing every visible
# strip of the probe's re-run, for the demo CNN. Usage: bench/ui_probe.sh [clicks]
# (default 30). Target: median <= 200 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bench/ui_probe.mjs "${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo" "${1:-30}"
