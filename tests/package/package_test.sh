#!/usr/bin/env bash
# nansense as a user's project takes it (tests/consumer):
# 1. installed: `cmake --install` into a temporary prefix, then a project of
#    its own finds it with find_package(nansense) and links nansense::nansense;
#    the program trains under a served session and checks the server, the
#    embedded page, the layer names and the optimizer state (it exits 0 only
#    when all hold);
# 2. from the source tree with FetchContent (add_subdirectory underneath):
#    configured, the build graph holds nansense and the program but none of
#    our tests, examples or benches. Building the library again from source
#    would take most of this test's time on 2 cores; NANSENSE_PACKAGE_TEST_FULL=1
#    builds and runs it too.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${NANSENSE_BUILD_DIR:-build}

fail() { echo "FAIL package_test: $*"; exit 1; }
pass() { echo "PASS package_test: $*"; }

[[ -f $build/CMakeCache.txt ]] || fail "$build is not configured"
command -v ninja >/dev/null || fail "ninja not found"
generator=(-G Ninja)
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
torch_dir=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install failed"; }
for f in include/nansense/nansense.h include/nansense/session.h lib/libnansense.a \
  lib/cmake/nansense/nansenseConfig.cmake lib/cmake/nansense/nansenseConfigVersion.cmake \
  lib/cmake/nansense/nansenseTargets.cmake; do
  [[ -f $work/prefix/$f ]] || fail "the install lacks $f"
done
pass "cmake --install puts the headers, the library and the CMake package"

# 1. find_package against the installed prefix.
cmake -S tests/consumer -B "$work/find" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_PREFIX_PATH="$work/prefix" -DTorch_DIR="$torch_dir" \
  >"$work/find.log" 2>&1 || { cat "$work/find.log"; fail "configuring the consumer with find_package failed"; }
cmake --build "$work/find" -j2 >>"$work/find.log" 2>&1 ||
  { cat "$work/find.log"; fail "building the consumer against the installed nansense failed"; }
"$work/find/consumer" || fail "the consumer built against the installed nansense failed its checks"
pass "find_package(nansense) + nansense::nansense: built, ran and checked"

# The package says so when the version asked for does not fit.
mkdir -p "$work/old"
cat >"$work/old/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(old LANGUAGES CXX)
find_package(nansense 9.0 REQUIRED)
CMAKE
if cmake -S "$work/old" -B "$work/old/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DTorch_DIR="$torch_dir" \
  >"$work/old.log" 2>&1; then
  fail "find_package(nansense 9.0) was satisfied by the installed 0.x"
fi
grep -q "nansenseConfig.cmake, version: " "$work/old.log" || { cat "$work/old.log"; fail "the version refusal does not name the package"; }
pass "find_package(nansense 9.0) is refused by the version file"

# 2. FetchContent with SOURCE_DIR: the library and the program, nothing of ours.
cmake -S tests/consumer -B "$work/sub" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$compiler" -DNANSENSE_SOURCE_DIR="$root" -DTorch_DIR="$torch_dir" \
  >"$work/sub.log" 2>&1 || { cat "$work/sub.log"; fail "configuring the consumer with FetchContent failed"; }
targets=$(ninja -C "$work/sub" -t targets all)
grep -qE '(^|/)nansense: ' <<<"$targets" || fail "the FetchContent build has no nansense target: $targets"
grep -qE '(^|/)consumer: ' <<<"$targets" || fail "the FetchContent build has no consumer target"
for ours in nansense_unit_tests nansense_integration_tests nansense_wire_description fashion_mnist_demo \
  transformer_demo gan_demo mnist_example example_support overhead numerics time_travel stats; do
  if grep -qE "(^|/)$ours: " <<<"$targets"; then fail "the FetchContent build would build our $ours"; fi
done
grep -q "add_test\|gtest" "$work/sub/CTestTestfile.cmake" 2>/dev/null && fail "the FetchContent build registers our tests"
pass "FetchContent/add_subdirectory: nansense and the program only, no tests, examples or benches"

if [[ ${NANSENSE_PACKAGE_TEST_FULL:-0} == 1 ]]; then
  cmake --build "$work/sub" -j2 >>"$work/sub.log" 2>&1 || { tail -50 "$work/sub.log"; fail "the FetchContent build failed"; }
  "$work/sub/consumer" || fail "the consumer built with FetchContent failed its checks"
  pass "FetchContent: built, ran and checked"
fi
