/*
 * 2-d pooling and its derivatives on NCHW tensors of any strides:
 * MAX_POOL2D, AVG_POOL2D, MAX_POOL2D_BACKWARD, MAX_POOL2D_SELECT and
 * AVG_POOL2D_BACKWARD, as plugins/cpu/conv.c defines them.
 *
 * Windows: output (oh, ow) covers rows oh*sh - ph .. + KH - 1 and columns
 * ow*sw - pw .. + KW - 1, clipped to the input. Max pooling ignores the
 * padding and keeps the first NaN; average pooling divides by the number of
 * window elements inside the input. The max derivatives use the first
 * maximum of each window in row-major order (the first NaN when there is
 * one), so they route the gradient to the element the forward returned.
 *
 * Every output element is written by one work-item, with no atomics:
 *  - forward pooling and MAX_POOL2D_SELECT run one work-item per window;
 *  - MAX_POOL2D_BACKWARD with windows that do not overlap (stride >=
 *    kernel, as the 2x2/2 of most CNNs) runs one work-item per window's
 *    cell, which writes the cell's part of dx directly;
 *  - the other derivatives are gathers: one work-item per input position
 *    sums, in the windows' row-major order, the gradient of every window
 *    that contains it, which is the order the CPU accumulates in, so
 *    results match it bit for bit and are the same at every run.
 *    MAX_POOL2D_BACKWARD first stores each window's argmax (an int per
 *    window, in the workspace) so the gather does not search each window
 *    again for every position inside it.
 *
 * Speed on PoCL, which vectorises a kernel across work-items only when
 * the work-item's code has no loops left and no long division: when every
 * index fits below 2^30 (nearly always) the program is built with
 * -DTYTO_I32 (int indices, one work-item per item, divisions by the
 * extents as multiply-shifts computed here) and, for windows and strides
 * up to POOL_SPEC, with them built in so the loops over the window unroll.
 * Else it runs with long indices in grid-stride loops.
 *
 * f16 and bf16 are read into f32 (TLD), summed in f32 and rounded once as
 * each result is stored (TST).
 */
#include "ops.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/geometry.h"
#include "errors.h"
#include "layout.h"

/* The largest window side and stride built into the program. */
#define POOL_SPEC 4
/* Indices below this run as ints (sums of two stay below 2^31). */
#define POOL_I32_LIMIT ((int64_t)1 << 30)

