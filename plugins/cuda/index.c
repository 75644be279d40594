/*
 * PAD (constant or reflect), GATHER and SCATTER_ADD along one axis
 * (numpy.take and its adjoint) and ONE_HOT, on layouts of any strides, as
 * plugins/cpu/layout.c defines them (the OpenCL plugin's index.c, on CUDA).
 *
 * Indices are whole numbers stored in the float dtype, or (ABI 1.6) i32 or
 * i64 (TYTO_IDX, tcu_idx_define) whatever the data's dtype; ONE_HOT's
 * integer indices may give an output of any dtype. Integer data moves as
 * it is, and SCATTER_ADD sums it modulo 2^32 or 2^64. As on the CPU,
 * GATHER and SCATTER_ADD check every index before writing anything: an
 * index that is not a whole number in [0, extent) fails the launch with an
 * error naming its row-major position, and the output is left as it was.
 * That check needs the host, so these two ops wait for the stream at
 * launch:
 *  - GATHER runs a check kernel that raises a flag in the workspace and
 *    reads the flag back (4 bytes); only when it is set are the indices
 *    read back to find the first bad one for the message. The gather
 *    kernel then converts each index as it reads it.
 *  - SCATTER_ADD reads the indices back, checks them, sorts the positions
 *    q of the indices by (index, q) on the host and writes the sorted
 *    indices and the offset each q adds in `updates` to the workspace. A
 *    thread per output element then adds, to base, the updates of every q
 *    whose index is its own position along the axis: it finds them by
 *    binary search, in q order, which is the order the CPU accumulates in.
 *    So duplicates accumulate deterministically without atomics, and the
 *    result matches the CPU's bit for bit.
 * ONE_HOT never fails: an index that is not a whole number in [0, depth)
 * gives an all-zero row, as TensorFlow's one_hot does.
 *
 * f16 and bf16: PAD and GATHER move the 16 bits, indices are read into f32
 * (exactly; the host's scan reads them as half.h does), SCATTER_ADD sums
 * in f32 and rounds each result once.
 */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/half.h"
#include "../common/index_plan.h"

/* The program, in parts (ISO C caps a string literal at 4095 characters).
 * Kernels walk their output in row-major order over dims given fastest
 * first, as tcu_dims_of() gives them; the structs mirror pad_geo,
 * gather_geo and scatter_geo below. */
