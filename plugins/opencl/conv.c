/*
 * CONV2D and its derivatives CONV2D_BACKWARD_DATA and
 * CONV2D_BACKWARD_FILTER on NCHW tensors, as im2col + GEMM through CLBlast.
 *
 * Semantics and validation follow the CPU plugin (plugins/cpu/conv.c):
 * symmetric padding, floor-mode output size
 *   OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1,
 * weights [O, C/groups, KH, KW]. "x" is the convolution's input, "w" its
 * weight, "y" its output; the backward ops read dy (y's gradient).
 *
 * Images go in chunks of nb (as many as fit a bounded workspace), and
 * everything a chunk needs lives in the workspace:
 *   col [C*KH*KW, nb*OH*OW]  the column matrix: row (c, kh, kw), column
 *                            (image, oh, ow); group g owns rows
 *                            g*K .. (g+1)*K - 1, K = C/groups*KH*KW;
 *   res [O, nb*OH*OW]        the GEMM result (forward) or dy packed
 *                            (derivatives); group g owns rows g*O/groups..
 * so that each group is one GEMM over the whole chunk (strided-batched over
 * the groups):
 *   forward:  res_g = w_g col_g, then y = res + bias written through y's
 *             strides;
 *   data:     col_g = w_g^T dy_g, then col2im as a gather (each dx element
 *             sums the column entries that came from it: no atomics), written
 *             through dx's strides;
 *   filter:   acc_g += dy_g col_g^T over the chunks (long reductions cut
 *             in slices, see CONV_SLICE), then dw = acc.
 * f16 and bf16 tensors are read into f32 (TLD) as im2col, the packing of
 * w (never handed to CLBlast in place) and of dy fill the workspace, which
 * holds f32; SGEMM accumulates in f32 and each result is rounded once as
 * the output kernels store it (TST).
 * Empty reductions (no input channels, an empty x, no images, no output
 * channels) skip the GEMMs and write bias or zeros.
 * im2col and the dy packing read their tensors through any strides; w goes
 * to CLBlast in place when it is dense row-major, else packed first.
 *
 * Small reductions (K = C/groups*KH*KW <= CONV_KMAX, as a first layer's
 * 1x5x5) make thin GEMMs that run far below speed, so CONV2D and
 * CONV2D_BACKWARD_FILTER compute them directly when every index fits an
 * int (conv_direct.c): the forward by work-items of 16 or 32 output
 * channels of one output pixel (T16 vectors, w packed to [groups *
 * blocks][K][channels] in the workspace), the weight gradient by
 * work-items that each sum over a slice of the output pixels into partial
 * results, then added slice by slice in a fixed order (deterministic).
 */
#include "ops.h"

#include <clblast_c.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "conv.h"
#include "errors.h"
#include "layout.h"

/* The most workspace bytes the chunking aims for (one image always gets
 * its columns, whatever they take). */
#ifndef CONV_WS_BUDGET
#define CONV_WS_BUDGET ((int64_t)256 << 20)
#endif
/* The weight gradient's GEMMs have a small [O/groups, K] result and a long
 * reduction over the chunk's nb*OH*OW columns: CLBlast gives such a GEMM
 * few work-groups (9 for 64 x 576), and on PoCL it runs 2-3 times slower
 * than the same work cut in slices. So the reduction is split in slices of
 * at least CONV_SLICE columns (at most CONV_MAX_SLICES of them), run as
 * one batch of GEMMs into partial results that a kernel then sums. */
#define CONV_SLICE 2048
#define CONV_MAX_SLICES 64

/* geo = (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, KH, KW);
 * dim = (first image n0, images nb, C, H, W, O, OH, OW). Strides are in
 * elements, NCHW order. The kernels run on 3-d grids: dimension 0 walks a
 * row (ow or w), 1 the rows of a plane, 2 the planes, each in grid-stride
 * loops, so that neighbouring work-items touch neighbouring elements and
 * no work-item divides per element. Loads are unconditional (from a
 * clamped, valid place) and selected afterwards, so that PoCL and other
 * vectorising compilers need no masked loads.
 *   im2col: col[(c, kh, kw)][(n, oh, ow)] = x, or 0 in the padding (H and
 *           W are not 0);
 *   out:    y[n0 + n, o, oh, ow] = res[o][(n, oh, ow)], + bias (_bias);
 *   pack:   out[o][(n, oh, ow)] = dy[n0 + n, o, oh, ow];
 *   col2im: dx[n0 + n, c, h, w] = the sum of the col entries read from it,
 *           in (kh, kw) order;
 *   wcopy:  dst = src (0 without src) over a 4-d shape, both strided;
 *   sum:    a = (first ? 0 : a) + the sum of S slices of p, each n long. */
