/*
 * 2-d pooling and its derivatives on NCHW tensors of any strides:
 * MAX_POOL2D, AVG_POOL2D, MAX_POOL2D_BACKWARD, MAX_POOL2D_SELECT and
 * AVG_POOL2D_BACKWARD, as plugins/cpu/conv.c defines them (the OpenCL
 * plugin's pool.c, on CUDA).
 *
 * Windows: output (oh, ow) covers rows oh*sh - ph .. + KH - 1 and columns
 * ow*sw - pw .. + KW - 1, clipped to the input. Max pooling ignores the
 * padding (a NaN in the window gives NaN); average pooling divides by the
 * number of window elements inside the input. The max derivatives use the
 * first maximum of each window in row-major order (the first NaN when
 * there is one), so they route the gradient to the element the forward
 * returned.
 *
 * Every output element is written by one thread, with no atomics:
 *  - forward pooling and MAX_POOL2D_SELECT run a thread per window;
 *  - MAX_POOL2D_BACKWARD with windows that do not overlap (stride >=
 *    kernel, as the 2x2/2 of most CNNs) runs a thread per cell of the
 *    plane, which writes the cell's part of dx directly;
 *  - the other derivatives are gathers: a thread per input position sums,
 *    in the windows' row-major order from 0, the gradient of every window
 *    that contains it, which is the order the CPU accumulates in, so the
 *    results match it bit for bit and are the same at every run.
 *    MAX_POOL2D_BACKWARD first stores each window's argmax (an int per
 *    window, in the workspace) so that the gather does not search each
 *    window again for every position inside it.
 *
 * Each kernel comes in two index widths: int when every index the kernels
 * form stays below 2^30 (nearly always; 32-bit division is several times
 * cheaper than 64-bit on the GPU), else long long.
 *
 * f16 and bf16 elements are read into f32 (sums included) and each result
 * rounded once; MAX_POOL2D_SELECT moves the 16 bits themselves.
 */
#include "ops.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/geometry.h"

/* Indices below this run as ints (sums of two stay below 2^31). */
#define POOL_I32_LIMIT ((int64_t)1 << 30)

/* The program, in parts (ISO C caps a string literal at 4095 characters).
 * struct tyto_pool_geo mirrors pool_geo below. */
