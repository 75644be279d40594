#!/bin/sh
# tyto-conform (the plugin conformance kit) on the plugins of this build
# tree, each against the CPU plugin of this build tree, in test mode (the op
# catalogue through the plugin ABI) and in grad mode (differentiated graphs
# compiled by libtyto):
#  - the CPU plugin against itself: every case must pass;
#  - the OpenCL plugin, where built and its device (PoCL on CI machines)
#    opens: no case may fail; what it does not implement yet must come out
#    "unsupported";
#  - the CUDA plugin, where built: without a GPU it has no device (tyto-conform
#    exits 3) and is skipped;
#  - the SDK's template plugin (a memory-only device): all "unsupported".
# The CPU plugin's own run must also have passed every case it lists (no
# "unsupported" row), so a catalogue case the reference refuses shows up.
# Then the usage errors (exit 2), the JSON reports and a perf-mode smoke run
# (timings are printed, never checked). Exits 77 when no plugin had a device.
# Test mode includes the device contract (streams, events, copies, kernel
# lifetimes) and the special-value cases checked against sdk/docs/ops.md.
set -u
conform=../tools/tyto-conform
cpu=../plugins/cpu/.libs/tyto_plugin_cpu.so
[ -x "$conform" ] || { echo "$conform not built"; exit 1; }
[ -f "$cpu" ] || { echo "$cpu not built"; exit 1; }

tested=0
failed=0
log=conformance/test_conformance.out
: >"$log"

# check NAME PLUGIN.so MODE: runs the mode, prints the summary line.
check() {
  echo "== $1, $3 mode" >>"$log"
  "$conform" "$2" --reference "$cpu" --mode "$3" >"$log.one" 2>&1
  rc=$?
  cat "$log.one" >>"$log"
  case $rc in
  0)
    tested=$((tested + 1))
    echo "$1 ($3 mode): $(grep '^summary:' "$log.one" | tail -n 1)"
    ;;
  3)
    echo "$1 ($3 mode): no usable device here, skipped ($(grep '^no device\|cannot open' "$log.one" | tail -n 1))"
    ;;
  *)
    failed=1
    echo "FAIL: $1: tyto-conform --mode $3 exited $rc (log: tests/$log)"
    grep -E 'FAIL|out-of-bounds|tyto-conform:' "$log.one" | tail -n 40
    ;;
  esac
}

for mode in test grad; do
  check cpu "$cpu" $mode
  # The reference against itself runs every case.
  if ! grep -q '^summary: [1-9][0-9]* pass, 0 FAIL, 0 out-of-bounds, 0 error, 0 unsupported, 0 without' \
    "$log.one"; then
    failed=1
    echo "FAIL: the CPU plugin against itself ($mode mode) left cases unrun:"
    grep -E 'unsupported|^summary' "$log.one" | head -n 20
  fi
  for p in opencl cuda; do
    so=../plugins/$p/.libs/tyto_plugin_$p.so
    [ -f "$so" ] && check "$p" "$so" $mode
  done
  template=plugins/.libs/tyto_plugin_template.so
  if [ -f "$template" ]; then
    check template "$template" $mode
    # Its copies, streams and events pass the device contract; no op runs.
    passes=$(sed -n 's/^summary: \([0-9]*\) pass.*/\1/p' "$log.one")
    contract=$(grep -c '^contract .* pass$' "$log.one")
    if ! grep -q '^summary: [0-9]* pass, 0 FAIL, 0 out-of-bounds, 0 error, [1-9]' \
      "$log.one" || [ "$passes" != "$contract" ]; then
      failed=1
      echo "FAIL: the template plugin ($mode mode) should support no op"
    fi
  fi
done
# The OpenCL plugin's other GEMM: on a CPU device (PoCL) the products run
# on tyto's kernels by default (option gemm=auto); CLBlast, which GPUs get,
# must pass the same products and convolutions there.
so=../plugins/opencl/.libs/tyto_plugin_opencl.so
if [ -f "$so" ]; then
  for run in "test matmul" "test conv2d" "test conv2d_backward_data" \
    "test conv2d_backward_filter" "grad matmul" "grad conv2d"; do
    set -- $run
    mode=$1 op=$2
    echo "== opencl (gemm=clblast), $op, $mode mode" >>"$log"
    TYTO_CONFORM_OPENCL_GEMM=clblast "$conform" "$so" --reference "$cpu" \
      --mode "$mode" --op "$op" >"$log.one" 2>&1
    rc=$?
    cat "$log.one" >>"$log"
    case $rc in
    0 | 3) ;;
    *)
      failed=1
      echo "FAIL: opencl with gemm=clblast: --op $op --mode $mode exited $rc"
      grep -E 'FAIL|out-of-bounds|tyto-conform:' "$log.one" | tail -n 20
      ;;
    esac
  done
  # A value the option does not take is refused, naming the ones it does.
  TYTO_CONFORM_OPENCL_GEMM=fast "$conform" "$so" --reference "$cpu" \
    --op matmul >"$log.one" 2>&1
  if ! grep -q 'option gemm="fast" is not valid; allowed values: auto, clblast, tyto' \
    "$log.one" && ! grep -q '^no device\|cannot open\|no OpenCL platform' "$log.one"; then
    failed=1
    echo "FAIL: opencl option gemm=fast was not refused with the allowed values:"
    head -n 5 "$log.one"
  fi
fi
rm -f "$log.one"

# The JSON reports are one object whose exit is 0 for the CPU plugin.
for args in "--op matmul --dtype f64" "--mode grad --op conv2d --dtype f32" \
  "--op cast --dtype f32,bf16"; do
  # shellcheck disable=SC2086
  json=$("$conform" "$cpu" --reference "$cpu" --json $args)
  rc=$?
  if [ $rc -ne 0 ] || ! printf '%s' "$json" | grep -q '"exit": 0' ||
    ! printf '%s' "$json" | grep -q '"result": "pass"'; then
    failed=1
    echo "FAIL: --json $args on the CPU plugin: exit $rc"
  fi
done

# grad mode does not run f16 and bf16, and says so (a row, not silence).
out=$("$conform" "$cpu" --reference "$cpu" --mode grad --dtype bf16 --op mlp)
rc=$?
if [ $rc -ne 0 ] ||
  ! printf '%s' "$out" | grep -q '^mlp  *bf16 .*skipped: grad mode does not run the 16-bit dtypes'; then
  failed=1
  echo "FAIL: --mode grad --dtype bf16: exit $rc, and no row saying why it is skipped"
fi

# Usage errors and unloadable plugins exit 2 with a message.
for args in "" "$cpu --mode nope" "$cpu --dtype f8" "$cpu --dtype f32," \
  "$cpu --dtype f32,,bf16" "$cpu --op nope" \
  "$cpu --mode grad --op nope" "$cpu --mode grad --op add" \
  "./no_such_plugin.so" "$cpu --reference ./no_such_plugin.so" \
  "./no_such_plugin.so --mode grad" \
  "./tyto_plugin_nosuch.so --mode grad" \
  "$cpu --mode grad --reference ./no_such_plugin.so"; do
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
