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
 *  - forward pooling and MAX_POOL2D_SELECT run one work-item per output
 *    window;
 *  - the derivatives are gathers: one work-item per input position sums,
 *    in the windows' row-major order, the gradient of every window that
 *    contains it, which is the order the CPU accumulates in, so results
 *    match it bit for bit and are the same at every run.
 *    MAX_POOL2D_BACKWARD first stores each window's argmax (an int per
 *    window, in the workspace) so the gather does not search each window
 *    again for every position inside it.
 */
#include "ops.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "layout.h"

/* Pooling geometry in a long16 `p`: s0 N, s1 C, s2 H, s3 W, s4 OH, s5 OW,
 * s6 KH, s7 KW, s8 stride_h, s9 stride_w, sa pad_h, sb pad_w. Strides are
 * long4s in [N, C, H, W] order. */
static const char *const source_parts[] = {
    "#define P_C p.s1\n"
    "#define P_H p.s2\n"
    "#define P_W p.s3\n"
    "#define P_OH p.s4\n"
    "#define P_OW p.s5\n"
    "/* The window of output (oh, ow), clipped to the input. */\n"
    "inline void tyto_window(long16 p, long oh, long ow, long *h0, long *h1,\n"
    "                        long *w0, long *w1) {\n"
    "  long a = oh * p.s8 - p.sa, b = ow * p.s9 - p.sb;\n"
    "  *h0 = max(a, 0L);\n"
    "  *w0 = max(b, 0L);\n"
    "  *h1 = min(a + p.s6, P_H);\n"
    "  *w1 = min(b + p.s7, P_W);\n"
    "}\n"
    "/* Splits row-major index i of [N, C, A, B] into plane and (a, b). */\n"
    "inline long tyto_split(long i, long A, long B, long *a, long *b) {\n"
    "  *b = i % B;\n"
    "  i /= B;\n"
    "  *a = i % A;\n"
    "  return i / A;\n"
    "}\n"
    "/* Offset of plane (n * C + c) for strides s. */\n"
    "inline long tyto_plane(long plane, long C, long4 s) {\n"
    "  return (plane / C) * s.s0 + (plane % C) * s.s1;\n"
    "}\n"
    "/* The first maximum of a window in row-major order, the first NaN\n"
    "   beating everything; *bh < 0 when the window is empty. */\n"
    "inline void tyto_argmax(__global const T *x, long4 xs, long h0, long h1,\n"
    "                        long w0, long w1, long *bh, long *bw) {\n"
    "  T best = 0;\n"
    "  *bh = -1;\n"
    "  *bw = -1;\n"
    "  for (long ih = h0; ih < h1; ih++)\n"
    "    for (long iw = w0; iw < w1; iw++) {\n"
    "      T v = x[ih * xs.s2 + iw * xs.s3];\n"
    "      if (*bh < 0 || (!isnan(best) && (v > best || isnan(v)))) {\n"
    "        best = v;\n"
    "        *bh = ih;\n"
    "        *bw = iw;\n"
    "      }\n"
    "    }\n"
    "}\n",
    "__kernel void tyto_pool_fwd(__global const T *x, long xb, long4 xs,\n"
    "                            __global T *y, long yb, long4 ys, long16 p,\n"
    "                            int is_max, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long oh, ow, h0, h1, w0, w1;\n"
    "    long pl = tyto_split(i, P_OH, P_OW, &oh, &ow);\n"
    "    tyto_window(p, oh, ow, &h0, &h1, &w0, &w1);\n"
    "    __global const T *xp = x + xb + tyto_plane(pl, P_C, xs);\n"
    "    T acc = is_max ? -INFINITY : (T)0;\n"
    "    for (long ih = h0; ih < h1; ih++)\n"
    "      for (long iw = w0; iw < w1; iw++) {\n"
    "        T v = xp[ih * xs.s2 + iw * xs.s3];\n"
    "        if (is_max)\n"
    "          acc = v > acc || isnan(v) ? v : acc;\n"
    "        else\n"
    "          acc += v;\n"
    "      }\n"
    "    if (!is_max)\n"
    "      acc /= (T)((h1 - h0) * (w1 - w0));\n"
    "    y[yb + tyto_plane(pl, P_C, ys) + oh * ys.s2 + ow * ys.s3] = acc;\n"
    "  }\n"
    "}\n",
    "/* MAX_POOL2D_SELECT: y = t at each window's first maximum of x. An\n"
    "   empty window (x has no rows or columns) leaves y as it was. */\n"
    "__kernel void tyto_pool_select(__global const T *x, long xb, long4 xs,\n"
    "                               __global const T *t, long tb, long4 ts,\n"
    "                               __global T *y, long yb, long4 ys,\n"
    "                               long16 p, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long oh, ow, h0, h1, w0, w1, bh, bw;\n"
    "    long pl = tyto_split(i, P_OH, P_OW, &oh, &ow);\n"
    "    tyto_window(p, oh, ow, &h0, &h1, &w0, &w1);\n"
    "    tyto_argmax(x + xb + tyto_plane(pl, P_C, xs), xs, h0, h1, w0, w1,\n"
    "                &bh, &bw);\n"
    "    if (bh >= 0)\n"
    "      y[yb + tyto_plane(pl, P_C, ys) + oh * ys.s2 + ow * ys.s3] =\n"
    "          t[tb + tyto_plane(pl, P_C, ts) + bh * ts.s2 + bw * ts.s3];\n"
    "  }\n"
    "}\n",
    "/* MAX_POOL2D_BACKWARD, pass 1: the position of each window's first\n"
    "   maximum inside the clipped window, row-major; -1 when empty. */\n"
    "__kernel void tyto_pool_argmax(__global const T *x, long xb, long4 xs,\n"
    "                               __global int *am, long ab, long16 p,\n"
    "                               long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long oh, ow, h0, h1, w0, w1, bh, bw;\n"
    "    long pl = tyto_split(i, P_OH, P_OW, &oh, &ow);\n"
    "    tyto_window(p, oh, ow, &h0, &h1, &w0, &w1);\n"
    "    tyto_argmax(x + xb + tyto_plane(pl, P_C, xs), xs, h0, h1, w0, w1,\n"
    "                &bh, &bw);\n"
    "    am[ab + i] = bh < 0 ? -1 : (int)((bh - h0) * (w1 - w0) + bw - w0);\n"
    "  }\n"
    "}\n"
    "/* The windows that contain input row ih (or column): [*lo, *hi). */\n"
    "inline void tyto_covering(long ih, long K, long S, long P, long O,\n"
    "                          long *lo, long *hi) {\n"
    "  long a = ih + P - K + 1;\n"
    "  *lo = a <= 0 ? 0 : (a + S - 1) / S;\n"
    "  *hi = min((ih + P) / S + 1, O);\n"
    "}\n",
    "/* MAX_POOL2D_BACKWARD, pass 2: dx at each input position is the sum of\n"
    "   dy over the windows whose maximum it is, in the windows' row-major\n"
    "   order from 0. `tiled` (kernel = stride, no padding: at most one\n"
    "   window per position) stores that window's dy itself, as the CPU\n"
    "   does. */\n"
    "__kernel void tyto_pool_max_bwd(__global const int *am, long ab,\n"
    "                                __global const T *dy, long yb, long4 ys,\n"
    "                                __global T *dx, long xb, long4 xs,\n"
    "                                long16 p, int tiled, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long ih, iw, oh0, oh1, ow0, ow1, h0, h1, w0, w1;\n"
    "    long pl = tyto_split(i, P_H, P_W, &ih, &iw);\n"
    "    tyto_covering(ih, p.s6, p.s8, p.sa, P_OH, &oh0, &oh1);\n"
    "    tyto_covering(iw, p.s7, p.s9, p.sb, P_OW, &ow0, &ow1);\n"
    "    __global const T *g = dy + yb + tyto_plane(pl, P_C, ys);\n"
    "    __global const int *a = am + ab + pl * P_OH * P_OW;\n"
    "    T acc = 0;\n"
    "    for (long oh = oh0; oh < oh1; oh++)\n"
    "      for (long ow = ow0; ow < ow1; ow++) {\n"
    "        tyto_window(p, oh, ow, &h0, &h1, &w0, &w1);\n"
    "        if (a[oh * P_OW + ow] == (int)((ih - h0) * (w1 - w0) + iw - w0)) "
    "{\n"
    "          T v = g[oh * ys.s2 + ow * ys.s3];\n"
    "          acc = tiled ? v : acc + v;\n"
    "        }\n"
    "      }\n"
    "    dx[xb + tyto_plane(pl, P_C, xs) + ih * xs.s2 + iw * xs.s3] = acc;\n"
    "  }\n"
    "}\n",
    "/* AVG_POOL2D_BACKWARD: dx at each input position is the sum over the\n"
    "   windows that contain it of dy / (the window's unpadded size). */\n"
    "__kernel void tyto_pool_avg_bwd(__global const T *dy, long yb, long4 ys,\n"
    "                                __global T *dx, long xb, long4 xs,\n"
    "                                long16 p, long n) {\n"
    "  TYTO_FOR(i, n) {\n"
    "    long ih, iw, oh0, oh1, ow0, ow1, h0, h1, w0, w1;\n"
    "    long pl = tyto_split(i, P_H, P_W, &ih, &iw);\n"
    "    tyto_covering(ih, p.s6, p.s8, p.sa, P_OH, &oh0, &oh1);\n"
    "    tyto_covering(iw, p.s7, p.s9, p.sb, P_OW, &ow0, &ow1);\n"
    "    __global const T *g = dy + yb + tyto_plane(pl, P_C, ys);\n"
    "    T acc = 0;\n"
    "    for (long oh = oh0; oh < oh1; oh++)\n"
    "      for (long ow = ow0; ow < ow1; ow++) {\n"
    "        tyto_window(p, oh, ow, &h0, &h1, &w0, &w1);\n"
    "        acc += g[oh * ys.s2 + ow * ys.s3] / (T)((h1 - h0) * (w1 - w0));\n"
    "      }\n"
    "    dx[xb + tyto_plane(pl, P_C, xs) + ih * xs.s2 + iw * xs.s3] = acc;\n"
    "  }\n"
    "}\n",
};