static const char *const source_parts[] = {
    "struct tyto_pool_geo {\n"
    "  i64 N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, CH, CW;\n"
    "  i64 xs[4], ys[4], ts[4];\n"
    "};\n"
    "/* The geometry in the index type I. */\n"
    "template <typename I> struct tyto_pg {\n"
    "  I C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, CH, CW;\n"
    "  I xs[4], ys[4], ts[4];\n"
    "  __device__ explicit tyto_pg(const tyto_pool_geo &g)\n"
    "      : C((I)g.C), H((I)g.H), W((I)g.W), OH((I)g.OH), OW((I)g.OW),\n"
    "        KH((I)g.KH), KW((I)g.KW), SH((I)g.sh), SW((I)g.sw),\n"
    "        PH((I)g.ph), PW((I)g.pw), CH((I)g.CH), CW((I)g.CW) {\n"
    "    for (int k = 0; k < 4; k++) {\n"
    "      xs[k] = (I)g.xs[k];\n"
    "      ys[k] = (I)g.ys[k];\n"
    "      ts[k] = (I)g.ts[k];\n"
    "    }\n"
    "  }\n"
    "};\n"
    "template <typename I> __device__ __forceinline__ I tyto_min(I a, I b) {\n"
    "  return a < b ? a : b;\n"
    "}\n"
    "template <typename I> __device__ __forceinline__ I tyto_max(I a, I b) {\n"
    "  return a > b ? a : b;\n"
    "}\n"
    "__device__ __forceinline__ bool tyto_nan(T v) { return v != v; }\n"
    "/* Splits row-major index i of [N, C, A, B] into the plane (n, c) and\n"
    "   (a, b) inside it. */\n"
    "template <typename I>\n"
    "__device__ __forceinline__ void tyto_split(I i, I C, I A, I B, I &n,\n"
    "                                           I &c, I &a, I &b) {\n"
    "  I q = i / B;\n"
    "  b = i - q * B;\n"
    "  I r = q / A;\n"
    "  a = q - r * A;\n"
    "  n = r / C;\n"
    "  c = r - n * C;\n"
    "}\n"
    "/* The rows [h0, h1) and columns [w0, w1) of window (oh, ow) inside the\n"
    "   input. */\n"
    "template <typename I>\n"
    "__device__ __forceinline__ void tyto_window(const tyto_pg<I> &p, I oh,\n"
    "                                            I ow, I &h0, I &h1, I &w0,\n"
    "                                            I &w1) {\n"
    "  I a = oh * p.SH - p.PH, b = ow * p.SW - p.PW;\n"
    "  h0 = tyto_max(a, (I)0);\n"
    "  h1 = tyto_min(a + p.KH, p.H);\n"
    "  w0 = tyto_max(b, (I)0);\n"
    "  w1 = tyto_min(b + p.KW, p.W);\n"
    "}\n"
    "/* The first maximum of x's plane xp over rows [h0, h1) and columns\n"
    "   [w0, w1) in row-major order, the first NaN beating everything:\n"
    "   (bh, bw), or false when the window is empty. */\n"
    "template <typename I>\n"
    "__device__ __forceinline__ bool tyto_argmax(const S *xp, const I *xs,\n"
    "                                            I h0, I h1, I w0, I w1,\n"
    "                                            I &bh, I &bw) {\n"
    "  bh = -1;\n"
    "  bw = -1;\n"
    "  T best = 0;\n"
    "  for (I ih = h0; ih < h1; ih++)\n"
    "    for (I iw = w0; iw < w1; iw++) {\n"
    "      T v = LD(xp[ih * xs[2] + iw * xs[3]]);\n"
    "      if (bh < 0 || (!tyto_nan(best) && (v > best || tyto_nan(v)))) {\n"
    "        best = v;\n"
    "        bh = ih;\n"
    "        bw = iw;\n"
    "      }\n"
    "    }\n"
    "  return bh >= 0;\n"
    "}\n",
    "/* MAX_POOL2D (a NaN wins) and AVG_POOL2D (the sum of the window inside\n"
    "   the input, row-major from 0, over its size): a thread per window. */\n"
    "template <typename I, bool MAX>\n"
    "__device__ void tyto_pool_fwd(const S *x, S *y, const tyto_pool_geo &g,\n"
    "                              i64 n) {\n"
    "  const tyto_pg<I> p(g);\n"
    "  TYTO_FOR(i, n) {\n"
    "    I nn, c, oh, ow, h0, h1, w0, w1;\n"
    "    tyto_split((I)i, p.C, p.OH, p.OW, nn, c, oh, ow);\n"
    "    tyto_window(p, oh, ow, h0, h1, w0, w1);\n"
    "    const S *xp = x + (nn * p.xs[0] + c * p.xs[1]);\n"
    "    T acc = MAX ? -(T)__int_as_float(0x7f800000) : (T)0;\n"
    "    for (I ih = h0; ih < h1; ih++)\n"
    "      for (I iw = w0; iw < w1; iw++) {\n"
    "        T v = LD(xp[ih * p.xs[2] + iw * p.xs[3]]);\n"
    "        if (MAX)\n"
    "          acc = v > acc || tyto_nan(v) ? v : acc;\n"
    "        else\n"
    "          acc += v;\n"
    "      }\n"
    "    if (!MAX)\n"
    "      acc /= (T)((h1 - h0) * (w1 - w0));\n"
    "    y[nn * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3]] =\n"
    "        ST(acc);\n"
    "  }\n"
    "}\n"
    "/* MAX_POOL2D_SELECT: y = t at each window's first maximum of x; a\n"
    "   window with nothing inside the input leaves y as it was. */\n"
    "template <typename I>\n"
    "__device__ void tyto_pool_select(const S *x, const S *t, S *y,\n"
    "                                 const tyto_pool_geo &g, i64 n) {\n"
    "  const tyto_pg<I> p(g);\n"
    "  TYTO_FOR(i, n) {\n"
    "    I nn, c, oh, ow, h0, h1, w0, w1, bh, bw;\n"
    "    tyto_split((I)i, p.C, p.OH, p.OW, nn, c, oh, ow);\n"
    "    tyto_window(p, oh, ow, h0, h1, w0, w1);\n"
    "    if (tyto_argmax(x + (nn * p.xs[0] + c * p.xs[1]), p.xs, h0, h1, w0,\n"
    "                    w1, bh, bw))\n"
    "      y[nn * p.ys[0] + c * p.ys[1] + oh * p.ys[2] + ow * p.ys[3]] =\n"
    "          t[nn * p.ts[0] + c * p.ts[1] + bh * p.ts[2] + bw * p.ts[3]];\n"
    "  }\n"
    "}\n"
    "/* MAX_POOL2D_BACKWARD when no windows overlap (stride >= kernel): the\n"
    "   plane cut in cells of sh x sw from (-ph, -pw), cell (ch, cw) holding\n"
    "   window (ch, cw) in its top left corner when there is one. Each cell\n"
    "   writes its part of dx: dy at the window's first maximum, 0\n"
    "   elsewhere; `tiled` (kernel = stride, no padding) stores dy itself,\n"
    "   as the CPU does, else 0 + dy, its sum from zeros (-0 becomes +0). */\n"
    "template <typename I>\n"
    "__device__ void tyto_pool_cells(const S *x, const S *dy, S *dx,\n"
    "                                const tyto_pool_geo &g, int tiled,\n"
    "                                i64 n) {\n"
    "  const tyto_pg<I> p(g);\n"
    "  TYTO_FOR(i, n) {\n"
    "    I nn, c, ch, cw, h0, h1, w0, w1, bh = -1, bw = -1;\n"
    "    tyto_split((I)i, p.C, p.CH, p.CW, nn, c, ch, cw);\n"
    "    T gv = 0;\n"
    "    if (ch < p.OH && cw < p.OW) {\n"
    "      tyto_window(p, ch, cw, h0, h1, w0, w1);\n"
    "      tyto_argmax(x + (nn * p.xs[0] + c * p.xs[1]), p.xs, h0, h1, w0,\n"
    "                  w1, bh, bw);\n"
    "      gv = LD(dy[nn * p.ys[0] + c * p.ys[1] + ch * p.ys[2] +\n"
    "                 cw * p.ys[3]]);\n"
    "      if (!tiled)\n"
    "        gv = (T)0 + gv;\n"
    "    }\n"
    "    S *tp = dx + (nn * p.ts[0] + c * p.ts[1]);\n"
    "    I a = ch * p.SH - p.PH, b = cw * p.SW - p.PW;\n"
    "    I r0 = tyto_max(a, (I)0), r1 = tyto_min(a + p.SH, p.H);\n"
    "    I s0 = tyto_max(b, (I)0), s1 = tyto_min(b + p.SW, p.W);\n"
    "    for (I ih = r0; ih < r1; ih++)\n"
    "      for (I iw = s0; iw < s1; iw++)\n"
    "        tp[ih * p.ts[2] + iw * p.ts[3]] =\n"
    "            ST(ih == bh && iw == bw ? gv : (T)0);\n"
    "  }\n"
    "}\n",
    "/* MAX_POOL2D_BACKWARD with overlapping windows, pass 1: the position\n"
    "   of each window's first maximum in the window clipped to the input,\n"
    "   row-major. (Every window reaches inside the input when dx is not\n"
    "   empty.) */\n"
    "template <typename I>\n"
    "__device__ void tyto_pool_argmax(const S *x, int *am,\n"
    "                                 const tyto_pool_geo &g, i64 n) {\n"
    "  const tyto_pg<I> p(g);\n"
    "  TYTO_FOR(i, n) {\n"
    "    I nn, c, oh, ow, h0, h1, w0, w1, bh, bw;\n"
    "    tyto_split((I)i, p.C, p.OH, p.OW, nn, c, oh, ow);\n"
    "    tyto_window(p, oh, ow, h0, h1, w0, w1);\n"
    "    tyto_argmax(x + (nn * p.xs[0] + c * p.xs[1]), p.xs, h0, h1, w0, w1,\n"
    "                bh, bw);\n"
    "    am[i] = (int)((bh - h0) * (w1 - w0) + bw - w0);\n"
    "  }\n"
    "}\n"
    "/* The windows [lo, hi) along one axis that contain input row ih. */\n"
    "template <typename I>\n"
    "__device__ __forceinline__ void tyto_cover(I ih, I K, I St, I P, I O,\n"
    "                                           I &lo, I &hi) {\n"
    "  lo = (tyto_max(ih + P - K + 1, (I)0) + St - 1) / St;\n"
    "  hi = tyto_min((ih + P) / St + 1, O);\n"
    "}\n"
    "/* The derivatives as gathers: dx at each input position sums, from 0\n"
    "   in the windows' row-major order, over the windows that contain it:\n"
    "   dy where the position is the window's argmax (MAX, am from pass 1)\n"
    "   or dy / the window's size inside the input (AVG). */\n"
    "template <typename I, bool MAX>\n"
    "__device__ void tyto_pool_bwd(const int *am, const S *dy, S *dx,\n"
    "                              const tyto_pool_geo &g, i64 n) {\n"
    "  const tyto_pg<I> p(g);\n"
    "  TYTO_FOR(i, n) {\n"
    "    I nn, c, ih, iw, oh0, oh1, ow0, ow1;\n"
    "    tyto_split((I)i, p.C, p.H, p.W, nn, c, ih, iw);\n"
    "    tyto_cover(ih, p.KH, p.SH, p.PH, p.OH, oh0, oh1);\n"
    "    tyto_cover(iw, p.KW, p.SW, p.PW, p.OW, ow0, ow1);\n"
    "    const S *yp = dy + (nn * p.ys[0] + c * p.ys[1]);\n"
    "    I plane = (nn * p.C + c) * p.OH;\n"
    "    T acc = 0;\n"
    "    for (I oh = oh0; oh < oh1; oh++)\n"
    "      for (I ow = ow0; ow < ow1; ow++) {\n"
    "        I h0, h1, w0, w1;\n"
    "        tyto_window(p, oh, ow, h0, h1, w0, w1);\n"
    "        T v = LD(yp[oh * p.ys[2] + ow * p.ys[3]]);\n"
    "        if (!MAX)\n"
    "          acc += v / (T)((h1 - h0) * (w1 - w0));\n"
    "        else if (am[(plane + oh) * p.OW + ow] ==\n"
    "                 (int)((ih - h0) * (w1 - w0) + iw - w0))\n"
    "          acc += v;\n"
    "      }\n"
    "    dx[nn * p.ts[0] + c * p.ts[1] + ih * p.ts[2] + iw * p.ts[3]] =\n"
    "        ST(acc);\n"
    "  }\n"
    "}\n"
    "/* The entry points, in both index widths. */\n"
    "#define TYTO_POOL_KERNELS(I, W) \\\n"
    "  extern \"C\" __global__ void tyto_pool_max_##W( \\\n"
    "      const S *x, S *y, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_fwd<I, true>(x, y, g, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_avg_##W( \\\n"
    "      const S *x, S *y, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_fwd<I, false>(x, y, g, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_select_##W( \\\n"
    "      const S *x, const S *t, S *y, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_select<I>(x, t, y, g, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_cells_##W( \\\n"
    "      const S *x, const S *dy, S *dx, tyto_pool_geo g, int tiled, \\\n"
    "      i64 n) { \\\n"
    "    tyto_pool_cells<I>(x, dy, dx, g, tiled, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_argmax_##W( \\\n"
    "      const S *x, int *am, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_argmax<I>(x, am, g, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_max_bwd_##W( \\\n"
    "      const int *am, const S *dy, S *dx, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_bwd<I, true>(am, dy, dx, g, n); \\\n"
    "  } \\\n"
    "  extern \"C\" __global__ void tyto_pool_avg_bwd_##W( \\\n"
    "      const S *dy, S *dx, tyto_pool_geo g, i64 n) { \\\n"
    "    tyto_pool_bwd<I, false>((const int *)0, dy, dx, g, n); \\\n"
    "  }\n"
    "TYTO_POOL_KERNELS(int, i32)\n"
    "TYTO_POOL_KERNELS(i64, i64)\n",
};

