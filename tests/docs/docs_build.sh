#!/usr/bin/env bash
# The docs build as one test: scripts/docs (the generated reference, then
# mkdocs --strict, which fails on broken links and anchors inside the site),
# then every docs/... link of README.md must name a file, and its #anchor a
# heading of that page (README.md is not part of the site, so mkdocs does
# not check it). Extra arguments go to scripts/docs.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "FAIL docs_build: $*"; exit 1; }

scripts/docs "$@" || fail "scripts/docs failed"

# Markdown links: ](docs/x.md) and ](docs/x.md#anchor).
# A link with an anchor must also name a heading of the built page
# (docs/guide/nans.md#the-guard -> build/site/guide/nans/index.html, id="the-guard").
broken=()
while IFS= read -r target; do
  path=${target%%#*}
  if [[ ! -e $path ]]; then
    broken+=("$target")
  elif [[ $target == *#* ]]; then
    page=${path#docs/}
    page=${page%.md}
    [[ $page == index ]] && html=build/site/index.html || html=build/site/${page%/index}/index.html
    grep -q "id=\"${target#*#}\"" "$html" 2>/dev/null || broken+=("$target (no such anchor)")
  fi
done < <(grep -oE '\]\(docs/[^)[:space:]]*\)' README.md | sed -E 's/^\]\((.*)\)$/\1/' | sort -u)
((${#broken[@]} == 0)) || fail "README.md has broken docs/ links: ${broken[*]}"
count=$(grep -oE '\]\(docs/[^)[:space:]]*\)' README.md | wc -l)
((count > 0)) || fail "README.md links to no docs/ page"
echo "PASS docs_build: site built, $count README links to docs/ resolve"
