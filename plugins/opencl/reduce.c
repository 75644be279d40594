/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX, as the CPU plugin
 * (plugins/cpu/reduce.c) defines them, over any strided layouts.
 *
 * Prepare (common/reduce_plan.c, shared with the CUDA plugin) splits the
 * input's axes into kept ones (one output element per
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
 *
 * f16 and bf16 are read into f32 (TLD), reduced in f32 and rounded once
 * when stored (TST); partial states stay f32. ARGMAX and ARGMIN into an
 * i32 or i64 output (ABI 1.6) run in the input's dtype and store the index
 * as the integer (TYTO_IDX). The integer reductions run in int.c.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/reduce_plan.h"
#include "errors.h"

/* Work-group size at most (the cut: common/reduce_plan.c). */
#define RED_WG 256
/* Work-groups along dimension 0 of one enqueue at most. */
#define RED_MAX_GROUPS ((int64_t)1 << 20)

#define source_0 tpc_reduce_folds

static const char source_runs[] =
    "/* Folds `left` elements from reduced index r = q * n0 + c0 on, in\n"
    " * runs along the fastest reduced dim (extent n0; with one dim, n0\n"
    " * lies past the block, q is 0 and c0 is r): the elements, and their\n"
    " * order, of the loop that splits each r into coordinates. Never\n"
    " * with left 0 (n0 may then be 0). */\n"
    "#define RED_CASE_RUNS(OP, C) case C: { \\\n"
    "  while (left > 0) { \\\n"
    "    const long run = min(left, n0 - c0); \\\n"
    "    const long base = xo + q * rxs.s1 + c0 * rxs.s0; \\\n"
    "    for (long t = 0; t < run; t++, r++) { \\\n"
    "      const T v = TLD(x, base + t * rxs.s0); \\\n"
    "      OP##_E \\\n"
    "    } \\\n"
    "    left -= run; c0 = 0; q++; \\\n"
    "  } \\\n"
    "} break;\n"
    "\n";

static const char source_1[] =
    "/* The result of state (a, b, i) over count elements. */\n"
    "inline T red_final(int op, T a, T b, long i, long count) {\n"
    "  switch (op) { RED_OPS(RED_CASE_F) }\n"
    "  return 0;\n"
    "}\n"
    "/* The output's storage and store: ARGMAX and ARGMIN into an integer\n"
    " * dtype (TYTO_IDX) store the index itself. */\n"
    "#if defined(TYTO_IDX)\n"
    "#define YS TYTO_IDX\n"
    "#define YST(p, j, a, b, i, n) ((p)[j] = (TYTO_IDX)(i))\n"
    "#else\n"
    "#define YS TS\n"
    "#define YST(p, j, a, b, i, n) TST(p, j, red_final(op, a, b, i, n))\n"
    "#endif\n"
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
    "\n";

static const char source_1b[] =
    "/* Reduction `op` for outputs o = (tile0 + group) * Lx + lx, row-major\n"
    " * over the kept dims ksh (input strides kxs, output strides kys).\n"
    " * Pass 1 (merge = 0) folds chunk c = get_group_id(1): the reduced\n"
    " * linear indices [c * chunk, c * chunk + chunk) of count, over dims\n"
    " * rsh with strides rxs. With one chunk it writes the result over n\n"
    " * elements; else it writes state p = o * chunks + c to w[2p],\n"
    " * w[2p + 1] and wi[p]. Pass 2 (merge = 1, one chunk) merges each\n"
    " * output's count states from there and writes the result. */\n"
    "__kernel void tyto_reduce(int op, int merge, __global const TS *x,\n"
    "                          long xbase, long8 ksh, long8 kxs, long8 kys,\n"
    "                          int krank, long nout, long tile0, long8 rsh,\n"
    "                          long8 rxs, int rrank, long count, long chunk,\n"
    "                          long n, int lxs, long span, __global YS *y,\n"
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
    "    if (rq_ == 1 && rrank <= 2 && re_ > rb_) {\n"
    "      /* A block of consecutive reduced indices over at most two dims:\n"
    "       * the op chosen once, the inner dim walked in runs. */\n"
    "      long r = r0 + rb_, left = re_ - rb_;\n"
    "      const long n0 = rrank == 2 ? rsh.s0 : r + left + 1;\n"
    "      long q = r / n0, c0 = r - q * n0;\n"
    "      switch (op) { RED_OPS(RED_CASE_RUNS) }\n"
    "    } else {\n"
    "      for (long k = rb_; k < re_; k += rq_) {\n"
    "        const long r = r0 + k;\n"
    "        const long at = rrank <= 1 ? r * rxs.s0\n"
    "                                   : tyto_offset(r, rsh, rxs, rrank);\n"
    "        const T v = TLD(x, xo + at);\n"
    "        switch (op) { RED_OPS(RED_CASE_E) }\n"
    "      }\n"
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
    "      YST(y, ybase + tyto_offset(o, ksh, kys, krank), a, b, i, n);\n"
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
    "__kernel void tyto_softmax(__global const TS *x, long xbase, long8 ksh,\n"
    "                           long8 kxs, long8 kys, int krank, long nout,\n"
    "                           long tile0, long n, long sx, long sy,\n"
    "                           int lxs, long span, int logsm,\n"
    "                           __global TS *y, long ybase, __local T *la,\n"
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
    "      const T v = TLD(x, xo + r * sx);\n"
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
    "      const T v = TLD(x, xo + r * sx);\n"
    "      TST(y, yo + r * sy, bad      ? (T)NAN\n"
    "                          : logsm ? (v - m) - ls\n"
    "                                  : exp(v - m) / s);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* The program: one source for every kernel of the family (ISO C caps
 * string literals at 4095 characters, hence the pieces). */