/* The program, in parts (joined by ocl_source_join). */
static const char *const source_parts[] = {
    "/* I, the index type. With TYTO_I32 (every index below 2^30): int, one\n"
    "   work-item per item, divisions by invariants as multiply-shifts (m:\n"
    "   (magic, shift) pairs from the host), which PoCL vectorises across\n"
    "   work-items; else long, in grid-stride loops. */\n"
    "#ifdef TYTO_I32\n"
    "typedef int I;\n"
    "#define POOL_EACH(i, n) \\\n"
    "  I i = (I)get_global_id(0); \\\n"
    "  if (i < (I)(n))\n"
    "#define POOL_DIV(a, d, m) \\\n"
    "  ((I)((mul_hi((uint)(a), (m).x) + (uint)(a)) >> (m).y))\n"
    "#else\n"
    "typedef long I;\n"
    "#define POOL_EACH(i, n) \\\n"
    "  for (long i = get_global_id(0); i < (n); \\\n"
    "       i += (long)get_global_size(0))\n"
    "#define POOL_DIV(a, d, m) ((a) / (d))\n"
    "#endif\n"
    "/* c ? a : b for T values, as select(), which PoCL vectorises where it\n"
    "   does not vectorise some ?: on T. */\n"
    "#ifdef TYTO_FP64\n"
    "#define POOL_PICK(c, a, b) select(b, a, (long)(c))\n"
    "#else\n"
    "#define POOL_PICK(c, a, b) select(b, a, (int)(c))\n"
    "#endif\n"
    "/* Window and stride: built in (POOL_KH..., the loops over them unroll:\n"
    "   PoCL vectorises only loops without inner loops) or read from p. */\n"
    "#ifdef POOL_KH\n"
    "#define KH_ POOL_KH\n"
    "#define KW_ POOL_KW\n"
    "#define SH_ POOL_SH\n"
    "#define SW_ POOL_SW\n"
    "#define POOL_UNROLL _Pragma(\"unroll\")\n"
    "#else\n"
    "#define KH_ KH\n"
    "#define KW_ KW\n"
    "#define SH_ SH\n"
    "#define SW_ SW\n"
    "#define POOL_UNROLL\n"
    "#endif\n"
    "/* p: s0 N, s1 C, s2 H, s3 W, s4 OH, s5 OW, s6 KH, s7 KW, s8 stride_h,\n"
    "   s9 stride_w, sa pad_h, sb pad_w, sc CH, sd CW (tyto_pool_cells).\n"
    "   m: the magics of s01 the fastest extent, s23 the next one, s45 C,\n"
    "   s67 stride_h, s89 stride_w. Strides: long4s [N, C, H, W]. */\n"
    "#define POOL_GEO(p) \\\n"
    "  I C = (I)p.s1, H = (I)p.s2, W = (I)p.s3, OH = (I)p.s4; \\\n"
    "  I OW = (I)p.s5, KH = (I)p.s6, KW = (I)p.s7, SH = (I)p.s8; \\\n"
    "  I SW = (I)p.s9, PH = (I)p.sa, PW = (I)p.sb; \\\n"
    "  I HM = max(H - 1, (I)0), WM = max(W - 1, (I)0);\n"
    "/* Splits row-major index i of [N, C, A, B] into (n, c, a, b). */\n"
    "#define POOL_SPLIT(i, A, B, m, n, c, a, b) \\\n"
    "  I b, a, n, c; \\\n"
    "  { \\\n"
    "    I q_ = POOL_DIV(i, B, m.s01); \\\n"
    "    b = i - q_ * B; \\\n"
    "    I r_ = POOL_DIV(q_, A, m.s23); \\\n"
    "    a = q_ - r_ * A; \\\n"
    "    n = POOL_DIV(r_, C, m.s45); \\\n"
    "    c = r_ - n * C; \\\n"
    "  }\n"
    "#define POOL_AT(s, n, c) ((I)(n) * (I)s.s0 + (I)(c) * (I)s.s1)\n"
    "/* Tap (kh, kw) of the window from row a, column b: its value v, read\n"
    "   from a valid place, and whether it lies inside the input. */\n"
    "#define POOL_TAP(xp, xs, a, b, kh, kw, v, in) \\\n"
    "  I ih_ = (a) + (kh), iw_ = (b) + (kw); \\\n"
    "  int in = ih_ >= 0 && ih_ < H && iw_ >= 0 && iw_ < W; \\\n"
    "  T v = TLD(xp, clamp(ih_, (I)0, HM) * (I)xs.s2 + \\\n"
    "               clamp(iw_, (I)0, WM) * (I)xs.s3);\n"
    "/* The first maximum of the window from (a, b) in row-major order, the\n"
    "   first NaN beating everything, padding never: its tap (bh, bw), -1\n"
    "   when no tap lies inside the input. */\n"
    "#define POOL_ARGMAX(xp, xs, a, b, bh, bw) \\\n"
    "  I bh = -1, bw = -1; \\\n"
    "  { \\\n"
    "    T best_ = 0; \\\n"
    "    POOL_UNROLL for (I kh = 0; kh < KH_; kh++) \\\n"
    "      POOL_UNROLL for (I kw = 0; kw < KW_; kw++) { \\\n"
    "        POOL_TAP(xp, xs, a, b, kh, kw, v, in) \\\n"
    "        int take_ = in && (bh < 0 || (!isnan(best_) && \\\n"
    "                                      (v > best_ || isnan(v)))); \\\n"
    "        best_ = POOL_PICK(take_, v, best_); \\\n"
    "        bh = take_ ? kh : bh; \\\n"
    "        bw = take_ ? kw : bw; \\\n"
    "      } \\\n"
    "  }\n",
    "/* MAX_POOL2D (the first NaN wins) and AVG_POOL2D (the sum of the taps\n"
    "   inside the input over their count). */\n"
    "#define POOL_FWD(name, init, step, finish) \\\n"
    "  __kernel void name(__global const TS *x, long xb, long4 xs, \\\n"
    "                     __global TS *y, long yb, long4 ys, long16 p, \\\n"
    "                     uint16 m, long n) { \\\n"
    "    POOL_GEO(p) \\\n"
    "    x += xb; \\\n"
    "    y += yb; \\\n"
    "    POOL_EACH(i, n) { \\\n"
    "      POOL_SPLIT(i, OH, OW, m, nn, c, oh, ow) \\\n"
    "      __global const TS *xp = x + POOL_AT(xs, nn, c); \\\n"
    "      I a = oh * SH_ - PH, b = ow * SW_ - PW; \\\n"
    "      T acc = init; \\\n"
    "      POOL_UNROLL for (I kh = 0; kh < KH_; kh++) \\\n"
    "        POOL_UNROLL for (I kw = 0; kw < KW_; kw++) { \\\n"
    "          POOL_TAP(xp, xs, a, b, kh, kw, v, in) \\\n"
    "          step; \\\n"
    "        } \\\n"
    "      finish; \\\n"
    "      TST(y, POOL_AT(ys, nn, c) + oh * (I)ys.s2 + ow * (I)ys.s3, \\\n"
    "          acc); \\\n"
    "    } \\\n"
    "  }\n"
    "POOL_FWD(tyto_pool_max, -INFINITY,\n"
    "         acc = POOL_PICK(in && (v > acc || isnan(v)), v, acc), )\n"
    "POOL_FWD(tyto_pool_avg, (T)0, acc += POOL_PICK(in, v, (T)0),\n"
    "         acc /= (T)((min(a + KH_, H) - max(a, (I)0)) *\n"
    "                    (min(b + KW_, W) - max(b, (I)0))))\n"
    "/* MAX_POOL2D_SELECT: y = t at each window's first maximum of x; a\n"
    "   window with no tap inside the input leaves y as it was. */\n"
    "__kernel void tyto_pool_select(__global const TS *x, long xb, long4 xs,\n"
    "                               __global const TS *t, long tb, long4 ts,\n"
    "                               __global TS *y, long yb, long4 ys,\n"
    "                               long16 p, uint16 m, long n) {\n"
    "  POOL_GEO(p)\n"
    "  x += xb;\n"
    "  t += tb;\n"
    "  y += yb;\n"
    "  POOL_EACH(i, n) {\n"
    "    POOL_SPLIT(i, OH, OW, m, nn, c, oh, ow)\n"
    "    I a = oh * SH_ - PH, b = ow * SW_ - PW;\n"
    "    __global const TS *xp = x + POOL_AT(xs, nn, c);\n"
    "    POOL_ARGMAX(xp, xs, a, b, bh, bw)\n"
    "    I ih = clamp(a + bh, (I)0, HM), iw = clamp(b + bw, (I)0, WM);\n"
    "    T v = TLD(t, POOL_AT(ts, nn, c) + ih * (I)ts.s2 + iw * (I)ts.s3);\n"
    "    if (bh >= 0)\n"
    "      TST(y, POOL_AT(ys, nn, c) + oh * (I)ys.s2 + ow * (I)ys.s3, v);\n"
    "  }\n"
    "}\n"
    "/* MAX_POOL2D_BACKWARD when no windows overlap (stride >= kernel): the\n"
    "   plane cut in cells of SH x SW from (-PH, -PW), cell (ch, cw) holding\n"
    "   window (ch, cw) in its top left corner when there is one. Each cell\n"
    "   writes its part of dx: dy at the window's first maximum, 0\n"
    "   elsewhere; `tiled` (kernel = stride, no padding) stores dy itself,\n"
    "   as the CPU does, else 0 + dy, its sum from zeros. */\n"
    "__kernel void tyto_pool_cells(__global const TS *x, long xb, long4 xs,\n"
    "                              __global const TS *dy, long yb, long4 ys,\n"
    "                              __global TS *dx, long tb, long4 ts,\n"
    "                              long16 p, uint16 m, int tiled, long n) {\n"
    "  POOL_GEO(p)\n"
    "  I CH = (I)p.sc, CW = (I)p.sd;\n"
    "  x += xb;\n"
    "  dy += yb;\n"
    "  dx += tb;\n"
    "  POOL_EACH(i, n) {\n"
    "    POOL_SPLIT(i, CH, CW, m, nn, c, ch, cw)\n"
    "    I a = ch * SH_ - PH, b = cw * SW_ - PW;\n"
    "    __global const TS *xp = x + POOL_AT(xs, nn, c);\n"
    "    POOL_ARGMAX(xp, xs, a, b, bh, bw)\n"
    "    int win = ch < OH && cw < OW;\n"
    "    T g = TLD(dy, POOL_AT(ys, nn, c) + min(ch, OH - 1) * (I)ys.s2 +\n"
    "                  min(cw, OW - 1) * (I)ys.s3);\n"
    "    g = tiled ? g : (T)0 + g;\n"
    "    __global TS *tp = dx + POOL_AT(ts, nn, c);\n"
    "    POOL_UNROLL for (I r = 0; r < SH_; r++)\n"
    "      POOL_UNROLL for (I s = 0; s < SW_; s++) {\n"
    "        I ih = a + r, iw = b + s;\n"
    "        if (ih >= 0 && ih < H && iw >= 0 && iw < W)\n"
    "          TST(tp, ih * (I)ts.s2 + iw * (I)ts.s3,\n"
    "              win && r == bh && s == bw ? g : (T)0);\n"
    "      }\n"
    "  }\n"
    "}\n",
    "/* MAX_POOL2D_BACKWARD with overlapping windows, pass 1: the position\n"
    "   of each window's first maximum in the window clipped to the input,\n"
    "   row-major. (Every window has a tap inside the input when dx is not\n"
    "   empty.) */\n"
    "__kernel void tyto_pool_argmax(__global const TS *x, long xb, long4 xs,\n"
    "                               __global int *am, long ab, long16 p,\n"
    "                               uint16 m, long n) {\n"
    "  POOL_GEO(p)\n"
    "  x += xb;\n"
    "  am += ab;\n"
    "  POOL_EACH(i, n) {\n"
    "    POOL_SPLIT(i, OH, OW, m, nn, c, oh, ow)\n"
    "    I a = oh * SH_ - PH, b = ow * SW_ - PW;\n"
    "    __global const TS *xp = x + POOL_AT(xs, nn, c);\n"
    "    POOL_ARGMAX(xp, xs, a, b, bh, bw)\n"
    "    I h0 = max(a, (I)0), w0 = max(b, (I)0), w1 = min(b + KW_, W);\n"
    "    am[i] = (int)((a + bh - h0) * (w1 - w0) + b + bw - w0);\n"
    "  }\n"
    "}\n"
    "/* The windows that contain input row ih (or column): [lo, hi). */\n"
    "#ifdef POOL_KH\n"
    "#define POOL_DIVS(a, S, m) ((a) / (S))\n"
    "#else\n"
    "#define POOL_DIVS(a, S, m) POOL_DIV(a, S, m)\n"
    "#endif\n"
    "#define POOL_COVER(ih, K, S, P, O, m, lo, hi) \\\n"
    "  I lo = POOL_DIVS(max((ih) + (P) - (K) + 1, (I)0) + (S) - 1, S, m); \\\n"
    "  I hi = min(POOL_DIVS((ih) + (P), S, m) + 1, O);\n"
    "/* The gathers: for each input position (ih, iw) of plane (nn, c), the\n"
    "   code between POOL_GATHER and POOL_GATHERED runs for each window (oh,\n"
    "   ow) that contains it, in row-major order, with (a, b) its first row\n"
    "   and column, and adds to acc, which goes to dx. */\n"
    "#define POOL_GATHER(m) \\\n"
    "  POOL_SPLIT(i, H, W, m, nn, c, ih, iw) \\\n"
    "  POOL_COVER(ih, KH_, SH_, PH, OH, m.s67, oh0, oh1) \\\n"
    "  POOL_COVER(iw, KW_, SW_, PW, OW, m.s89, ow0, ow1) \\\n"
    "  T acc = 0; \\\n"
    "  for (I oh = oh0; oh < oh1; oh++) \\\n"
    "    for (I ow = ow0; ow < ow1; ow++) { \\\n"
    "      I a = oh * SH_ - PH, b = ow * SW_ - PW;\n"
    "#define POOL_GATHERED \\\n"
    "    } \\\n"
    "  TST(dx, POOL_AT(ts, nn, c) + ih * (I)ts.s2 + iw * (I)ts.s3, acc);\n"
    "/* MAX_POOL2D_BACKWARD with overlapping windows, pass 2: dx at each\n"
    "   input position sums dy over the windows whose maximum it is, in the\n"
    "   windows' row-major order from 0, as the CPU sums. */\n"
    "__kernel void tyto_pool_max_bwd(__global const int *am, long ab,\n"
    "                                __global const TS *dy, long yb,\n"
    "                                long4 ys, __global TS *dx, long tb,\n"
    "                                long4 ts, long16 p, uint16 m, long n) {\n"
    "  POOL_GEO(p)\n"
    "  am += ab;\n"
    "  dy += yb;\n"
    "  dx += tb;\n"
    "  POOL_EACH(i, n) {\n"
    "    POOL_GATHER(m)\n"
    "    I h0 = max(a, (I)0), w0 = max(b, (I)0), w1 = min(b + KW_, W);\n"
    "    if (am[((nn * C + c) * OH + oh) * OW + ow] ==\n"
    "        (int)((ih - h0) * (w1 - w0) + iw - w0))\n"
    "      acc += TLD(dy, POOL_AT(ys, nn, c) + oh * (I)ys.s2 + ow * "
    "(I)ys.s3);\n"
    "    POOL_GATHERED\n"
    "  }\n"
    "}\n",
    "/* AVG_POOL2D_BACKWARD: dx at each input position sums, over the\n"
    "   windows that contain it, dy / (the window's size inside the input),\n"
    "   in the windows' row-major order from 0. */\n"
    "__kernel void tyto_pool_avg_bwd(__global const TS *dy, long yb,\n"
    "                                long4 ys, __global TS *dx, long tb,\n"
    "                                long4 ts, long16 p, uint16 m, long n) {\n"
    "  POOL_GEO(p)\n"
    "  dy += yb;\n"
    "  dx += tb;\n"
    "  POOL_EACH(i, n) {\n"
    "    POOL_GATHER(m)\n"
    "    I h0 = max(a, (I)0), w0 = max(b, (I)0);\n"
    "    I h1 = min(a + KH_, H), w1 = min(b + KW_, W);\n"
    "    acc += TLD(dy, POOL_AT(ys, nn, c) + oh * (I)ys.s2 + ow * (I)ys.s3) /\n"
    "           (T)((h1 - h0) * (w1 - w0));\n"
    "    POOL_GATHERED\n"
    "  }\n"
    "}\n",
};

