#!/usr/bin/env bash
# The demo end to end: it pauses at its first batch, a step moves it one
# batch on, a detached run finishes training, and Ctrl-C exits cleanly.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup demo_smoke

port=$(free_port)
base="http://127.0.0.1:$port"

"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 5 >"$log" 2>&1 &
pid=$!

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

# Mixed precision: --dtype bfloat16 autocasts the forward on the CPU. The
# pause shows bfloat16 activations, their strips render, and the step still
# trains; a device or dtype this LibTorch cannot use is refused up front.
port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --epochs 1 --limit-batches 2 --dtype bfloat16 --exit-when-done >"$log" 2>&1 &
pid=$!
wait_for_status '.state == "paused" and .live_position.batch_idx == 0' "the bfloat16 run's pause at batch 0"
snapshot=$(get /api/snapshot)
jq -e '.layers[] | select(.name == "features.0") | .activation.dtype == "bfloat16" and .gradient != null' \
  <<<"$snapshot" >/dev/null ||
  fail "features.0's activation is not bfloat16: $(jq -c '.layers[] | select(.name == "features.0")' <<<"$snapshot")"
curl -fsS --max-time 10 -o /dev/null -w '%{content_type}' "$base/api/render/strip?layer=features.0&kind=activation" |
  grep -q image/png || fail "the bfloat16 activation strip did not render"
post /api/run '{"detach":true}'
wait_for_exit 120
((rc == 0)) || fail "the bfloat16 run exited with status $rc"
grep -q "Training finished" "$log" || fail "the bfloat16 run did not finish training"
pass "--dtype bfloat16: bfloat16 activations shown and rendered, training finished"

# PyTorch 2.x autocasts the CPU to float16 too: a short detached run finishes.
"$demo" --port 0 --no-browser --epochs 1 --limit-batches 1 --detach --exit-when-done --dtype float16 >"$log" 2>&1 ||
  { cat "$log"; fail "--dtype float16 on the CPU failed"; }
grep -q "Training finished" "$log" || fail "the float16 run did not finish training"
"$demo" --no-browser --dtype float8 >"$log" 2>&1 && fail "--dtype float8 was accepted"
grep -q "unknown dtype 'float8'" "$log" || fail "--dtype float8 was not explained: $(cat "$log")"
if ! grep -qi "cuda" <<<"$(ldd "$demo")"; then
  "$demo" --no-browser --device cuda >"$log" 2>&1 && fail "--device cuda was accepted by a CPU-only LibTorch"
  grep -q "no CUDA device" "$log" || fail "--device cuda without CUDA was not explained"
fi
pass "--dtype float16 trains on the CPU; a dtype or device this LibTorch cannot use is refused with the reason"
