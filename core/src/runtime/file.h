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
#include <stdio.h>

typedef struct rt_xfsz_guard {
  sigset_t old;
  int was_pending;
} rt_xfsz_guard;

void rt_xfsz_block(rt_xfsz_guard *g);
void rt_xfsz_restore(const rt_xfsz_guard *g);

/* What a failed write's errno means, for a message: EFBIG, ENOSPC and
 * EDQUOT say which limit was hit; others are strerror(err). */
const char *rt_write_error(int err);

/* Replacing a file whole, so that a reader, a crash or a full disk never
 * finds it half written: rt_replace_open() creates a temporary beside the
 * file `path` names and rt_replace_commit() renames it over that file once
 * it is written and synced.
 *
 * A symbolic link is followed: its target is replaced and the link stays.
 * A path that names something other than a regular file (a FIFO, a
 * device, a directory, a socket) is refused before anything is created,
 * so writing to /dev/stdout or to a FIFO fails instead of replacing the
 * node with a file. The new file keeps the mode of the one it replaces;
 * a file that did not exist gets 0666 less the umask, as fopen's would.
 *
 * Both return 0, or -1 with errno set and *why a phrase for a message
 * ("is a FIFO, not a regular file", "No space left on device" ...);
 * rt_replace_open() returns -2 when the path itself is refused (empty,
 * or naming what is not a regular file). When
 * rt_replace_open() fails nothing was created; when rt_replace_commit()
 * does, *what_failed says which step: "write" (the temporary is removed
 * and the file is unchanged) or "sync" (the file was replaced but its
 * directory could not be synced). */
typedef struct rt_replace {
  char *target; /* the file replaced: path, or where its links lead */
  char *tmp;    /* the temporary beside it */
  int fd;       /* the temporary, open for writing */
  FILE *f;      /* ... as a stream, once rt_replace_stream() made one */
} rt_replace;

int rt_replace_open(rt_replace *r, const char *path, const char **why);
/* Syncs and closes r->fd and renames the temporary over the target;
 * write_err: an errno of the caller's writes (0: they succeeded), which
 * fails the replacement with the temporary removed. Frees r. */
int rt_replace_commit(rt_replace *r, int write_err, const char **why,
                      const char **what_failed);
/* The temporary as a stdio stream, for writers that print; NULL (errno
 * set) when one cannot be made. rt_replace_commit() then flushes and
 * closes it, and a write that failed on it fails the replacement. */
FILE *rt_replace_stream(rt_replace *r);
/* Closes and removes the temporary; frees r. */
void rt_replace_abort(rt_replace *r);

#endif
