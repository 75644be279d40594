/*
 * MAX_POOL2D and AVG_POOL2D on the CPU plugin against references computed
 * here by naive loops (each f32 case through oneDNN, when the build has
 * it, and through the portable path), and the derivatives
 * MAX_POOL2D_BACKWARD/SELECT and AVG_POOL2D_BACKWARD against scatter loops
 * and by the adjoint identities with the forward ops, with ties and NaNs
 * in max windows, strided layouts, and the 2x2 stride-2 rows of
 * plugins/cpu/window2.c bit for bit. Max pooling is exact; average pooling
 * within relative 1e-6 (f32), 1e-14 (f64).
 */
#include "cpu/conv_fixture.h"

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

/* The first maximum (row-major) of window (oh, ow) of plane (n, c) of x:
 * its row and column, or -1 for a window without elements. */
static void first_max(const h_tensor *x, const int64_t *a, int64_t n, int64_t c,
                      int64_t oh, int64_t ow, int64_t *bh, int64_t *bw) {
  const int64_t *xs = x->layout.shape;
  double best = 0;
  *bh = *bw = -1;
  for (int64_t kh = 0; kh < a[0]; kh++)
    for (int64_t kw = 0; kw < a[1]; kw++) {
      int64_t ih = oh * a[2] - a[4] + kh, iw = ow * a[3] - a[5] + kw;
      if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
        continue;
      double v = x->values[h_at(x, (int64_t[]){n, c, ih, iw})];
      if (*bh < 0 || v > best) {
        best = v;
        *bh = ih;
        *bw = iw;
      }
    }
}

/* The three pooling derivatives of one geometry on both dtypes against
 * loops here, x coarse (values -4..3) so that windows hold ties, and the
 * adjoint identities <select(x, t), dy> = <t, max_backward(x, dy)> and
 * <avg_pool2d(t), dy> = <t, avg_backward(dy)>. */
static void pool_grad_case(int64_t N, int64_t C, int64_t H, int64_t W,
                           const int64_t *a) {
  int64_t OH = out_dim(H, a[0], a[2], a[4], 1),
          OW = out_dim(W, a[1], a[3], a[5], 1);
  int64_t xs[4] = {N, C, H, W}, ys[4] = {N, C, OH, OW};
  int64_t nx = N * C * H * W;
  double *ref = malloc((size_t)nx * sizeof *ref),
         *mag = malloc((size_t)nx * sizeof *mag);
  for (int f = 0; f < 2; f++) {
    uint32_t dt = f ? F64 : F32;
    double rtol = dt == F32 ? 1e-6 : 1e-14;
    h_tensor x = mk(dt, 4, xs, 12), t = mk(dt, 4, xs, 13),
             dy = mk(dt, 4, ys, 14), dx = mk(dt, 4, xs, 15),
             sel = mk(dt, 4, ys, 16), y = mk(dt, 4, ys, 17);
    for (int64_t i = 0; i < x.storage; i++)
      x.values[i] = floor(x.values[i] * 2);
    /* MAX_POOL2D_BACKWARD */
    const char *err =
        harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                    (h_tensor[]){x, dy}, 2, &dx, 1, a, 6, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t i = 0; i < nx; i++)
      ref[i] = 0, mag[i] = 0;
    int ties = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            int64_t bh, bw;
            first_max(&x, a, n, c, oh, ow, &bh, &bw);
            double g = dy.values[h_at(&dy, (int64_t[]){n, c, oh, ow})];
            ref[((n * C + c) * H + bh) * W + bw] += g;
            /* Tie: another element of the window equals the maximum. */
            double m = x.values[h_at(&x, (int64_t[]){n, c, bh, bw})];
            int count = 0;
            for (int64_t kh = 0; kh < a[0]; kh++)
              for (int64_t kw = 0; kw < a[1]; kw++) {
                int64_t ih = oh * a[2] - a[4] + kh, iw = ow * a[3] - a[5] + kw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W &&
                    x.values[h_at(&x, (int64_t[]){n, c, ih, iw})] == m)
                  count++;
              }
            ties += count > 1;
          }
    for (int64_t i = 0; i < nx; i++)
      mag[i] = 1e-30 + 4 * fabs(ref[i]) + 8;
    compare4("max dx", &dx, ref, mag, rtol);
    ck_assert_msg(ties > 0, "no tie in any window: the case tests too little");
    /* MAX_POOL2D_SELECT */
    err = harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, (h_tensor[]){x, t},
                      2, &sel, 1, a, 6, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            int64_t bh, bw;
            first_max(&x, a, n, c, oh, ow, &bh, &bw);
            ck_assert(sel.values[h_at(&sel, (int64_t[]){n, c, oh, ow})] ==
                      t.values[h_at(&t, (int64_t[]){n, c, bh, bw})]);
          }
    double l = inner(&sel, &dy), r = inner(&t, &dx);
    ck_assert_msg(fabs(l - r) <= 1e-5 * (1 + fabs(l)),
                  "<select(x,t),dy> = %.17g, <t,max_backward(x,dy)> = %.17g", l,
                  r);
    /* AVG_POOL2D_BACKWARD */
    err = harness_run(&hx, TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, &dy, 1, &dx, 1,
                      a, 6, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    for (int64_t i = 0; i < nx; i++)
      ref[i] = mag[i] = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            int count = 0;
            for (int pass = 0; pass < 2; pass++)
              for (int64_t kh = 0; kh < a[0]; kh++)
                for (int64_t kw = 0; kw < a[1]; kw++) {
                  int64_t ih = oh * a[2] - a[4] + kh,
                          iw = ow * a[3] - a[5] + kw;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                    continue;
                  if (pass == 0) {
                    count++;
                    continue;
                  }
                  double g =
                      dy.values[h_at(&dy, (int64_t[]){n, c, oh, ow})] / count;
                  ref[((n * C + c) * H + ih) * W + iw] += g;
                  mag[((n * C + c) * H + ih) * W + iw] += fabs(g);
                }
          }
    for (int64_t i = 0; i < nx; i++)
      mag[i] = mag[i] * 4 + 1e-300;
    compare4("avg dx", &dx, ref, mag, rtol);
    err = harness_run(&hx, TYTO_PLUGIN_OP_AVG_POOL2D, &t, 1, &y, 1, a, 6, NULL,
                      0);
    ck_assert_msg(err == NULL, "%s", err);
    l = inner(&y, &dy);
    r = inner(&t, &dx);
    ck_assert_msg(fabs(l - r) <= (dt == F32 ? 1e-5 : 1e-12) * (1 + fabs(l)),
                  "<avg_pool2d(t),dy> = %.17g, <t,avg_backward(dy)> = %.17g", l,
                  r);
    h_tensor_free(&x);
    h_tensor_free(&t);
    h_tensor_free(&dy);
    h_tensor_free(&dx);
    h_tensor_free(&sel);
    h_tensor_free(&y);
  }
  free(ref);
  free(mag);
}