static const char *const source_parts[] = {source_0, source_runs, source_1,
                                           source_1b, source_2};

/* The plan (common/reduce_plan.h) and the kernel that runs it. */
typedef struct red_impl {
  cl_kernel kernel; /* tyto_reduce (both passes) or tyto_softmax */
  tpc_reduce_plan plan;
} red_impl;

static int owns(uint32_t op) {
  return tpc_reduce_op(op);
}

/* d's layouts as the shared checks and planner see them. */
static void operands(const ocl_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

/* Checks the operands, the axes (iattrs) and the output's shape, as the
 * CPU plugin does. */
static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  tpc_operands a;
  operands(d, &a);
  char why[512];
  int code = tpc_reduce_check(&a, why, sizeof why);
  if (code != 0)
    return ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why);
  return NULL;
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
  tpc_operands a;
  operands(d, &a);
  tpc_reduce_split(&a, &r->plan);
  char *source = ocl_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  tyto_plugin_error *e = ocl_kernel_new(
      dev, d->dtype, source, ocl_idx_option(d->out[0].l.dtype),
      r->plan.softmax ? "tyto_softmax" : "tyto_reduce", &r->kernel);
  free(source);
  if (e != NULL)
    return e;
  /* The group size: at most RED_WG, what the kernel allows and the
   * device's limit along dimension 0. */
  size_t wg = 0, items[16] = {0}; /* CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS */
  cl_device_type type = 0;
  const char *call = "clGetKernelWorkGroupInfo";
  cl_int err =
      clGetKernelWorkGroupInfo(r->kernel, dev->info->id,
                               CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
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
  const tpc_reduce_device rd = {wgl, (int64_t)dev->info->compute_units,
                                INT64_MAX, (type & CL_DEVICE_TYPE_CPU) != 0};
  tpc_reduce_cut(&r->plan, &rd, d->celem);
  k->workspace_bytes = r->plan.ws_bytes;
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
static cl_long8 long8_of(const tpc_reduce_dims *d, const int64_t *v,
                         int64_t fill) {
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
                                        const tpc_reduce_grid *g,
                                        cl_uint tile_arg, int64_t chunks,
                                        const char *what) {
  for (int64_t t0 = 0; t0 < g->tiles; t0 += RED_MAX_GROUPS) {
    int64_t n = g->tiles - t0 < RED_MAX_GROUPS ? g->tiles - t0 : RED_MAX_GROUPS;
    cl_long tile0 = t0;
    tyto_plugin_error *e =
        ocl_set_arg(dev, kern, tile_arg, sizeof tile0, &tile0);
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
static void arg_kept(ocl_args *a, const tpc_reduce_plan *r, const ocl_arg *x,
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
  red_impl *im = k->impl;
  const tpc_reduce_plan *r = &im->plan;
  size_t elem = k->desc.celem; /* states and workspace: compute type */
  cl_long8 rsh = long8_of(&r->red, r->red.sh, 1),
           rxs = long8_of(&r->red, r->red.xs, 0);
  cl_int rrank = r->red.rank, lxs = r->grid.lxs;
  cl_long count = r->count, span = r->span;
  cl_uint tile_arg;
  ocl_args a = OCL_ARGS(dev, im->kernel);
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
    return enqueue_tiles(dev, s, im->kernel, &r->grid, tile_arg, 1,
                         r->logsm ? "log_softmax kernel" : "softmax kernel");
  }
  /* Partial states: 2 * states elements from the workspace's origin, then
   * the indices from the next multiple of 8 bytes. Without chunks nothing
   * reads or writes them (ws->mem is NULL, an allowed argument). */
  cl_long wibase = 0;
  if (r->chunks > 1)
    wibase =
        (cl_long)(((uint64_t)(ws->origin + 2 * r->nout * r->chunks) * elem +
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
  tyto_plugin_error *e = enqueue_tiles(dev, s, im->kernel, &r->grid, tile_arg,
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
  return enqueue_tiles(dev, s, im->kernel, &r->mgrid, tile_arg, 1,
                       "reduction merge kernel");
}

const ocl_family ocl_family_reduce = {"reduce", owns,   check,
                                      prepare,  launch, release};
