/*
 * Layout ops that are not a strided COPY: PAD (constant or reflect),
 * GATHER and SCATTER_ADD along one axis (numpy.take and its adjoint), and
 * ONE_HOT. Every input and output may be strided.
 *
 * Indices are whole numbers stored in the float dtype, or (ABI 1.6) I32
 * or I64 whatever the data's dtype (ONE_HOT's output then of any dtype,
 * integers included; SCATTER_ADD on integers wraps). GATHER and
 * SCATTER_ADD check every index before writing anything: an index that is
 * not a whole number in [0, extent) makes run() return an error naming its
 * position, and the output is left as it was. The checked indices are kept
 * as int64 in the workspace (8 bytes per index, reported by prepare).
 * ONE_HOT never fails at run time: an index that is not a whole number in
 * [0, depth) gives an all-zero row, as TensorFlow's one_hot does.
 *
 * PAD and GATHER move elements as bits of their size, so every dtype moves
 * exactly. SCATTER_ADD in F16 and BF16 sums in f32 (an accumulator in the
 * workspace, as wide as the output) and rounds each element once.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct layout_op {
  cpu_op base;
  const tyto_plugin_host *h;
  uint32_t op;
  int mode;                             /* PAD: 0 constant, 1 reflect */
  int64_t before[TYTO_PLUGIN_MAX_RANK]; /* PAD */
  unsigned char value[8];               /* PAD constant, in the dtype */
  uint32_t axis;                        /* GATHER, SCATTER_ADD */
  uint64_t acc_off; /* SCATTER_ADD in F16, BF16: the f32 sums' offset */
} layout_op;

/* Row-major walk over a layout: idx and the element offset of idx. */
typedef struct walk {
  const tyto_plugin_layout *l;
  int64_t idx[TYTO_PLUGIN_MAX_RANK];
  int64_t off;
} walk;

static void walk_init(walk *w, const tyto_plugin_layout *l) {
  memset(w, 0, sizeof *w);
  w->l = l;
  w->off = l->offset;
}

/* Starts the walk at row-major position i. */
static void walk_seek(walk *w, const tyto_plugin_layout *l, int64_t i) {
  walk_init(w, l);
  for (uint32_t a = l->rank; a-- > 0;) {
    w->idx[a] = i % l->shape[a];
    w->off += w->idx[a] * l->strides[a];
    i /= l->shape[a];
  }
}

static void walk_next(walk *w) {
  const tyto_plugin_layout *l = w->l;
  for (uint32_t a = l->rank; a-- > 0;) {
    w->off += l->strides[a];
    if (++w->idx[a] < l->shape[a])
      return;
    w->off -= w->idx[a] * l->strides[a];
    w->idx[a] = 0;
  }
}

/* Element off of base as a double (exactly, but I64 beyond 2^53), and v
 * rounded once into it (converted as CAST converts for I32 and I64). */
static double load(const unsigned char *base, uint32_t dtype, int64_t off) {
  if (dtype == TYTO_PLUGIN_DTYPE_I32)
    return ((const int32_t *)(const void *)base)[off];
  if (dtype == TYTO_PLUGIN_DTYPE_I64)
    return (double)((const int64_t *)(const void *)base)[off];
  if (dtype == TYTO_PLUGIN_DTYPE_F32)
    return ((const float *)base)[off];
  if (dtype == TYTO_PLUGIN_DTYPE_F64)
    return ((const double *)base)[off];
  double v;
  cpu_cvt(TYTO_PLUGIN_DTYPE_F64, dtype)(1, &v, base + 2 * off);
  return v;
}

static void store(unsigned char *base, uint32_t dtype, int64_t off, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_I32)
    ((int32_t *)(void *)base)[off] =
        (int32_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I32, v);
  else if (dtype == TYTO_PLUGIN_DTYPE_I64)
    ((int64_t *)(void *)base)[off] =
        (int64_t)tpc_int_of_f64(TYTO_PLUGIN_DTYPE_I64, v);
  else if (dtype == TYTO_PLUGIN_DTYPE_F32)
    ((float *)base)[off] = (float)v;
  else if (dtype == TYTO_PLUGIN_DTYPE_F64)
    ((double *)base)[off] = v;
  else
    cpu_cvt(dtype, TYTO_PLUGIN_DTYPE_F64)(1, base + 2 * off, &v);
}

