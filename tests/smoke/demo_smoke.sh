#!/usr/bin/env bash
# The demo end to end: it pauses at its first batch, a step moves it one
# batch on, a detached run finishes training, and Ctrl-C exits cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup demo_smoke

port=$(free_port)
base="http://127.0.0.1:$port"
log=$(mktemp)

"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 5 >"$log" 2>&1 &
pid=$!
cleanup() {
  if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

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