/* The geometry of a pooling op and which operand plays which role (x, y
 * and t: ../common/geometry.h). */
typedef tpc_conv pool_geom;

typedef struct pool_impl {
  cl_kernel main;   /* the op's kernel (pass 2 of MAX_POOL2D_BACKWARD) */
  cl_kernel argmax; /* MAX_POOL2D_BACKWARD's pass 1 (overlapping windows) */
  pool_geom g;
  int i32;   /* built with -DTYTO_I32 */
  int cells; /* MAX_POOL2D_BACKWARD by cells (windows do not overlap) */
} pool_impl;

/* Checks d and fills *g: the rules all plugins share
 * (../common/geometry.c), then the argmax pass's limits. */
static tyto_plugin_error *geometry(tyto_plugin_device *dev, const ocl_desc *d,
                                   pool_geom *g) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *op = ocl_op_name(d->op);
  tpc_operands a;
  char why[1024];
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  int code = tpc_conv_check(&a, g, why, sizeof why);
  if (code != 0)
    return ocl_error(host, (tyto_plugin_code)code, "%s", why);
  if (d->op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD) {
    /* The argmax pass stores a position inside each clipped window as an
     * int, and one int per window in the workspace. */
    int64_t wh = g->KH < g->H ? g->KH : g->H, ww = g->KW < g->W ? g->KW : g->W;
    if (ww > 0 && wh > INT_MAX / ww)
      return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                       "%s: windows of %lldx%lld input elements are too "
                       "large for the opencl plugin (at most %d elements)",
                       op, (long long)wh, (long long)ww, INT_MAX);
    if (d->in[1].n > INT64_MAX / (int64_t)sizeof(cl_int))
      return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                       "%s: %lld windows are too many for the opencl "
                       "plugin's argmax workspace",
                       op, (long long)d->in[1].n);
  }
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  pool_geom g;
  return geometry(dev, d, &g);
}

