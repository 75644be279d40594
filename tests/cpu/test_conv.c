/*
 * CONV2D on the CPU plugin against float64 references computed here by
 * naive loops. Each f32 case runs twice: through oneDNN (when the build has
 * it) and through the portable im2col + GEMM path (TYTO_CPU_NO_DNNL=1,
 * read at prepare); f64 and strided layouts always take the portable path.
 * Covers stride, padding, dilation, groups (depthwise included), bias,
 * strided inputs and outputs, the error messages of convolutions and
 * poolings, and the derivatives CONV2D_BACKWARD_DATA/FILTER (both paths)
 * against scatter loops here and by the adjoint identities with the
 * forward op. Pooling itself: test_pool2d.c.
 *
 * Tolerance: |got - ref| <= tol * sqrt(K) * (sum |x w| + |bias|), K =
 * C/groups * KH * KW, tol = 1e-5 (f32), 1e-13 (f64).
 */
#include "cpu/conv_fixture.h"

/* a = stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups. */
static void conv_check(const h_tensor *x, const h_tensor *w, const h_tensor *b,
                       const h_tensor *y, const int64_t *a) {
  const int64_t *xs = x->layout.shape, *ws = w->layout.shape,
                *ys = y->layout.shape;
  int64_t G = a[6], Cg = xs[1] / G, Og = ws[0] / G;
  int64_t K = Cg * ws[2] * ws[3];
  double tol =
      (y->layout.dtype == F32 ? 1e-5 : 1e-13) * sqrt((double)(K ? K : 1));
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t o = 0; o < ys[1]; o++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++) {
          double s = 0, mag = 0;
          if (b) {
            s = b->values[h_at(b, (int64_t[]){o})];
            mag = fabs(s);
          }
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < ws[2]; kh++)
              for (int64_t kw = 0; kw < ws[3]; kw++) {
                int64_t ih = oh * a[0] - a[2] + kh * a[4],
                        iw = ow * a[1] - a[3] + kw * a[5];
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
                  continue;
                double p =
                    x->values[h_at(x, (int64_t[]){n, g * Cg + c, ih, iw})] *
                    w->values[h_at(w, (int64_t[]){o, c, kh, kw})];
                s += p;
                mag += fabs(p);
              }
          double got = y->values[h_at(y, (int64_t[]){n, o, oh, ow})];
          ck_assert_msg(fabs(got - s) <= tol * mag,
                        "y[%lld,%lld,%lld,%lld] = %.17g, expected %.17g",
                        (long long)n, (long long)o, (long long)oh,
                        (long long)ow, got, s);
        }
}

/* Runs one convolution of fresh contiguous tensors on every path and checks
 * each against the reference. */
static void conv_case(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                      int64_t KH, int64_t KW, const int64_t *a, int bias) {
  for (int path = 0; path < 3; path++) {
    uint32_t dt = path == 2 ? F64 : F32;
    set_path(path == 1);
    h_tensor x = mk(dt, 4, (int64_t[]){N, C, H, W}, 1),
             w = mk(dt, 4, (int64_t[]){O, C / a[6], KH, KW}, 2),
             b = mk(dt, 1, (int64_t[]){O}, 3);
    int64_t OH = out_dim(H, KH, a[0], a[2], a[4]),
            OW = out_dim(W, KW, a[1], a[3], a[5]);
    h_tensor y = h_tensor_new(dt, 4, (int64_t[]){N, O, OH, OW}, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w, b},
                    bias ? 3 : 2, &y, 1, a, 7, NULL, 0);
    ck_assert_msg(err == NULL, "path %d: %s", path, err);
    conv_check(&x, &w, bias ? &b : NULL, &y, a);
    h_tensor_free(&x);
    h_tensor_free(&w);
    h_tensor_free(&b);
    h_tensor_free(&y);
  }
}

