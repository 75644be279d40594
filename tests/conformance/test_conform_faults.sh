#!/bin/sh
# tyto-conform must refuse plugins with known faults: the asynchronous test
# plugin of tests/plugins/kitplug.c conforms as built correctly (kitgood,
# and kitnorelease, which lacks an optional function), in f32, f64, f16 and
# bf16, and each build with one fault fails, with the finding that names
# it. Paths that are no regular file are refused as libtyto refuses them
# (never waited on), and a report that cannot be written is a failure.
set -u
conform=../tools/tyto-conform
cpu=../plugins/cpu/.libs/tyto_plugin_cpu.so
dir=plugins/kit/.libs
[ -x "$conform" ] || { echo "$conform not built"; exit 1; }
[ -f "$cpu" ] || { echo "$cpu not built"; exit 1; }
mkdir -p conformance
log=conformance/test_conform_faults.out
: >"$log"
failed=0

# run NAME: runs the kit on test plugin NAME (test mode), output in $log.one.
run() {
  "$conform" "$dir/tyto_plugin_$1.so" --reference "$cpu" >"$log.one" 2>&1
  rc=$?
  { echo "== $1 (exit $rc)"; cat "$log.one"; } >>"$log"
  return $rc
}

# Correct: as built, and without the optional kernel_release.
for p in kitgood kitnorelease; do
  if run $p; then
    echo "$p: $(grep '^summary:' "$log.one")"
  else
    failed=1
    echo "FAIL: $p, a correct plugin, does not conform (log: tests/$log):"
    grep -E 'FAIL|out-of-bounds|tyto-conform:' "$log.one" | head -n 20
  fi
done

# fault NAME PATTERN WHAT: plugin NAME must not conform, and a row of the
# report must match PATTERN (a basic regular expression).
fault() {
  run "$1"
  rc=$?
  if [ $rc -ne 1 ]; then
    failed=1
    echo "FAIL: $1 ($3): tyto-conform exited $rc, expected 1 (log: tests/$log)"
  elif ! grep -q "$2" "$log.one"; then
    failed=1
    echo "FAIL: $1 ($3): no row matches '$2'; its findings were:"
    grep -E 'FAIL|out-of-bounds' "$log.one" | head -n 10
  else
    echo "$1 ($3) refused: $(grep "$2" "$log.one" | head -n 1 |
      sed 's/  */ /g')"
  fi
}

fault kitevwait '^contract .*events across streams .*FAIL' \
  "event_wait does not wait"
fault kitrelu '^relu .*special values .*FAIL: relu(nan)' \
  "relu as x > 0 ? x : 0"
fault kitsupports 'FAIL: supports_op accepted it but prepare refused it' \
  "supports_op accepts what prepare refuses"
fault kitrelease '^contract .*kernel released with launches queued .*FAIL' \
  "kernel_release drops queued launches"
fault kith2d '^contract .*stream order: copies .*FAIL' \
  "a queued copy_h2d runs ahead of its stream"
fault kitnullsync '^contract .*copies and host memory .*FAIL' \
  "copy_h2d with stream NULL returns before reading its source"
fault kitdupclaim "^abi .*probe's claims .*FAIL: claimed device number 0 twice" \
  "its probe claims one device number twice"
# The 16-bit dtypes: rounding, conversions, guard regions, refusals.
fault kittrunc16 '^add  *f16  *special values (every pair) *FAIL: add(' \
  "16-bit results truncated, not rounded to nearest even"
fault kitcastf32 '^cast  *f64  *to f16: ties, overflow, subnormals *FAIL' \
  "CAST from f64 to f16 rounds through f32 (twice)"
fault kitwide16 '^copy  *f16  *contiguous .*out-of-bounds: copy: output 0 written past its end' \
  "16-bit elements written as 32-bit words"
fault kitlinalg16 '^inv  *f16  *refuses it .*FAIL: supports_op refused inv in f16 with code 1' \
  "linear algebra in f16 refused with INVALID_ARGUMENT"
