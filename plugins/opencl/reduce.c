/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX, as the CPU plugin
 * (plugins/cpu/reduce.c) defines them, over any strided layouts.
 *
 * Prepare splits the input's axes into kept ones (one output element per
 * index) and reduced ones, drops extent-1 axes, orders each set by input
 * stride (fastest first) and merges neighbours that step as one axis. A
 * work-group of at most 256 work-items handles Lx outputs with Ly lanes
 * each: the lanes share out their output's reduced elements and meet in a
 * tree in local memory. Lanes get at least 16 elements each where the
 * reduction is long enough, so short reductions over many outputs run one
 * work-item per output. When the kept axis is the contiguous one and the
 * reduced ones are not (a sum over the batch axis of [N, C]), 32 outputs
 * share a group, so neighbouring work-items read neighbouring elements.
 *
 * A long reduction with few outputs is also cut into chunks, one group each
 * (dimension 1 of the range), whose partial states go to the workspace; a
 * second pass of the same kernel merges them. Chunks also bound the
 * elements one work-item folds in sequence (4096), so f32 sums, which
 * accumulate in f32 as a GPU wants, stay close to pairwise summation. The
 * cut depends on the shapes and the device alone, so results repeat bit for
 * bit.
 *
 * On a GPU a group's lanes interleave (lane j reads elements j, j + Ly,
 * ...: coalesced); on a CPU, which runs a group's work-items one after the
 * other, each lane streams through a block of its own and folds at least
 * 1024 elements, since every barrier costs a pass over the group.
 *
 * One program per dtype holds two kernels, tyto_reduce (the op is an
 * argument, so the ten reductions share one compiled body; the switch is
 * uniform across the group) and tyto_softmax. NORM_L2 scales by the
 * largest magnitude (LAPACK's dnrm2) and LOG_SUM_EXP and softmax keep a
 * running maximum, so none overflows early. NaN: MAX/MIN and every sum
 * propagate it; ARGMAX/ARGMIN return the index of the first NaN, otherwise
 * of the first extreme.
 *
 * Softmax rows run whole in one work-group (no chunks), so an output that
 * is its input (same layout) is read before it is written.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "layout.h"
#include "../common/common.h"

/* Work-group size at most; elements a lane folds at least (GPU, CPU) when
 * picking the lanes; elements one work-item folds in sequence at most, and
 * at least when cutting chunks; the partial states' budget (bytes). */
#define RED_WG 256
#define RED_LANE_MIN 16
#define RED_LANE_MIN_CPU 1024
#define RED_MAX_SEQ 4096
#define RED_MIN_SEQ 256
#define RED_WS_CAP ((int64_t)64 << 20)
/* Work-groups along dimension 0 of one enqueue at most. */
#define RED_MAX_GROUPS ((int64_t)1 << 20)

#define source_0 tpc_reduce_folds

static const char source_1[] =
    "/* The result of state (a, b, i) over count elements. */\n"
    "inline T red_final(int op, T a, T b, long i, long count) {\n"
    "  switch (op) { RED_OPS(RED_CASE_F) }\n"
    "  return 0;\n"
    "}\n"
    "\n"
    "/* Work-item l = ly * Lx + lx of a group, Lx = 2^lxs: lx picks one of\n"
    " * the group's Lx outputs, ly one of the output's Ly lanes. */\n"
    "#define RED_LANES \\\n"
    "  const long L = get_local_size(0), l = get_local_id(0); \\\n"
    "  const long Lx = 1L << lxs, Ly = L >> lxs; \\\n"
    "  const long lx = l & (Lx - 1), ly = l >> lxs;\n"
    "/* The items [rb_, re_) of n that lane ly visits, with step rq_: every\n"
    " * Ly-th (span 0: neighbouring lanes read neighbouring elements, as a\n"
    " * GPU wants) or a block of span items (each work-item streams through\n"
    " * memory of its own, as a CPU wants). */\n"
    "#define RED_SPAN(n, span) \\\n"
    "  const long rq_ = (span) > 0 ? 1 : Ly; \\\n"
    "  const long rb_ = (span) > 0 ? ly * (span) : ly; \\\n"
    "  const long re_ = \\\n"
    "      (span) > 0 ? min((long)(n), rb_ + (span)) : (long)(n);\n"
    "/* The lanes' states meet in a tree in local memory; lane 0 ends with\n"
    " * the merged state. M merges (a2, b2, i2) into (a, b, i). */\n"
    "#define RED_TREE(M) \\\n"
    "  la[l] = a; lb[l] = b; li[l] = i; \\\n"
    "  for (long h = Ly >> 1; h > 0; h >>= 1) { \\\n"
    "    barrier(CLK_LOCAL_MEM_FENCE); \\\n"
    "    if (ly < h) { \\\n"
    "      const T a2 = la[l + h * Lx], b2 = lb[l + h * Lx]; \\\n"
    "      const long i2 = li[l + h * Lx]; \\\n"
    "      M \\\n"
    "      la[l] = a; lb[l] = b; li[l] = i; \\\n"
    "    } \\\n"
    "  }\n"
    "\n"
    "/* Reduction `op` for outputs o = (tile0 + group) * Lx + lx, row-major\n"
    " * over the kept dims ksh (input strides kxs, output strides kys).\n"
    " * Pass 1 (merge = 0) folds chunk c = get_group_id(1): the reduced\n"
    " * linear indices [c * chunk, c * chunk + chunk) of count, over dims\n"
    " * rsh with strides rxs. With one chunk it writes the result over n\n"
    " * elements; else it writes state p = o * chunks + c to w[2p],\n"
    " * w[2p + 1] and wi[p]. Pass 2 (merge = 1, one chunk) merges each\n"
    " * output's count states from there and writes the result. */\n"
    "__kernel void tyto_reduce(int op, int merge, __global const T *x,\n"
    "                          long xbase, long8 ksh, long8 kxs, long8 kys,\n"
    "                          int krank, long nout, long tile0, long8 rsh,\n"
    "                          long8 rxs, int rrank, long count, long chunk,\n"
    "                          long n, int lxs, long span, __global T *y,\n"
    "                          long ybase, __global T *w, long wbase,\n"
    "                          __global long *wi, long wibase,\n"
    "                          __local T *la, __local T *lb,\n"
    "                          __local long *li) {\n"
    "  RED_LANES\n"
    "  const long c = get_group_id(1), nch = get_num_groups(1);\n"
    "  const long o = (tile0 + (long)get_group_id(0)) * Lx + lx;\n"
    "  T a = 0, b = 0;\n"
    "  long i = 0;\n"
    "  switch (op) { RED_OPS(RED_CASE_I) }\n"
    "  if (o < nout && !merge) {\n"
    "    const long r0 = c * chunk;\n"
    "    RED_SPAN(min(count - r0, chunk), span)\n"
    "    const long xo = xbase + tyto_offset(o, ksh, kxs, krank);\n"
    "    for (long k = rb_; k < re_; k += rq_) {\n"
    "      const long r = r0 + k;\n"
    "      const long at = rrank <= 1 ? r * rxs.s0\n"
    "                                 : tyto_offset(r, rsh, rxs, rrank);\n"
    "      const T v = x[xo + at];\n"
    "      switch (op) { RED_OPS(RED_CASE_E) }\n"
    "    }\n"
    "  } else if (o < nout) {\n"
    "    for (long k = ly; k < count; k += Ly) {\n"
    "      const long p = o * count + k;\n"
    "      const T a2 = w[wbase + 2 * p], b2 = w[wbase + 2 * p + 1];\n"
    "      const long i2 = wi[wibase + p];\n"
    "      switch (op) { RED_OPS(RED_CASE_M) }\n"
    "    }\n"
    "  }\n"
    "  RED_TREE(switch (op) { RED_OPS(RED_CASE_M) })\n"
    "  if (ly == 0 && o < nout) {\n"
    "    if (nch == 1) {\n"
    "      y[ybase + tyto_offset(o, ksh, kys, krank)] =\n"
    "          red_final(op, a, b, i, n);\n"
    "    } else {\n"
    "      const long p = o * nch + c;\n"
    "      w[wbase + 2 * p] = a;\n"
    "      w[wbase + 2 * p + 1] = b;\n"
    "      wi[wibase + p] = i;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n";
static const char source_2[] =
    "/* Softmax (logsm = 0) or log-softmax (1) of rows o = (tile0 + group) *\n"
    " * Lx + lx, along an axis of extent n (input stride sx, output stride\n"
    " * sy): the row's maximum and sum of exp as for log-sum-exp, then each\n"
    " * element. A row with a NaN or an infinite maximum is all NaN, as\n"
    " * exp(x - max) makes it. The output may be the input itself: a row is\n"
    " * read whole before the barriers that precede its writes. */\n"
    "__kernel void tyto_softmax(__global const T *x, long xbase, long8 ksh,\n"
    "                           long8 kxs, long8 kys, int krank, long nout,\n"
    "                           long tile0, long n, long sx, long sy,\n"
    "                           int lxs, long span, int logsm,\n"
    "                           __global T *y, long ybase, __local T *la,\n"
    "                           __local T *lb, __local long *li) {\n"
    "  RED_LANES\n"
    "  RED_SPAN(n, span)\n"
    "  const long o = (tile0 + (long)get_group_id(0)) * Lx + lx;\n"
    "  T a = 0, b = 0;\n"
    "  long i = 0;\n"
    "  LSE_I\n"
    "  long xo = 0, yo = 0;\n"
    "  if (o < nout) {\n"
    "    xo = xbase + tyto_offset(o, ksh, kxs, krank);\n"
    "    yo = ybase + tyto_offset(o, ksh, kys, krank);\n"
    "    for (long r = rb_; r < re_; r += rq_) {\n"
    "      const T v = x[xo + r * sx];\n"
    "      LSE_E\n"
    "    }\n"
    "  }\n"
    "  RED_TREE(LSE_M)\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  const T m = la[lx], s = lb[lx];\n"
    "  if (o < nout) {\n"
    "    const int bad = m != m || isinf(m);\n"
    "    const T ls = log(s);\n"
    "    for (long r = rb_; r < re_; r += rq_) {\n"
    "      const T v = x[xo + r * sx];\n"
    "      y[yo + r * sy] = bad      ? (T)NAN\n"
    "                       : logsm ? (v - m) - ls\n"
    "                               : exp(v - m) / s;\n"
    "    }\n"
    "  }\n"
    "}\n";

/* The program: one source for every kernel of the family (ISO C caps
 * string literals at 4095 characters, hence the pieces). */
static const char *const source_parts[] = {source_0, source_1, source_2};

/* Axes of one side of the split, fastest first: extents, input strides and
 * (kept axes) output strides. */
typedef struct red_dims {
  int rank;
  int64_t sh[TYTO_PLUGIN_MAX_RANK], xs[TYTO_PLUGIN_MAX_RANK],
      ys[TYTO_PLUGIN_MAX_RANK];
} red_dims;

/* A planned launch: groups of `lanes` work-items, each Lx = 2^lxs outputs
 * by Ly = lanes / Lx lanes; `tiles` groups cover the outputs. */
typedef struct red_grid {
  int lxs;
  size_t lanes;
  int64_t tiles;
} red_grid;

typedef struct red_impl {
  cl_kernel kernel; /* tyto_reduce (both passes) or tyto_softmax */
  uint32_t op;
  int softmax, logsm;
  red_dims kept, red;
  int64_t nout, count;  /* outputs (softmax: rows), elements of each */
  int64_t chunk, chunks; /* pass 1 cuts each output's elements so */
  int64_t sy;            /* softmax: output stride along the axis */
  int64_t span; /* elements of a lane's block; 0: lanes interleave */
  red_grid grid, mgrid; /* pass 1 (softmax), pass 2 */
} red_impl;

static int owns(uint32_t op) {
  return (op >= TYTO_PLUGIN_OP_SUM && op <= TYTO_PLUGIN_OP_NORM_L2) ||
         op == TYTO_PLUGIN_OP_SOFTMAX || op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
}

static int is_softmax(uint32_t op) {
  return op == TYTO_PLUGIN_OP_SOFTMAX || op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
}

static int is_arg(uint32_t op) {
  return op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
}

/* Checks the operands, the axes (iattrs) and the output's shape, as the
 * CPU plugin does. */
static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *name = ocl_op_name(d->op);
  int softmax = is_softmax(d->op);
  if (d->n_in != 1 || d->n_out != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected 1 input and 1 output, got %u and %u", name,
                     (unsigned)d->n_in, (unsigned)d->n_out);
  const tyto_plugin_layout *in = &d->in[0].l, *out = &d->out[0].l;
  uint32_t n = d->d->n_iattrs;
  const int64_t *ax = d->d->iattrs;
  if (softmax && n != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected the axis as the only integer attribute, "
                     "got %u integer attributes",
                     name, (unsigned)n);
  if (is_arg(d->op) && n != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected exactly one axis as integer attribute, got "
                     "%u axes",
                     name, (unsigned)n);
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < n; i++) {
    if (ax[i] < 0 || ax[i] >= (int64_t)in->rank)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: axis %lld is out of range for an input of rank %u "
                       "(axes are 0 to rank - 1)",
                       name, (long long)ax[i], (unsigned)in->rank);
    if (i > 0 && ax[i] == ax[i - 1])
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: axis %lld is repeated; each axis may be reduced "
                       "once",
                       name, (long long)ax[i]);
    if (i > 0 && ax[i] < ax[i - 1])
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: axes must be ascending, but axis %lld follows axis "
                       "%lld",
                       name, (long long)ax[i], (long long)ax[i - 1]);
    reduced[ax[i]] = 1;
  }
  int bad = out->rank != in->rank;
  tyto_plugin_layout want = *in;
  for (uint32_t a = 0; a < in->rank; a++) {
    want.shape[a] = reduced[a] && !softmax ? 1 : in->shape[a];
    bad |= !bad && out->shape[a] != want.shape[a];
  }
  if (bad) {
    char got[160], exp_[160];
    ocl_format_shape(out, got, sizeof got);
    ocl_format_shape(&want, exp_, sizeof exp_);
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: output shape %s should be %s (%s)", name, got, exp_,
                     softmax ? "the input's shape"
                             : "the input's, with each reduced axis kept at "
                               "extent 1");
  }
  if (is_arg(d->op) && in->shape[ax[0]] == 0)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: axis %lld has extent 0, and an empty axis has no "
                     "index of its extreme",
                     name, (long long)ax[0]);
  return NULL;
}

