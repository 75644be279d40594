/*
 * CONV2D, MAX_POOL2D and AVG_POOL2D on NCHW tensors, and their derivatives
 * CONV2D_BACKWARD_DATA, CONV2D_BACKWARD_FILTER, MAX_POOL2D_BACKWARD,
 * MAX_POOL2D_SELECT and AVG_POOL2D_BACKWARD.
 *
 * f32 convolutions (forward, backward data, backward weights) and average
 * pooling with every layout contiguous go through oneDNN (plain nchw/oihw
 * formats) when the build found it. Everything else (f64, which oneDNN's
 * CPU engine has no convolution for, strided or offset views, empty
 * tensors, max pooling, whose NaN oneDNN drops, the pooling derivatives, or
 * TYTO_CPU_NO_DNNL=1 in the environment at prepare) takes the portable
 * path: convolution as im2col + one cblas
 * GEMM per (image, group), its data gradient as one GEMM + col2im per
 * (image, group), its weight gradient as one accumulating GEMM per (image,
 * group) with groups in parallel, pooling and its derivatives as direct
 * loops per (image, channel) plane. Both paths give the same results to
 * rounding; the tests run both against one reference.
 *
 * Output size, as in PyTorch and oneDNN (floor mode):
 *   OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1.
 * Average pooling divides by the number of window elements inside the input
 * (padding not counted); max pooling ignores padding. A pooling pad must be
 * smaller than its kernel, so every window sees at least one element. The
 * max pooling derivatives use the first maximum of each window in row-major
 * order (the first NaN when there is one), which holds the forward's value.
 *
 * The derivative ops are described by the tensors they relate: "x" is the
 * convolution's or pooling's input [N, C, H, W], "w" the weight, "y" its
 * output [N, O, OH, OW]. CONV2D_BACKWARD_DATA reads y's gradient and w and
 * writes x's; CONV2D_BACKWARD_FILTER reads x and y's gradient and writes
 * w's; MAX_POOL2D_BACKWARD reads x and y's gradient and writes x's ("t");
 * MAX_POOL2D_SELECT reads x and t (shaped as x) and writes y;
 * AVG_POOL2D_BACKWARD reads y's gradient and writes x's.
 */
#include "config.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TYTO_HAVE_DNNL
#include <dnnl.h>
#endif

#include "../common/geometry.h"
#include "onednn.h"
#include "ops.h"
#include "window2.h"

/* Below this many multiply-adds per (image, group) GEMM the fallback runs
 * images in parallel on the pool; above it OpenBLAS threads each GEMM. */
#define CONV_SMALL_GEMM ((int64_t)96 * 96 * 96)
#define CONV_MAX_SLOTS 64
/* Workspace bytes the parallel slots may take together (one slot always). */
#define CONV_SLOT_BUDGET ((int64_t)256 << 20)

typedef struct conv_op {
  cpu_op base;
  const tyto_plugin_host *host;
  uint32_t code;
  size_t elem;
  tpc_conv g; /* the geometry (../common/geometry.h) */
  /* Fallback: the workspace holds the packed weights, then `slots` slices
   * of (im2col matrix, GEMM result). */
  int64_t slots, slot_elems, wpack_elems;
#ifdef TYTO_HAVE_DNNL
  dnnl_primitive_t prim;    /* NULL: the fallback runs */
  dnnl_memory_desc_t md[5]; /* src, weights, bias, dst, scratchpad */
  uint64_t scratch_bytes;
#endif
} conv_op;

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* oneDNN                                                                    */
/* ------------------------------------------------------------------------ */

#ifdef TYTO_HAVE_DNNL
/* Builds the oneDNN primitive for a validated op; leaves op->prim NULL
 * when oneDNN has no implementation for it (the fallback then runs). */
