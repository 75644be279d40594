#!/bin/sh
# Fuzzes every parser of user input with clang's libFuzzer, AddressSanitizer
# and UndefinedBehaviorSanitizer (Debian: clang, libclang-rt-dev).
#
#   sh tests/fuzz/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 600); targets conf devspec idx safetensors
# model_file (default: all), run as many at a time as there are CPUs. Each
# target gets the largest input its format calls for (-max_len below), so
# that size-dependent bugs (a loop quadratic in a count the file controls)
# are in reach, and -timeout turns an input that takes more than 10 s into
# a finding. The core is built instrumented in $TYTO_FUZZ_BUILD (default
# build-fuzz/ in the tree); the corpus grows there, seeded from
# tests/fuzz/corpus/<target>/. Findings are left as build-fuzz/crash-*,
# timeout-* or oom-* files: add each to tests/fuzz/corpus/<target>/ with
# its fix, so that make check replays it. Prints one line per target and
# exits 1 when any target found something.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-conf devspec idx safetensors model_file}
build=${TYTO_FUZZ_BUILD:-$top/build-fuzz}
cc=${TYTO_FUZZ_CC:-clang}
san="-fsanitize=address,undefined -fno-sanitize-recover=all"
flags="-g -O1 -fno-omit-frame-pointer $san"

command -v "$cc" >/dev/null || {
  echo "fuzz.sh: $cc not found: install Debian's clang and libclang-rt-dev" >&2
  exit 2
}

if [ ! -f "$build/Makefile" ]; then
  mkdir -p "$build"
  (cd "$build" && "$top/configure" -q CC="$cc" \
    CFLAGS="$flags -fsanitize=fuzzer-no-link")
fi
make -C "$build/core" -s -j"$(nproc)" libtyto-core.la

inc="-I$build -I$top/core/include -I$top/core/src -I$top/sdk/include -I$top/tools"
# shellcheck disable=SC2046
libs="$build/core/.libs/libtyto-core.a $(pkg-config --libs zlib hwloc inih jansson) -lltdl -lm -lpthread"
for t in $targets; do
  case $t in
    model_file) extra="$top/tools/train/model_file.c $top/tools/train/model_build.c" ;;
    conf|devspec|idx|safetensors) extra="" ;;
    *) echo "fuzz.sh: unknown target '$t'" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2086
  "$cc" $flags -fsanitize=fuzzer $inc "$top/tests/fuzz/fuzz_$t.c" $extra \
    $libs -o "$build/fuzz_$t"
done

max_len() {
  case $1 in
    conf) echo 65536 ;;            # a config file: hundreds of lines at most
    devspec) echo 4096 ;;          # an environment variable
    idx) echo 1048576 ;;           # headers and enough items to matter
    safetensors) echo 8388608 ;;   # headers of 100k entries, metadata
    model_file) echo 1048576 ;;    # tens of thousands of layers
  esac
}

run_one() {
  t=$1
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  cp "$top/tests/fuzz/corpus/$t/"* "$corpus/"
  "$build/fuzz_$t" -max_total_time="$secs" -max_len="$(max_len "$t")" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/" "$corpus" >"$build/fuzz_$t.log" 2>&1 || true
}

jobs=$(nproc 2>/dev/null || echo 2)
running=0
for t in $targets; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait
    running=0
  fi
done
wait

found=0
for t in $targets; do
  log=$build/fuzz_$t.log
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
  size=$(ls "$build/corpus/$t" | wc -l)
  if grep -q -e '^==[0-9]*==ERROR' -e 'ALARM: working on the last Unit' \
    -e 'runtime error:' -e 'out-of-memory' "$log"; then
    status="FOUND (see $log)"
    found=1
  else
    status=ok
  fi
  printf '%-12s %4ss  max_len %8s  %10s inputs run  coverage %5s  corpus %5s  %s\n' \
    "$t" "$secs" "$(max_len "$t")" "${runs:-?}" "${cov:-?}" "$size" "$status"
done
exit "$found"
