/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX, as the CPU plugin
 * (plugins/cpu/reduce.c) defines them, over any strided layouts: the
 * OpenCL plugin's design (opencl/reduce.c) on CUDA, with the same fold
 * rules (plugins/common's tpc_reduce_folds).
 *
 * Prepare splits the input's axes into kept ones (one output element per
 * index) and reduced ones, drops extent-1 axes, orders each set by input
 * stride (fastest first) and merges neighbours that step as one axis. A
 * block of at most 256 threads handles Lx outputs with Ly lanes each: the
 * lanes interleave over their output's reduced elements (neighbouring
 * threads read neighbouring elements) and meet in a tree in shared memory,
 * in a fixed order. Lanes get at least 16 elements each where the
 * reduction is long enough, so short reductions over many outputs run one
 * thread per output. When the kept axis is the contiguous one and the
 * reduced ones are not (a sum over the batch axis of [N, C]), 32 outputs
 * share a block, so a warp reads neighbouring elements.
 *
 * A long reduction with few outputs is also cut into chunks, one block
 * each (grid dimension y), whose partial states go to the workspace; a
 * second pass of the same kernel merges them. Chunks bound the elements
 * one thread folds in sequence (4096), so f32 sums stay close to pairwise
 * summation. The cut depends on the shapes and the device alone, so results
 * repeat bit for bit.
 *
 * Softmax rows run whole in one block (no chunks), so an output that is
 * its input (same layout) is read before it is written.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"

#define RED_WG 256
#define RED_LANE_MIN 16
#define RED_MAX_SEQ 4096
#define RED_MIN_SEQ 256
#define RED_WS_CAP ((int64_t)64 << 20)
/* Blocks along x of one launch at most; chunks along y at most. */
#define RED_MAX_GROUPS ((int64_t)1 << 20)
#define RED_MAX_CHUNKS 65535

static const char prelude[] = "#define INFINITY __int_as_float(0x7f800000)\n"
                              "#define NAN __int_as_float(0x7fc00000)\n";

static const char source_1[] =
    "/* The result of state (a, b, i) over count elements. */\n"
    "__device__ T red_final(int op, T a, T b, i64 i, i64 count) {\n"
    "  switch (op) { RED_OPS(RED_CASE_F) }\n"
    "  return 0;\n"
    "}\n"
    "#define RED_LANES \\\n"
    "  const i64 L = blockDim.x, l = threadIdx.x; \\\n"
    "  const i64 Lx = 1LL << lxs, Ly = L >> lxs; \\\n"
    "  const i64 lx = l & (Lx - 1), ly = l >> lxs; \\\n"
    "  (void)L;\n"
    "/* Lane ly visits items [ly, n) with step Ly. */\n"
    "#define RED_TREE(M) \\\n"
    "  la[l] = a; lb[l] = b; li[l] = i; \\\n"
    "  for (i64 h = Ly >> 1; h > 0; h >>= 1) { \\\n"
    "    __syncthreads(); \\\n"
    "    if (ly < h) { \\\n"
    "      const T a2 = la[l + h * Lx], b2 = lb[l + h * Lx]; \\\n"
    "      const i64 i2 = li[l + h * Lx]; \\\n"
    "      M \\\n"
    "      la[l] = a; lb[l] = b; li[l] = i; \\\n"
    "    } \\\n"
    "  }\n"
    "\n"
    "/* Reduction `op` for outputs o = (tile0 + blockIdx.x) * Lx + lx, over\n"
    " * the kept dims kx (input strides) / ky (output strides). Pass 1\n"
    " * (merge = 0) folds chunk c = blockIdx.y: reduced indices [c * chunk,\n"
    " * c * chunk + chunk) of count, over dims rd. With one chunk it writes\n"
    " * the result over n elements; else state p = o * chunks + c to w[2p],\n"
    " * w[2p + 1] and wi[p]. Pass 2 (merge = 1, one chunk) merges each\n"
    " * output's count states and writes the result. */\n"
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "tyto_reduce(int op, int merge, const T *x, tcu_dims kx, tcu_dims ky,\n"
    "            i64 nout, i64 tile0, tcu_dims rd, i64 count, i64 chunk,\n"
    "            i64 n, int lxs, T *y, T *w, i64 *wi) {\n"
    "  __shared__ T la[256], lb[256];\n"
    "  __shared__ i64 li[256];\n"
    "  RED_LANES\n"
    "  const i64 c = blockIdx.y, nch = gridDim.y;\n"
    "  const i64 o = (tile0 + (i64)blockIdx.x) * Lx + lx;\n"
    "  T a = 0, b = 0;\n"
    "  i64 i = 0;\n"
    "  switch (op) { RED_OPS(RED_CASE_I) }\n"
    "  if (o < nout && !merge) {\n"
    "    const i64 r0 = c * chunk;\n"
    "    const i64 m = count - r0 < chunk ? count - r0 : chunk;\n"
    "    const i64 xo = tyto_offset(o, kx);\n"
    "    if (rd.rank == 2) {\n"
    "      /* Two reduced dims (a sum over N, H, W of NCHW keeping C):\n"
    "       * the index pair steps by Ly without a division per element.\n"
    "       * Same elements, same order as tyto_offset(). */\n"
    "      const i64 in0 = rd.shape[0], s0 = rd.str[0], s1 = rd.str[1];\n"
    "      const i64 dq = Ly / in0, dr = Ly - dq * in0;\n"
    "      i64 q = (r0 + ly) / in0, rem = r0 + ly - q * in0;\n"
    "      for (i64 k = ly; k < m; k += Ly) {\n"
    "        const i64 r = r0 + k;\n"
    "        const T v = x[xo + rem * s0 + q * s1];\n"
    "        switch (op) { RED_OPS(RED_CASE_E) }\n"
    "        rem += dr;\n"
    "        q += dq;\n"
    "        if (rem >= in0) {\n"
    "          rem -= in0;\n"
    "          q++;\n"
    "        }\n"
    "      }\n"
    "    } else {\n"
    "      for (i64 k = ly; k < m; k += Ly) {\n"
    "        const i64 r = r0 + k;\n"
    "        const i64 at = rd.rank <= 1 ? r * rd.str[0] : tyto_offset(r, "
    "rd);\n"
    "        const T v = x[xo + at];\n"
    "        switch (op) { RED_OPS(RED_CASE_E) }\n"
    "      }\n"
    "    }\n"
    "  } else if (o < nout) {\n"
    "    for (i64 k = ly; k < count; k += Ly) {\n"
    "      const i64 p = o * count + k;\n"
    "      const T a2 = w[2 * p], b2 = w[2 * p + 1];\n"
    "      const i64 i2 = wi[p];\n"
    "      switch (op) { RED_OPS(RED_CASE_M) }\n"
    "    }\n"
    "  }\n"
    "  RED_TREE(switch (op) { RED_OPS(RED_CASE_M) })\n"
    "  if (ly == 0 && o < nout) {\n"
    "    if (nch == 1) {\n"
    "      y[tyto_offset(o, ky)] = red_final(op, a, b, i, n);\n"
    "    } else {\n"
    "      const i64 p = o * nch + c;\n"
    "      w[2 * p] = a;\n"
    "      w[2 * p + 1] = b;\n"
    "      wi[p] = i;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n";
