#!/usr/bin/env bash
# The official MCP TypeScript SDK client against a locked, parked playground
# (playground_demo serving a moment frozen from random images): see
# sdk_locked.mjs for what it checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

name=sdk_locked
demo=${NANSENSE_BUILD_DIR:-build}/examples/playground/playground_demo
source tests/mcp/common.sh

"$demo" --prepare --synthetic --epochs 1 --limit-batches 3 --moment "$work/demo.moment" >"$log" 2>&1 ||
  fail "playground_demo --prepare failed"
"$demo" --moment "$work/demo.moment" --port "$port" --no-browser >>"$log" 2>&1 &
pid=$!
wait_for_pause "its parked pause"
run_client tests/mcp/sdk_locked.mjs
