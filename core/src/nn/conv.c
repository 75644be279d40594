/* Convolution layers (1-d, 2-d, transposed) and pooling, with VALID, SAME
 * and explicit padding. 1-d layers run as 2-d ones on [N, C, 1, L]. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "nn_internal.h"

/* A convolution's or pool's geometry with its defaults applied, in 2-d:
 * per axis the kernel, stride, dilation and the padding before and after
 * the input. */
typedef struct geom {
  int64_t k[2], s[2], d[2], before[2], after[2];
} geom;

/* Fills the padding of g for extents in[2] (forward direction). 0, or -1
 * after nn_fail(). */
static int resolve_padding(tyto_nn *nn, const char *kind, const char *name,
                           geom *g, tyto_nn_padding padding, const int64_t *pad,
                           const int64_t *in) {
  for (int i = 0; i < 2; i++) {
    switch (padding) {
    case TYTO_NN_VALID: g->before[i] = g->after[i] = 0; break;
    case TYTO_NN_EXPLICIT:
      if (pad[i] < 0) {
        nn_fail(nn, kind, name, "negative padding %lld", (long long)pad[i]);
        return -1;
      }
      g->before[i] = g->after[i] = pad[i];
      break;
    case TYTO_NN_SAME:
      nn_same_pad(in[i], g->k[i], g->s[i], g->d[i], &g->before[i],
                  &g->after[i]);
      break;
    default:
      nn_fail(nn, kind, name, "unknown padding %d", (int)padding);
      return -1;
    }
  }
  return 0;
}

/* Checks that the (dilated) kernel fits the padded input: 0 or -1. */
static int check_fits(tyto_nn *nn, const char *kind, const char *name,
                      const geom *g, const int64_t *in) {
  int64_t span[2], padded[2];
  for (int i = 0; i < 2; i++) {
    span[i] = g->d[i] * (g->k[i] - 1) + 1;
    padded[i] = in[i] + g->before[i] + g->after[i];
  }
  if (span[0] > padded[0] || span[1] > padded[1]) {
    char a[SHAPE_STR], b[SHAPE_STR];
    nn_fail(nn, kind, name, "kernel %s (dilated) larger than padded input %s",
            shape_str(a, 2, span), shape_str(b, 2, padded));
    return -1;
  }
  return 0;
}

/* x with the odd extra element of SAME padding (after - before) added at
 * the end of each spatial axis, filled with value. */
static tyto_tensor *pad_extra(tyto_tensor *x, const geom *g, double value) {
  int64_t e0 = g->after[0] - g->before[0], e1 = g->after[1] - g->before[1];
  if (!e0 && !e1)
    return x;
  return tyto_pad(x, (const int64_t[]){0, 0, 0, 0},
                  (const int64_t[]){0, 0, e0, e1}, TYTO_PAD_CONSTANT, value);
}

/* Reads the kernel, stride, dilation and groups of c for `dims` spatial
 * axes into g (1-d: axis 0 of c is g's axis 1, with a unit axis 0). */
static int resolve_conv(tyto_nn *nn, const char *kind, const char *name,
                        const tyto_nn_conv *c, int dims, geom *g,
                        int64_t *groups) {
  if (!c) {
    nn_fail(nn, kind, name, "convolution parameters are NULL");
    return -1;
  }
  if (c->filters <= 0) {
    nn_fail(nn, kind, name, "filters %lld must be positive",
            (long long)c->filters);
    return -1;
  }
  for (int i = 0; i < 2; i++) {
    g->k[i] = g->s[i] = g->d[i] = 1;
    g->before[i] = g->after[i] = 0;
  }
  for (int i = 0; i < dims; i++) {
    int j = i + 2 - dims;
    if (c->kernel[i] <= 0 || c->stride[i] < 0 || c->dilation[i] < 0) {
      nn_fail(nn, kind, name,
              "kernel must be positive, stride and dilation not negative "
              "(0: 1); got kernel %lld, stride %lld, dilation %lld on axis %d",
              (long long)c->kernel[i], (long long)c->stride[i],
              (long long)c->dilation[i], i);
      return -1;
    }
    g->k[j] = c->kernel[i];
    g->s[j] = c->stride[i] ? c->stride[i] : 1;
    g->d[j] = c->dilation[i] ? c->dilation[i] : 1;
  }
  if (c->groups < 0) {
    nn_fail(nn, kind, name, "negative groups %lld", (long long)c->groups);
    return -1;
  }
  *groups = c->groups ? c->groups : 1;
  return 0;
}

/* The forward convolution of x [N, C, H, W] (1-d: H = 1). */
/* Checks that x's channels and the filters divide into groups, then makes
 * (or finds) the weight [d0, d1, k0, k1]: OIHW for a convolution, IOHW for
 * a transposed one. */
