/* Checkpoints in Hugging Face's safetensors format (see <tyto/checkpoint.h>):
 * the in-memory set of tensors, the atomic writer and the strict reader.
 * checkpoint.c checks them against models and programs. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <tyto/checkpoint.h>

#include "../runtime/error.h"
#include "../runtime/file.h"
#include "../graph/dtype.h"
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers over 100 MB; so do we. */
#define MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* The checkpoint's dtypes, indexed by tyto_checkpoint_dtype. Those that
 * are graph dtypes take their names and sizes from the dtype table; U64
 * (random state) is the checkpoint's own. */
typedef struct ck_dtype_row {
  int graph;              /* its tyto_dtype, or -1 */
  const char *file, *msg; /* "U64", "u64": for U64 only */
  size_t size;            /* for U64 only */
} ck_dtype_row;

static const ck_dtype_row ck_dtypes[] = {
    [TYTO_CHECKPOINT_F32] = {TYTO_F32, NULL, NULL, 0},
    [TYTO_CHECKPOINT_F64] = {TYTO_F64, NULL, NULL, 0},
    [TYTO_CHECKPOINT_I64] = {TYTO_I64, NULL, NULL, 0},
    [TYTO_CHECKPOINT_U64] = {-1, "U64", "u64", 8},
    [TYTO_CHECKPOINT_F16] = {TYTO_F16, NULL, NULL, 0},
    [TYTO_CHECKPOINT_BF16] = {TYTO_BF16, NULL, NULL, 0},
    [TYTO_CHECKPOINT_I32] = {TYTO_I32, NULL, NULL, 0},
};

enum { N_CK_DTYPES = (int)(sizeof ck_dtypes / sizeof *ck_dtypes) };

_Static_assert(TYTO_CHECKPOINT_F32 == (int)TYTO_F32 &&
                   TYTO_CHECKPOINT_F64 == (int)TYTO_F64,
               "f32 and f64 keep the numbers they always had in checkpoints");

int ck_dtype_ok(tyto_checkpoint_dtype d) {
  return (unsigned)d < N_CK_DTYPES;
}

size_t ck_dtype_size(tyto_checkpoint_dtype d) {
  const ck_dtype_row *r = &ck_dtypes[d];
  return r->graph >= 0 ? dtype_info_of((tyto_dtype)r->graph)->size : r->size;
}

/* "BF16": the name in safetensors files. */
static const char *file_dtype(tyto_checkpoint_dtype d) {
  const ck_dtype_row *r = &ck_dtypes[d];
  return r->graph >= 0 ? dtype_info_of((tyto_dtype)r->graph)->st_name : r->file;
}

/* "bf16": the name in messages. */
static const char *msg_dtype(tyto_checkpoint_dtype d) {
  const ck_dtype_row *r = &ck_dtypes[d];
  return r->graph >= 0 ? tyto_dtype_name((tyto_dtype)r->graph) : r->msg;
}

int tyto_checkpoint_dtype_of(tyto_dtype dtype) {
  for (int d = 0; d < N_CK_DTYPES; d++)
    if (dtype_info_of(dtype) && ck_dtypes[d].graph == (int)dtype)
      return d;
  return -1;
}

static int host_is_big_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 0;
}

static void swap_bytes(void *p, size_t bytes, size_t elsize) {
  unsigned char *b = p;
  for (size_t i = 0; i + elsize <= bytes; i += elsize)
    for (size_t j = 0; j < elsize / 2; j++) {
      unsigned char t = b[i + j];
      b[i + j] = b[i + elsize - 1 - j];
      b[i + elsize - 1 - j] = t;
    }
}