/* Whether every index the kernels compute fits the int variant: the
 * extents, the windows' rows and columns, the items and the offsets. */
static int fits32(const ocl_desc *d, const pool_geom *g) {
  int64_t lim = POOL_I32_LIMIT;
  const int64_t v[] = {g->N,  g->C,  g->H,  g->W,  g->OH, g->OW, g->KH,
                       g->KW, g->sh, g->sw, g->ph, g->pw, g->CH, g->CW};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] >= lim)
      return 0;
  /* H + 2 ph + KH + sh bounds every row index formed (and so for W). */
  if (g->H + 2 * g->ph + g->KH + g->sh >= lim ||
      g->W + 2 * g->pw + g->KW + g->sw >= lim)
    return 0;
  int64_t planes = g->N * g->C; /* < 2^60 */
  if (planes >= lim || (g->H > 0 && g->W > 0 && planes >= lim / g->H / g->W) ||
      planes >= lim / g->OH / g->OW ||
      (g->CH > 0 && g->CW > 0 && planes >= lim / g->CH / g->CW))
    return 0;
  for (uint32_t i = 0; i < d->n_in; i++)
    if (!ocl_reach_below(&d->in[i].l, POOL_I32_LIMIT))
      return 0;
  return ocl_reach_below(&d->out[0].l, POOL_I32_LIMIT);
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const ocl_desc *d = &k->desc;
  pool_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  k->impl = c;
  tyto_plugin_error *e = geometry(dev, d, &c->g);
  if (e != NULL)
    return e;
  const pool_geom *g = &c->g;
  const char *name;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D: name = "tyto_pool_max"; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D: name = "tyto_pool_avg"; break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT: name = "tyto_pool_select"; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD: name = "tyto_pool_avg_bwd"; break;
  default: /* MAX_POOL2D_BACKWARD */
    c->cells = g->sh >= g->KH && g->sw >= g->KW;
    name = c->cells ? "tyto_pool_cells" : "tyto_pool_max_bwd";
    if (!c->cells)
      k->workspace_bytes = (uint64_t)d->in[1].n * sizeof(cl_int);
    break;
  }
  c->i32 = fits32(d, g);
  char opts[160] = "";
  if (c->i32 && g->KH <= POOL_SPEC && g->KW <= POOL_SPEC &&
      g->sh <= POOL_SPEC && g->sw <= POOL_SPEC)
    snprintf(opts, sizeof opts,
             "-DTYTO_I32 -DPOOL_KH=%d -DPOOL_KW=%d -DPOOL_SH=%d -DPOOL_SW=%d",
             (int)g->KH, (int)g->KW, (int)g->sh, (int)g->sw);
  else if (c->i32)
    snprintf(opts, sizeof opts, "-DTYTO_I32");
  char *source = ocl_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  e = ocl_kernel_new(dev, d->dtype, source, opts, name, &c->main);
  if (e == NULL && d->op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD && !c->cells)
    e = ocl_kernel_new(dev, d->dtype, source, opts, "tyto_pool_argmax",
                       &c->argmax);
  free(source);
  return e;
}