/* The kernels' geometry argument (struct tyto_pool_geo): the extents, the
 * window, then the strides of x (the pooling's input [N, C, H, W]), y (its
 * output [N, C, OH, OW]) and t (a tensor shaped as x: MAX_POOL2D_BACKWARD's
 * and AVG_POOL2D_BACKWARD's output, MAX_POOL2D_SELECT's second input), zero
 * when the op has no such tensor. CH x CW: the cells of tyto_pool_cells
 * (windows that do not overlap). */
typedef struct pool_geo {
  int64_t N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, CH, CW;
  int64_t xs[4], ys[4], ts[4];
} pool_geo;

/* Which operand plays which role: inputs first, then the output; -1 when
 * the op has no such tensor. */
typedef struct pool_roles {
  int x, y, t;
} pool_roles;

typedef struct pool_impl {
  cudaKernel_t main;   /* the op's kernel (pass 2 of the overlapping
                          MAX_POOL2D_BACKWARD) */
  cudaKernel_t argmax; /* pass 1 of the overlapping MAX_POOL2D_BACKWARD */
  pool_geo g;
  pool_roles r;
  int cells; /* MAX_POOL2D_BACKWARD by cells (windows do not overlap) */
  int tiled; /* ... and they tile the plane (kernel = stride, no pad) */
  int64_t n; /* items of the main kernel */
} pool_impl;