static const char source_1[] =
    "#define CONV_GEO long sh = geo.s0, sw = geo.s1, ph = geo.s2, \\\n"
    "  pw = geo.s3, dh = geo.s4, dw = geo.s5, KH = geo.s6, KW = geo.s7;\n"
    "#define CONV_DIM long n0 = dim.s0, nb = dim.s1, C = dim.s2, \\\n"
    "  H = dim.s3, W = dim.s4, O = dim.s5, OH = dim.s6, OW = dim.s7, \\\n"
    "  P = OH * OW, cols = nb * P;\n"
    "#define CONV_GRID(planes, rows, cols, q, r, c) \\\n"
    "  for (long q = get_global_id(2); q < (planes); \\\n"
    "       q += (long)get_global_size(2)) \\\n"
    "    for (long r = get_global_id(1); r < (rows); \\\n"
    "         r += (long)get_global_size(1)) \\\n"
    "      for (long c = get_global_id(0); c < (cols); \\\n"
    "           c += (long)get_global_size(0))\n"
    "__kernel void tyto_conv_im2col(__global const TS *x, long xb, long4 xs,\n"
    "                               long8 geo, long8 dim,\n"
    "                               __global T *col, long cb) {\n"
    "  CONV_GEO CONV_DIM\n"
    "  CONV_GRID(nb * C, OH, OW, q, oh, ow) {\n"
    "    long n = q / C, c = q - n * C;\n"
    "    long xn = xb + (n0 + n) * xs.s0 + c * xs.s1;\n"
    "    long at = cb + c * KH * KW * cols + n * P + oh * OW + ow;\n"
    "    for (long kh = 0; kh < KH; kh++) {\n"
    "      long ih = oh * sh - ph + kh * dh;\n"
    "      int hin = ih >= 0 && ih < H;\n"
    "      long xh = xn + clamp(ih, 0L, H - 1) * xs.s2;\n"
    "      for (long kw = 0; kw < KW; kw++) {\n"
    "        long iw = ow * sw - pw + kw * dw;\n"
    "        T v = TLD(x, xh + clamp(iw, 0L, W - 1) * xs.s3);\n"
    "        col[at + (kh * KW + kw) * cols] =\n"
    "            hin && iw >= 0 && iw < W ? v : (T)0;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "}\n"
    "#define CONV_OUT(name, plus) \\\n"
    "__kernel void name(__global const T *res, long rb, \\\n"
    "                   __global const TS *bias, long bb, long bs, \\\n"
    "                   long8 dim, __global TS *y, long yb, long4 ys) { \\\n"
    "  CONV_DIM \\\n"
    "  CONV_GRID(nb * O, OH, OW, q, oh, ow) { \\\n"
    "    long n = q / O, o = q - n * O; \\\n"
    "    TST(y, \\\n"
    "        yb + (n0 + n) * ys.s0 + o * ys.s1 + oh * ys.s2 + ow * ys.s3, \\\n"
    "        res[rb + (o * nb + n) * P + oh * OW + ow] plus); \\\n"
    "  } \\\n"
    "}\n"
    "CONV_OUT(tyto_conv_out, )\n"
    "CONV_OUT(tyto_conv_out_bias, + TLD(bias, bb + o * bs))\n"
    "__kernel void tyto_conv_pack(__global const TS *dy, long db, long4 ds,\n"
    "                             long8 dim, __global T *out, long ob) {\n"
    "  CONV_DIM\n"
    "  CONV_GRID(nb * O, OH, OW, q, oh, ow) {\n"
    "    long n = q / O, o = q - n * O;\n"
    "    out[ob + (o * nb + n) * P + oh * OW + ow] =\n"
    "        TLD(dy, db + (n0 + n) * ds.s0 + o * ds.s1 + oh * ds.s2 +\n"
    "                    ow * ds.s3);\n"
    "  }\n"
    "}\n"
    "\n";
static const char source_2[] =
    "__kernel void tyto_conv_col2im(__global const T *col, long cb,\n"
    "                               long8 geo, long8 dim,\n"
    "                               __global TS *dx, long xb, long4 xs) {\n"
    "  CONV_GEO CONV_DIM\n"
    "  CONV_GRID(nb * C, H, W, q, h, w) {\n"
    "    long n = q / C, c = q - n * C;\n"
    "    T acc = (T)0;\n"
    "    for (long kh = 0; kh < KH; kh++) {\n"
    "      long t = h + ph - kh * dh, oh = sh == 1 ? t : t / sh;\n"
    "      int hok = t >= 0 && oh * sh == t && oh < OH;\n"
    "      long at = cb + (c * KH + kh) * KW * cols + n * P +\n"
    "                clamp(oh, 0L, OH - 1) * OW;\n"
    "      for (long kw = 0; kw < KW; kw++) {\n"
    "        long u = w + pw - kw * dw, ow = sw == 1 ? u : u / sw;\n"
    "        T v = col[at + kw * cols + clamp(ow, 0L, OW - 1)];\n"
    "        acc += hok && u >= 0 && ow * sw == u && ow < OW ? v : (T)0;\n"
    "      }\n"
    "    }\n"
    "    TST(dx, xb + (n0 + n) * xs.s0 + c * xs.s1 + h * xs.s2 + w * xs.s3,\n"
    "        acc);\n"
    "  }\n"
    "}\n"
    "/* wcopy between tensors (TS), _in into the workspace (T), _out out\n"
    "   of it. */\n"
    "#define CONV_LD(p, i) ((p)[i])\n"
    "#define CONV_ST(p, i, v) ((p)[i] = (v))\n"
    "#define CONV_WCOPY(name, SRC, LD, DST, ST) \\\n"
    "__kernel void name(__global const SRC *src, long sb, long4 ss, \\\n"
    "                   int have, __global DST *dst, long db, long4 ds, \\\n"
    "                   long4 shape) { \\\n"
    "  TYTO_FOR(i, shape.s0 * shape.s1 * shape.s2 * shape.s3) { \\\n"
    "    long d = i % shape.s3, q = i / shape.s3, c = q % shape.s2; \\\n"
    "    q /= shape.s2; \\\n"
    "    long b = q % shape.s1, a = q / shape.s1; \\\n"
    "    ST(dst, db + a * ds.s0 + b * ds.s1 + c * ds.s2 + d * ds.s3, \\\n"
    "       have ? LD(src, sb + a * ss.s0 + b * ss.s1 + c * ss.s2 + \\\n"
    "                      d * ss.s3) \\\n"
    "            : (T)0); \\\n"
    "  } \\\n"
    "}\n"
    "CONV_WCOPY(tyto_conv_wcopy, TS, TLD, TS, TST)\n"
    "CONV_WCOPY(tyto_conv_wcopy_in, TS, TLD, T, CONV_ST)\n"
    "CONV_WCOPY(tyto_conv_wcopy_out, T, CONV_LD, TS, TST)\n"
    "__kernel void tyto_conv_sum(__global const T *p, long pb, long S,\n"
    "                            long n, int first, __global T *a, long ab) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    T v = p[pb + i];\n"
    "    for (long s = 1; s < S; s++)\n"
    "      v += p[pb + s * n + i];\n"
    "    a[ab + i] = first ? v : a[ab + i] + v;\n"
    "  }\n"
    "}\n";