static tyto_tensor *conv_weight(tyto_nn *nn, const char *kind, const char *name,
                                const tyto_nn_conv *c, const tyto_tensor *x,
                                int64_t groups, int64_t d0, int64_t d1,
                                const int64_t *k) {
  int64_t ch = x->shape[1], o = c->filters;
  char s[SHAPE_STR];
  if (ch % groups || o % groups)
    return nn_fail(nn, kind, name,
                   "%lld input channels of x %s and %lld filters must both "
                   "be divisible by %lld groups",
                   (long long)ch, nn_shape(s, x), (long long)o,
                   (long long)groups);
  tyto_init init = c->weight_init;
  if (nn_init_check(nn, kind, name, &init) < 0)
    return &nn->g->error;
  return nn_param(nn, kind, name, "weight", 4,
                  (const int64_t[]){d0, d1, k[0], k[1]}, init,
                  nn_init_of(TYTO_INIT_GLOROT_UNIFORM), 0);
}

static tyto_tensor *conv_forward(tyto_nn *nn, const char *kind,
                                 const char *name, tyto_tensor *x,
                                 const tyto_nn_conv *c, int dims) {
  geom g;
  int64_t groups;
  if (resolve_conv(nn, kind, name, c, dims, &g, &groups) < 0)
    return &nn->g->error;
  int64_t pad[2] = {0, 0}, in[2] = {x->shape[2], x->shape[3]};
  if (c->padding == TYTO_NN_EXPLICIT)
    for (int i = 0; i < dims; i++)
      pad[i + 2 - dims] = c->pad[i];
  for (int i = 0; i < dims; i++)
    if (c->output_pad[i])
      return nn_fail(nn, kind, name,
                     "output_pad is for transposed convolutions only");
  if (resolve_padding(nn, kind, name, &g, c->padding, pad, in) < 0 ||
      check_fits(nn, kind, name, &g, in) < 0)
    return &nn->g->error;
  int64_t ch = x->shape[1], o = c->filters;
  tyto_tensor *w =
      conv_weight(nn, kind, name, c, x, groups, o, ch / groups, g.k);
  if (w->kind == TYTO_KIND_ERROR)
    return w;
  tyto_tensor *b = NULL;
  if (!c->no_bias) {
    b = nn_param(nn, kind, name, "bias", 1, &o, nn_init_of(TYTO_INIT_DEFAULT),
                 nn_init_of(TYTO_INIT_ZEROS), 0);
    if (b->kind == TYTO_KIND_ERROR)
      return b;
  }
  tyto_conv2d_params p = {
      {g.s[0], g.s[1]}, {g.before[0], g.before[1]}, {g.d[0], g.d[1]}, groups};
  return tyto_conv2d(pad_extra(x, &g, 0.0), w, b, &p);
}

tyto_tensor *tyto_nn_conv2d(tyto_nn *nn, const char *name, tyto_tensor *x,
                            const tyto_nn_conv *c) {
  tyto_tensor *err;
  if (nn_check_layout(nn, "conv2d", name, 1, x, 4, "NCHW", &err) < 0)
    return err;
  return conv_forward(nn, "conv2d", name, x, c, 2);
}

tyto_tensor *tyto_nn_conv1d(tyto_nn *nn, const char *name, tyto_tensor *x,
                            const tyto_nn_conv *c) {
  tyto_tensor *err;
  if (nn_check_layout(nn, "conv1d", name, 1, x, 3, "NCL", &err) < 0)
    return err;
  const int64_t *xs = x->shape;
  tyto_tensor *x4 =
      tyto_reshape(x, 4, (const int64_t[]){xs[0], xs[1], 1, xs[2]});
  tyto_tensor *y = conv_forward(nn, "conv1d", name, x4, c, 1);
  if (y->kind == TYTO_KIND_ERROR)
    return y;
  return tyto_reshape(y, 3,
                      (const int64_t[]){y->shape[0], y->shape[1], y->shape[3]});
}

