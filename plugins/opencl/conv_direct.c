/*
 * The conv family's direct path (see conv.c): CONV2D and
 * CONV2D_BACKWARD_FILTER for small reductions (K = C/groups*KH*KW <=
 * CONV_KMAX, as a first layer's 1x5x5), whose im2col GEMMs are too thin to
 * run well.
 *  - forward: w is packed into the workspace as [groups * blocks][K][BW],
 *    BW = 16 or 32 output channels; each work-item computes the BW
 *    channels of one output pixel as T16 vectors;
 *  - weight gradient: each work-item sums dy * x over a slice of the
 *    output pixels for the BW channels of a block and every tap into the
 *    workspace; a second kernel adds the slices in a fixed order, so
 *    results are the same at every run.
 * Indices are ints (the plan checks that every one stays below
 * CONV_I32_LIMIT) and divisions by extents multiply-shifts, which keeps
 * the work-items' code cheap on PoCL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "errors.h"

/* The direct kernels: the largest reduction K (the size of a private
 * array of T16 in tyto_conv_dw), the bound of the indices they form as
 * ints, and the work-items tyto_conv_dw aims for (slices x blocks). */
#define CONV_KMAX 32
#define CONV_I32_LIMIT ((int64_t)1 << 30)
#define CONV_DW_ITEMS 512

