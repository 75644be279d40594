/*
 * PAD (constant or reflect), GATHER and SCATTER_ADD along one axis
 * (numpy.take and its adjoint) and ONE_HOT, on layouts of any strides, as
 * plugins/cpu/layout.c defines them.
 *
 * Indices are whole numbers stored in the float dtype, or (ABI 1.6) i32 or
 * i64 (TYTO_IDX), whatever the data's dtype; ONE_HOT's integer indices may
 * give an output of any dtype. Integer data moves as it is, and
 * SCATTER_ADD sums it modulo 2^32 or 2^64. As on the CPU,
 * GATHER and SCATTER_ADD check every index before writing anything: an
 * index that is not a whole number in [0, extent) fails the launch with an
 * error naming its row-major position, and the output is left as it was.
 * That check needs the host, so these two ops wait for the stream at
 * launch:
 *  - GATHER runs a check kernel that raises a flag in the workspace and
 *    reads the flag back (4 bytes, a blocking read); only when it is set
 *    are the indices read back to find the first bad one for the message.
 *    The gather kernel then converts each index as it reads it.
 *  - SCATTER_ADD reads the indices back (a blocking read), checks them and
 *    sorts the positions q of the indices by (index, q) on the host, and
 *    writes the sorted indices and the offset each q adds in `updates` to
 *    the workspace (a blocking write). One work-item per output element
 *    then adds, to base, the updates of every q whose index is its own
 *    position along the axis: it finds them by binary search, in q order,
 *    which is the order the CPU accumulates in. So duplicates accumulate
 *    deterministically without atomics, and the result matches the CPU's
 *    bit for bit.
 * f16 and bf16 values move exactly through f32 (TLD, TST); SCATTER_ADD
 * sums in f32 and rounds once; indices read back for the checks are
 * decoded by plugins/common/index_plan.c.
 * ONE_HOT never fails: an index that is not a whole number in [0, depth)
 * gives an all-zero row, as TensorFlow's one_hot does.
 */
#include "ops.h"

#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/half.h"
#include "../common/index_plan.h"
#include "errors.h"
#include "layout.h"

/* Every kernel walks its output in row-major order over dims given fastest
 * first (long8s as ocl_dims() makes them), unpacked into private arrays. */
