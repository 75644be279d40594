#!/bin/sh
# f16 and bf16 checkpoints in PyTorch's byte layout, both ways: PyTorch
# (Debian's python3-torch) writes 16-bit tensors, tyto reads them and
# checks every value against PyTorch's float64 of it, writes them back,
# and PyTorch reads tyto's file and finds its own bits under its own dtype
# names. Skipped (77) where /usr/bin/python3 cannot import torch.
set -u
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "SKIP: $py cannot import torch (install python3-torch)"
  exit 77
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
src=${top_srcdir:-$(dirname "$0")/../..}/tests/torch
"$py" "$src/st16.py" write "$tmp/torch.safetensors" || exit 1
./torch/st16_tool "$tmp/torch.safetensors" "$tmp/tyto.safetensors" || exit 1
"$py" "$src/st16.py" check "$tmp/tyto.safetensors" || exit 1
echo "PASS: f16 and bf16 safetensors round trip with PyTorch"