void ck_printf(strbuf *b, const char *fmt, ...) {
  if (b->oom)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->len + (size_t)n + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Appends "f32[784,64]". */
void ck_type(strbuf *b, tyto_checkpoint_dtype d, int rank,
             const int64_t *shape) {
  ck_printf(b, "%s[", ck_dtype_ok(d) ? msg_dtype(d) : "?");
  for (int i = 0; i < rank; i++)
    ck_printf(b, "%s%" PRId64, i ? "," : "", shape[i]);
  ck_printf(b, "]");
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

static int is_utf8(const char *s) {
  json_t *j = json_string(s);
  json_decref(j);
  return j != NULL;
}

const char *ck_source(const tyto_checkpoint *ck) {
  return ck->source ? ck->source : "(in memory)";
}

entry *ck_find(const tyto_checkpoint *ck, const char *name) {
  size_t i;
  return nameidx_get(&ck->by_name, name, &i) ? &ck->e[i] : NULL;
}

/* numel * elsize in *bytes; 0 on overflow. */
static int shape_bytes(int rank, const int64_t *shape, size_t elsize,
                       size_t *bytes) {
  uint64_t n = elsize;
  for (int i = 0; i < rank; i++) {
    uint64_t d = (uint64_t)shape[i];
    if (d && n > SIZE_MAX / d)
      return 0;
    n *= d;
  }
  *bytes = (size_t)n;
  return 1;
}

/* ---------------------------------------------------------------------- */
/* The set of tensors                                                      */

tyto_status tyto_checkpoint_new(tyto_checkpoint **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_checkpoint_new: out is NULL");
  *out = calloc(1, sizeof **out);
  if (!*out)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "tyto_checkpoint_new: out of "
                                           "memory");
  return TYTO_OK;
}

void tyto_checkpoint_free(tyto_checkpoint *ck) {
  if (!ck)
    return;
  for (size_t i = 0; i < ck->n; i++) {
    free(ck->e[i].name);
    free(ck->e[i].data);
  }
  for (size_t i = 0; i < ck->n_meta; i++) {
    free(ck->keys[i]);
    free(ck->vals[i]);
  }
  free(ck->e);
  free(ck->keys);
  free(ck->vals);
  nameidx_free(&ck->by_name);
  nameidx_free(&ck->by_key);
  free(ck->source);
  free(ck);
}

/* Appends a zeroed entry named `name` (copied), which must be new; NULL on
 * out of memory. */
static entry *push_entry(tyto_checkpoint *ck, const char *name) {
  if (ck->n == ck->cap) {
    size_t cap = ck->cap ? ck->cap * 2 : 8;
    entry *e = realloc(ck->e, cap * sizeof *e);
    if (!e)
      return NULL;
    ck->e = e;
    ck->cap = cap;
  }
  entry *e = &ck->e[ck->n];
  memset(e, 0, sizeof *e);
  if (!(e->name = dup_str(name)))
    return NULL;
  if (nameidx_put(&ck->by_name, name, ck->n) != 0) {
    free(e->name);
    return NULL;
  }
  ck->n++;
  return e;
}

static const char *name_problem(const tyto_checkpoint *ck, const char *name) {
  if (!*name)
    return "is empty";
  if (strcmp(name, "__metadata__") == 0)
    return "is reserved for the metadata";
  if (!is_utf8(name))
    return "is not valid UTF-8";
  if (ck_find(ck, name))
    return "is already in the checkpoint";
  return NULL;
}

tyto_status tyto_checkpoint_add(tyto_checkpoint *ck, const char *name,
                                tyto_checkpoint_dtype dtype, int rank,
                                const int64_t *shape, const void *data) {
  const char *fn = "tyto_checkpoint_add";
  if (!ck || !name || (rank > 0 && !shape))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !ck     ? "ck"
                   : !name ? "name"
                           : "shape (of a tensor of rank > 0)");
  const char *why = name_problem(ck, name);
  if (why)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: tensor name '%s' %s", fn,
                   name, why);
  if (!ck_dtype_ok(dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: tensor '%s': unknown dtype %d", fn, name, (int)dtype);
  if (rank < 0 || rank > TYTO_MAX_RANK)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: tensor '%s': rank %d is outside 0..%d", fn, name, rank,
                   TYTO_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0)
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "%s: tensor '%s': extent %" PRId64 " of axis %d is "
                     "negative",
                     fn, name, shape[i], i);
  size_t bytes;
  if (!shape_bytes(rank, shape, ck_dtype_size(dtype), &bytes))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is too large",
                   fn, name);
  if (bytes && !data)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: tensor '%s': data is NULL for %zu bytes", fn, name,
                   bytes);
  void *copy = malloc(bytes ? bytes : 1);
  entry *e = copy ? push_entry(ck, name) : NULL;
  if (!e) {
    free(copy);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory for '%s'", fn,
                   name);
  }
  if (bytes)
    memcpy(copy, data, bytes);
  e->dtype = dtype;
  e->rank = rank;
  for (int i = 0; i < rank; i++)
    e->shape[i] = shape[i];
  e->bytes = bytes;
  e->data = copy;
  return TYTO_OK;
}

