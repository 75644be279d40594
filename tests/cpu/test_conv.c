/*
 * CONV2D, MAX_POOL2D and AVG_POOL2D on the CPU plugin against float64
 * references computed here by naive loops. Each f32 case runs twice: through
 * oneDNN (when the build has it) and through the portable im2col + GEMM /
 * direct-loop path (TYTO_CPU_NO_DNNL=1, read at prepare); f64 and strided
 * layouts always take the portable path. Covers stride, padding, dilation,
 * groups (depthwise included), bias, strided inputs and outputs, and the
 * error messages.
 *
 * Inputs are multiples of 1/64 in [-2, 2], exact in f32. Tolerances:
 * convolution |got - ref| <= tol * sqrt(K) * (sum |x w| + |bias|), K =
 * C/groups * KH * KW, tol = 1e-5 (f32), 1e-13 (f64); max pooling exact;
 * average pooling relative 1e-6 (f32), 1e-14 (f64).
 */
#include "cpu/harness.h"

#include <math.h>

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  unsetenv("TYTO_CPU_NO_DNNL");
  harness_close(&hx);
}

static void fill(h_tensor *t, unsigned seed) {
  uint32_t s = seed * 2654435761u + 777u;
  for (int64_t i = 0; i < t->storage; i++) {
    s = s * 1664525u + 1013904223u;
    t->values[i] = (double)((int)(s >> 24) - 128) / 64.0;
  }
}

static h_tensor mk(uint32_t dt, uint32_t rank, const int64_t *shape,
                   unsigned seed) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  fill(&t, seed);
  return t;
}

static void set_path(int fallback) {
  if (fallback)
    setenv("TYTO_CPU_NO_DNNL", "1", 1);
  else
    unsetenv("TYTO_CPU_NO_DNNL");
}

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

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
  for (int fallback = 0; fallback < 2; fallback++) {
    set_path(fallback);
    tyto_plugin_kernel *k = NULL;
    tyto_plugin_kernel_info ki = {sizeof ki, 0};
    ck_assert_ptr_null(f->prepare(dev->handle, &d, &k, &ki));
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

/* a = kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w. */
static void pool_check(uint32_t op, const h_tensor *x, const h_tensor *y,
                       const int64_t *a) {
  const int64_t *ys = y->layout.shape, *xs = x->layout.shape;
  double rtol = y->layout.dtype == F32 ? 1e-6 : 1e-14;
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t c = 0; c < ys[1]; c++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++) {
          double best = -INFINITY, sum = 0;
          int count = 0;
          for (int64_t kh = 0; kh < a[0]; kh++)
            for (int64_t kw = 0; kw < a[1]; kw++) {
              int64_t ih = oh * a[2] - a[4] + kh, iw = ow * a[3] - a[5] + kw;
              if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
                continue;
              double v = x->values[h_at(x, (int64_t[]){n, c, ih, iw})];
              best = v > best ? v : best;
              sum += v;
              count++;
            }
          double got = y->values[h_at(y, (int64_t[]){n, c, oh, ow})];
          if (op == TYTO_PLUGIN_OP_MAX_POOL2D)
            ck_assert_msg(got == best, "max at %lld,%lld,%lld,%lld: %g vs %g",
                          (long long)n, (long long)c, (long long)oh,
                          (long long)ow, got, best);
          else
            ck_assert_msg(h_close(got, sum / count, rtol, 1e-12),
                          "avg at %lld,%lld,%lld,%lld: %.17g vs %.17g",
                          (long long)n, (long long)c, (long long)oh,
                          (long long)ow, got, sum / count);
        }
}

static void pool_case(uint32_t op, int64_t N, int64_t C, int64_t H, int64_t W,
                      const int64_t *a) {
  for (int path = 0; path < 3; path++) {
    uint32_t dt = path == 2 ? F64 : F32;
    set_path(path == 1);
    h_tensor x = mk(dt, 4, (int64_t[]){N, C, H, W}, 5);
    int64_t OH = out_dim(H, a[0], a[2], a[4], 1),
            OW = out_dim(W, a[1], a[3], a[5], 1);
    h_tensor y = h_tensor_new(dt, 4, (int64_t[]){N, C, OH, OW}, NULL);
    const char *err = harness_run(&hx, op, &x, 1, &y, 1, a, 6, NULL, 0);
    ck_assert_msg(err == NULL, "path %d: %s", path, err);
    pool_check(op, &x, &y, a);
    h_tensor_free(&x);
    h_tensor_free(&y);
  }
}

START_TEST(pooling) {
  uint32_t op = _i ? TYTO_PLUGIN_OP_AVG_POOL2D : TYTO_PLUGIN_OP_MAX_POOL2D;
  pool_case(op, 2, 3, 8, 8, (int64_t[]){2, 2, 2, 2, 0, 0});
  pool_case(op, 2, 3, 7, 8, (int64_t[]){3, 3, 2, 2, 1, 1});
  pool_case(op, 1, 2, 9, 6, (int64_t[]){3, 2, 1, 2, 1, 0});
  pool_case(op, 1, 4, 5, 5, (int64_t[]){5, 5, 3, 3, 2, 2});
}
END_TEST

START_TEST(pooling_strided) {
  uint32_t op = _i ? TYTO_PLUGIN_OP_AVG_POOL2D : TYTO_PLUGIN_OP_MAX_POOL2D;
  int64_t a[6] = {3, 3, 2, 2, 1, 1};
  /* x [2,3,7,8] viewed from a [3,2,7,8] buffer with N and C swapped. */
  h_tensor x = mk(F32, 4, (int64_t[]){3, 2, 7, 8}, 6);
  x.layout.shape[0] = 2;
  x.layout.shape[1] = 3;
  x.layout.strides[0] = 56;
  x.layout.strides[1] = 112;
  h_tensor y = h_tensor_new(F32, 4, (int64_t[]){2, 3, 4, 4}, NULL);
  const char *err = harness_run(&hx, op, &x, 1, &y, 1, a, 6, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  pool_check(op, &x, &y, a);
  h_tensor_free(&x);
  h_tensor_free(&y);
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
#endif
  tcase_add_loop_test(tc, conv_strided, 0, 2);
  tcase_add_loop_test(tc, pooling, 0, 2);
  tcase_add_loop_test(tc, pooling_strided, 0, 2);
  tcase_add_test(tc, conv_errors);
  tcase_add_test(tc, pool_errors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