static const char source_2[] =
    "/* Softmax (logsm = 0) or log-softmax (1) of rows o = (tile0 +\n"
    " * blockIdx.x) * Lx + lx, along an axis of extent n (input stride sx,\n"
    " * output stride sy): the row's maximum and sum of exp as for\n"
    " * log-sum-exp, then each element. A row with a NaN or an infinite\n"
    " * maximum is all NaN, as exp(x - max) makes it. The output may be the\n"
    " * input: a row is read whole before the barrier before its writes. */\n"
    "extern \"C\" __global__ void __launch_bounds__(256)\n"
    "tyto_softmax(const T *x, tcu_dims kx, tcu_dims ky, i64 nout, i64 tile0,\n"
    "             i64 n, i64 sx, i64 sy, int lxs, int logsm, T *y) {\n"
    "  __shared__ T la[256], lb[256];\n"
    "  __shared__ i64 li[256];\n"
    "  RED_LANES\n"
    "  const i64 o = (tile0 + (i64)blockIdx.x) * Lx + lx;\n"
    "  T a = 0, b = 0;\n"
    "  i64 i = 0;\n"
    "  LSE_I\n"
    "  i64 xo = 0, yo = 0;\n"
    "  if (o < nout) {\n"
    "    xo = tyto_offset(o, kx);\n"
    "    yo = tyto_offset(o, ky);\n"
    "    for (i64 r = ly; r < n; r += Ly) {\n"
    "      const T v = x[xo + r * sx];\n"
    "      LSE_E\n"
    "    }\n"
    "  }\n"
    "  RED_TREE(LSE_M)\n"
    "  __syncthreads();\n"
    "  const T m = la[lx], s = lb[lx];\n"
    "  if (o < nout) {\n"
    "    const int bad = m != m || isinf(m);\n"
    "    const T ls = log(s);\n"
    "    for (i64 r = ly; r < n; r += Ly) {\n"
    "      const T v = x[xo + r * sx];\n"
    "      y[yo + r * sy] = bad     ? (T)NAN\n"
    "                       : logsm ? (v - m) - ls\n"
    "                               : exp(v - m) / s;\n"
    "    }\n"
    "  }\n"
    "}\n";