/* The layout of role index r. */
/* Checks d and fills *g and *r: the rules all plugins share
 * (../common/geometry.c), then the argmax pass's limits. */
static tyto_plugin_error *geometry(tyto_plugin_device *dev, const tcu_desc *d,
                                   pool_geo *g, pool_roles *r) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *op = tcu_op_name(d->op);
  tpc_operands a;
  tpc_conv c;
  char why[1024];
  memset(g, 0, sizeof *g);
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  int code = tpc_conv_check(&a, &c, why, sizeof why);
  if (code != 0)
    return host->error_new((tyto_plugin_code)code, "%s", why);
  r->x = c.x, r->y = c.y, r->t = c.t;
  g->N = c.N, g->C = c.C, g->H = c.H, g->W = c.W, g->OH = c.OH, g->OW = c.OW;
  g->KH = c.KH, g->KW = c.KW, g->sh = c.sh, g->sw = c.sw, g->ph = c.ph;
  g->pw = c.pw, g->CH = c.CH, g->CW = c.CW;
  const tyto_plugin_layout *x = tpc_operand(&a, c.x), *y = tpc_operand(&a, c.y);
  if (d->op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD) {
    /* The argmax pass stores a position inside each clipped window as an
     * int, and one int per window in the workspace. */
    int64_t wh = g->KH < g->H ? g->KH : g->H, ww = g->KW < g->W ? g->KW : g->W;
    if (ww > 0 && wh > INT_MAX / ww)
      return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                             "%s: windows of %lldx%lld input elements are too "
                             "large for the cuda plugin (at most %d elements)",
                             op, (long long)wh, (long long)ww, INT_MAX);
    if (d->in[1].n > INT64_MAX / (int64_t)sizeof(int) - 1)
      return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                             "%s: %lld windows are too many for the cuda "
                             "plugin's argmax workspace",
                             op, (long long)d->in[1].n);
  }
  /* The strides by role; x may be missing (AVG_POOL2D_BACKWARD reads only
   * dy): its strides stay 0 and no kernel reads it. */
  for (int k = 0; k < 4; k++) {
    if (d->op != TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD)
      g->xs[k] = x->strides[k];
    g->ys[k] = y->strides[k];
    if (r->t >= 0)
      g->ts[k] = tpc_operand(&a, r->t)->strides[k];
  }
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  pool_geo g;
  pool_roles r;
  return geometry(dev, d, &g, &r);
}

