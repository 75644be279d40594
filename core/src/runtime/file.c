#include "config.h"

#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *rt_not_regular(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return NULL;
  case S_IFDIR: return "is a directory, not a regular file";
  case S_IFIFO: return "is a FIFO, not a regular file";
  case S_IFCHR: return "is a character device, not a regular file";
  case S_IFBLK: return "is a block device, not a regular file";
  case S_IFSOCK: return "is a socket, not a regular file";
  default: return "is not a regular file";
  }
}

int rt_open_regular(const char *path, const char **why) {
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
   * writer. O_NOCTTY: a terminal must not become our controlling one. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    *why = strerror(errno);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    *why = strerror(err);
    return -1;
  }
  const char *kind = rt_not_regular(st.st_mode);
  int flags = kind ? 0 : fcntl(fd, F_GETFL);
  if (kind || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int err = kind ? EINVAL : errno;
    close(fd);
    errno = err;
    *why = kind ? kind : strerror(err);
    return -1;
  }
  return fd;
}

void rt_xfsz_block(rt_xfsz_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &set, &g->old);
  g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

void rt_xfsz_restore(const rt_xfsz_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  /* Only when SIGXFSZ was not blocked already: a caller that blocks it
   * (tyto-train takes it with sigwait) keeps what is pending. */
  if (!g->was_pending && !sigismember(&g->old, SIGXFSZ) &&
      sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
      ;
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

const char *rt_write_error(int err) {
  switch (err) {
  case EFBIG:
    return "the file-size limit was reached (File too large; see ulimit -f)";
  case ENOSPC: return "the file system is full (No space left on device)";
  case EDQUOT: return "the disk quota is exhausted (Disk quota exceeded)";
  default: return strerror(err);
  }
}

/* Symbolic links followed at most (the kernel's own limit, MAXSYMLINKS). */
#define MAX_LINKS 40

/* The file that `path` names once its symbolic links are followed (a link
 * whose target does not exist names that target); NULL with errno set. */
static char *follow_links(const char *path) {
  char *p = strdup(path);
  for (int hops = 0; p; hops++) {
    struct stat st;
    if (lstat(p, &st) != 0 || !S_ISLNK(st.st_mode))
      return p; /* not there yet (a new file), or no link */
    if (hops == MAX_LINKS) {
      free(p);
      errno = ELOOP;
      return NULL;
    }
    /* st_size is the target's length (0 on some file systems, procfs):
     * a buffer too small is doubled until the target fits. */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 256;
    char *to = NULL;
    ssize_t n = -1;
    int err = ENAMETOOLONG;
    for (int tries = 0; tries < 8; tries++) {
      char *t = realloc(to, cap);
      if (!t) {
        err = ENOMEM;
        break;
      }
      to = t;
      if ((n = readlink(p, to, cap)) < 0) {
        err = errno;
        break;
      }
      if ((size_t)n < cap)
        break;
      n = -1; /* truncated: a longer buffer */
      cap *= 2;
    }
    if (n < 0) {
      free(to);
      free(p);
      errno = err;
      return NULL;
    }
    to[n] = '\0';
    const char *slash = strrchr(p, '/');
    if (to[0] == '/' || !slash) {
      free(p);
      p = to;
      continue;
    }
    /* Relative: from the link's own directory. */
    size_t dir = (size_t)(slash - p) + 1;
    char *joined = malloc(dir + (size_t)n + 1);
    if (joined) {
      memcpy(joined, p, dir);
      memcpy(joined + dir, to, (size_t)n + 1);
    }
    free(to);
    free(p);
    p = joined;
  }
  errno = ENOMEM;
  return NULL;
}

/* fsync of the directory holding `path`, so that a rename in it is
 * durable; file systems that cannot sync a directory (EINVAL) have
 * nothing to do. */
static int sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
                    : strdup(".");
  if (!dir)
    return 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0)
    return 0;
  int r = fsync(fd), err = errno;
  close(fd);
  errno = err;
  return r != 0 && err != EINVAL ? -1 : 0;
}

static void replace_free(rt_replace *r) {
  free(r->target);
  free(r->tmp);
  r->target = r->tmp = NULL;
  r->fd = -1;
  r->f = NULL;
}

FILE *rt_replace_stream(rt_replace *r) {
  if (!r->f)
    r->f = fdopen(r->fd, "w");
  return r->f;
}

/* Flushes, syncs and closes the temporary (a stream if one was made, else
 * the descriptor) after the caller's writes, which failed with errno err
 * (0: they did not): the first error's errno, or 0. */
static int close_temp(rt_replace *r, int err) {
  if (r->f && !err) {
    errno = 0;
    if (fflush(r->f) != 0 || ferror(r->f))
      err = errno ? errno : EIO;
  }
  if (!err && fsync(r->fd) != 0)
    err = errno;
  if ((r->f ? fclose(r->f) : close(r->fd)) != 0 && !err)
    err = errno;
  r->f = NULL;
  r->fd = -1;
  return err;
}

int rt_replace_open(rt_replace *r, const char *path, const char **why) {
  static atomic_uint serial;
  r->target = r->tmp = NULL;
  r->fd = -1;
  r->f = NULL;
  if (!path || !*path) {
    errno = ENOENT;
    *why = "the path is empty";
    return -2;
  }
  if (!(r->target = follow_links(path))) {
    *why = strerror(errno);
    return -1;
  }
  struct stat st;
  int exists = stat(r->target, &st) == 0;
  if (exists && rt_not_regular(st.st_mode)) {
    *why = rt_not_regular(st.st_mode);
    replace_free(r);
    errno = EINVAL;
    return -2;
  }
  size_t len = strlen(r->target) + 32;
  if (!(r->tmp = malloc(len))) {
    replace_free(r);
    errno = ENOMEM;
    *why = strerror(errno);
    return -1;
  }
  /* A name no other writer picks: the pid, a per-process serial number
   * and the clock; O_EXCL makes sure, and the mode passes the umask. */
  for (int tries = 0; r->fd < 0 && tries < 100; tries++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned tag =
        (unsigned)ts.tv_nsec ^ atomic_fetch_add(&serial, 1) * 2654435761u;
    snprintf(r->tmp, len, "%s.tmp-%ld-%x", r->target, (long)getpid(), tag);
    r->fd =
        open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
    if (r->fd < 0 && errno != EEXIST)
      break;
  }
  if (r->fd < 0) {
    int err = errno;
    replace_free(r);
    errno = err;
    *why = strerror(err);
    return -1;
  }
  if (exists && fchmod(r->fd, st.st_mode & 07777) != 0) {
    int err = errno;
    rt_replace_abort(r);
    errno = err;
    *why = strerror(err);
    return -1;
  }
  return 0;
}

int rt_replace_commit(rt_replace *r, int write_err, const char **why,
                      const char **what_failed) {
  int err = close_temp(r, write_err);
  *what_failed = "write";
  if (!err && rename(r->tmp, r->target) != 0)
    err = errno;
  if (err) {
    unlink(r->tmp);
    replace_free(r);
    errno = err;
    *why = rt_write_error(err);
    return -1;
  }
  int synced = sync_dir_of(r->target);
  err = errno;
  replace_free(r);
  if (synced != 0) {
    errno = err;
    *why = strerror(err);
    *what_failed = "sync";
    return -1;
  }
  return 0;
}

void rt_replace_abort(rt_replace *r) {
  if (r->f)
    fclose(r->f);
  else if (r->fd >= 0)
    close(r->fd);
  if (r->tmp)
    unlink(r->tmp);
  replace_free(r);
}
