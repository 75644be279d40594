/*
 * The host model of conv2d and the poolings and their derivatives (see
 * model.h): direct loops over the layouts, in double, in IEEE arithmetic.
 * A window tap that falls in the padding contributes nothing (it is not a
 * zero multiplied in); max pooling picks the first NaN of the window, else
 * its first maximum, and padding never wins.
 */
#include "model.h"

#include <math.h>
#include <string.h>

#define OP(x) TYTO_PLUGIN_OP_##x

/* Element [a, b, c, d] of a rank-4 layout. */
static int64_t at4(const tyto_plugin_layout *l, int64_t a, int64_t b, int64_t c,
                   int64_t d) {
  const int64_t idx[4] = {a, b, c, d};
  return cf_layout_at(l, idx);
}

/* conv2d geometry: iattrs stride_h, stride_w, pad_h, pad_w, dilation_h,
 * dilation_w, groups. */
typedef struct conv {
  int64_t n, c, h, w, o, cg, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, og;
} conv;

static conv conv_geom(const cf_case *c, const tyto_plugin_layout *x,
                      const tyto_plugin_layout *w,
                      const tyto_plugin_layout *y) {
  conv g;
  g.n = x->shape[0];
  g.c = x->shape[1];
  g.h = x->shape[2];
  g.w = x->shape[3];
  g.o = w->shape[0];
  g.cg = w->shape[1];
  g.kh = w->shape[2];
  g.kw = w->shape[3];
  g.oh = y->shape[2];
  g.ow = y->shape[3];
  g.sh = c->iattrs[0];
  g.sw = c->iattrs[1];
  g.ph = c->iattrs[2];
  g.pw = c->iattrs[3];
  g.dh = c->iattrs[4];
  g.dw = c->iattrs[5];
  g.og = g.o / (c->iattrs[6] > 0 ? c->iattrs[6] : 1);
  return g;
}

/* Runs BODY for every (n, o, oh, ow, cc, kh, kw) whose input tap (ih, iw)
 * lies inside x, with ci the channel of x. */
#define CONV_TAPS(g, BODY)                                                     \
  for (int64_t n = 0; n < (g).n; n++)                                          \
    for (int64_t o = 0; o < (g).o; o++)                                        \
      for (int64_t oh = 0; oh < (g).oh; oh++)                                  \
        for (int64_t ow = 0; ow < (g).ow; ow++)                                \
          for (int64_t cc = 0; cc < (g).cg; cc++)                              \
            for (int64_t kh = 0; kh < (g).kh; kh++)                            \
              for (int64_t kw = 0; kw < (g).kw; kw++) {                        \
                const int64_t ci = (o / (g).og) * (g).cg + cc;                 \
                const int64_t ih = oh * (g).sh - (g).ph + kh * (g).dh;         \
                const int64_t iw = ow * (g).sw - (g).pw + kw * (g).dw;         \
                if (ih < 0 || ih >= (g).h || iw < 0 || iw >= (g).w)            \
                  continue;                                                    \
                BODY                                                           \
              }

static void zero(const tyto_plugin_layout *l, double *out,
                 unsigned char *free_sign) {
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(l->rank, l->shape) == 0)
    return;
  do {
    const int64_t at = cf_layout_at(l, idx);
    out[at] = 0;
    free_sign[at] = 1;
  } while (cf_index_next(l->rank, l->shape, idx));
}

static void round_all(const cf_case *c, const tyto_plugin_layout *l,
                      double *out) {
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (cf_shape_count(l->rank, l->shape) == 0)
    return;
  do {
    const int64_t at = cf_layout_at(l, idx);
    out[at] = cf_model_round(c, c->dtype, out[at]);
  } while (cf_index_next(l->rank, l->shape, idx));
}

