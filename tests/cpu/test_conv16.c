/*
 * CONV2D, CONV2D_BACKWARD_DATA and CONV2D_BACKWARD_FILTER in bf16 and f16
 * on the CPU plugin against float64 references computed here from the
 * exact 16-bit inputs, on each path an op can take (gemm16_ref.h: bf16 on
 * oneDNN, bf16 through f32, f16): strides, padding, dilation, groups
 * (depthwise included), bias, 1x1 kernels, channel counts that reach
 * oneDNN's blocked kernels and the first layer of the seed CNN, strided,
 * offset and flipped layouts in and out, empty batches, NaN and
 * infinities, and the refusal of mixed dtypes.
 *
 * One reference for the three ops: every (image, output channel, output
 * position, input channel, tap) whose tap reads x (not the padding) adds
 * x * w to y, dy * w to dx, or x * dy to dw. Tolerance (gemm16_ref.h): an
 * element summing n terms (the bias counts as one) whose absolute values
 * sum to S passes when |got - want| <= (n + 1) 2^-24 S (1 + u) + u |want|
 * (+ n 2^-126), u = 2^-8 for bf16 and 2^-11 for f16: f32 accumulation in
 * any order, then one rounding to the dtype. Specials never meet the
 * padding (ops.md leaves 0 * inf there open, and the kit never tests it).
 */
#include "cpu/gemm16_ref.h"

static harness hx;

static void setup(void) {
  harness_open(&hx);
}
static void teardown(void) {
  path_leave();
  harness_close(&hx);
}

#define CONV TYTO_PLUGIN_OP_CONV2D
#define DATA TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA
#define FILTER TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* The roles of one op's tensors: inputs then the output. */
typedef struct roles {
  const h_tensor *x, *w, *y, *b;
} roles;

static roles roles_of(uint32_t op, const h_tensor *in, uint32_t n_in,
                      const h_tensor *out) {
  roles r = {NULL, NULL, NULL, NULL};
  if (op == CONV) {
    r.x = &in[0], r.w = &in[1], r.y = out;
    r.b = n_in > 2 ? &in[2] : NULL;
  } else if (op == DATA) {
    r.y = &in[0], r.w = &in[1], r.x = out;
  } else {
    r.x = &in[0], r.y = &in[1], r.w = out;
  }
  return r;
}

/* a = stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups. */
static void check(uint32_t op, const h_tensor *in, uint32_t n_in,
                  const h_tensor *out, const int64_t *a) {
  roles r = roles_of(op, in, n_in, out);
  const int64_t *xs = r.x->layout.shape, *ws = r.w->layout.shape,
                *ys = r.y->layout.shape, *os = out->layout.shape;
  int64_t G = a[6], Cg = xs[1] / G, Og = ws[0] / G;
  int64_t total = os[0] * os[1] * os[2] * os[3];
  double *want = calloc((size_t)total + 1, sizeof *want),
         *mag = calloc((size_t)total + 1, sizeof *mag);
  int64_t *cnt = calloc((size_t)total + 1, sizeof *cnt);
  for (int64_t n = 0; n < ys[0]; n++)
    for (int64_t o = 0; o < ys[1]; o++)
      for (int64_t oh = 0; oh < ys[2]; oh++)
        for (int64_t ow = 0; ow < ys[3]; ow++)
          for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < ws[2]; kh++)
              for (int64_t kw = 0; kw < ws[3]; kw++) {
                int64_t ih = oh * a[0] - a[2] + kh * a[4],
                        iw = ow * a[1] - a[3] + kw * a[5], xc = o / Og * Cg + c;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3])
                  continue;
                double xv = r.x->values[h_at(r.x, (int64_t[]){n, xc, ih, iw})],
                       wv = r.w->values[h_at(r.w, (int64_t[]){o, c, kh, kw})],
                       yv = r.y->values[h_at(r.y, (int64_t[]){n, o, oh, ow})];
                int64_t at;
                double p;
                if (op == CONV)
                  at = ((n * os[1] + o) * os[2] + oh) * os[3] + ow, p = xv * wv;
                else if (op == DATA)
                  at = ((n * os[1] + xc) * os[2] + ih) * os[3] + iw,
                  p = yv * wv;
                else
                  at = ((o * os[1] + c) * os[2] + kh) * os[3] + kw, p = xv * yv;
                want[at] += p;
                mag[at] += fabs(p);
                cnt[at]++;
              }
  int64_t idx[4];
  for (int64_t at = 0; at < total; at++) {
    int64_t rest = at;
    for (int i = 4; i-- > 0;) {
      idx[i] = rest % os[i];
      rest /= os[i];
    }
    if (r.b) {
      double bv = r.b->values[h_at(r.b, (int64_t[]){idx[1]})];
      want[at] += bv;
      mag[at] += fabs(bv);
      cnt[at]++;
    }
    double got = out->values[h_at(out, idx)],
           bound = sum_bound(out->layout.dtype, cnt[at], mag[at], want[at]);
    ck_assert_msg(within(out->layout.dtype, got, want[at], bound),
                  "%s [%lld,%lld,%lld,%lld] = %.9g, expected %.9g (bound "
                  "%.3g)",
                  op == CONV   ? "y"
                  : op == DATA ? "dx"
                               : "dw",
                  (long long)idx[0], (long long)idx[1], (long long)idx[2],
                  (long long)idx[3], got, want[at], bound);
  }
  free(want);
  free(mag);
  free(cnt);
}

