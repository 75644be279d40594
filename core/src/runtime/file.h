/* Opening input files without hanging on what is not a regular file. */
#ifndef TYTO_RUNTIME_FILE_H
#define TYTO_RUNTIME_FILE_H

/* Opens `path` read-only. Returns the descriptor (blocking, close-on-exec)
 * of a regular file, or -1 with *why set to a static phrase for a message
 * ("No such file or directory", "is a FIFO, not a regular file", ...) and
 * errno set. A FIFO, a device or a directory is refused before anything is
 * read from it, so a FIFO with no writer cannot block the caller. */
int rt_open_regular(const char *path, const char **why);

/* "is a FIFO, not a regular file" and friends: the phrase for a file of
 * this st_mode that is not regular, or NULL for a regular file. */
const char *rt_not_regular(unsigned mode);

/* The library's write paths (checkpoints, graph exports) block SIGXFSZ on
 * the calling thread while they write, so that going past the file-size
 * limit (ulimit -f) fails the write with EFBIG instead of killing the
 * process, SIGXFSZ's default action; a SIGXFSZ those writes raised is
 * taken off the pending set before the caller's mask comes back. */
#include <signal.h>

typedef struct rt_xfsz_guard {
  sigset_t old;
  int was_pending;
} rt_xfsz_guard;

void rt_xfsz_block(rt_xfsz_guard *g);
void rt_xfsz_restore(const rt_xfsz_guard *g);

/* What a failed write's errno means, for a message: EFBIG, ENOSPC and
 * EDQUOT say which limit was hit; others are strerror(err). */
const char *rt_write_error(int err);

#endif