static void release(tyto_plugin_kernel *k) {
  pool_impl *c = k->impl;
  if (c == NULL)
    return;
  if (c->main != NULL)
    clReleaseKernel(c->main);
  if (c->argmax != NULL)
    clReleaseKernel(c->argmax);
  free(c);
  k->impl = NULL;
}

/* The multiply-shift that divides numerators below 2^31 by d (1 <= d <
 * 2^30) for POOL_DIV: shift l = ceil(log2 d), magic floor(2^32 (2^l - d)
 * / d) + 1 < 2^32 (Hacker's Delight, 2nd ed., 10-9). */
static void magic(int64_t d, cl_uint *out) {
  uint64_t u = d > 1 ? (uint64_t)d : 1;
  unsigned l = 0;
  while (((uint64_t)1 << l) < u)
    l++;
  out[0] = (cl_uint)((((uint64_t)1 << 32) * (((uint64_t)1 << l) - u)) / u + 1);
  out[1] = l;
}

/* The magics of a kernel over [N, C, A, B]: s01 B, s23 A, s45 C, then the
 * strides. */
static cl_uint16 magics(const pool_geom *g, int64_t A, int64_t B) {
  cl_uint16 m;
  memset(&m, 0, sizeof m);
  magic(B, &m.s[0]);
  magic(A, &m.s[2]);
  magic(g->C, &m.s[4]);
  magic(g->sh, &m.s[6]);
  magic(g->sw, &m.s[8]);
  return m;
}

