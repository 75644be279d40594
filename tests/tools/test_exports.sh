#!/bin/sh
# libtyto.so exports exactly the functions its public headers declare with
# TYTO_API, and each plugin exports only its entry point.
set -eu
top_srcdir=${top_srcdir:-..}
lib=../core/.libs/libtyto.so
command -v nm >/dev/null || { echo "nm not found"; exit 77; }
[ -f "$lib" ] || { echo "$lib not built"; exit 1; }

exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort)
# Declarations may wrap after the return type: read the headers as one line.
declared=$(cat "$top_srcdir"/core/include/tyto/*.h | tr '\n' ' ' |
           grep -o 'TYTO_API [^;{(]*(' |
           sed 's/.*[ *]\(tyto_[A-Za-z0-9_]*\) *($/\1/' | grep '^tyto_' | sort)
if [ "$exported" != "$declared" ]; then
  echo "libtyto.so exports differ from the TYTO_API declarations:"
  diff -u /dev/fd/3 /dev/fd/4 3<<E1 4<<E2 || true
$declared
E1
$exported
E2
  exit 1
fi
echo "libtyto.so: $(echo "$exported" | wc -l) functions, all declared"

for so in ../plugins/*/.libs/tyto_plugin_*.so; do
  [ -f "$so" ] || continue
  name=$(basename "$so" .so)
  syms=$(nm -D --defined-only "$so" | awk '$2 == "T" { print $3 }')
  if [ "$syms" != "${name}_LTX_init" ]; then
    echo "$so exports more than its entry point: $syms"
    exit 1
  fi
done
echo "plugins export their entry points only"