static const char *const source_parts[] = {
    "/* Indices of type TI stored as TIS, read with TILD: TYTO_IDX (int or\n"
    "   long long) for integer indices, else the data's dtype. TIS_K(v, k):\n"
    "   whether index v is k, a place in [0, extent). */\n"
    "#if defined(TYTO_IDX)\n"
    "#define TI TYTO_IDX\n"
    "#define TIS TYTO_IDX\n"
    "#define TILD(x) (x)\n"
    "#define TIS_K(v, k) ((i64)(v) == (k))\n"
    "__device__ __forceinline__ bool tyto_index_ok(TI v, i64 extent) {\n"
    "  return v >= 0 && (i64)v < extent;\n"
    "}\n"
    "#else\n"
    "#define TI T\n"
    "#define TIS S\n"
    "#define TILD(x) LD(x)\n"
    "#define TIS_K(v, k) ((double)(v) == (double)(k))\n"
    "/* Whether index v is a whole number in [0, extent), compared as the\n"
    "   CPU compares it: in double. */\n"
    "__device__ __forceinline__ bool tyto_index_ok(T v, i64 extent) {\n"
    "  double w = (double)v;\n"
    "  return w == floor(w) && w >= 0.0 && w < (double)extent;\n"
    "}\n"
    "#endif\n"
    "/* Integer data adds modulo 2^32 or 2^64 (TU: its unsigned type). */\n"
    "#if defined(TYTO_INT)\n"
    "#define TADD(a, b) ((T)((TU)(a) + (TU)(b)))\n"
    "#else\n"
    "#define TADD(a, b) ((a) + (b))\n"
    "#endif\n"
    "struct tyto_pad_geo {\n"
    "  i64 ishape[8], istr[8], oshape[8], ostr[8], before[8];\n"
    "  int rank, reflect;\n"
    "};\n"
    "extern \"C\" __global__ void tyto_pad(const S *in, S *out,\n"
    "                                      tyto_pad_geo g, S value, i64 n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    i64 r = i, src = 0, dst = 0;\n"
    "    bool inside = true;\n"
    "    for (int k = 0; k < g.rank; k++) {\n"
    "      i64 q = r / g.oshape[k], idx = r - q * g.oshape[k];\n"
    "      i64 e = g.ishape[k], j = idx - g.before[k];\n"
    "      r = q;\n"
    "      dst += idx * g.ostr[k];\n"
    "      if (j < 0 || j >= e) {\n"
    "        /* numpy's 'reflect': the edge is not repeated. */\n"
    "        if (g.reflect)\n"
    "          j = j < 0 ? -j : 2 * (e - 1) - j;\n"
    "        else\n"
    "          inside = false;\n"
    "      }\n"
    "      if (inside)\n"
    "        src += j * g.istr[k];\n"
    "    }\n"
    "    out[dst] = inside ? in[src] : value;\n"
    "  }\n"
    "}\n"
    "/* Raises *flag when an index is not a whole number in [0, extent). */\n"
    "extern \"C\" __global__ void tyto_index_check(const TIS *ind,\n"
    "                                              tcu_dims d,\n"
    "                                              i64 extent, int *flag,\n"
    "                                              i64 n) {\n"
    "  TYTO_FOR(i, n)\n"
    "    if (!tyto_index_ok(TILD(ind[tyto_offset(i, d)]), extent))\n"
    "      *flag = 1;\n"
    "}\n"
    "/* dcoef, icoef: per output dim, its stride in data (0 on the index\n"
    "   dims) and in the indices (0 elsewhere); dax: data's axis stride. */\n"
    "struct tyto_gather_geo {\n"
    "  i64 shape[8], ostr[8], dcoef[8], icoef[8];\n"
    "  i64 dax;\n"
    "  int rank, pad_;\n"
    "};\n"
    "extern \"C\" __global__ void tyto_gather(const S *data,\n"
    "                                         const TIS *ind,\n"
    "                                         S *out, tyto_gather_geo g,\n"
    "                                         i64 n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    i64 r = i, dd = 0, x = 0, o = 0;\n"
    "    for (int k = 0; k < g.rank; k++) {\n"
    "      i64 q = r / g.shape[k], idx = r - q * g.shape[k];\n"
    "      r = q;\n"
    "      dd += idx * g.dcoef[k];\n"
    "      x += idx * g.icoef[k];\n"
    "      o += idx * g.ostr[k];\n"
    "    }\n"
    "    out[o] = data[dd + (i64)TILD(ind[x]) * g.dax];\n"
    "  }\n"
    "}\n",
    "/* out = base plus, for the q (ascending) whose index keys[p] is this\n"
    "   element's position along the axis (dim ak), updates at uoff[p] past\n"
    "   the element's own offset in updates (ucoef: per dim, its stride in\n"
    "   updates, 0 on the axis). keys ascend; nq of them, then the nq\n"
    "   uoffs. */\n"
    "struct tyto_scatter_geo {\n"
    "  i64 shape[8], ostr[8], bstr[8], ucoef[8];\n"
    "  i64 nq;\n"
    "  int rank, ak;\n"
    "};\n"
    "extern \"C\" __global__ void tyto_scatter_add(const S *base,\n"
    "                                              const S *upd,\n"
    "                                              const i64 *keys, S *out,\n"
    "                                              tyto_scatter_geo g,\n"
    "                                              i64 n) {\n"
    "  const i64 nq = g.nq, *uoff = keys + nq;\n"
    "  TYTO_FOR(i, n) {\n"
    "    i64 r = i, b = 0, u = 0, o = 0, j = 0;\n"
    "    for (int k = 0; k < g.rank; k++) {\n"
    "      i64 q = r / g.shape[k], idx = r - q * g.shape[k];\n"
    "      r = q;\n"
    "      b += idx * g.bstr[k];\n"
    "      u += idx * g.ucoef[k];\n"
    "      o += idx * g.ostr[k];\n"
    "      if (k == g.ak)\n"
    "        j = idx;\n"
    "    }\n"
    "    T acc = LD(base[b]);\n"
    "    i64 lo = 0, hi = nq;\n"
    "    while (lo < hi) {\n"
    "      i64 mid = lo + (hi - lo) / 2;\n"
    "      if (keys[mid] < j)\n"
    "        lo = mid + 1;\n"
    "      else\n"
    "        hi = mid;\n"
    "    }\n"
    "    for (i64 p = lo; p < nq && keys[p] == j; p++)\n"
    "      acc = TADD(acc, LD(upd[u + uoff[p]]));\n"
    "    out[o] = ST(acc);\n"
    "  }\n"
    "}\n"
    "/* out[..., k] = 1 where the index equals k (floating indices in\n"
    "   double, as the CPU compares), else 0. */\n"
    "extern \"C\" __global__ void tyto_one_hot(const TIS *ind, tcu_dims id,\n"
    "                                          S *out, tcu_dims od,\n"
    "                                          i64 depth, i64 n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    i64 q = i / depth, k = i - q * depth;\n"
    "    const TI v = TILD(ind[tyto_offset(q, id)]);\n"
    "    out[tyto_offset(i, od)] = ST(TIS_K(v, k) ? (T)1 : (T)0);\n"
    "  }\n"
    "}\n",
};

