#!/bin/sh
# Packs what tests/cuda/gpu-check.sh runs on a GPU machine that has no
# Debian packages: the installed tyto (build/prefix), the plugin test, the
# Debian shared libraries they load (ldd; the CUDA libraries excepted: the
# GPU machine brings its own) and Fashion-MNIST, into .gpu/tyto-gpu.tar.xz.
#
#   sh tests/cuda/gpu-pack.sh [BUILD_DIR]
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -a "$build/prefix" "$stage/prefix"
rm -f "$stage/prefix/lib/tyto/plugins/tyto_plugin_opencl.so"
mkdir -p "$stage/lib" "$stage/tests" "$stage/data"
cp "$build/tests/cuda/test_cuda_plugin" "$build/tests/cuda/test_cuda_faults" \
  "$build/tests/cuda/test_cuda_half" "$stage/tests/"
for f in "$stage"/prefix/bin/* "$stage"/prefix/lib/tyto/plugins/*.so \
         "$stage"/prefix/lib/libtyto.so "$stage"/tests/*; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -v -e /usr/local/cuda -e 'libc\.so' -e 'libm\.so' \
  -e libpthread -e 'libdl\.so' -e 'librt\.so' -e ld-linux -e libgcc_s \
  -e libstdc++ -e 'libtyto\.so' | while read -r lib; do
  cp -L "$lib" "$stage/lib/"
done
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/data/"
mkdir -p "$top/.gpu"
tar -C "$stage" -cf - . | xz -T0 -6 >"$top/.gpu/tyto-gpu.tar.xz"
ls -la "$top/.gpu/tyto-gpu.tar.xz"