/* Axes of one side of the split, fastest first: extents, input strides and
 * (kept axes) output strides. */
typedef struct red_dims {
  int rank;
  int64_t sh[TYTO_PLUGIN_MAX_RANK], xs[TYTO_PLUGIN_MAX_RANK],
      ys[TYTO_PLUGIN_MAX_RANK];
} red_dims;

/* A planned launch: blocks of `lanes` threads, each Lx = 2^lxs outputs
 * by Ly = lanes / Lx lanes; `tiles` blocks cover the outputs. */
typedef struct red_grid {
  int lxs;
  size_t lanes;
  int64_t tiles;
} red_grid;

typedef struct red_impl {
  cudaKernel_t kernel; /* tyto_reduce (both passes) or tyto_softmax */
  uint32_t op;
  int softmax, logsm;
  red_dims kept, red;
  int64_t nout, count;   /* outputs (softmax: rows), elements of each */
  int64_t chunk, chunks; /* pass 1 cuts each output's elements so */
  int64_t sy;            /* softmax: output stride along the axis */
  int64_t span;          /* elements of a lane's block; 0: lanes interleave */
  red_grid grid, mgrid;  /* pass 1 (softmax), pass 2 */
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
static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *name = tcu_op_name(d->op);
  int softmax = is_softmax(d->op);
  if (d->n_in != 1 || d->n_out != 1)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: expected 1 input and 1 output, got %u and %u",
                           name, (unsigned)d->n_in, (unsigned)d->n_out);
  const tyto_plugin_layout *in = &d->in[0].l, *out = &d->out[0].l;
  uint32_t n = d->d->n_iattrs;
  const int64_t *ax = d->d->iattrs;
  if (softmax && n != 1)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: expected the axis as the only integer attribute, "
        "got %u integer attributes",
        name, (unsigned)n);
  if (is_arg(d->op) && n != 1)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: expected exactly one axis as integer attribute, got "
        "%u axes",
        name, (unsigned)n);
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t i = 0; i < n; i++) {
    if (ax[i] < 0 || ax[i] >= (int64_t)in->rank)
      return host->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: axis %lld is out of range for an input of rank %u "
          "(axes are 0 to rank - 1)",
          name, (long long)ax[i], (unsigned)in->rank);
    if (i > 0 && ax[i] == ax[i - 1])
      return host->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: axis %lld is repeated; each axis may be reduced "
          "once",
          name, (long long)ax[i]);
    if (i > 0 && ax[i] < ax[i - 1])
      return host->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
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
    tpc_format_shape(out, got, sizeof got);
    tpc_format_shape(&want, exp_, sizeof exp_);
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: output shape %s should be %s (%s)", name, got, exp_,
        softmax ? "the input's shape"
                : "the input's, with each reduced axis kept at "
                  "extent 1");
  }
  if (is_arg(d->op) && in->shape[ax[0]] == 0)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
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
  const tcu_desc *d = &k->desc;
  const tyto_plugin_host *host = TCU_HOST(dev);
  red_impl *r = calloc(1, sizeof *r);
  if (r == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
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
  const char *parts[] = {prelude, tpc_reduce_folds, source_1, source_2};
  char *source = tcu_source_join(parts, sizeof parts / sizeof parts[0]);
  if (source == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "prepare: out of host memory");
  tyto_plugin_error *e =
      tcu_function(dev, d->dtype, source,
                   r->softmax ? "tyto_softmax" : "tyto_reduce", &r->kernel);
  free(source);
  if (e != NULL)
    return e;
  const int wgl = 8; /* 256 threads */
  int kept_fast = r->kept.rank > 0 && abs64(r->kept.xs[0]) == 1 &&
                  !(r->red.rank > 0 && abs64(r->red.xs[0]) == 1);
  r->grid = plan_grid(wgl, r->nout, r->count, RED_LANE_MIN, kept_fast);
  int64_t ly = (int64_t)(r->grid.lanes >> r->grid.lxs);
  r->chunks = 1;
  r->chunk = r->count;
  if (r->softmax || r->count < 2 || r->nout == 0)
    return NULL;
  /* Chunks: enough blocks to fill the GPU, each lane folding at least
   * RED_MIN_SEQ and at most RED_MAX_SEQ elements in sequence, the partial
   * states within RED_WS_CAP bytes. */
  int64_t per_lane = ceil_div(r->count, ly);
  int64_t target = 8 * (int64_t)(dev->sm_count > 0 ? dev->sm_count : 1);
  int64_t ch = 1;
  if (r->grid.tiles < target) {
    int64_t want = ceil_div(target, r->grid.tiles);
    int64_t most = ceil_div(per_lane, RED_MIN_SEQ);
    ch = want < most ? want : most;
  }
  int64_t need = ceil_div(per_lane, RED_MAX_SEQ);
  if (ch < need)
    ch = need;
  int64_t cap =
      r->nout > RED_WS_CAP / 32 ? 1 : RED_WS_CAP / ws_bytes(r->nout, d->elem);
  if (ch > cap)
    ch = cap;
  if (ch > RED_MAX_CHUNKS)
    ch = RED_MAX_CHUNKS;
  if (ch < 2)
    return NULL;
  r->chunk = ceil_div(r->count, ch);
  r->chunks = ceil_div(r->count, r->chunk);
  if (r->chunks < 2) {
    r->chunks = 1;
    r->chunk = r->count;
    return NULL;
  }
  r->mgrid = plan_grid(wgl, r->nout, r->chunks, RED_LANE_MIN, 0);
  k->workspace_bytes = (uint64_t)ws_bytes(r->nout * r->chunks, d->elem);
  return NULL;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* Dims of one side as the prelude's tcu_dims (fastest first already). */
static tcu_dims dims_of(const red_dims *d, const int64_t *v) {
  tcu_dims r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < 8; i++) {
    r.shape[i] = i < d->rank ? d->sh[i] : 1;
    r.str[i] = i < d->rank ? v[i] : 0;
  }
  r.rank = d->rank;
  return r;
}

