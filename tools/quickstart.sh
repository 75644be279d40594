#!/bin/sh
# Sets tyto up on Debian 12 and runs it. Idempotent: steps already done are
# skipped quietly.
#
#   sh tools/quickstart.sh         install what is missing, build, install
#                                  into build/prefix, run the main job
#   sh tools/quickstart.sh check   install what is missing, build, run the
#                                  test suite (make check)
#   sh tools/quickstart.sh bench   as run, then PyTorch (Debian's
#                                  python3-torch) and bench/train_vs_torch.py
#
# TYTO_BUILD_DIR chooses the build folder (default: build/ in the tree).
set -eu

mode=${1:-run}
case $mode in
  run|check|bench) ;;
  *) echo "usage: sh tools/quickstart.sh [run|check|bench]" >&2; exit 2 ;;
esac

top=$(cd "$(dirname "$0")/.." && pwd)
build=${TYTO_BUILD_DIR:-$top/build}
prefix=$build/prefix
jobs=$(nproc 2>/dev/null || echo 2)

# Debian packages: the toolchain, the libraries configure looks for, PoCL
# so that the OpenCL plugin has a real device, valgrind for the suite, and
# Fashion-MNIST for the main job and the training tests; Open MPI for
# training over several processes (docs/distributed.md). The suite and the
# benchmark add PyTorch (for Debian's own /usr/bin/python3) to compare
# against (tests/torch/test_vs_torch), and the suite g++, which runs the
# CUDA plugin's generated kernels on the host (tests/cuda/test_cuda_emu.sh).
packages="gcc make autoconf automake libtool libltdl-dev pkg-config
  libhwloc-dev libopenblas-dev liblapacke-dev libdnnl-dev check libsubunit-dev
  libinih-dev libjansson-dev uthash-dev ocl-icd-opencl-dev opencl-c-headers
  pocl-opencl-icd libclblast-dev zlib1g-dev valgrind dataset-fashion-mnist
  libopenmpi-dev openmpi-bin"
if [ "$mode" != run ]; then
  packages="$packages python3-torch python3-numpy g++"
fi

missing=""
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "quickstart: these Debian packages are missing:$missing" >&2
    echo "quickstart: run as root, or install them with apt-get first" >&2
    exit 1
  fi
  echo "quickstart: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ]; then
  echo "quickstart: generating configure"
  (cd "$top" && autoreconf -fi >/dev/null 2>&1) || (cd "$top" && autoreconf -fi)
fi

mkdir -p "$build"
if [ ! -f "$build/Makefile" ]; then
  echo "quickstart: configuring in $build"
  (cd "$build" && "$top/configure" --prefix="$prefix" --enable-werror -q)
fi

make -C "$build" -s -j"$jobs" >/dev/null

if [ "$mode" = check ]; then
  if ! make -C "$build" -s -j"$jobs" check; then
    for log in "$build"/tests/*/*.log; do
      case $log in *valgrind.log) continue ;; esac
      grep -q "^FAIL\|^ERROR" "${log%.log}.trs" 2>/dev/null && cat "$log"
    done
    exit 1
  fi
  exit 0
fi

make -C "$build" -s install >/dev/null
echo
"$prefix/bin/tyto-info"
echo
echo "Demo: data through every selected device (examples/devices.c)"
"$build/examples/devices"
echo
echo "Demo: a graph and its gradient compiled once and run three times (examples/hello.c)"
"$build/examples/hello" | head -3
echo
echo "Demo: Newton's method with AD-built gradient and Hessian (examples/newton.c)"
"$build/examples/newton" | tail -4
echo
echo "Demo: the seed CNN's training step through the graph passes and the memory planner (tyto-graph)"
"$prefix/bin/tyto-graph" --model cnn | head -12
echo
if "$prefix/bin/tyto-info" --devices opencl:0 >/dev/null 2>&1; then
  echo "Demo: the MLP trained for one epoch on opencl:0, the OpenCL plugin (docs/opencl.md)"
  "$prefix/bin/tyto-train" --model mlp --devices opencl:0 --quiet \
    --data /usr/share/datasets/fashion-mnist
  echo
fi
# Several devices: one training run over all of them at once.
devs=$("$prefix/bin/tyto-info" 2>/dev/null | sed -n 's/^Selection (default): //p')
case $devs in
  *,*)
    echo "Demo: data-parallel training of the MLP over $devs at once (docs/data-parallel.md)"
    echo "(on one machine PoCL and the CPU plugin share the same cores: this shows the"
    echo " split and the per-device figures, not a speed-up)"
    "$prefix/bin/tyto-train" --model mlp --devices "$devs" --limit 12800 \
      --test-limit 2000 --no-progress --data /usr/share/datasets/fashion-mnist
    echo
    ;;
esac
echo "The main job: the seed CNN trained on Fashion-MNIST for one epoch (tyto-train)"
"$prefix/bin/tyto-train" --model cnn --data /usr/share/datasets/fashion-mnist

if [ "$mode" = bench ]; then
  echo
  echo "Benchmark: tyto-train against PyTorch in the same run (bench/train_vs_torch.py)"
  /usr/bin/python3 "$top/bench/train_vs_torch.py" --tyto "$prefix/bin/tyto-train"
fi
