#!/usr/bin/env bash
# The demo end to end: it pauses at its first batch, a step moves it one
# batch on, a detached run finishes training, and Ctrl-C exits cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

# NANSENSE_BUILD_DIR points at another build tree (default build/).
demo=${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo
deadline_s=120  # generous: loading the dataset on a busy 2-core machine

fail() {
  echo "FAIL demo_smoke: $*"
  echo "--- demo output ---"
  cat "$log" || true
  exit 1
}
pass() { echo "PASS demo_smoke: $*"; }

[[ -x $demo ]] || { echo "FAIL demo_smoke: $demo not built"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
log=$(mktemp)

"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 5 >"$log" 2>&1 &
pid=$!
cleanup() {
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

# Polls until the jq condition holds on GET /api/status, or fails the test.
wait_for_status() {
  local condition=$1 what=$2 end=$((SECONDS + deadline_s)) status=""
  while ((SECONDS < end)); do
    kill -0 "$pid" 2>/dev/null || fail "demo exited while waiting for $what"
    status=$(curl -fsS --max-time 5 "$base/api/status" 2>/dev/null || true)
    if [[ -n $status ]] && jq -e "$condition" >/dev/null 2>&1 <<<"$status"; then return 0; fi
    sleep 0.2
  done
  fail "timed out waiting for $what (last status: ${status:-none})"
}

post() {
  curl -fsS --max-time 10 -X POST -H 'Content-Type: application/json' -d "$2" "$base$1" >/dev/null ||
    fail "POST $1 $2 was refused"
}

wait_for_status '.state == "paused" and .live_position.phase == "train" and .live_position.batch_idx == 0' \
  "the pause at train batch 0"
pass "paused at the first batch"

post /api/step '{"unit":"batch"}'
wait_for_status '.state == "paused" and .live_position.batch_idx == 1' "the pause at train batch 1"
pass "a batch step advanced to batch 1"

post /api/run '{"detach":true}'
end=$((SECONDS + deadline_s))
until grep -q "Training finished" "$log"; do
  kill -0 "$pid" 2>/dev/null || fail "demo exited before finishing training"
  ((SECONDS < end)) || fail "training did not finish after detaching"
  sleep 0.2
done
pass "training finished after a detached run"

kill -INT "$pid"
end=$((SECONDS + 30))
while kill -0 "$pid" 2>/dev/null; do
  ((SECONDS < end)) || fail "demo still running 30 s after SIGINT"
  sleep 0.1
done
rc=0
wait "$pid" || rc=$?
((rc == 0)) || fail "demo exited with status $rc after SIGINT"
pass "SIGINT exits with status 0"
