#!/usr/bin/env bash
# The demo's NaN path end to end: --nan trips on its first detached batch, the
# run pauses before the optimizer step with the producer named and a NaN
# capsule written; --replay reproduces that batch bit for bit, paused in the
# UI; a truncated capsule is refused.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup demo_nan

# 1. A detached --nan run with batches of 8: batch 0 lacks a class.
port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --nan --batch-size 8 --epochs 1 --limit-batches 5 --detach \
  --capsule-dir "$work/capsules" >"$log" 2>&1 &
pid=$!
wait_for_status '.state == "paused" and .debug.error != null' "the pause on the NaN"
status=$(curl -fsS "$base/api/status")
jq -e '.debug.error.position.batch_idx == 0 and .debug.error.position.phase == "train"' <<<"$status" >/dev/null ||
  fail "the error is not at train batch 0: $status"
jq -e '.debug.error.reasons | index("nan")' <<<"$status" >/dev/null || fail "no NaN reason: $status"
jq -e '.debug.error.root_cause_status == "found" and .debug.error.producer.op == "aten::div"' <<<"$status" \
  >/dev/null || fail "the producer is not the loss's division: $status"
pass "a detached --nan run paused on train batch 0 with aten::div named as the producer"
report=$(curl -fsS "$base/api/debug")
capsule=$(jq -r '.error.capsule' <<<"$report")
[[ -f $capsule ]] || fail "no capsule at $capsule"
jq -e '.error.layers | map(.layer) | index("features.0")' <<<"$report" >/dev/null ||
  fail "features.0 is not among the affected layers: $report"
pass "the capsule was written and the layer table names the model's layers"
post /api/debug/settings '{"enabled":false}'
post /api/run '{"detach":true}'
end=$((SECONDS + deadline_s))
until grep -q "Training finished" "$log"; do
  kill -0 "$pid" 2>/dev/null || fail "demo exited before finishing training"
  ((SECONDS < end)) || fail "training did not finish"
  sleep 0.2
done
kill -INT "$pid"
wait_for_exit 30
((rc == 0)) || fail "demo exited with status $rc after SIGINT"
pass "with checks off the run finished"

# 2. The capsule replays bit for bit, paused in the UI.
port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --nan --replay "$capsule" --exit-when-done >"$log" 2>&1 &
pid=$!
wait_for_status '.state == "paused" and .debug.error.producer.op == "aten::div"' "the replay's pause on the NaN"
pass "the replay paused on the NaN with the producer named"
post /api/run '{"detach":true}'
wait_for_exit 60
((rc == 0)) || fail "the replay exited with status $rc"
grep -q "Replay reproduced the recorded gradients bit for bit" "$log" || fail "the replay was not bit for bit"
pass "the replay reproduced the recorded gradients bit for bit"

# 3. A truncated capsule is refused, naming the problem.
head -c 200 "$capsule" >"$work/cut.capsule"
rc=0
"$demo" --no-browser --port "$(free_port)" --replay "$work/cut.capsule" >"$log" 2>&1 || rc=$?
((rc == 1)) || fail "a truncated capsule exited with status $rc"
grep -q "is truncated" "$log" || fail "the refusal does not say the capsule is truncated"
pass "a truncated capsule is refused"