# refused WHAT PHRASE ARGS...: the kit must refuse ARGS with exit 2 (as a
# missing plugin) and libtyto's words, at once (a FIFO must not be opened
# as dlopen opens it: that waits for a writer).
refused() {
  what=$1 phrase=$2
  shift 2
  $limit "$conform" "$@" >"$log.one" 2>&1
  rc=$?
  { echo "== $what (exit $rc)"; cat "$log.one"; } >>"$log"
  if [ $rc -ne 2 ]; then
    failed=1
    echo "FAIL: $what: tyto-conform exited $rc, expected 2 (log: tests/$log)"
  elif ! grep -q "$phrase" "$log.one"; then
    failed=1
    echo "FAIL: $what: no message '$phrase':"
    cat "$log.one"
  else
    echo "$what refused: $(head -n 1 "$log.one")"
  fi
}
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout 60"
odd=conformance/odd
rm -rf "$odd"
mkdir -p "$odd/tyto_plugin_dd.so"
if mkfifo "$odd/tyto_plugin_ff.so"; then
  refused "a FIFO as the plugin" \
    "^tyto-conform: $odd/tyto_plugin_ff.so: cannot be loaded: is a FIFO, not a regular file$" \
    "$odd/tyto_plugin_ff.so" --reference "$cpu"
  refused "a FIFO as the reference" \
    "^tyto-conform: reference: $odd/tyto_plugin_ff.so: cannot be loaded: is a FIFO, not a regular file" \
    "$dir/tyto_plugin_kitgood.so" --reference "$odd/tyto_plugin_ff.so"
  refused "a FIFO as the plugin, grad mode" "is a FIFO, not a regular file" \
    "$odd/tyto_plugin_ff.so" --reference "$cpu" --mode grad
fi
refused "a directory as the plugin" \
  "^tyto-conform: $odd/tyto_plugin_dd.so: cannot be loaded: is a directory, not a regular file$" \
  "$odd/tyto_plugin_dd.so" --reference "$cpu"
rm -rf "$odd"
# An option given without its value says what it takes.
refused "--mode without a value" \
  "^tyto-conform: --mode needs a value (test, perf or grad)$" \
  "$dir/tyto_plugin_kitgood.so" --reference "$cpu" --mode
refused "--reference without a value" \
  "^tyto-conform: --reference needs a value" \
  "$dir/tyto_plugin_kitgood.so" --reference
# --name=value as the other tools take it; a flag given a value is refused.
refused "--mode=bogus" \
  "^tyto-conform: --mode is test, perf or grad, not \"bogus\"$" \
  "$dir/tyto_plugin_kitgood.so" --reference="$cpu" --mode=bogus
refused "--op= (empty)" "^tyto-conform: --op needs a value" \
  "$dir/tyto_plugin_kitgood.so" --reference="$cpu" --op=
refused "--json=1" "^tyto-conform: --json takes no value, got \"--json=1\"$" \
  "$dir/tyto_plugin_kitgood.so" --json=1
if ! $limit "$conform" "$dir/tyto_plugin_kitgood.so" --reference="$cpu" \
  --op=relu --dtype=f32 >"$log.one" 2>&1 ||
  ! grep -q "CONFORMS" "$log.one"; then
  failed=1
  echo "FAIL: --op=relu --dtype=f32 --reference=...: not a conforming run:"
  cat "$log.one"
fi
case $("$conform" --version) in
"tyto-conform "[0-9]*) ;;
*)
  failed=1
  echo "FAIL: tyto-conform --version: $("$conform" --version 2>&1)"
  ;;
esac

# full WHAT ARGS...: with stdout on /dev/full (every write fails with
# ENOSPC), the kit must exit 1 and say so, whatever the report's form.
full() {
  what=$1
  shift
  "$conform" "$@" 2>"$log.one" >/dev/full
  rc=$?
  { echo "== $what >/dev/full (exit $rc)"; cat "$log.one"; } >>"$log"
  if [ $rc -ne 1 ]; then
    failed=1
    echo "FAIL: $what >/dev/full: tyto-conform exited $rc, expected 1"
  elif ! grep -q "^tyto-conform: cannot write to stdout: No space left on device$" \
    "$log.one"; then
    failed=1
    echo "FAIL: $what >/dev/full: no message naming the error:"
    cat "$log.one"
  else
    echo "$what >/dev/full: $(cat "$log.one")"
  fi
}
if [ -c /dev/full ]; then
  full "--help" --help
  full "the table" "$dir/tyto_plugin_kitgood.so" --reference "$cpu" --op add
  full "--json" "$dir/tyto_plugin_kitgood.so" --reference "$cpu" --op add \
    --json
  full "perf mode" "$dir/tyto_plugin_kitgood.so" --reference "$cpu" \
    --mode perf --op add --dtype f32
  full "grad mode --json" "$cpu" --reference "$cpu" --mode grad \
    --op elementwise --dtype f32 --json
fi
rm -f "$log.one"
exit $failed
