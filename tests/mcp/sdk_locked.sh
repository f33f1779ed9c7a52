#!/usr/bin/env bash
# The official MCP TypeScript SDK client against a locked, parked playground
# (playground_demo serving a moment frozen from random images): see
# sdk_locked.mjs for what it checks.
set -euo pipefail
cd "$(dirname "$0")/../.."

demo=${NANSENSE_BUILD_DIR:-build}/examples/playground/playground_demo
deadline_s=120

fail() {
  echo "FAIL sdk_locked: $*"
  if [[ -n ${log:-} && -f $log ]]; then
    echo "--- demo output ---"
    cat "$log"
  fi
  exit 1
}

[[ -x $demo ]] || fail "$demo not built"
command -v node >/dev/null || fail "node is not installed (scripts/setup installs it)"
[[ -d tests/node_modules/@modelcontextprotocol/sdk ]] || fail "tests/node_modules lacks the MCP SDK: run scripts/setup"

work=$(mktemp -d)
log=$work/demo.log
pid=""
client=""
cleanup() {
  for p in $client $pid; do
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

"$demo" --prepare --synthetic --epochs 1 --limit-batches 3 --moment "$work/demo.moment" >"$log" 2>&1 ||
  fail "playground_demo --prepare failed"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
"$demo" --moment "$work/demo.moment" --port "$port" --no-browser >>"$log" 2>&1 &
pid=$!

end=$((SECONDS + deadline_s))
until curl -fsS --max-time 5 "$base/api/status" 2>/dev/null | grep -q '"state":"paused"'; do
  kill -0 "$pid" 2>/dev/null || fail "playground_demo exited before it parked"
  ((SECONDS < end)) || fail "playground_demo did not park within ${deadline_s} s"
  sleep 0.2
done

node tests/mcp/sdk_locked.mjs "$base/mcp" &
client=$!
wait "$client" || fail "the SDK client failed (see above)"
client=""
