#!/usr/bin/env bash
# The original's MCP contract through the official MCP TypeScript SDK: every
# one of its 45 tools, called with the original's argument shapes against the
# Fashion-MNIST demo (see sdk_original.mjs for what it checks).
set -euo pipefail
cd "$(dirname "$0")/../.."

name=sdk_original
# NANSENSE_BUILD_DIR points at another build tree (default build/).
demo=$(realpath -m "${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo")
source tests/mcp/common.sh

# Two short epochs: time_travel has an epoch to go back to. Recordings and
# snapshots go to the test's own folder.
NANSENSE_RECORDINGS_DIR="$work/recordings" "$demo" --port "$port" --no-browser --epochs 2 --limit-batches 4 \
  >"$log" 2>&1 &
pid=$!
wait_for_pause "its first pause"
run_client tests/mcp/sdk_original.mjs
