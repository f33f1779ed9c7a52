#!/usr/bin/env bash
# Short soak (scripts/soak --cycles 200): pause/step/run cycles over HTTP with a
# WebSocket viewer watching strips and time-travel jumps; fails on a failed
# command or on fds/threads growing by more than 20. NANSENSE_BUILD_DIR picks
# the build tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/soak --cycles 200
