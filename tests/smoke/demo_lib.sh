# Sourced by the demo smoke tests (not executable, so scripts/test does not
# run it on its own): `smoke_setup TAG` sets demo and deadline_s and defines
# fail/pass (prefixed with TAG, fail printing $log), free_port, and, for the
# demo running as $pid at $base, wait_for_status and post.

smoke_setup() {
  smoke_tag=$1
  # NANSENSE_BUILD_DIR points at another build tree (default build/).
  demo=${NANSENSE_BUILD_DIR:-build}/examples/fashion_mnist/fashion_mnist_demo
  deadline_s=120 # generous: loading the dataset on a busy 2-core machine
  [[ -x $demo ]] || { echo "FAIL $smoke_tag: $demo not built"; exit 1; }
}

fail() {
  echo "FAIL $smoke_tag: $*"
  echo "--- demo output ---"
  cat "$log" || true
  exit 1
}
pass() { echo "PASS $smoke_tag: $*"; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

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
