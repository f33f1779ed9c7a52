#!/usr/bin/env bash
# Checks the page's API types (web/src/api/types.ts, routes.ts) against the
# server's declared commands and replies: a key renamed on one side only fails
# here. Needs the build (build/tests/nansense_wire_description, or the path
# given as the first argument) and web/node_modules (its TypeScript compiler).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
exec node "$root/tests/wire/check_types.mjs" "${1:-$root/build/tests/nansense_wire_description}"
