/*
 * The IDX reader: a file read whole (through zlib, which passes plain files
 * through unchanged), its header checked against its size before any
 * element is used.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include "../graph/dtype.h"
#include "data.h"
#include "../runtime/error.h"
#include "../runtime/file.h"
#include "../runtime/strlist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

size_t idx_type_size(int code) {
  switch (code) {
  case TYTO_IDX_U8:
  case TYTO_IDX_I8: return 1;
  case TYTO_IDX_I16: return 2;
  case TYTO_IDX_I32:
  case TYTO_IDX_F32: return 4;
  case TYTO_IDX_F64: return 8;
  default: return 0;
  }
}

const char *tyto_idx_type_name(tyto_idx_type type) {
  switch (type) {
  case TYTO_IDX_U8: return "u8";
  case TYTO_IDX_I8: return "i8";
  case TYTO_IDX_I16: return "i16";
  case TYTO_IDX_I32: return "i32";
  case TYTO_IDX_F32: return "f32";
  case TYTO_IDX_F64: return "f64";
  }
  return "?";
}

static uint64_t be(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

double idx_value(const tyto_idx *x, int64_t i) {
  const unsigned char *p = x->data + (size_t)i * x->esize;
  switch (x->type) {
  case TYTO_IDX_U8: return p[0];
  case TYTO_IDX_I8: return (int8_t)p[0];
  case TYTO_IDX_I16: return (int16_t)(uint16_t)be(p, 2);
  case TYTO_IDX_I32: return (int32_t)(uint32_t)be(p, 4);
  case TYTO_IDX_F32: {
    uint32_t u = (uint32_t)be(p, 4);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }
  case TYTO_IDX_F64: {
    uint64_t u = be(p, 8);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
  }
  }
  return 0;
}

void idx_convert(const tyto_idx *x, int64_t start, int64_t n, tyto_dtype dtype,
                 double scale, void *dst) {
  /* Bytes to f32, the images of every minibatch: a loop the compiler
   * vectorises (the same value as the general path: the byte is exact in
   * double, and one product rounded to float). */
  if (x->type == TYTO_IDX_U8 && dtype == TYTO_F32) {
    const unsigned char *p = x->data + start;
    float *o = dst;
    for (int64_t i = 0; i < n; i++)
      o[i] = (float)((double)p[i] * scale);
    return;
  }
  const dtype_info *di = dtype_info_of(dtype);
  for (int64_t i = 0; i < n; i++)
    di->store(dst, (size_t)i, idx_value(x, start + i) * scale);
}

/* zlib's message without the name it starts with: "path: " for gzopen,
 * "<fd:N>: " for gzdopen (the file is opened by rt_open_regular). */
static const char *gz_reason(gzFile gz, const char *path, int *zerr) {
  const char *msg = gzerror(gz, zerr);
  size_t n = strlen(path);
  if (strncmp(msg, path, n) == 0 && strncmp(msg + n, ": ", 2) == 0)
    return msg + n + 2;
  const char *colon = strncmp(msg, "<fd:", 4) == 0 ? strstr(msg, ">: ") : NULL;
  return colon ? colon + 3 : msg;
}

/* Reads up to n bytes; returns the count, or -1 with the message set. */
static int64_t gz_read_all(gzFile gz, const char *path, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
    int r = gzread(gz, (unsigned char *)buf + got, (unsigned)want);
    if (r < 0) {
      int zerr;
      const char *msg = gz_reason(gz, path, &zerr);
      rt_fail(TYTO_ERR_IO, "idx: %s: read failed: %s", path,
              zerr == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (r == 0) {
      /* A short read hides a gzip stream that ends early: gzerror tells. */
      int zerr;
      const char *msg = gz_reason(gz, path, &zerr);
      if (zerr == Z_BUF_ERROR) {
        rt_fail(TYTO_ERR_IO,
                "idx: %s: read failed: %s (the compressed file is cut "
                "short; download it again)",
                path, msg);
        return -1;
      }
      break;
    }
    got += (size_t)r;
  }
  return (int64_t)got;
}

static tyto_status describe_magic(const char *path, const unsigned char *m) {
  return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                 "idx: %s: bad magic 0x%02x%02x%02x%02x (expected "
                 "0x0000TTRR: two zero bytes, a type code TT of 08 u8, 09 "
                 "i8, 0B i16, 0C i32, 0D f32 or 0E f64, a rank RR of 01 to "
                 "08)",
                 path, m[0], m[1], m[2], m[3]);
}