/* Element `src` of from (e bytes each) into element `dst` of to. */
static inline void move(size_t e, unsigned char *to, int64_t dst,
                        const unsigned char *from, int64_t src) {
  memcpy(to + dst * (int64_t)e, from + src * (int64_t)e, e);
}

/* ---------------------------------------------------------------- PAD --- */

/* PAD and GATHER write each output element once, independently: the
 * pool takes the output in chunks of CHUNK elements in row-major order. */
#define CHUNK 16384

typedef struct chunk_job {
  const layout_op *op;
  const cpu_desc *d;
  unsigned char *const *args;
  const int64_t *ind; /* GATHER: the checked indices */
  int64_t n;          /* output elements */
} chunk_job;

static size_t chunks_of(int64_t n) {
  return (size_t)((n + CHUNK - 1) / CHUNK);
}

static void pad_chunk(void *ctx, size_t c) {
  const chunk_job *job = ctx;
  const layout_op *op = job->op;
  const tyto_plugin_layout *in = &job->d->in[0].l, *out = &job->d->out[0].l;
  unsigned char *const *args = job->args;
  int64_t first = (int64_t)c * CHUNK;
  int64_t end = job->n - first < CHUNK ? job->n : first + CHUNK;
  const size_t es = cpu_dtype_size(out->dtype);
  walk w;
  walk_seek(&w, out, first);
  for (int64_t i = first; i < end; i++, walk_next(&w)) {
    int64_t src = in->offset;
    int inside = 1;
    for (uint32_t a = 0; a < out->rank; a++) {
      int64_t j = w.idx[a] - op->before[a], e = in->shape[a];
      if (j < 0 || j >= e) {
        if (op->mode == 0) {
          inside = 0;
          break;
        }
        /* numpy's 'reflect': the edge is not repeated. */
        j = j < 0 ? -j : 2 * (e - 1) - j;
      }
      src += j * in->strides[a];
    }
    if (inside)
      move(es, args[1], w.off, args[0], src);
    else
      memcpy(args[1] + w.off * (int64_t)es, op->value, es);
  }
}

static tyto_plugin_error *pad_run(const layout_op *op, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  chunk_job job = {op, d, args, NULL, cpu_numel(&d->out[0].l)};
  if (job.n > 0)
    cpu_pool_for(pool, chunks_of(job.n), pad_chunk, &job);
  return NULL;
}

/* ------------------------------------------------- GATHER, SCATTER_ADD --- */

/* Checks every index and stores it as int64 in ws, in row-major order. */
static tyto_plugin_error *read_indices(const layout_op *op,
                                       const tyto_plugin_layout *il,
                                       const unsigned char *ibase,
                                       int64_t extent, int64_t *ws) {
  int64_t n = cpu_numel(il);
  walk w;
  walk_init(&w, il);
  for (int64_t i = 0; i < n && tpc_dtype_int(il->dtype); i++, walk_next(&w)) {
    int64_t v = il->dtype == TYTO_PLUGIN_DTYPE_I32
                    ? ((const int32_t *)(const void *)ibase)[w.off]
                    : ((const int64_t *)(const void *)ibase)[w.off];
    if (v < 0 || v >= extent)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "%s: index %lld at position %lld of the indices "
                              "(row-major) is out of range for axis %u of "
                              "extent %lld (expected 0 to %lld)",
                              cpu_op_name(op->op), (long long)v, (long long)i,
                              op->axis, (long long)extent,
                              (long long)extent - 1);
    ws[i] = v;
  }
  for (int64_t i = 0; i < n && !tpc_dtype_int(il->dtype); i++, walk_next(&w)) {
    double v = load(ibase, il->dtype, w.off);
    if (v != floor(v) || isinf(v))
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "%s: index %g at position %lld of the indices "
                              "(row-major) is not a whole number",
                              cpu_op_name(op->op), v, (long long)i);
    if (v < 0 || v >= (double)extent)
      return op->h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                              "%s: index %.0f at position %lld of the indices "
                              "(row-major) is out of range for axis %u of "
                              "extent %lld (expected 0 to %lld)",
                              cpu_op_name(op->op), v, (long long)i, op->axis,
                              (long long)extent, (long long)extent - 1);
    ws[i] = (int64_t)v;
  }
  return NULL;
}

