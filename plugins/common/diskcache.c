/*
 * The plugins' disk cache of compiled kernels (diskcache.h): keys, the
 * cache folder, and reading and writing entries without hanging on a FIFO,
 * killing the process on a file-size limit or leaving half a file.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "diskcache.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- keys --------------------------------------------------------------- */

tpc_cache_key tpc_cache_key_init(void) {
  tpc_cache_key k = {UINT64_C(0xcbf29ce484222325),
                     UINT64_C(0x84222325cbf29ce4)};
  return k;
}

/* One byte into both hashes. The steps are those the OpenCL plugin's
 * cache used before this file existed, so its keys (and files) stay
 * valid. */
static void mix(tpc_cache_key *k, unsigned char c) {
  k->a = (k->a ^ c) * UINT64_C(0x100000001b3);
  k->b = (k->b ^ c) * UINT64_C(0x100000001b3);
  k->b ^= k->b >> 29;
}

void tpc_cache_key_str(tpc_cache_key *k, const char *s) {
  const unsigned char *p = (const unsigned char *)(s != NULL ? s : "");
  do
    mix(k, *p);
  while (*p++ != '\0');
}

void tpc_cache_key_bytes(tpc_cache_key *k, const void *p, size_t size) {
  /* The length first, so that no two sequences of byte ranges run
   * together into the same stream. */
  uint64_t n = size;
  for (int i = 0; i < 8; i++)
    mix(k, (unsigned char)(n >> (8 * i)));
  for (size_t i = 0; i < size; i++)
    mix(k, ((const unsigned char *)p)[i]);
}

/* ---- paths -------------------------------------------------------------- */

int tpc_cache_dir(const char *option, const char *sub, char *buf, size_t size) {
  int n;
  if (option != NULL && option[0] != '\0') {
    if (strcmp(option, "off") == 0)
      return 0;
    n = snprintf(buf, size, "%s/%s", option, sub);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    /* The XDG spec: a relative $XDG_CACHE_HOME is invalid, ignore it. */
    if (xdg != NULL && xdg[0] == '/')
      n = snprintf(buf, size, "%s/tyto/%s", xdg, sub);
    else if (home != NULL && home[0] == '/')
      n = snprintf(buf, size, "%s/.cache/tyto/%s", home, sub);
    else
      return 0;
  }
  return n > 0 && (size_t)n < size;
}

int tpc_cache_path(const char *dir, tpc_cache_key key, char *buf, size_t size) {
  int n = snprintf(buf, size, "%s/%016llx%016llx.bin", dir,
                   (unsigned long long)key.a, (unsigned long long)key.b);
  return n > 0 && (size_t)n < size;
}

/* mkdir -p `dir`, each new folder with mode 0700 (the XDG spec's). 0 with
 * errno set on failure. */
static int make_dirs(const char *dir) {
  size_t len = strlen(dir);
  char *path = malloc(len + 1);
  int ok = path != NULL;
  if (!ok) {
    errno = ENOMEM;
    return 0;
  }
  memcpy(path, dir, len + 1);
  for (char *p = path + 1; ok && *p != '\0'; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    ok = mkdir(path, 0700) == 0 || errno == EEXIST;
    *p = '/';
  }
  ok = ok && (mkdir(path, 0700) == 0 || errno == EEXIST);
  free(path);
  return ok;
}

/* ---- entries ------------------------------------------------------------ */

typedef struct file_header {
  char magic[8];
  uint64_t key_a, key_b;
  uint64_t size; /* of the payload that follows */
} file_header;

static const char *not_regular(mode_t mode) {
  if (S_ISREG(mode))
    return NULL;
  if (S_ISDIR(mode))
    return "is a directory, not a regular file";
  if (S_ISFIFO(mode))
    return "is a FIFO, not a regular file";
  if (S_ISCHR(mode))
    return "is a character device, not a regular file";
  if (S_ISBLK(mode))
    return "is a block device, not a regular file";
  if (S_ISLNK(mode))
    return "is a symbolic link, not a regular file";
  return "is not a regular file";
}

/* Reads exactly `size` bytes; 0 at end of file or on an error. */
static int read_all(int fd, void *buf, size_t size) {
  unsigned char *p = buf;
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return 0;
    p += n;
    size -= (size_t)n;
  }
  return 1;
}