tyto_tensor *tyto_nn_conv2d_transpose(tyto_nn *nn, const char *name,
                                      tyto_tensor *x, const tyto_nn_conv *c) {
  tyto_tensor *err;
  const char *kind = "conv2d_transpose";
  if (nn_check_layout(nn, kind, name, 1, x, 4, "NCHW", &err) < 0)
    return err;
  geom g;
  int64_t groups;
  if (resolve_conv(nn, kind, name, c, 2, &g, &groups) < 0)
    return &nn->g->error;
  int64_t in[2] = {x->shape[2], x->shape[3]}, out[2], pad[2], extra[2];
  for (int i = 0; i < 2; i++) {
    int64_t op = c->output_pad[i];
    switch (c->padding) {
    case TYTO_NN_VALID:
    case TYTO_NN_EXPLICIT:
      pad[i] = c->padding == TYTO_NN_EXPLICIT ? c->pad[i] : 0;
      if (pad[i] < 0)
        return nn_fail(nn, kind, name, "negative padding %lld",
                       (long long)pad[i]);
      if (op < 0 || op >= g.s[i])
        return nn_fail(nn, kind, name,
                       "output_pad %lld on axis %d must be in [0, stride "
                       "%lld)",
                       (long long)op, i, (long long)g.s[i]);
      out[i] =
          (in[i] - 1) * g.s[i] - 2 * pad[i] + g.d[i] * (g.k[i] - 1) + op + 1;
      extra[i] = 0;
      break;
    case TYTO_NN_SAME: {
      if (op)
        return nn_fail(nn, kind, name,
                       "output_pad applies to VALID and EXPLICIT padding, "
                       "not SAME");
      int64_t before, after;
      out[i] = in[i] * g.s[i];
      /* The adjoint of the SAME convolution from out to in: pad before
       * on both sides, one more row after when the split is odd (cut
       * off below). */
      nn_same_pad(out[i], g.k[i], g.s[i], g.d[i], &before, &after);
      pad[i] = before;
      extra[i] = after - before;
      break;
    }
    default:
      return nn_fail(nn, kind, name, "unknown padding %d", (int)c->padding);
    }
    if (out[i] <= 0)
      return nn_fail(nn, kind, name,
                     "output extent %lld on axis %d is not positive",
                     (long long)out[i], i);
  }
  int64_t ch = x->shape[1], o = c->filters;
  tyto_tensor *w =
      conv_weight(nn, kind, name, c, x, groups, ch, o / groups, g.k);
  if (w->kind == TYTO_KIND_ERROR)
    return w;
  tyto_conv2d_params p = {
      {g.s[0], g.s[1]}, {pad[0], pad[1]}, {g.d[0], g.d[1]}, groups};
  tyto_tensor *y =
      tyto_conv2d_backward_data(x, w, out[0] + extra[0], out[1] + extra[1], &p);
  if (extra[0] || extra[1])
    y = tyto_slice(y, (const int64_t[]){0, 0, 0, 0},
                   (const int64_t[]){TYTO_END, TYTO_END, out[0], out[1]}, NULL);
  if (!c->no_bias) {
    tyto_tensor *b =
        nn_param(nn, kind, name, "bias", 1, &o, nn_init_of(TYTO_INIT_DEFAULT),
                 nn_init_of(TYTO_INIT_ZEROS), 0);
    if (b->kind == TYTO_KIND_ERROR)
      return b;
    y = tyto_add(y, tyto_reshape(b, 4, (const int64_t[]){1, o, 1, 1}));
  }
  return y;
}

/* ---------------------------------------------------------------------- */
/* Pooling                                                                 */

static tyto_tensor *pool_core(tyto_nn *nn, const char *kind, tyto_tensor *x,
                              const tyto_nn_pool *p, int dims, int is_max) {
  if (!p)
    return nn_fail(nn, kind, NULL, "pooling parameters are NULL");
  geom g;
  int64_t pad[2] = {0, 0}, in[2] = {x->shape[2], x->shape[3]};
  for (int i = 0; i < 2; i++) {
    g.k[i] = g.s[i] = g.d[i] = 1;
    g.before[i] = g.after[i] = 0;
  }
  for (int i = 0; i < dims; i++) {
    int j = i + 2 - dims;
    if (p->kernel[i] <= 0 || p->stride[i] < 0)
      return nn_fail(nn, kind, NULL,
                     "kernel must be positive and stride not negative (0: "
                     "the kernel); got kernel %lld, stride %lld on axis %d",
                     (long long)p->kernel[i], (long long)p->stride[i], i);
    g.k[j] = p->kernel[i];
    g.s[j] = p->stride[i] ? p->stride[i] : p->kernel[i];
    if (p->padding == TYTO_NN_EXPLICIT) {
      pad[j] = p->pad[i];
      if (pad[j] > g.k[j] / 2)
        return nn_fail(nn, kind, NULL,
                       "padding %lld exceeds half the kernel %lld on axis %d",
                       (long long)pad[j], (long long)g.k[j], i);
    }
  }
  if (resolve_padding(nn, kind, NULL, &g, p->padding, pad, in) < 0 ||
      check_fits(nn, kind, NULL, &g, in) < 0)
    return &nn->g->error;
  /* An odd SAME split pads one element after, explicitly: -inf never wins
   * a max; for the mean, the op counts that element, which the ratio of
   * counts below takes back out. */
  tyto_tensor *xp = pad_extra(x, &g, is_max ? -INFINITY : 0.0);
  tyto_tensor *y = is_max ? tyto_max_pool2d(xp, g.k[0], g.k[1], g.s[0], g.s[1],
                                            g.before[0], g.before[1])
                          : tyto_avg_pool2d(xp, g.k[0], g.k[1], g.s[0], g.s[1],
                                            g.before[0], g.before[1]);
  int64_t e0 = g.after[0] - g.before[0], e1 = g.after[1] - g.before[1];
  if (is_max || y->kind == TYTO_KIND_ERROR || (!e0 && !e1))
    return y;
  int64_t oh = y->shape[2], ow = y->shape[3];
  double *ratio = malloc((size_t)(oh * ow + oh + ow) * sizeof *ratio);
  if (!ratio)
    return graph_oom(nn->g, kind);
  double *rh = ratio + oh * ow, *rw = rh + oh;
  int64_t no[2] = {oh, ow};
  for (int a = 0; a < 2; a++) {
    double *r = a ? rw : rh;
    int64_t extra = a ? e1 : e0;
    for (int64_t i = 0; i < no[a]; i++) {
      int64_t lo = i * g.s[a] - g.before[a], hi = lo + g.k[a];
      int64_t first = lo > 0 ? lo : 0;
      int64_t n_true = (hi < in[a] ? hi : in[a]) - first;
      int64_t n_op = (hi < in[a] + extra ? hi : in[a] + extra) - first;
      r[i] = (double)n_op / (double)n_true;
    }
  }
  for (int64_t i = 0; i < oh; i++)
    for (int64_t j = 0; j < ow; j++)
      ratio[i * ow + j] = rh[i] * rw[j];
  tyto_tensor *rc = tyto_constant(nn->g, nn->dtype, 2, no, ratio);
  free(ratio);
  return tyto_mul(y, rc);
}