/* Offset in `data` (rank r, axis a) of the element that the element of
 * multi-index idx of a gathered tensor (rank r - 1 + ri) maps to. */
static int64_t gathered_offset(const tyto_plugin_layout *data, uint32_t a,
                               uint32_t ri, const int64_t *idx,
                               const int64_t *ind, const int64_t *ishape) {
  int64_t off = data->offset, q = 0;
  for (uint32_t k = 0; k < a; k++)
    off += idx[k] * data->strides[k];
  for (uint32_t k = 0; k < ri; k++)
    q = q * ishape[k] + idx[a + k];
  off += ind[q] * data->strides[a];
  for (uint32_t k = a + 1; k < data->rank; k++)
    off += idx[k - 1 + ri] * data->strides[k];
  return off;
}

static void gather_chunk(void *ctx, size_t c) {
  const chunk_job *job = ctx;
  const layout_op *op = job->op;
  const tyto_plugin_layout *data = &job->d->in[0].l, *il = &job->d->in[1].l,
                           *out = &job->d->out[0].l;
  int64_t first = (int64_t)c * CHUNK;
  int64_t end = job->n - first < CHUNK ? job->n : first + CHUNK;
  const size_t e = cpu_dtype_size(out->dtype);
  walk w;
  walk_seek(&w, out, first);
  for (int64_t i = first; i < end; i++, walk_next(&w)) {
    int64_t src =
        gathered_offset(data, op->axis, il->rank, w.idx, job->ind, il->shape);
    move(e, job->args[2], w.off, job->args[0], src);
  }
}

static tyto_plugin_error *gather_run(const layout_op *op, const cpu_desc *d,
                                     unsigned char *const *args,
                                     cpu_pool *pool) {
  const tyto_plugin_layout *data = &d->in[0].l, *il = &d->in[1].l;
  int64_t *ind = (int64_t *)(void *)args[3];
  chunk_job job = {op, d, args, ind, cpu_numel(&d->out[0].l)};
  if (job.n == 0)
    return NULL;
  tyto_plugin_error *e =
      read_indices(op, il, args[1], data->shape[op->axis], ind);
  if (e)
    return e;
  cpu_pool_for(pool, chunks_of(job.n), gather_chunk, &job);
  return NULL;
}

/* SCATTER_ADD in F16 and BF16: base and the updates summed in f32, in a
 * dense accumulator in the workspace (acc, row-major over the output's
 * shape), then each sum rounded once into the output. */
static void scatter_half(const layout_op *op, const cpu_desc *d,
                         unsigned char *const *args, const int64_t *ind) {
  const tyto_plugin_layout *base = &d->in[0].l, *il = &d->in[1].l,
                           *upd = &d->in[2].l, *out = &d->out[0].l;
  float *acc = (float *)(void *)(args[4] + op->acc_off);
  tyto_plugin_layout dense = *out;
  dense.offset = 0;
  for (int64_t a = (int64_t)out->rank - 1, st = 1; a >= 0; a--) {
    dense.strides[a] = st;
    st *= out->shape[a];
  }
  int64_t n = cpu_numel(out), m = cpu_numel(upd);
  walk w;
  walk_init(&w, base);
  for (int64_t i = 0; i < n; i++, walk_next(&w))
    acc[i] = (float)load(args[0], base->dtype, w.off);
  walk_init(&w, upd);
  for (int64_t i = 0; i < m; i++, walk_next(&w))
    acc[gathered_offset(&dense, op->axis, il->rank, w.idx, ind, il->shape)] +=
        (float)load(args[2], upd->dtype, w.off);
  walk_init(&w, out);
  for (int64_t i = 0; i < n; i++, walk_next(&w))
    store(args[3], out->dtype, w.off, acc[i]);
}

