#!/usr/bin/env bash
# What nansense's coordination costs a C++ data-parallel run: examples/ddp
# (2 ranks, an MLP 16-32-4, 16 samples per rank, gradients averaged through
# the run's c10d::TCPStore as the example does, one thread per rank), rank
# 0's training loop against the same program with nansense disabled, in
# the same run, rounds interleaved; each ratio the median of the rounds'.
#
#   plain     --no-nansense on every rank
#   detached  rank 0 served and detached, checks off
#   guard     the same with the numerical checks on
#
# The engine's coordinator makes the full exchange at every batch boundary
# of a C++ program (each follower's news, then rank 0's decision:
# docs/guide/distributed.md), so this is its cost, against a step
# whose own store all-reduce is four more round trips (a set, two gets, a
# delete).
#
# Figures (docs/guide/distributed.md): what one boundary costs is the store's
# round trips (a follower's set and get, rank 0's multiGet and set), about
# as many as the example's own all-reduce makes.
#
#   bench/ddp.sh [batches (2000)] [rounds (5)]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=1
batches=${1:-2000}
rounds=${2:-5}
example=build/examples/ddp/ddp_example
[[ -x $example ]] || { echo "bench/ddp.sh: build $example first (cmake --build build --target ddp_example)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One 2-rank run of the example with `$@` on both ranks: rank 0's loop time.
run_once() {
  local dir
  dir=$(mktemp -d -p "$work")
  (cd "$dir" && MASTER_ADDR=127.0.0.1 MASTER_PORT=0 WORLD_SIZE=2 RANK=0 OMP_NUM_THREADS=1 \
    "$OLDPWD/$example" --epochs "$epochs" --batches "$batches" --port 0 --store-port-file port --time-file time "$@" \
    >rank0.out 2>&1) &
  local leader=$!
  local waited=0
  while [[ ! -s $dir/port ]]; do
    kill -0 "$leader" 2>/dev/null || { cat "$dir/rank0.out" >&2; return 1; }
    sleep 0.05
    waited=$((waited + 1))
    ((waited < 600)) || { echo "bench/ddp.sh: rank 0 never served its store" >&2; return 1; }
  done
  (cd "$dir" && MASTER_ADDR=127.0.0.1 MASTER_PORT=$(cat port) WORLD_SIZE=2 RANK=1 OMP_NUM_THREADS=1 \
    "$OLDPWD/$example" --epochs "$epochs" --batches "$batches" "$@" >rank1.out 2>&1)
  wait "$leader"
  cat "$dir/time"
}

declare -A ratios
for ((round = 0; round < rounds; round++)); do
  plain=$(run_once --no-nansense)
  for variant in detached guard; do
    case $variant in
      detached) t=$(run_once --detach --no-checks) ;;
      guard) t=$(run_once --detach) ;;
    esac
    ratios[$variant]+="$(awk -v a="$t" -v b="$plain" 'BEGIN { printf "%.4f ", a / b }')"
  done
  plains+="$plain "
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
step_ms=$(echo "$plains" | median | awk -v n="$((batches * epochs))" '{ printf "%.3f", $1 / n * 1000 }')
echo "ddp coordination, C++ (examples/ddp): 2 ranks, MLP 16-32-4, 16 samples per rank, gradients through the store,"
echo "  $batches batches x $rounds rounds; a plain step takes $step_ms ms"
for variant in detached guard; do
  values=${ratios[$variant]}
  echo "  $variant $(echo "$values" | median | awk '{ printf "%.3f", $1 }')  (rounds: $values)"
done