/* ISO C caps a string literal at 4095 characters. */
static const char *const source_parts[] = {source_1, source_2};

/* How many slices the weight gradient's reduction over n columns takes. */
static int64_t slice_count(int64_t n) {
  int64_t s = n / CONV_SLICE;
  return s < 1 ? 1 : s < CONV_MAX_SLICES ? s : CONV_MAX_SLICES;
}

/* Plans the workspace of c (geometry filled in): 0 when it overflows. */
static int plan(conv *c, uint64_t max_alloc) {
  int64_t Cg = c->g.C / c->g.G, K, CK, P = c->g.OH * c->g.OW, fixed = 0,
          per = 0, colp = 0, t;
  if (__builtin_mul_overflow(Cg, c->g.KH * c->g.KW, &K) ||
      __builtin_mul_overflow(c->g.C, c->g.KH * c->g.KW, &CK))
    return 0;
  int fwd = c->op == TYTO_PLUGIN_OP_CONV2D,
      filter = c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER;
  /* Whether GEMMs run at all: not for an empty reduction or x. */
  int xin = c->g.H > 0 && c->g.W > 0;
  c->gemm = fwd ? K > 0 && xin : filter ? c->g.N > 0 && xin : c->g.O > 0;
  int gemm = c->gemm;
  /* w packed (w_dense is 0 for the filter: its accumulator) */
  if (gemm && !c->w_dense && __builtin_mul_overflow(c->g.O, K, &fixed))
    return 0;
  if (gemm && (__builtin_mul_overflow(CK, P, &colp) ||
               __builtin_mul_overflow(c->g.O, P, &t) ||
               __builtin_add_overflow(colp, t, &per)))
    return 0;
  int64_t budget = CONV_WS_BUDGET;
  if (max_alloc / 2 < (uint64_t)budget)
    budget = (int64_t)(max_alloc / 2);
  budget /= (int64_t)c->elem;
  int64_t nb = per > 0 && budget - fixed > per ? (budget - fixed) / per : 1;
  if (nb > c->g.N)
    nb = c->g.N;
  c->max_slices = 1;
  c->off_part = fixed;
  if (filter && gemm) {
    /* The partials of the most slices a chunk of nb images takes, then
     * nb again for what is left (fewer images never take more slices). */
    c->max_slices = slice_count(nb * P);
    if (c->max_slices > 1 &&
        (__builtin_mul_overflow(c->max_slices, fixed, &t) ||
         __builtin_add_overflow(fixed, t, &fixed)))
      return 0;
    nb = per > 0 && budget - fixed > per ? (budget - fixed) / per : 1;
    nb = nb < c->g.N ? nb : c->g.N;
  }
  if (__builtin_mul_overflow(nb, per, &t) ||
      __builtin_add_overflow(fixed, t, &c->ws_elems) ||
      __builtin_mul_overflow(c->ws_elems, (int64_t)c->elem, &t))
    return 0;
  c->nb = nb;
  c->off_col = fixed;
  c->off_res = fixed + nb * colp;
  return 1;
}

/* Reads and checks the descriptor's geometry into *c (the rules all
 * plugins share, ../common/geometry.c), then plans the workspace. */
