#!/bin/sh
# The example programs quoted in the guides are the files make check runs.
set -eu
top_srcdir=${top_srcdir:-..}
sh "$top_srcdir/tools/doc-examples.sh" --check "$top_srcdir/docs/autodiff.md"
sh "$top_srcdir/tools/doc-examples.sh" --check "$top_srcdir/docs/einsum.md"
