#!/usr/bin/env bash
# Short crash trials (scripts/crash-trials --trials 10): the demo kill -9'd
# during checkpoint and capsule writes, then every surviving cache and capsule
# loads or is refused with a message, and the newest checkpoint resumes; then
# the fault trials (cache folder under a file, deleted mid-run, full disk when
# a tmpfs can be mounted). NANSENSE_BUILD_DIR picks the build tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/crash-trials --trials 10