START_TEST(conv_basic) {
  conv_case(2, 3, 7, 6, 4, 3, 3, (int64_t[]){1, 1, 0, 0, 1, 1, 1}, 0);
  conv_case(2, 3, 7, 6, 4, 3, 3, (int64_t[]){1, 1, 0, 0, 1, 1, 1}, 1);
  conv_case(3, 5, 4, 4, 6, 1, 1, (int64_t[]){1, 1, 0, 0, 1, 1, 1}, 1);
}
END_TEST

START_TEST(conv_stride_pad_dilation) {
  conv_case(2, 3, 9, 8, 4, 3, 3, (int64_t[]){2, 1, 1, 2, 1, 1, 1}, 1);
  conv_case(2, 3, 9, 8, 4, 3, 2, (int64_t[]){1, 2, 0, 1, 2, 3, 1}, 1);
  conv_case(1, 2, 10, 11, 3, 3, 3, (int64_t[]){3, 2, 2, 1, 2, 2, 1}, 0);
  /* Padding wider than the kernel reach: border outputs see only zeros. */
  conv_case(1, 2, 3, 3, 2, 2, 2, (int64_t[]){1, 1, 2, 2, 1, 1, 1}, 1);
}
END_TEST

START_TEST(conv_groups) {
  conv_case(2, 4, 6, 6, 6, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 2}, 1);
  conv_case(2, 6, 7, 5, 3, 2, 3, (int64_t[]){2, 1, 0, 1, 1, 2, 3}, 0);
  /* Depthwise: groups == C (and a channel multiplier of 2). */
  conv_case(1, 5, 8, 8, 5, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 5}, 1);
  conv_case(2, 4, 8, 7, 8, 3, 3, (int64_t[]){2, 2, 1, 1, 1, 1, 4}, 1);
}
END_TEST

START_TEST(conv_large) {
  /* Big enough that each GEMM of the fallback is threaded by OpenBLAS. */
  conv_case(2, 16, 20, 20, 32, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1}, 1);
}
END_TEST

#ifdef TYTO_HAVE_DNNL
/* The fallback's workspace is exactly its packed weights plus one im2col
 * matrix and one GEMM result ([3,18] + [18,9] + [3,9] floats here); oneDNN's
 * is its scratchpad, another size: the environment variable really switches
 * paths. */
START_TEST(conv_path_switch) {
  tyto_device *dev = hx.dev;
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  tyto_plugin_layout l[3];
  int64_t shapes[3][4] = {{1, 2, 5, 5}, {3, 2, 3, 3}, {1, 3, 3, 3}};
  for (int i = 0; i < 3; i++) {
    h_tensor t = h_tensor_new(F32, 4, shapes[i], NULL);
    l[i] = t.layout;
    h_tensor_free(&t);
  }
  int64_t a[7] = {1, 1, 0, 0, 1, 1, 1};
  tyto_plugin_op_desc d = {
      sizeof d, TYTO_PLUGIN_OP_CONV2D, 2, 1, l, &l[2], 7, a, 0, NULL, 0, NULL};
  /* TYTO_CPU_NO_DNNL's values read as libtyto reads its switches. */
  static const struct {
    const char *value;
    int fallback;
  } env[] = {{NULL, 0}, {"1", 1},     {"0", 0},  {"off", 0}, {"No", 0},
             {"", 0},   {"FALSE", 0}, {"on", 1}, {"yes", 1}, {"true", 1}};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
    if (env[i].value)
      setenv("TYTO_CPU_NO_DNNL", env[i].value, 1);
    else
      unsetenv("TYTO_CPU_NO_DNNL");
    tyto_plugin_kernel *k = NULL;
    tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
    ck_assert_ptr_null(f->prepare(dev->handle, &d, &k, &ki));
    if (env[i].fallback)
      ck_assert_msg(ki.workspace_bytes == (54 + 162 + 27) * 4,
                    "TYTO_CPU_NO_DNNL=%s: oneDNN was used", env[i].value);
    else
      ck_assert_msg(ki.workspace_bytes != (54 + 162 + 27) * 4,
                    "TYTO_CPU_NO_DNNL=%s: oneDNN was not used",
                    env[i].value ? env[i].value : "(unset)");
    f->kernel_release(dev->handle, k);
  }
  unsetenv("TYTO_CPU_NO_DNNL");
}
END_TEST
/* The same for the convolution derivatives: oneDNN really builds their
 * primitives (x [1,2,5,5], w [3,2,3,3], y [1,3,3,3]: K 18, P 9). */
