/* The tools' last word on stdout: a report that did not arrive is an
 * error, said as such. */
#ifndef TYTO_TOOLS_STDOUT_CHECK_H
#define TYTO_TOOLS_STDOUT_CHECK_H

/* Flushes stdout: 0 when everything written to it arrived, else -1 after
 * writing "prog: cannot write to stdout: why" to stderr. A write that
 * failed before (stdio drops what it could not write, so the flush itself
 * may succeed) left its errno, which the caller keeps by calling this
 * right after its last output. */
int stdout_flushed(const char *prog);

#endif
