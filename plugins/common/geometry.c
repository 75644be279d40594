/*
 * Convolution and pooling geometry (geometry.h): the rules the CPU plugin
 * set, shared so that every plugin refuses the same ops with the same words.
 *
 * Output size, as in PyTorch and oneDNN (floor mode):
 *   OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1.
 * A pooling pad must be smaller than its kernel, so every window sees at
 * least one element.
 */
#include "geometry.h"

#include <limits.h>
#include <string.h>

#include "common.h"
#include "text.h"

void tpc_operands_init(tpc_operands *a, const tyto_plugin_op_desc *d,
                       uint32_t n_in, const tyto_plugin_layout *in,
                       size_t in_step, uint32_t n_out,
                       const tyto_plugin_layout *out, size_t out_step,
                       int tight) {
  memset(a, 0, sizeof *a);
  a->op = d->op;
  a->n_iattrs = d->n_iattrs;
  a->iattrs = d->iattrs;
  a->n_fattrs = d->n_fattrs;
  a->fattrs = d->fattrs;
  a->tight = tight;
  a->n_in = n_in < TYTO_PLUGIN_FUSED_MAX_IO ? n_in : TYTO_PLUGIN_FUSED_MAX_IO;
  a->n_out =
      n_out < TYTO_PLUGIN_FUSED_MAX_IO ? n_out : TYTO_PLUGIN_FUSED_MAX_IO;
  for (uint32_t i = 0; i < a->n_in; i++)
    a->in[i] = (const tyto_plugin_layout *)(const void *)((const char *)in +
                                                          i * in_step);
  for (uint32_t i = 0; i < a->n_out; i++)
    a->out[i] = (const tyto_plugin_layout *)(const void *)((const char *)out +
                                                           i * out_step);
}

const tyto_plugin_layout *tpc_operand(const tpc_operands *a, int r) {
  return r < (int)a->n_in ? a->in[r] : a->out[r - (int)a->n_in];
}

int tpc_conv_op(uint32_t op) {
  return op == TYTO_PLUGIN_OP_CONV2D ||
         op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA ||
         op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER;
}

int tpc_pool_op(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MAX_POOL2D || op == TYTO_PLUGIN_OP_AVG_POOL2D ||
         op == TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD ||
         op == TYTO_PLUGIN_OP_MAX_POOL2D_SELECT ||
         op == TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD;
}

/* Sets the roles of a->op in *g and checks the operand counts. */
static int roles(const tpc_operands *a, const char *name, tpc_conv *g,
                 char *why, size_t why_size) {
  const char *inputs = "x";
  uint32_t want_in = 1, n_in = a->n_in;
  int out = (int)n_in;
  g->x = 0, g->w = -1, g->y = out, g->t = -1;
  g->xname = "x", g->wname = "w", g->yname = "output";
  switch (a->op) {
  case TYTO_PLUGIN_OP_CONV2D:
    g->w = 1;
    if ((n_in != 2 && n_in != 3) || a->n_out != 1)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: expected 2 or 3 inputs (x, w, optional bias) and 1 "
                      "output, got %u and %u",
                      name, (unsigned)n_in, (unsigned)a->n_out);
    return 0;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA:
    inputs = "dy, w", want_in = 2;
    g->x = out, g->w = 1, g->y = 0;
    g->xname = "dx (the output)", g->yname = "dy";
    break;
  case TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER:
    inputs = "x, dy", want_in = 2;
    g->w = out, g->y = 1;
    g->wname = "dw (the output)", g->yname = "dy";
    break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD:
    inputs = "x, dy", want_in = 2;
    g->y = 1, g->t = out, g->yname = "dy";
    break;
  case TYTO_PLUGIN_OP_MAX_POOL2D_SELECT:
    inputs = "x, t", want_in = 2;
    g->t = 1;
    break;
  case TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD:
    inputs = "dy";
    /* x names dx, the output: it carries the input's shape. */
    g->x = g->t = out, g->y = 0;
    g->xname = "dx (the output)", g->yname = "dy";
    break;
  default: break;
  }
  if (n_in != want_in || a->n_out != 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: expected %u input%s (%s) and 1 output, got %u and %u",
                    name, (unsigned)want_in, want_in > 1 ? "s" : "", inputs,
                    (unsigned)n_in, (unsigned)a->n_out);
  return 0;
}