static void run_ok(uint32_t op, h_tensor *in, uint32_t n_in, h_tensor *out,
                   const int64_t *a) {
  const char *err = harness_run(&hx, op, in, n_in, out, 1, a, 7, NULL, 0);
  ck_assert_msg(err == NULL, "%s", err);
  check(op, in, n_in, out, a);
}

/* Fresh contiguous tensors of one geometry for op, filled from seed. */
typedef struct tensors {
  h_tensor in[3], out;
  uint32_t n_in;
} tensors;

static tensors make(uint32_t op, uint32_t dt, int64_t N, int64_t C, int64_t H,
                    int64_t W, int64_t O, int64_t KH, int64_t KW,
                    const int64_t *a, int bias) {
  int64_t OH = out_dim(H, KH, a[0], a[2], a[4]),
          OW = out_dim(W, KW, a[1], a[3], a[5]);
  int64_t xs[4] = {N, C, H, W}, ws[4] = {O, C / a[6], KH, KW},
          ys[4] = {N, O, OH, OW}, bs[1] = {O};
  tensors t;
  memset(&t, 0, sizeof t);
  const int64_t *shape[3] = {op == DATA ? ys : xs, op == FILTER ? ys : ws, bs};
  t.n_in = op == CONV && bias ? 3 : 2;
  for (uint32_t i = 0; i < t.n_in; i++) {
    t.in[i] = h_tensor_new(dt, i < 2 ? 4 : 1, shape[i], NULL);
    fill16(&t.in[i], 11 + i);
  }
  t.out = h_tensor_new(dt, 4, op == CONV ? ys : op == DATA ? xs : ws, NULL);
  return t;
}

static void drop(tensors *t) {
  for (uint32_t i = 0; i < t->n_in; i++)
    h_tensor_free(&t->in[i]);
  h_tensor_free(&t->out);
}

/* One geometry through the three ops. */
static void all_ops(uint32_t dt, int64_t N, int64_t C, int64_t H, int64_t W,
                    int64_t O, int64_t KH, int64_t KW, const int64_t *a) {
  uint32_t ops[3] = {CONV, DATA, FILTER};
  for (int i = 0; i < 3; i++)
    for (int bias = 0; bias < (i == 0 ? 2 : 1); bias++) {
      tensors t = make(ops[i], dt, N, C, H, W, O, KH, KW, a, bias);
      run_ok(ops[i], t.in, t.n_in, &t.out, a);
      drop(&t);
    }
}

START_TEST(basic) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  all_ops(dt, 2, 3, 7, 6, 4, 3, 3, (int64_t[]){1, 1, 0, 0, 1, 1, 1});
  all_ops(dt, 3, 5, 4, 4, 6, 1, 1, (int64_t[]){1, 1, 0, 0, 1, 1, 1});
  all_ops(dt, 2, 4, 6, 5, 3, 2, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
}
END_TEST

START_TEST(stride_pad_dilation) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  all_ops(dt, 2, 3, 9, 8, 4, 3, 3, (int64_t[]){2, 1, 1, 2, 1, 1, 1});
  all_ops(dt, 2, 3, 9, 8, 4, 3, 2, (int64_t[]){1, 2, 0, 1, 2, 3, 1});
  all_ops(dt, 1, 2, 10, 11, 3, 3, 3, (int64_t[]){3, 2, 2, 1, 2, 2, 1});
  /* Padding wider than the kernel's reach: border outputs see nothing. */
  all_ops(dt, 1, 2, 3, 3, 2, 2, 2, (int64_t[]){1, 1, 2, 2, 1, 1, 1});
}
END_TEST