static cl_long4 strides4(const tyto_plugin_layout *l) {
  cl_long4 r;
  for (int i = 0; i < 4; i++)
    r.s[i] = l->strides[i];
  return r;
}

/* Adds buffer, origin and strides of the operand of role r. An empty x
 * (or t) of a pooling with windows (H or W is 0: every window is padding)
 * is never read, but the kernels still form a clamped load from it: they
 * get the output's first element instead, with strides 0. */
static void arg_tensor(ocl_args *a, const ocl_desc *d, const ocl_arg *in,
                       const ocl_arg *out, int r) {
  const int is_in = r < (int)d->n_in;
  const ocl_arg *v = is_in ? &in[r] : &out[r - (int)d->n_in];
  const tyto_plugin_layout *l =
      is_in ? &d->in[r].l : &d->out[r - (int)d->n_in].l;
  cl_long4 s = strides4(l);
  cl_mem mem = v->mem;
  cl_long origin = v->origin;
  if ((r < (int)d->n_in ? d->in[r].n : d->out[0].n) == 0) {
    mem = out[0].mem;
    origin = out[0].origin;
    memset(&s, 0, sizeof s);
  }
  ocl_args_put(a, sizeof mem, &mem);
  ocl_args_put(a, sizeof origin, &origin);
  ocl_args_put(a, sizeof s, &s);
}

