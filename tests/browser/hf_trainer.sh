#!/usr/bin/env bash
# The UI speaks the Hugging Face Trainer's words, in a real browser (Debian's
# Chromium, headless, driven by playwright-core): a served Trainer run with
# gradient accumulation (tests/browser/hf_trainer_run.py, the package as
# built in build/python) shows the global step and the micro-batch in the
# top bar, what the snapshot shows, and a NaN's micro-batch in the banner.
# Screenshots go to build/browser-screenshots/hf_trainer/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${NANSENSE_BUILD_DIR:-build}
python=${NANSENSE_PYTHON:-.venv/bin/python}
chromium=${CHROMIUM:-/usr/bin/chromium}
fail() {
  echo "FAIL hf-trainer-ui: $*"
  exit 1
}
[[ -f $build/python/nansense/__init__.py ]] || fail "$build/python has no nansense package (cmake --build $build --target nansense_python)"
"$python" -c 'import transformers, accelerate' 2>/dev/null ||
  fail "$python cannot import transformers and accelerate (scripts/setup installs them)"
[[ -x $chromium ]] || fail "$chromium not found (scripts/setup installs Debian's chromium)"
[[ -d tests/node_modules/playwright-core ]] || fail "tests/node_modules lacks playwright-core (scripts/setup runs npm ci in tests/)"

shots=$build/browser-screenshots/hf_trainer
mkdir -p "$shots"
rm -f "$shots"/*.png
run=$(mktemp -d)  # the run's folder: its capsules and the Trainer's output
pidfile=$run/pid
cleanup() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$run"
}
trap cleanup EXIT INT TERM
# The harness starts a "demo" binary with --no-browser --port P: this one
# runs the Trainer script in the run's folder (exec: the pid is Python's).
cat >"$run/serve" <<SERVE
#!/usr/bin/env bash
cd "$run"
exec env PYTHONPATH="$root/$build/python:$root/tests/python" OMP_NUM_THREADS=1 "$root/$python" \
  "$root/tests/browser/hf_trainer_run.py" "\$@"
SERVE
chmod +x "$run/serve"
node tests/browser/hf_trainer_test.mjs --demo "$run/serve" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
