#!/usr/bin/env bash
# The transformer demo's --nan: one sample of train batch 2 is all padding, so
# softmax over its all -inf attention scores returns NaN. A detached run
# passes the masked batches before it, pauses on that one before the optimizer
# step with aten::softmax named as the producer and a NaN capsule written;
# skipping the poisoned update lets the run finish with the checks still on.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup transformer_nan examples/transformer/transformer_demo

port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --nan --nan-batch 2 --epochs 1 --limit-batches 4 --detach --exit-when-done \
  --capsule-dir "$work/capsules" >"$log" 2>&1 &
pid=$!

wait_for_status '.state == "paused" and .debug.error != null' "the pause on the NaN"
status=$(get /api/status)
jq -e '.debug.error.position | .epoch == 0 and .phase == "train" and .batch_idx == 2' <<<"$status" >/dev/null ||
  fail "the error is not at epoch 0, train batch 2: $(jq -c .debug <<<"$status")"
jq -e '.live_position.batch_idx == 2' <<<"$status" >/dev/null || fail "the run did not pause on batch 2: $status"
jq -e '.debug.error.reasons | index("nan")' <<<"$status" >/dev/null || fail "no NaN reason: $(jq -c .debug <<<"$status")"
jq -e '.debug.error.root_cause_status == "found" and .debug.error.producer.op == "aten::softmax"
       and (.debug.error.producer.layer | startswith("layers.0.attention."))' <<<"$status" >/dev/null ||
  fail "the producer is not layers.0's softmax: $(jq -c .debug.error.producer <<<"$status")"
pass "paused on train batch 2 (not on the masked batches before it) with aten::softmax in layers.0.attention named"

report=$(get /api/debug)
capsule=$(jq -r '.error.capsule' <<<"$report")
[[ -f $capsule && $capsule == "$work/capsules/"* ]] || fail "no capsule at $capsule"
pass "the capsule was written"

post /api/debug/choose_update '{"action":"skip"}'
post /api/run '{"detach":true}'
wait_for_exit 60
((rc == 0)) || fail "demo exited with status $rc"
grep -q "Training finished" "$log" || fail "training did not finish"
pass "with the poisoned update skipped the run finished, checks on"