/* The direct kernels (int indices), in parts (see direct_source). */
static const char *const direct_parts[] = {
    "/* Direct convolution for small reductions (K <= CONV_KMAX, from the\n"
    "   build options), int indices throughout. geo: sh, sw, ph, pw, dh, dw,\n"
    "   KH, KW; dim: N, C, H, W, O, OH, OW, G; q: Cg, Og, K = Cg*KH*KW, NB\n"
    "   blocks of BW = 16 NV output channels per group (NV 1 or 2 vectors of\n"
    "   16); m: (magic, shift) pairs that divide by s01 NP = N*OH*OW\n"
    "   (forward) or G*NB (weight gradient), s23 OW, s45 OH, s67 NB. */\n"
    "#define CAT_(a, b) a##b\n"
    "#define CAT(a, b) CAT_(a, b)\n"
    "#define T16 CAT(T, 16)\n"
    "#define CONV_DIV(a, m) \\\n"
    "  ((int)((mul_hi((uint)(a), (m).x) + (uint)(a)) >> (m).y))\n"
    "#define CONV_GEO \\\n"
    "  int sh = (int)geo.s0, sw = (int)geo.s1, ph = (int)geo.s2; \\\n"
    "  int pw = (int)geo.s3, dh = (int)geo.s4, dw = (int)geo.s5; \\\n"
    "  int KH = (int)geo.s6, KW = (int)geo.s7, N = (int)dim.s0; \\\n"
    "  int H = (int)dim.s2, W = (int)dim.s3, OH = (int)dim.s5; \\\n"
    "  int OW = (int)dim.s6, Cg = q.s0, Og = q.s1, K = q.s2, NB = q.s3; \\\n"
    "  int NV = q.s4, BW = 16 * NV, NP = N * OH * OW;\n"
    "/* The taps of output pixel (nn, oh, ow) in group g, in (c, kh, kw)\n"
    "   order: `body` runs with v, the input there or 0 in the padding. */\n"
    "#define CONV_TAPS(body) \\\n"
    "  for (int c = 0; c < Cg; c++) { \\\n"
    "    __global const TS *xc = \\\n"
    "        x + nn * (int)xs.s0 + (g * Cg + c) * (int)xs.s1; \\\n"
    "    for (int kh = 0; kh < KH; kh++) { \\\n"
    "      int ih = oh * sh - ph + kh * dh; \\\n"
    "      int hin = ih >= 0 && ih < H; \\\n"
    "      __global const TS *xh = xc + clamp(ih, 0, H - 1) * (int)xs.s2; \\\n"
    "      for (int kw = 0; kw < KW; kw++) { \\\n"
    "        int iw = ow * sw - pw + kw * dw; \\\n"
    "        T v = TLD(xh, clamp(iw, 0, W - 1) * (int)xs.s3); \\\n"
    "        v = hin && iw >= 0 && iw < W ? v : (T)0; \\\n"
    "        body; \\\n"
    "      } \\\n"
    "    } \\\n"
    "  }\n"
    "/* CONV2D: work-item (block, pixel) computes the BW output channels of\n"
    "   a block at one output pixel as NV vectors, w packed as\n"
    "   [G * NB][K][BW]. */\n"
    "__kernel void tyto_conv_direct(__global const TS *x, long xb, long4 xs,\n"
    "                               __global const T *wp, long pb,\n"
    "                               __global const TS *bias, long bb,\n"
    "                               long bs,\n"
    "                               int has_bias, __global TS *y, long yb,\n"
    "                               long4 ys, long8 geo, long8 dim, int8 q,\n"
    "                               uint8 m, int n) {\n"
    "  CONV_GEO\n"
    "  int i = get_global_id(0);\n"
    "  if (i >= n)\n"
    "    return;\n"
    "  x += xb;\n"
    "  y += yb;\n"
    "  int blk = CONV_DIV(i, m.s01), p = i - blk * NP;\n"
    "  int t = CONV_DIV(p, m.s23), ow = p - t * OW;\n"
    "  int nn = CONV_DIV(t, m.s45), oh = t - nn * OH;\n"
    "  int g = CONV_DIV(blk, m.s67), o0 = g * Og + (blk - g * NB) * BW;\n"
    "  int cnt = min(BW, g * Og + Og - o0);\n"
    "  __global const T *wv = wp + pb + blk * K * BW;\n"
    "  T16 acc = (T16)0, acc1 = (T16)0;\n"
    "  int k = 0;\n"
    "  CONV_TAPS(acc += vload16(k, wv) * v;\n"
    "            if (NV > 1) acc1 += vload16(k + 1, wv) * v;\n"
    "            k += NV)\n"
    "  T r[32];\n"
    "  vstore16(acc, 0, r);\n"
    "  vstore16(acc1, 1, r);\n"
    "  __global TS *yp = y + nn * (int)ys.s0 + o0 * (int)ys.s1 +\n"
    "                    oh * (int)ys.s2 + ow * (int)ys.s3;\n"
    "  for (int j = 0; j < cnt; j++)\n"
    "    TST(yp, j * (int)ys.s1,\n"
    "        has_bias ? r[j] + TLD(bias, bb + (o0 + j) * bs) : r[j]);\n"
    "}\n",
    "/* w [O, Cg, KH, KW] through strides into [G * NB][K][BW], zeros for\n"
    "   the channels past each group's last. */\n"
    "__kernel void tyto_conv_wpack(__global const TS *w, long wb, long4 ws,\n"
    "                              __global T *wp, long pb, long8 geo,\n"
    "                              long8 dim, int8 q, int n) {\n"
    "  CONV_GEO\n"
    "  int i = get_global_id(0);\n"
    "  if (i >= n)\n"
    "    return;\n"
    "  int t = i / BW, j = i - t * BW, blk = t / K, k = t - blk * K;\n"
    "  int g = blk / NB, ob = (blk - g * NB) * BW + j;\n"
    "  int c = k / (KH * KW), r = k - c * (KH * KW), kh = r / KW;\n"
    "  int kw = r - kh * KW;\n"
    "  wp[pb + i] = ob < Og ? TLD(w, wb + (long)(g * Og + ob) * ws.s0 +\n"
    "                               (long)c * ws.s1 + (long)kh * ws.s2 +\n"
    "                               (long)kw * ws.s3)\n"
    "                       : (T)0;\n"
    "}\n"
    "/* CONV2D_BACKWARD_FILTER, part 1: work-item (slice s, block) sums\n"
    "   dy * x over the L output pixels of its slice for the BW output\n"
    "   channels of a block and every tap, into part[s][block][K][BW]. */\n"
    "__kernel void tyto_conv_dw(__global const TS *x, long xb, long4 xs,\n"
    "                           __global const TS *dy, long db, long4 ds,\n"
    "                           __global T *part, long pb, long8 geo,\n"
    "                           long8 dim, int8 q, uint8 m, int L, int n) {\n"
    "  CONV_GEO\n"
    "  int i = get_global_id(0);\n"
    "  if (i >= n)\n"
    "    return;\n"
    "  x += xb;\n"
    "  dy += db;\n"
    "  int nbt = (int)dim.s7 * NB;\n"
    "  int s = CONV_DIV(i, m.s01), blk = i - s * nbt;\n"
    "  int g = CONV_DIV(blk, m.s67), o0 = g * Og + (blk - g * NB) * BW;\n"
    "  int last = min(BW, g * Og + Og - o0) - 1;\n"
    "  int p0 = s * L, p1 = min(NP, p0 + L);\n"
    "  T16 acc[2 * CONV_KMAX];\n"
    "  for (int k = 0; k < K * NV; k++)\n"
    "    acc[k] = (T16)0;\n"
    "  int t = CONV_DIV(p0, m.s23), ow = p0 - t * OW;\n"
    "  int nn = CONV_DIV(t, m.s45), oh = t - nn * OH;\n"
    "  for (int p = p0; p < p1; p++) {\n"
    "    __global const TS *dp = dy + nn * (int)ds.s0 + o0 * (int)ds.s1 +\n"
    "                            oh * (int)ds.s2 + ow * (int)ds.s3;\n"
    "    /* Channels past the block's last repeat it: their sums are never\n"
    "       read. */\n"
    "    T d[32];\n"
    "    for (int j = 0; j < BW; j++)\n"
    "      d[j] = TLD(dp, min(j, last) * (int)ds.s1);\n"
    "    T16 dv = vload16(0, d), dv1 = vload16(NV - 1, d);\n"
    "    int k = 0;\n"
    "    CONV_TAPS(acc[k] += dv * v;\n"
    "              if (NV > 1) acc[k + 1] += dv1 * v;\n"
    "              k += NV)\n"
    "    if (++ow == OW) {\n"
    "      ow = 0;\n"
    "      if (++oh == OH) {\n"
    "        oh = 0;\n"
    "        nn++;\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  __global T *pp = part + pb + (long)i * K * BW;\n"
    "  for (int k = 0; k < K * NV; k++)\n"
    "    vstore16(acc[k], k, pp);\n"
    "}\n"
    "/* CONV2D_BACKWARD_FILTER, part 2: dw = the sum of the S slices' parts,\n"
    "   in slice order, written through dw's strides. */\n",
    "__kernel void tyto_conv_dwsum(__global const T *part, long pb,\n"
    "                              __global TS *out, long wb, long4 ws,\n"
    "                              long8 geo, long8 dim, int8 q, int S,\n"
    "                              int n) {\n"
    "  CONV_GEO\n"
    "  int i = get_global_id(0);\n"
    "  if (i >= n)\n"
    "    return;\n"
    "  int nbt = (int)dim.s7 * NB;\n"
    "  int o = i / K, k = i - o * K, g = o / Og, ob = o - g * Og;\n"
    "  int c = k / (KH * KW), r = k - c * (KH * KW), kh = r / KW;\n"
    "  int kw = r - kh * KW;\n"
    "  int at = ((g * NB + ob / BW) * K + k) * BW + ob % BW;\n"
    "  T acc = part[pb + at];\n"
    "  for (int s = 1; s < S; s++)\n"
    "    acc += part[pb + at + (long)s * nbt * K * BW];\n"
    "  TST(out, wb + (long)o * ws.s0 + (long)c * ws.s1 + (long)kh * ws.s2 +\n"
    "           (long)kw * ws.s3, acc);\n"
    "}\n",
};