static void dnnl_build(conv_op *op) {
  dnnl_engine_t cpu_engine = cpu_dnnl_engine();
  if (!cpu_engine)
    return;
  dnnl_dims_t x = {op->g.N, op->g.C, op->g.H, op->g.W},
              y = {op->g.N, op->g.O, op->g.OH, op->g.OW},
              strides = {op->g.sh, op->g.sw}, pad = {op->g.ph, op->g.pw};
  dnnl_memory_desc_t *md = op->md;
  if (dnnl_memory_desc_init_by_tag(&md[0], 4, x, dnnl_f32, dnnl_nchw) ||
      dnnl_memory_desc_init_by_tag(&md[3], 4, y, dnnl_f32, dnnl_nchw))
    return;
  /* The scratchpad is ours (the kernel's workspace): oneDNN's own lives in
   * the thread that created the primitive, and ours run on stream
   * workers. */
  dnnl_primitive_attr_t attr = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success)
    return;
  if (dnnl_primitive_attr_set_scratchpad_mode(
          attr, dnnl_scratchpad_mode_user) != dnnl_success) {
    dnnl_primitive_attr_destroy(attr);
    return;
  }
  dnnl_primitive_desc_t pd = NULL;
  int made = 0;
  if (tpc_conv_op(op->code)) {
    dnnl_dims_t dil = {op->g.dh - 1, op->g.dw - 1}, b = {op->g.O};
    int ok;
    if (op->g.G > 1) {
      dnnl_dims_t w = {op->g.G, op->g.O / op->g.G, op->g.C / op->g.G, op->g.KH,
                       op->g.KW};
      ok = dnnl_memory_desc_init_by_tag(&md[1], 5, w, dnnl_f32, dnnl_goihw) ==
           dnnl_success;
    } else {
      dnnl_dims_t w = {op->g.O, op->g.C, op->g.KH, op->g.KW};
      ok = dnnl_memory_desc_init_by_tag(&md[1], 4, w, dnnl_f32, dnnl_oihw) ==
           dnnl_success;
    }
    ok = ok && dnnl_memory_desc_init_by_tag(&md[2], 1, b, dnnl_f32, dnnl_x) ==
                   dnnl_success;
    dnnl_convolution_desc_t cd, bd;
    int fwd = op->code == TYTO_PLUGIN_OP_CONV2D;
    ok = ok && dnnl_dilated_convolution_forward_desc_init(
                   &cd, fwd ? dnnl_forward_inference : dnnl_forward_training,
                   dnnl_convolution_direct, &md[0], &md[1],
                   op->g.has_bias ? &md[2] : NULL, &md[3], strides, dil, pad,
                   pad) == dnnl_success;
    if (fwd) {
      made = ok && dnnl_primitive_desc_create(&pd, &cd, attr, cpu_engine,
                                              NULL) == dnnl_success;
    } else {
      /* oneDNN picks a backward implementation from the forward one it
       * would run: a forward training primitive descriptor is the hint. */
      dnnl_primitive_desc_t hint = NULL;
      ok = ok && dnnl_primitive_desc_create(&hint, &cd, NULL, cpu_engine,
                                            NULL) == dnnl_success;
      if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA)
        ok = ok && dnnl_dilated_convolution_backward_data_desc_init(
                       &bd, dnnl_convolution_direct, &md[0], &md[1], &md[3],
                       strides, dil, pad, pad) == dnnl_success;
      else
        ok = ok && dnnl_dilated_convolution_backward_weights_desc_init(
                       &bd, dnnl_convolution_direct, &md[0], &md[1], NULL,
                       &md[3], strides, dil, pad, pad) == dnnl_success;
      made = ok && dnnl_primitive_desc_create(&pd, &bd, attr, cpu_engine,
                                              hint) == dnnl_success;
      if (hint)
        dnnl_primitive_desc_destroy(hint);
    }
  } else {
    dnnl_dims_t kernel = {op->g.KH, op->g.KW}, dil = {0, 0};
    dnnl_pooling_v2_desc_t pl;
    made =
        dnnl_pooling_v2_forward_desc_init(
            &pl, dnnl_forward_inference,
            op->code == TYTO_PLUGIN_OP_MAX_POOL2D
                ? dnnl_pooling_max
                : dnnl_pooling_avg_exclude_padding,
            &md[0], &md[3], strides, kernel, dil, pad, pad) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &pl, attr, cpu_engine, NULL) ==
            dnnl_success;
  }
  dnnl_primitive_attr_destroy(attr);
  if (!made)
    return;
  const dnnl_memory_desc_t *sp =
      dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (sp)
    md[4] = *sp;
  op->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (dnnl_primitive_create(&op->prim, pd) != dnnl_success)
    op->prim = NULL;
  dnnl_primitive_desc_destroy(pd);
}

/* Runs the primitive on the bound tensors; returns oneDNN's status. */
static dnnl_status_t dnnl_run(const conv_op *op, const cpu_desc *d,
                              unsigned char *const *args) {
  dnnl_engine_t cpu_engine = cpu_dnnl_engine();
  int n_in = (int)d->n_in;
  dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
  dnnl_exec_arg_t ea[5];
  /* Per bound tensor (inputs, then the output): its memory descriptor in
   * op->md and its oneDNN argument. */
  int slot[4], arg[4];
  switch (op->code) {
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA: /* dy, w -> dx */
    slot[0] = 3, arg[0] = DNNL_ARG_DIFF_DST;
    slot[1] = 1, arg[1] = DNNL_ARG_WEIGHTS;
    slot[2] = 0, arg[2] = DNNL_ARG_DIFF_SRC;
    break;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER: /* x, dy -> dw */
    slot[0] = 0, arg[0] = DNNL_ARG_SRC;
    slot[1] = 3, arg[1] = DNNL_ARG_DIFF_DST;
    slot[2] = 1, arg[2] = DNNL_ARG_DIFF_WEIGHTS;
    break;
  default: /* CONV2D: x, w, (bias) -> y; pooling: x -> y */
    slot[0] = 0, arg[0] = DNNL_ARG_SRC;
    slot[1] = 1, arg[1] = DNNL_ARG_WEIGHTS;
    slot[2] = 2, arg[2] = DNNL_ARG_BIAS;
    slot[n_in] = 3, arg[n_in] = DNNL_ARG_DST;
    break;
  }
  int n = 0;
  dnnl_status_t st = dnnl_success;
  for (int i = 0; i <= n_in && st == dnnl_success; i++) {
    const tyto_plugin_layout *l = i == n_in ? &d->out[0].l : &d->in[i].l;
    void *ptr = args[i] + l->offset * (int64_t)op->elem;
    st = dnnl_memory_create(&mem[n], &op->md[slot[i]], cpu_engine, ptr);
    if (st == dnnl_success) {
      ea[n].arg = arg[i];
      ea[n].memory = mem[n];
      n++;
    }
  }
  if (st == dnnl_success && op->scratch_bytes) {
    st = dnnl_memory_create(&mem[n], &op->md[4], cpu_engine, args[n_in + 1]);
    if (st == dnnl_success) {
      ea[n].arg = DNNL_ARG_SCRATCHPAD;
      ea[n].memory = mem[n];
      n++;
    }
  }
  dnnl_stream_t s = NULL;
  if (st == dnnl_success)
    st = dnnl_stream_create(&s, cpu_engine, dnnl_stream_default_flags);
  if (st == dnnl_success)
    st = dnnl_primitive_execute(op->prim, s, n, ea);
  if (st == dnnl_success)
    st = dnnl_stream_wait(s);
  if (s)
    dnnl_stream_destroy(s);
  for (int i = 0; i < n; i++)
    dnnl_memory_destroy(mem[i]);
  return st;
}
#endif

