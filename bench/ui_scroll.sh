#!/usr/bin/env bash
# Scrolling the cards pane through a synthetic 200-layer network, every card
# shown, in a real browser: mouse wheel steps from top to bottom while the
# strips load lazily, and the page's animation frame intervals (median, p90,
# p99, share over 20 ms, fps) against 60 fps.
# Usage: bench/ui_scroll.sh [px-per-wheel-step]   (default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bench/ui_scroll.mjs "${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo" "${1:-100}"