/* Reads the data after the header: exactly `expected` bytes, then counts
 * what follows. Grows the buffer as bytes arrive, so a header that claims
 * more than the file holds costs no more memory than the file. */
static tyto_status read_data(gzFile gz, const char *path, size_t expected,
                             const char *what, unsigned char **out) {
  size_t cap = expected < (1u << 20) ? expected : (1u << 20);
  unsigned char *buf = malloc(cap ? cap : 1);
  if (!buf)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "idx: %s: out of memory", path);
  size_t got = 0;
  for (;;) {
    if (got == cap && cap < expected) {
      size_t ncap = cap > expected / 2 ? expected : cap * 2;
      unsigned char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                       "idx: %s: out of memory for %zu data bytes", path,
                       expected);
      }
      buf = nb;
      cap = ncap;
    }
    if (got == expected)
      break;
    int64_t r = gz_read_all(gz, path, buf + got, cap - got);
    if (r < 0) {
      free(buf);
      return TYTO_ERR_IO;
    }
    got += (size_t)r;
    if (got < cap)
      break;
  }
  if (got < expected) {
    free(buf);
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx: %s: truncated: the header's dims (%s) need %zu data "
                   "bytes, found %zu",
                   path, what, expected, got);
  }
  size_t extra = 0;
  for (;;) {
    unsigned char scratch[4096];
    int64_t r = gz_read_all(gz, path, scratch, sizeof scratch);
    if (r < 0) {
      free(buf);
      return TYTO_ERR_IO;
    }
    extra += (size_t)r;
    if ((size_t)r < sizeof scratch)
      break;
  }
  if (extra) {
    free(buf);
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx: %s: %zu trailing bytes: the header's dims (%s) need "
                   "%zu data bytes, found %zu",
                   path, extra, what, expected, expected + extra);
  }
  *out = buf;
  return TYTO_OK;
}

/* Checks the header in gz and reads the data into x. */
static tyto_status parse(gzFile gz, const char *path, tyto_idx *x) {
  unsigned char head[4 + 4 * TYTO_IDX_MAX_RANK];
  int64_t got = gz_read_all(gz, path, head, 4);
  if (got < 0)
    return TYTO_ERR_IO;
  if (got < 4)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx: %s: file is %lld bytes, shorter than the 4-byte "
                   "magic of an IDX file",
                   path, (long long)got);
  x->esize = idx_type_size(head[2]);
  if (head[0] || head[1] || !x->esize || head[3] < 1 ||
      head[3] > TYTO_IDX_MAX_RANK)
    return describe_magic(path, head);
  x->type = (tyto_idx_type)head[2];
  x->rank = head[3];
  size_t hbytes = 4 + 4 * (size_t)x->rank;
  got = gz_read_all(gz, path, head + 4, hbytes - 4);
  if (got < 0)
    return TYTO_ERR_IO;
  if ((size_t)got < hbytes - 4)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx: %s: header shorter than its dims: rank %d needs %zu "
                   "header bytes, the file has %zu",
                   path, x->rank, hbytes, 4 + (size_t)got);
  char what[160];
  size_t wl = 0;
  size_t bytes = x->esize;
  int overflow = 0;
  uint64_t item = 1;
  for (int i = 0; i < x->rank; i++) {
    uint64_t d = be(head + 4 + 4 * i, 4);
    x->shape[i] = (int64_t)d;
    if (i > 0 && d && item > (uint64_t)INT64_MAX / d)
      overflow = 1; /* an item that cannot exist even when there are none */
    else if (i > 0)
      item *= d;
    if (d && bytes > SIZE_MAX / d)
      overflow = 1;
    else
      bytes *= (size_t)d;
    wl += (size_t)snprintf(what + wl, sizeof what - wl, "%s%llu", i ? "x" : "",
                           (unsigned long long)d);
  }
  snprintf(what + wl, sizeof what - wl, " %s", tyto_idx_type_name(x->type));
  if (overflow || bytes > (size_t)INT64_MAX)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx: %s: the header's dims (%s) describe more bytes than "
                   "fit in memory",
                   path, what);
  x->item = (int64_t)item;
  return read_data(gz, path, bytes, what, &x->data);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Finds the file to open: path itself, or path".gz". Sets *found (free it). */
