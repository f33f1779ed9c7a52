#!/usr/bin/env bash
# The sdist builds without Node.js: scripts/wheel makes it (or finds it up to
# date in dist/) with the web UI as built in web/prebuilt/. Unpacked, it is
# configured the way `pip install nansense-<v>.tar.gz` configures it (SKBUILD:
# the web UI required) with no node or npm on PATH, and the embedded web UI
# is generated from web/prebuilt/: the step that needs Node.js in a clone.
# Compiling the library and the module from the sdist would take most of this
# test's time on 2 cores (683 s measured, ccache missing on the unpacked
# sources' folder); NANSENSE_SDIST_TEST_FULL=1 also runs `pip wheel <sdist>`
# with node and npm masked.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

fail() { echo "FAIL sdist_build: $*"; exit 1; }
pass() { echo "PASS sdist_build: $*"; }

[[ -x .venv/bin/python ]] || fail ".venv/ is missing (run scripts/setup)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

scripts/wheel >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; fail "scripts/wheel failed"; }
sdist=$(ls "$root"/dist/nansense-*.tar.gz 2>/dev/null | head -n 1)
[[ -n $sdist ]] || fail "scripts/wheel left no sdist in dist/"
tar -xzf "$sdist" -C "$work"
src=$(ls -d "$work"/nansense-*/)
src=${src%/}
for want in PKG-INFO pyproject.toml CMakeLists.txt LICENSE web/prebuilt/index.html web/src python/nansense/__init__.py; do
  [[ -e $src/$want ]] || fail "the sdist lacks $want"
done
for stray in .venv build build-pip dist web/node_modules tests/node_modules; do
  [[ ! -e $src/$stray ]] || fail "the sdist carries $stray"
done
pass "$(basename "$sdist") ($(du -k "$sdist" | cut -f1) kB) carries the sources and the built web UI, no build output"

# A PATH with every command but Node.js's. CMake also looks in /usr/bin and
# the like whatever PATH says: where this runs as root, the build runs in a
# mount namespace of its own in which node and npm are empty files (not
# executable), so nothing can find or run them; elsewhere PATH alone hides
# them, and the configure log must show no npm found.
mkdir -p "$work/bin"
IFS=: read -ra dirs <<<"$PATH"
for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do  # the first on PATH wins, as it would
  [[ -d ${dirs[i]} ]] && ln -sf "${dirs[i]}"/* "$work/bin/" 2>/dev/null || true
done
rm -f "$work"/bin/{node,nodejs,npm,npx,corepack}
cat >"$work/no_node.sh" <<'SH'
# Runs "$@" with node and npm masked (in a mount namespace of its own).
set -e
: >"$NO_NODE_EMPTY"
for dir in /usr/bin /usr/local/bin /bin; do
  for name in node nodejs npm npx corepack; do
    [[ -e $dir/$name ]] && mount --bind "$NO_NODE_EMPTY" "$dir/$name"
  done
done
if command -v node >/dev/null || [[ -x /usr/bin/node ]]; then echo "node is still runnable" >&2; exit 1; fi
exec "$@"
SH
export NO_NODE_EMPTY=$work/empty
no_node=(env PATH="$work/bin")
if [[ $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
  no_node=(unshare -m --propagation private env PATH="$work/bin" bash "$work/no_node.sh")
  how="node and npm masked in a mount namespace, and off PATH"
else
  how="node and npm off PATH"
fi
"${no_node[@]}" sh -c 'command -v node' >/dev/null && fail "node is still on the test's PATH"

"${no_node[@]}" cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSKBUILD=ON \
  -DNANSENSE_PYTHON="$root/.venv/bin/python" >"$work/configure.log" 2>&1 ||
  { tail -n 40 "$work/configure.log"; fail "configuring the sdist without node failed"; }
grep -q "embedding the web UI built into this sdist" "$work/configure.log" ||
  { cat "$work/configure.log"; fail "the sdist's build does not embed web/prebuilt/"; }
grep -qE "^NPM_PROGRAM:FILEPATH=.*npm$" "$work/build/CMakeCache.txt" && fail "CMake found npm"
"${no_node[@]}" ninja -C "$work/build" src/generated/web_assets.cpp >"$work/embed.log" 2>&1 ||
  { tail -n 40 "$work/embed.log"; fail "embedding the sdist's web UI without node failed"; }
embedded=$(grep -c '\.incbin' "$work/build/src/generated/web_assets.cpp" || true)
grep -q '{"/index.html"' "$work/build/src/generated/web_assets.cpp" || fail "the embedded UI has no index.html"
pass "configured as pip does ($how): the web UI embedded from the sdist ($embedded files)"

if [[ ${NANSENSE_SDIST_TEST_FULL:-0} == 1 ]]; then
  started=$SECONDS
  "${no_node[@]}" "$root/.venv/bin/python" -m pip wheel "$sdist" --no-deps --no-build-isolation \
    -w "$work/dist" --disable-pip-version-check -q >"$work/full.log" 2>&1 ||
    { tail -n 40 "$work/full.log"; fail "pip wheel of the sdist without node failed"; }
  pass "pip wheel of the sdist with no node on PATH: $(basename "$(ls "$work"/dist/*.whl)") in $((SECONDS - started)) s"
fi