START_TEST(groups) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  all_ops(dt, 2, 4, 6, 6, 6, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 2});
  all_ops(dt, 2, 8, 7, 7, 8, 3, 3, (int64_t[]){2, 2, 1, 1, 1, 1, 8});
  all_ops(dt, 1, 32, 6, 6, 32, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 2});
}
END_TEST

/* Channel counts of real networks: the blocked kernels' 16-channel
 * blocks, an RGB first layer, the seed CNN's first layer (x [N, 1, 28,
 * 28], w [32, 1, 5, 5], padding 2), whose data gradient runs on plain
 * formats, and a 1x1 layer (plain formats too). */
START_TEST(network_shapes) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  all_ops(dt, 2, 16, 10, 10, 32, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
  all_ops(dt, 2, 3, 12, 12, 16, 3, 3, (int64_t[]){1, 1, 1, 1, 1, 1, 1});
  all_ops(dt, 2, 1, 28, 28, 32, 5, 5, (int64_t[]){1, 1, 2, 2, 1, 1, 1});
  all_ops(dt, 2, 32, 9, 9, 48, 1, 1, (int64_t[]){1, 1, 0, 0, 1, 1, 1});
}
END_TEST

/* t re-laid with its first two axes swapped in memory, at offset 5. */
static void swap01(h_tensor *t, unsigned seed) {
  tyto_plugin_layout l = t->layout;
  int64_t plane = l.shape[2] * l.shape[3];
  h_tensor b = h_tensor_new(l.dtype, 1, (int64_t[]){t->storage + 5}, NULL);
  fill16(&b, seed);
  b.layout = l;
  b.layout.strides[0] = plane;
  b.layout.strides[1] = l.shape[0] * plane;
  b.layout.strides[2] = l.shape[3];
  b.layout.strides[3] = 1;
  b.layout.offset = 5;
  h_tensor_free(t);
  *t = b;
}

/* t flipped along its last axis (the same values, read backwards). */
static void flip_last(h_tensor *t) {
  uint32_t last = t->layout.rank - 1;
  t->layout.offset += (t->layout.shape[last] - 1) * t->layout.strides[last];
  t->layout.strides[last] = -t->layout.strides[last];
}

/* t re-laid with a step of 2 elements everywhere, the gaps filled. */
static void spread(h_tensor *t, unsigned seed) {
  tyto_plugin_layout l = t->layout;
  h_tensor b = h_tensor_new(l.dtype, 1, (int64_t[]){2 * t->storage}, NULL);
  fill16(&b, seed);
  b.layout = l;
  for (uint32_t ax = 0; ax < l.rank; ax++)
    b.layout.strides[ax] = 2 * l.strides[ax];
  h_tensor_free(t);
  *t = b;
}

START_TEST(strided_layouts) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t a[7] = {1, 1, 1, 1, 1, 1, 1};
  uint32_t ops[3] = {CONV, DATA, FILTER};
  for (int i = 0; i < 3; i++) {
    tensors t = make(ops[i], dt, 2, 3, 7, 8, 4, 3, 3, a, 1);
    swap01(&t.in[0], 21);
    flip_last(&t.in[1]);
    spread(&t.out, 22);
    double *before = malloc((size_t)t.out.storage * sizeof *before);
    memcpy(before, t.out.values, (size_t)t.out.storage * sizeof *before);
    run_ok(ops[i], t.in, t.n_in, &t.out, a);
    for (int64_t e = 1; e < t.out.storage; e += 2)
      ck_assert(t.out.values[e] == before[e]);
    free(before);
    drop(&t);
  }
}
END_TEST

/* An empty batch: nothing to write for CONV2D and the data gradient, and
 * a weight gradient of zeros. */
START_TEST(empty_batch) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t a[7] = {1, 1, 0, 0, 1, 1, 1};
  uint32_t ops[3] = {CONV, DATA, FILTER};
  for (int i = 0; i < 3; i++) {
    tensors t = make(ops[i], dt, 0, 3, 5, 5, 4, 3, 3, a, 1);
    fill16(&t.out, 5); /* non-zero before */
    run_ok(ops[i], t.in, t.n_in, &t.out, a);
    for (int64_t e = 0; ops[i] == FILTER && e < t.out.storage; e++)
      ck_assert(t.out.values[e] == 0);
    drop(&t);
  }
}
END_TEST