START_TEST(conv_backward_path_switch) {
  tyto_device *dev = hx.dev;
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  tyto_plugin_layout x, w, y;
  h_tensor t = h_tensor_new(F32, 4, (int64_t[]){1, 2, 5, 5}, NULL);
  x = t.layout;
  h_tensor_free(&t);
  t = h_tensor_new(F32, 4, (int64_t[]){3, 2, 3, 3}, NULL);
  w = t.layout;
  h_tensor_free(&t);
  t = h_tensor_new(F32, 4, (int64_t[]){1, 3, 3, 3}, NULL);
  y = t.layout;
  h_tensor_free(&t);
  int64_t a[7] = {1, 1, 0, 0, 1, 1, 1};
  tyto_plugin_layout data_in[2] = {y, w}, filter_in[2] = {x, y};
  tyto_plugin_op_desc d[2] = {{sizeof d[0], TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA,
                               2, 1, data_in, &x, 7, a, 0, NULL, 0, NULL},
                              {sizeof d[0],
                               TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, 1,
                               filter_in, &w, 7, a, 0, NULL, 0, NULL}};
  for (int i = 0; i < 2; i++)
    for (int fallback = 0; fallback < 2; fallback++) {
      set_path(fallback);
      tyto_plugin_kernel *k = NULL;
      tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
      ck_assert_ptr_null(f->prepare(dev->handle, &d[i], &k, &ki));
      if (fallback)
        ck_assert_uint_eq(ki.workspace_bytes, (54 + 162 + 27) * 4);
      else
        ck_assert_uint_ne(ki.workspace_bytes, (54 + 162 + 27) * 4);
      f->kernel_release(dev->handle, k);
    }
}
END_TEST
#endif

/* Strided views: x stepped in W, w transposed by strides, the output
 * column-stepped. Always the portable path. */
START_TEST(conv_strided) {
  uint32_t dt = _i ? F64 : F32;
  int64_t a[7] = {1, 2, 1, 0, 1, 1, 1};
  h_tensor x = mk(dt, 4, (int64_t[]){2, 3, 6, 14}, 1);
  x.layout.shape[3] = 7;
  x.layout.strides[3] = 2;
  x.layout.offset = 1;
  /* w [4,3,3,2] stored as [2,3,3,4] (axes reversed). */
  h_tensor w = mk(dt, 4, (int64_t[]){2, 3, 3, 4}, 2);
  int64_t wshape[4] = {4, 3, 3, 2}, wstr[4] = {1, 4, 12, 36};
  memcpy(w.layout.shape, wshape, sizeof wshape);
  memcpy(w.layout.strides, wstr, sizeof wstr);
  h_tensor b = mk(dt, 1, (int64_t[]){8}, 3);
  b.layout.shape[0] = 4;
  b.layout.strides[0] = 2;
  int64_t OH = out_dim(6, 3, 1, 1, 1), OW = out_dim(7, 2, 2, 0, 1);
  h_tensor y = mk(dt, 4, (int64_t[]){2, 4, OH, 2 * OW}, 4);
  h_tensor y0 = mk(dt, 4, (int64_t[]){2, 4, OH, 2 * OW}, 4);
  y.layout.shape[3] = OW;
  y.layout.strides[3] = 2;
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D,
                                (h_tensor[]){x, w, b}, 3, &y, 1, a, 7, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  conv_check(&x, &w, &b, &y, a);
  for (int64_t i = 1; i < y.storage; i += 2) /* odd columns untouched */
    ck_assert(y.values[i] == y0.values[i]);
  h_tensor_free(&x);
  h_tensor_free(&w);
  h_tensor_free(&b);
  h_tensor_free(&y);
  h_tensor_free(&y0);
}
END_TEST