static void conv2d(const cf_case *c, double *const *in, double *out,
                   unsigned char *fs) {
  const tyto_plugin_layout *x = &c->in[0].l, *wl = &c->in[1].l,
                           *y = &c->out[0].l;
  const conv g = conv_geom(c, x, wl, y);
  zero(y, out, fs);
  CONV_TAPS(g, {
    out[at4(y, n, o, oh, ow)] +=
        in[0][at4(x, n, ci, ih, iw)] * in[1][at4(wl, o, cc, kh, kw)];
  })
  if (c->n_in > 2)
    for (int64_t n = 0; n < g.n; n++)
      for (int64_t o = 0; o < g.o; o++)
        for (int64_t oh = 0; oh < g.oh; oh++)
          for (int64_t ow = 0; ow < g.ow; ow++) {
            const int64_t k[1] = {o};
            out[at4(y, n, o, oh, ow)] += in[2][cf_layout_at(&c->in[2].l, k)];
          }
  round_all(c, y, out);
}

static void conv2d_bwd_data(const cf_case *c, double *const *in, double *out,
                            unsigned char *fs) {
  const tyto_plugin_layout *dy = &c->in[0].l, *wl = &c->in[1].l,
                           *dx = &c->out[0].l;
  const conv g = conv_geom(c, dx, wl, dy);
  zero(dx, out, fs);
  CONV_TAPS(g, {
    out[at4(dx, n, ci, ih, iw)] +=
        in[0][at4(dy, n, o, oh, ow)] * in[1][at4(wl, o, cc, kh, kw)];
  })
  round_all(c, dx, out);
}

static void conv2d_bwd_filter(const cf_case *c, double *const *in, double *out,
                              unsigned char *fs) {
  const tyto_plugin_layout *x = &c->in[0].l, *dy = &c->in[1].l,
                           *dw = &c->out[0].l;
  const conv g = conv_geom(c, x, dw, dy);
  zero(dw, out, fs);
  CONV_TAPS(g, {
    out[at4(dw, o, cc, kh, kw)] +=
        in[0][at4(x, n, ci, ih, iw)] * in[1][at4(dy, n, o, oh, ow)];
  })
  round_all(c, dw, out);
}

/* Pool geometry: iattrs kernel_h, kernel_w, stride_h, stride_w, pad_h,
 * pad_w; x [N, C, H, W], the pooled [N, C, OH, OW]. */
typedef struct pool {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
} pool;

static pool pool_geom(const cf_case *c, const tyto_plugin_layout *x,
                      const tyto_plugin_layout *p) {
  pool g = {x->shape[0],  x->shape[1],  x->shape[2],  x->shape[3],
            p->shape[2],  p->shape[3],  c->iattrs[0], c->iattrs[1],
            c->iattrs[2], c->iattrs[3], c->iattrs[4], c->iattrs[5]};
  return g;
}

/* The position (h * W + w) max pooling picks in window (oh, ow) of plane
 * (n, ch) of x: the first NaN in row-major order, else the first maximum;
 * -1 when the window holds no element of x. */
static int64_t pick(const pool *g, const tyto_plugin_layout *x, const double *v,
                    int64_t n, int64_t ch, int64_t oh, int64_t ow) {
  int64_t best = -1;
  double bv = 0;
  for (int64_t kh = 0; kh < g->kh; kh++)
    for (int64_t kw = 0; kw < g->kw; kw++) {
      const int64_t h = oh * g->sh - g->ph + kh, w = ow * g->sw - g->pw + kw;
      if (h < 0 || h >= g->h || w < 0 || w >= g->w)
        continue;
      const double e = v[at4(x, n, ch, h, w)];
      if (isnan(e))
        return h * g->w + w;
      if (best < 0 || e > bv) {
        best = h * g->w + w;
        bv = e;
      }
    }
  return best;
}