static const char *const source_parts[] = {
    "#define TYTO_UNPACK(a, v) long a[8]; vstore8(v, 0, a)\n"
    "/* Indices of type TI stored as TIS, read with TILD: TYTO_IDX (int or\n"
    " * long) for integer indices, else the data's dtype. */\n"
    "#if defined(TYTO_IDX)\n"
    "#define TI TYTO_IDX\n"
    "#define TIS TYTO_IDX\n"
    "#define TILD(p, i) ((p)[i])\n"
    "inline int tyto_index_ok(TI v, long extent) {\n"
    "  return v >= 0 && (long)v < extent;\n"
    "}\n"
    "#else\n"
    "#define TI T\n"
    "#define TIS TS\n"
    "#define TILD(p, i) TLD(p, i)\n"
    "/* Whether index v is a whole number in [0, extent). */\n"
    "inline int tyto_index_ok(T v, long extent) {\n"
    "  return v >= 0 && v < 0x1p63f && v == floor(v) && (long)v < extent;\n"
    "}\n"
    "#endif\n"
    "/* Integers add modulo 2^32 or 2^64 (TU: their unsigned type). */\n"
    "#if defined(TYTO_INT)\n"
    "#define TADD(a, b) ((T)((TU)(a) + (TU)(b)))\n"
    "#else\n"
    "#define TADD(a, b) ((a) + (b))\n"
    "#endif\n"
    "__kernel void tyto_pad(__global const TS *in, long ib, long8 ishape8,\n"
    "                       long8 istr8, __global TS *out, long ob,\n"
    "                       long8 oshape8, long8 ostr8, long8 before8,\n"
    "                       int rank, int reflect, T value, long n) {\n"
    "  TYTO_UNPACK(ishape, ishape8); TYTO_UNPACK(istr, istr8);\n"
    "  TYTO_UNPACK(oshape, oshape8); TYTO_UNPACK(ostr, ostr8);\n"
    "  TYTO_UNPACK(before, before8);\n"
    "  TYTO_FOR(i, n) {\n"
    "    long r = i, src = 0, dst = 0;\n"
    "    int inside = 1;\n"
    "    for (int k = 0; k < rank; k++) {\n"
    "      long q = r / oshape[k], idx = r - q * oshape[k], e = ishape[k];\n"
    "      long j = idx - before[k];\n"
    "      r = q;\n"
    "      dst += idx * ostr[k];\n"
    "      if (j < 0 || j >= e) {\n"
    "        /* numpy's 'reflect': the edge is not repeated. */\n"
    "        if (reflect)\n"
    "          j = j < 0 ? -j : 2 * (e - 1) - j;\n"
    "        else\n"
    "          inside = 0;\n"
    "      }\n"
    "      src += j * istr[k];\n"
    "    }\n"
    "    TST(out, ob + dst, inside ? TLD(in, ib + src) : value);\n"
    "  }\n"
    "}\n",
    "/* Raises flag[fb] when an index is not a whole number in [0, extent). "
    "*/\n"
    "__kernel void tyto_index_check(__global const TIS *ind, long xb,\n"
    "                               long8 shape, long8 str, int rank,\n"
    "                               long extent, __global int *flag,\n"
    "                               long fb, long n) {\n"
    "  TYTO_FOR(i, n)\n"
    "    if (!tyto_index_ok(TILD(ind, xb + tyto_offset(i, shape, str, rank)),\n"
    "                       extent))\n"
    "      flag[fb] = 1;\n"
    "}\n"
    "/* dcoef, icoef: per output dim, its stride in data (0 on the index\n"
    "   dims) and in the indices (0 elsewhere); dax: data's axis stride. */\n"
    "__kernel void tyto_gather(__global const TS *data, long db,\n"
    "                          long8 dcoef8,\n"
    "                          long dax, __global const TIS *ind, long xb,\n"
    "                          long8 icoef8, __global TS *out, long ob,\n"
    "                          long8 ostr8, long8 shape8, int rank, long n) {\n"
    "  TYTO_UNPACK(dcoef, dcoef8); TYTO_UNPACK(icoef, icoef8);\n"
    "  TYTO_UNPACK(ostr, ostr8); TYTO_UNPACK(shape, shape8);\n"
    "  TYTO_FOR(i, n) {\n"
    "    long r = i, d = 0, x = 0, o = 0;\n"
    "    for (int k = 0; k < rank; k++) {\n"
    "      long q = r / shape[k], idx = r - q * shape[k];\n"
    "      r = q;\n"
    "      d += idx * dcoef[k];\n"
    "      x += idx * icoef[k];\n"
    "      o += idx * ostr[k];\n"
    "    }\n"
    "    TST(out, ob + o, TLD(data, db + d + (long)TILD(ind, xb + x) * dax));\n"
    "  }\n"
    "}\n",
    "/* out = base plus, for the q (ascending) whose index keys[p] is this\n"
    "   element's position along the axis (dim ak), updates at uoff[p] past\n"
    "   the element's own offset in updates (ucoef: per dim, its stride in\n"
    "   updates, 0 on the axis). keys ascend; nq of them. */\n"
    "__kernel void tyto_scatter_add(__global const TS *base, long bb,\n"
    "                               long8 bstr8, __global const TS *upd,\n"
    "                               long ub, long8 ucoef8,\n"
    "                               __global const long *ws, long kb,\n"
    "                               long nq, __global TS *out, long ob,\n"
    "                               long8 ostr8, long8 shape8, int rank,\n"
    "                               int ak, long n) {\n"
    "  TYTO_UNPACK(bstr, bstr8); TYTO_UNPACK(ucoef, ucoef8);\n"
    "  TYTO_UNPACK(ostr, ostr8); TYTO_UNPACK(shape, shape8);\n"
    "  __global const long *keys = ws + kb, *uoff = ws + kb + nq;\n"
    "  TYTO_FOR(i, n) {\n"
    "    long r = i, b = 0, u = 0, o = 0, j = 0;\n"
    "    for (int k = 0; k < rank; k++) {\n"
    "      long q = r / shape[k], idx = r - q * shape[k];\n"
    "      r = q;\n"
    "      b += idx * bstr[k];\n"
    "      u += idx * ucoef[k];\n"
    "      o += idx * ostr[k];\n"
    "      if (k == ak)\n"
    "        j = idx;\n"
    "    }\n"
    "    T acc = TLD(base, bb + b);\n"
    "    long lo = 0, hi = nq;\n"
    "    while (lo < hi) {\n"
    "      long mid = lo + (hi - lo) / 2;\n"
    "      if (keys[mid] < j)\n"
    "        lo = mid + 1;\n"
    "      else\n"
    "        hi = mid;\n"
    "    }\n"
    "    for (long p = lo; p < nq && keys[p] == j; p++)\n"
    "      acc = TADD(acc, TLD(upd, ub + u + uoff[p]));\n"
    "    TST(out, ob + o, acc);\n"
    "  }\n"
    "}\n",
    "/* out[..., k] = 1 where the index is k, else 0. */\n"
    "__kernel void tyto_one_hot(__global const TIS *ind, long xb,\n"
    "                           long8 ishape,\n"
    "                           long8 istr, int irank, __global TS *out,\n"
    "                           long ob, long8 oshape, long8 ostr, int orank,\n"
    "                           long depth, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long k = i % depth;\n"
    "    TI v = TILD(ind, xb + tyto_offset(i / depth, ishape, istr, irank));\n"
    "    TST(out, ob + tyto_offset(i, oshape, ostr, orank),\n"
    "        tyto_index_ok(v, depth) && (long)v == k ? (T)1 : (T)0);\n"
    "  }\n"
    "}\n",
};

