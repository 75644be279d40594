/*
 * Reductions planned for the GPU plugins (reduce_plan.h).
 */
#include "reduce_plan.h"

#include <string.h>

#include "common.h"
#include "text.h"

/* Elements a lane folds at least (GPU, CPU) when picking the lanes;
 * elements one work-item folds in sequence at most, and at least when
 * cutting chunks; the partial states' budget (bytes). */
#define RED_LANE_MIN 16
#define RED_LANE_MIN_CPU 1024
#define RED_MAX_SEQ 4096
#define RED_MIN_SEQ 256
#define RED_WS_CAP ((int64_t)64 << 20)

static int is_softmax(uint32_t op) {
  return op == TYTO_PLUGIN_OP_SOFTMAX || op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
}

static int is_arg(uint32_t op) {
  return op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
}

int tpc_reduce_op(uint32_t op) {
  return (op >= TYTO_PLUGIN_OP_SUM && op <= TYTO_PLUGIN_OP_NORM_L2) ||
         is_softmax(op);
}

int tpc_reduce_check(const tpc_operands *a, char *why, size_t why_size) {
  const char *name = tpc_op_name(a->op);
  int softmax = is_softmax(a->op);
  if (a->n_in != 1 || a->n_out != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected 1 input and 1 output, got %u and %u", name,
                    (unsigned)a->n_in, (unsigned)a->n_out);
  const tyto_plugin_layout *in = a->in[0], *out = a->out[0];
  uint32_t n = a->n_iattrs;
  const int64_t *ax = a->iattrs;
  if (softmax && n != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected the axis as the only integer attribute, "
                    "got %u integer attributes",
                    name, (unsigned)n);
  if (is_arg(a->op) && n != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected exactly one axis as integer attribute, got "
                    "%u axes",
                    name, (unsigned)n);
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < n; i++) {
    if (ax[i] < 0 || ax[i] >= (int64_t)in->rank)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: axis %lld is out of range for an input of rank %u "
                      "(axes are 0 to rank - 1)",
                      name, (long long)ax[i], (unsigned)in->rank);
    if (i > 0 && ax[i] == ax[i - 1])
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: axis %lld is repeated; each axis may be reduced "
                      "once",
                      name, (long long)ax[i]);
    if (i > 0 && ax[i] < ax[i - 1])
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: axes must be ascending, but axis %lld follows axis "
                      "%lld",
                      name, (long long)ax[i], (long long)ax[i - 1]);
    reduced[ax[i]] = 1;
  }
  int bad = out->rank != in->rank;
  tyto_plugin_layout want = *in;
  for (uint32_t d = 0; d < in->rank; d++) {
    want.shape[d] = reduced[d] && !softmax ? 1 : in->shape[d];
    bad |= !bad && out->shape[d] != want.shape[d];
  }
  if (bad) {
    char got[160], exp_[160];
    tpc_format_shape(out, got, sizeof got);
    tpc_format_shape(&want, exp_, sizeof exp_);
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: output shape %s should be %s (%s)", name, got, exp_,
                    softmax ? "the input's shape"
                            : "the input's, with each reduced axis kept at "
                              "extent 1");
  }
  if (is_arg(a->op) && in->shape[ax[0]] == 0)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: axis %lld has extent 0, and an empty axis has no "
                    "index of its extreme",
                    name, (long long)ax[0]);
  return 0;
}

/* Appends an axis (extent-1 axes carry nothing and are skipped). */
static void dims_add(tpc_reduce_dims *d, int64_t sh, int64_t xs, int64_t ys) {
  if (sh == 1)
    return;
  d->sh[d->rank] = sh;
  d->xs[d->rank] = xs;
  d->ys[d->rank] = ys;
  d->rank++;
}

/* |v|; strides are never INT64_MIN (the plugins bound their reach). */
static int64_t abs64(int64_t v) {
  return v < 0 ? -v : v;
}

/* a / b rounded up, for a >= 0 and b > 0, without overflow. */
static int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

/* Whether an axis of stride `outer` continues one of stride `inner` and
 * extent `extent` (outer == inner * extent, without overflow). */
static int continues(int64_t inner, int64_t extent, int64_t outer) {
  if (inner == 0)
    return outer == 0;
  if (inner == -1)
    return outer == -extent;
  return outer % inner == 0 && outer / inner == extent;
}

/* Orders the axes by input stride, fastest first (stable: equal strides
 * keep the layout's order), and merges an axis into the one before it
 * when it continues it (in input and, with `with_ys`, output strides). */
static void dims_simplify(tpc_reduce_dims *d, int with_ys) {
  for (int i = 1; i < d->rank; i++)
    for (int k = i; k > 0 && abs64(d->xs[k]) < abs64(d->xs[k - 1]); k--) {
      int64_t s = d->sh[k], x = d->xs[k], y = d->ys[k];
      d->sh[k] = d->sh[k - 1];
      d->xs[k] = d->xs[k - 1];
      d->ys[k] = d->ys[k - 1];
      d->sh[k - 1] = s;
      d->xs[k - 1] = x;
      d->ys[k - 1] = y;
    }
  int m = 0;
  for (int i = 1; i < d->rank; i++) {
    if (continues(d->xs[m], d->sh[m], d->xs[i]) &&
        (!with_ys || continues(d->ys[m], d->sh[m], d->ys[i]))) {
      d->sh[m] *= d->sh[i];
    } else {
      m++;
      d->sh[m] = d->sh[i];
      d->xs[m] = d->xs[i];
      d->ys[m] = d->ys[i];
    }
  }
  if (d->rank > 0)
    d->rank = m + 1;
}