static tyto_tensor *pool2d(tyto_nn *nn, const char *kind, tyto_tensor *x,
                           const tyto_nn_pool *p, int is_max) {
  tyto_tensor *err;
  if (nn_check_layout(nn, kind, NULL, 0, x, 4, "NCHW", &err) < 0)
    return err;
  return pool_core(nn, kind, x, p, 2, is_max);
}

static tyto_tensor *pool1d(tyto_nn *nn, const char *kind, tyto_tensor *x,
                           const tyto_nn_pool *p, int is_max) {
  tyto_tensor *err;
  if (nn_check_layout(nn, kind, NULL, 0, x, 3, "NCL", &err) < 0)
    return err;
  const int64_t *xs = x->shape;
  tyto_tensor *x4 =
      tyto_reshape(x, 4, (const int64_t[]){xs[0], xs[1], 1, xs[2]});
  tyto_tensor *y = pool_core(nn, kind, x4, p, 1, is_max);
  if (y->kind == TYTO_KIND_ERROR)
    return y;
  return tyto_reshape(y, 3,
                      (const int64_t[]){y->shape[0], y->shape[1], y->shape[3]});
}

tyto_tensor *tyto_nn_max_pool2d(tyto_nn *nn, tyto_tensor *x,
                                const tyto_nn_pool *p) {
  return pool2d(nn, "max_pool2d", x, p, 1);
}

tyto_tensor *tyto_nn_avg_pool2d(tyto_nn *nn, tyto_tensor *x,
                                const tyto_nn_pool *p) {
  return pool2d(nn, "avg_pool2d", x, p, 0);
}

tyto_tensor *tyto_nn_max_pool1d(tyto_nn *nn, tyto_tensor *x,
                                const tyto_nn_pool *p) {
  return pool1d(nn, "max_pool1d", x, p, 1);
}

tyto_tensor *tyto_nn_avg_pool1d(tyto_nn *nn, tyto_tensor *x,
                                const tyto_nn_pool *p) {
  return pool1d(nn, "avg_pool1d", x, p, 0);
}

static tyto_tensor *global_pool(tyto_nn *nn, const char *kind, tyto_tensor *x,
                                int is_max) {
  tyto_tensor *err;
  if (nn_check(nn, kind, NULL, 0, x, 3, TYTO_MAX_RANK, &err) < 0)
    return err;
  int axes[TYTO_MAX_RANK], n = 0;
  for (int i = 2; i < x->rank; i++)
    axes[n++] = i;
  return is_max ? tyto_reduce_max(x, n, axes, 0) : tyto_mean(x, n, axes, 0);
}

tyto_tensor *tyto_nn_global_max_pool(tyto_nn *nn, tyto_tensor *x) {
  return global_pool(nn, "global_max_pool", x, 1);
}

tyto_tensor *tyto_nn_global_avg_pool(tyto_nn *nn, tyto_tensor *x) {
  return global_pool(nn, "global_avg_pool", x, 0);
}