typedef struct index_impl {
  cl_kernel main;
  cl_kernel check; /* GATHER's index check */
  tpc_index ix;    /* the attributes as the check read them */
} index_impl;

static int owns(uint32_t op) {
  return tpc_index_op(op);
}

/* The rules of plugins/cpu/layout.c (plugins/common/index_plan.c). */
static tyto_plugin_error *check_into(tyto_plugin_device *dev, const ocl_desc *d,
                                     index_impl *c) {
  tpc_operands a;
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  char why[1024];
  int code = tpc_index_check(&a, "opencl", &c->ix, why, sizeof why);
  if (code != 0)
    return ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why);
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  index_impl c;
  memset(&c, 0, sizeof c);
  return check_into(dev, d, &c);
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  index_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = c;
  tyto_plugin_error *e = check_into(dev, d, c);
  if (e != NULL)
    return e;
  const char *name;
  switch (d->op) {
  case TYTO_PLUGIN_OP_PAD: name = "tyto_pad"; break;
  case TYTO_PLUGIN_OP_ONE_HOT: name = "tyto_one_hot"; break;
  case TYTO_PLUGIN_OP_GATHER:
    name = "tyto_gather";
    k->workspace_bytes = sizeof(cl_int); /* the flag */
    break;
  default:
    name = "tyto_scatter_add";
    /* Keys and offsets as longs; an f32 workspace binding may sit 4 bytes
     * off an 8-byte boundary, hence 4 bytes of slack. */
    k->workspace_bytes =
        d->in[1].n > 0 ? (uint64_t)d->in[1].n * 16 + (d->celem == 4 ? 4 : 0)
                       : 0;
    break;
  }
  char *source = ocl_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  const char *idx = ocl_idx_option(
      tpc_index_dtype(d->op, d->in[0].l.dtype,
                      d->n_in > 1 ? d->in[1].l.dtype : d->dtype, d->dtype));
  e = ocl_kernel_new(dev, d->dtype, source, idx, name, &c->main);
  if (e == NULL && d->op == TYTO_PLUGIN_OP_GATHER)
    e = ocl_kernel_new(dev, d->dtype, source, idx, "tyto_index_check",
                       &c->check);
  free(source);
  return e;
}

static void release(tyto_plugin_kernel *k) {
  index_impl *c = k->impl;
  if (c == NULL)
    return;
  if (c->main != NULL)
    clReleaseKernel(c->main);
  if (c->check != NULL)
    clReleaseKernel(c->check);
  free(c);
  k->impl = NULL;
}

/* ---- launch ---------------------------------------------------------------
 */

