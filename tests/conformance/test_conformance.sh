#!/bin/sh
# tyto-conform (the plugin conformance kit) on the plugins of this build
# tree, each against the CPU plugin of this build tree:
#  - the CPU plugin against itself: every case must pass;
#  - the OpenCL plugin, where built: its device (PoCL on CI machines) runs
#    COPY and FILL only today, everything else must come out "unsupported";
#  - the CUDA plugin, where built: without a GPU it has no device (tyto-conform
#    exits 3) and is skipped;
#  - the SDK's template plugin (a memory-only device): all "unsupported".
# Then the usage errors (exit 2) and a perf-mode smoke run (timings are
# printed, never checked). Exits 77 when no plugin had a device.
set -u
conform=../tools/tyto-conform
cpu=../plugins/cpu/.libs/tyto_plugin_cpu.so
[ -x "$conform" ] || { echo "$conform not built"; exit 1; }
[ -f "$cpu" ] || { echo "$cpu not built"; exit 1; }

tested=0
failed=0
log=conformance/test_conformance.out
: >"$log"

# check NAME PLUGIN.so: runs test mode, prints the summary line.
check() {
  "$conform" "$2" --reference "$cpu" >>"$log" 2>&1
  rc=$?
  case $rc in
  0)
    tested=$((tested + 1))
    echo "$1: $(grep '^summary:' "$log" | tail -n 1)"
    ;;
  3)
    echo "$1: no usable device here, skipped ($(grep '^no device\|cannot open' "$log" | tail -n 1))"
    ;;
  *)
    failed=1
    echo "FAIL: $1: tyto-conform exited $rc (log: tests/$log)"
    grep -E 'FAIL|out-of-bounds|tyto-conform:' "$log" | tail -n 40
    ;;
  esac
}

check cpu "$cpu"
for p in opencl cuda; do
  so=../plugins/$p/.libs/tyto_plugin_$p.so
  [ -f "$so" ] && check "$p" "$so"
done
template=plugins/.libs/tyto_plugin_template.so
[ -f "$template" ] && check template "$template"

# The JSON report parses as one object whose exit is 0 for the CPU plugin.
json=$("$conform" "$cpu" --reference "$cpu" --json --op matmul --dtype f64)
rc=$?
if [ $rc -ne 0 ] || ! printf '%s' "$json" | grep -q '"exit": 0'; then
  failed=1
  echo "FAIL: --json on the CPU plugin: exit $rc"
fi

# Usage errors and unloadable plugins exit 2 with a message.
for args in "" "$cpu --mode nope" "$cpu --dtype f16" "$cpu --op nope" \
  "./no_such_plugin.so" "$cpu --reference ./no_such_plugin.so"; do
  # shellcheck disable=SC2086
  "$conform" $args >/dev/null 2>"$log.err"
  rc=$?
  if [ $rc -ne 2 ] || [ ! -s "$log.err" ]; then
    failed=1
    echo "FAIL: tyto-conform $args: exit $rc, expected 2 with a message"
  fi
done
rm -f "$log.err"

# perf mode runs (small: one op) and reports both devices.
if ! "$conform" "$cpu" --reference "$cpu" --mode perf --op fused \
  --dtype f32 >>"$log" 2>&1; then
  failed=1
  echo "FAIL: --mode perf on the CPU plugin"
fi

[ $failed -eq 0 ] || exit 1
[ $tested -gt 0 ] || exit 77
exit 0