/* NaN and infinities reach exactly the outputs whose sums read them. */
START_TEST(nan_and_infinities) {
  uint32_t dt = path_dtype(_i);
  path_enter(_i);
  int64_t pad[7] = {1, 1, 1, 1, 1, 1, 1}, nopad[7] = {1, 1, 0, 0, 1, 1, 1};
  /* CONV2D, padded: NaN and inf in x (x never meets the padding). */
  tensors t = make(CONV, dt, 2, 16, 6, 6, 16, 3, 3, pad, 1);
  t.in[0].values[h_at(&t.in[0], (int64_t[]){0, 3, 2, 2})] = NAN;
  t.in[0].values[h_at(&t.in[0], (int64_t[]){1, 5, 0, 5})] = INFINITY;
  run_ok(CONV, t.in, t.n_in, &t.out, pad);
  ck_assert(isnan(t.out.values[h_at(&t.out, (int64_t[]){0, 7, 3, 3})]));
  drop(&t);
  /* CONV2D unpadded: an infinity in w. */
  t = make(CONV, dt, 2, 16, 6, 6, 16, 3, 3, nopad, 0);
  t.in[1].values[h_at(&t.in[1], (int64_t[]){4, 2, 1, 1})] = -INFINITY;
  run_ok(CONV, t.in, t.n_in, &t.out, nopad);
  ck_assert(isinf(t.out.values[h_at(&t.out, (int64_t[]){1, 4, 2, 2})]));
  drop(&t);
  /* The gradients: NaN and inf in dy. */
  t = make(DATA, dt, 2, 16, 6, 6, 16, 3, 3, pad, 0);
  t.in[0].values[h_at(&t.in[0], (int64_t[]){1, 9, 4, 1})] = NAN;
  t.in[0].values[h_at(&t.in[0], (int64_t[]){0, 2, 0, 0})] = INFINITY;
  run_ok(DATA, t.in, t.n_in, &t.out, pad);
  drop(&t);
  t = make(FILTER, dt, 2, 16, 6, 6, 16, 3, 3, pad, 0);
  t.in[1].values[h_at(&t.in[1], (int64_t[]){1, 9, 4, 1})] = NAN;
  t.in[0].values[h_at(&t.in[0], (int64_t[]){0, 2, 3, 3})] = INFINITY;
  run_ok(FILTER, t.in, t.n_in, &t.out, pad);
  drop(&t);
}
END_TEST

START_TEST(mixed_dtypes_refused) {
  int64_t a[7] = {1, 1, 0, 0, 1, 1, 1};
  h_tensor x = h_tensor_new(BF16, 4, (int64_t[]){2, 4, 5, 5}, NULL),
           w = h_tensor_new(F16, 4, (int64_t[]){6, 4, 3, 3}, NULL),
           y = h_tensor_new(BF16, 4, (int64_t[]){2, 6, 3, 3}, NULL);
  const char *err =
      harness_run(&hx, CONV, (h_tensor[]){x, w}, 2, &y, 1, a, 7, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, "conv2d: input 1 is f16 but the output is bf16: all "
                        "must share one dtype");
  w.layout.dtype = F32;
  err = harness_run(&hx, DATA, (h_tensor[]){y, w}, 2, &x, 1, a, 7, NULL, 0);
  ck_assert_ptr_nonnull(err);
  ck_assert_str_eq(err, "conv2d_backward_data: input 1 is f32 but the output "
                        "is bf16: all must share one dtype");
  h_tensor_free(&x);
  h_tensor_free(&w);
  h_tensor_free(&y);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu conv 16-bit");
  TCase *tc = tcase_create("conv16");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, basic, 0, N_PATHS);
  tcase_add_loop_test(tc, stride_pad_dilation, 0, N_PATHS);
  tcase_add_loop_test(tc, groups, 0, N_PATHS);
  tcase_add_loop_test(tc, network_shapes, 0, N_PATHS);
  tcase_add_loop_test(tc, strided_layouts, 0, N_PATHS);
  tcase_add_loop_test(tc, empty_batch, 0, N_PATHS);
  tcase_add_loop_test(tc, nan_and_infinities, 0, N_PATHS);
  tcase_add_test(tc, mixed_dtypes_refused);
  suite_add_tcase(s, tc);
  return test_run(s);
}
