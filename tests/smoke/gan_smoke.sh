#!/usr/bin/env bash
# The GAN demo end to end: the first batch's capture holds the generator and
# all three discriminator calls (real, fake detached, fake), each parameter
# shows the state of its own optimizer, time travel restores both optimizers,
# and a detached short run finishes.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/smoke/demo_lib.sh
smoke_setup gan_smoke examples/gan/gan_demo

port=$(free_port)
base="http://127.0.0.1:$port"
"$demo" --port "$port" --no-browser --epochs 2 --limit-batches 3 --exit-when-done >"$log" 2>&1 &
pid=$!

wait_for_status '.state == "paused" and .live_position.phase == "train" and .live_position.batch_idx == 0' \
  "the pause at train batch 0"
pass "paused at the first batch"

arch=$(get /api/architecture)
names=$(jq -c '[.layers[] | select(.shape_op | not) | .name]' <<<"$arch")
# In the order the loop calls them: D(real), G(noise), D(fake.detach()), D(fake).
want='["input","D.0","D.1","D.2","D.3","D.4","G.0","G.1","G.2","G.3","G.4",
  "D.0#2","D.1#2","D.2#2","D.3#2","D.4#2","D.0#3","D.1#3","D.2#3","D.3#3","D.4#3"]'
jq -e --argjson want "$want" '. == $want' <<<"$names" >/dev/null ||
  fail "the layers are not D, G and two more calls of D: $names"
incoming() { jq -c --arg to "$1" '[.edges[] | select(.to == $to) | .from] | sort' <<<"$arch"; }
[[ $(incoming D.0) == '["input"]' ]] || fail "D.0 is not fed the real batch: $(incoming D.0)"
[[ $(incoming 'D.0#2') == '["G.4"]' ]] || fail "D.0#2 is not fed the generator: $(incoming 'D.0#2')"
[[ $(incoming 'D.0#3') == '["G.4"]' ]] || fail "D.0#3 is not fed the generator: $(incoming 'D.0#3')"
jq -e '(.layers[] | select(.name == "D.0#3") | .module == "D.0" and .kind == "Linear")' <<<"$arch" >/dev/null ||
  fail "D.0#3 is not a call of module D.0"
pass "G and the three D calls (D.0, D.0#2, D.0#3) are captured with their inputs"

snapshot=$(get /api/snapshot)
for layer in D.0 'D.0#2' 'D.0#3' G.4; do
  jq -e --arg l "$layer" '.layers[] | select(.name == $l) | .activation != null and .gradient != null' \
    <<<"$snapshot" >/dev/null || fail "$layer lacks its activation or gradient"
done
for param in D.0.weight D.4.bias G.0.weight G.4.bias; do
  jq -e --arg p "$param" '.parameters[] | select(.name == $p)
        | .optimizer_state.step == 1 and .optimizer_state.exp_avg != null and .hyperparameters.lr == 0.001' \
    <<<"$snapshot" >/dev/null ||
    fail "$param lacks its optimizer's state: $(jq -c --arg p "$param" '.parameters[] | select(.name == $p)' <<<"$snapshot")"
done
pass "every call has its activation and gradient; G's and D's parameters show their own Adam state"

# Time travel with two optimizers: run to epoch 1, jump back to epoch 0; the
# first batch again leaves both Adam states at step 1 (restored, not 4).
post /api/run_until '{"epoch":1,"phase":"train","batch":0}'
wait_for_status '.state == "paused" and .live_position.epoch == 1' "the pause at epoch 1"
post /api/time_travel '{"epoch":0}'
wait_for_status '.state == "paused" and .live_position.epoch == 0 and .live_position.batch_idx == 0 and .snapshot_position.epoch == 0' \
  "the pause after jumping back to epoch 0"
snapshot=$(get /api/snapshot)
for param in D.0.weight G.0.weight; do
  jq -e --arg p "$param" '.parameters[] | select(.name == $p) | .optimizer_state.step == 1' <<<"$snapshot" >/dev/null ||
    fail "$param's Adam state was not restored by the jump: $(jq -c --arg p "$param" '.parameters[] | select(.name == $p) | .optimizer_state.step' <<<"$snapshot")"
done
pass "a jump back to epoch 0 restores both optimizers"

post /api/run '{"detach":true}'
wait_for_exit 60
((rc == 0)) || fail "demo exited with status $rc"
grep -q "Training finished" "$log" || fail "training did not finish"
pass "a detached run finished and exited"
