#!/usr/bin/env bash
# The official MCP TypeScript SDK client (tests/node_modules) against the
# Fashion-MNIST demo: see sdk_client.mjs for what it checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

# NANSENSE_BUILD_DIR points at another build tree (default build/).
demo=${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo
deadline_s=120  # loading the dataset on a busy 2-core machine

fail() {
  echo "FAIL sdk_client: $*"
  if [[ -n ${log:-} && -f $log ]]; then
    echo "--- demo output ---"
    cat "$log"
  fi
  exit 1
}

[[ -x $demo ]] || fail "$demo not built"
command -v node >/dev/null || fail "node is not installed (scripts/setup installs it)"
[[ -d tests/node_modules/@modelcontextprotocol/sdk ]] || fail "tests/node_modules lacks the MCP SDK: run scripts/setup"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
log=$(mktemp)
"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 5 >"$log" 2>&1 &
pid=$!
client=""
cleanup() {
  for p in $client $pid; do
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
  rm -f "$log"
}
trap cleanup EXIT
# A signal (ctest's timeout, Ctrl-C) still runs the cleanup through exit.
trap 'exit 130' INT TERM HUP

end=$((SECONDS + deadline_s))
until curl -fsS --max-time 5 "$base/api/status" 2>/dev/null | grep -q '"state":"paused"'; do
  kill -0 "$pid" 2>/dev/null || fail "demo exited before its first pause"
  ((SECONDS < end)) || fail "demo did not pause at its first batch within ${deadline_s} s"
  sleep 0.2
done

# In the background so a signal is handled while it runs.
node tests/mcp/sdk_client.mjs "$base/mcp" &
client=$!
wait "$client" || fail "the SDK client failed (see above)"
client=""
