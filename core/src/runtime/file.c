#include "config.h"

#include "file.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
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