/* A stride, pad, dilation, group count or kernel extent attribute. */
static int check_attr(const char *op, const char *name, int64_t v, int64_t min,
                      char *why, size_t why_size) {
  if (v < min)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s must be at least %lld, got %lld", op, name,
                    (long long)min, (long long)v);
  if (v > INT_MAX)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s %lld is too large (at most %d)", op, name,
                    (long long)v, INT_MAX);
  return 0;
}

/* The weight's part: w's shape against x's channels and the groups, the
 * bias; *eff_h x *eff_w gets the dilated kernel. */
static int conv_weight(const tpc_operands *a, const char *name, tpc_conv *g,
                       int64_t *eff_h, int64_t *eff_w, char *why,
                       size_t why_size) {
  const tyto_plugin_layout *x = tpc_operand(a, g->x), *w = tpc_operand(a, g->w);
  const char *xname = g->xname, *wname = g->wname;
  char sx[160], sw[160], sb[160];
  tpc_format_shape_as(x, a->tight, sx, sizeof sx);
  tpc_format_shape_as(w, a->tight, sw, sizeof sw);
  if (w->rank != 4)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s must be [O, C/groups, KH, KW], got %s", name, wname,
                    sw);
  g->O = w->shape[0], g->KH = w->shape[2], g->KW = w->shape[3];
  if (g->C % g->G)
    return tpc_fail(
        why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: groups %lld does not divide the %lld input channels of "
        "%s %s",
        name, (long long)g->G, (long long)g->C, xname, sx);
  if (g->O % g->G)
    return tpc_fail(
        why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: groups %lld does not divide the %lld output channels of "
        "%s %s",
        name, (long long)g->G, (long long)g->O, wname, sw);
  if (w->shape[1] != g->C / g->G)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s %s takes %lld input channels per group, but %s %s "
                    "with groups %lld has %lld",
                    name, wname, sw, (long long)w->shape[1], xname, sx,
                    (long long)g->G, (long long)(g->C / g->G));
  if (a->n_in == 3) {
    const tyto_plugin_layout *b = a->in[2];
    tpc_format_shape_as(b, a->tight, sb, sizeof sb);
    if (b->rank != 1 || b->shape[0] != g->O)
      return tpc_fail(
          why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "conv2d: bias must be [%lld] (one per output channel of w "
          "%s), got %s",
          (long long)g->O, sw, sb);
    g->has_bias = 1;
  }
  if (g->KH > INT_MAX || g->KW > INT_MAX)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: kernel of %s %s is too large", name, wname, sw);
  if (g->KH < 1 || g->KW < 1)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s %s has an empty kernel", name, wname, sw);
  *eff_h = g->dh * (g->KH - 1) + 1;
  *eff_w = g->dw * (g->KW - 1) + 1;
  return 0;
}

/* y's shape against the one x (and w) give, t's against x's, and an output
 * with a place per element. */
static int conv_output(const tpc_operands *a, const char *name, tpc_conv *g,
                       char *why, size_t why_size) {
  const tyto_plugin_layout *x = tpc_operand(a, g->x), *y = tpc_operand(a, g->y),
                           *out = a->out[0];
  int is_conv = g->w >= 0;
  char sx[160], sy[160], s[160];
  tpc_format_shape_as(x, a->tight, sx, sizeof sx);
  if (y->rank != 4 || y->shape[0] != g->N || y->shape[1] != g->O ||
      y->shape[2] != g->OH || y->shape[3] != g->OW) {
    tpc_format_shape_as(y, a->tight, sy, sizeof sy);
    if (is_conv) {
      tpc_format_shape_as(tpc_operand(a, g->w), a->tight, s, sizeof s);
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: %s is %s, expected [%lld,%lld,%lld,%lld] for %s %s "
                      "and %s %s",
                      name, g->yname, sy, (long long)g->N, (long long)g->O,
                      (long long)g->OH, (long long)g->OW, g->xname, sx,
                      g->wname, s);
    }
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s is %s, expected [%lld,%lld,%lld,%lld] for %s %s",
                    name, g->yname, sy, (long long)g->N, (long long)g->O,
                    (long long)g->OH, (long long)g->OW, g->xname, sx);
  }
  if (g->t >= 0) {
    const tyto_plugin_layout *t = tpc_operand(a, g->t);
    if (t->rank != 4 || memcmp(t->shape, x->shape, 4 * sizeof t->shape[0])) {
      tpc_format_shape_as(t, a->tight, s, sizeof s);
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: %s is %s, expected %s (shaped as x)", name,
                      g->t == (int)a->n_in ? "dx (the output)" : "t", s, sx);
    }
  }
  for (uint32_t ax = 0; ax < 4; ax++)
    if (out->shape[ax] > 1 && out->strides[ax] == 0) {
      tpc_format_shape_as(out, a->tight, s, sizeof s);
      return tpc_fail(
          why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: output %s has a stride-0 axis %u: every element needs "
          "its own place",
          name, s, (unsigned)ax);
    }
  return 0;
}

