# Sourced by the MCP SDK tests (sdk_client.sh, sdk_locked.sh): what each needs
# to serve a demo on a free port, wait for its pause and run an SDK client
# against it, with the demo's output shown on failure and every process
# stopped on exit. Set `name` (for messages) and `demo` (the program) first.

deadline_s=120 # loading a dataset on a busy 2-core machine
work=$(mktemp -d)
log=$work/demo.log
pid=""
client=""

fail() {
  echo "FAIL $name: $*"
  if [[ -f $log ]]; then
    echo "--- demo output ---"
    cat "$log"
  fi
  exit 1
}

cleanup() {
  for p in $client $pid; do
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# A signal (ctest's timeout, Ctrl-C) still runs the cleanup through exit.
trap 'exit 130' INT TERM HUP

[[ -x $demo ]] || fail "$demo not built"
command -v node >/dev/null || fail "node is not installed (scripts/setup installs it)"
[[ -d tests/node_modules/@modelcontextprotocol/sdk ]] || fail "tests/node_modules lacks the MCP SDK: run scripts/setup"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"

# Waits until the demo started as $pid reports a pause; `what` names the pause.
wait_for_pause() {
  local what=$1 end=$((SECONDS + deadline_s))
  until curl -fsS --max-time 5 "$base/api/status" 2>/dev/null | grep -q '"state":"paused"'; do
    kill -0 "$pid" 2>/dev/null || fail "$(basename "$demo") exited before $what"
    ((SECONDS < end)) || fail "$(basename "$demo") did not reach $what within ${deadline_s} s"
    sleep 0.2
  done
}

# The SDK client program against the demo's /mcp, in the background so a
# signal is handled while it runs.
run_client() {
  node "$1" "$base/mcp" &
  client=$!
  wait "$client" || fail "the SDK client failed (see above)"
  client=""
}