static tyto_plugin_error *pad_launch(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, index_impl *c,
                                     const ocl_desc *d, const ocl_arg *in,
                                     const ocl_arg *out) {
  const tyto_plugin_layout *il = &d->in[0].l, *ol = &d->out[0].l;
  uint32_t rank = ol->rank;
  cl_long8 ishape = ocl_long8_rev(il->shape, rank, 1),
           istr = ocl_long8_rev(il->strides, rank, 0),
           oshape = ocl_long8_rev(ol->shape, rank, 1),
           ostr = ocl_long8_rev(ol->strides, rank, 0),
           before = ocl_long8_rev(c->ix.before, rank, 0);
  cl_int crank = (cl_int)rank, reflect = c->ix.mode == 1;
  /* The constant in the compute type, rounded to the dtype. */
  cl_float vf = d->dtype == TYTO_PLUGIN_DTYPE_BF16
                    ? tpc_bf16_to_f32(tpc_f64_to_bf16(c->ix.value))
                : d->dtype == TYTO_PLUGIN_DTYPE_F16
                    ? tpc_f16_to_f32(tpc_f64_to_f16(c->ix.value))
                    : c->ix.valuef;
  cl_double vd = c->ix.value;
  /* Integers: as CAST converts a double. */
  cl_long vl = tpc_int_of_f64(d->dtype, c->ix.value);
  cl_int vi = (cl_int)vl;
  const void *value = d->dtype == TYTO_PLUGIN_DTYPE_I32   ? (const void *)&vi
                      : d->dtype == TYTO_PLUGIN_DTYPE_I64 ? (const void *)&vl
                      : d->celem == 8                     ? (const void *)&vd
                                                          : (const void *)&vf;
  cl_long n = d->out[0].n;
  ocl_args a = OCL_ARGS(dev, c->main);
  ocl_args_mem(&a, &in[0]);
  ocl_args_put(&a, sizeof ishape, &ishape);
  ocl_args_put(&a, sizeof istr, &istr);
  ocl_args_mem(&a, &out[0]);
  ocl_args_put(&a, sizeof oshape, &oshape);
  ocl_args_put(&a, sizeof ostr, &ostr);
  ocl_args_put(&a, sizeof before, &before);
  ocl_args_put(&a, sizeof crank, &crank);
  ocl_args_put(&a, sizeof reflect, &reflect);
  ocl_args_put(&a, d->celem, value);
  ocl_args_put(&a, sizeof n, &n);
  return a.e != NULL ? a.e : ocl_enqueue_n(dev, s, c->main, n, "pad kernel");
}

static tyto_plugin_error *one_hot_launch(tyto_plugin_device *dev,
                                         tyto_plugin_stream *s, index_impl *c,
                                         const ocl_desc *d, const ocl_arg *in,
                                         const ocl_arg *out) {
  const tyto_plugin_layout *ol = &d->out[0].l;
  cl_long depth = ol->shape[ol->rank - 1], n = d->out[0].n;
  ocl_args a = OCL_ARGS(dev, c->main);
  ocl_args_mem(&a, &in[0]);
  ocl_args_dims(&a, &d->in[0].l);
  ocl_args_mem(&a, &out[0]);
  ocl_args_dims(&a, ol);
  ocl_args_put(&a, sizeof depth, &depth);
  ocl_args_put(&a, sizeof n, &n);
  return a.e != NULL ? a.e
                     : ocl_enqueue_n(dev, s, c->main, n, "one_hot kernel");
}

/* Reads the elements the indices (input 1, bound at *x) reach into a new
 * host array (the caller frees it), waiting for the stream's work. */
static tyto_plugin_error *indices_read(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s, const ocl_desc *d,
                                       const ocl_arg *x, void **out) {
  const ocl_reach *r = &d->in[1];
  const char *op = ocl_op_name(d->op);
  const size_t elem = tpc_dtype_size(r->l.dtype);
  size_t bytes = (size_t)(r->hi - r->lo + 1) * elem;
  void *host = malloc(bytes);
  if (host == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory reading %zu bytes of indices", op,
                     bytes);
  /* The origin includes the layout's offset, the reach too. */
  size_t at = (size_t)(x->origin - r->l.offset + r->lo) * elem;
  tyto_plugin_error *e = ocl_read(dev, s, x->mem, at, bytes, host, op,
                                  "the indices back to check them");
  if (e != NULL) {
    free(host);
    return e;
  }
  *out = host;
  return NULL;
}

/* The indices (input 1) read back by indices_read() into `host` as the
 * shared scan sees them. */