/* The kernels' by-value arguments; the same fields as the structs of the
 * program (all 8-byte fields, then two ints: one layout on both sides). */
typedef struct pad_geo {
  int64_t ishape[8], istr[8], oshape[8], ostr[8], before[8];
  int32_t rank, reflect;
} pad_geo;

typedef struct gather_geo {
  int64_t shape[8], ostr[8], dcoef[8], icoef[8];
  int64_t dax;
  int32_t rank, pad_;
} gather_geo;

typedef struct scatter_geo {
  int64_t shape[8], ostr[8], bstr[8], ucoef[8];
  int64_t nq;
  int32_t rank, ak;
} scatter_geo;

_Static_assert(TYTO_PLUGIN_MAX_RANK == 8, "the kernels' dims hold 8 axes");

typedef struct index_impl {
  cudaKernel_t main;
  cudaKernel_t check; /* GATHER's index check */
  tpc_index ix;       /* the attributes as the check read them */
} index_impl;

static int owns(uint32_t op) {
  return tpc_index_op(op);
}

/* v[rank - 1], ..., v[0] into out[0 .. rank), then `fill`: dims fastest
 * first, as the kernels take them. */
static void rev8(int64_t *out, const int64_t *v, uint32_t rank, int64_t fill) {
  for (uint32_t k = 0; k < TYTO_PLUGIN_MAX_RANK; k++)
    out[k] = k < rank ? v[rank - 1 - k] : fill;
}