/* ------------------------------------------------------------------------ */
/* Portable path                                                             */
/* ------------------------------------------------------------------------ */

/* The bound tensors by role (see the top of the file), layout offsets
 * applied; NULL where the op has no such tensor. */
typedef struct conv_run {
  const conv_op *op;
  const tyto_plugin_layout *xl, *wl, *bl, *yl, *tl;
  unsigned char *x, *w, *b, *y, *t;
  unsigned char *ws;
} conv_run;

#define DEFINE_KERNELS(T, SUFFIX, GEMM)                                        \
  /* Packs w [O, C/G, KH, KW] (any strides) into a row-major [O, K]. */        \
  static void pack_w_##SUFFIX(const conv_run *r) {                             \
    const conv_op *op = r->op;                                                 \
    const int64_t *s = r->wl->strides;                                         \
    const T *w = (const T *)r->w;                                              \
    T *dst = (T *)r->ws;                                                       \
    int64_t Cg = op->g.C / op->g.G, i = 0;                                     \
    for (int64_t o = 0; o < op->g.O; o++)                                      \
      for (int64_t c = 0; c < Cg; c++)                                         \
        for (int64_t kh = 0; kh < op->g.KH; kh++)                              \
          for (int64_t kw = 0; kw < op->g.KW; kw++)                            \
            dst[i++] = w[o * s[0] + c * s[1] + kh * s[2] + kw * s[3]];         \
  }                                                                            \
  /* The [K, OH*OW] column matrix of image n, group g of x. */                 \
  static void im2col_##SUFFIX(const conv_run *r, int64_t n, int64_t g,         \
                              T *col) {                                        \
    const conv_op *op = r->op;                                                 \
    const int64_t *xs = r->xl->strides;                                        \
    int64_t Cg = op->g.C / op->g.G, P = op->g.OH * op->g.OW;                   \
    const T *x = (const T *)r->x + n * xs[0] + g * Cg * xs[1];                 \
    for (int64_t c = 0; c < Cg; c++)                                           \
      for (int64_t kh = 0; kh < op->g.KH; kh++)                                \
        for (int64_t kw = 0; kw < op->g.KW; kw++) {                            \
          T *row = col + ((c * op->g.KH + kh) * op->g.KW + kw) * P;            \
          for (int64_t oh = 0; oh < op->g.OH; oh++) {                          \
            int64_t ih = oh * op->g.sh - op->g.ph + kh * op->g.dh;             \
            T *dst = row + oh * op->g.OW;                                      \
            if (ih < 0 || ih >= op->g.H) {                                     \
              for (int64_t ow = 0; ow < op->g.OW; ow++)                        \
                dst[ow] = 0;                                                   \
              continue;                                                        \
            }                                                                  \
            const T *src = x + c * xs[1] + ih * xs[2];                         \
            for (int64_t ow = 0; ow < op->g.OW; ow++) {                        \
              int64_t iw = ow * op->g.sw - op->g.pw + kw * op->g.dw;           \
              dst[ow] = iw >= 0 && iw < op->g.W ? src[iw * xs[3]] : (T)0;      \
            }                                                                  \
          }                                                                    \
        }                                                                      \
  }                                                                            \
  /* Image n, group g of y (any strides) packed into a row-major [Og, P]. */   \
  static void pack_y_##SUFFIX(const conv_run *r, int64_t n, int64_t g,         \
                              T *dst) {                                        \
    const conv_op *op = r->op;                                                 \
    const int64_t *ys = r->yl->strides;                                        \
    int64_t Og = op->g.O / op->g.G;                                            \
    const T *y = (const T *)r->y + n * ys[0] + g * Og * ys[1];                 \
    for (int64_t o = 0; o < Og; o++)                                           \
      for (int64_t oh = 0; oh < op->g.OH; oh++)                                \
        for (int64_t ow = 0; ow < op->g.OW; ow++)                              \
          *dst++ = y[o * ys[1] + oh * ys[2] + ow * ys[3]];                     \
  }                                                                            \
  /* CONV2D, one (image, group): im2col, GEMM, scatter with bias. */           \
  static void conv_one_##SUFFIX(const conv_run *r, int64_t t, T *col,          \
                                T *res) {                                      \
    const conv_op *op = r->op;                                                 \
    const int64_t *ys = r->yl->strides;                                        \
    int64_t n = t / op->g.G, g = t % op->g.G, Cg = op->g.C / op->g.G,          \
            Og = op->g.O / op->g.G, K = Cg * op->g.KH * op->g.KW,              \
            P = op->g.OH * op->g.OW;                                           \
    im2col_##SUFFIX(r, n, g, col);                                             \
    const T *wg = (const T *)r->ws + g * Og * K;                               \
    if (K > 0)                                                                 \
      GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Og, (int)P, (int)K, \
           1, wg, (int)K, col, (int)P, 0, res, (int)P);                        \
    else                                                                       \
      memset(res, 0, (size_t)(Og * P) * sizeof(T));                            \
    const T *bias = (const T *)r->b;                                           \
    int64_t bst = r->b ? r->bl->strides[0] : 0;                                \
    T *y = (T *)r->y + n * ys[0];                                              \
    for (int64_t o = 0; o < Og; o++) {                                         \
      int64_t oc = g * Og + o;                                                 \
      T add = bias ? bias[oc * bst] : (T)0;                                    \
      for (int64_t oh = 0; oh < op->g.OH; oh++) {                              \
        T *dst = y + oc * ys[1] + oh * ys[2];                                  \
        const T *src = res + o * P + oh * op->g.OW;                            \
        for (int64_t ow = 0; ow < op->g.OW; ow++)                              \
          dst[ow * ys[3]] = src[ow] + add;                                     \
      }                                                                        \
    }                                                                          \
  }                                                                            \
  /* CONV2D_BACKWARD_DATA, one (image, group): the column gradient             \
   * W_g^T dy_g [K, P], then col2im adds each column entry back onto the       \
   * x position it was read from. */                                           \
  static void data_one_##SUFFIX(const conv_run *r, int64_t t, T *dcol,         \
                                T *dyp) {                                      \
    const conv_op *op = r->op;                                                 \
    const int64_t *xs = r->xl->strides;                                        \
    int64_t n = t / op->g.G, g = t % op->g.G, Cg = op->g.C / op->g.G,          \
            Og = op->g.O / op->g.G, K = Cg * op->g.KH * op->g.KW,              \
            P = op->g.OH * op->g.OW;                                           \
    T *x = (T *)r->x + n * xs[0] + g * Cg * xs[1];                             \
    for (int64_t c = 0; c < Cg; c++)                                           \
      for (int64_t ih = 0; ih < op->g.H; ih++)                                 \
        for (int64_t iw = 0; iw < op->g.W; iw++)                               \
          x[c * xs[1] + ih * xs[2] + iw * xs[3]] = 0;                          \
    if (P == 0 || Og == 0)                                                     \
      return;                                                                  \
    pack_y_##SUFFIX(r, n, g, dyp);                                             \
    const T *wg = (const T *)r->ws + g * Og * K;                               \
    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)P, (int)Og, 1,  \
         wg, (int)K, dyp, (int)P, 0, dcol, (int)P);                            \
    for (int64_t c = 0; c < Cg; c++)                                           \
      for (int64_t kh = 0; kh < op->g.KH; kh++)                                \
        for (int64_t kw = 0; kw < op->g.KW; kw++) {                            \
          const T *row = dcol + ((c * op->g.KH + kh) * op->g.KW + kw) * P;     \
          for (int64_t oh = 0; oh < op->g.OH; oh++) {                          \
            int64_t ih = oh * op->g.sh - op->g.ph + kh * op->g.dh;             \
            if (ih < 0 || ih >= op->g.H)                                       \
              continue;                                                        \
            T *dst = x + c * xs[1] + ih * xs[2];                               \
            const T *src = row + oh * op->g.OW;                                \
            for (int64_t ow = 0; ow < op->g.OW; ow++) {                        \
              int64_t iw = ow * op->g.sw - op->g.pw + kw * op->g.dw;           \
              if (iw >= 0 && iw < op->g.W)                                     \
                dst[iw * xs[3]] += src[ow];                                    \
            }                                                                  \
          }                                                                    \
        }                                                                      \
  }                                                                            \
  /* CONV2D_BACKWARD_FILTER, one group: dW_g = sum over images of dy_g         \
   * col^T, accumulated in the workspace and then written out. */              \
  static void filter_one_##SUFFIX(const conv_run *r, int64_t g, T *col,        \
                                  T *dyp) {                                    \
    const conv_op *op = r->op;                                                 \
    const int64_t *s = r->wl->strides;                                         \
    int64_t Cg = op->g.C / op->g.G, Og = op->g.O / op->g.G,                    \
            K = Cg * op->g.KH * op->g.KW, P = op->g.OH * op->g.OW;             \
    T *acc = (T *)r->ws + g * Og * K;                                          \
    memset(acc, 0, (size_t)(Og * K) * sizeof(T));                              \
    for (int64_t n = 0; n < op->g.N && P > 0; n++) {                           \
      im2col_##SUFFIX(r, n, g, col);                                           \
      pack_y_##SUFFIX(r, n, g, dyp);                                           \
      GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)Og, (int)K, (int)P,   \
           1, dyp, (int)P, col, (int)P, 1, acc, (int)K);                       \
    }                                                                          \
    T *w = (T *)r->w;                                                          \
    int64_t i = 0;                                                             \
    for (int64_t o = g * Og; o < (g + 1) * Og; o++)                            \
      for (int64_t c = 0; c < Cg; c++)                                         \
        for (int64_t kh = 0; kh < op->g.KH; kh++)                              \
          for (int64_t kw = 0; kw < op->g.KW; kw++)                            \
            w[o * s[0] + c * s[1] + kh * s[2] + kw * s[3]] = acc[i++];         \
  }                                                                            \
  /* MAX_POOL2D_BACKWARD's 2x2 windows of stride 2 (window2.h). */             \
  static void pool_back_2x2_##SUFFIX(                                          \
      const conv_op *op, const T *x, const int64_t *xs, const T *y,            \
      const int64_t *ys, T *tp, const int64_t *ts) {                           \
    for (int64_t oh = 0; oh < op->g.OH; oh++) {                                \
      const T *r0 = x + 2 * oh * xs[2];                                        \
      T *t0 = tp + 2 * oh * ts[2];                                             \
      win2_max_back_##SUFFIX(r0, r0 + xs[2], y + oh * ys[2], t0, t0 + ts[2],   \
                             op->g.OW);                                        \
    }                                                                          \
  }                                                                            \
  /* MAX_POOL2D and AVG_POOL2D on 2x2 windows of stride 2 (window2.h). */      \
  static void pool_fwd_2x2_##SUFFIX(const conv_op *op, const T *x,             \
                                    const int64_t *xs, T *y,                   \
                                    const int64_t *ys) {                       \
    for (int64_t oh = 0; oh < op->g.OH; oh++) {                                \
      const T *r0 = x + 2 * oh * xs[2];                                        \
      if (op->code == TYTO_PLUGIN_OP_MAX_POOL2D)                               \
        win2_max_##SUFFIX(r0, r0 + xs[2], y + oh * ys[2], op->g.OW);           \
      else                                                                     \
        win2_avg_##SUFFIX(r0, r0 + xs[2], y + oh * ys[2], op->g.OW);           \
    }                                                                          \
  }                                                                            \
  /* MAX_POOL2D_BACKWARD when the windows tile the plane (kernel = stride,     \
   * no padding, the 2x2/2 of most CNNs): each element lies in one window at   \
   * most, so it is written once -- dy at the window's first maximum (the      \
   * first NaN), 0 elsewhere and past the last window -- instead of zeroing    \
   * the plane and scattering into it. */                                      \
  static void pool_back_tiled_##SUFFIX(                                        \
      const conv_op *op, const T *x, const int64_t *xs, const T *y,            \
      const int64_t *ys, T *tp, const int64_t *ts) {                           \
    int64_t KH = op->g.KH, KW = op->g.KW, OW = op->g.OW;                       \
    for (int64_t ih = 0; ih < op->g.H; ih++)                                   \
      for (int64_t iw = OW * KW; iw < op->g.W; iw++)                           \
        tp[ih * ts[2] + iw * ts[3]] = 0;                                       \
    for (int64_t ih = op->g.OH * KH; ih < op->g.H; ih++)                       \
      for (int64_t iw = 0; iw < OW * KW; iw++)                                 \
        tp[ih * ts[2] + iw * ts[3]] = 0;                                       \
    if (KH == 2 && KW == 2 && xs[3] == 1 && ts[3] == 1 && ys[3] == 1) {        \
      pool_back_2x2_##SUFFIX(op, x, xs, y, ys, tp, ts);                        \
      return;                                                                  \
    }                                                                          \
    for (int64_t oh = 0; oh < op->g.OH; oh++)                                  \
      for (int64_t ow = 0; ow < OW; ow++) {                                    \
        int64_t h0 = oh * KH, w0 = ow * KW, bh = h0, bw = w0;                  \
        T best = x[h0 * xs[2] + w0 * xs[3]];                                   \
        for (int64_t ih = h0; ih < h0 + KH; ih++)                              \
          for (int64_t iw = w0; iw < w0 + KW; iw++) {                          \
            T v = x[ih * xs[2] + iw * xs[3]];                                  \
            if (!isnan(best) && (v > best || isnan(v))) {                      \
              best = v;                                                        \
              bh = ih;                                                         \
              bw = iw;                                                         \
            }                                                                  \
          }                                                                    \
        T g = y[oh * ys[2] + ow * ys[3]];                                      \
        for (int64_t ih = h0; ih < h0 + KH; ih++)                              \
          for (int64_t iw = w0; iw < w0 + KW; iw++)                            \
            tp[ih * ts[2] + iw * ts[3]] = ih == bh && iw == bw ? g : (T)0;     \
      }                                                                        \
  }                                                                            \
  /* One (image, channel) plane of a pooling or of its derivatives. */         \
  static void pool_one_##SUFFIX(const conv_run *r, int64_t t) {                \
    const conv_op *op = r->op;                                                 \
    int64_t n = t / op->g.C, c = t % op->g.C;                                  \
    const int64_t *ys = r->yl->strides;                                        \
    const int64_t *xs = r->xl ? r->xl->strides : NULL;                         \
    const int64_t *ts = r->tl ? r->tl->strides : NULL;                         \
    const T *x = r->x ? (const T *)r->x + n * xs[0] + c * xs[1] : NULL;        \
    T *y = (T *)r->y + n * ys[0] + c * ys[1];                                  \
    T *tp = r->t ? (T *)r->t + n * ts[0] + c * ts[1] : NULL;                   \
    uint32_t code = op->code;                                                  \
    if (code == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD && op->g.KH == op->g.sh &&  \
        op->g.KW == op->g.sw && op->g.ph == 0 && op->g.pw == 0) {              \
      pool_back_tiled_##SUFFIX(op, x, xs, y, ys, tp, ts);                      \
      return;                                                                  \
    }                                                                          \
    if ((code == TYTO_PLUGIN_OP_MAX_POOL2D ||                                  \
         code == TYTO_PLUGIN_OP_AVG_POOL2D) &&                                 \
        op->g.KH == 2 && op->g.KW == 2 && op->g.sh == 2 && op->g.sw == 2 &&    \
        op->g.ph == 0 && op->g.pw == 0 && 2 * op->g.OH <= op->g.H &&           \
        2 * op->g.OW <= op->g.W && xs[3] == 1 && ys[3] == 1) {                 \
      pool_fwd_2x2_##SUFFIX(op, x, xs, y, ys);                                 \
      return;                                                                  \
    }                                                                          \
    /* The gradients are sums over windows: start from zeros. */               \
    if (code == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD ||                          \
        code == TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD)                            \
      for (int64_t ih = 0; ih < op->g.H; ih++)                                 \
        for (int64_t iw = 0; iw < op->g.W; iw++)                               \
          tp[ih * ts[2] + iw * ts[3]] = 0;                                     \
    for (int64_t oh = 0; oh < op->g.OH; oh++)                                  \
      for (int64_t ow = 0; ow < op->g.OW; ow++) {                              \
        int64_t h0 = oh * op->g.sh - op->g.ph, w0 = ow * op->g.sw - op->g.pw;  \
        int64_t h1 = h0 + op->g.KH, w1 = w0 + op->g.KW;                        \
        h0 = h0 < 0 ? 0 : h0;                                                  \
        w0 = w0 < 0 ? 0 : w0;                                                  \
        h1 = h1 > op->g.H ? op->g.H : h1;                                      \
        w1 = w1 > op->g.W ? op->g.W : w1;                                      \
        T *yp = &y[oh * ys[2] + ow * ys[3]];                                   \
        if (code == TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD) {                      \
          if (h1 <= h0 || w1 <= w0)                                            \
            continue;                                                          \
          T v = *yp / (T)((h1 - h0) * (w1 - w0));                              \
          for (int64_t ih = h0; ih < h1; ih++)                                 \
            for (int64_t iw = w0; iw < w1; iw++)                               \
              tp[ih * ts[2] + iw * ts[3]] += v;                                \
          continue;                                                            \
        }                                                                      \
        if (code != TYTO_PLUGIN_OP_MAX_POOL2D &&                               \
            code != TYTO_PLUGIN_OP_AVG_POOL2D) {                               \
          /* The first maximum, row-major; the first NaN beats everything. */  \
          int64_t bh = -1, bw = -1;                                            \
          T best = 0;                                                          \
          for (int64_t ih = h0; ih < h1; ih++)                                 \
            for (int64_t iw = w0; iw < w1; iw++) {                             \
              T v = x[ih * xs[2] + iw * xs[3]];                                \
              if (bh < 0 || (!isnan(best) && (v > best || isnan(v)))) {        \
                best = v;                                                      \
                bh = ih;                                                       \
                bw = iw;                                                       \
              }                                                                \
            }                                                                  \
          if (bh < 0)                                                          \
            continue;                                                          \
          if (code == TYTO_PLUGIN_OP_MAX_POOL2D_SELECT)                        \
            *yp = tp[bh * ts[2] + bw * ts[3]];                                 \
          else                                                                 \
            tp[bh * ts[2] + bw * ts[3]] += *yp;                                \
          continue;                                                            \
        }                                                                      \
        int is_max = code == TYTO_PLUGIN_OP_MAX_POOL2D;                        \
        T acc = is_max ? -(T)INFINITY : (T)0;                                  \
        for (int64_t ih = h0; ih < h1; ih++)                                   \
          for (int64_t iw = w0; iw < w1; iw++) {                               \
            T v = x[ih * xs[2] + iw * xs[3]];                                  \
            if (is_max)                                                        \
              acc = v > acc || isnan(v) ? v : acc;                             \
            else                                                               \
              acc += v;                                                        \
          }                                                                    \
        if (!is_max)                                                           \
          acc /= (T)((h1 - h0) * (w1 - w0));                                   \
        *yp = acc;                                                             \
      }                                                                        \
  }