/* Whether every element offset l reaches from its origin is below lim in
 * magnitude. */
static int reach_below(const tyto_plugin_layout *l, int64_t lim) {
  int64_t sum = 0;
  for (uint32_t a = 0; a < l->rank; a++)
    if (l->shape[a] == 0)
      return 1;
  for (uint32_t a = 0; a < l->rank; a++) {
    int64_t s = l->strides[a];
    if (s < -INT64_MAX)
      return 0;
    s = s < 0 ? -s : s;
    if (s > 0 && l->shape[a] - 1 > (lim - sum) / s)
      return 0;
    sum += (l->shape[a] - 1) * s;
    if (sum >= lim)
      return 0;
  }
  return 1;
}

/* Whether every index the kernels form fits the int variant: the extents,
 * the windows' rows and columns, the items and the element offsets. */
static int fits32(const tcu_desc *d, const pool_geo *g) {
  const int64_t lim = POOL_I32_LIMIT;
  const int64_t v[] = {g->N,  g->C,  g->H,  g->W,  g->OH, g->OW, g->KH,
                       g->KW, g->sh, g->sw, g->ph, g->pw, g->CH, g->CW};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i] >= lim)
      return 0;
  /* H + 2 ph + KH + sh bounds every row index formed (and so for W). */
  if (g->H + 2 * g->ph + g->KH + g->sh >= lim ||
      g->W + 2 * g->pw + g->KW + g->sw >= lim)
    return 0;
  int64_t planes = g->N * g->C; /* both < 2^30 */
  if (planes >= lim || (g->H > 0 && g->W > 0 && planes >= lim / g->H / g->W) ||
      planes >= lim / g->OH / g->OW ||
      (g->CH > 0 && g->CW > 0 && planes >= lim / g->CH / g->CW))
    return 0;
  for (uint32_t i = 0; i < d->n_in; i++)
    if (!reach_below(&d->in[i].l, lim))
      return 0;
  return reach_below(&d->out[0].l, lim);
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tcu_desc *d = &k->desc;
  pool_impl *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  k->impl = c;
  tyto_plugin_error *e = geometry(dev, d, &c->g, &c->r);
  if (e != NULL)
    return e;
  const pool_geo *g = &c->g;
  const char *base;
  c->n = d->out[0].n;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D: base = "tyto_pool_max"; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D: base = "tyto_pool_avg"; break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT: base = "tyto_pool_select"; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD: base = "tyto_pool_avg_bwd"; break;
  default: /* MAX_POOL2D_BACKWARD */
    c->cells = g->sh >= g->KH && g->sw >= g->KW;
    /* The CPU stores dy itself when the windows tile the plane, else adds
     * it to zeros. */
    c->tiled = g->KH == g->sh && g->KW == g->sw && g->ph == 0 && g->pw == 0;
    if (c->cells) {
      base = "tyto_pool_cells";
      c->n = g->N * g->C * g->CH * g->CW;
    } else {
      base = "tyto_pool_max_bwd";
      /* An int per window, and room to align the first to 4 bytes. */
      k->workspace_bytes = (uint64_t)d->in[1].n * sizeof(int) + sizeof(int) - 1;
    }
    break;
  }
  const char *width = fits32(d, g) ? "i32" : "i64";
  char name[64], argmax[64];
  snprintf(name, sizeof name, "%s_%s", base, width);
  snprintf(argmax, sizeof argmax, "tyto_pool_argmax_%s", width);
  char *source = tcu_source_join(source_parts,
                                 sizeof source_parts / sizeof source_parts[0]);
  if (source == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "%s: out of host memory",
                                    tcu_op_name(d->op));
  e = tcu_function(dev, d->dtype, source, name, &c->main);
  if (e == NULL && k->workspace_bytes > 0)
    e = tcu_function(dev, d->dtype, source, argmax, &c->argmax);
  free(source);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* The device address of role r's origin. */
