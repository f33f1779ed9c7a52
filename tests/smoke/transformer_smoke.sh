#!/usr/bin/env bash
# The transformer demo end to end: it pauses at its first batch with a layer
# list that reads like the model's code (one layer per Linear call on [B,T,D],
# the attention's shape plumbing flagged), the padding mask's -inf is in the
# captured scores without the guard tripping, and a detached short run
# finishes and exits.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup transformer_smoke examples/transformer/transformer_demo

port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --epochs 2 --limit-batches 4 --exit-when-done \
  --capsule-dir "$work/capsules" >"$log" 2>&1 &
pid=$!

wait_for_status '.state == "paused" and .live_position.phase == "train" and .live_position.batch_idx == 0' \
  "the pause at train batch 0"
pass "paused at the first batch"

arch=$(get /api/architecture)
# The layers a reader sees (shape ops folded away), for block 0 and overall.
shown=$(jq -c '[.layers[] | select(.shape_op | not) | .name]' <<<"$arch")
want_block='["layers.0.attention.qkv","layers.0.attention.matmul","layers.0.attention.div",
  "layers.0.attention.masked_fill","layers.0.attention.softmax","layers.0.attention.matmul_1",
  "layers.0.attention.out","layers.0.dropout","layers.0.add","layers.0.norm1","layers.0.ff1",
  "layers.0.gelu","layers.0.ff2","layers.0.add_1","layers.0.norm2"]'
jq -e --argjson want "$want_block" 'map(select(startswith("layers.0."))) == $want' <<<"$shown" >/dev/null ||
  fail "block 0 does not read like its code: $shown"
jq -e '(.[:4] == ["input","embed","position","add"]) and (.[-4:] == ["masked_fill","sum","div","head"])' \
  <<<"$shown" >/dev/null || fail "the embeddings or the pooled head are not as written: $shown"
jq -e '[.layers[] | select(.name | startswith("layers.0.attention.qkv"))] as $q
       | ($q | length) == 1 and $q[0].kind == "Linear" and $q[0].role == "module"
       and $q[0].parameters == ["layers.0.attention.qkv.weight","layers.0.attention.qkv.bias"]
       and $q[0].output_shape == [32,24,96]' <<<"$arch" >/dev/null ||
  fail "layers.0.attention.qkv is not one Linear layer [32,24,96]: $(jq -c '[.layers[] | select(.name | startswith("layers.0.attention.qkv"))]' <<<"$arch")"
jq -e '[.layers[] | select(.shape_op) | .name | select(startswith("layers.0."))]
       == ["layers.0.attention.view","layers.0.attention.permute","layers.0.attention.select",
           "layers.0.attention.select_1","layers.0.attention.select_2","layers.0.attention.transpose",
           "layers.0.attention.transpose_1","layers.0.attention.reshape"]' <<<"$arch" >/dev/null ||
  fail "block 0's shape ops are not flagged shape_op: $(jq -c '[.layers[] | select(.shape_op) | .name]' <<<"$arch")"
jq -e '(.layers[] | select(.name == "layers.1.dropout") | .kind) == "Dropout"' <<<"$arch" >/dev/null ||
  fail "the registered Dropout is not a layer of its own name"
jq -e '[.edges[] | select(.to == "layers.1.attention.qkv") | .from] == ["layers.0.norm2"]' <<<"$arch" >/dev/null ||
  fail "block 1 does not read block 0's output: $(jq -c '[.edges[] | select(.to == "layers.1.attention.qkv")]' <<<"$arch")"
pass "the layer list reads like the model's code (qkv one Linear layer, shape ops flagged)"

snapshot=$(get /api/snapshot)
jq -e '(.layers[] | select(.name == "layers.0.attention.masked_fill") | .activation.neg_inf) > 0' \
  <<<"$snapshot" >/dev/null || fail "the mask's -inf is not in the captured scores"
jq -e '(.layers[] | select(.name == "layers.0.attention.softmax") | .activation | .nan + .pos_inf + .neg_inf) == 0' \
  <<<"$snapshot" >/dev/null || fail "softmax over the masked scores is not finite"
status=$(get /api/status)
jq -e '.debug.error == null' <<<"$status" >/dev/null || fail "the guard tripped on the mask: $(jq -c .debug <<<"$status")"
pass "the mask's -inf is captured and the guard did not trip"

post /api/run '{"detach":true}'
wait_for_exit 60
((rc == 0)) || fail "demo exited with status $rc"
grep -q "Training finished" "$log" || fail "training did not finish"
(($(grep -c '^epoch ' "$log") == 2)) || fail "not two epoch lines"
pass "a detached run of 2 epochs finished without a trip and exited"
