/* Neural-network ops: softmax, log_softmax, conv2d, pooling (NCHW). */
#include "node.h"
#include "shape.h"

#include <inttypes.h>

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

tyto_tensor *tyto_conv2d(tyto_tensor *x, tyto_tensor *w, tyto_tensor *bias,
                         const tyto_conv2d_params *params) {
  tyto_tensor *in[3] = {x, w, bias}, *err;
  size_t n_in = bias ? 3 : 2;
  tyto_graph *g = graph_check("conv2d", n_in, in, 1, &err);
  if (!g)
    return err;
  tyto_conv2d_params p = {{1, 1}, {0, 0}, {1, 1}, 1};
  if (params)
    p = *params;
  char sx[SHAPE_STR], sw[SHAPE_STR], sb[SHAPE_STR];
  tensor_shape_str(sx, x);
  tensor_shape_str(sw, w);
  if (x->rank != 4)
    return graph_fail(g, "conv2d: x must have rank 4 (NCHW), got %s", sx);
  if (w->rank != 4)
    return graph_fail(g, "conv2d: weight must have rank 4 (OIHW), got %s", sw);
  if (w->shape[2] < 1 || w->shape[3] < 1)
    return graph_fail(g, "conv2d: weight %s has an empty kernel", sw);
  for (int i = 0; i < 2; i++)
    if (p.stride[i] < 1 || p.dilation[i] < 1 || p.padding[i] < 0 ||
        p.groups < 1)
      return graph_fail(g, "conv2d: stride, dilation and groups must be "
                           "positive, padding not negative");
  for (int i = 0; i < 2; i++)
    if (p.dilation[i] > INT64_MAX / w->shape[2 + i])
      return graph_fail(g, "conv2d: dilated kernel of %s is too large", sw);
  int64_t o = w->shape[0];
  if (x->shape[1] % p.groups || x->shape[1] / p.groups != w->shape[1])
    return graph_fail(g,
                      "conv2d: input channels differ: x %s and w %s with "
                      "%" PRId64 " groups",
                      sx, sw, p.groups);
  if (o % p.groups)
    return graph_fail(g,
                      "conv2d: %" PRId64
                      " output channels not divisible by %" PRId64 " groups",
                      o, p.groups);
  if (bias && (bias->rank != 1 || bias->shape[0] != o))
    return graph_fail(
        g, "conv2d: bias %s does not match %" PRId64 " output channels",
        tensor_shape_str(sb, bias), o);
  int64_t shape[4] = {x->shape[0], o, 0, 0}, k[2];
  for (int i = 0; i < 2; i++) {
    k[i] = p.dilation[i] * (w->shape[2 + i] - 1) + 1;
    shape[2 + i] = window_out(x->shape[2 + i], k[i], p.stride[i], p.padding[i]);
  }
  if (shape[2] == -2 || shape[3] == -2)
    return graph_fail(g, "conv2d: padded input of %s is too large", sx);
  if (shape[2] < 0 || shape[3] < 0) {
    char sk[SHAPE_STR], sp[SHAPE_STR];
    int64_t padded[2] = {x->shape[2] + 2 * p.padding[0],
                         x->shape[3] + 2 * p.padding[1]};
    return graph_fail(g,
                      "conv2d: kernel %s (dilated) larger than padded "
                      "input %s",
                      shape_str(sk, 2, k), shape_str(sp, 2, padded));
  }
  int64_t iattrs[7] = {p.stride[0],   p.stride[1],   p.padding[0], p.padding[1],
                       p.dilation[0], p.dilation[1], p.groups};
  return node_new(g, TYTO_OP_CONV2D, x->dtype, 4, shape, n_in, in, 7, iattrs, 0,
                  NULL);
}

static tyto_tensor *pool(tyto_op op, tyto_tensor *x, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  tyto_tensor *err;
  const char *name = tyto_op_name(op);
  tyto_graph *g = graph_check(name, 1, &x, 1, &err);
  if (!g)
    return err;
  char sx[SHAPE_STR], sk[SHAPE_STR], sp[SHAPE_STR];
  int64_t k[2] = {kh, kw};
  shape_str(sk, 2, k);
  if (x->rank != 4)
    return graph_fail(g, "%s: x must have rank 4 (NCHW), got %s", name,
                      tensor_shape_str(sx, x));
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
  int64_t shape[4] = {x->shape[0], x->shape[1],
                      window_out(x->shape[2], kh, sh, ph),
                      window_out(x->shape[3], kw, sw, pw)};
  if (shape[2] == -2 || shape[3] == -2)
    return graph_fail(g, "%s: padded input of %s is too large", name,
                      tensor_shape_str(sx, x));
  if (shape[2] < 0 || shape[3] < 0) {
    int64_t padded[2] = {x->shape[2] + 2 * ph, x->shape[3] + 2 * pw};
    return graph_fail(g, "%s: kernel %s larger than padded input %s", name, sk,
                      shape_str(sp, 2, padded));
  }
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
