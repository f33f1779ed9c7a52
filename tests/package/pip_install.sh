#!/usr/bin/env bash
# nansense as a Python user takes it: `pip wheel .` from the clone (the
# pyproject.toml, scikit-build-core, pip's build isolation), the wheel
# installed into a fresh venv that has torch, then from another folder
# `import nansense`, a short training loop under a served session, the
# embedded page and the API, checked by a program that exits 0 only when all
# hold. The wheel's metadata and contents are checked too.
#
# The fresh venv sees the project venv's torch through a .pth file (a second
# copy would be gigabytes); pip treats it as installed, as it would a torch
# the user installed. The wheel is built in build-pip/ (scikit-build-core's
# build-dir, kept between runs so a second run recompiles only what changed;
# never build/, whose configuration scikit-build-core would replace): the
# first run compiles the library and the module once more.
# scripts/pip-install-timing times a cold install from a fresh clone.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

fail() { echo "FAIL pip_install: $*"; exit 1; }
pass() { echo "PASS pip_install: $*"; }

[[ -x .venv/bin/python ]] || fail ".venv/ is missing (run scripts/setup)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python -m venv "$work/venv"
fresh_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$site" >"$fresh_site/project_torch.pth"
"$work/venv/bin/python" -c 'import torch' || fail "the fresh venv cannot import the project venv's torch"

"$work/venv/bin/python" -m pip wheel . --no-deps -w "$work/dist" --disable-pip-version-check -q \
  --config-settings=build-dir=build-pip >"$work/wheel.log" 2>&1 ||
  { tail -n 60 "$work/wheel.log"; fail "pip wheel . failed"; }
wheel=$(ls "$work"/dist/nansense-*.whl 2>/dev/null | head -n 1)
[[ -n $wheel ]] || fail "pip wheel made no nansense wheel"
pass "pip wheel . made $(basename "$wheel")"

"$work/venv/bin/python" - "$wheel" <<'PY' || fail "the wheel's metadata or contents are wrong"
import sys, zipfile, email.parser
names = zipfile.ZipFile(sys.argv[1]).namelist()
meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
meta = email.parser.Parser().parsestr(zipfile.ZipFile(sys.argv[1]).read(meta_name).decode())
problems = []
for key in ("Name", "Version", "Requires-Python", "License-Expression", "Summary"):
    if not meta.get(key):
        problems.append(f"METADATA has no {key}")
if not any(r.startswith("torch") for r in meta.get_all("Requires-Dist") or []):
    problems.append("METADATA does not require torch")
if "nansense" not in (meta.get_payload() or ""):
    problems.append("METADATA carries no readme")
for want in ("nansense/__init__.py", "nansense/_session.py", "nansense/_build_info.py"):
    if want not in names:
        problems.append(f"the wheel lacks {want}")
if not any(n.startswith("nansense/_nansense") and n.endswith(".so") for n in names):
    problems.append("the wheel lacks the native module nansense/_nansense*.so")
stray = [n for n in names if n.startswith(("include/", "lib/")) or n.endswith(".a")]
if stray:
    problems.append(f"the wheel carries C++ install files: {stray[:3]}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
pass "the wheel has its metadata (name, version, requires-python, license, torch, readme) and only the package"

"$work/venv/bin/python" -m pip install --no-deps -q --disable-pip-version-check "$wheel" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "pip install of the wheel failed"; }

mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
"$work/venv/bin/python" - <<'PY' || fail "the installed package failed its checks"
import json, os, sys, threading, urllib.request
import torch
import nansense
assert os.path.dirname(nansense.__file__).startswith(sys.prefix), nansense.__file__
from torch import nn
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(3)]
session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
base = session.url.rstrip("/")
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.read()
def train():
    for x, y in session.batches(data, phase="train"):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
thread = threading.Thread(target=train)
thread.start()
assert session.wait_until_stopped(60), "the first batch never paused"
page = get("/").decode()
assert "<script" in page and "not built" not in page.lower(), page[:300]
snapshot = json.loads(get("/api/snapshot"))
names = {layer["name"] for layer in snapshot["layers"]}
assert {"0", "2"} <= names, names
session.detach()
thread.join(60)
assert not thread.is_alive()
session.close()
# A script that still holds its session keeps serving after its loop (the
# reference's non-daemon server thread): dropping it lets the program end.
del session
print("ok", nansense.__file__)
PY
pass "installed into a fresh venv: import nansense from another folder, a served session trains, page and API answer"
