#!/usr/bin/env bash
# The type check: mypy (scripts/requirements.txt) over the package as built
# in build/python (the Python files, py.typed and nansense/_nansense.pyi, the
# native module's stubs that pybind11-stubgen writes at build time), over
# nansense_cli and over examples/python, with pyproject.toml's [tool.mypy].
# A missing stub fails here first: type checkers would see the native module
# as untyped.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${NANSENSE_BUILD_DIR:-build}
python=${NANSENSE_TYPING_PYTHON:-.venv/bin/python}

fail() { echo "FAIL mypy: $*"; exit 1; }

"$python" -c 'import mypy' 2>/dev/null || fail "$python has no mypy (scripts/setup installs scripts/requirements.txt)"
for f in nansense/py.typed nansense/_nansense.pyi nansense_cli/__init__.py; do
  [[ -f $build/python/$f ]] || fail "$build/python/$f is missing (cmake --build $build --target nansense_python)"
done

# The cache lives in the build folder: a second run checks only what changed.
MYPYPATH=$build/python "$python" -m mypy --config-file pyproject.toml --cache-dir "$build/mypy-cache" \
  "$build/python/nansense" "$build/python/nansense_cli" examples/python || fail "mypy found errors (above)"
echo "PASS mypy: the package, its stubs, nansense-cli and examples/python type-check"