START_TEST(pool_backward) {
  pool_grad_case(2, 3, 8, 8, (int64_t[]){2, 2, 2, 2, 0, 0});
  /* Tiling windows with a row and a column left over (the 2x2 path and
   * the general tiled one). */
  pool_grad_case(2, 3, 7, 9, (int64_t[]){2, 2, 2, 2, 0, 0});
  pool_grad_case(1, 2, 10, 8, (int64_t[]){3, 3, 3, 3, 0, 0});
  pool_grad_case(2, 3, 7, 8, (int64_t[]){3, 3, 2, 2, 1, 1});
  pool_grad_case(1, 2, 9, 6, (int64_t[]){3, 2, 1, 2, 1, 0});
  pool_grad_case(1, 4, 5, 5, (int64_t[]){5, 5, 3, 3, 2, 2});
  /* Overlapping windows, rows no window reaches (H 8, stride 3). */
  pool_grad_case(2, 2, 8, 7, (int64_t[]){2, 3, 3, 1, 0, 1});
}
END_TEST

/* A max pooling ties on every window and keeps padding out: all ones with
 * a -inf in the corner; the gradient lands on each window's first element
 * inside x. NaN wins over numbers and the first NaN is taken. */
START_TEST(pool_backward_ties_and_nan) {
  int64_t a[6] = {3, 3, 2, 2, 1, 1};
  h_tensor x = h_tensor_new(F64, 4, (int64_t[]){1, 1, 5, 5}, NULL),
           dy = h_tensor_new(F64, 4, (int64_t[]){1, 1, 3, 3}, NULL),
           dx = h_tensor_new(F64, 4, (int64_t[]){1, 1, 5, 5}, NULL);
  for (int i = 0; i < 25; i++)
    x.values[i] = 1;
  x.values[0] = -INFINITY;
  for (int i = 0; i < 9; i++)
    dy.values[i] = i + 1;
  ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                                 (h_tensor[]){x, dy}, 2, &dx, 1, a, 6, NULL,
                                 0));
  /* Window (oh, ow) starts at (2oh-1, 2ow-1) clipped to 0; window (0,0)
   * skips the -inf at (0,0) and takes (0,1). */
  double want[25] = {0};
  want[1] = 1;
  for (int oh = 0; oh < 3; oh++)
    for (int ow = 0; ow < 3; ow++)
      if (oh || ow) {
        int h0 = oh ? 2 * oh - 1 : 0, w0 = ow ? 2 * ow - 1 : 0;
        want[h0 * 5 + w0] += oh * 3 + ow + 1;
      }
  for (int i = 0; i < 25; i++)
    ck_assert_msg(dx.values[i] == want[i], "dx[%d] = %g, want %g", i,
                  dx.values[i], want[i]);
  /* Two NaNs in window (1,1) (rows 1..3, cols 1..3): the first is at
   * (2,1), the second at (2,3); a larger number at (1,1) loses to them. */
  x.values[2 * 5 + 1] = NAN;
  x.values[2 * 5 + 3] = NAN;
  x.values[1 * 5 + 1] = 5;
  h_tensor t = h_tensor_new(F64, 4, (int64_t[]){1, 1, 5, 5}, NULL),
           sel = h_tensor_new(F64, 4, (int64_t[]){1, 1, 3, 3}, NULL);
  for (int i = 0; i < 25; i++)
    t.values[i] = 100 + i;
  ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_SELECT,
                                 (h_tensor[]){x, t}, 2, &sel, 1, a, 6, NULL,
                                 0));
  ck_assert(sel.values[1 * 3 + 1] == 100 + 2 * 5 + 1);
  ck_assert(sel.values[0] == 100 + 1 * 5 + 1); /* the 5, window rows 0..1 */
  h_tensor_free(&x);
  h_tensor_free(&dy);
  h_tensor_free(&dx);
  h_tensor_free(&t);
  h_tensor_free(&sel);
}
END_TEST

