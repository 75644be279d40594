#!/bin/sh
# sdk/docs/ops.md against the op enum of sdk/include/tyto/plugin.h: every
# op of tyto_plugin_op has a section "### `NAME` (CODE)" there, with the
# header's code, and every such section names an op of the enum. Then the
# check itself is checked: a copy of ops.md without RELU's section must
# fail it.
set -u
srcdir=${top_srcdir:-../..}
header=$srcdir/sdk/include/tyto/plugin.h
doc=$srcdir/sdk/docs/ops.md
[ -f "$header" ] || { echo "$header not found"; exit 1; }
[ -f "$doc" ] || { echo "$doc not found (sdk/docs/ops.md defines every op)"; exit 1; }

# NAME CODE for each op of the enum.
ops() {
  sed -n '/^typedef enum tyto_plugin_op {/,/^} tyto_plugin_op;/p' "$1" |
    sed -n 's/^ *TYTO_PLUGIN_OP_\([A-Z0-9_]*\) *= *\([0-9]*\).*/\1 \2/p'
}

# check HEADER DOC: prints what differs, exits 1 when something does.
check() {
  bad=0
  n=$(ops "$1" | wc -l)
  if [ "$n" -lt 50 ]; then
    echo "only $n ops parsed from $1: has the enum's form changed?"
    return 1
  fi
  ops "$1" >"$tmp.ops"
  while read -r name code; do
    if ! grep -q "^### \`$name\` ($code)\$" "$2"; then
      echo "ops.md has no section for TYTO_PLUGIN_OP_$name (expected a" \
        "heading \"### \`$name\` ($code)\")"
      bad=1
    fi
  done <"$tmp.ops"
  sed -n 's/^### `\([A-Z0-9_]*\)` (\([0-9]*\))$/\1 \2/p' "$2" >"$tmp.doc"
  while read -r name code; do
    if ! grep -q "^$name $code\$" "$tmp.ops"; then
      echo "ops.md has a section \"$name ($code)\" that is no op of" \
        "tyto_plugin_op in plugin.h"
      bad=1
    fi
  done <"$tmp.doc"
  return $bad
}

tmp=${TMPDIR:-/tmp}/tyto-ops-doc.$$
trap 'rm -f "$tmp".*' EXIT
failed=0
check "$header" "$doc" || failed=1

# The check fails when a section is missing.
grep -v '^### `RELU` (40)$' "$doc" >"$tmp.md"
if check "$header" "$tmp.md" >"$tmp.out"; then
  echo "FAIL: the check passed ops.md without RELU's section"
  failed=1
elif ! grep -q "no section for TYTO_PLUGIN_OP_RELU" "$tmp.out"; then
  echo "FAIL: the check did not name RELU:"
  cat "$tmp.out"
  failed=1
fi
exit $failed
