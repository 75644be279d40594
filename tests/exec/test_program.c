/* Compiled programs on the CPU device: every lowered op class against a
 * float64 reference written here, repeated runs, parameters, eager
 * evaluation and the program API's error messages. */
#include "common.h"

#include <math.h>
#include <unistd.h>

static tyto_context *ctx;

static void setup(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
}

static void teardown(void) {
  tyto_context_free(ctx);
}

#define MAXV 4096

/* Values as the tensor's dtype, from doubles. */
static size_t pack(const tyto_tensor *t, const double *v, void *buf) {
  int64_t n = tyto_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    if (tyto_tensor_dtype(t) == TYTO_F32)
      ((float *)buf)[i] = (float)v[i];
    else
      ((double *)buf)[i] = v[i];
  }
  return (size_t)n * tyto_dtype_size(tyto_tensor_dtype(t));
}

/* Reads output i of p into out as doubles; returns the element count. */
static int64_t read_out(tyto_program *p, size_t i, double *out) {
  tyto_tensor *t = tyto_program_output(p, i);
  int64_t n = tyto_tensor_numel(t);
  static unsigned char buf[MAXV * 8];
  size_t bytes = (size_t)n * tyto_dtype_size(tyto_tensor_dtype(t));
  ck_assert_msg(tyto_program_read_output(p, i, buf, bytes) == TYTO_OK, "%s",
                tyto_errmsg());
  for (int64_t k = 0; k < n; k++)
    out[k] = tyto_tensor_dtype(t) == TYTO_F32 ? ((float *)buf)[k]
                                              : ((double *)buf)[k];
  return n;
}

/* Compiles `out`, binds up to 3 inputs, runs once and reads it. */
static int64_t eval1(tyto_graph *g, tyto_tensor *out, int n_in,
                     tyto_tensor **in, const double **vals, double *res) {
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &out, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  static unsigned char buf[MAXV * 8];
  for (int i = 0; i < n_in; i++) {
    size_t b = pack(in[i], vals[i], buf);
    ck_assert_msg(tyto_program_set_input(p, in[i], buf, b) == TYTO_OK, "%s",
                  tyto_errmsg());
  }
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  int64_t n = read_out(p, 0, res);
  tyto_program_free(p);
  return n;
}

static void expect(const double *got, const double *want, int64_t n,
                   double tol) {
  for (int64_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                  "element %lld: got %.17g, want %.17g", (long long)i, got[i],
                  want[i]);
}

static void iota(double *v, int n, double scale) {
  for (int i = 0; i < n; i++)
    v[i] = (i + 1) * scale;
}

/* The seed: f = sum((x*sin(x+x) + sqrt(x)/7) * relu(y)), x = ones[2,2].
 * sin(2) + 1/7 = 1.0521545696828245 per element: 4.20861827873129801 for
 * relu(y) = 1 and twice that for y = 2. */
static void seed_case(tyto_dtype dt, double y, double want, double tol) {
  tyto_graph *g = tyto_graph_new();
  int64_t s[2] = {2, 2};
  tyto_tensor *x = tyto_input(g, dt, 2, s, "x");
  tyto_tensor *yy = tyto_scalar(g, dt, y);
  tyto_tensor *f =
      tyto_sum(tyto_mul(tyto_add(tyto_mul(x, tyto_sin(tyto_add(x, x))),
                                 tyto_div_scalar(tyto_sqrt(x), 7)),
                        tyto_relu(yy)),
               0, NULL, 0);
  double ones[4] = {1, 1, 1, 1}, r[1];
  const double *v[1] = {ones};
  ck_assert_int_eq(eval1(g, f, 1, &x, v, r), 1);
  ck_assert_msg(fabs(r[0] - want) <= tol, "got %.17g want %.17g", r[0], want);
  tyto_graph_free(g);
}

START_TEST(test_seed) {
  seed_case(TYTO_F64, 1, 4.20861827873129801, 1e-12);
  seed_case(TYTO_F32, 1, 4.20861827873129801, 1e-6);
  seed_case(TYTO_F64, 2, 2 * 4.20861827873129801, 1e-12);
  seed_case(TYTO_F32, 2, 2 * 4.20861827873129801, 2e-6);
}
END_TEST