/* The 2x2, stride-2 path: a NaN wins its window (the first of two), a tie
 * goes to the first element, and the odd last row and column get zeros. */
START_TEST(pool_backward_2x2_nan_and_edges) {
  int64_t a[6] = {2, 2, 2, 2, 0, 0};
  for (int f = 0; f < 2; f++) {
    uint32_t dt = f ? F64 : F32;
    h_tensor x = h_tensor_new(dt, 4, (int64_t[]){1, 1, 5, 5}, NULL),
             dy = h_tensor_new(dt, 4, (int64_t[]){1, 1, 2, 2}, NULL),
             dx = h_tensor_new(dt, 4, (int64_t[]){1, 1, 5, 5}, NULL);
    for (int i = 0; i < 25; i++)
      x.values[i] = 1, dx.values[i] = 77; /* 77: must be overwritten */
    x.values[0 * 5 + 1] = 9;              /* window (0,0): a plain maximum */
    x.values[1 * 5 + 2] = NAN; /* window (0,1): 1, 9, NaN, NaN: the first NaN */
    x.values[1 * 5 + 3] = NAN;
    x.values[0 * 5 + 3] = 9;
    /* window (1,0): all ties -> the first; window (1,1): -inf first */
    x.values[2 * 5 + 2] = -INFINITY;
    for (int i = 0; i < 4; i++)
      dy.values[i] = 10 + i;
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                                   (h_tensor[]){x, dy}, 2, &dx, 1, a, 6, NULL,
                                   0));
    double want[25] = {0};
    want[0 * 5 + 1] = 10;
    want[1 * 5 + 2] = 11;
    want[2 * 5 + 0] = 12;
    want[2 * 5 + 3] = 13;
    for (int i = 0; i < 25; i++)
      ck_assert_msg(dx.values[i] == want[i], "%s dx[%d] = %g, want %g",
                    f ? "f64" : "f32", i, dx.values[i], want[i]);
    h_tensor_free(&x);
    h_tensor_free(&dy);
    h_tensor_free(&dx);
  }
}
END_TEST

/* The 2x2, stride-2 rows (plugins/cpu/window2.c: four windows at a time,
 * then one at a time) against the operations written out here, bit for
 * bit: planes 21 wide (ten windows a row, the last column unused) drawn
 * from values that tie, signed zeros, infinities, NaNs of both signs and
 * values whose sums round differently in another order. The maximum of
 * a window holding a NaN is NaN; otherwise the first of its largest
 * values, row-major (so -0 before +0 gives -0). The average is ((0 + a) +
 * b + c + d) / 4 in the dtype. The gradient goes to the first maximum,
 * NaN first, and +0 to the other three places and the unused column. */