/* Launches grid g's blocks, at most RED_MAX_GROUPS at a time along x,
 * `chunks` along y; *tile0 is the kernel's tile argument. */
static tyto_plugin_error *run_tiles(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s, cudaKernel_t fn,
                                    const red_grid *g, int64_t *tile0,
                                    int64_t chunks, void **params,
                                    const char *what) {
  for (int64_t t0 = 0; t0 < g->tiles; t0 += RED_MAX_GROUPS) {
    int64_t n = g->tiles - t0 < RED_MAX_GROUPS ? g->tiles - t0 : RED_MAX_GROUPS;
    *tile0 = t0;
    tyto_plugin_error *e =
        tcu_run(dev, s, fn, (dim3){(unsigned)n, (unsigned)chunks, 1},
                (dim3){(unsigned)g->lanes, 1, 1}, 0, params, what);
    if (e != NULL)
      return e;
  }
  return NULL;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const red_impl *r = k->impl;
  size_t elem = k->desc.elem;
  tcu_dims kx = dims_of(&r->kept, r->kept.xs),
           ky = dims_of(&r->kept, r->kept.ys), rd = dims_of(&r->red, r->red.xs);
  const void *x = in[0].ptr;
  void *y = out[0].ptr;
  int64_t nout = r->nout, tile0 = 0, count = r->count;
  int lxs = r->grid.lxs;
  if (r->softmax) {
    int64_t sx = r->red.xs[0], sy = r->sy;
    int logsm = r->logsm;
    void *params[] = {&x,  &kx, &ky,  &nout,  &tile0, &count,
                      &sx, &sy, &lxs, &logsm, &y};
    return run_tiles(dev, s, r->kernel, &r->grid, &tile0, 1, params,
                     r->logsm ? "log_softmax kernel" : "softmax kernel");
  }
  /* Partial states: 2 * states elements from the workspace's start, then
   * the indices from the next multiple of 8 bytes. */
  void *w = ws->ptr, *wi = NULL;
  if (r->chunks > 1)
    wi = (char *)ws->ptr +
         ((uint64_t)(2 * r->nout * r->chunks) * elem + 7) / 8 * 8;
  int op = (int)r->op, merge = 0;
  int64_t chunk = r->chunk, n = r->count;
  void *params[] = {&op,    &merge, &x, &kx,  &ky, &nout, &tile0, &rd,
                    &count, &chunk, &n, &lxs, &y,  &w,    &wi};
  tyto_plugin_error *e = run_tiles(dev, s, r->kernel, &r->grid, &tile0,
                                   r->chunks, params, "reduction kernel");
  if (e != NULL || r->chunks < 2)
    return e;
  /* Pass 2: each output's chunk states merged in one block. */
  int64_t nch = r->chunks;
  int mlxs = r->mgrid.lxs;
  merge = 1;
  void *mparams[] = {&op,  &merge, &x, &kx,   &ky, &nout, &tile0, &rd,
                     &nch, &nch,   &n, &mlxs, &y,  &w,    &wi};
  return run_tiles(dev, s, r->kernel, &r->mgrid, &tile0, 1, mparams,
                   "reduction merge kernel");
}

const tcu_family tcu_family_reduce = {"reduce", owns,   check,
                                      prepare,  launch, release};
