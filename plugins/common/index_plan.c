/*
 * The index ops' checks for the GPU plugins (index_plan.h).
 */
#include "index_plan.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "half.h"
#include "text.h"

int tpc_index_op(uint32_t op) {
  return op == TYTO_PLUGIN_OP_PAD || op == TYTO_PLUGIN_OP_GATHER ||
         op == TYTO_PLUGIN_OP_SCATTER_ADD || op == TYTO_PLUGIN_OP_ONE_HOT;
}

static int same_shape(const int64_t *a, uint32_t ra, const int64_t *b,
                      uint32_t rb) {
  return ra == rb && memcmp(a, b, ra * sizeof(int64_t)) == 0;
}

static int pad_check(const tpc_operands *a, tpc_index *x, char *why,
                     size_t why_size) {
  const tyto_plugin_layout *in = a->in[0], *out = a->out[0];
  char s1[160], s2[160];
  if (a->n_iattrs != 1 + 2 * in->rank)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "pad: expected %u integer attributes (mode, then before "
                    "and after for each of %u axes), got %u",
                    (unsigned)(1 + 2 * in->rank), (unsigned)in->rank,
                    (unsigned)a->n_iattrs);
  if (a->iattrs[0] != 0 && a->iattrs[0] != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "pad: expected mode 0 (constant) or 1 (reflect), got %lld",
                    (long long)a->iattrs[0]);
  x->mode = (int)a->iattrs[0];
  if (x->mode == 0 && a->n_fattrs < 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "pad: constant mode expects the value as real attribute "
                    "0, got %u real attributes",
                    (unsigned)a->n_fattrs);
  x->value = x->mode == 0 ? a->fattrs[0] : 0;
  /* Beyond f32's range the constant becomes an infinity, as on the CPU (a
   * plain conversion would be undefined behaviour). */
  x->valuef = x->value > FLT_MAX    ? INFINITY
              : x->value < -FLT_MAX ? -INFINITY
                                    : (float)x->value;
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t k = 0; k < in->rank; k++) {
    int64_t b = a->iattrs[1 + 2 * k], e = a->iattrs[2 + 2 * k];
    if (b < 0 || e < 0 || b > INT64_MAX / 4 || e > INT64_MAX / 4)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "pad: axis %u: expected pads >= 0, got before %lld, "
                      "after %lld",
                      (unsigned)k, (long long)b, (long long)e);
    if (x->mode == 1 &&
        ((b > 0 && b >= in->shape[k]) || (e > 0 && e >= in->shape[k])))
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "pad: axis %u: reflect pads must be less than the axis "
                      "extent %lld, got before %lld, after %lld",
                      (unsigned)k, (long long)in->shape[k], (long long)b,
                      (long long)e);
    x->before[k] = b;
    want[k] = in->shape[k] + b + e;
  }
  if (!same_shape(want, in->rank, out->shape, out->rank))
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "pad: expected output shape %s, found %s",
                    tpc_format_extents(want, in->rank, s1, sizeof s1),
                    tpc_format_extents(out->shape, out->rank, s2, sizeof s2));
  return 0;
}

/* Elements of l (the plugin has checked that the count fits). */
static int64_t count_of(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t k = 0; k < l->rank; k++)
    if (!tpc_mul_ok(n, l->shape[k], &n))
      return INT64_MAX;
  return n;
}

/* GATHER: out = data.shape[:axis] + indices.shape + data.shape[axis+1:].
 * SCATTER_ADD: the same rule gives the updates' shape from base's. */