START_TEST(test_elementwise_broadcast) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 3}, "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 1, (int64_t[]){3}, "b");
  tyto_tensor *c = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 1}, "c");
  tyto_tensor *f = tyto_where(tyto_gt(a, tyto_scalar(g, TYTO_F64, 3)),
                              tyto_sub(a, b), tyto_fma(a, b, c));
  double va[6], vb[3] = {10, 20, 30}, vc[2] = {-1, -2}, r[6], w[6];
  iota(va, 6, 1);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      double x = va[i * 3 + j];
      w[i * 3 + j] = x > 3 ? x - vb[j] : x * vb[j] + vc[i];
    }
  tyto_tensor *in[3] = {a, b, c};
  const double *v[3] = {va, vb, vc};
  ck_assert_int_eq(eval1(g, f, 3, in, v, r), 6);
  expect(r, w, 6, 1e-15);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_unary) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, (int64_t[]){6}, "x");
  double vx[6] = {-2.5, -0.5, 0, 0.25, 1.5, 3}, r[6], w[6];
  const double *v[1] = {vx};
  ck_assert_int_eq(eval1(g, tyto_leaky_relu(x, 0.1), 1, &x, v, r), 6);
  for (int i = 0; i < 6; i++)
    w[i] = vx[i] > 0 ? vx[i] : 0.1 * vx[i];
  expect(r, w, 6, 1e-15);
  ck_assert_int_eq(eval1(g, tyto_elu(x, 2), 1, &x, v, r), 6);
  for (int i = 0; i < 6; i++)
    w[i] = vx[i] > 0 ? vx[i] : 2 * expm1(vx[i]);
  expect(r, w, 6, 1e-15);
  tyto_tensor *h = tyto_add(tyto_tanh(x), tyto_exp(tyto_neg(tyto_abs(x))));
  ck_assert_int_eq(eval1(g, tyto_round(tyto_mul_scalar(h, 10)), 1, &x, v, r),
                   6);
  for (int i = 0; i < 6; i++)
    w[i] = round(10 * (tanh(vx[i]) + exp(-fabs(vx[i]))));
  expect(r, w, 6, 0);
  ck_assert_int_eq(eval1(g, tyto_log_softmax(x, 0), 1, &x, v, r), 6);
  double z = 0;
  for (int i = 0; i < 6; i++)
    z += exp(vx[i]);
  for (int i = 0; i < 6; i++)
    w[i] = vx[i] - log(z);
  expect(r, w, 6, 1e-14);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_views) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 3, (int64_t[]){2, 3, 4}, "x");
  double vx[24], r[MAXV], w[MAXV];
  iota(vx, 24, 1);
  const double *v[1] = {vx};
  /* permute: out[k][i][j] = x[i][j][k] */
  tyto_tensor *pm = tyto_permute(x, 3, (int[]){2, 0, 1});
  ck_assert_int_eq(eval1(g, pm, 1, &x, v, r), 24);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        w[(k * 2 + i) * 3 + j] = vx[(i * 3 + j) * 4 + k];
  expect(r, w, 24, 0);
  /* slice x[1:, ::-2, 1::2] */
  tyto_tensor *sl = tyto_slice(x, (int64_t[]){1, TYTO_END, 1},
                               (int64_t[]){TYTO_END, TYTO_END, TYTO_END},
                               (int64_t[]){1, -2, 2});
  ck_assert_int_eq(eval1(g, sl, 1, &x, v, r), 4);
  int n = 0;
  for (int j = 2; j >= 0; j -= 2)
    for (int k = 1; k < 4; k += 2)
      w[n++] = vx[(1 * 3 + j) * 4 + k];
  expect(r, w, 4, 0);
  /* flip axes 0 and 2 */
  tyto_tensor *fl = tyto_flip(x, 2, (int[]){0, 2});
  ck_assert_int_eq(eval1(g, fl, 1, &x, v, r), 24);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++)
        w[(i * 3 + j) * 4 + k] = vx[((1 - i) * 3 + j) * 4 + (3 - k)];
  expect(r, w, 24, 0);
  /* broadcast_to [2,2,3,4], reshape to [8,12] */
  tyto_tensor *bc = tyto_reshape(
      tyto_broadcast_to(x, 4, (int64_t[]){2, 2, 3, 4}), 2, (int64_t[]){4, 12});
  ck_assert_int_eq(eval1(g, bc, 1, &x, v, r), 48);
  for (int i = 0; i < 48; i++)
    w[i] = vx[i % 24];
  expect(r, w, 48, 0);
  /* tile [2,3,4] by [2,1,1,2] -> [2,2,3,8] */
  tyto_tensor *tl = tyto_tile(x, 4, (int64_t[]){2, 1, 1, 2});
  ck_assert_int_eq(eval1(g, tl, 1, &x, v, r), 96);
  for (int a = 0; a < 2; a++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 3; j++)
        for (int k = 0; k < 8; k++)
          w[((a * 2 + i) * 3 + j) * 8 + k] = vx[(i * 3 + j) * 4 + k % 4];
  expect(r, w, 96, 0);
  /* transpose feeding an elementwise op */
  tyto_tensor *m = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 3}, "m");
  tyto_tensor *tm = tyto_add(
      tyto_transpose(m, 0, 1),
      tyto_constant(g, TYTO_F64, 1, (int64_t[]){2}, (double[]){100, 200}));
  ck_assert_int_eq(eval1(g, tm, 1, &m, v, r), 6);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      w[i * 2 + j] = vx[j * 3 + i] + (j ? 200 : 100);
  expect(r, w, 6, 0);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_reductions) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 3, (int64_t[]){2, 3, 4}, "x");
  double vx[24], r[64], w[64];
  for (int i = 0; i < 24; i++)
    vx[i] = sin(i + 1.0);
  const double *v[1] = {vx};
  for (int keep = 0; keep < 2; keep++) {
    tyto_tensor *s = tyto_sum(x, 2, (int[]){0, 2}, keep);
    ck_assert_int_eq(tyto_tensor_rank(s), keep ? 3 : 1);
    ck_assert_int_eq(eval1(g, s, 1, &x, v, r), 3);
    for (int j = 0; j < 3; j++) {
      w[j] = 0;
      for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
          w[j] += vx[(i * 3 + j) * 4 + k];
    }
    expect(r, w, 3, 1e-14);
    tyto_tensor *mx = tyto_reduce_max(x, 1, (int[]){1}, keep);
    ck_assert_int_eq(eval1(g, mx, 1, &x, v, r), 8);
    tyto_tensor *am = tyto_argmax(x, 1, keep);
    double ra[8];
    ck_assert_int_eq(eval1(g, am, 1, &x, v, ra), 8);
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 4; k++) {
        int best = 0;
        for (int j = 1; j < 3; j++)
          if (vx[(i * 3 + j) * 4 + k] > vx[(i * 3 + best) * 4 + k])
            best = j;
        w[i * 4 + k] = vx[(i * 3 + best) * 4 + k];
        ck_assert_double_eq(ra[i * 4 + k], best);
      }
    expect(r, w, 8, 0);
  }
  tyto_tensor *mean = tyto_mean(x, 0, NULL, 0);
  ck_assert_int_eq(eval1(g, mean, 1, &x, v, r), 1);
  double acc = 0;
  for (int i = 0; i < 24; i++)
    acc += vx[i];
  ck_assert_double_eq_tol(r[0], acc / 24, 1e-15);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_matmul) {
  tyto_graph *g = tyto_graph_new();
  /* a [3,2]^T x b [4,3]^T = [2,4] */
  tyto_tensor *a = tyto_input(g, TYTO_F64, 2, (int64_t[]){3, 2}, "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 2, (int64_t[]){4, 3}, "b");
  double va[6], vb[12], r[8], w[8];
  iota(va, 6, 0.5);
  iota(vb, 12, -0.25);
  tyto_tensor *in[2] = {a, b};
  const double *v[2] = {va, vb};
  ck_assert_int_eq(eval1(g, tyto_matmul(a, b, 1, 1), 2, in, v, r), 8);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      w[i * 4 + j] = 0;
      for (int k = 0; k < 3; k++)
        w[i * 4 + j] += va[k * 2 + i] * vb[j * 3 + k];
    }
  expect(r, w, 8, 1e-14);
  /* batched, broadcast: [2,1,2] x [2,3] -> [2,1,3] */
  tyto_tensor *c = tyto_input(g, TYTO_F32, 3, (int64_t[]){2, 1, 2}, "c");
  tyto_tensor *d = tyto_input(g, TYTO_F32, 2, (int64_t[]){2, 3}, "d");
  double vc[4] = {1, 2, 3, 4}, vd[6] = {1, 0, -1, 2, 1, 0.5};
  tyto_tensor *in2[2] = {c, d};
  const double *v2[2] = {vc, vd};
  ck_assert_int_eq(eval1(g, tyto_matmul(c, d, 0, 0), 2, in2, v2, r), 6);
  for (int bb = 0; bb < 2; bb++)
    for (int j = 0; j < 3; j++)
      w[bb * 3 + j] = vc[bb * 2] * vd[j] + vc[bb * 2 + 1] * vd[3 + j];
  expect(r, w, 6, 1e-6);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_concat_pad_gather) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 2}, "a");
  tyto_tensor *b = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 3}, "b");
  double va[4] = {1, 2, 3, 4}, vb[6] = {5, 6, 7, 8, 9, 10}, r[64];
  tyto_tensor *in[2] = {a, b};
  const double *v[2] = {va, vb};
  tyto_tensor *xs[3] = {a, b, a};
  ck_assert_int_eq(eval1(g, tyto_concat(3, xs, 1), 2, in, v, r), 14);
  double wc[14] = {1, 2, 5, 6, 7, 1, 2, 3, 4, 8, 9, 10, 3, 4};
  expect(r, wc, 14, 0);
  tyto_tensor *pd =
      tyto_pad(a, (int64_t[]){1, 0}, (int64_t[]){0, 1}, TYTO_PAD_CONSTANT, -1);
  ck_assert_int_eq(eval1(g, pd, 1, in, v, r), 9);
  double wp[9] = {-1, -1, -1, 1, 2, -1, 3, 4, -1};
  expect(r, wp, 9, 0);
  tyto_tensor *idx =
      tyto_constant(g, TYTO_F64, 1, (int64_t[]){3}, (double[]){2, 0, 2});
  ck_assert_int_eq(eval1(g, tyto_gather(b, idx, 1), 1, &in[1], &v[1], r), 6);
  double wg[6] = {7, 5, 7, 10, 8, 10};
  expect(r, wg, 6, 0);
  tyto_tensor *oh = tyto_one_hot(idx, 3);
  ck_assert_int_eq(eval1(g, oh, 0, NULL, NULL, r), 9);
  double wo[9] = {0, 0, 1, 1, 0, 0, 0, 0, 1};
  expect(r, wo, 9, 0);
  tyto_tensor *sc = tyto_scatter_add(
      b, idx, tyto_full(g, TYTO_F64, 2, (int64_t[]){2, 3}, 1), 1);
  ck_assert_int_eq(eval1(g, sc, 1, &in[1], &v[1], r), 6);
  double ws[6] = {6, 6, 9, 9, 9, 12};
  expect(r, ws, 6, 0);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_conv_pool_softmax) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 4, (int64_t[]){1, 1, 3, 3}, "x");
  tyto_tensor *w = tyto_constant(g, TYTO_F64, 4, (int64_t[]){1, 1, 2, 2},
                                 (double[]){1, -1, 0.5, 2});
  tyto_tensor *bias =
      tyto_constant(g, TYTO_F64, 1, (int64_t[]){1}, (double[]){0.25});
  double vx[9], r[16], want[16];
  iota(vx, 9, 1);
  const double *v[1] = {vx};
  ck_assert_int_eq(eval1(g, tyto_conv2d(x, w, bias, NULL), 1, &x, v, r), 4);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      want[i * 2 + j] = 0.25 + vx[i * 3 + j] - vx[i * 3 + j + 1] +
                        0.5 * vx[(i + 1) * 3 + j] + 2 * vx[(i + 1) * 3 + j + 1];
  expect(r, want, 4, 1e-14);
  /* no bias, stride 2, padding 1: [1,1,3,3] -> [1,1,2,2] */
  tyto_conv2d_params cp = {{2, 2}, {1, 1}, {1, 1}, 1};
  ck_assert_int_eq(eval1(g, tyto_conv2d(x, w, NULL, &cp), 1, &x, v, r), 4);
  const double wv[4] = {1, -1, 0.5, 2};
  for (int oi = 0; oi < 2; oi++)
    for (int oj = 0; oj < 2; oj++) {
      double acc = 0;
      for (int ki = 0; ki < 2; ki++)
        for (int kj = 0; kj < 2; kj++) {
          int ii = oi * 2 - 1 + ki, jj = oj * 2 - 1 + kj;
          if (ii >= 0 && ii < 3 && jj >= 0 && jj < 3)
            acc += wv[ki * 2 + kj] * vx[ii * 3 + jj];
        }
      want[oi * 2 + oj] = acc;
    }
  expect(r, want, 4, 1e-14);
  ck_assert_int_eq(eval1(g, tyto_avg_pool2d(x, 2, 2, 1, 1, 0, 0), 1, &x, v, r),
                   4);
  double wa[4] = {3, 4, 6, 7};
  expect(r, wa, 4, 1e-15);
  ck_assert_int_eq(eval1(g, tyto_max_pool2d(x, 2, 2, 1, 1, 0, 0), 1, &x, v, r),
                   4);
  double wm[4] = {5, 6, 8, 9};
  expect(r, wm, 4, 0);
  tyto_tensor *m = tyto_reshape(x, 2, (int64_t[]){3, 3});
  ck_assert_int_eq(eval1(g, tyto_softmax(m, 1), 1, &x, v, r), 9);
  for (int i = 0; i < 3; i++) {
    double z = 0;
    for (int j = 0; j < 3; j++)
      z += exp(vx[i * 3 + j]);
    for (int j = 0; j < 3; j++)
      want[i * 3 + j] = exp(vx[i * 3 + j]) / z;
  }
  expect(r, want, 9, 1e-14);
  tyto_graph_free(g);
}
END_TEST