int conv_direct_plan(conv *c, const ocl_desc *d) {
  const int64_t lim = CONV_I32_LIMIT;
  int fwd = c->op == TYTO_PLUGIN_OP_CONV2D,
      filter = c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER;
  const int64_t v[] = {c->g.N,  c->g.C,  c->g.H,  c->g.W,  c->g.O,  c->g.OH,
                       c->g.OW, c->g.KH, c->g.KW, c->g.sh, c->g.sw, c->g.ph,
                       c->g.pw, c->g.dh, c->g.dw, c->g.G};
  c->direct = 0;
  if (!fwd && !filter)
    return 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] >= lim)
      return 0;
  int64_t Cg = c->g.C / c->g.G, Og = c->g.O / c->g.G, K;
  if (Cg > CONV_KMAX || c->g.KH > CONV_KMAX || c->g.KW > CONV_KMAX)
    return 0;
  K = Cg * c->g.KH * c->g.KW;
  if (K == 0 || K > CONV_KMAX || c->g.H == 0 || c->g.W == 0 || c->g.N == 0 ||
      Og == 0)
    return 0;
  /* Rows formed: oh * sh - ph + kh * dh < H + 2 ph + sh (W alike). */
  if (c->g.H + 2 * c->g.ph + c->g.sh >= lim ||
      c->g.W + 2 * c->g.pw + c->g.sw >= lim)
    return 0;
  int64_t NP = c->g.N * c->g.OH;
  if (NP >= lim || (NP *= c->g.OW) >= lim)
    return 0;
  /* Blocks of 32 channels where a group has more than 16, else 16. */
  int64_t NV = Og > 16 ? 2 : 1, NB = (Og + 16 * NV - 1) / (16 * NV),
          blocks = c->g.G * NB, packed;
  if (blocks >= lim / NP || blocks >= lim / (K * 16 * NV))
    return 0;
  packed = blocks * K * 16 * NV;
  for (uint32_t i = 0; i < d->n_in; i++)
    if (!ocl_reach_below(&d->in[i].l, CONV_I32_LIMIT))
      return 0;
  if (!ocl_reach_below(&d->out[0].l, CONV_I32_LIMIT))
    return 0;
  c->NV = NV;
  c->NB = NB;
  c->ws_elems = packed;
  if (filter) {
    /* About CONV_DW_ITEMS work-items of at least 16 pixels each. */
    int64_t S = CONV_DW_ITEMS / blocks, most = NP / 16;
    S = S < 1 ? 1 : S;
    S = S < most ? S : most < 1 ? 1 : most;
    c->L = (NP + S - 1) / S;
    c->S = (NP + c->L - 1) / c->L;
    if (c->S >= lim / packed)
      return 0;
    c->ws_elems = c->S * packed;
  }
  c->direct = 1;
  return 1;
}

