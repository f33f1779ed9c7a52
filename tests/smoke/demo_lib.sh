# Sourced by the demo smoke tests (not executable, so scripts/test does not
# run it on its own): `smoke_setup TAG [PROGRAM]` sets demo (PROGRAM, a path
# under the build tree, default the Fashion-MNIST demo) and deadline_s, a
# temporary folder $work with the demo's $log in it, and an EXIT trap that
# kills the demo still running as $pid and removes $work; it defines
# fail/pass (prefixed with TAG, fail printing $log), free_port, and, for the
# demo running as $pid at $base, wait_for_status, get, post and wait_for_exit.

smoke_setup() {
  smoke_tag=$1
  # NANSENSE_BUILD_DIR points at another build tree (default build/).
  demo=${NANSENSE_BUILD_DIR:-build}/${2:-examples/fashion_mnist/fashion_mnist_demo}
  deadline_s=120 # generous: loading the dataset on a busy 2-core machine
  [[ -x $demo ]] || { echo "FAIL $smoke_tag: $demo not built"; exit 1; }
  work=$(mktemp -d)
  log=$work/demo.log
  pid=""
  trap smoke_cleanup EXIT
}

smoke_cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}

fail() {
  echo "FAIL $smoke_tag: $*"
  echo "--- demo output ---"
  cat "$log" || true
  exit 1
}
pass() { echo "PASS $smoke_tag: $*"; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Polls until the jq condition holds on GET /api/status, or fails the test
# after deadline_s seconds in which training made no progress (the live
# position did not move): a busy machine trains slower, a hung one not at all.
wait_for_status() {
  local condition=$1 what=$2 end=$((SECONDS + deadline_s)) status="" position="" last_position=""
  while ((SECONDS < end)); do
    kill -0 "$pid" 2>/dev/null || fail "demo exited while waiting for $what"
    status=$(curl -fsS --max-time 5 "$base/api/status" 2>/dev/null || true)
    if [[ -n $status ]] && jq -e "$condition" >/dev/null 2>&1 <<<"$status"; then return 0; fi
    position=$(jq -c '.live_position' 2>/dev/null <<<"$status" || true)
    if [[ -n $position && $position != "$last_position" ]]; then
      last_position=$position
      end=$((SECONDS + deadline_s))
    fi
    sleep 0.2
  done
  fail "timed out waiting for $what: no progress for $deadline_s s (last status: ${status:-none})"
}

post() {
  curl -fsS --max-time 10 -X POST -H 'Content-Type: application/json' -d "$2" "$base$1" >/dev/null ||
    fail "POST $1 $2 was refused"
}

# Prints the body; used as x=$(get ROUTE), so a failure reports on stderr.
get() { curl -fsS --max-time 10 "$base$1" || fail "GET $1 failed" >&2; }

# Waits for the demo to exit, failing after $1 s in which it made no
# progress: neither its live position (GET /api/status, while it serves) nor
# its output moved. Its exit status lands in rc.
wait_for_exit() {
  local end=$((SECONDS + $1)) progress="" now
  while kill -0 "$pid" 2>/dev/null; do
    now="$(stat -c %s "$log" 2>/dev/null || true) $(curl -fsS --max-time 2 "$base/api/status" 2>/dev/null | jq -c .live_position 2>/dev/null || true)"
    if [[ $now != "$progress" ]]; then
      progress=$now
      end=$((SECONDS + $1))
    fi
    ((SECONDS < end)) || fail "demo still running, with no progress for $1 s"
    sleep 0.1
  done
  rc=0
  wait "$pid" || rc=$?
  pid=""
}
