#!/usr/bin/env bash
# Laying out the diagram of a synthetic 1,000-layer network in a real
# browser: the time to show it at the opening depth and with every module
# group open (target < 1 s), and the longest main-thread task meanwhile.
# Usage: bench/ui_layout.sh [rounds]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bench/ui_layout.mjs "${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo" "${1:-5}"
