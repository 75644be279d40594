/* Neural-network ops: softmax, log_softmax, conv2d, pooling (NCHW), and
 * the derivative ops of conv2d and pooling. */
#include "node.h"
#include "shape.h"

#include <inttypes.h>
#include <string.h>

static tyto_tensor *softmax_op(tyto_op op, tyto_tensor *x, int axis) {
  tyto_tensor *err;
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  int a;
  if (shape_axis(g, name, x, axis, &a) < 0)
    return &g->error;
  int64_t iattr = a;
  return node_new(g, op, x->dtype, x->rank, x->shape, 1, &x, 1, &iattr, 0,
                  NULL);
}

tyto_tensor *tyto_softmax(tyto_tensor *x, int axis) {
  return softmax_op(TYTO_OP_SOFTMAX, x, axis);
}

tyto_tensor *tyto_log_softmax(tyto_tensor *x, int axis) {
  return softmax_op(TYTO_OP_LOG_SOFTMAX, x, axis);
}

/* Output extent of a window `k` >= 1 (already dilated) sliding with
 * `stride` over `n` padded by `pad` on both sides; -1 when the window does
 * not fit, -2 when the padded extent overflows. */
static int64_t window_out(int64_t n, int64_t k, int64_t stride, int64_t pad) {
  if (pad > (INT64_MAX - n) / 2)
    return -2;
  int64_t span = n + 2 * pad - k;
  return span < 0 ? -1 : span / stride + 1;
}

/* Validates a convolution of an input shaped xs by a weight shaped ws with
 * parameters p for op `name`, and sets out to the output shape. NULL on
 * success, else the error tensor after graph_fail(). */
static tyto_tensor *conv_shape(tyto_graph *g, const char *name,
                               const int64_t *xs, const int64_t *ws,
                               const tyto_conv2d_params *p, int64_t *out) {
  char sx[SHAPE_STR], sw[SHAPE_STR];
  shape_str(sx, 4, xs);
  shape_str(sw, 4, ws);
  if (ws[2] < 1 || ws[3] < 1)
    return graph_fail(g, "%s: weight %s has an empty kernel", name, sw);
  for (int i = 0; i < 2; i++)
    if (p->stride[i] < 1 || p->dilation[i] < 1 || p->padding[i] < 0 ||
        p->groups < 1)
      return graph_fail(g,
                        "%s: stride, dilation and groups must be "
                        "positive, padding not negative",
                        name);
  for (int i = 0; i < 2; i++)
    if (p->dilation[i] > INT64_MAX / ws[2 + i])
      return graph_fail(g, "%s: dilated kernel of %s is too large", name, sw);
  int64_t o = ws[0];
  if (xs[1] % p->groups || xs[1] / p->groups != ws[1])
    return graph_fail(g,
                      "%s: input channels differ: x %s and w %s with "
                      "%" PRId64 " groups",
                      name, sx, sw, p->groups);
  if (o % p->groups)
    return graph_fail(g,
                      "%s: %" PRId64
                      " output channels not divisible by %" PRId64 " groups",
                      name, o, p->groups);
  int64_t k[2];
  out[0] = xs[0];
  out[1] = o;
  for (int i = 0; i < 2; i++) {
    k[i] = p->dilation[i] * (ws[2 + i] - 1) + 1;
    out[2 + i] = window_out(xs[2 + i], k[i], p->stride[i], p->padding[i]);
  }
  if (out[2] == -2 || out[3] == -2)
    return graph_fail(g, "%s: padded input of %s is too large", name, sx);
  if (out[2] < 0 || out[3] < 0) {
    char sk[SHAPE_STR], sp[SHAPE_STR];
    int64_t padded[2] = {xs[2] + 2 * p->padding[0], xs[3] + 2 * p->padding[1]};
    return graph_fail(g,
                      "%s: kernel %s (dilated) larger than padded "
                      "input %s",
                      name, shape_str(sk, 2, k), shape_str(sp, 2, padded));
  }
  return NULL;
}

static void conv_iattrs(const tyto_conv2d_params *p, int64_t *iattrs) {
  int64_t a[7] = {p->stride[0],   p->stride[1],   p->padding[0], p->padding[1],
                  p->dilation[0], p->dilation[1], p->groups};
  memcpy(iattrs, a, sizeof a);
}

static const tyto_conv2d_params conv_default = {{1, 1}, {0, 0}, {1, 1}, 1};

