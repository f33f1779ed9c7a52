#!/usr/bin/env bash
# LibTorch's MNIST example shape (examples/mnist: a stack model passed as
# Net&, template train/test loops taking the loader by reference, the test
# loop over const auto&) wired with an include, start(), two batches()
# wrappers and close(): the layers are found by their member names, the SGD
# state shows, both loops are phases, the wrappers made once serve every
# epoch, and the run finishes. Its data: small MNIST-format files written here
# (random pixels, MNIST's sizes), read by LibTorch's own MNIST dataset.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup mnist_smoke examples/mnist/mnist_example

# LibTorch's MNIST dataset insists on MNIST's sizes: 60000 training images
# (938 batches of 64) and 10000 test images (10 batches of 1000).
python3 - "$work" <<'PY'
import os, struct, sys
root = sys.argv[1]
def write(prefix, n):
    with open(os.path.join(root, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28))
        f.write(os.urandom(n * 28 * 28))
    with open(os.path.join(root, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, n))
        f.write(bytes(i % 10 for i in range(n)))
write("train", 60000)
write("t10k", 10000)
PY

port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --data-root "$work" --epochs 2 --port "$port" >"$log" 2>&1 &
pid=$!

wait_for_status '.state == "paused" and .live_position.phase == "train" and .live_position.batch_idx == 0' \
  "the pause at train batch 0"
pass "paused at the first batch"

arch=$(get /api/architecture)
names=$(jq -c '[.layers[] | select(.shape_op | not) | .name]' <<<"$arch")
for layer in input conv1 conv2 conv2_drop fc1 fc2; do
  jq -e --arg l "$layer" 'index($l) != null' <<<"$names" >/dev/null || fail "no layer $layer in $names"
done
pass "the layers are the stack model's members: $names"

snapshot=$(get /api/snapshot)
jq -e '.parameters[] | select(.name == "fc1.weight") | .optimizer_state.momentum_buffer != null and .hyperparameters.lr == 0.01' \
  <<<"$snapshot" >/dev/null ||
  fail "fc1.weight lacks SGD's momentum: $(jq -c '.parameters[] | select(.name == "fc1.weight")' <<<"$snapshot")"
pass "the SGD optimizer's state shows"

post /api/step '{"unit":"phase","timeout_seconds":0}'
wait_for_status '.state == "paused" and .live_position.phase == "test" and .live_position.epoch == 0' \
  "the pause at the test loop"
pass "the test loop (const auto& batches) is the phase test"

post /api/run_until '{"epoch":1,"phase":"train","batch":1,"timeout_seconds":0}'
wait_for_status '.state == "paused" and .live_position.epoch == 1 and .live_position.batch_idx == 1' \
  "the pause at epoch 1, train batch 1"
pass "the wrappers made once serve the second epoch"

post /api/run '{"detach":true,"timeout_seconds":0}'
wait_for_exit 60
((rc == 0)) || fail "the example exited with status $rc"
[[ $(grep -c "Test set: Average loss" "$log") == 2 ]] || fail "the test loop did not run twice"
grep -q "Training finished" "$log" || fail "training did not finish"
pass "a detached run finished and exited"
