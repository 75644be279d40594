#!/bin/sh
# One test program under valgrind, for `make check-valgrind`, which runs
# several of these at once. The caller exports LIBTOOL, VALGRIND and
# VALGRIND_FLAGS. The log goes to PROGRAM.valgrind.log; a failure (any
# status but 0 and 77, the skip) adds the program's name to
# valgrind-failed.lst, which the caller reports once every run is over, so
# that the failures' logs are not interleaved with the others' progress.
t=$1
echo "valgrind $t"
# shellcheck disable=SC2086 # the flags and the libtool command are lists
CK_FORK=no TYTO_TEST_UNDER_VALGRIND=1 $LIBTOOL --mode=execute \
  $VALGRIND $VALGRIND_FLAGS "./$t" >"$t.valgrind.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
  echo "$t" >>valgrind-failed.lst
fi
exit 0
