#!/usr/bin/env bash
# Every tracked C++ file (and every new one not yet tracked) is formatted as
# .clang-format says; names the files that are not and the command that fixes
# them (scripts/format).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "FAIL format: clang-format is missing (scripts/setup installs it)"; exit 1; }
mapfile -t files < <({ git ls-files '*.cpp' '*.h'; git ls-files --others --exclude-standard '*.cpp' '*.h'; } |
  sort -u | while read -r f; do [[ -f $f ]] && echo "$f"; done)
bad=()
for f in "${files[@]}"; do
  clang-format --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "FAIL format: ${#bad[@]} of ${#files[@]} C++ files are not formatted (run scripts/format):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "PASS format: ${#files[@]} C++ files formatted as .clang-format says"