void tpc_reduce_split(const tpc_operands *a, tpc_reduce_plan *p) {
  memset(p, 0, sizeof *p);
  p->op = a->op;
  p->softmax = is_softmax(a->op);
  p->logsm = a->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  const tyto_plugin_layout *in = a->in[0], *out = a->out[0];
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < a->n_iattrs; i++)
    reduced[a->iattrs[i]] = 1;
  p->nout = 1;
  p->count = 1;
  for (uint32_t d = 0; d < in->rank; d++) {
    if (!reduced[d]) {
      p->nout *= in->shape[d];
      dims_add(&p->kept, in->shape[d], in->strides[d], out->strides[d]);
    } else {
      p->count *= in->shape[d];
      dims_add(&p->red, in->shape[d], in->strides[d], 0);
      if (p->softmax)
        p->sy = out->strides[d];
    }
  }
  dims_simplify(&p->kept, 1);
  if (p->softmax) {
    /* The axis as it is (its stride is unused at extent 1). */
    p->red.rank = 1;
    p->red.sh[0] = p->count;
    p->red.xs[0] = in->strides[a->iattrs[0]];
  } else {
    dims_simplify(&p->red, 0);
  }
}

/* The smallest k with 2^k >= n (n >= 1). */
static int log2_ceil(int64_t n) {
  int k = 0;
  while (k < 62 && ((int64_t)1 << k) < n)
    k++;
  return k;
}

/* Splits a group of at most 2^wgl work-items into Lx outputs by Ly lanes
 * for nout outputs of count items each, each lane folding at least
 * lane_min items where it can (fewer lanes, fewer tree steps). kept_fast:
 * neighbouring outputs are neighbouring elements while the reduced ones
 * are not, so 32 outputs share a group where the group is that large. */
static tpc_reduce_grid plan_grid(int wgl, int64_t nout, int64_t count,
                                 int64_t lane_min, int kept_fast) {
  int lyl_max = kept_fast ? (wgl > 5 ? wgl - 5 : 0) : wgl;
  int64_t per = ceil_div(count, lane_min);
  int want_y = log2_ceil(per > 1 ? per : 1);
  int want_x = log2_ceil(nout > 1 ? nout : 1);
  int lyl = want_y < lyl_max ? want_y : lyl_max;
  int lxl = want_x < wgl - lyl ? want_x : wgl - lyl;
  /* Few outputs: the spare work-items become lanes. */
  if (want_y > lyl)
    lyl = want_y < wgl - lxl ? want_y : wgl - lxl;
  tpc_reduce_grid g;
  g.lxs = lxl;
  g.lanes = (size_t)1 << (lxl + lyl);
  g.tiles = ceil_div(nout, (int64_t)1 << lxl);
  return g;
}

/* Bytes of nout * chunks partial states: two elements and an index each,
 * and room to align the indices. */
static int64_t ws_bytes(int64_t states, size_t elem) {
  return states * (2 * (int64_t)elem + 8) + 8;
}

void tpc_reduce_cut(tpc_reduce_plan *p, const tpc_reduce_device *dev,
                    size_t elem) {
  const int wgl = dev->wgl, cpu = dev->cpu;
  int kept_fast = p->kept.rank > 0 && abs64(p->kept.xs[0]) == 1 &&
                  !(p->red.rank > 0 && abs64(p->red.xs[0]) == 1);
  p->grid = plan_grid(wgl, p->nout, p->count,
                      cpu ? RED_LANE_MIN_CPU : RED_LANE_MIN, kept_fast);
  int64_t ly = (int64_t)(p->grid.lanes >> p->grid.lxs);
  p->chunks = 1;
  p->chunk = p->count;
  p->ws_bytes = 0;
  if (cpu)
    p->span = ceil_div(p->count, ly);
  if (p->softmax || p->count < 2 || p->nout == 0)
    return;
  /* Chunks: enough groups to fill the device, each lane folding at least
   * RED_MIN_SEQ and at most RED_MAX_SEQ elements in sequence, the partial
   * states within RED_WS_CAP bytes. */
  int64_t per_lane = ceil_div(p->count, ly);
  int64_t target = 8 * (dev->units > 0 ? dev->units : 1);
  int64_t ch = 1;
  if (p->grid.tiles < target) {
    int64_t want = ceil_div(target, p->grid.tiles);
    int64_t most = ceil_div(per_lane, RED_MIN_SEQ);
    ch = want < most ? want : most;
  }
  int64_t need = ceil_div(per_lane, RED_MAX_SEQ);
  if (ch < need)
    ch = need;
  int64_t cap =
      p->nout > RED_WS_CAP / 32 ? 1 : RED_WS_CAP / ws_bytes(p->nout, elem);
  if (ch > cap)
    ch = cap;
  if (ch > dev->max_chunks)
    ch = dev->max_chunks;
  if (ch < 2)
    return;
  p->chunk = ceil_div(p->count, ch);
  p->chunks = ceil_div(p->count, p->chunk);
  if (p->chunks < 2) {
    p->chunks = 1;
    p->chunk = p->count;
    return;
  }
  if (cpu)
    p->span = ceil_div(p->chunk, ly);
  p->mgrid = plan_grid(wgl, p->nout, p->chunks, RED_LANE_MIN, 0);
  p->ws_bytes = (uint64_t)ws_bytes(p->nout * p->chunks, elem);
}