static tpc_index_host indices_host(const ocl_desc *d, uint32_t axis,
                                   const void *host) {
  const tyto_plugin_layout *il = &d->in[1].l;
  return (tpc_index_host){
      d->op, il, host, il->offset - d->in[1].lo, d->in[0].l.shape[axis], axis};
}

static tyto_plugin_error *gather_launch(tyto_plugin_device *dev,
                                        tyto_plugin_stream *s, index_impl *c,
                                        const ocl_desc *d, const ocl_arg *in,
                                        const ocl_arg *out, const ocl_arg *ws) {
  const tyto_plugin_layout *dl = &d->in[0].l, *il = &d->in[1].l,
                           *ol = &d->out[0].l;
  uint32_t ax = c->ix.axis, ri = il->rank, rank = ol->rank;
  /* 1. Raise the flag in the workspace if an index is bad; read it. */
  cl_long fb = ws->origin * (cl_long)(d->celem / sizeof(cl_int));
  cl_long extent = dl->shape[ax], nind = d->in[1].n;
  cl_int flag = 0;
  tyto_plugin_error *e = ocl_clear(
      dev, s, ws->mem, (size_t)fb * sizeof(cl_int), sizeof flag, "gather",
      "the index check's flag", "gather index check (clearing the flag)");
  if (e != NULL)
    return e;
  ocl_args a = OCL_ARGS(dev, c->check);
  ocl_args_mem(&a, &in[1]);
  ocl_args_dims(&a, il);
  ocl_args_put(&a, sizeof extent, &extent);
  ocl_args_put(&a, sizeof ws->mem, &ws->mem);
  ocl_args_put(&a, sizeof fb, &fb);
  ocl_args_put(&a, sizeof nind, &nind);
  if (a.e != NULL)
    return a.e;
  if ((e = ocl_enqueue_n(dev, s, c->check, nind,
                         "gather index check kernel")) != NULL)
    return e;
  if ((e = ocl_read(dev, s, ws->mem, (size_t)fb * sizeof(cl_int), sizeof flag,
                    &flag, "gather", "the index check's flag")) != NULL)
    return e;
  if (flag != 0) {
    /* Find the first bad index for the message. */
    void *host;
    if ((e = indices_read(dev, s, d, &in[1], &host)) != NULL)
      return e;
    tpc_index_host ix = indices_host(d, ax, host);
    char why[512];
    int code = tpc_index_scan(&ix, why, sizeof why);
    free(host);
    return code != 0
               ? ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why)
               : ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_INTERNAL,
                           "gather: the device found a bad index that "
                           "the host does not");
  }
  /* 2. Gather. Output dims [0, ax) and (ax + ri - 1, rank) are data's,
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
  cl_long8 dc = ocl_long8_rev(dcoef, rank, 0),
           ic = ocl_long8_rev(icoef, rank, 0),
           ostr = ocl_long8_rev(ol->strides, rank, 0),
           shape = ocl_long8_rev(ol->shape, rank, 1);
  cl_long dax = dl->strides[ax], n = d->out[0].n;
  cl_int crank = (cl_int)rank;
  a = OCL_ARGS(dev, c->main);
  ocl_args_mem(&a, &in[0]);
  ocl_args_put(&a, sizeof dc, &dc);
  ocl_args_put(&a, sizeof dax, &dax);
  ocl_args_mem(&a, &in[1]);
  ocl_args_put(&a, sizeof ic, &ic);
  ocl_args_mem(&a, &out[0]);
  ocl_args_put(&a, sizeof ostr, &ostr);
  ocl_args_put(&a, sizeof shape, &shape);
  ocl_args_put(&a, sizeof crank, &crank);
  ocl_args_put(&a, sizeof n, &n);
  return a.e != NULL ? a.e : ocl_enqueue_n(dev, s, c->main, n, "gather kernel");
}

/* Checks the indices and writes them, sorted by (index, position), then
 * the offset in updates of each, as longs into the workspace at long
 * *kb. */
