#!/usr/bin/env bash
# The gear's Recording section in a real browser against the demo: the main
# page's view is named, Record starts an MP4 (the gear counts it), live
# updates add frames, Save & Finish writes a file FFmpeg's ffprobe reads as
# H.264 with the frames the dialog counted, Snapshot saves a PNG, Delete
# removes a recording's file, and a page with nothing recordable says so.
# Screenshots go to build/browser-screenshots/recording/.
# NANSENSE_WEB_DIR=<dist> serves another UI build instead of the embedded one.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/browser/runner.sh
browser_runner recording browser-screenshots/recording
command -v ffprobe >/dev/null || fail "ffprobe is missing (scripts/setup installs ffmpeg)"
NANSENSE_RECORDINGS_DIR=$(mktemp -d)
export NANSENSE_RECORDINGS_DIR
cleanup_paths+=("$NANSENSE_RECORDINGS_DIR")

node tests/browser/recording_test.mjs --demo "$demo" --chromium "$chromium" --screenshots "$shots" --pidfile "$pidfile"