tyto_tensor *tyto_conv2d(tyto_tensor *x, tyto_tensor *w, tyto_tensor *bias,
                         const tyto_conv2d_params *params) {
  tyto_tensor *in[3] = {x, w, bias}, *err;
  size_t n_in = bias ? 3 : 2;
  tyto_graph *g = graph_check("conv2d", n_in, in, 1, &err);
  if (!g)
    return err;
  const tyto_conv2d_params *p = params ? params : &conv_default;
  char sx[SHAPE_STR], sw[SHAPE_STR], sb[SHAPE_STR];
  tensor_shape_str(sx, x);
  tensor_shape_str(sw, w);
  if (x->rank != 4)
    return graph_fail(g, "conv2d: x must have rank 4 (NCHW), got %s", sx);
  if (w->rank != 4)
    return graph_fail(g, "conv2d: weight must have rank 4 (OIHW), got %s", sw);
  int64_t shape[4], iattrs[7];
  if ((err = conv_shape(g, "conv2d", x->shape, w->shape, p, shape)))
    return err;
  if (bias && (bias->rank != 1 || bias->shape[0] != shape[1]))
    return graph_fail(
        g, "conv2d: bias %s does not match %" PRId64 " output channels",
        tensor_shape_str(sb, bias), shape[1]);
  conv_iattrs(p, iattrs);
  return node_new(g, TYTO_OP_CONV2D, x->dtype, 4, shape, n_in, in, 7, iattrs, 0,
                  NULL);
}

tyto_tensor *tyto_conv2d_backward_data(tyto_tensor *dy, tyto_tensor *w,
                                       int64_t h, int64_t w_,
                                       const tyto_conv2d_params *params) {
  static const char name[] = "conv2d_backward_data";
  tyto_tensor *in[2] = {dy, w}, *err;
  tyto_graph *g = graph_check(name, 2, in, 1, &err);
  if (!g)
    return err;
  const tyto_conv2d_params *p = params ? params : &conv_default;
  char sd[SHAPE_STR], sw[SHAPE_STR];
  tensor_shape_str(sd, dy);
  tensor_shape_str(sw, w);
  if (dy->rank != 4)
    return graph_fail(g, "%s: dy must have rank 4 (NCHW), got %s", name, sd);
  if (w->rank != 4)
    return graph_fail(g, "%s: weight must have rank 4 (OIHW), got %s", name,
                      sw);
  if (h < 0 || w_ < 0)
    return graph_fail(g, "%s: negative input size [%" PRId64 ",%" PRId64 "]",
                      name, h, w_);
  if (p->groups < 1 || w->shape[1] > INT64_MAX / p->groups)
    return graph_fail(g,
                      "%s: stride, dilation and groups must be "
                      "positive, padding not negative",
                      name);
  /* The input dx is shaped [N, C, h, w_]: C follows from w and groups. */
  int64_t xs[4] = {dy->shape[0], w->shape[1] * p->groups, h, w_}, ys[4];
  if ((err = conv_shape(g, name, xs, w->shape, p, ys)))
    return err;
  if (dy->shape[1] != ys[1])
    return graph_fail(g,
                      "%s: dy %s has %" PRId64
                      " channels, but w %s has %" PRId64 " output channels",
                      name, sd, dy->shape[1], sw, ys[1]);
  if (dy->shape[2] != ys[2] || dy->shape[3] != ys[3]) {
    char si[SHAPE_STR], so[SHAPE_STR];
    return graph_fail(g,
                      "%s: input %s gives output %s for these parameters, "
                      "but dy is %s",
                      name, shape_str(si, 2, xs + 2), shape_str(so, 2, ys + 2),
                      sd);
  }
  if (shape_check(g, name, 4, xs) < 0)
    return &g->error;
  int64_t iattrs[9];
  conv_iattrs(p, iattrs);
  iattrs[7] = h;
  iattrs[8] = w_;
  return node_new(g, TYTO_OP_CONV2D_BACKWARD_DATA, dy->dtype, 4, xs, 2, in, 9,
                  iattrs, 0, NULL);
}