static int same_bits(double got, double want) {
  return isnan(want) ? isnan(got)
                     : got == want && !signbit(got) == !signbit(want);
}

START_TEST(pool_2x2_rows_bits) {
  static const double palette[] = {1.5,  -2.0, 0.0,  -0.0, INFINITY, -INFINITY,
                                   NAN,  1.5,  3.25, -7.0, 0.0,      1.5,
                                   -NAN, 2.0,  0.1,  1e8,  3.3e-5};
  /* 21 wide: ten windows a row, two runs of four and two alone. */
  int64_t a[6] = {2, 2, 2, 2, 0, 0}, H = 4, W = 21, OH = 2, OW = 10;
  unsigned rng = 12345;
  for (int f = 0; f < 2; f++) {
    uint32_t dt = f ? F64 : F32;
    int64_t N = 3, C = 2;
    h_tensor x = h_tensor_new(dt, 4, (int64_t[]){N, C, H, W}, NULL),
             y = h_tensor_new(dt, 4, (int64_t[]){N, C, OH, OW}, NULL),
             dy = h_tensor_new(dt, 4, (int64_t[]){N, C, OH, OW}, NULL),
             dx = h_tensor_new(dt, 4, (int64_t[]){N, C, H, W}, NULL);
    for (int64_t i = 0; i < N * C * H * W; i++) {
      rng = rng * 1103515245u + 12345u;
      x.values[i] = palette[(rng >> 16) % 17];
      if (!f) /* the values the f32 kernels see */
        x.values[i] = (float)x.values[i];
      dx.values[i] = 77; /* must be overwritten */
    }
    /* Windows whose sum rounds to 1 in the order written and to 1 + 2^-23
     * added pairwise (in each run of four and alone). */
    for (int w = 0; w < 10; w += 3) {
      double *r0 = x.values + 2 * w, *r1 = r0 + W;
      r0[0] = 1.0;
      r0[1] = r1[0] = r1[1] = 0x1p-24;
    }
    for (int64_t i = 0; i < N * C * OH * OW; i++)
      dy.values[i] = (double)(i + 1);
    /* op 2: the average again without oneDNN, which takes contiguous f32
     * average pooling where it is built in. */
    for (int op = 0; op < 3; op++) {
      uint32_t code =
          op ? TYTO_PLUGIN_OP_AVG_POOL2D : TYTO_PLUGIN_OP_MAX_POOL2D;
      set_path(op == 2);
      ck_assert_ptr_null(harness_run(&hx, code, &x, 1, &y, 1, a, 6, NULL, 0));
      for (int64_t p = 0; p < N * C; p++)
        for (int64_t oh = 0; oh < OH; oh++)
          for (int64_t ow = 0; ow < OW; ow++) {
            const double *r0 = x.values + (p * H + 2 * oh) * W + 2 * ow,
                         *r1 = r0 + W;
            double v[4] = {r0[0], r0[1], r1[0], r1[1]}, want;
            if (op) {
              want = f ? (((0.0 + v[0]) + v[1]) + v[2] + v[3]) / 4
                       : (double)(((((0.0f + (float)v[0]) + (float)v[1]) +
                                    (float)v[2]) +
                                   (float)v[3]) /
                                  4.0f);
            } else {
              want = v[0];
              for (int k = 1; k < 4; k++)
                if (isnan(v[k]) || (!isnan(want) && v[k] > want))
                  want = v[k];
            }
            double got = y.values[(p * OH + oh) * OW + ow];
            ck_assert_msg(
                same_bits(got, want),
                "%s %s plane %lld (%lld,%lld): %g, want %g", f ? "f64" : "f32",
                op == 2 ? "avg (no oneDNN)"
                : op    ? "avg"
                        : "max",
                (long long)p, (long long)oh, (long long)ow, got, want);
          }
    }
    set_path(0);
    ck_assert_ptr_null(harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                                   (h_tensor[]){x, dy}, 2, &dx, 1, a, 6, NULL,
                                   0));
    for (int64_t p = 0; p < N * C; p++)
      for (int64_t ih = 0; ih < H; ih++)
        for (int64_t iw = 0; iw < W; iw++) {
          double want = 0;
          int64_t oh = ih / 2, ow = iw / 2;
          if (ow < OW) {
            const double *r0 = x.values + (p * H + 2 * oh) * W + 2 * ow,
                         *r1 = r0 + W;
            double v[4] = {r0[0], r0[1], r1[0], r1[1]};
            int best = 0;
            for (int k = 1; k < 4; k++)
              if (!isnan(v[best]) && (isnan(v[k]) || v[k] > v[best]))
                best = k;
            if (best == (ih % 2) * 2 + iw % 2)
              want = dy.values[(p * OH + oh) * OW + ow];
          }
          double got = dx.values[(p * H + ih) * W + iw];
          ck_assert_msg(same_bits(got, want),
                        "%s backward plane %lld (%lld,%lld): %g, want %g",
                        f ? "f64" : "f32", (long long)p, (long long)ih,
                        (long long)iw, got, want);
        }
    h_tensor_free(&x);
    h_tensor_free(&y);
    h_tensor_free(&dy);
    h_tensor_free(&dx);
  }
}
END_TEST