/* slice_backward lowered as a fill and a strided copy: against a
 * placement loop, and adjoint to tyto_slice: <slice(t), g> = <t,
 * slice_backward(g)>, for negative steps, a full cover (no fill) and an
 * empty g. */
static void slice_backward_case(tyto_dtype dt, int rank, const int64_t *shape,
                                const int64_t *starts, const int64_t *stops,
                                const int64_t *steps) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *t = tyto_input(g, dt, rank, shape, "t");
  tyto_tensor *sl = tyto_slice(t, starts, stops, steps);
  const int64_t *a = tyto_tensor_iattrs(sl);
  int64_t st[8], sp[8];
  for (int i = 0; i < rank; i++) {
    st[i] = a[2 * i];
    sp[i] = a[2 * i + 1];
  }
  tyto_tensor *gr = tyto_input(g, dt, rank, tyto_tensor_shape(sl), "g");
  tyto_tensor *bw = tyto_slice_backward(gr, rank, shape, st, sp);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  int64_t nt = tyto_tensor_numel(t), ng = tyto_tensor_numel(gr);
  double vt[MAXV], vg[MAXV], r[MAXV], want[MAXV], rs[MAXV];
  for (int64_t i = 0; i < nt; i++)
    vt[i] = (double)((i * 37) % 11) - 5;
  for (int64_t i = 0; i < ng; i++)
    vg[i] = (double)((i * 13) % 7) + 1;
  const double *v[1] = {vg};
  ck_assert_int_eq(eval1(g, bw, 1, &gr, v, r), nt);
  for (int64_t i = 0; i < nt; i++)
    want[i] = 0;
  for (int64_t i = 0; i < ng; i++) {
    int64_t rem = i, off = 0, stride = 1;
    for (int d = rank; d-- > 0;) {
      int64_t e = tyto_tensor_shape(gr)[d];
      off += (st[d] + (rem % e) * sp[d]) * stride;
      rem /= e;
      stride *= shape[d];
    }
    want[off] = vg[i];
  }
  expect(r, want, nt, 0);
  v[0] = vt;
  ck_assert_int_eq(eval1(g, sl, 1, &t, v, rs), ng);
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < ng; i++)
    lhs += rs[i] * vg[i];
  for (int64_t i = 0; i < nt; i++)
    rhs += vt[i] * r[i];
  ck_assert_msg(lhs == rhs,
                "<slice(t), g> = %g but <t, slice_backward(g)> = %g", lhs, rhs);
  tyto_graph_free(g);
}