static void expect_error(uint32_t op, h_tensor *in, uint32_t n_in,
                         h_tensor *out, const int64_t *a, uint32_t n_a,
                         const char *message) {
  const char *err = harness_run(&hx, op, in, n_in, out, 1, a, n_a, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, message);
}

START_TEST(conv_errors) {
  h_tensor x = h_tensor_new(F32, 4, (int64_t[]){2, 4, 5, 5}, NULL),
           w = h_tensor_new(F32, 4, (int64_t[]){6, 3, 3, 3}, NULL),
           b = h_tensor_new(F32, 1, (int64_t[]){5}, NULL),
           y = h_tensor_new(F32, 4, (int64_t[]){2, 6, 3, 3}, NULL),
           x3 = h_tensor_new(F32, 3, (int64_t[]){4, 5, 5}, NULL);
  int64_t ok[7] = {1, 1, 0, 0, 1, 1, 1};
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y, ok, 7,
               "conv2d: w [6,3,3,3] takes 3 input channels per group, but x "
               "[2,4,5,5] with groups 1 has 4");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y, ok, 6,
               "conv2d: expected 7 integer attributes (stride_h, stride_w, "
               "pad_h, pad_w, dilation_h, dilation_w, groups), got 6");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x3, w}, 2, &y, ok, 7,
               "conv2d: x must be [N, C, H, W], got [4,5,5]");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){0, 1, 0, 0, 1, 1, 1}, 7,
               "conv2d: stride_h must be at least 1, got 0");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){1, 1, 0, -1, 1, 1, 1}, 7,
               "conv2d: pad_w must be at least 0, got -1");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){1, 1, 0, 0, 0, 1, 1}, 7,
               "conv2d: dilation_h must be at least 1, got 0");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){1, 1, 0, 0, 1, 1, 3}, 7,
               "conv2d: groups 3 does not divide the 4 input channels of x "
               "[2,4,5,5]");
  h_tensor_free(&w);
  w = h_tensor_new(F32, 4, (int64_t[]){5, 2, 3, 3}, NULL);
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){1, 1, 0, 0, 1, 1, 2}, 7,
               "conv2d: groups 2 does not divide the 5 output channels of w "
               "[5,2,3,3]");
  h_tensor_free(&w);
  w = h_tensor_new(F32, 4, (int64_t[]){6, 4, 3, 3}, NULL);
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w, b}, 3, &y, ok, 7,
               "conv2d: bias must be [6] (one per output channel of w "
               "[6,4,3,3]), got [5]");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){1, 1, 0, 0, 3, 1, 1}, 7,
               "conv2d: the dilated kernel 7x3 does not fit in the padded "
               "input 5x5 of x [2,4,5,5]");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y,
               (int64_t[]){2, 1, 0, 0, 1, 1, 1}, 7,
               "conv2d: output is [2,6,3,3], expected [2,6,2,3] for x "
               "[2,4,5,5] and w [6,4,3,3]");
  h_tensor yd = h_tensor_new(F64, 4, (int64_t[]){2, 6, 3, 3}, NULL);
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &yd, ok, 7,
               "conv2d: input 0 is f32 but the output is f64: all must share "
               "one dtype");
  expect_error(TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x}, 1, &y, ok, 7,
               "conv2d: expected 2 or 3 inputs (x, w, optional bias) and 1 "
               "output, got 1 and 1");
  h_tensor_free(&x);
  h_tensor_free(&w);
  h_tensor_free(&b);
  h_tensor_free(&y);
  h_tensor_free(&yd);
  h_tensor_free(&x3);
}
END_TEST