DEFINE_KERNELS(float, f32, cblas_sgemm)
DEFINE_KERNELS(double, f64, cblas_dgemm)

/* Tasks of the convolution family: (image, group) pairs, or groups for the
 * weight gradient, whose images accumulate into one result. */
static int64_t conv_tasks(const conv_op *op) {
  return op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER ? op->g.G
                                                           : op->g.N * op->g.G;
}

static void conv_slot(void *ctx, size_t slot) {
  const conv_run *r = ctx;
  const conv_op *op = r->op;
  int64_t tasks = conv_tasks(op), lo = tasks * (int64_t)slot / op->slots,
          hi = tasks * ((int64_t)slot + 1) / op->slots;
  int64_t K = op->g.C / op->g.G * op->g.KH * op->g.KW, P = op->g.OH * op->g.OW;
  unsigned char *base =
      r->ws +
      (op->wpack_elems + (int64_t)slot * op->slot_elems) * (int64_t)op->elem;
  for (int64_t t = lo; t < hi; t++) {
    if (op->elem == 4) {
      float *a = (float *)base, *b = a + K * P;
      if (op->code == TYTO_PLUGIN_OP_CONV2D)
        conv_one_f32(r, t, a, b);
      else if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA)
        data_one_f32(r, t, a, b);
      else
        filter_one_f32(r, t, a, b);
    } else {
      double *a = (double *)base, *b = a + K * P;
      if (op->code == TYTO_PLUGIN_OP_CONV2D)
        conv_one_f64(r, t, a, b);
      else if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA)
        data_one_f64(r, t, a, b);
      else
        filter_one_f64(r, t, a, b);
    }
  }
}