START_TEST(test_slice_backward) {
  for (int f = 0; f < 2; f++) {
    tyto_dtype dt = f ? TYTO_F64 : TYTO_F32;
    /* t[4::-2, 1::3] of [5,7] */
    slice_backward_case(dt, 2, (int64_t[]){5, 7}, (int64_t[]){4, 1},
                        (int64_t[]){TYTO_END, TYTO_END}, (int64_t[]){-2, 3});
    /* t[::-1, :, 1:3] of [3,4,5]: full cover on two axes */
    slice_backward_case(
        dt, 3, (int64_t[]){3, 4, 5}, (int64_t[]){TYTO_END, TYTO_END, 1},
        (int64_t[]){TYTO_END, TYTO_END, 3}, (int64_t[]){-1, 1, 1});
    /* t[::-1, ::-1]: every element written, no fill */
    slice_backward_case(dt, 2, (int64_t[]){3, 4},
                        (int64_t[]){TYTO_END, TYTO_END},
                        (int64_t[]){TYTO_END, TYTO_END}, (int64_t[]){-1, -1});
    /* t[6:2:-3, 3:3]: g is empty, the output all zeros */
    slice_backward_case(dt, 2, (int64_t[]){8, 5}, (int64_t[]){6, 3},
                        (int64_t[]){2, 3}, (int64_t[]){-3, 1});
  }
}
END_TEST

/* triangular_solve through a program, one A broadcast over a batch of B:
 * op(T) X = B checked in float64 from the triangle that should be read. */
START_TEST(test_triangular_solve) {
  for (int v = 0; v < 8; v++) {
    int lower = v & 1, transpose = (v >> 1) & 1, unit = (v >> 2) & 1;
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *a = tyto_input(g, TYTO_F64, 2, (int64_t[]){3, 3}, "a");
    tyto_tensor *b = tyto_input(g, TYTO_F64, 3, (int64_t[]){2, 3, 2}, "b");
    tyto_tensor *x = tyto_triangular_solve(a, b, lower, transpose, unit);
    double va[9] = {2, 50, 60, 0.5, 3, 70, -1, 0.25, 4}, vb[12], r[12];
    if (!lower) /* the upper triangle: transpose the values */
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < i; j++) {
          double tmp = va[i * 3 + j];
          va[i * 3 + j] = va[j * 3 + i];
          va[j * 3 + i] = tmp;
        }
    iota(vb, 12, 0.5);
    tyto_tensor *ins[2] = {a, b};
    const double *vals[2] = {va, vb};
    ck_assert_int_eq(eval1(g, x, 2, ins, vals, r), 12);
    for (int q = 0; q < 2; q++)
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
          double s = 0;
          for (int l = 0; l < 3; l++) {
            int ri = transpose ? l : i, ci = transpose ? i : l;
            int keep = lower ? ri >= ci : ri <= ci;
            double e = ri == ci && unit ? 1 : keep ? va[ri * 3 + ci] : 0;
            s += e * r[(q * 3 + l) * 2 + j];
          }
          ck_assert_msg(fabs(s - vb[(q * 3 + i) * 2 + j]) <= 1e-12,
                        "variant %d: (op(T) X)[%d,%d,%d] = %.17g, B has %g", v,
                        q, i, j, s, vb[(q * 3 + i) * 2 + j]);
        }
    tyto_graph_free(g);
  }
}
END_TEST