START_TEST(pool_errors) {
  h_tensor x = h_tensor_new(F32, 4, (int64_t[]){2, 3, 6, 6}, NULL),
           y = h_tensor_new(F32, 4, (int64_t[]){2, 3, 3, 3}, NULL);
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D, &x, 1, &y,
               (int64_t[]){2, 2, 2, 2, 2, 0}, 6,
               "max_pool2d: padding 2x0 must be smaller than the kernel 2x2");
  expect_error(TYTO_PLUGIN_OP_AVG_POOL2D, &x, 1, &y,
               (int64_t[]){2, 0, 2, 2, 0, 0}, 6,
               "avg_pool2d: kernel_w must be at least 1, got 0");
  expect_error(TYTO_PLUGIN_OP_AVG_POOL2D, &x, 1, &y, (int64_t[]){2, 2, 2, 2}, 4,
               "avg_pool2d: expected 6 integer attributes (kernel_h, "
               "kernel_w, stride_h, stride_w, pad_h, pad_w), got 4");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D, &x, 1, &y,
               (int64_t[]){3, 3, 2, 2, 0, 0}, 6,
               "max_pool2d: output is [2,3,3,3], expected [2,3,2,2] for x "
               "[2,3,6,6]");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D, &x, 1, &y,
               (int64_t[]){8, 8, 1, 1, 0, 0}, 6,
               "max_pool2d: the kernel 8x8 does not fit in the padded input "
               "6x6 of x [2,3,6,6]");
  h_tensor_free(&x);
  h_tensor_free(&y);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Derivatives                                                               */
/* ------------------------------------------------------------------------ */

/* dx of a convolution given dy and w, by scattering every product back:
 * ref[i] and mag[i] (sum of |terms|) over dx's row-major elements. */
static void data_ref(const h_tensor *dy, const h_tensor *w, const int64_t *xs,
                     const int64_t *a, double *ref, double *mag) {
  const int64_t *ws = w->layout.shape, *ys = dy->layout.shape;
  int64_t G = a[6], Cg = xs[1] / G, Og = ws[0] / G, n_x = 1;
  for (int i = 0; i < 4; i++)
    n_x *= xs[i];
  for (int64_t i = 0; i < n_x; i++)
    ref[i] = mag[i] = 0;
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t o = 0; o < ys[1]; o++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++)
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < ws[2]; kh++)
              for (int64_t kw = 0; kw < ws[3]; kw++) {
                int64_t ih = oh * a[0] - a[2] + kh * a[4],
                        iw = ow * a[1] - a[3] + kw * a[5];
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
                  continue;
                int64_t xi =
                    ((n * xs[1] + o / Og * Cg + c) * xs[2] + ih) * xs[3] + iw;
                double p = dy->values[h_at(dy, (int64_t[]){n, o, oh, ow})] *
                           w->values[h_at(w, (int64_t[]){o, c, kh, kw})];
                ref[xi] += p;
                mag[xi] += fabs(p);
              }
}

/* dw given x and dy, the same way, over dw's row-major elements. */
static void filter_ref(const h_tensor *x, const h_tensor *dy,
                       const int64_t *wsh, const int64_t *a, double *ref,
                       double *mag) {
  const int64_t *xs = x->layout.shape, *ys = dy->layout.shape;
  int64_t G = a[6], Cg = xs[1] / G, Og = wsh[0] / G;
  for (int64_t i = 0; i < wsh[0] * wsh[1] * wsh[2] * wsh[3]; i++)
    ref[i] = mag[i] = 0;
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t o = 0; o < ys[1]; o++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++)
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < wsh[2]; kh++)
              for (int64_t kw = 0; kw < wsh[3]; kw++) {
                int64_t ih = oh * a[0] - a[2] + kh * a[4],
                        iw = ow * a[1] - a[3] + kw * a[5];
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
                  continue;
                int64_t wi = ((o * Cg + c) * wsh[2] + kh) * wsh[3] + kw;
                double p =
                    dy->values[h_at(dy, (int64_t[]){n, o, oh, ow})] *
                    x->values[h_at(x, (int64_t[]){n, o / Og * Cg + c, ih, iw})];
                ref[wi] += p;
                mag[wi] += fabs(p);
              }
}