static tyto_plugin_error *scatter_run(const layout_op *op, const cpu_desc *d,
                                      unsigned char *const *args) {
  const tyto_plugin_layout *base = &d->in[0].l, *il = &d->in[1].l,
                           *upd = &d->in[2].l, *out = &d->out[0].l;
  int64_t *ind = (int64_t *)(void *)args[4];
  if (cpu_numel(upd) > 0) {
    tyto_plugin_error *e =
        read_indices(op, il, args[1], base->shape[op->axis], ind);
    if (e)
      return e;
  }
  if (cpu_dtype_half(out->dtype)) {
    scatter_half(op, d, args, ind);
    return NULL;
  }
  /* out = base (an elementwise copy, safe when they are the same memory). */
  int64_t n = cpu_numel(out);
  const size_t e = cpu_dtype_size(out->dtype);
  walk wb, wo;
  walk_init(&wb, base);
  walk_init(&wo, out);
  for (int64_t i = 0; i < n; i++, walk_next(&wb), walk_next(&wo))
    memmove(args[3] + wo.off * (int64_t)e, args[0] + wb.off * (int64_t)e, e);
  /* Updates in row-major order, so duplicates accumulate reproducibly. */
  int64_t m = cpu_numel(upd);
  walk wu;
  walk_init(&wu, upd);
  for (int64_t i = 0; i < m; i++, walk_next(&wu)) {
    int64_t dst =
        gathered_offset(out, op->axis, il->rank, wu.idx, ind, il->shape);
    if (out->dtype == TYTO_PLUGIN_DTYPE_I32) {
      uint32_t *y = (uint32_t *)(void *)args[3] + dst;
      *y += ((const uint32_t *)(const void *)args[2])[wu.off]; /* wraps */
    } else if (out->dtype == TYTO_PLUGIN_DTYPE_I64) {
      uint64_t *y = (uint64_t *)(void *)args[3] + dst;
      *y += ((const uint64_t *)(const void *)args[2])[wu.off];
    } else if (out->dtype == TYTO_PLUGIN_DTYPE_F32)
      ((float *)args[3])[dst] += ((const float *)args[2])[wu.off];
    else
      ((double *)args[3])[dst] += ((const double *)args[2])[wu.off];
  }
  return NULL;
}

/* ------------------------------------------------------------ ONE_HOT --- */

static tyto_plugin_error *one_hot_run(const cpu_desc *d,
                                      unsigned char *const *args) {
  const tyto_plugin_layout *il = &d->in[0].l, *out = &d->out[0].l;
  int64_t n = cpu_numel(out);
  walk wi, wo;
  walk_init(&wi, il);
  walk_init(&wo, out);
  double v = 0;
  int64_t iv = -1; /* an integer index, read exactly */
  const int ints = tpc_dtype_int(il->dtype);
  for (int64_t i = 0; i < n; i++, walk_next(&wo)) {
    int64_t k = wo.idx[out->rank - 1];
    if (k == 0) {
      if (il->dtype == TYTO_PLUGIN_DTYPE_I32)
        iv = ((const int32_t *)(const void *)args[0])[wi.off];
      else if (il->dtype == TYTO_PLUGIN_DTYPE_I64)
        iv = ((const int64_t *)(const void *)args[0])[wi.off];
      else
        v = load(args[0], il->dtype, wi.off);
      walk_next(&wi);
    }
    int hit = ints ? iv == k : v == (double)k;
    store(args[1], out->dtype, wo.off, hit ? 1.0 : 0.0);
  }
  return NULL;
}

static tyto_plugin_error *layout_run(const cpu_op *base, const cpu_desc *d,
                                     unsigned char *const *args,
                                     cpu_pool *pool) {
  const layout_op *op = (const layout_op *)base;
  switch (op->op) {
  case TYTO_PLUGIN_OP_PAD: return pad_run(op, d, args, pool);
  case TYTO_PLUGIN_OP_GATHER: return gather_run(op, d, args, pool);
  case TYTO_PLUGIN_OP_SCATTER_ADD: return scatter_run(op, d, args);
  default: return one_hot_run(d, args);
  }
}

static void layout_destroy(cpu_op *op) {
  free(op);
}

/* --------------------------------------------------------- validation --- */

/* Writes "[2, 3, 4]" into buf. */
static const char *shape_str(char *buf, size_t size, const int64_t *shape,
                             uint32_t rank) {
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < rank && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "",
                             (long long)shape[i]);
  if (used < size)
    snprintf(buf + used, size - used, "]");
  return buf;
}

static int same_shape(const int64_t *a, uint32_t ra, const int64_t *b,
                      uint32_t rb) {
  return ra == rb && memcmp(a, b, ra * sizeof(int64_t)) == 0;
}

