#!/usr/bin/env bash
# The main page's pane toggles, the layer menu's statistics rows, the Weights
# page opened bare, the Experiment page's Compare with MIN/MAX, the Min/Max
# view's Current batch, the controls a recording holds, the Share dialog's
# targets (with a saved recording played and downloaded) and the brand line
# naming the run's front end, in a real browser against the C++ demo and
# then the Python one. Screenshots go to build/browser-screenshots/ui_items/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner ui_items browser-screenshots/ui_items
build=${NANSENSE_BUILD_DIR:-build}
python=${NANSENSE_PYTHON:-.venv/bin/python}
[[ -x $python ]] || fail "$python not found (scripts/setup makes the project venv)"
[[ -d $build/python/nansense ]] || fail "$build/python/nansense is missing (cmake --build $build --target nansense_python)"
NANSENSE_RECORDINGS_DIR=$(mktemp -d)
export NANSENSE_RECORDINGS_DIR
cleanup_paths+=("$NANSENSE_RECORDINGS_DIR")

node tests/browser/ui_items_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile" \
  --python "$python" --python-path "$build/python" --python-demo examples/python/fashion_mnist.py
