#!/bin/sh
# The CUDA plugin run without a GPU: plugins/cudaemu/tyto_plugin_cuda.so is
# the plugin itself over the fake CUDA in its executing mode (cuda/
# emu_plugin.c, cuda/fake_cuda.h): each program the plugin generates is
# compiled by the host's C++ compiler with cuda/emu_shim.h for CUDA's
# built-ins and run on the host, a block's threads as fibers; cuBLAS's
# GEMMs, cuDNN's convolutions and the batched LU, QR, triangular solves and
# Cholesky are computed by the fake as their libraries define them. Then
#  - tyto-conform, test mode, against the CPU plugin: every case must pass
#    (every op family in f32, f64, f16, bf16, i32 and i64, the device
#    contract, the special values of sdk/docs/ops.md);
#  - tyto-conform, grad mode: differentiated graphs compiled by libtyto;
#  - tests/cuda/test_cuda_half: f16 and bf16 against f64 references;
#  - tyto-train's MLP for 32 steps on cuda:0 and on cpu:0 from the same
#    seed: the test losses agree to 1e-4 relative (f32 sums in another
#    order differ by far less; a wrong kernel by far more).
# This checks the plugin's logic (descriptors, geometry, launch arguments,
# the kernels' arithmetic), not NVIDIA's compiler or hardware: on a GPU,
# tests/cuda/gpu-check.sh. Skips (77) under valgrind (the host compiler's
# time) and without a C++ compiler (TYTO_TEST_CXX, else c++).
set -u
if [ -n "${TYTO_TEST_UNDER_VALGRIND:-}" ]; then
  echo "skipped under valgrind"
  exit 77
fi
cxx=${TYTO_TEST_CXX:-c++}
# shellcheck disable=SC2086 # "ccache g++" is a compiler too
if ! $cxx --version >/dev/null 2>&1; then
  echo "no C++ compiler ($cxx; set TYTO_TEST_CXX)"
  exit 77
fi
# The compiled programs live under the build tree (a /tmp mounted noexec
# could not load them), gone at the end whatever happens.
TMPDIR=$PWD/cuda/emu-tmp.$$
export TMPDIR
mkdir -p "$TMPDIR" || exit 1
trap 'rm -rf "$TMPDIR"' EXIT
trap 'exit 1' INT TERM
plug=plugins/cudaemu/.libs/tyto_plugin_cuda.so
cpu=../plugins/cpu/.libs/tyto_plugin_cpu.so
conform=../tools/tyto-conform
for f in "$plug" "$cpu" "$conform" cuda/test_cuda_half; do
  [ -e "$f" ] || { echo "$f not built"; exit 1; }
done
log=cuda/test_cuda_emu.out
failed=0

# conform MODE: the kit in MODE; every case must pass.
conform() {
  "$conform" "$plug" --reference "$cpu" --mode "$1" >"$log.$1" 2>&1
  rc=$?
  summary=$(grep '^summary:' "$log.$1" | tail -n 1)
  echo "tyto-conform $1 mode on the emulated cuda:0: $summary"
  case $rc:$summary in
  "0:"*" 0 FAIL, 0 out-of-bounds, 0 error, 0 unsupported, 0 without"*CONFORMS) ;;
  *)
    grep -E ' FAIL| error' "$log.$1" | head -n 40
    echo "FAIL: tyto-conform $1 mode exited $rc"
    failed=1
    ;;
  esac
}
conform test
conform grad

if ! cuda/test_cuda_half "$plug" >"$log.half" 2>&1; then
  tail -n 40 "$log.half"
  echo "FAIL: test_cuda_half on the emulated cuda:0"
  failed=1
else
  echo "test_cuda_half on the emulated cuda:0: $(tail -n 1 "$log.half")"
fi
# The MLP on both devices from one seed: the test losses (--json, full
# precision) agree to 1e-4 relative.
train() {
  TYTO_PLUGIN_PATH="$PWD/plugins/cudaemu/.libs:$PWD/../plugins/cpu/.libs" \
    ../tools/tyto-train --model mlp --devices "$1" --limit 2048 \
    --test-limit 500 --seed 7 --quiet --json >"$log.train-$1" 2>&1 ||
    return 1
  sed -n 's/.*"test_loss": *\([-0-9.eE+]*\).*/\1/p' "$log.train-$1"
}
if [ -x ../tools/tyto-train ]; then
  lc=$(train cuda:0)
  lp=$(train cpu:0)
  if [ -n "$lc" ] && [ -n "$lp" ] &&
    awk -v a="$lc" -v b="$lp" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(d <= 1e-4 * (b < 0 ? -b : b)) }'; then
    echo "tyto-train mlp: test loss $lc on the emulated cuda:0, $lp on cpu:0"
  else
    tail -n 20 "$log.train-cuda:0"
    echo "FAIL: tyto-train mlp: test loss '$lc' on cuda:0, '$lp' on cpu:0"
    failed=1
  fi
fi
exit $failed