/* Enqueues kernel k over n items: one work-item each in the int variant,
 * else grid-stride loops. */
static tyto_plugin_error *run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                              const pool_impl *c, cl_kernel k, int64_t n,
                              const char *what) {
  size_t global = c->i32 ? (size_t)((n + 63) / 64 * 64) : ocl_global_size(n);
  return ocl_enqueue(dev, s, k, 1, &global, NULL, what);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  pool_impl *c = k->impl;
  const ocl_desc *d = &k->desc;
  const pool_geom *g = &c->g;
  const int64_t pv[14] = {g->N,  g->C,  g->H,  g->W,  g->OH, g->OW, g->KH,
                          g->KW, g->sh, g->sw, g->ph, g->pw, g->CH, g->CW};
  cl_long16 p;
  memset(&p, 0, sizeof p);
  for (int i = 0; i < 14; i++)
    p.s[i] = pv[i];
  /* Per window, per cell or per input position. */
  cl_uint16 mw = magics(g, g->OH, g->OW), mc = magics(g, g->CH, g->CW),
            mx = magics(g, g->H, g->W);
  cl_long n = d->out[0].n;
  ocl_args a = OCL_ARGS(dev, c->main);
  const char *what;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D:
  case TYTO_PLUGIN_OP_AVG_POOL2D:
    arg_tensor(&a, d, in, out, g->x);
    arg_tensor(&a, d, in, out, g->y);
    ocl_args_put(&a, sizeof p, &p);
    ocl_args_put(&a, sizeof mw, &mw);
    ocl_args_put(&a, sizeof n, &n);
    what = d->op == TYTO_PLUGIN_OP_MAX_POOL2D ? "max_pool2d kernel"
                                              : "avg_pool2d kernel";
    break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT:
    arg_tensor(&a, d, in, out, g->x);
    arg_tensor(&a, d, in, out, g->t);
    arg_tensor(&a, d, in, out, g->y);
    ocl_args_put(&a, sizeof p, &p);
    ocl_args_put(&a, sizeof mw, &mw);
    ocl_args_put(&a, sizeof n, &n);
    what = "max_pool2d_select kernel";
    break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD:
    arg_tensor(&a, d, in, out, g->y);
    arg_tensor(&a, d, in, out, g->t);
    ocl_args_put(&a, sizeof p, &p);
    ocl_args_put(&a, sizeof mx, &mx);
    ocl_args_put(&a, sizeof n, &n);
    what = "avg_pool2d_backward kernel";
    break;
  default: /* MAX_POOL2D_BACKWARD */
    what = "max_pool2d_backward kernel";
    if (c->cells) {
      /* The CPU stores dy itself when the windows tile the plane, else
       * adds it to zeros. */
      cl_int tiled =
          g->KH == g->sh && g->KW == g->sw && g->ph == 0 && g->pw == 0;
      n = g->N * g->C * g->CH * g->CW;
      arg_tensor(&a, d, in, out, g->x);
      arg_tensor(&a, d, in, out, g->y);
      arg_tensor(&a, d, in, out, g->t);
      ocl_args_put(&a, sizeof p, &p);
      ocl_args_put(&a, sizeof mc, &mc);
      ocl_args_put(&a, sizeof tiled, &tiled);
      ocl_args_put(&a, sizeof n, &n);
      break;
    }
    /* The workspace's origin counts elements of the compute dtype: in
     * ints, it is d->celem / 4 times that. */
    cl_long ab = ws->origin * (cl_long)(d->celem / sizeof(cl_int));
    cl_long windows = d->in[1].n;
    ocl_args a1 = OCL_ARGS(dev, c->argmax);
    arg_tensor(&a1, d, in, out, g->x);
    ocl_args_put(&a1, sizeof ws->mem, &ws->mem);
    ocl_args_put(&a1, sizeof ab, &ab);
    ocl_args_put(&a1, sizeof p, &p);
    ocl_args_put(&a1, sizeof mw, &mw);
    ocl_args_put(&a1, sizeof windows, &windows);
    if (a1.e != NULL)
      return a1.e;
    tyto_plugin_error *e =
        run(dev, s, c, c->argmax, windows, "max_pool2d_backward argmax kernel");
    if (e != NULL)
      return e;
    ocl_args_put(&a, sizeof ws->mem, &ws->mem);
    ocl_args_put(&a, sizeof ab, &ab);
    arg_tensor(&a, d, in, out, g->y);
    arg_tensor(&a, d, in, out, g->t);
    ocl_args_put(&a, sizeof p, &p);
    ocl_args_put(&a, sizeof mx, &mx);
    ocl_args_put(&a, sizeof n, &n);
    break;
  }
  if (a.e != NULL)
    return a.e;
  return run(dev, s, c, c->main, n, what);
}

const ocl_family ocl_family_pool = {"pool",  tpc_pool_op, check,
                                    prepare, launch,      release};