/* Both convolution derivatives of one geometry on every path, against
 * the scatter references, and the adjoint identity <conv2d(x, w), dy> =
 * <x, backward_data(dy, w)> = <w, backward_filter(x, dy)> with the
 * forward run by the plugin too. */
static void conv_grad_case(int64_t N, int64_t C, int64_t H, int64_t W,
                           int64_t O, int64_t KH, int64_t KW,
                           const int64_t *a) {
  int64_t OH = out_dim(H, KH, a[0], a[2], a[4]),
          OW = out_dim(W, KW, a[1], a[3], a[5]);
  int64_t xs[4] = {N, C, H, W}, wsh[4] = {O, C / a[6], KH, KW},
          ys[4] = {N, O, OH, OW};
  int64_t K = wsh[1] * KH * KW;
  double *ref = malloc((size_t)(N * C * H * W + O * K) * sizeof *ref),
         *mag = malloc((size_t)(N * C * H * W + O * K) * sizeof *mag);
  for (int path = 0; path < 3; path++) {
    uint32_t dt = path == 2 ? F64 : F32;
    double tol = dt == F32 ? 1e-5 : 1e-13;
    set_path(path == 1);
    h_tensor x = mk(dt, 4, xs, 7), w = mk(dt, 4, wsh, 8), dy = mk(dt, 4, ys, 9),
             dx = mk(dt, 4, xs, 10), dw = mk(dt, 4, wsh, 11),
             y = h_tensor_new(dt, 4, ys, NULL);
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA,
                    (h_tensor[]){dy, w}, 2, &dx, 1, a, 7, NULL, 0);
    ck_assert_msg(err == NULL, "path %d: %s", path, err);
    data_ref(&dy, &w, xs, a, ref, mag);
    compare4("dx", &dx, ref, mag, tol * sqrt((double)(O * KH * KW)));
    err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER,
                      (h_tensor[]){x, dy}, 2, &dw, 1, a, 7, NULL, 0);
    ck_assert_msg(err == NULL, "path %d: %s", path, err);
    filter_ref(&x, &dy, wsh, a, ref, mag);
    compare4("dw", &dw, ref, mag, tol * sqrt((double)(N * OH * OW)));
    err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D, (h_tensor[]){x, w}, 2, &y, 1,
                      a, 7, NULL, 0);
    ck_assert_msg(err == NULL, "path %d: %s", path, err);
    double p0 = inner(&y, &dy), p1 = inner(&x, &dx), p2 = inner(&w, &dw);
    double scale = 1e-4 * (1 + fabs(p0)) * (dt == F32 ? 1 : 1e-8);
    ck_assert_msg(fabs(p0 - p1) <= scale && fabs(p0 - p2) <= scale,
                  "path %d: <conv2d(x,w),dy> = %.17g, <x,dx> = %.17g, <w,dw> "
                  "= %.17g",
                  path, p0, p1, p2);
    h_tensor_free(&x);
    h_tensor_free(&w);
    h_tensor_free(&dy);
    h_tensor_free(&dx);
    h_tensor_free(&dw);
    h_tensor_free(&y);
  }
  free(ref);
  free(mag);
}

START_TEST(conv_backward) {
  conv_grad_case(2, 3, 7, 6, 4, 3, 3, (int64_t[]){1, 1, 0, 0, 1, 1, 1});
  conv_grad_case(2, 3, 9, 8, 4, 3, 3, (int64_t[]){2, 1, 1, 2, 1, 1, 1});
  conv_grad_case(2, 3, 9, 8, 4, 3, 2, (int64_t[]){1, 2, 0, 1, 2, 3, 1});
  /* Rows and columns no window reaches get a zero gradient. */
  conv_grad_case(1, 2, 8, 7, 3, 3, 2, (int64_t[]){3, 3, 0, 0, 1, 1, 1});
  /* Padding wider than the kernel reach. */
  conv_grad_case(1, 2, 3, 3, 2, 2, 2, (int64_t[]){1, 1, 2, 2, 1, 1, 1});
}
END_TEST