/* The rules of plugins/cpu/layout.c (plugins/common/index_plan.c). */
static tyto_plugin_error *check_into(tyto_plugin_device *dev, const tcu_desc *d,
                                     index_impl *c) {
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  char why[1024];
  int code = tpc_index_check(&a, "cuda", &c->ix, why, sizeof why);
  if (code != 0)
    return TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  index_impl c;
  memset(&c, 0, sizeof c);
  return check_into(dev, d, &c);
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  const char *op = tcu_op_name(d->op);
  index_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory", op);
  k->impl = c;
  /* gather and scatter_add check their indices on the host at launch. */
  k->host_sync =
      d->op == TYTO_PLUGIN_OP_GATHER || d->op == TYTO_PLUGIN_OP_SCATTER_ADD;
  tyto_plugin_error *e = check_into(dev, d, c);
  if (e != NULL)
    return e;
  const char *name;
  switch (d->op) {
  case TYTO_PLUGIN_OP_PAD: name = "tyto_pad"; break;
  case TYTO_PLUGIN_OP_ONE_HOT: name = "tyto_one_hot"; break;
  case TYTO_PLUGIN_OP_GATHER:
    name = "tyto_gather";
    /* The check's flag, an int, with room to align it to 4 bytes. */
    k->workspace_bytes = 2 * sizeof(int) - 1;
    break;
  default:
    name = "tyto_scatter_add";
    /* Keys and offsets as int64 (only when there are updates: else the
     * indices are not even read), with room to align them to 8 bytes. */
    k->workspace_bytes =
        d->in[2].n > 0 ? (uint64_t)d->in[1].n * 16 + sizeof(int64_t) - 1 : 0;
    break;
  }
  const char *parts[1 + sizeof source_parts / sizeof source_parts[0]];
  parts[0] = tcu_idx_define(
      tpc_index_dtype(d->op, d->in[0].l.dtype,
                      d->n_in > 1 ? d->in[1].l.dtype : d->dtype, d->dtype));
  for (size_t j = 0; j < sizeof source_parts / sizeof source_parts[0]; j++)
    parts[1 + j] = source_parts[j];
  char *source = tcu_source_join(parts, sizeof parts / sizeof parts[0]);
  if (source == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory", op);
  e = tcu_function(dev, d->dtype, source, name, &c->main);
  if (e == NULL && d->op == TYTO_PLUGIN_OP_GATHER)
    e = tcu_function(dev, d->dtype, source, "tyto_index_check", &c->check);
  free(source);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* ---- launch -------------------------------------------------------------- */

/* The first byte at or after p aligned to `align` (a power of two). */
static void *align_up(void *p, uintptr_t align) {
  return (void *)(((uintptr_t)p + align - 1) & ~(align - 1));
}

static tyto_plugin_error *pad_launch(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, const index_impl *c,
                                     const tcu_desc *d, const tcu_arg *in,
                                     const tcu_arg *out) {
  const tyto_plugin_layout *il = &d->in[0].l, *ol = &d->out[0].l;
  uint32_t rank = ol->rank;
  pad_geo g;
  memset(&g, 0, sizeof g);
  rev8(g.ishape, il->shape, rank, 1);
  rev8(g.istr, il->strides, rank, 0);
  rev8(g.oshape, ol->shape, rank, 1);
  rev8(g.ostr, ol->strides, rank, 0);
  rev8(g.before, c->ix.before, rank, 0);
  g.rank = (int32_t)rank;
  g.reflect = c->ix.mode == 1;
  float vf = c->ix.valuef;
  double vd = c->ix.value;
  /* Integers: as CAST converts a double. */
  int64_t vl = tpc_int_of_f64(d->dtype, vd);
  int32_t vi = (int32_t)vl;
  /* The constant rounded to the dtype once, as its storage type S. */
  uint16_t vh = d->dtype == TYTO_PLUGIN_DTYPE_F16 ? tpc_f64_to_f16(vd)
                                                  : tpc_f64_to_bf16(vd);
  int64_t n = d->out[0].n;
  void *params[] = {(void *)&in[0].ptr, (void *)&out[0].ptr, &g,
                    d->dtype == TYTO_PLUGIN_DTYPE_F64   ? (void *)&vd
                    : d->dtype == TYTO_PLUGIN_DTYPE_I64 ? (void *)&vl
                    : d->dtype == TYTO_PLUGIN_DTYPE_I32 ? (void *)&vi
                    : tcu_is16(d->dtype)                ? (void *)&vh
                                                        : (void *)&vf,
                    &n};
  return tcu_run_n(dev, s, c->main, n, params, "pad kernel");
}

static tyto_plugin_error *one_hot_launch(tyto_plugin_device *dev,
                                         tyto_plugin_stream *s,
                                         const index_impl *c, const tcu_desc *d,
                                         const tcu_arg *in,
                                         const tcu_arg *out) {
  const tyto_plugin_layout *ol = &d->out[0].l;
  tcu_dims id = tcu_dims_of(&d->in[0].l), od = tcu_dims_of(ol);
  int64_t depth = ol->shape[ol->rank - 1], n = d->out[0].n;
  void *params[] = {
      (void *)&in[0].ptr, &id, (void *)&out[0].ptr, &od, &depth, &n};
  return tcu_run_n(dev, s, c->main, n, params, "one_hot kernel");
}

/* The element offsets [*lo, *hi] that l reaches from its origin. */
static void reach_of(const tyto_plugin_layout *l, int64_t *lo, int64_t *hi) {
  *lo = *hi = 0;
  for (uint32_t a = 0; a < l->rank; a++) {
    int64_t span = (l->shape[a] - 1) * l->strides[a];
    if (span < 0)
      *lo += span;
    else
      *hi += span;
  }
}

/* Reads the elements the indices (input 1, origin at x) reach into a new
 * host array (the caller frees it), after the work queued on s; *origin
 * receives the index in it of the layout's origin. */
static tyto_plugin_error *indices_read(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s, const tcu_desc *d,
                                       const tcu_arg *x, void **out,
                                       int64_t *origin) {
  const char *op = tcu_op_name(d->op);
  const uint32_t dt = d->in[1].l.dtype;
  const size_t elem = tpc_dtype_size(dt);
  int64_t lo, hi;
  reach_of(&d->in[1].l, &lo, &hi);
  size_t bytes = (size_t)(hi - lo + 1) * elem;
  void *host = malloc(bytes);
  if (host == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory reading %zu bytes "
                                    "of indices",
                                    op, bytes);
  const char *from = (const char *)x->ptr + lo * (int64_t)elem;
  cudaError_t e =
      cudaMemcpyAsync(host, from, bytes, cudaMemcpyDeviceToHost, s->stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(s->stream);
  if (e != cudaSuccess) {
    free(host);
    return tcu_cuda_error(TCU_HOST(dev), e,
                          "%s on cuda:%d: reading %zu bytes of indices back "
                          "to check them",
                          op, dev->index, bytes);
  }
  *out = host;
  *origin = -lo;
  return NULL;
}

/* The indices (input 1) read back by indices_read() into `host`, origin
 * at element `origin`, as the shared scan sees them. */
static tpc_index_host indices_host(const tcu_desc *d, uint32_t axis,
                                   const void *host, int64_t origin) {
  return (tpc_index_host){
      d->op, &d->in[1].l, host, origin, d->in[0].l.shape[axis], axis};
}

static tyto_plugin_error *gather_launch(tyto_plugin_device *dev,
                                        tyto_plugin_stream *s,
                                        const index_impl *c, const tcu_desc *d,
                                        const tcu_arg *in, const tcu_arg *out,
                                        const tcu_arg *ws) {
  const tyto_plugin_host *h = TCU_HOST(dev);
  const tyto_plugin_layout *dl = &d->in[0].l, *il = &d->in[1].l,
                           *ol = &d->out[0].l;
  uint32_t ax = c->ix.axis, ri = il->rank, rank = ol->rank;
  /* 1. Raise the flag in the workspace if an index is bad; read it. (The
   * output is not empty, so neither are the indices.) */
  void *flag = align_up(ws->ptr, sizeof(int));
  tcu_dims idims = tcu_dims_of(il);
  int64_t extent = dl->shape[ax], nind = d->in[1].n;
  int host_flag = 0;
  cudaError_t ce = cudaMemsetAsync(flag, 0, sizeof(int), s->stream);
  if (ce != cudaSuccess)
    return tcu_cuda_error(h, ce,
                          "gather on cuda:%d: clearing the index check's flag",
                          dev->index);
  void *pc[] = {(void *)&in[1].ptr, &idims, &extent, &flag, &nind};
  tyto_plugin_error *e =
      tcu_run_n(dev, s, c->check, nind, pc, "gather index check kernel");
  if (e != NULL)
    return e;
  ce = cudaMemcpyAsync(&host_flag, flag, sizeof host_flag,
                       cudaMemcpyDeviceToHost, s->stream);
  if (ce == cudaSuccess)
    ce = cudaStreamSynchronize(s->stream);
  if (ce != cudaSuccess)
    return tcu_cuda_error(
        h, ce, "gather on cuda:%d: reading the index check's flag", dev->index);
  if (host_flag != 0) {
    /* Find the first bad index for the message. */
    void *host;
    int64_t origin;
    if ((e = indices_read(dev, s, d, &in[1], &host, &origin)) != NULL)
      return e;
    tpc_index_host ix = indices_host(d, ax, host, origin);
    char why[512];
    int code = tpc_index_scan(&ix, why, sizeof why);
    free(host);
    return code != 0 ? h->error_new((tyto_plugin_code)code, "%s", why)
                     : h->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                                    "gather on cuda:%d: the device found a "
                                    "bad index that the host does not",
                                    dev->index);
  }
  /* 2. Gather. Output dims [0, ax) and [ax + ri, rank) are data's,
   * [ax, ax + ri) the indices'. */
  int64_t dcoef[TYTO_PLUGIN_MAX_RANK] = {0}, icoef[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t k = 0; k < rank; k++) {
    if (k < ax)
      dcoef[k] = dl->strides[k];
    else if (k < ax + ri)
      icoef[k] = il->strides[k - ax];
    else
      dcoef[k] = dl->strides[k - ri + 1];
  }
  gather_geo g;
  memset(&g, 0, sizeof g);
  rev8(g.shape, ol->shape, rank, 1);
  rev8(g.ostr, ol->strides, rank, 0);
  rev8(g.dcoef, dcoef, rank, 0);
  rev8(g.icoef, icoef, rank, 0);
  g.dax = dl->strides[ax];
  g.rank = (int32_t)rank;
  int64_t n = d->out[0].n;
  void *params[] = {(void *)&in[0].ptr, (void *)&in[1].ptr, (void *)&out[0].ptr,
                    &g, &n};
  return tcu_run_n(dev, s, c->main, n, params, "gather kernel");
}

/* Checks the indices and writes them, sorted by (index, position), then
 * the offset in updates of each, as int64 to *keys (the workspace, 8-byte
 * aligned). Waits for the copy, so the host array can go. */
static tyto_plugin_error *scatter_keys(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s,
                                       const index_impl *c, const tcu_desc *d,
                                       const tcu_arg *in, void *keys) {
  int64_t nq = d->in[1].n, origin;
  void *host = NULL;
  tyto_plugin_error *e = indices_read(dev, s, d, &in[1], &host, &origin);
  if (e != NULL)
    return e;
  tpc_index_host ix = indices_host(d, c->ix.axis, host, origin);
  int64_t *arr;
  char why[512];
  int code = tpc_index_keys(&ix, &d->in[2].l, &arr, why, sizeof why);
  if (code != 0) {
    e = TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
    goto done;
  }
  size_t bytes = (size_t)nq * 2 * sizeof *arr;
  cudaError_t ce =
      cudaMemcpyAsync(keys, arr, bytes, cudaMemcpyHostToDevice, s->stream);
  /* From pageable memory the copy may still read arr after returning. */
  if (ce == cudaSuccess)
    ce = cudaStreamSynchronize(s->stream);
  if (ce != cudaSuccess)
    e = tcu_cuda_error(TCU_HOST(dev), ce,
                       "scatter_add on cuda:%d: writing %lld sorted indices "
                       "to the workspace",
                       dev->index, (long long)nq);
  free(arr);
done:
  free(host);
  return e;
}

static tyto_plugin_error *scatter_launch(tyto_plugin_device *dev,
                                         tyto_plugin_stream *s,
                                         const index_impl *c, const tcu_desc *d,
                                         const tcu_arg *in, const tcu_arg *out,
                                         const tcu_arg *ws) {
  const tyto_plugin_layout *bl = &d->in[0].l, *ul = &d->in[2].l,
                           *ol = &d->out[0].l;
  uint32_t ax = c->ix.axis, ri = d->in[1].l.rank, rank = ol->rank;
  /* As on the CPU, the indices are checked only when there are updates. */
  int64_t nq = d->in[2].n > 0 ? d->in[1].n : 0;
  void *keys = NULL;
  if (nq > 0) {
    keys = align_up(ws->ptr, sizeof(int64_t));
    tyto_plugin_error *e = scatter_keys(dev, s, c, d, in, keys);
    if (e != NULL)
      return e;
  }
  /* ucoef: per output dim, its stride in updates; 0 on the axis, whose
   * part comes from the sorted offsets. */
  int64_t ucoef[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t k = 0; k < rank; k++)
    ucoef[k] = k < ax ? ul->strides[k] : k > ax ? ul->strides[k - 1 + ri] : 0;
  scatter_geo g;
  memset(&g, 0, sizeof g);
  rev8(g.shape, ol->shape, rank, 1);
  rev8(g.ostr, ol->strides, rank, 0);
  rev8(g.bstr, bl->strides, rank, 0);
  rev8(g.ucoef, ucoef, rank, 0);
  g.nq = nq;
  g.rank = (int32_t)rank;
  g.ak = (int32_t)(rank - 1 - ax);
  int64_t n = d->out[0].n;
  void *params[] = {(void *)&in[0].ptr,
                    (void *)&in[2].ptr,
                    &keys,
                    (void *)&out[0].ptr,
                    &g,
                    &n};
  return tcu_run_n(dev, s, c->main, n, params, "scatter_add kernel");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const index_impl *c = k->impl;
  const tcu_desc *d = &k->desc;
  switch (d->op) {
  case TYTO_PLUGIN_OP_PAD: return pad_launch(dev, s, c, d, in, out);
  case TYTO_PLUGIN_OP_ONE_HOT: return one_hot_launch(dev, s, c, d, in, out);
  case TYTO_PLUGIN_OP_GATHER: return gather_launch(dev, s, c, d, in, out, ws);
  default: return scatter_launch(dev, s, c, d, in, out, ws);
  }
}

const tcu_family tcu_family_index = {"index", owns,   check,
                                     prepare, launch, release};
