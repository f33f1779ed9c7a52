#!/usr/bin/env bash
# The binary wheel as a user takes it: scripts/wheel builds it (or finds it
# up to date in dist/: unchanged sources are not built again; its build folder
# is the pip_install test's build-pip/, so after that test it only relinks),
# then `pip install <wheel>` into a fresh venv that has torch, with nothing to
# compile. From another folder: `import nansense`, a short loop under a
# served session, a recording through the bundled OpenH264 that ffprobe reads
# as H.264, and ldd: every library the module and its bundled libraries need
# comes from the wheel (nansense.libs/), from torch (torch's own, found where
# torch is installed) or from the system's C/C++ runtime (and zlib, which the
# manylinux policy counts as on every system). Prints the install
# and first-import times.
#
# The fresh venv gets the project venv's torch and its dependencies as
# symbolic links to their installed folders (tests/package/link_torch.py;
# with their dist-info, so pip sees torch installed and resolves the wheel's
# requirement against it): a copy would be gigabytes, and this machine keeps
# no torch wheel in pip's cache to install from.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

fail() { echo "FAIL wheel_install: $*"; exit 1; }
pass() { echo "PASS wheel_install: $*"; }

[[ -x .venv/bin/python ]] || fail ".venv/ is missing (run scripts/setup)"
command -v ffprobe >/dev/null || fail "ffprobe is missing (scripts/setup installs ffmpeg)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scripts/wheel >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "scripts/wheel failed"; }
wheel=$(ls "$root"/dist/nansense-*.whl 2>/dev/null | head -n 1)
[[ -n $wheel ]] || fail "scripts/wheel left no wheel in dist/"
tag=$(.venv/bin/auditwheel show "$wheel" 2>&1 | tr '\n' ' ' | sed 's/  */ /g' |
  sed -n 's/.*constrains the platform tag to "\(manylinux_[0-9_]*x86_64\)".*/\1/p')
[[ -n $tag && $wheel == *"$tag"* ]] || fail "$(basename "$wheel") is not tagged with the platform auditwheel finds ($tag)"
pass "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) kB, tagged $tag as auditwheel show finds"

# A fresh venv that has torch: the project venv's, linked.
.venv/bin/python -m venv "$work/venv"
fresh_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python tests/package/link_torch.py "$fresh_site" || fail "linking torch into the fresh venv failed"
"$work/venv/bin/python" -c 'import torch' 2>/dev/null || fail "the fresh venv cannot import torch"

started=$EPOCHREALTIME
"$work/venv/bin/python" -m pip install --disable-pip-version-check --no-index -q "$wheel" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "pip install of the wheel failed"; }
install_s=$(awk "BEGIN { print $EPOCHREALTIME - $started }")
grep -qi "building\|compil" "$work/install.log" && fail "pip install built something: $(cat "$work/install.log")"
[[ -x $work/venv/bin/nansense-cli ]] || fail "the wheel installed no nansense-cli"

mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
started=$EPOCHREALTIME
"$work/venv/bin/python" -c 'import nansense' 2>"$work/import.log" || { cat "$work/import.log"; fail "import nansense failed"; }
import_s=$(awk "BEGIN { print $EPOCHREALTIME - $started }")
pass "pip install took $(printf %.1f "$install_s") s (no compile, no download), the first import nansense $(printf %.1f "$import_s") s"

# Which file each library the module and its bundled libraries need resolves to.
"$work/venv/bin/python" - "$fresh_site" <<'PY' 2>/dev/null || fail "the module needs libraries from outside the wheel, torch and the C/C++ runtime"
import glob, os, re, subprocess, sys
site = sys.argv[1]
module = glob.glob(f"{site}/nansense/_nansense*.so")[0]
bundled = sorted(glob.glob(f"{site}/nansense.libs/*.so*"))
# The C/C++ runtime, and zlib, which the manylinux policy counts as present
# on every system (auditwheel does not bundle it).
runtime = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
           "librt.so.1", "ld-linux-x86-64.so.2", "libz.so.1"}
torch_tops = {os.path.join(site, top) for top in os.listdir(site) if os.path.islink(os.path.join(site, top))}

def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)

