#!/bin/sh
# The installed docs link only to what is installed: installs the docs of
# this build tree (the top directory's guides and the SDK's) into a scratch
# DESTDIR and checks that every relative link of every installed .md file
# resolves there, and that the SDK docs users need are there at all. The
# same links must resolve in the source tree, where the docs are read
# before installation.
set -u
srcdir=${top_srcdir:-../..}
top=..
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tyto-doc-links.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0

# Only this tree's own data (install-data-am does not recurse), then the
# SDK's headers, pkg-config file and docs.
for d in "$top" "$top/sdk"; do
  t=install-data
  [ "$d" = "$top" ] && t=install-data-am
  if ! env -u MAKEFLAGS -u MFLAGS make -s -C "$d" "$t" DESTDIR="$tmp/root" \
    >"$tmp/install.log" 2>&1; then
    echo "FAIL: make -C $d $t DESTDIR=...:"
    cat "$tmp/install.log"
    exit 1
  fi
done

# check_links FILE...: every relative link target [text](target) of each
# file exists, relative to that file.
check_links() {
  for f in "$@"; do
    dir=$(dirname "$f")
    grep -o '\]([^)]*)' "$f" | sed 's/^](//; s/)$//; s/#.*//' |
      while read -r target; do
        case $target in
        '' | http://* | https://* | mailto:* | /*) continue ;;
        esac
        [ -e "$dir/$target" ] || echo "$f links to $target, which is not there"
      done
  done
}

installed=$(find "$tmp/root" -name '*.md' | sort)
if [ -z "$installed" ]; then
  echo "FAIL: no .md file was installed"
  exit 1
fi
# The vendor docs and the guide they point to.
for doc in sdk/docs/plugin-abi.md sdk/docs/conformance.md sdk/docs/ops.md \
  sdk/docs/random.md docs/configuration.md; do
  if ! printf '%s\n' "$installed" | grep -q "/$doc\$"; then
    echo "FAIL: $doc is not installed (under \$(docdir)/$doc)"
    failed=1
  fi
done
# shellcheck disable=SC2086
broken=$(check_links $installed)
if [ -n "$broken" ]; then
  echo "FAIL: links of the installed docs that do not resolve:"
  printf '%s\n' "$broken" | sed "s|$tmp/root||"
  failed=1
fi
broken=$(check_links "$srcdir"/sdk/docs/*.md)
if [ -n "$broken" ]; then
  echo "FAIL: links of sdk/docs that do not resolve in the source tree:"
  printf '%s\n' "$broken"
  failed=1
fi
exit $failed
