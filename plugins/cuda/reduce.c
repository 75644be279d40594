/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX, as the CPU plugin
 * (plugins/cpu/reduce.c) defines them, over any strided layouts: the
 * OpenCL plugin's design (opencl/reduce.c) on CUDA, with the same fold
 * rules (plugins/common's tpc_reduce_folds).
 *
 * Prepare (common/reduce_plan.c, shared with the OpenCL plugin) splits
 * the input's axes into kept ones (one output element per
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
 *
 * f16 and bf16 elements are read into f32, which every fold, partial
 * state and softmax sum uses; each result is rounded to the dtype once.
 * ARGMAX and ARGMIN into an i32 or i64 output (ABI 1.6) run in the
 * input's dtype and store the index as the integer (TYTO_IDX). The
 * integer reductions run in int.c.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/reduce_plan.h"

/* Threads per block; blocks along x of one launch at most; chunks along y
 * at most. */
#define RED_WG 256
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
    "/* The output's storage and store: ARGMAX and ARGMIN into an integer\n"
    " * dtype (TYTO_IDX) store the index itself. */\n"
    "#if defined(TYTO_IDX)\n"
    "#define YS TYTO_IDX\n"
    "#define YST(a, b, i, n) ((TYTO_IDX)(i))\n"
    "#else\n"
    "#define YS S\n"
    "#define YST(a, b, i, n) ST(red_final(op, a, b, i, n))\n"
    "#endif\n"
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
    "tyto_reduce(int op, int merge, const S *x, tcu_dims kx, tcu_dims ky,\n"
    "            i64 nout, i64 tile0, tcu_dims rd, i64 count, i64 chunk,\n"
    "            i64 n, int lxs, YS *y, T *w, i64 *wi) {\n"
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
    "        const T v = LD(x[xo + rem * s0 + q * s1]);\n"
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
    "        const T v = LD(x[xo + at]);\n"
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
    "      y[tyto_offset(o, ky)] = YST(a, b, i, n);\n"
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
    "tyto_softmax(const S *x, tcu_dims kx, tcu_dims ky, i64 nout, i64 tile0,\n"
    "             i64 n, i64 sx, i64 sy, int lxs, int logsm, S *y) {\n"
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
    "      const T v = LD(x[xo + r * sx]);\n"
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
    "      const T v = LD(x[xo + r * sx]);\n"
    "      y[yo + r * sy] = ST(bad     ? (T)NAN\n"
    "                          : logsm ? (v - m) - ls\n"
    "                                  : exp(v - m) / s);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* The plan (common/reduce_plan.h) and the kernel that runs it. */
typedef struct red_impl {
  cudaKernel_t kernel; /* tyto_reduce (both passes) or tyto_softmax */
  tpc_reduce_plan plan;
} red_impl;

static int owns(uint32_t op) {
  return tpc_reduce_op(op);
}

/* d's layouts as the shared checks and planner see them. */
static void operands(const tcu_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

/* Checks the operands, the axes (iattrs) and the output's shape, as the
 * CPU plugin does. */
static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int code = tpc_reduce_check(&a, why, sizeof why);
  if (code != 0)
    return TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
  return NULL;
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
  tpc_operands a;
  operands(d, &a);
  tpc_reduce_split(&a, &r->plan);
  const char *parts[] = {prelude, tcu_idx_define(d->out[0].l.dtype),
                         tpc_reduce_folds, source_1, source_2};
  char *source = tcu_source_join(parts, sizeof parts / sizeof parts[0]);
  if (source == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "prepare: out of host memory");
  tyto_plugin_error *e = tcu_function(
      dev, d->dtype, source, r->plan.softmax ? "tyto_softmax" : "tyto_reduce",
      &r->kernel);
  free(source);
  if (e != NULL)
    return e;
  /* Blocks of 256 threads; grid dimension y takes 65535 chunks at most. */
  const tpc_reduce_device rd = {8, dev->sm_count, RED_MAX_CHUNKS, 0};
  /* Partial states are of the compute type T. */
  tpc_reduce_cut(&r->plan, &rd, d->celem);
  k->workspace_bytes = r->plan.ws_bytes;
  return NULL;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* Dims of one side as the prelude's tcu_dims (fastest first already). */
static tcu_dims dims_of(const tpc_reduce_dims *d, const int64_t *v) {
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
                                    const tpc_reduce_grid *g, int64_t *tile0,
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
  const red_impl *im = k->impl;
  const tpc_reduce_plan *r = &im->plan;
  size_t elem = k->desc.celem; /* the workspace's states are T */
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
    return run_tiles(dev, s, im->kernel, &r->grid, &tile0, 1, params,
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
  tyto_plugin_error *e = run_tiles(dev, s, im->kernel, &r->grid, &tile0,
                                   r->chunks, params, "reduction kernel");
  if (e != NULL || r->chunks < 2)
    return e;
  /* Pass 2: each output's chunk states merged in one block. */
  int64_t nch = r->chunks;
  int mlxs = r->mgrid.lxs;
  merge = 1;
  void *mparams[] = {&op,  &merge, &x, &kx,   &ky, &nout, &tile0, &rd,
                     &nch, &nch,   &n, &mlxs, &y,  &w,    &wi};
  return run_tiles(dev, s, im->kernel, &r->mgrid, &tile0, 1, mparams,
                   "reduction merge kernel");
}

const tcu_family tcu_family_reduce = {"reduce", owns,   check,
                                      prepare,  launch, release};