tyto_tensor *tyto_conv2d_backward_filter(tyto_tensor *x, tyto_tensor *dy,
                                         int64_t kh, int64_t kw,
                                         const tyto_conv2d_params *params) {
  static const char name[] = "conv2d_backward_filter";
  tyto_tensor *in[2] = {x, dy}, *err;
  tyto_graph *g = graph_check(name, 2, in, 1, &err);
  if (!g)
    return err;
  const tyto_conv2d_params *p = params ? params : &conv_default;
  char sx[SHAPE_STR], sd[SHAPE_STR];
  tensor_shape_str(sx, x);
  tensor_shape_str(sd, dy);
  if (x->rank != 4)
    return graph_fail(g, "%s: x must have rank 4 (NCHW), got %s", name, sx);
  if (dy->rank != 4)
    return graph_fail(g, "%s: dy must have rank 4 (NCHW), got %s", name, sd);
  if (kh < 0 || kw < 0)
    return graph_fail(g, "%s: negative kernel size [%" PRId64 ",%" PRId64 "]",
                      name, kh, kw);
  /* dw is shaped [O, C/groups, kh, kw] with O = dy's channels. */
  int64_t ws[4] = {dy->shape[1], p->groups > 0 ? x->shape[1] / p->groups : 0,
                   kh, kw},
          ys[4];
  if ((err = conv_shape(g, name, x->shape, ws, p, ys)))
    return err;
  if (memcmp(ys, dy->shape, sizeof ys)) {
    char so[SHAPE_STR];
    return graph_fail(g,
                      "%s: x %s and a [%" PRId64 ",%" PRId64
                      "] kernel give output %s for these parameters, but dy "
                      "is %s",
                      name, sx, kh, kw, shape_str(so, 4, ys), sd);
  }
  int64_t iattrs[9];
  conv_iattrs(p, iattrs);
  iattrs[7] = kh;
  iattrs[8] = kw;
  return node_new(g, TYTO_OP_CONV2D_BACKWARD_FILTER, x->dtype, 4, ws, 2, in, 9,
                  iattrs, 0, NULL);
}

/* Validates a pooling of an input shaped xs for op `name` and sets out to
 * the pooled shape. NULL on success, else the error tensor. */
static tyto_tensor *pool_shape(tyto_graph *g, const char *name,
                               const int64_t *xs, int64_t kh, int64_t kw,
                               int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                               int64_t *out) {
  char sx[SHAPE_STR], sk[SHAPE_STR], sp[SHAPE_STR];
  int64_t k[2] = {kh, kw};
  shape_str(sk, 2, k);
  if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || ph < 0 || pw < 0 ||
      kh > INT64_MAX / 4 || kw > INT64_MAX / 4)
    return graph_fail(g,
                      "%s: kernel and stride must be positive, padding "
                      "not negative",
                      name);
  /* As PyTorch: a window must hold at least one element of the input. */
  if (ph > kh / 2 || pw > kw / 2)
    return graph_fail(g, "%s: padding %" PRId64 " exceeds half the kernel %s",
                      name, ph > kh / 2 ? ph : pw, sk);
  out[0] = xs[0];
  out[1] = xs[1];
  out[2] = window_out(xs[2], kh, sh, ph);
  out[3] = window_out(xs[3], kw, sw, pw);
  if (out[2] == -2 || out[3] == -2)
    return graph_fail(g, "%s: padded input of %s is too large", name,
                      shape_str(sx, 4, xs));
  if (out[2] < 0 || out[3] < 0) {
    int64_t padded[2] = {xs[2] + 2 * ph, xs[3] + 2 * pw};
    return graph_fail(g, "%s: kernel %s larger than padded input %s", name, sk,
                      shape_str(sp, 2, padded));
  }
  return NULL;
}

static tyto_tensor *pool(tyto_op op, tyto_tensor *x, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  tyto_tensor *err;
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  char sx[SHAPE_STR];
  if (x->rank != 4)
    return graph_fail(g, "%s: x must have rank 4 (NCHW), got %s", name,
                      tensor_shape_str(sx, x));
  int64_t shape[4];
  if ((err = pool_shape(g, name, x->shape, kh, kw, sh, sw, ph, pw, shape)))
    return err;
  int64_t iattrs[6] = {kh, kw, sh, sw, ph, pw};
  return node_new(g, op, x->dtype, 4, shape, 1, &x, 6, iattrs, 0, NULL);
}

tyto_tensor *tyto_max_pool2d(tyto_tensor *x, int64_t kernel_h, int64_t kernel_w,
                             int64_t stride_h, int64_t stride_w, int64_t pad_h,
                             int64_t pad_w) {
  return pool(TYTO_OP_MAX_POOL2D, x, kernel_h, kernel_w, stride_h, stride_w,
              pad_h, pad_w);
}

tyto_tensor *tyto_avg_pool2d(tyto_tensor *x, int64_t kernel_h, int64_t kernel_w,
                             int64_t stride_h, int64_t stride_w, int64_t pad_h,
                             int64_t pad_w) {
  return pool(TYTO_OP_AVG_POOL2D, x, kernel_h, kernel_w, stride_h, stride_w,
              pad_h, pad_w);
}

/* MAX_POOL2D_BACKWARD (x, dy) and MAX_POOL2D_SELECT (x, t): the second
 * operand is shaped as the pooled output or as x. */