tyto_status tyto_checkpoint_set_meta(tyto_checkpoint *ck, const char *key,
                                     const char *value) {
  const char *fn = "tyto_checkpoint_set_meta";
  if (!ck || !key || !value)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !ck    ? "ck"
                   : !key ? "key"
                          : "value");
  if (!is_utf8(key) || !is_utf8(value))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: key '%s' or its value is not valid UTF-8", fn, key);
  char *v = dup_str(value);
  if (!v)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  size_t at;
  if (nameidx_get(&ck->by_key, key, &at)) {
    free(ck->vals[at]);
    ck->vals[at] = v;
    return TYTO_OK;
  }
  char *k = dup_str(key);
  if (ck->n_meta == ck->cap_meta && k) {
    size_t cap = ck->cap_meta ? ck->cap_meta * 2 : 8;
    char **keys = realloc(ck->keys, cap * sizeof *keys);
    if (keys)
      ck->keys = keys;
    char **vals = keys ? realloc(ck->vals, cap * sizeof *vals) : NULL;
    if (vals) {
      ck->vals = vals;
      ck->cap_meta = cap;
    }
  }
  if (!k || ck->n_meta == ck->cap_meta ||
      nameidx_put(&ck->by_key, k, ck->n_meta) != 0) {
    free(k);
    free(v);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  ck->keys[ck->n_meta] = k;
  ck->vals[ck->n_meta] = v;
  ck->n_meta++;
  return TYTO_OK;
}

size_t tyto_checkpoint_count(const tyto_checkpoint *ck) {
  return ck ? ck->n : 0;
}

const char *tyto_checkpoint_name(const tyto_checkpoint *ck, size_t i) {
  return ck && i < ck->n ? ck->e[i].name : NULL;
}

tyto_status tyto_checkpoint_find(const tyto_checkpoint *ck, const char *name,
                                 tyto_checkpoint_dtype *dtype, int *rank,
                                 const int64_t **shape, const void **data,
                                 size_t *bytes) {
  if (!ck || !name)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_checkpoint_find: %s is NULL", !ck ? "ck" : "name");
  const entry *e = ck_find(ck, name);
  if (!e)
    return rt_fail(TYTO_ERR_NOT_FOUND,
                   "tyto_checkpoint_find: no tensor '%s' in checkpoint '%s'",
                   name, ck_source(ck));
  if (dtype)
    *dtype = e->dtype;
  if (rank)
    *rank = e->rank;
  if (shape)
    *shape = e->shape;
  if (data)
    *data = e->data;
  if (bytes)
    *bytes = e->bytes;
  return TYTO_OK;
}

const char *tyto_checkpoint_get_meta(const tyto_checkpoint *ck,
                                     const char *key) {
  size_t at;
  if (!ck || !key || !nameidx_get(&ck->by_key, key, &at))
    return NULL;
  return ck->vals[at];
}

size_t tyto_checkpoint_meta_count(const tyto_checkpoint *ck) {
  return ck ? ck->n_meta : 0;
}

const char *tyto_checkpoint_meta_key(const tyto_checkpoint *ck, size_t i) {
  return ck && i < ck->n_meta ? ck->keys[i] : NULL;
}