static tyto_plugin_error *geometry(tyto_plugin_device *dev, const ocl_desc *d,
                                   conv *c) {
  const tyto_plugin_host *h = OCL_HOST(dev);
  tpc_operands a;
  char why[1024];
  memset(c, 0, sizeof *c);
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  int code = tpc_conv_check(&a, &c->g, why, sizeof why);
  if (code != 0)
    return ocl_error(h, (tyto_plugin_code)code, "%s", why);
  c->op = d->op;
  c->dtype = d->dtype;
  c->elem = d->celem; /* the workspace's and the GEMMs' elements */
  const tyto_plugin_layout *x = tpc_operand(&a, c->g.x),
                           *w = tpc_operand(&a, c->g.w);
  /* 16-bit weights are read into f32 in the workspace: CLBlast multiplies
   * f32. */
  c->w_dense = c->op != TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER && tpc_dense(w) &&
               !ocl_is16(d->dtype);
  uint64_t max_alloc = dev->info->max_alloc_bytes;
  if (conv_direct_plan(c, d) && (uint64_t)c->ws_elems * c->elem <= max_alloc)
    return NULL;
  c->direct = 0;
  if (plan(c, max_alloc) && (uint64_t)c->ws_elems * c->elem <= max_alloc)
    return NULL;
  char sx[160], sw[160];
  ocl_format_shape(x, sx, sizeof sx);
  ocl_format_shape(w, sw, sizeof sw);
  return ocl_error(h, TYTO_PLUGIN_ERR_UNSUPPORTED,
                   "%s: the im2col workspace of one image of %s %s and %s %s "
                   "does not fit in one allocation of device \"%s\" (at most "
                   "%llu bytes)",
                   ocl_op_name(d->op), c->g.xname, sx, c->g.wname, sw,
                   dev->info->name, (unsigned long long)max_alloc);
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  conv c;
  return geometry(dev, d, &c);
}