static tyto_tensor *max_pool_pair(tyto_op op, tyto_tensor *x, tyto_tensor *u,
                                  int64_t kh, int64_t kw, int64_t sh,
                                  int64_t sw, int64_t ph, int64_t pw) {
  tyto_tensor *in[2] = {x, u}, *err;
  const char *name = tyto_op_name(op);
  int select = op == TYTO_OP_MAX_POOL2D_SELECT;
  tyto_graph *g = graph_check(name, 2, in, 1, &err);
  if (!g)
    return err;
  char sx[SHAPE_STR], su[SHAPE_STR], sp[SHAPE_STR];
  tensor_shape_str(sx, x);
  tensor_shape_str(su, u);
  if (x->rank != 4)
    return graph_fail(g, "%s: x must have rank 4 (NCHW), got %s", name, sx);
  int64_t pooled[4];
  if ((err = pool_shape(g, name, x->shape, kh, kw, sh, sw, ph, pw, pooled)))
    return err;
  if (select && (u->rank != 4 || memcmp(u->shape, x->shape, sizeof pooled)))
    return graph_fail(g, "%s: t %s does not match x %s", name, su, sx);
  if (!select && (u->rank != 4 || memcmp(u->shape, pooled, sizeof pooled)))
    return graph_fail(g, "%s: dy %s does not match the pooled shape %s of x %s",
                      name, su, shape_str(sp, 4, pooled), sx);
  int64_t iattrs[6] = {kh, kw, sh, sw, ph, pw};
  return node_new(g, op, x->dtype, 4, select ? pooled : x->shape, 2, in, 6,
                  iattrs, 0, NULL);
}

tyto_tensor *tyto_max_pool2d_backward(tyto_tensor *x, tyto_tensor *dy,
                                      int64_t kernel_h, int64_t kernel_w,
                                      int64_t stride_h, int64_t stride_w,
                                      int64_t pad_h, int64_t pad_w) {
  return max_pool_pair(TYTO_OP_MAX_POOL2D_BACKWARD, x, dy, kernel_h, kernel_w,
                       stride_h, stride_w, pad_h, pad_w);
}

tyto_tensor *tyto_max_pool2d_select(tyto_tensor *x, tyto_tensor *t,
                                    int64_t kernel_h, int64_t kernel_w,
                                    int64_t stride_h, int64_t stride_w,
                                    int64_t pad_h, int64_t pad_w) {
  return max_pool_pair(TYTO_OP_MAX_POOL2D_SELECT, x, t, kernel_h, kernel_w,
                       stride_h, stride_w, pad_h, pad_w);
}

tyto_tensor *tyto_avg_pool2d_backward(tyto_tensor *dy, int64_t h, int64_t w_,
                                      int64_t kernel_h, int64_t kernel_w,
                                      int64_t stride_h, int64_t stride_w,
                                      int64_t pad_h, int64_t pad_w) {
  static const char name[] = "avg_pool2d_backward";
  tyto_tensor *err;
  tyto_graph *g = graph_check(name, 1, &dy, 1, &err);
  if (!g)
    return err;
  char sd[SHAPE_STR];
  tensor_shape_str(sd, dy);
  if (dy->rank != 4)
    return graph_fail(g, "%s: dy must have rank 4 (NCHW), got %s", name, sd);
  if (h < 0 || w_ < 0)
    return graph_fail(g, "%s: negative input size [%" PRId64 ",%" PRId64 "]",
                      name, h, w_);
  int64_t xs[4] = {dy->shape[0], dy->shape[1], h, w_}, pooled[4];
  if ((err = pool_shape(g, name, xs, kernel_h, kernel_w, stride_h, stride_w,
                        pad_h, pad_w, pooled)))
    return err;
  if (pooled[2] != dy->shape[2] || pooled[3] != dy->shape[3]) {
    char si[SHAPE_STR], so[SHAPE_STR];
    return graph_fail(g,
                      "%s: input %s gives output %s for these parameters, "
                      "but dy is %s",
                      name, shape_str(si, 2, xs + 2),
                      shape_str(so, 2, pooled + 2), sd);
  }
  if (shape_check(g, name, 4, xs) < 0)
    return &g->error;
  int64_t iattrs[8] = {kernel_h, kernel_w, stride_h, stride_w,
                       pad_h,    pad_w,    h,        w_};
  return node_new(g, TYTO_OP_AVG_POOL2D_BACKWARD, dy->dtype, 4, xs, 1, &dy, 8,
                  iattrs, 0, NULL);
}