static tyto_plugin_error *check_io(const tyto_plugin_host *h,
                                   const cpu_desc *desc, uint32_t n_in) {
  const char *name = cpu_op_name(desc->d->op);
  if (desc->n_in != n_in || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %u input%s and 1 output, got %u and %u",
                        name, n_in, n_in == 1 ? "" : "s", desc->n_in,
                        desc->n_out);
  uint32_t code = desc->d->op;
  for (uint32_t i = 0; i < n_in; i++) {
    uint32_t dt = desc->in[i].l.dtype;
    /* ABI 1.6: GATHER's and SCATTER_ADD's indices (input 1) in I32 or
     * I64 whatever the data's dtype; ONE_HOT's in I32 or I64, its output
     * then in any dtype. */
    if (tpc_dtype_int(dt) && i == 1 &&
        (code == TYTO_PLUGIN_OP_GATHER || code == TYTO_PLUGIN_OP_SCATTER_ADD))
      continue;
    if (code == TYTO_PLUGIN_OP_ONE_HOT && tpc_dtype_int(dt))
      continue;
    if (dt != desc->out[0].l.dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: expected input %u in the output's dtype %s, "
                          "found %s",
                          name, i, cpu_dtype_name(desc->out[0].l.dtype),
                          cpu_dtype_name(desc->in[i].l.dtype));
  }
  return NULL;
}

static tyto_plugin_error *pad_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc, layout_op *op) {
  const tyto_plugin_op_desc *d = desc->d;
  const tyto_plugin_layout *in = &desc->in[0].l, *out = &desc->out[0].l;
  char s1[160], s2[160];
  if (d->n_iattrs != 1 + 2 * in->rank)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "pad: expected %u integer attributes (mode, then "
                        "before and after for each of %u axes), got %u",
                        1 + 2 * in->rank, in->rank, d->n_iattrs);
  if (d->iattrs[0] != 0 && d->iattrs[0] != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "pad: expected mode 0 (constant) or 1 (reflect), got "
                        "%lld",
                        (long long)d->iattrs[0]);
  op->mode = (int)d->iattrs[0];
  if (op->mode == 0 && d->n_fattrs < 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "pad: constant mode expects the value as real "
                        "attribute 0, got %u real attributes",
                        d->n_fattrs);
  /* The constant rounded once to the dtype (beyond its range, an
   * infinity). */
  double value = op->mode == 0 ? d->fattrs[0] : 0;
  cpu_cvt(out->dtype, TYTO_PLUGIN_DTYPE_F64)(1, op->value, &value);
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t a = 0; a < in->rank; a++) {
    int64_t b = d->iattrs[1 + 2 * a], e = d->iattrs[2 + 2 * a];
    if (b < 0 || e < 0 || b > INT64_MAX / 4 || e > INT64_MAX / 4)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "pad: axis %u: expected pads >= 0, got before %lld, "
                          "after %lld",
                          a, (long long)b, (long long)e);
    if (op->mode == 1 &&
        ((b > 0 && b >= in->shape[a]) || (e > 0 && e >= in->shape[a])))
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "pad: axis %u: reflect pads must be less than the "
                          "axis extent %lld, got before %lld, after %lld",
                          a, (long long)in->shape[a], (long long)b,
                          (long long)e);
    op->before[a] = b;
    want[a] = in->shape[a] + b + e;
  }
  if (!same_shape(want, in->rank, out->shape, out->rank))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "pad: expected output shape %s, found %s",
                        shape_str(s1, sizeof s1, want, in->rank),
                        shape_str(s2, sizeof s2, out->shape, out->rank));
  return NULL;
}

/* GATHER: out = data.shape[:axis] + indices.shape + data.shape[axis+1:].
 * SCATTER_ADD: the same rule gives the updates' shape from base's. */