static void pool_plane(void *ctx, size_t t) {
  const conv_run *r = ctx;
  if (r->op->elem == 4)
    pool_one_f32(r, (int64_t)t);
  else
    pool_one_f64(r, (int64_t)t);
}

/* Binds the tensors of descriptor d to their roles in r. */
static void bind_roles(conv_run *r, const conv_op *op, const cpu_desc *d,
                       unsigned char *const *args) {
  int64_t e = (int64_t)op->elem;
  uint32_t n_in = d->n_in;
  unsigned char *p[4];
  const tyto_plugin_layout *l[4];
  for (uint32_t i = 0; i <= n_in; i++) {
    l[i] = i == n_in ? &d->out[0].l : &d->in[i].l;
    p[i] = args[i] + l[i]->offset * e;
  }
  /* Which bound tensor (inputs then the output) plays x, w, y and t. */
  int x = -1, w = -1, y = -1, t = -1;
  switch (op->code) {
  case TYTO_PLUGIN_OP_CONV2D: x = 0, w = 1, y = (int)n_in; break;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA: y = 0, w = 1, x = 2; break;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER: x = 0, y = 1, w = 2; break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD: x = 0, y = 1, t = 2; break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT: x = 0, t = 1, y = 2; break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD: y = 0, t = 1; break;
  default: x = 0, y = 1; break; /* forward pooling */
  }
  memset(r, 0, sizeof *r);
  r->op = op;
  r->ws = op->base.workspace_bytes ? args[n_in + 1] : NULL;
#define ROLE(field, i)                                                         \
  if ((i) >= 0) {                                                              \
    r->field = p[i];                                                           \
    r->field##l = l[i];                                                        \
  }
  ROLE(x, x)
  ROLE(w, w)
  ROLE(y, y)
  ROLE(t, t)
#undef ROLE
  if (op->code == TYTO_PLUGIN_OP_CONV2D && n_in > 2) {
    r->b = p[2];
    r->bl = l[2];
  }
}