static int axis_check(const tpc_operands *a, const char *plugin, tpc_index *x,
                      char *why, size_t why_size) {
  const char *name = tpc_op_name(a->op);
  int scatter = a->op == TYTO_PLUGIN_OP_SCATTER_ADD;
  const tyto_plugin_layout *data = a->in[0], *il = a->in[1], *out = a->out[0];
  const tyto_plugin_layout *g = scatter ? a->in[2] : out;
  const char *gname = scatter ? "updates" : "output";
  const char *dname = scatter ? "base" : "data";
  char s1[160], s2[160];
  if (a->n_iattrs != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected 1 integer attribute (axis), got %u", name,
                    (unsigned)a->n_iattrs);
  if (a->iattrs[0] < 0 || a->iattrs[0] >= (int64_t)data->rank)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected an axis in [0, %u) for %s of rank %u, got "
                    "%lld",
                    name, (unsigned)data->rank, dname, (unsigned)data->rank,
                    (long long)a->iattrs[0]);
  uint32_t ax = (uint32_t)a->iattrs[0];
  if (data->rank - 1 + il->rank > TYTO_PLUGIN_MAX_RANK)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: the %s would have rank %u, more than %d", name, gname,
                    (unsigned)(data->rank - 1 + il->rank),
                    TYTO_PLUGIN_MAX_RANK);
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  uint32_t r = 0;
  for (uint32_t k = 0; k < ax; k++)
    want[r++] = data->shape[k];
  for (uint32_t k = 0; k < il->rank; k++)
    want[r++] = il->shape[k];
  for (uint32_t k = ax + 1; k < data->rank; k++)
    want[r++] = data->shape[k];
  if (!same_shape(want, r, g->shape, g->rank))
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected %s shape %s (%s.shape[:%u] + indices.shape "
                    "+ %s.shape[%u:]), found %s",
                    name, gname, tpc_format_extents(want, r, s1, sizeof s1),
                    dname, (unsigned)ax, dname, (unsigned)(ax + 1),
                    tpc_format_extents(g->shape, g->rank, s2, sizeof s2));
  if (scatter && !same_shape(data->shape, data->rank, out->shape, out->rank))
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "scatter_add: expected output shape %s (base's), found %s",
                    tpc_format_extents(data->shape, data->rank, s1, sizeof s1),
                    tpc_format_extents(out->shape, out->rank, s2, sizeof s2));
  /* The sorted indices and their offsets: 16 bytes per index. */
  int64_t n = count_of(il);
  if (scatter && n > INT64_MAX / 16 - 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                    "scatter_add: %lld indices are too many for the %s "
                    "plugin's workspace",
                    (long long)n, plugin);
  x->axis = ax;
  return 0;
}

static int one_hot_check(const tpc_operands *a, char *why, size_t why_size) {
  const tyto_plugin_layout *in = a->in[0], *out = a->out[0];
  char s1[160], s2[160];
  if (out->rank != in->rank + 1 ||
      !same_shape(in->shape, in->rank, out->shape, in->rank))
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "one_hot: expected output shape %s + [depth], found %s",
                    tpc_format_extents(in->shape, in->rank, s1, sizeof s1),
                    tpc_format_extents(out->shape, out->rank, s2, sizeof s2));
  return 0;
}

int tpc_index_check(const tpc_operands *a, const char *plugin, tpc_index *x,
                    char *why, size_t why_size) {
  uint32_t want_in =
      a->op == TYTO_PLUGIN_OP_PAD || a->op == TYTO_PLUGIN_OP_ONE_HOT ? 1
      : a->op == TYTO_PLUGIN_OP_GATHER                               ? 2
                                                                     : 3;
  if (a->n_in != want_in || a->n_out != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected %u input%s and 1 output, got %u and %u",
                    tpc_op_name(a->op), (unsigned)want_in,
                    want_in == 1 ? "" : "s", (unsigned)a->n_in,
                    (unsigned)a->n_out);
  switch (a->op) {
  case TYTO_PLUGIN_OP_PAD: return pad_check(a, x, why, why_size);
  case TYTO_PLUGIN_OP_ONE_HOT: return one_hot_check(a, why, why_size);
  default: return axis_check(a, plugin, x, why, why_size);
  }
}

uint32_t tpc_index_dtype(uint32_t op, uint32_t in0, uint32_t in1,
                         uint32_t data) {
  uint32_t x = op == TYTO_PLUGIN_OP_GATHER || op == TYTO_PLUGIN_OP_SCATTER_ADD
                   ? in1
               : op == TYTO_PLUGIN_OP_ONE_HOT ? in0
                                              : data;
  return tpc_dtype_int(x) ? x : data;
}