int tpc_conv_check(const tpc_operands *a, tpc_conv *g, char *why,
                   size_t why_size) {
  const char *name = tpc_op_name(a->op);
  int pool = tpc_pool_op(a->op), e;
  memset(g, 0, sizeof *g);
  why[0] = '\0';
  if ((e = roles(a, name, g, why, why_size)) != 0)
    return e;
  uint32_t want_attrs = pool ? 6 : 7;
  if (a->n_iattrs != want_attrs)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    pool ? "%s: expected %u integer attributes (kernel_h, "
                           "kernel_w, stride_h, stride_w, pad_h, pad_w), got %u"
                         : "%s: expected %u integer attributes (stride_h, "
                           "stride_w, pad_h, pad_w, dilation_h, dilation_w, "
                           "groups), got %u",
                    name, (unsigned)want_attrs, (unsigned)a->n_iattrs);
  const tyto_plugin_layout *out = a->out[0], *x = tpc_operand(a, g->x);
  for (uint32_t i = 0; i < a->n_in; i++)
    if (a->in[i]->dtype != out->dtype)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: input %u is %s but the output is %s: all must share "
                      "one dtype",
                      name, (unsigned)i, tpc_dtype_name(a->in[i]->dtype),
                      tpc_dtype_name(out->dtype));
  char sx[160];
  tpc_format_shape_as(x, a->tight, sx, sizeof sx);
  if (x->rank != 4)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "%s: %s must be [N, C, H, W], got %s", name, g->xname, sx);
  static const char *const conv_names[] = {
      "stride_h",   "stride_w",   "pad_h", "pad_w",
      "dilation_h", "dilation_w", "groups"};
  static const char *const pool_names[] = {"kernel_h", "kernel_w", "stride_h",
                                           "stride_w", "pad_h",    "pad_w"};
  static const int64_t conv_min[] = {1, 1, 0, 0, 1, 1, 1},
                       pool_min[] = {1, 1, 1, 1, 0, 0};
  for (uint32_t i = 0; i < want_attrs; i++)
    if ((e = check_attr(name, pool ? pool_names[i] : conv_names[i],
                        a->iattrs[i], pool ? pool_min[i] : conv_min[i], why,
                        why_size)) != 0)
      return e;
  const int64_t *v = a->iattrs;
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2];
  g->W = x->shape[3];
  int64_t eff_h = 0, eff_w = 0;
  if (!pool) {
    g->sh = v[0], g->sw = v[1], g->ph = v[2], g->pw = v[3];
    g->dh = v[4], g->dw = v[5], g->G = v[6];
    if ((e = conv_weight(a, name, g, &eff_h, &eff_w, why, why_size)) != 0)
      return e;
  } else {
    g->KH = v[0], g->KW = v[1], g->sh = v[2], g->sw = v[3];
    g->ph = v[4], g->pw = v[5];
    g->dh = g->dw = g->G = 1;
    g->O = g->C;
    if (g->ph >= g->KH || g->pw >= g->KW)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: padding %lldx%lld must be smaller than the kernel "
                      "%lldx%lld",
                      name, (long long)g->ph, (long long)g->pw,
                      (long long)g->KH, (long long)g->KW);
    eff_h = g->KH, eff_w = g->KW;
  }
  /* H, W < 2^62 (the plugin checked the reach), pads <= INT_MAX. */
  int64_t ph2 = g->H + 2 * g->ph, pw2 = g->W + 2 * g->pw;
  if (eff_h > ph2 || eff_w > pw2)
    return tpc_fail(
        why, why_size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: the %skernel %lldx%lld does not fit in the padded input "
        "%lldx%lld of %s %s",
        name, pool ? "" : "dilated ", (long long)eff_h, (long long)eff_w,
        (long long)ph2, (long long)pw2, g->xname, sx);
  g->OH = (ph2 - eff_h) / g->sh + 1;
  g->OW = (pw2 - eff_w) / g->sw + 1;
  if (pool) {
    g->CH = g->H > 0 ? (g->H - 1 + g->ph) / g->sh + 1 : 0;
    g->CW = g->W > 0 ? (g->W - 1 + g->pw) / g->sw + 1 : 0;
  }
  return conv_output(a, name, g, why, why_size);
}