START_TEST(conv_backward_groups) {
  conv_grad_case(2, 4, 6, 6, 6, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 2});
  conv_grad_case(2, 6, 7, 5, 3, 2, 3, (int64_t[]){2, 1, 0, 1, 1, 2, 3});
  conv_grad_case(1, 5, 8, 8, 5, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 5});
  conv_grad_case(3, 4, 8, 7, 8, 3, 3, (int64_t[]){2, 2, 1, 1, 1, 1, 4});
  /* Enough images and channels for the parallel slots and OpenBLAS. */
  conv_grad_case(4, 16, 12, 12, 16, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
}
END_TEST

/* Strided views: dy column-stepped, w transposed by strides, dx and dw
 * written through column steps (odd columns untouched). Portable path. */
START_TEST(conv_backward_strided) {
  uint32_t dt = _i ? F64 : F32;
  int64_t a[7] = {1, 2, 1, 0, 1, 1, 1};
  int64_t OH = out_dim(6, 3, 1, 1, 1), OW = out_dim(7, 2, 2, 0, 1);
  h_tensor dy = mk(dt, 4, (int64_t[]){2, 4, OH, 2 * OW}, 1);
  dy.layout.shape[3] = OW;
  dy.layout.strides[3] = 2;
  h_tensor w = mk(dt, 4, (int64_t[]){2, 3, 3, 4}, 2);
  int64_t wshape[4] = {4, 3, 3, 2}, wstr[4] = {1, 4, 12, 36};
  memcpy(w.layout.shape, wshape, sizeof wshape);
  memcpy(w.layout.strides, wstr, sizeof wstr);
  h_tensor dx = mk(dt, 4, (int64_t[]){2, 3, 6, 14}, 3),
           dx0 = mk(dt, 4, (int64_t[]){2, 3, 6, 14}, 3);
  dx.layout.shape[3] = 7;
  dx.layout.strides[3] = 2;
  const char *err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA,
                                (h_tensor[]){dy, w}, 2, &dx, 1, a, 7, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  double ref[2 * 3 * 6 * 7], mag[2 * 3 * 6 * 7];
  data_ref(&dy, &w, (int64_t[]){2, 3, 6, 7}, a, ref, mag);
  compare4("dx", &dx, ref, mag, 1e-5);
  for (int64_t i = 1; i < dx.storage; i += 2)
    ck_assert(dx.values[i] == dx0.values[i]);
  h_tensor x = mk(dt, 4, (int64_t[]){2, 3, 6, 7}, 4);
  h_tensor dw = mk(dt, 4, (int64_t[]){4, 3, 3, 4}, 5),
           dw0 = mk(dt, 4, (int64_t[]){4, 3, 3, 4}, 5);
  dw.layout.shape[3] = 2;
  dw.layout.strides[3] = 2;
  err = harness_run(&hx, TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER,
                    (h_tensor[]){x, dy}, 2, &dw, 1, a, 7, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  filter_ref(&x, &dy, wshape, a, ref, mag);
  compare4("dw", &dw, ref, mag, 1e-5 * sqrt(2.0 * OH * OW));
  for (int64_t i = 1; i < dw.storage; i += 2)
    ck_assert(dw.values[i] == dw0.values[i]);
  h_tensor_free(&dy);
  h_tensor_free(&w);
  h_tensor_free(&dx);
  h_tensor_free(&dx0);
  h_tensor_free(&x);
  h_tensor_free(&dw);
  h_tensor_free(&dw0);
}
END_TEST

START_TEST(derivative_errors) {
  h_tensor x = h_tensor_new(F32, 4, (int64_t[]){2, 4, 5, 5}, NULL),
           w = h_tensor_new(F32, 4, (int64_t[]){6, 4, 3, 3}, NULL),
           dy = h_tensor_new(F32, 4, (int64_t[]){2, 6, 3, 3}, NULL),
           dy2 = h_tensor_new(F32, 4, (int64_t[]){2, 6, 4, 3}, NULL),
           px = h_tensor_new(F32, 4, (int64_t[]){2, 3, 6, 6}, NULL),
           pdy = h_tensor_new(F32, 4, (int64_t[]){2, 3, 3, 3}, NULL),
           pt = h_tensor_new(F32, 4, (int64_t[]){2, 3, 6, 5}, NULL);
  int64_t ok[7] = {1, 1, 0, 0, 1, 1, 1}, pa[6] = {2, 2, 2, 2, 0, 0};
  expect_error(TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, (h_tensor[]){dy2, w}, 2, &x,
               ok, 7,
               "conv2d_backward_data: dy is [2,6,4,3], expected [2,6,3,3] for "
               "dx (the output) [2,4,5,5] and w [6,4,3,3]");
  expect_error(TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, (h_tensor[]){dy}, 1, &x, ok,
               7,
               "conv2d_backward_data: expected 2 inputs (dy, w) and 1 output, "
               "got 1 and 1");
  expect_error(TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, (h_tensor[]){x, dy}, 2,
               &dy, ok, 7,
               "conv2d_backward_filter: dw (the output) [2,6,3,3] takes 6 "
               "input channels per group, but x [2,4,5,5] with groups 1 has "
               "4");
  expect_error(TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, (h_tensor[]){x, dy2}, 2,
               &w, ok, 7,
               "conv2d_backward_filter: dy is [2,6,4,3], expected [2,6,3,3] "
               "for x [2,4,5,5] and dw (the output) [6,4,3,3]");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD, (h_tensor[]){px, pt}, 2, &px,
               pa, 6,
               "max_pool2d_backward: dy is [2,3,6,5], expected [2,3,3,3] for "
               "x [2,3,6,6]");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD, (h_tensor[]){px, pdy}, 2,
               &pt, pa, 6,
               "max_pool2d_backward: dx (the output) is [2,3,6,5], expected "
               "[2,3,6,6] (shaped as x)");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, (h_tensor[]){px, pt}, 2, &pdy,
               pa, 6,
               "max_pool2d_select: t is [2,3,6,5], expected [2,3,6,6] (shaped "
               "as x)");
  expect_error(TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, (h_tensor[]){px}, 1, &pdy, pa,
               6,
               "max_pool2d_select: expected 2 inputs (x, t) and 1 output, got "
               "1 and 1");
  expect_error(TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, &pdy, 1, &pt, pa, 6,
               "avg_pool2d_backward: dy is [2,3,3,3], expected [2,3,3,2] for "
               "dx (the output) [2,3,6,5]");
  expect_error(TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, (h_tensor[]){pdy, px}, 2,
               &px, pa, 6,
               "avg_pool2d_backward: expected 1 input (dy) and 1 output, got 2 "
               "and 1");
  h_tensor_free(&x);
  h_tensor_free(&w);
  h_tensor_free(&dy);
  h_tensor_free(&dy2);
  h_tensor_free(&px);
  h_tensor_free(&pdy);
  h_tensor_free(&pt);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu conv");
  TCase *tc = tcase_create("conv");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, conv_basic);
  tcase_add_test(tc, conv_stride_pad_dilation);
  tcase_add_test(tc, conv_groups);
  tcase_add_test(tc, conv_large);
#ifdef TYTO_HAVE_DNNL
  tcase_add_test(tc, conv_path_switch);
  tcase_add_test(tc, conv_backward_path_switch);
#endif
  tcase_add_loop_test(tc, conv_strided, 0, 2);
  tcase_add_test(tc, conv_errors);
  tcase_add_test(tc, pool_errors);
  tcase_add_test(tc, conv_backward);
  tcase_add_test(tc, conv_backward_groups);
  tcase_add_loop_test(tc, conv_backward_strided, 0, 2);
  tcase_add_test(tc, derivative_errors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