/* ---------------------------------------------------------------------- */
/* Writing                                                                 */

/* The header JSON padded with spaces to a multiple of 8; malloc'd. */
static char *build_header(const tyto_checkpoint *ck, size_t *len) {
  json_t *root = json_object();
  int bad = !root;
  if (!bad && ck->n_meta) {
    json_t *m = json_object();
    bad = json_object_set_new(root, "__metadata__", m) != 0;
    for (size_t i = 0; !bad && i < ck->n_meta; i++)
      bad = json_object_set_new(m, ck->keys[i], json_string(ck->vals[i]));
  }
  uint64_t off = 0;
  for (size_t i = 0; !bad && i < ck->n; i++) {
    const entry *e = &ck->e[i];
    json_t *shape = json_array();
    for (int k = 0; shape && k < e->rank; k++)
      if (json_array_append_new(shape, json_integer(e->shape[k])))
        json_decref(shape), shape = NULL;
    json_t *offs =
        json_pack("[II]", (json_int_t)off, (json_int_t)(off + e->bytes));
    json_t *t = json_pack("{s:s, s:o?, s:o?}", "dtype", file_dtype(e->dtype),
                          "shape", shape, "data_offsets", offs);
    bad = !shape || !offs || !t || json_object_set_new(root, e->name, t);
    off += e->bytes;
  }
  char *s = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s)
    return NULL;
  size_t n = strlen(s), padded = (n + 7) / 8 * 8;
  char *h = realloc(s, padded + 1);
  if (!h) {
    free(s);
    return NULL;
  }
  memset(h + n, ' ', padded - n);
  h[padded] = '\0';
  *len = padded;
  return h;
}

static int write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      if (w == 0)
        errno = EIO; /* no progress and no error: do not spin */
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int write_tensor(int fd, const entry *e) {
  if (!host_is_big_endian())
    return write_all(fd, e->data, e->bytes);
  void *tmp = malloc(e->bytes ? e->bytes : 1);
  if (!tmp) {
    errno = ENOMEM;
    return -1;
  }
  memcpy(tmp, e->data, e->bytes);
  swap_bytes(tmp, e->bytes, ck_dtype_size(e->dtype));
  int r = write_all(fd, tmp, e->bytes);
  free(tmp);
  return r;
}

