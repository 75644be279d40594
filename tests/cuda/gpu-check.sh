#!/bin/sh
# The CUDA plugin's check on a real NVIDIA GPU, from a pack built on a Debian
# machine (tests/cuda/gpu-pack.sh): it builds nothing here. The GPU machine
# needs the NVIDIA driver and CUDA 13's libraries (the toolkit, or NVIDIA's
# pip wheels as PyTorch installs them), and PyTorch for the last step.
#
#   sh tests/cuda/gpu-check.sh [PACK.tar.xz] [OUTDIR]
#
# Runs, each under a time limit, logging to OUTDIR (default: $OUT or
# /tmp/tyto-gpu-out): nvidia-smi, tyto-info, the plugin's own tests (the ABI
# test, graphs, out-of-memory and a kernel fault through libtyto, and f16
# and bf16 against f64 references), tyto-conform (test and grad modes, and
# f16 and bf16 where it has them) on cuda:0, tyto-train's MLP and CNN for
# one epoch on cuda:0 with graphs and without (TYTO_GRAPHS=off), both
# data-parallel over cuda:0 and the CPU (docs/data-parallel.md), and
# bench/train_vs_torch.py against this machine's PyTorch on the same GPU.
# Ends with "N passed, N failed"; exits non-zero when a step failed. Takes
# about 5 minutes on an H100, under 8 with the 16-bit steps.
# GPU_CHECK_STEPS="name name ..." runs only the steps named (for a short
# GPU budget).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
pack=${1:-$top/.gpu/tyto-gpu.tar.xz}
out=${2:-${OUT:-/tmp/tyto-gpu-out}}
work=/tmp/tyto-gpu
mkdir -p "$out" "$work"
tar -xJf "$pack" -C "$work" || { echo "cannot unpack $pack"; exit 2; }

# CUDA libraries: the toolkit's, else those of NVIDIA's pip packages.
cudalibs=""
for name in libcudart.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0 \
            libcublas.so.13 libcublasLt.so.13 libcusolver.so.12 \
            libcusparse.so.12 libnvJitLink.so.13 libcudnn.so.9; do
  p=$(find /usr/local/cuda/lib64 /usr/local/lib /opt /usr/lib -name "$name" \
        2>/dev/null | head -n 1)
  [ -n "$p" ] && cudalibs="$cudalibs:$(dirname "$p")"
done
export LD_LIBRARY_PATH="$work/lib:$work/prefix/lib$cudalibs:${LD_LIBRARY_PATH:-}"
export TYTO_PLUGIN_PATH="$work/prefix/lib/tyto/plugins"
export XDG_CACHE_HOME="$work/cache"
bin=$work/prefix/bin
plug=$TYTO_PLUGIN_PATH
data=$work/data

passed=0 failed=0
step() { # step NAME LIMIT_S COMMAND...
  name=$1 limit=$2
  shift 2
  case " ${GPU_CHECK_STEPS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  echo "== $name"
  start=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  end=$(date +%s)
  tail -n 25 "$out/$name.log"
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    echo "-- $name: ok ($((end - start)) s)"
  else
    failed=$((failed + 1))
    echo "-- $name: FAILED (exit $rc, $((end - start)) s)"
  fi
}

nvidia-smi -L
step tyto-info 60 "$bin/tyto-info"
step plugin-test 120 "$work/tests/test_cuda_plugin" "$plug/tyto_plugin_cuda.so"
step faults-test 120 "$work/tests/test_cuda_faults" "$plug"
# Every dtype the plugin lists: f32, f64, f16, bf16, i32 and i64.
step conform-test 240 "$bin/tyto-conform" "$plug/tyto_plugin_cuda.so" \
  --reference "$plug/tyto_plugin_cpu.so"
step conform-grad 240 "$bin/tyto-conform" "$plug/tyto_plugin_cuda.so" \
  --mode grad --reference "$plug/tyto_plugin_cpu.so"
# f16 and bf16: every op family against f64 references, CAST bit for bit.
step half-test 180 "$work/tests/test_cuda_half" "$plug/tyto_plugin_cuda.so"
# The kit in the 16-bit dtypes, where this tyto-conform has them.
for dt in f16 bf16; do
  if "$bin/tyto-conform" --help 2>&1 | grep -qw -- "$dt"; then
    step conform-$dt 240 "$bin/tyto-conform" "$plug/tyto_plugin_cuda.so" \
      --dtype $dt --reference "$plug/tyto_plugin_cpu.so"
  else
    echo "== conform-$dt: skipped (this tyto-conform has no --dtype $dt)"
  fi
done
step train-mlp 120 env TYTO_LOG_LEVEL=info "$bin/tyto-train" --model mlp \
  --devices cuda:0 --data "$data"
step train-cnn 120 env TYTO_LOG_LEVEL=info "$bin/tyto-train" --model cnn \
  --devices cuda:0 --data "$data"
step train-mlp-nographs 120 env TYTO_GRAPHS=off "$bin/tyto-train" \
  --model mlp --devices cuda:0 --data "$data"
step train-cnn-nographs 120 env TYTO_GRAPHS=off "$bin/tyto-train" \
  --model cnn --devices cuda:0 --data "$data"
# Data-parallel over the GPU and the host's CPU: the gradients streamed
# to the host as the backward pass (replayed as a graph) computes them.
step train-dp-mlp 120 "$bin/tyto-train" --model mlp --devices cuda:0,cpu:0 \
  --data "$data" --json
step train-dp-cnn 180 "$bin/tyto-train" --model cnn --devices cuda:0,cpu:0 \
  --data "$data" --limit 12800 --test-limit 2000 --json
# Where a training step's time goes, kernel by kernel (TYTO_PROFILE
# synchronises after every launch, so graphs are off here).
step profile-cnn 120 env TYTO_PROFILE=1 "$bin/tyto-train" --model cnn \
  --devices cuda:0 --data "$data" --limit 12800 --test-limit 1000 --quiet
step vs-torch 300 env PYTHONUNBUFFERED=1 python3 "$top/bench/train_vs_torch.py" \
  --torch-settings eager,benchmark,fused \
  --device cuda --tyto "$bin/tyto-train" --data "$data"
# Issue 19's GPU goal: the seed CNN in bf16 and f16 AMP against PyTorch's
# autocast on the same GPU (tyto-train --precision).
step vs-torch-amp 240 env PYTHONUNBUFFERED=1 python3 \
  "$top/bench/train_vs_torch.py" --torch-settings eager --models cnn \
  --precision f32,bf16,f16 --device cuda --tyto "$bin/tyto-train" \
  --data "$data"
echo "gpu-check: $passed passed, $failed failed"
[ $failed -eq 0 ]