tyto_plugin_error *conv_direct_prepare(tyto_plugin_device *dev, conv *c) {
  char *src = ocl_source_join(direct_parts,
                              sizeof direct_parts / sizeof direct_parts[0]),
       opt[32];
  if (src == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  snprintf(opt, sizeof opt, "-DCONV_KMAX=%d", CONV_KMAX);
  tyto_plugin_error *e;
  if (c->op == TYTO_PLUGIN_OP_CONV2D) {
    e = ocl_kernel_new(dev, c->dtype, src, opt, "tyto_conv_wpack", &c->wpack);
    if (e == NULL)
      e = ocl_kernel_new(dev, c->dtype, src, opt, "tyto_conv_direct",
                         &c->direct_k);
  } else {
    e = ocl_kernel_new(dev, c->dtype, src, opt, "tyto_conv_dw", &c->dwpart);
    if (e == NULL)
      e = ocl_kernel_new(dev, c->dtype, src, opt, "tyto_conv_dwsum", &c->dwsum);
  }
  free(src);
  return e;
}

#define A(v) OCL_KARG(v)

/* What one launch works with. */
typedef struct conv_run {
  tyto_plugin_device *dev;
  tyto_plugin_stream *s;
  const conv *c;
  cl_mem ws;
  cl_long wsb; /* the workspace's origin, elements */
  cl_long8 geo;
} conv_run;

/* The multiply-shift that divides numerators below 2^31 by d (1 <= d <
 * 2^30) for CONV_DIV: shift l = ceil(log2 d), magic floor(2^32 (2^l - d)
 * / d) + 1 < 2^32 (Hacker's Delight, 2nd ed., 10-9). */
static void magic(int64_t d, cl_uint *out) {
  uint64_t u = d > 1 ? (uint64_t)d : 1;
  unsigned l = 0;
  while (((uint64_t)1 << l) < u)
    l++;
  out[0] = (cl_uint)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - u)) / u + 1);
  out[1] = l;
}

/* What the direct kernels read besides their tensors: dim, q and the
 * magics of (first, OW, OH, NB). */
typedef struct direct_args {
  cl_long8 dim;
  cl_int8 q;
  cl_uint8 m;
} direct_args;

static void direct_args_of(const conv *c, int64_t first, direct_args *a) {
  const int64_t dim[8] = {c->g.N, c->g.C,  c->g.H,  c->g.W,
                          c->g.O, c->g.OH, c->g.OW, c->g.G};
  memset(a, 0, sizeof *a);
  for (int i = 0; i < 8; i++)
    a->dim.s[i] = dim[i];
  a->q.s[0] = (cl_int)(c->g.C / c->g.G);
  a->q.s[1] = (cl_int)(c->g.O / c->g.G);
  a->q.s[2] = (cl_int)(c->g.C / c->g.G * c->g.KH * c->g.KW);
  a->q.s[3] = (cl_int)c->NB;
  a->q.s[4] = (cl_int)c->NV;
  magic(first, &a->m.s[0]);
  magic(c->g.OW, &a->m.s[2]);
  magic(c->g.OH, &a->m.s[4]);
  magic(c->NB, &a->m.s[6]);
}

/* A 1-d launch of n work-items (in groups of 64). */
static size_t items(int64_t n) {
  return (size_t)((n + 63) / 64 * 64);
}