/* The header size, the header and the tensors; -1 with errno on failure. */
static int write_file(int fd, const tyto_checkpoint *ck, const char *header,
                      size_t hlen) {
  unsigned char size[8];
  for (int i = 0; i < 8; i++)
    size[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  if (write_all(fd, size, 8) || write_all(fd, header, hlen))
    return -1;
  for (size_t i = 0; i < ck->n; i++)
    if (write_tensor(fd, &ck->e[i]))
      return -1;
  return 0;
}

tyto_status tyto_checkpoint_save(const tyto_checkpoint *ck, const char *path) {
  const char *fn = "tyto_checkpoint_save";
  if (!ck || !path || !*path)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: NULL or empty argument", fn);
  size_t hlen;
  char *header = build_header(ck, &hlen);
  if (!header)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  rt_replace r;
  const char *why = NULL, *step = NULL;
  int rc = rt_replace_open(&r, path, &why);
  if (rc != 0) {
    free(header);
    return rt_replace_fail(fn, path, why, rc);
  }
  rt_xfsz_guard guard;
  rt_xfsz_block(&guard);
  errno = 0;
  int err = write_file(r.fd, ck, header, hlen) != 0 ? (errno ? errno : EIO) : 0;
  tyto_status st = TYTO_OK;
  if (rt_replace_commit(&r, err, &why, &step) != 0)
    st = strcmp(step, "sync") == 0
             ? rt_fail(TYTO_ERR_IO,
                       "%s: '%s' was written but its directory could not be "
                       "synced: %s",
                       fn, path, why)
             : rt_fail(TYTO_ERR_IO,
                       "%s: writing '%s' failed: %s; '%s' is unchanged", fn,
                       path, why, path);
  rt_xfsz_restore(&guard);
  free(header);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Reading                                                                 */

/* Where the bytes come from: memory, or a file read piece by piece so a
 * large checkpoint is not held twice. */
typedef struct source {
  const char *fn;   /* the public function, for messages */
  const char *name; /* the file */
  const unsigned char *mem;
  int fd;
  uint64_t size;
} source;

static tyto_status bad(const source *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tyto_status bad(const source *s, const char *fmt, ...) {
  strbuf b = {0};
  ck_printf(&b, "%s: '%s': ", s->fn, s->name);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (msg) {
    va_start(ap, fmt);
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ck_printf(&b, "%s", msg);
  }
  tyto_status st = rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s",
                           b.s && msg ? b.s : "invalid checkpoint");
  free(msg);
  free(b.s);
  return st;
}

static int src_read(const source *s, void *dst, size_t n, uint64_t off) {
  if (s->mem) {
    memcpy(dst, s->mem + off, n);
    return 0;
  }
  unsigned char *p = dst;
  while (n) {
    ssize_t r = pread(s->fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      if (r == 0)
        errno = EIO; /* the file shrank under us */
      return -1;
    }
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

static tyto_status read_fail(const source *s) {
  return rt_fail(TYTO_ERR_IO, "%s: cannot read '%s': %s", s->fn, s->name,
                 strerror(errno));
}

static const char *json_kind(const json_t *j) {
  switch (json_typeof(j)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static tyto_status parse_meta(const source *s, tyto_checkpoint *ck, json_t *m) {
  if (!json_is_object(m))
    return bad(s, "\"__metadata__\" is %s, expected an object of strings",
               json_kind(m));
  const char *key;
  json_t *v;
  json_object_foreach(m, key, v) {
    if (!json_is_string(v))
      return bad(s, "metadata '%s' is %s, expected a string", key,
                 json_kind(v));
    tyto_status st = tyto_checkpoint_set_meta(ck, key, json_string_value(v));
    if (st != TYTO_OK)
      return st;
  }
  return TYTO_OK;
}

/* Reads a non-negative JSON integer. */
static int get_uint(const json_t *j, uint64_t *v) {
  if (!json_is_integer(j) || json_integer_value(j) < 0)
    return 0;
  *v = (uint64_t)json_integer_value(j);
  return 1;
}

/* One tensor's entry of the header: dtype, shape and offsets, checked
 * against the data's size (the bytes are read later). */
static tyto_status parse_entry(const source *s, tyto_checkpoint *ck,
                               const char *name, json_t *t, uint64_t data) {
  if (!json_is_object(t))
    return bad(s,
               "tensor '%s' is %s, expected an object with dtype, shape "
               "and data_offsets",
               name, json_kind(t));
  const char *key;
  json_t *v;
  json_object_foreach(t, key, v) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") &&
        strcmp(key, "data_offsets"))
      return bad(s,
                 "tensor '%s' has an unknown field '%s' (expected dtype, "
                 "shape and data_offsets)",
                 name, key);
  }
  json_t *jd = json_object_get(t, "dtype");
  json_t *js = json_object_get(t, "shape");
  json_t *jo = json_object_get(t, "data_offsets");
  if (!jd || !js || !jo)
    return bad(s, "tensor '%s' lacks %s", name,
               !jd   ? "its dtype"
               : !js ? "its shape"
                     : "its data_offsets");
  if (!json_is_string(jd))
    return bad(s,
               "tensor '%s': dtype is %s, expected a string such as "
               "\"F32\"",
               name, json_kind(jd));
  const char *ds = json_string_value(jd);
  int dtype = -1;
  for (int i = 0; i < N_CK_DTYPES; i++)
    if (strcmp(ds, file_dtype((tyto_checkpoint_dtype)i)) == 0)
      dtype = i;
  if (dtype < 0)
    return bad(s,
               "tensor '%s': dtype \"%s\" is not supported (tyto reads "
               "F32, F64, F16, BF16, I32, I64 and U64)",
               name, ds);
  if (!json_is_array(js))
    return bad(s, "tensor '%s': shape is %s, expected an array of extents",
               name, json_kind(js));
  size_t rank = json_array_size(js);
  if (rank > TYTO_MAX_RANK)
    return bad(s, "tensor '%s': rank %zu is over tyto's limit of %d", name,
               rank, TYTO_MAX_RANK);
  int64_t shape[TYTO_MAX_RANK];
  for (size_t i = 0; i < rank; i++) {
    uint64_t d;
    if (!get_uint(json_array_get(js, i), &d))
      return bad(s,
                 "tensor '%s': extent %zu of the shape is not a "
                 "non-negative integer",
                 name, i);
    shape[i] = (int64_t)d;
  }
  uint64_t b, e;
  if (!json_is_array(jo) || json_array_size(jo) != 2 ||
      !get_uint(json_array_get(jo, 0), &b) ||
      !get_uint(json_array_get(jo, 1), &e) || e < b)
    return bad(s,
               "tensor '%s': data_offsets must be [begin, end] with 0 <= "
               "begin <= end",
               name);
  if (e > data)
    return bad(s,
               "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run "
               "past the end of the data (%" PRIu64 " bytes)",
               name, b, e, data);
  size_t bytes;
  int fits = shape_bytes((int)rank, shape,
                         ck_dtype_size((tyto_checkpoint_dtype)dtype), &bytes);
  if (!fits || bytes != e - b) {
    strbuf ty = {0};
    ck_type(&ty, (tyto_checkpoint_dtype)dtype, (int)rank, shape);
    tyto_status st;
    if (!fits)
      st = bad(s, "tensor '%s': %s is too large", name, ty.s ? ty.s : "?");
    else
      st = bad(s,
               "tensor '%s': %s needs %zu bytes, data_offsets [%" PRIu64
               ", %" PRIu64 "] hold %" PRIu64,
               name, ty.s ? ty.s : "?", bytes, b, e, e - b);
    free(ty.s);
    return st;
  }
  entry *en = push_entry(ck, name);
  if (!en)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", s->fn);
  en->dtype = (tyto_checkpoint_dtype)dtype;
  en->rank = (int)rank;
  memcpy(en->shape, shape, rank * sizeof *shape);
  en->bytes = bytes;
  en->begin = b;
  en->end = e;
  return TYTO_OK;
}

static int by_offset(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile the data exactly: no gap, no overlap, nothing
 * after the last. */
static tyto_status check_layout(const source *s, const tyto_checkpoint *ck,
                                uint64_t data) {
  const entry **order = malloc((ck->n ? ck->n : 1) * sizeof *order);
  if (!order)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", s->fn);
  for (size_t i = 0; i < ck->n; i++)
    order[i] = &ck->e[i];
  qsort(order, ck->n, sizeof *order, by_offset);
  tyto_status st = TYTO_OK;
  uint64_t pos = 0;
  const entry *prev = NULL;
  for (size_t i = 0; i < ck->n && st == TYTO_OK; i++) {
    const entry *e = order[i];
    if (e->begin > pos)
      st = bad(s,
               "gap: bytes [%" PRIu64 ", %" PRIu64 ") of the data belong "
               "to no tensor (before tensor '%s')",
               pos, e->begin, e->name);
    else if (e->begin < pos)
      st = bad(s,
               "tensor '%s' (data_offsets [%" PRIu64 ", %" PRIu64 "]) "
               "overlaps tensor '%s' ([%" PRIu64 ", %" PRIu64 "])",
               e->name, e->begin, e->end, prev->name, prev->begin, prev->end);
    pos = e->end;
    prev = e;
  }
  if (st == TYTO_OK && pos != data)
    st = bad(s,
             "trailing bytes: the tensors end at byte %" PRIu64 " of the "
             "data but it holds %" PRIu64 " bytes",
             pos, data);
  free(order);
  return st;
}

static tyto_status parse(const source *s, tyto_checkpoint **out) {
  *out = NULL;
  if (s->size < 8)
    return bad(s,
               "truncated header: the file is %" PRIu64 " bytes, too "
               "short for the 8-byte header size",
               s->size);
  unsigned char sz[8];
  if (src_read(s, sz, 8, 0))
    return read_fail(s);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | sz[i];
  if (n > s->size - 8)
    return bad(s,
               "header size %" PRIu64 " runs past the end of the file "
               "(%" PRIu64 " bytes after the size)",
               n, s->size - 8);
  if (n > MAX_HEADER)
    return bad(s, "header size %" PRIu64 " is over the limit of %" PRIu64, n,
               MAX_HEADER);
  char *hdr = malloc(n ? (size_t)n : 1);
  if (!hdr)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", s->fn);
  if (src_read(s, hdr, (size_t)n, 8)) {
    free(hdr);
    return read_fail(s);
  }
  json_error_t jerr;
  json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
  free(hdr);
  if (!root)
    return bad(s, "header is not valid JSON: %s (byte %d of the header)",
               jerr.text, jerr.position);
  tyto_status st = TYTO_OK;
  tyto_checkpoint *ck = NULL;
  if (!json_is_object(root)) {
    st = bad(s, "header is %s, expected a JSON object", json_kind(root));
    goto done;
  }
  if ((st = tyto_checkpoint_new(&ck)) != TYTO_OK)
    goto done;
  uint64_t data = s->size - 8 - n;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0)
      st = parse_meta(s, ck, v);
    else if (!*key)
      st = bad(s, "a tensor has an empty name");
    else
      st = parse_entry(s, ck, key, v, data);
    if (st != TYTO_OK)
      goto done;
  }
  if ((st = check_layout(s, ck, data)) != TYTO_OK)
    goto done;
  for (size_t i = 0; i < ck->n; i++) {
    entry *e = &ck->e[i];
    if (!(e->data = malloc(e->bytes ? e->bytes : 1))) {
      st = rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "%s: out of memory for tensor "
                   "'%s' (%zu bytes)",
                   s->fn, e->name, e->bytes);
      goto done;
    }
    if (src_read(s, e->data, e->bytes, 8 + n + e->begin)) {
      st = read_fail(s);
      goto done;
    }
    if (host_is_big_endian())
      swap_bytes(e->data, e->bytes, ck_dtype_size(e->dtype));
  }
  if (!(ck->source = dup_str(s->name)))
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", s->fn);
done:
  json_decref(root);
  if (st != TYTO_OK)
    tyto_checkpoint_free(ck);
  else
    *out = ck;
  return st;
}

tyto_status tyto_checkpoint_parse(const void *data, size_t size,
                                  const char *name, tyto_checkpoint **out) {
  if (!out || (!data && size))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_checkpoint_parse: %s is NULL",
                   !out ? "out" : "data (of a size above 0)");
  source s = {"tyto_checkpoint_parse", name ? name : "(memory)",
              data ? data : (const unsigned char *)"", -1, size};
  return parse(&s, out);
}

tyto_status tyto_checkpoint_load(const char *path, tyto_checkpoint **out) {
  const char *fn = "tyto_checkpoint_load";
  if (!path || !out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   !path ? "path" : "out");
  *out = NULL;
  const char *why;
  int fd = rt_open_regular(path, &why);
  if (fd < 0)
    return rt_fail(errno == ENOENT ? TYTO_ERR_NOT_FOUND : TYTO_ERR_IO,
                   "%s: cannot read '%s': %s", fn, path, why);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return rt_fail(TYTO_ERR_IO, "%s: cannot read '%s': %s", fn, path,
                   strerror(err));
  }
  source s = {fn, path, NULL, fd, (uint64_t)sb.st_size};
  tyto_status st = parse(&s, out);
  close(fd);
  return st;
}