/* Element off of the indices read back, whichever dtype they have (the
 * 16-bit ones exactly as half.h reads them; an i64 beyond 2^53 may round,
 * but stays far outside any extent). */
static double element(const tpc_index_host *ix, int64_t off) {
  const void *p = ix->host;
  switch (ix->il->dtype) {
  case TYTO_PLUGIN_DTYPE_F16: return tpc_f16_to_f32(((const uint16_t *)p)[off]);
  case TYTO_PLUGIN_DTYPE_BF16:
    return tpc_bf16_to_f32(((const uint16_t *)p)[off]);
  case TYTO_PLUGIN_DTYPE_F32: return ((const float *)p)[off];
  case TYTO_PLUGIN_DTYPE_I32: return ((const int32_t *)p)[off];
  case TYTO_PLUGIN_DTYPE_I64: return (double)((const int64_t *)p)[off];
  default: return ((const double *)p)[off];
  }
}

/* tpc_index_scan; when keys is not NULL it receives each index and uoff
 * the offset of its position in the updates, whose strides from the
 * axis on are ustr. */
static int scan(const tpc_index_host *ix, const int64_t *ustr, int64_t *keys,
                int64_t *uoff, char *why, size_t why_size) {
  const tyto_plugin_layout *il = ix->il;
  const char *op = tpc_op_name(ix->op);
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t off = ix->origin, uo = 0, n = count_of(il);
  for (int64_t i = 0; i < n; i++) {
    double v = element(ix, off);
    if (v != floor(v) || isinf(v))
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: index %g at position %lld of the indices "
                      "(row-major) is not a whole number",
                      op, v, (long long)i);
    if (v < 0 || v >= (double)ix->extent)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: index %.0f at position %lld of the indices "
                      "(row-major) is out of range for axis %u of extent "
                      "%lld (expected 0 to %lld)",
                      op, v, (long long)i, (unsigned)ix->axis,
                      (long long)ix->extent, (long long)ix->extent - 1);
    if (keys != NULL) {
      keys[i] = (int64_t)v;
      uoff[i] = uo;
    }
    /* The next position, row-major. */
    for (uint32_t k = il->rank; k-- > 0;) {
      off += il->strides[k];
      if (ustr != NULL)
        uo += ustr[k];
      if (++idx[k] < il->shape[k])
        break;
      off -= idx[k] * il->strides[k];
      if (ustr != NULL)
        uo -= idx[k] * ustr[k];
      idx[k] = 0;
    }
  }
  return 0;
}

int tpc_index_scan(const tpc_index_host *ix, char *why, size_t why_size) {
  return scan(ix, NULL, NULL, NULL, why, why_size);
}

typedef struct keyed {
  int64_t key, q, uoff;
} keyed;

static int keyed_cmp(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  return a->q < b->q ? -1 : a->q > b->q;
}

int tpc_index_keys(const tpc_index_host *ix, const tyto_plugin_layout *ul,
                   int64_t **keys, char *why, size_t why_size) {
  int64_t nq = count_of(ix->il);
  int64_t *arr = malloc((size_t)nq * 2 * sizeof *arr);
  keyed *ks = malloc((size_t)nq * sizeof *ks);
  int code = 0;
  *keys = NULL;
  if (arr == NULL || ks == NULL)
    code = tpc_fail(why, why_size, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                    "scatter_add: out of host memory sorting %lld indices",
                    (long long)nq);
  else
    code = scan(ix, ul->strides + ix->axis, arr, arr + nq, why, why_size);
  if (code != 0) {
    free(arr);
    free(ks);
    return code;
  }
  for (int64_t i = 0; i < nq; i++)
    ks[i] = (keyed){arr[i], i, arr[nq + i]};
  qsort(ks, (size_t)nq, sizeof *ks, keyed_cmp);
  for (int64_t i = 0; i < nq; i++) {
    arr[i] = ks[i].key;
    arr[nq + i] = ks[i].uoff;
  }
  free(ks);
  *keys = arr;
  return 0;
}