resolved = {}
for line in subprocess.run(["ldd", module], capture_output=True, text=True, check=True).stdout.splitlines():
    m = re.match(r"\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", line)
    if m:
        resolved[m.group(1)] = os.path.normpath(m.group(2)) if m.group(2).startswith("/") else m.group(2)
    elif (m := re.match(r"\s*(/\S+) \(0x[0-9a-f]+\)$", line)):  # the dynamic loader
        resolved[os.path.basename(m.group(1))] = m.group(1)
problems, origins = [], {}
for owner in [module] + bundled:
    for name in needed(owner):
        where = resolved.get(name, "not found")
        if where.startswith(f"{site}/nansense.libs/"):
            origins[name] = "the wheel"
        elif any(where.startswith(t + "/") for t in torch_tops):
            origins[name] = "torch"
        elif name in runtime:
            origins[name] = "the system (" + where + ")"
        else:
            problems.append(f"{os.path.basename(owner)} needs {name} => {where}")
for name, origin in sorted(origins.items()):
    print(f"  {name:36s} {origin}")
if not bundled:
    problems.append("nansense.libs/ holds no library")
for name in ("libopenh264", "libpng16"):
    if not any(name in os.path.basename(b) for b in bundled):
        problems.append(f"the wheel bundles no {name}")
if any(re.search(r"libav|libx264|libswscale", os.path.basename(b)) for b in bundled):
    problems.append("the wheel bundles FFmpeg or x264 (GPL in Debian's build)")
if problems:
    print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
pass "ldd: every library the module and nansense.libs/ need comes from the wheel, torch or the C/C++ runtime (and zlib)"
[[ -f $fresh_site/nansense.libs/licenses/README ]] || fail "the wheel carries no licence inventory"
for lic in "$fresh_site"/nansense.libs/licenses/*.copyright; do [[ -s $lic ]] || fail "empty licence $lic"; done
pass "the bundled libraries' licences are in nansense.libs/licenses/"

# A served loop trains; a recording through the bundled OpenH264 plays back.
export NANSENSE_RECORDINGS_DIR=$work/recordings
timeout 300 "$work/venv/bin/python" - <<'PY' >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the installed wheel failed its checks"; }
import json, os, sys, threading, urllib.request
import torch
import nansense
assert os.path.dirname(nansense.__file__).startswith(sys.prefix), nansense.__file__
from torch import nn
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(4)]
session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
base = session.url.rstrip("/")
def call(path, body=None):
    request = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return r.read()
def train():
    for x, y in session.batches(data, phase="train"):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
def check():
    assert session.wait_until_stopped(60), "the first batch never paused"
    page = call("/").decode()
    assert "<script" in page and "not built" not in page.lower(), page[:300]
    names = {layer["name"] for layer in json.loads(call("/api/snapshot"))["layers"]}
    assert {"0", "2"} <= names, names
    call("/api/recordings/start", {"view": "weights", "layer": "0"})
    session.step_batch()
    assert session.wait_until_stopped(60)
    stopped = json.loads(call("/api/recordings/stop", {}))["stopped"]
    files = [f for s in stopped for f in s["files"]]
    assert files and all(not s["error"] for s in stopped), stopped
    return files
# A daemon thread and a finally: a failed check ends the program.
thread = threading.Thread(target=train, daemon=True)
thread.start()
try:
    files = check()
finally:
    session.detach()
    thread.join(60)
    session.close()
assert not thread.is_alive()
# A script that still holds its session keeps serving (as the reference's
# server thread does): dropping it lets the program end.
del session
print("recording", files[0]["path"], files[0]["frames"])
PY

video=$(sed -n 's/^recording \(.*\) [0-9]*$/\1/p' "$work/run.log")
[[ -f $video ]] || { cat "$work/run.log"; fail "no recording written"; }
probe=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=codec_name,profile,nb_read_frames \
  -of default=noprint_wrappers=1 "$video")
grep -q "codec_name=h264" <<<"$probe" && grep -q "nb_read_frames=[1-9]" <<<"$probe" ||
  fail "ffprobe does not read the recording as H.264: $probe"
pass "from another folder: a served session trains, page and API answer, a recording is H.264 ($(grep profile= <<<"$probe" | cut -d= -f2)) that ffprobe decodes"