static double dotv(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* The conv and pool derivative ops compiled and run: lowering passes the
 * plugin CONV2D's seven / the pool's six attributes and the sizes through
 * the output shape. Checked by the adjoint identities <conv2d(x, w), dy> =
 * <x, conv2d_backward_data(dy, w)> = <w, conv2d_backward_filter(x, dy)>,
 * <max_pool2d_select(x, t), dy> = <t, max_pool2d_backward(x, dy)> and
 * <avg_pool2d(t), dy> = <t, avg_pool2d_backward(dy)>, in f64. */
START_TEST(test_conv_pool_backward) {
  tyto_graph *g = tyto_graph_new();
  tyto_conv2d_params p = {{2, 1}, {1, 0}, {1, 2}, 2};
  tyto_tensor *x = tyto_input(g, TYTO_F64, 4, (int64_t[]){2, 4, 7, 6}, "x");
  tyto_tensor *w = tyto_input(g, TYTO_F64, 4, (int64_t[]){6, 2, 3, 2}, "w");
  tyto_tensor *y = tyto_conv2d(x, w, NULL, &p);
  tyto_tensor *dy = tyto_input(g, TYTO_F64, 4, tyto_tensor_shape(y), "dy");
  tyto_tensor *dx = tyto_conv2d_backward_data(dy, w, 7, 6, &p);
  tyto_tensor *dw = tyto_conv2d_backward_filter(x, dy, 3, 2, &p);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  static double vx[MAXV], vw[MAXV], vdy[MAXV], r0[MAXV], r1[MAXV], r2[MAXV];
  int64_t nx = tyto_tensor_numel(x), nw = tyto_tensor_numel(w),
          ny = tyto_tensor_numel(y);
  for (int64_t i = 0; i < nx; i++)
    vx[i] = sin(0.7 * (double)i);
  for (int64_t i = 0; i < nw; i++)
    vw[i] = cos(1.3 * (double)i);
  for (int64_t i = 0; i < ny; i++)
    vdy[i] = sin(0.3 * (double)i + 1);
  tyto_tensor *in[3] = {x, w, dy};
  const double *v[3] = {vx, vw, vdy};
  ck_assert_int_eq(eval1(g, y, 2, in, v, r0), ny);
  tyto_tensor *in1[2] = {dy, w};
  const double *v1[2] = {vdy, vw};
  ck_assert_int_eq(eval1(g, dx, 2, in1, v1, r1), nx);
  tyto_tensor *in2[2] = {x, dy};
  const double *v2[2] = {vx, vdy};
  ck_assert_int_eq(eval1(g, dw, 2, in2, v2, r2), nw);
  double p0 = dotv(r0, vdy, ny), p1 = dotv(vx, r1, nx), p2 = dotv(vw, r2, nw);
  ck_assert_msg(fabs(p0 - p1) <= 1e-12 * (1 + fabs(p0)) &&
                    fabs(p0 - p2) <= 1e-12 * (1 + fabs(p0)),
                "<y,dy> %.17g, <x,dx> %.17g, <w,dw> %.17g", p0, p1, p2);
  /* Pools on x's shape: k 3x2, stride 2x2, padding 1x0. */
  tyto_tensor *t = tyto_input(g, TYTO_F64, 4, (int64_t[]){2, 4, 7, 6}, "t");
  tyto_tensor *m = tyto_max_pool2d(x, 3, 2, 2, 2, 1, 0);
  tyto_tensor *pdy = tyto_input(g, TYTO_F64, 4, tyto_tensor_shape(m), "pdy");
  int64_t np = tyto_tensor_numel(m);
  for (int64_t i = 0; i < np; i++)
    vdy[i] = cos(0.9 * (double)i);
  for (int64_t i = 0; i < nx; i++)
    vw[i] = floor(3 * sin(1.1 * (double)i)); /* t, with ties */
  for (int64_t i = 0; i < nx; i++)
    vx[i] = floor(2 * sin(0.5 * (double)i)); /* x, with ties */
  tyto_tensor *sel = tyto_max_pool2d_select(x, t, 3, 2, 2, 2, 1, 0);
  tyto_tensor *mb = tyto_max_pool2d_backward(x, pdy, 3, 2, 2, 2, 1, 0);
  tyto_tensor *in3[2] = {x, t};
  const double *v3[2] = {vx, vw};
  ck_assert_int_eq(eval1(g, sel, 2, in3, v3, r0), np);
  tyto_tensor *in4[2] = {x, pdy};
  const double *v4[2] = {vx, vdy};
  ck_assert_int_eq(eval1(g, mb, 2, in4, v4, r1), nx);
  p0 = dotv(r0, vdy, np);
  p1 = dotv(vw, r1, nx);
  ck_assert_msg(fabs(p0 - p1) <= 1e-12 * (1 + fabs(p0)),
                "<select(x,t),dy> %.17g, <t,max_backward(x,dy)> %.17g", p0, p1);
  tyto_tensor *av = tyto_avg_pool2d(t, 3, 2, 2, 2, 1, 0);
  tyto_tensor *ab = tyto_avg_pool2d_backward(pdy, 7, 6, 3, 2, 2, 2, 1, 0);
  ck_assert_int_eq(eval1(g, av, 1, &t, v3 + 1, r0), np);
  ck_assert_int_eq(eval1(g, ab, 1, &pdy, v4 + 1, r1), nx);
  p0 = dotv(r0, vdy, np);
  p1 = dotv(vw, r1, nx);
  ck_assert_msg(fabs(p0 - p1) <= 1e-12 * (1 + fabs(p0)),
                "<avg_pool2d(t),dy> %.17g, <t,avg_backward(dy)> %.17g", p0, p1);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_random) {
  double r1[64], r2[64], r3[64];
  for (int round = 0; round < 2; round++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *u =
        tyto_random_uniform(g, TYTO_F32, 2, (int64_t[]){8, 8}, -1, 3, 42);
    tyto_tensor *u2 =
        tyto_random_uniform(g, TYTO_F32, 2, (int64_t[]){8, 8}, -1, 3, 42);
    ck_assert_int_eq(eval1(g, u, 0, NULL, NULL, round ? r2 : r1), 64);
    if (round == 0)
      ck_assert_int_eq(eval1(g, u2, 0, NULL, NULL, r3), 64);
    tyto_graph_free(g);
  }
  int differ = 0;
  for (int i = 0; i < 64; i++) {
    ck_assert(r1[i] >= -1 && r1[i] < 3);
    ck_assert_double_eq(r1[i], r2[i]); /* same seed, same numbers */
    differ += r1[i] != r3[i];          /* the next node draws others */
  }
  ck_assert_int_gt(differ, 60);
}
END_TEST

START_TEST(test_linalg) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 2, (int64_t[]){2, 2}, "a");
  double va[4] = {4, 7, 2, 6}, r[8];
  const double *v[1] = {va};
  ck_assert_int_eq(eval1(g, tyto_inv(a), 1, &a, v, r), 4);
  double wi[4] = {0.6, -0.7, -0.2, 0.4};
  expect(r, wi, 4, 1e-14);
  ck_assert_int_eq(eval1(g, tyto_det(a), 1, &a, v, r), 1);
  ck_assert_double_eq_tol(r[0], 10, 1e-13);
  /* solve with a batch of right-hand sides broadcast against one A */
  tyto_tensor *bb = tyto_input(g, TYTO_F64, 3, (int64_t[]){2, 2, 1}, "b");
  double vb[4] = {1, 2, -3, 0.5}, vs[4];
  tyto_tensor *in[2] = {a, bb};
  const double *v2[2] = {va, vb};
  ck_assert_int_eq(eval1(g, tyto_solve(a, bb), 2, in, v2, vs), 4);
  for (int m = 0; m < 2; m++) {
    ck_assert_double_eq_tol(4 * vs[2 * m] + 7 * vs[2 * m + 1], vb[2 * m],
                            1e-13);
    ck_assert_double_eq_tol(2 * vs[2 * m] + 6 * vs[2 * m + 1], vb[2 * m + 1],
                            1e-13);
  }
  /* cholesky of A A^T, logdet */
  tyto_tensor *spd = tyto_matmul(a, a, 0, 1);
  ck_assert_int_eq(eval1(g, tyto_cholesky(spd), 1, &a, v, r), 4);
  double ws[3] = {4 * 4 + 7 * 7, 4 * 2 + 7 * 6, 2 * 2 + 6 * 6};
  ck_assert_double_eq_tol(r[0] * r[0], ws[0], 1e-12);
  ck_assert_double_eq_tol(r[2] * r[0], ws[1], 1e-12);
  ck_assert_double_eq_tol(r[2] * r[2] + r[3] * r[3], ws[2], 1e-12);
  ck_assert_double_eq(r[1], 0);
  ck_assert_int_eq(eval1(g, tyto_logdet(spd), 1, &a, v, r), 1);
  ck_assert_double_eq_tol(r[0], log(100.0), 1e-12);
  /* Q R rebuilds A, Q has orthonormal columns, R is upper triangular */
  tyto_tensor *q, *rr;
  tyto_qr(a, &q, &rr);
  tyto_tensor *outs[3] = {q, rr, tyto_matmul(q, rr, 0, 0)};
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ctx, g, 3, outs, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_set_input(p, a, va, sizeof va), TYTO_OK);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  double vq[4], vr[4];
  read_out(p, 0, vq);
  read_out(p, 1, vr);
  read_out(p, 2, r);
  expect(r, va, 4, 1e-14);
  ck_assert_double_eq_tol(vr[2], 0, 1e-15);
  ck_assert_double_eq_tol(vq[0] * vq[1] + vq[2] * vq[3], 0, 1e-15);
  ck_assert_double_eq_tol(vq[0] * vq[0] + vq[2] * vq[2], 1, 1e-15);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