/* Pool derivatives through strided layouts: x and dy with swapped N and C
 * strides, the gradient written column-stepped (odd columns untouched). */
START_TEST(pool_backward_strided) {
  int64_t a[6] = {3, 3, 2, 2, 1, 1};
  h_tensor x = mk(F32, 4, (int64_t[]){3, 2, 7, 8}, 6);
  x.layout.shape[0] = 2;
  x.layout.shape[1] = 3;
  x.layout.strides[0] = 56;
  x.layout.strides[1] = 112;
  h_tensor dy = mk(F32, 4, (int64_t[]){3, 2, 4, 4}, 7);
  dy.layout.shape[0] = 2;
  dy.layout.shape[1] = 3;
  dy.layout.strides[0] = 16;
  dy.layout.strides[1] = 32;
  h_tensor dx = mk(F32, 4, (int64_t[]){2, 3, 7, 16}, 8),
           dx0 = mk(F32, 4, (int64_t[]){2, 3, 7, 16}, 8);
  dx.layout.shape[3] = 8;
  dx.layout.strides[3] = 2;
  for (int op = 0; op < 2; op++) {
    const char *err =
        op ? harness_run(&hx, TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, &dy, 1, &dx,
                         1, a, 6, NULL, 0)
           : harness_run(&hx, TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                         (h_tensor[]){x, dy}, 2, &dx, 1, a, 6, NULL, 0);
    ck_assert_msg(err == NULL, "%s", err);
    double ref[2 * 3 * 7 * 8] = {0}, mag[2 * 3 * 7 * 8];
    for (int64_t n = 0; n < 2; n++)
      for (int64_t c = 0; c < 3; c++)
        for (int64_t oh = 0; oh < 4; oh++)
          for (int64_t ow = 0; ow < 4; ow++) {
            double g = dy.values[h_at(&dy, (int64_t[]){n, c, oh, ow})];
            int64_t h0 = oh * 2 - 1, w0 = ow * 2 - 1, bh, bw;
            if (op) {
              int64_t hs = h0 < 0 ? 0 : h0, ws = w0 < 0 ? 0 : w0,
                      he = h0 + 3 > 7 ? 7 : h0 + 3,
                      we = w0 + 3 > 8 ? 8 : w0 + 3;
              for (int64_t ih = hs; ih < he; ih++)
                for (int64_t iw = ws; iw < we; iw++)
                  ref[((n * 3 + c) * 7 + ih) * 8 + iw] +=
                      g / (double)((he - hs) * (we - ws));
            } else {
              first_max(&x, a, n, c, oh, ow, &bh, &bw);
              ref[((n * 3 + c) * 7 + bh) * 8 + bw] += g;
            }
          }
    for (int i = 0; i < 2 * 3 * 7 * 8; i++)
      mag[i] = 1e-5 * (1 + fabs(ref[i]));
    compare4("dx", &dx, ref, mag, 1);
    for (int64_t i = 1; i < dx.storage; i += 2)
      ck_assert(dx.values[i] == dx0.values[i]);
  }
  h_tensor_free(&x);
  h_tensor_free(&dy);
  h_tensor_free(&dx);
  h_tensor_free(&dx0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu pool2d");
  TCase *tc = tcase_create("pool2d");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, pooling, 0, 2);
  tcase_add_loop_test(tc, pooling_strided, 0, 2);
  tcase_add_test(tc, pool_backward);
  tcase_add_test(tc, pool_backward_ties_and_nan);
  tcase_add_test(tc, pool_backward_2x2_nan_and_edges);
  tcase_add_test(tc, pool_backward_strided);
  tcase_add_test(tc, pool_2x2_rows_bits);
  suite_add_tcase(s, tc);
  return test_run(s);
}