static tyto_status locate(const char *path, char **found) {
  struct stat st;
  char *gz = NULL;
  const char *use = path;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT)
      return rt_fail(TYTO_ERR_IO, "idx: %s: %s", path, strerror(errno));
    if (ends_with(path, ".gz"))
      return rt_fail(TYTO_ERR_NOT_FOUND, "idx: %s: no such file", path);
    gz = rt_asprintf("%s.gz", path);
    if (!gz)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "idx: %s: out of memory", path);
    if (stat(gz, &st) != 0) {
      int e = errno;
      tyto_status s =
          e == ENOENT ? rt_fail(TYTO_ERR_NOT_FOUND,
                                "idx: %s: no such file (looked for %s and %s)",
                                path, path, gz)
                      : rt_fail(TYTO_ERR_IO, "idx: %s: %s", gz, strerror(e));
      free(gz);
      return s;
    }
    use = gz;
  }
  if (!S_ISREG(st.st_mode)) {
    tyto_status s =
        rt_fail(TYTO_ERR_INVALID_ARGUMENT, "idx: %s: %s, expected an IDX file",
                use, rt_not_regular(st.st_mode));
    free(gz);
    return s;
  }
  *found = gz ? gz : rt_strdup(path);
  if (!*found)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "idx: %s: out of memory", path);
  return TYTO_OK;
}

tyto_status tyto_idx_load(const char *path, tyto_idx **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "idx: out is NULL");
  *out = NULL;
  if (!path || !path[0])
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "idx: no path given");
  char *file;
  tyto_status s = locate(path, &file);
  if (s != TYTO_OK)
    return s;
  /* Checked again on the open descriptor: the file may have been replaced
   * by a FIFO since locate() looked. */
  const char *why;
  int fd = rt_open_regular(file, &why);
  if (fd < 0) {
    s = rt_fail(TYTO_ERR_IO, "idx: %s: cannot open: %s", file, why);
    free(file);
    return s;
  }
  gzFile gz = gzdopen(fd, "rb");
  if (!gz) {
    close(fd);
    s = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "idx: %s: out of memory", file);
    free(file);
    return s;
  }
  tyto_idx *x = calloc(1, sizeof *x);
  if (!x)
    s = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "idx: %s: out of memory", file);
  else
    s = parse(gz, file, x);
  gzclose(gz);
  free(file);
  if (s != TYTO_OK) {
    tyto_idx_free(x);
    return s;
  }
  *out = x;
  return TYTO_OK;
}

void tyto_idx_free(tyto_idx *x) {
  if (!x)
    return;
  free(x->data);
  free(x);
}

int tyto_idx_rank(const tyto_idx *x) {
  return x->rank;
}

const int64_t *tyto_idx_shape(const tyto_idx *x) {
  return x->shape;
}

int64_t tyto_idx_count(const tyto_idx *x) {
  return x->shape[0];
}

tyto_idx_type tyto_idx_elem_type(const tyto_idx *x) {
  return x->type;
}

tyto_status tyto_idx_read(const tyto_idx *x, int64_t first, int64_t n,
                          tyto_dtype dtype, double scale, void *dst,
                          size_t bytes) {
  if (!x)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "idx read: no file given");
  size_t dsize = tyto_dtype_size(dtype);
  if (!dsize)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx read: unknown dtype %d (expected f32, f64, f16 or "
                   "bf16)",
                   (int)dtype);
  if (first < 0 || n < 0 || first > x->shape[0] || n > x->shape[0] - first)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx read: items [%lld, %lld + %lld) outside the file's "
                   "%lld items",
                   (long long)first, (long long)first, (long long)n,
                   (long long)x->shape[0]);
  /* n * item * esize fits: the file holds that many bytes. */
  size_t want = (size_t)n * (size_t)x->item * dsize;
  if (bytes != want || (want && !dst))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "idx read: %lld items of %lld %s values need %zu bytes, "
                   "got %zu%s",
                   (long long)n, (long long)x->item, tyto_dtype_name(dtype),
                   want, bytes, want && !dst ? " and a NULL buffer" : "");
  idx_convert(x, first * x->item, n * x->item, dtype, scale, dst);
  return TYTO_OK;
}