static long rss_pages(void) {
  long size = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f)
    return -1;
  if (fscanf(f, "%ld %ld", &size, &res) != 2)
    res = -1;
  fclose(f);
  return res;
}

/* One program run 1,000 times with changing inputs matches fresh
 * compiles, and resident memory does not grow. */
START_TEST(test_repeated_runs) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, (int64_t[]){4, 4}, "x");
  tyto_tensor *f =
      tyto_sum(tyto_matmul(tyto_tanh(x), x, 0, 1), 1, (int[]){1}, 0);
  tyto_program *p;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &f, NULL, &p), TYTO_OK);
  double vx[16], r[4], w[4];
  long before = 0;
  for (int it = 0; it < 1000; it++) {
    for (int i = 0; i < 16; i++)
      vx[i] = sin(it * 0.37 + i);
    ck_assert_int_eq(tyto_program_set_input(p, x, vx, sizeof vx), TYTO_OK);
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    read_out(p, 0, r);
    if (it % 100 == 0) {
      const double *v[1] = {vx};
      eval1(g, f, 1, &x, v, w);
      expect(r, w, 4, 0);
    }
    for (int i = 0; i < 4; i++) {
      double s = 0;
      for (int j = 0; j < 4; j++)
        for (int k = 0; k < 4; k++)
          s += tanh(vx[i * 4 + k]) * vx[j * 4 + k];
      ck_assert_double_eq_tol(r[i], s, 1e-13);
    }
    if (it == 99)
      before = rss_pages();
  }
  long after = rss_pages();
  /* 64 pages (256 KiB) of slack for allocator noise; valgrind and
   * AddressSanitizer keep freed blocks in quarantine, so not under them. */
#if defined(__SANITIZE_ADDRESS__)
  int measured = 0;
#else
  int measured = !getenv("TYTO_TEST_UNDER_VALGRIND");
#endif
  if (measured)
    ck_assert_msg(after - before <= 64, "RSS grew from %ld to %ld pages",
                  before, after);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