/* Appends an axis (extent-1 axes carry nothing and are skipped). */
static void dims_add(red_dims *d, int64_t sh, int64_t xs, int64_t ys) {
  if (sh == 1)
    return;
  d->sh[d->rank] = sh;
  d->xs[d->rank] = xs;
  d->ys[d->rank] = ys;
  d->rank++;
}

/* |v|; strides are never INT64_MIN (kernels.c bounds their reach). */
static int64_t abs64(int64_t v) { return v < 0 ? -v : v; }

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
static void dims_simplify(red_dims *d, int with_ys) {
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
static red_grid plan_grid(int wgl, int64_t nout, int64_t count,
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
  red_grid g;
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

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  const tyto_plugin_host *host = OCL_HOST(dev);
  red_impl *r = calloc(1, sizeof *r);
  if (r == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = r;
  r->op = d->op;
  r->softmax = is_softmax(d->op);
  r->logsm = d->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  const tyto_plugin_layout *in = &d->in[0].l, *out = &d->out[0].l;
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < d->d->n_iattrs; i++)
    reduced[d->d->iattrs[i]] = 1;
  r->nout = 1;
  r->count = 1;
  for (uint32_t a = 0; a < in->rank; a++) {
    if (!reduced[a]) {
      r->nout *= in->shape[a];
      dims_add(&r->kept, in->shape[a], in->strides[a], out->strides[a]);
    } else {
      r->count *= in->shape[a];
      dims_add(&r->red, in->shape[a], in->strides[a], 0);
      if (r->softmax)
        r->sy = out->strides[a];
    }
  }
  dims_simplify(&r->kept, 1);
  if (r->softmax) {
    /* The axis as it is (its stride is unused at extent 1). */
    r->red.rank = 1;
    r->red.sh[0] = r->count;
    r->red.xs[0] = in->strides[d->d->iattrs[0]];
  } else {
    dims_simplify(&r->red, 0);
  }
  char *source = ocl_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  tyto_plugin_error *e =
      ocl_kernel_new(dev, d->dtype, source, NULL,
                     r->softmax ? "tyto_softmax" : "tyto_reduce", &r->kernel);
  free(source);
  if (e != NULL)
    return e;
  /* The group size: at most RED_WG, what the kernel allows and the
   * device's limit along dimension 0. */
  size_t wg = 0, items[16] = {0}; /* CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS */
  cl_device_type type = 0;
  const char *call = "clGetKernelWorkGroupInfo";
  cl_int err = clGetKernelWorkGroupInfo(r->kernel, dev->info->id,
                                        CL_KERNEL_WORK_GROUP_SIZE, sizeof wg,
                                        &wg, NULL);
  if (err == CL_SUCCESS) {
    call = "clGetDeviceInfo";
    err = clGetDeviceInfo(dev->info->id, CL_DEVICE_MAX_WORK_ITEM_SIZES,
                          sizeof items, items, NULL);
  }
  if (err == CL_SUCCESS)
    err = clGetDeviceInfo(dev->info->id, CL_DEVICE_TYPE, sizeof type, &type,
                          NULL);
  if (err != CL_SUCCESS)
    return ocl_error_cl(host, call, err,
                        "reading the work-group limits of the %s kernel on "
                        "\"%s\"",
                        ocl_op_name(d->op), dev->info->name);
  if (items[0] < wg)
    wg = items[0];
  int wgl = 0;
  while (((size_t)2 << wgl) <= wg && ((size_t)2 << wgl) <= RED_WG)
    wgl++;
  /* A CPU runs a group's work-items one after the other: each streams
   * through a block of its own, and lanes fold more elements each, since
   * every barrier costs a pass over the group. A GPU wants neighbouring
   * work-items at neighbouring elements. */
  int cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  int kept_fast = r->kept.rank > 0 && abs64(r->kept.xs[0]) == 1 &&
                  !(r->red.rank > 0 && abs64(r->red.xs[0]) == 1);
  r->grid = plan_grid(wgl, r->nout, r->count,
                      cpu ? RED_LANE_MIN_CPU : RED_LANE_MIN, kept_fast);
  int64_t ly = (int64_t)(r->grid.lanes >> r->grid.lxs);
  r->chunks = 1;
  r->chunk = r->count;
  if (cpu)
    r->span = ceil_div(r->count, ly);
  if (r->softmax || r->count < 2 || r->nout == 0)
    return NULL;
  /* Chunks: enough work-groups to fill the device, each lane folding at
   * least RED_MIN_SEQ and at most RED_MAX_SEQ elements in sequence, the
   * partial states within RED_WS_CAP bytes. */
  int64_t per_lane = ceil_div(r->count, ly);
  int64_t target = 8 * (int64_t)(dev->info->compute_units > 0
                                     ? dev->info->compute_units
                                     : 1);
  int64_t ch = 1;
  if (r->grid.tiles < target) {
    int64_t want = ceil_div(target, r->grid.tiles);
    int64_t most = ceil_div(per_lane, RED_MIN_SEQ);
    ch = want < most ? want : most;
  }
  int64_t need = ceil_div(per_lane, RED_MAX_SEQ);
  if (ch < need)
    ch = need;
  int64_t cap = r->nout > RED_WS_CAP / 32
                    ? 1
                    : RED_WS_CAP / ws_bytes(r->nout, d->elem);
  if (ch > cap)
    ch = cap;
  if (ch < 2)
    return NULL;
  r->chunk = ceil_div(r->count, ch);
  r->chunks = ceil_div(r->count, r->chunk);
  if (r->chunks < 2) {
    r->chunks = 1;
    r->chunk = r->count;
    return NULL;
  }
  if (cpu)
    r->span = ceil_div(r->chunk, ly);
  r->mgrid = plan_grid(wgl, r->nout, r->chunks, RED_LANE_MIN, 0);
  k->workspace_bytes = (uint64_t)ws_bytes(r->nout * r->chunks, d->elem);
  return NULL;
}

static void release(tyto_plugin_kernel *k) {
  red_impl *r = k->impl;
  if (r == NULL)
    return;
  if (r->kernel != NULL)
    clReleaseKernel(r->kernel);
  free(r);
  k->impl = NULL;
}

/* Extents (unused entries 1) or strides (unused 0) as a long8. */
static cl_long8 long8_of(const red_dims *d, const int64_t *v, int64_t fill) {
  cl_long8 r;
  for (int i = 0; i < 8; i++)
    r.s[i] = i < d->rank ? v[i] : fill;
  return r;
}

/* The kernels' three local buffers: states a, b and indices i. */
static void arg_locals(ocl_args *a, size_t lanes, size_t elem) {
  ocl_args_put(a, lanes * elem, NULL);
  ocl_args_put(a, lanes * elem, NULL);
  ocl_args_put(a, lanes * sizeof(cl_long), NULL);
}

/* Enqueues the grid's groups, at most RED_MAX_GROUPS at a time, setting
 * argument `tile_arg` (tile0) for each batch; dimension 1 has `chunks`
 * groups of one work-item. */
static tyto_plugin_error *enqueue_tiles(tyto_plugin_device *dev,
                                        tyto_plugin_stream *s, cl_kernel kern,
                                        const red_grid *g, cl_uint tile_arg,
                                        int64_t chunks, const char *what) {
  for (int64_t t0 = 0; t0 < g->tiles; t0 += RED_MAX_GROUPS) {
    int64_t n = g->tiles - t0 < RED_MAX_GROUPS ? g->tiles - t0
                                               : RED_MAX_GROUPS;
    cl_long tile0 = t0;
    tyto_plugin_error *e = ocl_set_arg(dev, kern, tile_arg, sizeof tile0,
                                       &tile0);
    if (e != NULL)
      return e;
    size_t global[2] = {(size_t)n * g->lanes, (size_t)chunks};
    size_t local[2] = {g->lanes, 1};
    if ((e = ocl_enqueue(dev, s, kern, 2, global, local, what)) != NULL)
      return e;
  }
  return NULL;
}

/* The arguments both kernels take in a row: x, its origin, the kept axes
 * (extents, input and output strides, rank), nout, then tile0 (0), whose
 * index goes to *tile_arg. */
static void arg_kept(ocl_args *a, const red_impl *r, const ocl_arg *x,
                     cl_uint *tile_arg) {
  cl_long8 ksh = long8_of(&r->kept, r->kept.sh, 1),
           kxs = long8_of(&r->kept, r->kept.xs, 0),
           kys = long8_of(&r->kept, r->kept.ys, 0);
  ocl_args_mem(a, x);
  ocl_args_put(a, sizeof ksh, &ksh);
  ocl_args_put(a, sizeof kxs, &kxs);
  ocl_args_put(a, sizeof kys, &kys);
  ocl_args_int(a, r->kept.rank);
  ocl_args_long(a, r->nout);
  *tile_arg = a->next;
  ocl_args_long(a, 0);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  red_impl *r = k->impl;
  size_t elem = k->desc.elem;
  cl_long8 rsh = long8_of(&r->red, r->red.sh, 1),
           rxs = long8_of(&r->red, r->red.xs, 0);
  cl_int rrank = r->red.rank, lxs = r->grid.lxs;
  cl_long count = r->count, span = r->span;
  cl_uint tile_arg;
  ocl_args a = OCL_ARGS(dev, r->kernel);
  if (r->softmax) {
    cl_long sx = r->red.xs[0], sy = r->sy;
    cl_int logsm = r->logsm;
    arg_kept(&a, r, in, &tile_arg);
    ocl_args_put(&a, sizeof count, &count);
    ocl_args_put(&a, sizeof sx, &sx);
    ocl_args_put(&a, sizeof sy, &sy);
    ocl_args_put(&a, sizeof lxs, &lxs);
    ocl_args_put(&a, sizeof span, &span);
    ocl_args_put(&a, sizeof logsm, &logsm);
    ocl_args_mem(&a, out);
    arg_locals(&a, r->grid.lanes, elem);
    if (a.e != NULL)
      return a.e;
    return enqueue_tiles(dev, s, r->kernel, &r->grid, tile_arg, 1,
                         r->logsm ? "log_softmax kernel" : "softmax kernel");
  }
  /* Partial states: 2 * states elements from the workspace's origin, then
   * the indices from the next multiple of 8 bytes. Without chunks nothing
   * reads or writes them (ws->mem is NULL, an allowed argument). */
  cl_long wibase = 0;
  if (r->chunks > 1)
    wibase = (cl_long)(((uint64_t)(ws->origin + 2 * r->nout * r->chunks) *
                            elem +
                        7) /
                       8);
  cl_int op = (cl_int)r->op, merge = 0;
  cl_long chunk = r->chunk;
  ocl_args_put(&a, sizeof op, &op);
  ocl_args_put(&a, sizeof merge, &merge);
  arg_kept(&a, r, in, &tile_arg);
  ocl_args_put(&a, sizeof rsh, &rsh);
  ocl_args_put(&a, sizeof rxs, &rxs);
  ocl_args_put(&a, sizeof rrank, &rrank);
  cl_uint count_arg = a.next;
  ocl_args_put(&a, sizeof count, &count);
  ocl_args_put(&a, sizeof chunk, &chunk);
  ocl_args_put(&a, sizeof count, &count); /* n */
  cl_uint lxs_arg = a.next;
  ocl_args_put(&a, sizeof lxs, &lxs);
  ocl_args_put(&a, sizeof span, &span);
  ocl_args_mem(&a, out);
  ocl_args_mem(&a, ws);
  ocl_args_put(&a, sizeof ws->mem, &ws->mem);
  ocl_args_put(&a, sizeof wibase, &wibase);
  arg_locals(&a, r->grid.lanes, elem);
  if (a.e != NULL)
    return a.e;
  tyto_plugin_error *e = enqueue_tiles(dev, s, r->kernel, &r->grid, tile_arg,
                                       r->chunks, "reduction kernel");
  if (e != NULL || r->chunks < 2)
    return e;
  /* Pass 2: the chunks' states of each output, merged in one group. The
   * arguments not set again are the same or unused. */
  cl_long nch = r->chunks, span0 = 0;
  cl_int mlxs = r->mgrid.lxs;
  merge = 1;
  a.next = 1;
  ocl_args_put(&a, sizeof merge, &merge);
  ocl_args_put(&a, sizeof ws->mem, &ws->mem); /* x: unused */
  a.next = count_arg;
  ocl_args_put(&a, sizeof nch, &nch);
  ocl_args_put(&a, sizeof nch, &nch);
  a.next = lxs_arg;
  ocl_args_put(&a, sizeof mlxs, &mlxs);
  ocl_args_put(&a, sizeof span0, &span0);
  a.next += 6;
  arg_locals(&a, r->mgrid.lanes, elem);
  if (a.e != NULL)
    return a.e;
  return enqueue_tiles(dev, s, r->kernel, &r->mgrid, tile_arg, 1,
                       "reduction merge kernel");
}

const ocl_family ocl_family_reduce = {"reduce", owns,   check,
                                      prepare,  launch, release};