/* CONV2D, direct: w packed into the workspace, then y. */
static tyto_plugin_error *direct_forward(conv_run *x, const ocl_desc *d,
                                         const ocl_arg *in, const ocl_arg *y) {
  const conv *c = x->c;
  int64_t NP = c->g.N * c->g.OH * c->g.OW, blocks = c->g.G * c->NB;
  direct_args da;
  direct_args_of(c, NP, &da);
  cl_long4 w4 = conv_long4(d->in[1].l.strides),
           x4 = conv_long4(d->in[0].l.strides),
           y4 = conv_long4(d->out[0].l.strides);
  cl_long pb = x->wsb;
  cl_int nw = (cl_int)(blocks * da.q.s[2] * 16 * c->NV),
         ny = (cl_int)(blocks * NP);
  ocl_karg pa[] = {A(in[1].mem), A(in[1].origin), A(w4),   A(x->ws), A(pb),
                   A(x->geo),    A(da.dim),       A(da.q), A(nw)};
  size_t global = items(nw);
  tyto_plugin_error *e = ocl_run(x->dev, x->s, c->wpack, pa, 9, 1, &global,
                                 "conv2d weight packing");
  if (e != NULL)
    return e;
  /* Without bias the kernel reads none: the workspace stands in. */
  cl_mem bmem = c->g.has_bias ? in[2].mem : x->ws;
  cl_long bb = c->g.has_bias ? in[2].origin : 0,
          bs = c->g.has_bias ? d->in[2].l.strides[0] : 0;
  cl_int hb = c->g.has_bias;
  ocl_karg ka[] = {
      A(in[0].mem), A(in[0].origin), A(x4),   A(x->ws),  A(pb),        A(bmem),
      A(bb),        A(bs),           A(hb),   A(y->mem), A(y->origin), A(y4),
      A(x->geo),    A(da.dim),       A(da.q), A(da.m),   A(ny)};
  global = items(ny);
  return ocl_run(x->dev, x->s, c->direct_k, ka, 17, 1, &global,
                 "conv2d direct kernel");
}

/* CONV2D_BACKWARD_FILTER, direct: partial sums per slice of output pixels
 * in the workspace, then dw. */
static tyto_plugin_error *direct_filter(conv_run *x, const ocl_desc *d,
                                        const ocl_arg *in, const ocl_arg *dw) {
  const conv *c = x->c;
  int64_t blocks = c->g.G * c->NB;
  direct_args da;
  direct_args_of(c, blocks, &da);
  cl_long4 x4 = conv_long4(d->in[0].l.strides),
           y4 = conv_long4(d->in[1].l.strides),
           w4 = conv_long4(d->out[0].l.strides);
  cl_long pb = x->wsb;
  cl_int L = (cl_int)c->L, S = (cl_int)c->S, n = (cl_int)(c->S * blocks),
         nw = (cl_int)(c->g.O * da.q.s[2]);
  ocl_karg ka[] = {
      A(in[0].mem), A(in[0].origin), A(x4), A(in[1].mem), A(in[1].origin),
      A(y4),        A(x->ws),        A(pb), A(x->geo),    A(da.dim),
      A(da.q),      A(da.m),         A(L),  A(n)};
  size_t global = items(n);
  tyto_plugin_error *e = ocl_run(x->dev, x->s, c->dwpart, ka, 14, 1, &global,
                                 "conv2d_backward_filter direct kernel");
  if (e != NULL)
    return e;
  ocl_karg sa[] = {A(x->ws),  A(pb),     A(dw->mem), A(dw->origin), A(w4),
                   A(x->geo), A(da.dim), A(da.q),    A(S),          A(nw)};
  global = items(nw);
  return ocl_run(x->dev, x->s, c->dwsum, sa, 10, 1, &global,
                 "conv2d_backward_filter slice sum");
}

tyto_plugin_error *conv_direct_launch(tyto_plugin_device *dev,
                                      tyto_plugin_stream *s, const conv *c,
                                      const ocl_desc *d, const ocl_arg *in,
                                      const ocl_arg *out, const ocl_arg *ws) {
  conv_run x = {dev, s, c, ws->mem, ws->origin, {{0}}};
  int64_t geo[8] = {c->g.sh, c->g.sw, c->g.ph, c->g.pw,
                    c->g.dh, c->g.dw, c->g.KH, c->g.KW};
  for (int i = 0; i < 8; i++)
    x.geo.s[i] = geo[i];
  return c->op == TYTO_PLUGIN_OP_CONV2D ? direct_forward(&x, d, in, &out[0])
                                        : direct_filter(&x, d, in, &out[0]);
}