START_TEST(test_parameters) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, (int64_t[]){3}, "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, (int64_t[]){3}, "w");
  tyto_tensor *outs[2] = {tyto_mul(x, w), w};
  tyto_program *p;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 2, outs, NULL, &p), TYTO_OK);
  float vx[3] = {1, 2, 3}, vw[3] = {0.5f, -1, 4}, got[3];
  ck_assert_int_eq(tyto_program_read_parameter(p, w, got, sizeof got), TYTO_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_float_eq(got[i], 0); /* zeros until written */
  ck_assert_int_eq(tyto_program_write_parameter(p, w, vw, sizeof vw), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, x, vx, sizeof vx), TYTO_OK);
  for (int run = 0; run < 3; run++) {
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got), TYTO_OK);
    for (int i = 0; i < 3; i++)
      ck_assert_float_eq(got[i], vx[i] * vw[i]);
    ck_assert_int_eq(tyto_program_read_output(p, 1, got, sizeof got), TYTO_OK);
    for (int i = 0; i < 3; i++)
      ck_assert_float_eq(got[i], vw[i]);
  }
  ck_assert_int_eq(tyto_program_read_parameter(p, w, got, sizeof got), TYTO_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_float_eq(got[i], vw[i]);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

static void expect_error(tyto_status st, tyto_status want, const char *msg) {
  ck_assert_msg(st == want, "status %s, expected %s (%s)", tyto_status_name(st),
                tyto_status_name(want), tyto_errmsg());
  ck_assert_msg_contains(tyto_errmsg(), msg);
}

/* A buffer the device cannot give: the message names the device and the
 * tensor, in a sentence that reads. 2^38 bytes is more than any test
 * machine commits to one allocation. AddressSanitizer's allocator aborts
 * on such a request instead of failing it, so it is skipped there. */
START_TEST(test_out_of_memory_message) {
#if defined(__SANITIZE_ADDRESS__)
  fprintf(stderr, "skipped under AddressSanitizer\n");
#else
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x =
      tyto_input(g, TYTO_F32, 2, (int64_t[]){INT64_C(1) << 20, 1 << 16}, "x");
  tyto_tensor *y = tyto_mul(x, x);
  tyto_program *p = NULL;
  tyto_status st = tyto_program_compile(ctx, g, 1, &y, NULL, &p);
  ck_assert_int_eq(st, TYTO_ERR_OUT_OF_MEMORY);
  const char *m = tyto_errmsg();
  ck_assert_msg(strncmp(m, "compile on cpu:0: allocating ", 29) == 0, "%s", m);
  ck_assert_msg(strstr(m, ") is ") == NULL, "%s", m);
  ck_assert_msg(strstr(m, "input 'x' (#0), f32[1048576,65536] (274877906944 "
                          "bytes)") != NULL ||
                    strstr(m, "the 549755813888-byte arena") != NULL,
                "%s", m);
  tyto_graph_free(g);
#endif
}
END_TEST

START_TEST(test_errors) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, (int64_t[]){64, 784}, "x");
  tyto_tensor *unused = tyto_input(g, TYTO_F32, 1, (int64_t[]){2}, "u");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, (int64_t[]){784}, "w");
  tyto_tensor *other = tyto_parameter(g, TYTO_F32, 1, (int64_t[]){2}, NULL);
  tyto_tensor *f = tyto_mul(x, w);
  tyto_program *p;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &f, NULL, &p), TYTO_OK);
  ck_assert_uint_eq(tyto_program_output_count(p), 1);
  char buf[16];
  expect_error(tyto_program_set_input(p, x, buf, 1000),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_set_input: input 'x' (#0) is f32[64,784] "
               "(200704 bytes), got 1000 bytes");
  expect_error(tyto_program_run(p), TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_run: input 'x' (#0) is f32[64,784] (200704 "
               "bytes) and was never set");
  expect_error(tyto_program_set_input(p, unused, buf, 8),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_set_input: input 'u' (#1) is not used by this "
               "program");
  expect_error(tyto_program_set_input(p, f, buf, 8), TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_set_input: tensor #4 is a computed tensor, not "
               "an input");
  expect_error(tyto_program_read_parameter(p, other, buf, 8),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_read_parameter: parameter (#3) is not used by "
               "this program");
  expect_error(tyto_program_write_parameter(p, w, buf, 8),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_write_parameter: parameter 'w' (#2) is f32[784] "
               "(3136 bytes), got 8 bytes");
  expect_error(tyto_program_read_output(p, 0, buf, 8),
               TYTO_ERR_INVALID_ARGUMENT, "has not run yet");
  expect_error(tyto_program_read_output(p, 1, buf, 8),
               TYTO_ERR_INVALID_ARGUMENT,
               "tyto_program_read_output: output 1 out of range (the "
               "program has 1)");
  tyto_program_free(p);

  /* a tensor of another graph */
  tyto_graph *g2 = tyto_graph_new();
  tyto_tensor *y = tyto_input(g2, TYTO_F32, 1, (int64_t[]){2}, "y");
  expect_error(tyto_program_compile(ctx, g, 1, &y, NULL, &p),
               TYTO_ERR_INVALID_ARGUMENT,
               "compile: output 0 belongs to another graph");
  ck_assert_ptr_null(p);
  /* no device 5 */
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.device = 5;
  expect_error(tyto_program_compile(ctx, g, 1, &f, &o, &p), TYTO_ERR_NOT_FOUND,
               "compile: no selected device 5");
  /* an op that cannot be lowered: a tile needing 16 strided axes */
  int64_t s8[8] = {2, 2, 2, 2, 2, 2, 2, 2};
  /* (an input: a tile of a constant is folded away) */
  tyto_tensor *t8 = tyto_tile(tyto_input(g2, TYTO_F32, 8, s8, "t"), 8, s8);
  expect_error(tyto_program_compile(ctx, g2, 1, &t8, NULL, &p),
               TYTO_ERR_UNSUPPORTED,
               "compile: op tile (tensor #2) cannot be "
               "lowered yet");
  /* eager evaluation needs no inputs */
  tyto_eval_cache *c;
  ck_assert_int_eq(tyto_eval_cache_new(ctx, &c), TYTO_OK);
  tyto_tensor *yy = tyto_add(y, y);
  expect_error(tyto_tensor_eval(c, yy, buf, 8), TYTO_ERR_INVALID_ARGUMENT,
               "eval: tensor #3 depends on input 'y' (#0); compile a program "
               "and bind it with tyto_program_set_input");
  /* a graph in error */
  tyto_matmul(y, y, 0, 0);
  expect_error(tyto_program_compile(ctx, g2, 1, &yy, NULL, &p),
               TYTO_ERR_INVALID_ARGUMENT,
               "compile: graph is in error: matmul: operands need rank >= 2");
  expect_error(tyto_tensor_eval(c, yy, buf, 8), TYTO_ERR_INVALID_ARGUMENT,
               "eval: graph is in error: matmul");
  tyto_eval_cache_free(c);
  tyto_graph_free(g2);
  tyto_graph_free(g);
}
END_TEST

static tyto_tensor *eager_graph(tyto_graph *g) {
  tyto_tensor *x = tyto_full(g, TYTO_F64, 2, (int64_t[]){2, 2}, 1);
  tyto_tensor *y = tyto_scalar(g, TYTO_F64, 1);
  return tyto_sum(tyto_mul(tyto_add(tyto_mul(x, tyto_sin(tyto_add(x, x))),
                                    tyto_div_scalar(tyto_sqrt(x), 7)),
                           tyto_relu(y)),
                  0, NULL, 0);
}

START_TEST(test_eager) {
  tyto_eval_cache *c;
  ck_assert_int_eq(tyto_eval_cache_new(ctx, &c), TYTO_OK);
  for (int round = 0; round < 2; round++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *f = eager_graph(g);
    double r = 0;
    ck_assert_int_eq(tyto_tensor_eval(c, f, &r, sizeof r), TYTO_OK);
    ck_assert_double_eq_tol(r, 4.20861827873129801, 1e-12);
    ck_assert_int_eq(tyto_tensor_eval(c, f, &r, sizeof r), TYTO_OK);
    /* a constant's values are part of the key */
    tyto_tensor *k = tyto_constant(g, TYTO_F64, 1, (int64_t[]){2},
                                   (double[]){round + 1.0, 5});
    double kv[2];
    ck_assert_int_eq(tyto_tensor_eval(c, tyto_neg(k), kv, sizeof kv), TYTO_OK);
    ck_assert_double_eq(kv[0], -(round + 1.0));
    expect_error(tyto_tensor_eval(c, f, &r, 4), TYTO_ERR_INVALID_ARGUMENT,
                 "got 4 bytes");
    tyto_graph_free(g);
  }
  /* f compiled once for both graphs; neg(k) once per constant value */
  ck_assert_uint_eq(tyto_eval_cache_compiles(c), 3);
  /* more programs than the cache keeps: the least recently used go */
  tyto_graph *g = tyto_graph_new();
  for (int i = 0; i < 40; i++) {
    double r;
    tyto_tensor *t = tyto_mul_scalar(tyto_scalar(g, TYTO_F64, i), 3);
    ck_assert_int_eq(tyto_tensor_eval(c, t, &r, sizeof r), TYTO_OK);
    ck_assert_double_eq(r, 3.0 * i);
  }
  ck_assert_uint_eq(tyto_eval_cache_compiles(c), 43);
  tyto_graph_free(g);
  tyto_eval_cache_free(c);
}
END_TEST

/* tyto_context_free with a program and an evaluation cache still alive:
 * both hold the context, go on working (runs, parameters, new compiles
 * in the cache), and the last one freed closes the devices (valgrind and
 * ASan see no access to freed memory and no leak). */
START_TEST(test_context_freed_first) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  tyto_context *own = NULL;
  ck_assert_msg(tyto_context_new(&o, &own) == TYTO_OK, "%s", tyto_errmsg());
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, (int64_t[]){4}, "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, (int64_t[]){4}, "w");
  tyto_tensor *y = tyto_add_scalar(tyto_mul(x, w), 1);
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(own, g, 1, &y, NULL, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  tyto_eval_cache *c;
  ck_assert_int_eq(tyto_eval_cache_new(own, &c), TYTO_OK);
  tyto_context_free(own); /* before the program and the cache */
  float vx[4] = {1, 2, 3, 4}, vw[4] = {2, -1, 0.5f, 3}, got[4];
  ck_assert_int_eq(tyto_program_write_parameter(p, w, vw, sizeof vw), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, x, vx, sizeof vx), TYTO_OK);
  for (int run = 0; run < 2; run++) {
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got), TYTO_OK);
    for (int i = 0; i < 4; i++)
      ck_assert_float_eq(got[i], vx[i] * vw[i] + 1);
  }
  /* The cache compiles a new program on the held context. */
  double r = 0;
  ck_assert_msg(
      tyto_tensor_eval(c, tyto_mul_scalar(tyto_scalar(g, TYTO_F64, 7), 3), &r,
                       sizeof r) == TYTO_OK,
      "%s", tyto_errmsg());
  ck_assert_double_eq(r, 21);
  tyto_eval_cache_free(c);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  tyto_program_free(p); /* the last hold: the devices close here */
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("program");
  TCase *tc = tcase_create("program");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_seed);
  tcase_add_test(tc, test_elementwise_broadcast);
  tcase_add_test(tc, test_unary);
  tcase_add_test(tc, test_views);
  tcase_add_test(tc, test_reductions);
  tcase_add_test(tc, test_matmul);
  tcase_add_test(tc, test_concat_pad_gather);
  tcase_add_test(tc, test_conv_pool_softmax);
  tcase_add_test(tc, test_random);
  tcase_add_test(tc, test_slice_backward);
  tcase_add_test(tc, test_triangular_solve);
  tcase_add_test(tc, test_conv_pool_backward);
  tcase_add_test(tc, test_linalg);
  tcase_add_test(tc, test_repeated_runs);
  tcase_add_test(tc, test_parameters);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_out_of_memory_message);
  tcase_add_test(tc, test_eager);
  suite_add_tcase(s, tc);
  TCase *life = tcase_create("lifetime");
  tcase_set_timeout(life, 60);
  tcase_add_test(life, test_context_freed_first);
  suite_add_tcase(s, life);
  return test_run(s);
}