/* The geometry of a pooling op and which operand plays which role: x the
 * pooling's input [N, C, H, W], y its output [N, C, OH, OW], t a tensor
 * shaped as x (MAX_POOL2D_BACKWARD's output, MAX_POOL2D_SELECT's second
 * input, AVG_POOL2D_BACKWARD's output). Role indices count inputs first,
 * then the output; -1 when the op has no such tensor. */
/* The program's source: source_parts joined (ISO C caps one string
 * literal at 4095 characters). NULL when out of memory; the caller frees. */
static char *source_new(void) {
  size_t n = sizeof source_parts / sizeof source_parts[0], len = 1;
  for (size_t i = 0; i < n; i++)
    len += strlen(source_parts[i]);
  char *s = malloc(len), *at = s;
  if (s == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(source_parts[i]);
    memcpy(at, source_parts[i], l);
    at += l;
  }
  *at = '\0';
  return s;
}

typedef struct pool_geom {
  int64_t N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw;
  int x, y, t;
} pool_geom;

typedef struct pool_impl {
  cl_kernel main;   /* the op's kernel (pass 2 of MAX_POOL2D_BACKWARD) */
  cl_kernel argmax; /* MAX_POOL2D_BACKWARD's pass 1 */
  pool_geom g;
} pool_impl;

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MAX_POOL2D || op == TYTO_PLUGIN_OP_AVG_POOL2D ||
         op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD ||
         op == TYTO_PLUGIN_OP_MAX_POOL2D_SELECT ||
         op == TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD;
}