static void release(tyto_plugin_kernel *k) {
  conv *c = k->impl;
  if (c == NULL)
    return;
  cl_kernel *ks[] = {&c->im2col,   &c->out,      &c->pack,      &c->col2im,
                     &c->wcopy,    &c->wcopy_in, &c->wcopy_out, &c->sum,
                     &c->direct_k, &c->wpack,    &c->dwpart,    &c->dwsum};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
    if (*ks[i] != NULL)
      clReleaseKernel(*ks[i]);
  ocl_gemm_release(&c->own);
  free(c);
  k->impl = NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  conv *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  tyto_plugin_error *e = geometry(dev, &k->desc, c);
  k->impl = c;
  if (e != NULL)
    return e;
  k->workspace_bytes = (uint64_t)c->ws_elems * c->elem;
  uint32_t dt = c->dtype;
  if (c->direct)
    return conv_direct_prepare(dev, c);
  int fwd = c->op == TYTO_PLUGIN_OP_CONV2D,
      data = c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA,
      filter = !fwd && !data;
  if (c->gemm && dev->info->gemm_own && ocl_gemm_own_dtype(k->desc.cdtype) &&
      (e = ocl_gemm_prepare(dev, k->desc.cdtype, NULL, &c->own)) != NULL)
    return e;
  char *source = ocl_source_join(source_parts, 2);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  if (!data && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_im2col", &c->im2col);
  if (!fwd && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_pack", &c->pack);
  if (fwd && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL,
                       c->g.has_bias ? "tyto_conv_out_bias" : "tyto_conv_out",
                       &c->out);
  if (data && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_col2im", &c->col2im);
  if (c->max_slices > 1 && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_sum", &c->sum);
  if (e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_wcopy", &c->wcopy);
  if (!c->w_dense && !filter && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_wcopy_in",
                       &c->wcopy_in);
  if (filter && e == NULL)
    e = ocl_kernel_new(dev, dt, source, NULL, "tyto_conv_wcopy_out",
                       &c->wcopy_out);
  free(source);
  return e;
}

/* ---- launch -------------------------------------------------------------- */

static const char *blast_name(CLBlastStatusCode st) {
  switch (st) {
  case CLBlastNotImplemented: return "CLBlastNotImplemented";
  case CLBlastInvalidMatrixA: return "CLBlastInvalidMatrixA";
  case CLBlastInvalidMatrixB: return "CLBlastInvalidMatrixB";
  case CLBlastInvalidMatrixC: return "CLBlastInvalidMatrixC";
  case CLBlastInvalidDimension: return "CLBlastInvalidDimension";
  case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
  case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
  case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
  case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
  case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
  case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
  case CLBlastInsufficientMemoryTemp: return "CLBlastInsufficientMemoryTemp";
  case CLBlastInvalidBatchCount: return "CLBlastInvalidBatchCount";
  case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
  case CLBlastNoDoublePrecision: return "CLBlastNoDoublePrecision";
  case CLBlastDatabaseError: return "CLBlastDatabaseError";
  case CLBlastUnknownError: return "CLBlastUnknownError";
  case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
  default: return "an unlisted CLBlast status";
  }
}

/* One GEMM (batch 1) or a strided batch of them, row-major, alpha 1, on
 * the stream's queue. Offsets and leading dimensions are in elements. */
typedef struct gemm_args {
  CLBlastTranspose ta, tb;
  size_t m, n, k;
  cl_mem a, b, c;
  size_t a_off, lda, a_str, b_off, ldb, b_str, c_off, ldc, c_str;
  double beta;
  size_t batch;
  /* When set, a batch with these offsets (a_off, b_off, c_off and the
   * strides unused). */
  const size_t *a_offs, *b_offs, *c_offs;
} gemm_args;

static tyto_plugin_error *gemm(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const conv *c, const gemm_args *g,
                               const char *what) {
  if (c->own.j != NULL && g->a_offs == NULL) {
    ocl_gemm o = {
        .ta = g->ta == CLBlastTransposeYes,
        .tb = g->tb == CLBlastTransposeYes,
        .m = (int64_t)g->m,
        .n = (int64_t)g->n,
        .k = (int64_t)g->k,
        .a = g->a,
        .b = g->b,
        .c = g->c,
        .a_off = (int64_t)g->a_off,
        .lda = (int64_t)g->lda,
        .a_str = (int64_t)g->a_str,
        .b_off = (int64_t)g->b_off,
        .ldb = (int64_t)g->ldb,
        .b_str = (int64_t)g->b_str,
        .c_off = (int64_t)g->c_off,
        .ldc = (int64_t)g->ldc,
        .c_str = (int64_t)g->c_str,
        .beta = g->beta,
        .batch = (int64_t)g->batch,
        .elem = c->elem,
    };
    return ocl_gemm_run(dev, s, &c->own, &o, what);
  }
  tyto_plugin_error *e = ocl_stream_reserve(s);
  if (e != NULL)
    return e;
  const CLBlastLayout rm = CLBlastLayoutRowMajor;
  cl_event ev = NULL;
  CLBlastStatusCode st;
  const char *call;
  if (g->a_offs != NULL) {
    /* alphas then betas; CLBlast copies them before it returns */
    void *scal = malloc(2 * g->batch * c->elem);
    if (scal == NULL)
      return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                       "%s: out of host memory for a batch of %zu GEMMs",
                       ocl_op_name(c->op), g->batch);
    if (c->elem == 4) {
      float *fs = scal;
      for (size_t i = 0; i < g->batch; i++)
        fs[i] = 1.0f, fs[g->batch + i] = (float)g->beta;
      call = "CLBlastSgemmBatched";
      st = CLBlastSgemmBatched(rm, g->ta, g->tb, g->m, g->n, g->k, fs, g->a,
                               g->a_offs, g->lda, g->b, g->b_offs, g->ldb,
                               fs + g->batch, g->c, g->c_offs, g->ldc, g->batch,
                               &s->queue, &ev);
    } else {
      double *ds = scal;
      for (size_t i = 0; i < g->batch; i++)
        ds[i] = 1.0, ds[g->batch + i] = g->beta;
      call = "CLBlastDgemmBatched";
      st = CLBlastDgemmBatched(rm, g->ta, g->tb, g->m, g->n, g->k, ds, g->a,
                               g->a_offs, g->lda, g->b, g->b_offs, g->ldb,
                               ds + g->batch, g->c, g->c_offs, g->ldc, g->batch,
                               &s->queue, &ev);
    }
    free(scal);
  } else if (c->elem == 4 && g->batch == 1) {
    call = "CLBlastSgemm";
    st = CLBlastSgemm(rm, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->a_off,
                      g->lda, g->b, g->b_off, g->ldb, (float)g->beta, g->c,
                      g->c_off, g->ldc, &s->queue, &ev);
  } else if (c->elem == 4) {
    call = "CLBlastSgemmStridedBatched";
    st = CLBlastSgemmStridedBatched(
        rm, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->a_off, g->lda,
        g->a_str, g->b, g->b_off, g->ldb, g->b_str, (float)g->beta, g->c,
        g->c_off, g->ldc, g->c_str, g->batch, &s->queue, &ev);
  } else if (g->batch == 1) {
    call = "CLBlastDgemm";
    st = CLBlastDgemm(rm, g->ta, g->tb, g->m, g->n, g->k, 1.0, g->a, g->a_off,
                      g->lda, g->b, g->b_off, g->ldb, g->beta, g->c, g->c_off,
                      g->ldc, &s->queue, &ev);
  } else {
    call = "CLBlastDgemmStridedBatched";
    st = CLBlastDgemmStridedBatched(
        rm, g->ta, g->tb, g->m, g->n, g->k, 1.0, g->a, g->a_off, g->lda,
        g->a_str, g->b, g->b_off, g->ldb, g->b_str, g->beta, g->c, g->c_off,
        g->ldc, g->c_str, g->batch, &s->queue, &ev);
  }
  if (st == CLBlastSuccess) {
    ocl_stream_track(s, ev, what);
    return NULL;
  }
  if (ev != NULL)
    clReleaseEvent(ev);
  const char *op = ocl_op_name(c->op);
  if (st > -1000) /* an OpenCL status passed through */
    return ocl_error_cl(OCL_HOST(dev), call, (cl_int)st,
                        "%s (%s): %s, m %zu n %zu k %zu batch %zu, on \"%s\"",
                        op, ocl_dtype_name(c->dtype), what, g->m, g->n, g->k,
                        g->batch, dev->info->name);
  return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_DEVICE,
                   "%s (%s): %s failed with %s (%d): %s, m %zu n %zu k %zu "
                   "batch %zu, on \"%s\"",
                   op, ocl_dtype_name(c->dtype), call, blast_name(st), (int)st,
                   what, g->m, g->n, g->k, g->batch, dev->info->name);
}

cl_long4 conv_long4(const int64_t *v) {
  cl_long4 r;
  for (int i = 0; i < 4; i++)
    r.s[i] = v[i];
  return r;
}

#define A(v) OCL_KARG(v)

/* What one launch works with. */
typedef struct conv_ctx {
  tyto_plugin_device *dev;
  tyto_plugin_stream *s;
  const conv *c;
  cl_mem ws;
  cl_long wsb; /* the workspace's origin, elements */
  cl_long8 geo, dim;
} conv_ctx;

/* Copies a 4-d tensor of shape `shape` between (mem, base, strides)
 * places; src NULL writes zeros. */
static tyto_plugin_error *wcopy(conv_ctx *x, cl_kernel k, cl_mem src,
                                cl_long sb, const int64_t *ss, cl_mem dst,
                                cl_long db, const int64_t *ds,
                                const int64_t *shape, const char *what) {
  cl_long4 s4 = conv_long4(ss), d4 = conv_long4(ds), sh4 = conv_long4(shape);
  cl_int have = src != NULL;
  ocl_karg args[] = {A(src), A(sb), A(s4), A(have),
                     A(dst), A(db), A(d4), A(sh4)};
  size_t global = ocl_global_size(shape[0] * shape[1] * shape[2] * shape[3]);
  return ocl_run(x->dev, x->s, k, args, 8, 1, &global, what);
}

/* The global size of a CONV_GRID over (planes, rows, cols): each at
 * least 1, at most 2^24 work-items in all. */
static void grid3(int64_t planes, int64_t rows, int64_t cols, size_t *g) {
  int64_t c = cols < 1 ? 1 : cols < 1024 ? cols : 1024;
  int64_t r = rows < 1 ? 1 : rows < 1024 ? rows : 1024;
  int64_t p = ((int64_t)1 << 24) / (c * r);
  p = planes < p ? planes : p;
  g[0] = (size_t)c;
  g[1] = (size_t)r;
  g[2] = (size_t)(p < 1 ? 1 : p);
}

/* Sets x->dim to the chunk of nb images from n0. */
static void chunk(conv_ctx *x, int64_t n0, int64_t nb) {
  const conv *c = x->c;
  int64_t dim[8] = {n0, nb, c->g.C, c->g.H, c->g.W, c->g.O, c->g.OH, c->g.OW};
  for (int i = 0; i < 8; i++)
    x->dim.s[i] = dim[i];
}

/* im2col of the chunk into the workspace's col. */
static tyto_plugin_error *im2col(conv_ctx *x, const ocl_arg *xa,
                                 const int64_t *xs) {
  const conv *c = x->c;
  cl_long4 s4 = conv_long4(xs);
  cl_long cb = x->wsb + c->off_col;
  ocl_karg args[] = {A(xa->mem), A(xa->origin), A(s4), A(x->geo),
                     A(x->dim),  A(x->ws),      A(cb)};
  size_t global[3];
  grid3(x->dim.s[1] * c->g.C, c->g.OH, c->g.OW, global);
  return ocl_run(x->dev, x->s, c->im2col, args, 7, 3, global, "conv2d im2col");
}

/* dy of the chunk packed into the workspace's res. */
static tyto_plugin_error *pack_dy(conv_ctx *x, const ocl_arg *dy,
                                  const int64_t *ds) {
  const conv *c = x->c;
  cl_long4 s4 = conv_long4(ds);
  cl_long ob = x->wsb + c->off_res;
  ocl_karg args[] = {A(dy->mem), A(dy->origin), A(s4),
                     A(x->dim),  A(x->ws),      A(ob)};
  size_t global[3];
  grid3(x->dim.s[1] * c->g.O, c->g.OH, c->g.OW, global);
  return ocl_run(x->dev, x->s, c->pack, args, 6, 3, global,
                 "conv2d dy packing");
}

/* w for CLBlast into *wmem, *woff: in place when dense, else packed at
 * the workspace's origin. */
static tyto_plugin_error *weights(conv_ctx *x, const ocl_arg *wa,
                                  const tyto_plugin_layout *wl, cl_mem *wmem,
                                  size_t *woff) {
  const conv *c = x->c;
  *wmem = wa->mem;
  *woff = (size_t)wa->origin;
  if (c->w_dense)
    return NULL;
  int64_t shape[4] = {c->g.O, c->g.C / c->g.G, c->g.KH, c->g.KW};
  int64_t dense4[4] = {shape[1] * c->g.KH * c->g.KW, c->g.KH * c->g.KW, c->g.KW,
                       1};
  *wmem = x->ws;
  *woff = (size_t)x->wsb;
  return wcopy(x, c->wcopy_in, wa->mem, wa->origin, wl->strides, x->ws, x->wsb,
               dense4, shape, "conv2d weight packing");
}

/* CONV2D: x, w, (bias) -> y. */
static tyto_plugin_error *forward(conv_ctx *x, const ocl_desc *d,
                                  const ocl_arg *in, const ocl_arg *y) {
  const conv *c = x->c;
  const int64_t *ys = d->out[0].l.strides;
  cl_mem bmem = c->g.has_bias ? in[2].mem : NULL;
  cl_long bb = c->g.has_bias ? in[2].origin : 0;
  int64_t bst = c->g.has_bias ? d->in[2].l.strides[0] : 0;
  int64_t yshape[4] = {c->g.N, c->g.O, c->g.OH, c->g.OW};
  if (!c->gemm) { /* no input channels or an empty x: y = bias or 0 */
    int64_t bs4[4] = {0, bst, 0, 0};
    return wcopy(x, c->wcopy, bmem, bb, bs4, y->mem, y->origin, ys, yshape,
                 "conv2d output");
  }
  int64_t Og = c->g.O / c->g.G, K = c->g.C / c->g.G * c->g.KH * c->g.KW,
          P = c->g.OH * c->g.OW;
  cl_mem wmem;
  size_t woff;
  tyto_plugin_error *e = weights(x, &in[1], &d->in[1].l, &wmem, &woff);
  cl_long rb = x->wsb + c->off_res, cb = x->wsb + c->off_col, bs = bst;
  cl_long4 ys4 = conv_long4(ys);
  for (int64_t n0 = 0; n0 < c->g.N && e == NULL; n0 += c->nb) {
    int64_t nb = c->g.N - n0 < c->nb ? c->g.N - n0 : c->nb;
    size_t nbp = (size_t)(nb * P);
    chunk(x, n0, nb);
    if ((e = im2col(x, &in[0], d->in[0].l.strides)) != NULL)
      break;
    /* res_g [Og, nbp] = w_g [Og, K] col_g [K, nbp] */
    gemm_args g = {.ta = CLBlastTransposeNo,
                   .tb = CLBlastTransposeNo,
                   .m = (size_t)Og,
                   .n = nbp,
                   .k = (size_t)K,
                   .a = wmem,
                   .a_off = woff,
                   .lda = (size_t)K,
                   .a_str = (size_t)(Og * K),
                   .b = x->ws,
                   .b_off = (size_t)cb,
                   .ldb = nbp,
                   .b_str = (size_t)K * nbp,
                   .c = x->ws,
                   .c_off = (size_t)rb,
                   .ldc = nbp,
                   .c_str = (size_t)Og * nbp,
                   .beta = 0.0,
                   .batch = (size_t)c->g.G};
    if ((e = gemm(x->dev, x->s, c, &g, "conv2d GEMM")) != NULL)
      break;
    ocl_karg args[] = {A(x->ws),  A(rb),     A(bmem),      A(bb), A(bs),
                       A(x->dim), A(y->mem), A(y->origin), A(ys4)};
    size_t global[3];
    grid3(nb * c->g.O, c->g.OH, c->g.OW, global);
    e = ocl_run(x->dev, x->s, c->out, args, 9, 3, global, "conv2d output");
  }
  return e;
}

/* CONV2D_BACKWARD_DATA: dy, w -> dx. */
static tyto_plugin_error *data(conv_ctx *x, const ocl_desc *d,
                               const ocl_arg *in, const ocl_arg *dx) {
  const conv *c = x->c;
  const int64_t *xs = d->out[0].l.strides;
  if (!c->gemm) { /* no output channels: dx = 0 */
    int64_t xshape[4] = {c->g.N, c->g.C, c->g.H, c->g.W};
    return wcopy(x, c->wcopy, NULL, 0, xs, dx->mem, dx->origin, xs, xshape,
                 "conv2d_backward_data output");
  }
  int64_t Og = c->g.O / c->g.G, K = c->g.C / c->g.G * c->g.KH * c->g.KW,
          P = c->g.OH * c->g.OW;
  cl_mem wmem;
  size_t woff;
  tyto_plugin_error *e = weights(x, &in[1], &d->in[1].l, &wmem, &woff);
  cl_long rb = x->wsb + c->off_res, cb = x->wsb + c->off_col;
  cl_long4 xs4 = conv_long4(xs);
  for (int64_t n0 = 0; n0 < c->g.N && e == NULL; n0 += c->nb) {
    int64_t nb = c->g.N - n0 < c->nb ? c->g.N - n0 : c->nb;
    size_t nbp = (size_t)(nb * P);
    chunk(x, n0, nb);
    if ((e = pack_dy(x, &in[0], d->in[0].l.strides)) != NULL)
      break;
    /* col_g [K, nbp] = w_g^T [K, Og] dy_g [Og, nbp] */
    gemm_args g = {.ta = CLBlastTransposeYes,
                   .tb = CLBlastTransposeNo,
                   .m = (size_t)K,
                   .n = nbp,
                   .k = (size_t)Og,
                   .a = wmem,
                   .a_off = woff,
                   .lda = (size_t)K,
                   .a_str = (size_t)(Og * K),
                   .b = x->ws,
                   .b_off = (size_t)rb,
                   .ldb = nbp,
                   .b_str = (size_t)Og * nbp,
                   .c = x->ws,
                   .c_off = (size_t)cb,
                   .ldc = nbp,
                   .c_str = (size_t)K * nbp,
                   .beta = 0.0,
                   .batch = (size_t)c->g.G};
    if ((e = gemm(x->dev, x->s, c, &g, "conv2d_backward_data GEMM")) != NULL)
      break;
    ocl_karg args[] = {A(x->ws),   A(cb),         A(x->geo), A(x->dim),
                       A(dx->mem), A(dx->origin), A(xs4)};
    size_t global[3];
    grid3(nb * c->g.C, c->g.H, c->g.W, global);
    e = ocl_run(x->dev, x->s, c->col2im, args, 7, 3, global,
                "conv2d_backward_data col2im");
  }
  return e;
}

/* The weight gradient's GEMMs of one chunk (nbp columns): acc_g [Og, K]
 * (+)= dy_g [Og, nbp] col_g^T [nbp, K], in place (beta 1 after the first
 * chunk), or in slices (CONV_SLICE) whose partials tyto_conv_sum adds. */
static tyto_plugin_error *filter_gemm(conv_ctx *x, int64_t n0, size_t nbp) {
  const conv *c = x->c;
  size_t Og = (size_t)(c->g.O / c->g.G),
         K = (size_t)(c->g.C / c->g.G * c->g.KH * c->g.KW), G = (size_t)c->g.G,
         res = (size_t)(x->wsb + c->off_res),
         col = (size_t)(x->wsb + c->off_col),
         part = (size_t)(x->wsb + c->off_part);
  size_t S = (size_t)slice_count((int64_t)nbp);
  if (S > (size_t)c->max_slices)
    S = (size_t)c->max_slices;
  gemm_args g = {.ta = CLBlastTransposeNo,
                 .tb = CLBlastTransposeYes,
                 .m = Og,
                 .n = K,
                 .k = nbp,
                 .a = x->ws,
                 .a_off = res,
                 .lda = nbp,
                 .a_str = Og * nbp,
                 .b = x->ws,
                 .b_off = col,
                 .ldb = nbp,
                 .b_str = K * nbp,
                 .c = x->ws,
                 .c_off = (size_t)x->wsb,
                 .ldc = K,
                 .c_str = Og * K,
                 .beta = n0 > 0 ? 1.0 : 0.0,
                 .batch = G};
  if (S == 1)
    return gemm(x->dev, x->s, c, &g, "conv2d_backward_filter GEMM");
  /* Slice s of group g: columns s*L .. s*L + L - 1 into partial s. */
  size_t L = nbp / S, n = G * S, OK = (size_t)c->g.O * K;
  size_t *offs = malloc(3 * n * sizeof *offs);
  if (offs == NULL)
    return ocl_error(OCL_HOST(x->dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "conv2d_backward_filter: out of host memory");
  for (size_t gi = 0; gi < G; gi++)
    for (size_t si = 0; si < S; si++) {
      offs[gi * S + si] = res + gi * Og * nbp + si * L;
      offs[n + gi * S + si] = col + gi * K * nbp + si * L;
      offs[2 * n + gi * S + si] = part + si * OK + gi * Og * K;
    }
  gemm_args sl = g;
  sl.k = L;
  sl.beta = 0.0;
  sl.batch = n;
  sl.a_offs = offs, sl.b_offs = offs + n, sl.c_offs = offs + 2 * n;
  tyto_plugin_error *e =
      gemm(x->dev, x->s, c, &sl, "conv2d_backward_filter GEMM slices");
  free(offs);
  if (e == NULL && nbp > S * L) { /* the columns left, onto partial 0 */
    gemm_args rest = g;
    rest.k = nbp - S * L;
    rest.a_off = res + S * L;
    rest.b_off = col + S * L;
    rest.c_off = part;
    rest.beta = 1.0;
    e = gemm(x->dev, x->s, c, &rest, "conv2d_backward_filter GEMM rest");
  }
  if (e != NULL)
    return e;
  cl_long pb = (cl_long)part, Sl = (cl_long)S, nl = (cl_long)OK, ab = x->wsb;
  cl_int first = n0 == 0;
  ocl_karg args[] = {A(x->ws), A(pb), A(Sl), A(nl), A(first), A(x->ws), A(ab)};
  size_t global = ocl_global_size((int64_t)OK);
  return ocl_run(x->dev, x->s, c->sum, args, 7, 1, &global,
                 "conv2d_backward_filter slice sum");
}

/* CONV2D_BACKWARD_FILTER: x, dy -> dw, summed over the chunks in the
 * accumulator at the workspace's origin. */
static tyto_plugin_error *filter(conv_ctx *x, const ocl_desc *d,
                                 const ocl_arg *in, const ocl_arg *dw) {
  const conv *c = x->c;
  int64_t K = c->g.C / c->g.G * c->g.KH * c->g.KW, P = c->g.OH * c->g.OW;
  int64_t shape[4] = {c->g.O, c->g.C / c->g.G, c->g.KH, c->g.KW};
  int64_t dense4[4] = {K, c->g.KH * c->g.KW, c->g.KW, 1};
  tyto_plugin_error *e = NULL;
  for (int64_t n0 = 0; c->gemm && n0 < c->g.N && e == NULL; n0 += c->nb) {
    int64_t nb = c->g.N - n0 < c->nb ? c->g.N - n0 : c->nb;
    size_t nbp = (size_t)(nb * P);
    chunk(x, n0, nb);
    if ((e = im2col(x, &in[0], d->in[0].l.strides)) != NULL ||
        (e = pack_dy(x, &in[1], d->in[1].l.strides)) != NULL)
      break;
    e = filter_gemm(x, n0, nbp);
  }
  if (e != NULL)
    return e;
  /* No images or an empty x: dw = 0. */
  return wcopy(x, c->wcopy_out, c->gemm ? x->ws : NULL, x->wsb, dense4, dw->mem,
               dw->origin, d->out[0].l.strides, shape,
               "conv2d_backward_filter output");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  const conv *c = k->impl;
  conv_ctx x = {dev, s, c, ws->mem, ws->origin, {{0}}, {{0}}};
  int64_t geo[8] = {c->g.sh, c->g.sw, c->g.ph, c->g.pw,
                    c->g.dh, c->g.dw, c->g.KH, c->g.KW};
  for (int i = 0; i < 8; i++)
    x.geo.s[i] = geo[i];
  if (c->direct)
    return conv_direct_launch(dev, s, c, &k->desc, in, out, ws);
  switch (c->op) {
  case TYTO_PLUGIN_OP_CONV2D: return forward(&x, &k->desc, in, &out[0]);
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA:
    return data(&x, &k->desc, in, &out[0]);
  default: return filter(&x, &k->desc, in, &out[0]);
  }
}

const ocl_family ocl_family_conv = {"conv",  tpc_conv_op, check,
                                    prepare, launch,      release};
