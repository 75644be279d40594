/* Helpers for the data suites: IDX files written byte by byte (plain or
 * gzip-compressed) into a temporary directory that teardown removes. */
#ifndef TYTO_TESTS_DATA_TEST_H
#define TYTO_TESTS_DATA_TEST_H

#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <dirent.h>
#include <stdint.h>
#include <unistd.h>
#include <zlib.h>

static char test_dir[64];

static inline void data_setup(void) {
  snprintf(test_dir, sizeof test_dir, "/tmp/tyto-data-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(test_dir));
}

static inline void data_teardown(void) {
  DIR *d = opendir(test_dir);
  if (!d)
    return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", test_dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(test_dir);
}

/* The path of `name` in the test directory (static storage, 4 in turn). */
static inline const char *test_path(const char *name) {
  static char paths[4][512];
  static int turn;
  char *p = paths[turn++ % 4];
  snprintf(p, 512, "%s/%s", test_dir, name);
  return p;
}

/* Writes len bytes to `name` (through zlib when gz); returns its path. */
static inline const char *test_write_bytes(const char *name, const void *buf,
                                           size_t len, int gz) {
  const char *p = test_path(name);
  if (gz) {
    gzFile f = gzopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    if (len)
      ck_assert_int_eq(gzwrite(f, buf, (unsigned)len), (int)len);
    ck_assert_int_eq(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
  }
  return p;
}

/* Builds an IDX file in buf: the magic (0, 0, type, rank), big-endian dims,
 * then `data_len` bytes of data (already big-endian). Returns its size. */
static inline size_t test_idx_bytes(unsigned char *buf, int type, int rank,
                                    const uint32_t *dims, const void *data,
                                    size_t data_len) {
  size_t n = 0;
  buf[n++] = 0;
  buf[n++] = 0;
  buf[n++] = (unsigned char)type;
  buf[n++] = (unsigned char)rank;
  for (int i = 0; i < rank; i++)
    for (int s = 24; s >= 0; s -= 8)
      buf[n++] = (unsigned char)(dims[i] >> s);
  if (data_len)
    memcpy(buf + n, data, data_len);
  return n + data_len;
}

/* Writes an IDX file of u8 values; returns its path. */
static inline const char *test_write_u8(const char *name, int rank,
                                        const uint32_t *dims,
                                        const unsigned char *data,
                                        size_t data_len, int gz) {
  static unsigned char buf[1 << 16];
  ck_assert_uint_le(4 + 4 * (size_t)rank + data_len, sizeof buf);
  size_t n = test_idx_bytes(buf, 0x08, rank, dims, data, data_len);
  return test_write_bytes(name, buf, n, gz);
}

/* Loads path, expecting failure with `status` and `needle` in the message. */
#define check_idx_fails(path, status, needle)                                  \
  do {                                                                         \
    tyto_idx *x_ = (tyto_idx *)0x1;                                            \
    ck_assert_int_eq(tyto_idx_load((path), &x_), (status));                    \
    ck_assert_ptr_null(x_);                                                    \
    ck_assert_msg_contains(tyto_errmsg(), (needle));                           \
  } while (0)

#endif
