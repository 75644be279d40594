#!/bin/sh
# Keeps the example programs quoted in a guide identical to the files.
# After each line `<!-- example: PATH -->` the guide holds PATH (relative
# to the source tree) in a ```c block.
#   tools/doc-examples.sh FILE.md          rewrite the blocks from the files
#   tools/doc-examples.sh --check FILE.md  exit 1 and show a diff when stale
set -eu
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
[ $# -eq 1 ] || { echo "usage: $0 [--check] FILE.md" >&2; exit 2; }
doc=$1
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp "${TMPDIR:-/tmp}/doc-examples.XXXXXX")
trap 'rm -f "$out"' EXIT
# Drops any existing block after a marker and writes the file instead.
awk -v top="$top" '
  skip == 1 && /^```c$/ { skip = 2; next }
  skip == 2 { if (/^```$/) skip = 0; next }
  skip == 1 && /^$/ { next }
  { skip = 0; print }
  /^<!-- example: .* -->$/ {
    path = $3
    file = top "/" path
    if ((getline line < file) <= 0) {
      print "doc-examples: cannot read " path > "/dev/stderr"
      exit 3
    }
    print ""
    print "```c"
    print line
    while ((getline line < file) > 0)
      print line
    close(file)
    print "```"
    skip = 1
  }
' "$doc" >"$out"
if [ $check -eq 1 ]; then
  if ! cmp -s "$doc" "$out"; then
    echo "$doc: the quoted examples differ from the files; run $0 $doc"
    diff -u "$doc" "$out" | head -40
    exit 1
  fi
  echo "$doc: every quoted example matches its file"
else
  cat "$out" >"$doc.tmp" && mv "$doc.tmp" "$doc"
fi