static tyto_plugin_error *conv_exec(const cpu_op *base, const cpu_desc *d,
                                    unsigned char *const *args,
                                    cpu_pool *pool) {
  const conv_op *op = (const conv_op *)base;
#ifdef TYTO_HAVE_DNNL
  if (op->prim) {
    dnnl_status_t st = dnnl_run(op, d, args);
    return st == dnnl_success
               ? NULL
               : op->host->error_new(
                     st == dnnl_out_of_memory ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                              : TYTO_PLUGIN_ERR_DEVICE,
                     "%s: oneDNN failed with status %d; set "
                     "TYTO_CPU_NO_DNNL=1 to use the portable kernels",
                     cpu_op_name(op->code), (int)st);
  }
#endif
  conv_run r;
  bind_roles(&r, op, d, args);
  if (!tpc_conv_op(op->code)) {
    if (op->g.N * op->g.C > 0)
      cpu_pool_for(pool, (size_t)(op->g.N * op->g.C), pool_plane, &r);
    return NULL;
  }
  /* Nothing to write when the output is empty. */
  int64_t Cg = op->g.C / op->g.G,
          out_elems = op->code == TYTO_PLUGIN_OP_CONV2D
                          ? op->g.N * op->g.O * op->g.OH * op->g.OW
                      : op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA
                          ? op->g.N * op->g.C * op->g.H * op->g.W
                          : op->g.O * Cg * op->g.KH * op->g.KW;
  if (out_elems == 0)
    return NULL;
  if (op->code != TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER) {
    if (op->elem == 4)
      pack_w_f32(&r);
    else
      pack_w_f64(&r);
  }
  if (op->slots > 1)
    cpu_pool_for(pool, (size_t)op->slots, conv_slot, &r);
  else
    conv_slot(&r, 0);
  return NULL;
}

