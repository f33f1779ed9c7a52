#!/usr/bin/env bash
# The official MCP TypeScript SDK client (tests/node_modules) against the
# Fashion-MNIST demo: see sdk_client.mjs for what it checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

name=sdk_client
# NANSENSE_BUILD_DIR points at another build tree (default build/).
demo=${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo
source tests/mcp/common.sh

"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 5 >"$log" 2>&1 &
pid=$!
wait_for_pause "its first pause"
run_client tests/mcp/sdk_client.mjs