static void *ptr_of(const tcu_desc *d, const tcu_arg *in, const tcu_arg *out,
                    int r) {
  return r < (int)d->n_in ? in[r].ptr : out[r - (int)d->n_in].ptr;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const pool_impl *c = k->impl;
  const tcu_desc *d = &k->desc;
  /* cudaLaunchKernel copies the arguments: locals suffice. */
  pool_geo g = c->g;
  int64_t n = c->n;
  const void *x = c->r.x >= 0 && d->op != TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD
                      ? ptr_of(d, in, out, c->r.x)
                      : NULL;
  const void *y = ptr_of(d, in, out, c->r.y);
  const void *t = c->r.t >= 0 ? ptr_of(d, in, out, c->r.t) : NULL;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D:
  case TYTO_PLUGIN_OP_AVG_POOL2D: {
    void *params[] = {&x, &y, &g, &n};
    return tcu_run_n(dev, s, c->main, n, params,
                     d->op == TYTO_PLUGIN_OP_MAX_POOL2D ? "max_pool2d kernel"
                                                        : "avg_pool2d kernel");
  }
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT: {
    void *params[] = {&x, &t, &y, &g, &n};
    return tcu_run_n(dev, s, c->main, n, params, "max_pool2d_select kernel");
  }
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD: {
    void *params[] = {&y, &t, &g, &n};
    return tcu_run_n(dev, s, c->main, n, params, "avg_pool2d_backward kernel");
  }
  default: break;
  }
  /* MAX_POOL2D_BACKWARD */
  if (c->cells) {
    int tiled = c->tiled;
    void *params[] = {&x, &y, &t, &g, &tiled, &n};
    return tcu_run_n(dev, s, c->main, n, params, "max_pool2d_backward kernel");
  }
  /* The argmaxes at the first 4-byte boundary of the workspace. */
  uintptr_t at = (uintptr_t)ws->ptr;
  void *am = (void *)((at + sizeof(int) - 1) / sizeof(int) * sizeof(int));
  int64_t windows = d->in[1].n;
  void *p1[] = {&x, &am, &g, &windows};
  tyto_plugin_error *e = tcu_run_n(dev, s, c->argmax, windows, p1,
                                   "max_pool2d_backward argmax kernel");
  if (e != NULL)
    return e;
  void *p2[] = {&am, &y, &t, &g, &n};
  return tcu_run_n(dev, s, c->main, n, p2, "max_pool2d_backward kernel");
}

const tcu_family tcu_family_pool = {"pool",  tpc_pool_op, check,
                                    prepare, launch,      release};