static tyto_plugin_error *scatter_keys(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s, index_impl *c,
                                       const ocl_desc *d, const ocl_arg *in,
                                       const ocl_arg *ws, cl_long *kb) {
  int64_t nq = d->in[1].n;
  void *host = NULL;
  tyto_plugin_error *e = indices_read(dev, s, d, &in[1], &host);
  if (e != NULL)
    return e;
  tpc_index_host ix = indices_host(d, c->ix.axis, host);
  int64_t *arr;
  char why[512];
  int code = tpc_index_keys(&ix, &d->in[2].l, &arr, why, sizeof why);
  if (code != 0) {
    e = ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why);
    goto done;
  }
  /* The first 8-byte boundary at or after the binding's offset. */
  size_t byte = (size_t)ws->origin * d->celem;
  *kb = (cl_long)((byte + 7) / 8);
  cl_int err = clEnqueueWriteBuffer(s->queue, ws->mem, CL_TRUE, (size_t)*kb * 8,
                                    (size_t)nq * 16, arr, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    e = ocl_error_cl(OCL_HOST(dev), "clEnqueueWriteBuffer", err,
                     "scatter_add: writing %lld sorted indices to the "
                     "workspace on \"%s\"",
                     (long long)nq, dev->info->name);
  free(arr);
done:
  free(host);
  return e;
}

static tyto_plugin_error *scatter_launch(tyto_plugin_device *dev,
                                         tyto_plugin_stream *s, index_impl *c,
                                         const ocl_desc *d, const ocl_arg *in,
                                         const ocl_arg *out,
                                         const ocl_arg *ws) {
  const tyto_plugin_layout *bl = &d->in[0].l, *ul = &d->in[2].l,
                           *ol = &d->out[0].l;
  uint32_t ax = c->ix.axis, ri = d->in[1].l.rank, rank = ol->rank;
  /* As on the CPU, the indices are checked only when there are updates. */
  cl_long nq = d->in[2].n > 0 ? d->in[1].n : 0, kb = 0;
  if (nq > 0) {
    tyto_plugin_error *e = scatter_keys(dev, s, c, d, in, ws, &kb);
    if (e != NULL)
      return e;
  }
  /* ucoef: per output dim, its stride in updates; 0 on the axis, whose
   * part comes from the sorted offsets. */
  int64_t ucoef[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t k = 0; k < rank; k++)
    ucoef[k] = k < ax ? ul->strides[k] : k > ax ? ul->strides[k - 1 + ri] : 0;
  cl_long8 bstr = ocl_long8_rev(bl->strides, rank, 0),
           uc = ocl_long8_rev(ucoef, rank, 0),
           ostr = ocl_long8_rev(ol->strides, rank, 0),
           shape = ocl_long8_rev(ol->shape, rank, 1);
  cl_int crank = (cl_int)rank, ak = (cl_int)(rank - 1 - ax);
  cl_long n = d->out[0].n;
  cl_mem wsm = nq > 0 ? ws->mem : NULL;
  ocl_args a = OCL_ARGS(dev, c->main);
  ocl_args_mem(&a, &in[0]);
  ocl_args_put(&a, sizeof bstr, &bstr);
  ocl_args_mem(&a, &in[2]);
  ocl_args_put(&a, sizeof uc, &uc);
  ocl_args_put(&a, sizeof wsm, &wsm);
  ocl_args_put(&a, sizeof kb, &kb);
  ocl_args_put(&a, sizeof nq, &nq);
  ocl_args_mem(&a, &out[0]);
  ocl_args_put(&a, sizeof ostr, &ostr);
  ocl_args_put(&a, sizeof shape, &shape);
  ocl_args_put(&a, sizeof crank, &crank);
  ocl_args_put(&a, sizeof ak, &ak);
  ocl_args_put(&a, sizeof n, &n);
  return a.e != NULL ? a.e
                     : ocl_enqueue_n(dev, s, c->main, n, "scatter_add kernel");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  index_impl *c = k->impl;
  const ocl_desc *d = &k->desc;
  switch (d->op) {
  case TYTO_PLUGIN_OP_PAD: return pad_launch(dev, s, c, d, in, out);
  case TYTO_PLUGIN_OP_ONE_HOT: return one_hot_launch(dev, s, c, d, in, out);
  case TYTO_PLUGIN_OP_GATHER: return gather_launch(dev, s, c, d, in, out, ws);
  default: return scatter_launch(dev, s, c, d, in, out, ws);
  }
}

const ocl_family ocl_family_index = {"index", owns,   check,
                                     prepare, launch, release};
