#!/usr/bin/env bash
# Pause-to-pixels latency of the UI, through a real browser: from the training
# thread pausing on a new batch to the page showing that batch's strips, for
# the demo CNN. Usage: bench/ui_latency.sh [steps]   (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bench/ui_latency.mjs "${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo" "${1:-30}"