/* The layout of role r (an index as in pool_geom). */
static const tyto_plugin_layout *role(const ocl_desc *d, int r) {
  return r < (int)d->n_in ? &d->in[r].l : &d->out[r - (int)d->n_in].l;
}

/* Checks d and fills *g: the rules of plugins/cpu/conv.c. */
static tyto_plugin_error *geometry(tyto_plugin_device *dev, const ocl_desc *d,
                                   pool_geom *g) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *op = ocl_op_name(d->op);
  const char *inputs = "x";
  uint32_t want_in = 1;
  const char *xname = "x", *yname = "output", *tname = NULL;
  g->x = 0, g->y = 1, g->t = -1;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD:
    inputs = "x, dy", want_in = 2;
    g->y = 1, g->t = 2, yname = "dy", tname = "dx (the output)";
    break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT:
    inputs = "x, t", want_in = 2;
    g->t = 1, g->y = 2, tname = "t";
    break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD:
    inputs = "dy";
    g->y = 0, g->x = g->t = 1, yname = "dy", xname = "dx (the output)";
    break;
  default: break;
  }
  if (d->n_in != want_in || d->n_out != 1)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected %u input%s (%s) and 1 output, got %u and "
                     "%u",
                     op, (unsigned)want_in, want_in > 1 ? "s" : "", inputs,
                     (unsigned)d->n_in, (unsigned)d->n_out);
  const tyto_plugin_op_desc *desc = d->d;
  if (desc->n_iattrs != 6)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: expected 6 integer attributes (kernel_h, kernel_w, "
                     "stride_h, stride_w, pad_h, pad_w), got %u",
                     op, (unsigned)desc->n_iattrs);
  const tyto_plugin_layout *x = role(d, g->x), *y = role(d, g->y),
                           *out = &d->out[0].l;
  char sx[160], sy[160];
  ocl_format_shape(x, sx, sizeof sx);
  ocl_format_shape(y, sy, sizeof sy);
  if (x->rank != 4)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %s must be [N, C, H, W], got %s", op, xname, sx);
  static const char *const names[6] = {"kernel_h", "kernel_w", "stride_h",
                                       "stride_w", "pad_h",    "pad_w"};
  const int64_t *a = desc->iattrs;
  for (int i = 0; i < 6; i++) {
    int64_t min = i < 4 ? 1 : 0;
    if (a[i] < min)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: %s must be at least %lld, got %lld", op, names[i],
                       (long long)min, (long long)a[i]);
    if (a[i] > INT_MAX)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: %s %lld is too large (at most %d)", op, names[i],
                       (long long)a[i], INT_MAX);
  }
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2],
  g->W = x->shape[3];
  g->KH = a[0], g->KW = a[1], g->sh = a[2], g->sw = a[3], g->ph = a[4],
  g->pw = a[5];
  if (g->ph >= g->KH || g->pw >= g->KW)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: padding %lldx%lld must be smaller than the kernel "
                     "%lldx%lld",
                     op, (long long)g->ph, (long long)g->pw, (long long)g->KH,
                     (long long)g->KW);
  /* H, W < 2^62 (kernels.c checked the reach), pads <= INT_MAX. */
  int64_t ph2 = g->H + 2 * g->ph, pw2 = g->W + 2 * g->pw;
  if (g->KH > ph2 || g->KW > pw2)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the kernel %lldx%lld does not fit in the padded "
                     "input %lldx%lld of %s %s",
                     op, (long long)g->KH, (long long)g->KW, (long long)ph2,
                     (long long)pw2, xname, sx);
  g->OH = (ph2 - g->KH) / g->sh + 1;
  g->OW = (pw2 - g->KW) / g->sw + 1;
  if (y->rank != 4 || y->shape[0] != g->N || y->shape[1] != g->C ||
      y->shape[2] != g->OH || y->shape[3] != g->OW)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %s is %s, expected [%lld,%lld,%lld,%lld] for %s %s",
                     op, yname, sy, (long long)g->N, (long long)g->C,
                     (long long)g->OH, (long long)g->OW, xname, sx);
  if (g->t >= 0) {
    const tyto_plugin_layout *t = role(d, g->t);
    if (t->rank != 4 || memcmp(t->shape, x->shape, 4 * sizeof t->shape[0])) {
      char st[160];
      ocl_format_shape(t, st, sizeof st);
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: %s is %s, expected %s (shaped as x)", op, tname, st,
                       sx);
    }
  }
  for (uint32_t ax = 0; ax < 4; ax++)
    if (out->shape[ax] > 1 && out->strides[ax] == 0) {
      char so[160];
      ocl_format_shape(out, so, sizeof so);
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: output %s has a stride-0 axis %u: every element "
                       "needs its own place",
                       op, so, (unsigned)ax);
    }
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
  const char *name;
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD:
    name = "tyto_pool_max_bwd";
    k->workspace_bytes = (uint64_t)d->in[1].n * sizeof(cl_int);
    break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT: name = "tyto_pool_select"; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD: name = "tyto_pool_avg_bwd"; break;
  default: name = "tyto_pool_fwd"; break;
  }
  char *source = source_new();
  if (source == NULL)
    return ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "prepare: out of host memory");
  e = ocl_kernel_new(dev, d->dtype, source, NULL, name, &c->main);
  if (e == NULL && d->op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD)
    e = ocl_kernel_new(dev, d->dtype, source, NULL, "tyto_pool_argmax",
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

static cl_long4 strides4(const tyto_plugin_layout *l) {
  cl_long4 r;
  for (int i = 0; i < 4; i++)
    r.s[i] = l->strides[i];
  return r;
}

/* Sets the arguments of a kernel in order, stopping at the first failure. */
typedef struct arg_list {
  tyto_plugin_device *dev;
  cl_kernel k;
  cl_uint next;
  tyto_plugin_error *e;
} arg_list;

static void arg(arg_list *a, size_t size, const void *value) {
  if (a->e == NULL)
    a->e = ocl_set_arg(a->dev, a->k, a->next++, size, value);
}

/* Adds buffer, origin and strides of the operand of role r. */
static void arg_tensor(arg_list *a, const ocl_desc *d, const ocl_arg *in,
                       const ocl_arg *out, int r) {
  const ocl_arg *v = r < (int)d->n_in ? &in[r] : &out[r - (int)d->n_in];
  cl_long4 s = strides4(role(d, r));
  arg(a, sizeof v->mem, &v->mem);
  arg(a, sizeof v->origin, &v->origin);
  arg(a, sizeof s, &s);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  pool_impl *c = k->impl;
  const ocl_desc *d = &k->desc;
  const pool_geom *g = &c->g;
  const int64_t pv[12] = {g->N,  g->C,  g->H,  g->W,  g->OH, g->OW,
                          g->KH, g->KW, g->sh, g->sw, g->ph, g->pw};
  cl_long16 p;
  memset(&p, 0, sizeof p);
  for (int i = 0; i < 12; i++)
    p.s[i] = pv[i];
  cl_long n = d->out[0].n;
  arg_list a = {dev, c->main, 0, NULL};
  size_t global = ocl_global_size(n);
  switch (d->op) {
  case TYTO_PLUGIN_OP_MAX_POOL2D:
  case TYTO_PLUGIN_OP_AVG_POOL2D: {
    cl_int is_max = d->op == TYTO_PLUGIN_OP_MAX_POOL2D;
    arg_tensor(&a, d, in, out, g->x);
    arg_tensor(&a, d, in, out, g->y);
    arg(&a, sizeof p, &p);
    arg(&a, sizeof is_max, &is_max);
    arg(&a, sizeof n, &n);
    break;
  }
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT:
    arg_tensor(&a, d, in, out, g->x);
    arg_tensor(&a, d, in, out, g->t);
    arg_tensor(&a, d, in, out, g->y);
    arg(&a, sizeof p, &p);
    arg(&a, sizeof n, &n);
    break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD:
    arg_tensor(&a, d, in, out, g->y);
    arg_tensor(&a, d, in, out, g->t);
    arg(&a, sizeof p, &p);
    arg(&a, sizeof n, &n);
    break;
  default: { /* MAX_POOL2D_BACKWARD */
    /* The workspace's origin counts elements of the dtype: in ints, it is
     * d->elem / 4 times that. */
    cl_long ab = ws->origin * (cl_long)(d->elem / sizeof(cl_int));
    cl_long windows = d->in[1].n;
    cl_int tiled = g->KH == g->sh && g->KW == g->sw && g->ph == 0 && g->pw == 0;
    arg_list a1 = {dev, c->argmax, 0, NULL};
    arg_tensor(&a1, d, in, out, g->x);
    arg(&a1, sizeof ws->mem, &ws->mem);
    arg(&a1, sizeof ab, &ab);
    arg(&a1, sizeof p, &p);
    arg(&a1, sizeof windows, &windows);
    if (a1.e != NULL)
      return a1.e;
    size_t g1 = ocl_global_size(windows);
    tyto_plugin_error *e = ocl_enqueue(dev, s, c->argmax, 1, &g1, NULL,
                                       "max_pool2d_backward argmax kernel");
    if (e != NULL)
      return e;
    arg(&a, sizeof ws->mem, &ws->mem);
    arg(&a, sizeof ab, &ab);
    arg_tensor(&a, d, in, out, g->y);
    arg_tensor(&a, d, in, out, g->t);
    arg(&a, sizeof p, &p);
    arg(&a, sizeof tiled, &tiled);
    arg(&a, sizeof n, &n);
    break;
  }
  }
  if (a.e != NULL)
    return a.e;
  static const char *const what[] = {
      "max_pool2d kernel", "avg_pool2d kernel", "max_pool2d_backward kernel",
      "max_pool2d_select kernel", "avg_pool2d_backward kernel"};
  int w = d->op == TYTO_PLUGIN_OP_MAX_POOL2D            ? 0
          : d->op == TYTO_PLUGIN_OP_AVG_POOL2D          ? 1
          : d->op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD ? 2
          : d->op == TYTO_PLUGIN_OP_MAX_POOL2D_SELECT   ? 3
                                                        : 4;
  return ocl_enqueue(dev, s, c->main, 1, &global, NULL, what[w]);
}

const ocl_family ocl_family_pool = {"pool",  owns,   check,
                                    prepare, launch, release};