static void conv_destroy(cpu_op *base) {
#ifdef TYTO_HAVE_DNNL
  conv_op *op = (conv_op *)base;
  if (op->prim)
    dnnl_primitive_destroy(op->prim);
#endif
  free(base);
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

static tyto_plugin_error *conv_check(const tyto_plugin_host *h,
                                     const cpu_desc *desc, conv_op *op) {
  tpc_operands a;
  char why[1024];
  tpc_operands_init(&a, desc->d, desc->n_in, &desc->in[0].l, sizeof desc->in[0],
                    desc->n_out, &desc->out[0].l, sizeof desc->out[0], 1);
  int code = tpc_conv_check(&a, &op->g, why, sizeof why);
  if (code != 0)
    return h->error_new((tyto_plugin_code)code, "%s", why);
  op->code = desc->d->op;
  op->elem = cpu_dtype_size(desc->out[0].l.dtype);
  return NULL;
}

/* The portable convolution's workspace (see conv_slot): the packed weights
 * (the accumulated weight gradient for BACKWARD_FILTER), then per slot one
 * [K, OH*OW] column matrix and one [O/G, OH*OW] result (the packed dy for
 * the derivatives), in elements. Small GEMMs run their (image, group) tasks
 * in parallel slots, up to max_slots. */
typedef struct im2col_size {
  int64_t wpack, slot, max_slots;
} im2col_size;

/* Fills *sz; 0 when cblas's 32-bit sizes cannot hold the matrices. */
static int im2col_sizes(const conv_op *op, im2col_size *sz) {
  int64_t K = op->g.C / op->g.G * op->g.KH * op->g.KW, P = op->g.OH * op->g.OW,
          Og = op->g.O / op->g.G, per_task;
  if (K > INT_MAX || P > INT_MAX ||
      __builtin_mul_overflow(op->g.O, K, &sz->wpack) ||
      __builtin_mul_overflow(K + Og, P, &sz->slot) ||
      __builtin_mul_overflow(Og * K, P, &per_task))
    return 0;
  int64_t tasks = conv_tasks(op);
  if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER &&
      __builtin_mul_overflow(per_task, op->g.N, &per_task))
    per_task = INT64_MAX;
  sz->max_slots = 1;
  if (tasks > 1 && per_task <= CONV_SMALL_GEMM)
    sz->max_slots = tasks < CONV_MAX_SLOTS ? tasks : CONV_MAX_SLOTS;
  return 1;
}