static tyto_plugin_error *axis_check(const tyto_plugin_host *h,
                                     const cpu_desc *desc, layout_op *op,
                                     uint64_t *ws) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  int scatter = d->op == TYTO_PLUGIN_OP_SCATTER_ADD;
  const tyto_plugin_layout *data = &desc->in[0].l, *il = &desc->in[1].l;
  const tyto_plugin_layout *g = scatter ? &desc->in[2].l : &desc->out[0].l;
  const char *gname = scatter ? "updates" : "output";
  char s1[160], s2[160];
  if (d->n_iattrs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected 1 integer attribute (axis), got %u", name,
                        d->n_iattrs);
  if (d->iattrs[0] < 0 || d->iattrs[0] >= (int64_t)data->rank)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected an axis in [0, %u) for %s of rank %u, "
                        "got %lld",
                        name, data->rank, scatter ? "base" : "data", data->rank,
                        (long long)d->iattrs[0]);
  uint32_t a = (uint32_t)d->iattrs[0];
  if (data->rank - 1 + il->rank > TYTO_PLUGIN_MAX_RANK)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the %s would have rank %u, more than %d", name,
                        gname, data->rank - 1 + il->rank, TYTO_PLUGIN_MAX_RANK);
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  uint32_t r = 0;
  for (uint32_t k = 0; k < a; k++)
    want[r++] = data->shape[k];
  for (uint32_t k = 0; k < il->rank; k++)
    want[r++] = il->shape[k];
  for (uint32_t k = a + 1; k < data->rank; k++)
    want[r++] = data->shape[k];
  if (!same_shape(want, r, g->shape, g->rank))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %s shape %s (%s.shape[:%u] + "
                        "indices.shape + %s.shape[%u:]), found %s",
                        name, gname, shape_str(s1, sizeof s1, want, r),
                        scatter ? "base" : "data", a, scatter ? "base" : "data",
                        a + 1, shape_str(s2, sizeof s2, g->shape, g->rank));
  if (scatter && !same_shape(data->shape, data->rank, desc->out[0].l.shape,
                             desc->out[0].l.rank))
    return h->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "scatter_add: expected output shape %s (base's), "
        "found %s",
        shape_str(s1, sizeof s1, data->shape, data->rank),
        shape_str(s2, sizeof s2, desc->out[0].l.shape, desc->out[0].l.rank));
  op->axis = a;
  *ws = (uint64_t)cpu_numel(il) * sizeof(int64_t);
  if (scatter && cpu_dtype_half(desc->out[0].l.dtype)) {
    op->acc_off = (*ws + 63) & ~(uint64_t)63;
    *ws = op->acc_off + (uint64_t)cpu_numel(&desc->out[0].l) * sizeof(float);
  }
  return NULL;
}

static tyto_plugin_error *one_hot_check(const tyto_plugin_host *h,
                                        const cpu_desc *desc) {
  const tyto_plugin_layout *in = &desc->in[0].l, *out = &desc->out[0].l;
  char s1[160], s2[160];
  if (out->rank != in->rank + 1 ||
      !same_shape(in->shape, in->rank, out->shape, in->rank))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "one_hot: expected output shape %s + [depth], found "
                        "%s",
                        shape_str(s1, sizeof s1, in->shape, in->rank),
                        shape_str(s2, sizeof s2, out->shape, out->rank));
  return NULL;
}

/* The family's check, filling what it learns into *op: the pad mode,
 * value and offsets, the axis, the workspace. */
static tyto_plugin_error *layout_plan(const tyto_plugin_host *h,
                                      const cpu_desc *desc, layout_op *op) {
  uint32_t code = desc->d->op;
  uint32_t n_in = code == TYTO_PLUGIN_OP_PAD || code == TYTO_PLUGIN_OP_ONE_HOT
                      ? 1
                  : code == TYTO_PLUGIN_OP_GATHER ? 2
                                                  : 3;
  tyto_plugin_error *e = check_io(h, desc, n_in);
  if (e)
    return e;
  op->op = code;
  uint64_t ws = 0;
  if (code == TYTO_PLUGIN_OP_PAD)
    e = pad_check(h, desc, op);
  else if (code == TYTO_PLUGIN_OP_ONE_HOT)
    e = one_hot_check(h, desc);
  else
    e = axis_check(h, desc, op, &ws);
  op->base.workspace_bytes = ws;
  return e;
}

tyto_plugin_error *cpu_layout_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  layout_op op;
  memset(&op, 0, sizeof op);
  return layout_plan(h, desc, &op);
}

tyto_plugin_error *cpu_layout_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  layout_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  tyto_plugin_error *e = layout_plan(h, desc, op);
  if (e) {
    free(op);
    return e;
  }
  op->h = h;
  op->base.run = layout_run;
  op->base.destroy = layout_destroy;
  *out = &op->base;
  return NULL;
}