unsigned char *tpc_cache_read(const char *path, const char *magic,
                              tpc_cache_key key, size_t max_size, size_t *size,
                              const char **why) {
  struct stat st;
  file_header h;
  unsigned char *data = NULL;
  int fd;
  *size = 0;
  *why = NULL;
  /* A FIFO or a device is refused before it is opened; the open itself
   * neither follows a link nor waits for a FIFO's writer, and fstat
   * checks what was opened, in case the file was replaced in between. */
  if (lstat(path, &st) != 0) {
    if (errno != ENOENT)
      *why = strerror(errno);
    return NULL;
  }
  if ((*why = not_regular(st.st_mode)) != NULL)
    return NULL;
  fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      *why = errno == ELOOP ? "is a symbolic link, not a regular file"
                            : strerror(errno);
    return NULL;
  }
  if (fstat(fd, &st) != 0)
    *why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    *why = not_regular(st.st_mode);
  else if (!read_all(fd, &h, sizeof h) || memcmp(h.magic, magic, 8) != 0)
    *why = "is not a cache file of this plugin and format";
  else if (h.key_a != key.a || h.key_b != key.b)
    *why = "holds another entry";
  else if (h.size == 0 || h.size > max_size)
    *why = "has an implausible payload size";
  else if ((uint64_t)st.st_size != sizeof h + h.size)
    *why = "is cut short or has bytes past its payload";
  else if ((data = malloc((size_t)h.size)) == NULL)
    *why = "cannot be read: out of host memory";
  else if (!read_all(fd, data, (size_t)h.size)) {
    *why = "is cut short";
    free(data);
    data = NULL;
  } else {
    *size = (size_t)h.size;
  }
  close(fd);
  return data;
}

/* Writes all of buf; 0 with errno set on failure. */
static int write_all(int fd, const void *buf, size_t size) {
  const unsigned char *p = buf;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return 0;
    }
    p += n;
    size -= (size_t)n;
  }
  return 1;
}

/* What a failed write's errno means, as libtyto's writers say it. */
static const char *write_error(int err) {
  switch (err) {
  case EFBIG:
    return "the file-size limit was reached (File too large; see ulimit -f)";
  case ENOSPC: return "the file system is full (No space left on device)";
#ifdef EDQUOT
  case EDQUOT: return "the disk quota is exhausted (Disk quota exceeded)";
#endif
  default: return strerror(err);
  }
}

/* Writing past the file-size limit raises SIGXFSZ, whose default action
 * ends the process; libtyto's writers (core/src/runtime/file.c) block it on
 * the writing thread so that the write fails with EFBIG instead, and take a
 * SIGXFSZ they raised off the pending set before restoring the mask. The
 * same here, since a plugin cannot call into libtyto. A caller that blocks
 * SIGXFSZ itself (tyto-train takes it with sigwait) keeps what is pending.
 * Writes to a regular file never raise SIGPIPE. */
typedef struct xfsz_guard {
  sigset_t old;
  int was_pending;
} xfsz_guard;

static void xfsz_block(xfsz_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &set, &g->old);
  g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ);
}

static void xfsz_restore(const xfsz_guard *g) {
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGXFSZ);
  if (!g->was_pending && !sigismember(&g->old, SIGXFSZ) &&
      sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
      ;
  }
  pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

int tpc_cache_write(const char *dir, const char *path, const char *magic,
                    tpc_cache_key key, const void *data, size_t size,
                    const char **why) {
  size_t len = strlen(path);
  char *tmp;
  file_header h;
  xfsz_guard guard;
  int fd, ok, err = 0;

  *why = NULL;
  if (size == 0) {
    *why = "nothing to store";
    return 0;
  }
  if (!make_dirs(dir)) {
    *why = strerror(errno);
    return 0;
  }
  /* The temporary sits beside the entry (rename works within one file
   * system) and ends in six random characters, not in .bin, so no reader
   * takes it for an entry. */
  if ((tmp = malloc(len + 8)) == NULL) {
    *why = "out of host memory";
    return 0;
  }
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".XXXXXX", 8);
  if ((fd = mkstemp(tmp)) < 0) {
    *why = strerror(errno);
    free(tmp);
    return 0;
  }
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  memset(&h, 0, sizeof h);
  memcpy(h.magic, magic, 8);
  h.key_a = key.a;
  h.key_b = key.b;
  h.size = size;
  xfsz_block(&guard);
  /* fsync before the rename: after a crash the entry is the old file or
   * the whole new one, never a name for blocks that never reached disk. */
  ok = write_all(fd, &h, sizeof h) && write_all(fd, data, size) &&
       fsync(fd) == 0;
  if (!ok)
    err = errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  xfsz_restore(&guard);
  if (ok && rename(tmp, path) != 0) {
    ok = 0;
    err = errno;
  }
  if (!ok) {
    unlink(tmp);
    *why = write_error(err);
  }
  free(tmp);
  return ok;
}