/* The slots this machine runs: one per core, up to max_slots, together
 * within CONV_SLOT_BUDGET. */
static int64_t im2col_slots(const conv_op *op, const im2col_size *sz) {
  if (sz->max_slots <= 1)
    return 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t slots = cores > 0 ? cores : 1;
  if (slots > sz->max_slots)
    slots = sz->max_slots;
  int64_t slot_bytes = sz->slot * (int64_t)op->elem;
  while (slots > 1 && slot_bytes * slots > CONV_SLOT_BUDGET)
    slots--;
  return slots;
}

/* The workspace's bytes with `slots` slots; nonzero when 64 bits cannot
 * count them. */
static int im2col_bytes(const conv_op *op, const im2col_size *sz, int64_t slots,
                        int64_t *bytes) {
  int64_t total;
  return __builtin_mul_overflow(sz->slot, slots, &total) ||
         __builtin_add_overflow(total, sz->wpack, &total) ||
         __builtin_mul_overflow(total, (int64_t)op->elem, bytes);
}

/* The family's check, filling *op's geometry. A convolution must fit the
 * portable path's sizes even where oneDNN would run it: oneDNN may turn it
 * down at prepare (or TYTO_CPU_NO_DNNL may be set by then), and whether it
 * would take it cannot be known without building its primitive. */
static tyto_plugin_error *conv_plan(const tyto_plugin_host *h,
                                    const cpu_desc *desc, conv_op *op) {
  tyto_plugin_error *e = conv_check(h, desc, op);
  if (e || !tpc_conv_op(op->code))
    return e;
  im2col_size sz;
  if (!im2col_sizes(op, &sz))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: the im2col matrix of this convolution is "
                        "too large for cblas's 32-bit sizes",
                        cpu_op_name(op->code));
  /* The workspace grows with the slots: when the most a convolution can
   * have fits, this machine's count fits too, and the check need not ask
   * the system for its cores. */
  int64_t bytes;
  if (im2col_bytes(op, &sz, sz.max_slots, &bytes) &&
      im2col_bytes(op, &sz, im2col_slots(op, &sz), &bytes))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: the im2col workspace is larger than 64 "
                        "bits can count",
                        cpu_op_name(op->code));
  return NULL;
}

tyto_plugin_error *cpu_conv_check(const tyto_plugin_host *h,
                                  const cpu_desc *desc) {
  conv_op op;
  memset(&op, 0, sizeof op);
  return conv_plan(h, desc, &op);
}

tyto_plugin_error *cpu_conv_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out) {
  conv_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  tyto_plugin_error *e = conv_plan(h, desc, op);
  if (e) {
    free(op);
    return e;
  }
  op->base.run = conv_exec;
  op->base.destroy = conv_destroy;
  op->host = h;
  int empty = 0, contiguous = 1;
  for (uint32_t i = 0; i < desc->n_in; i++) {
    empty |= desc->in[i].empty;
    contiguous &= cpu_contiguous(&desc->in[i].l);
  }
  empty |= desc->out[0].empty;
  contiguous &= cpu_contiguous(&desc->out[0].l);
#ifdef TYTO_HAVE_DNNL
  /* oneDNN's max pooling backward needs the forward's workspace and picks
   * its own maximum among ties: the pooling derivatives stay portable. Its
   * f32 max pooling forward drops NaN (a window holding one gave its
   * largest number), where ops.md propagates it, as the portable path and
   * the derivatives do: only average pooling goes through oneDNN. */
  int dnnl_op = op->code == TYTO_PLUGIN_OP_AVG_POOL2D || tpc_conv_op(op->code);
  /* oneDNN 2.6's weight gradient is slow when few input channels meet a
   * large output plane: on 2 cores, N 64, 28x28, 32 filters, its
   * backward-filter took 9.6 ms (C 1), 13.8 ms (C 4), 14.3 ms (C 16)
   * against 3.0, 8.0 and 10.6 ms for im2col + GEMM; at 14x14 with C 32
   * and 7x7 with C 64 it is twice as fast as the portable path. A fixed
   * rule rather than a timing, so that runs stay bit-reproducible. */
  if (op->code == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER &&
      op->g.C / op->g.G <= 16 && op->g.OH * op->g.OW >= 512)
    dnnl_op = 0;
  if (op->elem == 4 && contiguous && !empty && dnnl_op && !cpu_dnnl_off())
    dnnl_build(op);
#else
  (void)empty;
  (void)contiguous;
#endif
  int use_dnnl = 0;
#ifdef TYTO_HAVE_DNNL
  use_dnnl = op->prim != NULL;
  op->base.workspace_bytes = use_dnnl ? op->scratch_bytes : 0;
#endif
  if (tpc_conv_op(op->code) && !use_dnnl) {
    /* conv_plan checked these sizes, and the bytes of the most slots. */
    im2col_size sz;
    im2col_sizes(op, &sz);
    int64_t bytes = 0;
    op->slots = im2col_slots(op, &sz);
    im2col_bytes(op, &sz, op->slots, &bytes);
    op->slot_elems = sz.slot;
    op->wpack_elems = sz.wpack;
    op->base.workspace_bytes = (uint64_t)bytes;
  }
  *out = &op->base;
  return NULL;
}