static void pools(const cf_case *c, double *const *in, double *out,
                  unsigned char *fs) {
  const tyto_plugin_layout *x = &c->in[0].l, *y = &c->out[0].l;
  const int bwd =
      c->op == OP(MAX_POOL2D_BACKWARD) || c->op == OP(AVG_POOL2D_BACKWARD);
  /* The pooled tensor: the output, or dy (input 1, or 0 for AVG's). */
  const tyto_plugin_layout *p = c->op == OP(AVG_POOL2D_BACKWARD)   ? x
                                : c->op == OP(MAX_POOL2D_BACKWARD) ? &c->in[1].l
                                                                   : y;
  /* Full-size x: the input, or for AVG_POOL2D_BACKWARD the output. */
  const tyto_plugin_layout *full = c->op == OP(AVG_POOL2D_BACKWARD) ? y : x;
  const pool g = pool_geom(c, full, p);
  if (bwd)
    zero(y, out, fs);
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t ch = 0; ch < g.c; ch++)
      for (int64_t oh = 0; oh < g.oh; oh++)
        for (int64_t ow = 0; ow < g.ow; ow++) {
          double s = 0, m = -INFINITY;
          int64_t cnt = 0;
          int nan = 0;
          for (int64_t kh = 0; kh < g.kh; kh++)
            for (int64_t kw = 0; kw < g.kw; kw++) {
              const int64_t h = oh * g.sh - g.ph + kh,
                            w = ow * g.sw - g.pw + kw;
              if (h < 0 || h >= g.h || w < 0 || w >= g.w)
                continue;
              cnt++;
              if (c->op != OP(AVG_POOL2D_BACKWARD)) {
                const double e = in[0][at4(x, n, ch, h, w)];
                s += e;
                nan |= isnan(e);
                m = e > m ? e : m;
              }
            }
          if (c->op == OP(AVG_POOL2D_BACKWARD)) {
            /* dy spread evenly over the window's part inside x */
            const double d = in[0][at4(p, n, ch, oh, ow)] / (double)cnt;
            for (int64_t kh = 0; kh < g.kh; kh++)
              for (int64_t kw = 0; kw < g.kw; kw++) {
                const int64_t h = oh * g.sh - g.ph + kh,
                              w = ow * g.sw - g.pw + kw;
                if (h >= 0 && h < g.h && w >= 0 && w < g.w)
                  out[at4(y, n, ch, h, w)] += d;
              }
            continue;
          }
          if (c->op == OP(MAX_POOL2D) || c->op == OP(AVG_POOL2D)) {
            const int64_t at = at4(y, n, ch, oh, ow);
            out[at] = c->op == OP(AVG_POOL2D) ? s / (double)cnt : nan ? NAN : m;
            fs[at] = 1;
            continue;
          }
          const int64_t k = pick(&g, x, in[0], n, ch, oh, ow);
          if (k < 0)
            continue;
          if (c->op == OP(MAX_POOL2D_SELECT))
            out[at4(y, n, ch, oh, ow)] =
                in[1][at4(&c->in[1].l, n, ch, k / g.w, k % g.w)];
          else /* MAX_POOL2D_BACKWARD */
            out[at4(y, n, ch, k / g.w, k % g.w)] +=
                in[1][at4(p, n, ch, oh, ow)];
        }
  round_all(c, y, out);
}

int cf_model_nn(const cf_case *c, double *const *in, double **out,
                unsigned char **free_sign) {
  switch (c->op) {
  case OP(CONV2D): conv2d(c, in, out[0], free_sign[0]); return 0;
  case OP(CONV2D_BACKWARD_DATA):
    conv2d_bwd_data(c, in, out[0], free_sign[0]);
    return 0;
  case OP(CONV2D_BACKWARD_FILTER):
    conv2d_bwd_filter(c, in, out[0], free_sign[0]);
    return 0;
  case OP(MAX_POOL2D):
  case OP(AVG_POOL2D):
  case OP(MAX_POOL2D_BACKWARD):
  case OP(MAX_POOL2D_SELECT):
  case OP(AVG_POOL2D_BACKWARD): pools(c, in, out[0], free_sign[0]); return 0;
  default: return -1;
  }
}
