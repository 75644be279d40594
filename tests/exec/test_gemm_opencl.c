/* Matrix products on the OpenCL plugin's two GEMMs (its option gemm: tyto's
 * register-blocked kernels, plugins/opencl/gemm.c, the default on CPU
 * devices such as PoCL; CLBlast, the default elsewhere), through the
 * public API, against sums in long double on the host. The shapes reach
 * every path of tyto's kernels: a column tail and row tail, k beyond one
 * slice of B's panel (the product in passes that add into C), B read
 * along k with an odd column count, both operands transposed (computed
 * as C^T = B^T A^T), a batch with its own strides, a right operand shared
 * by the batch, one row, f32 and f64. Each element must lie within
 * 2 k u sum_k |a_ik b_kj| of the exact value (u the unit roundoff: the
 * bound of a dot product summed in any order, Higham 3.1, doubled). The
 * option's bad value is refused at probe time, naming the values it
 * takes. Skips (77) without an OpenCL device, and under valgrind, where
 * PoCL takes minutes to build a program. */
#include "common.h"

#include <math.h>
#include <unistd.h>

typedef struct mm_case {
  const char *what;
  int64_t batch; /* 0: no batch axis */
  int64_t m, k, n;
  int ta, tb;
  int shared_b; /* B has no batch axis (broadcast over A's) */
} mm_case;

static const mm_case cases[] = {
    {"tails of rows and columns", 0, 9, 37, 70, 0, 0, 0},
    {"k in slices", 0, 9, 2500, 70, 0, 0, 0},
    {"one row, long k", 0, 1, 3000, 33, 0, 0, 0},
    {"B along k, odd n", 0, 7, 37, 9, 0, 1, 0},
    {"B along k, long k", 0, 13, 1100, 5, 0, 1, 0},
    {"A transposed", 0, 11, 19, 40, 1, 0, 0},
    {"both transposed", 0, 7, 37, 9, 1, 1, 0},
    {"batched", 3, 5, 40, 18, 0, 0, 0},
    {"batched, B along k", 2, 6, 33, 7, 0, 1, 0},
    {"batch over a shared B", 4, 3, 21, 35, 0, 0, 1},
};

static double value(uint64_t i, unsigned salt) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull + salt * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return (double)(x % 2001) / 1000.0 - 1.0;
}

/* n values of salt into v (as the device's dtype holds them) and into
 * host, in that dtype. */
static void fill(double *v, void *host, int64_t n, unsigned salt, int f64) {
  for (int64_t i = 0; i < n; i++) {
    v[i] = value((uint64_t)i, salt);
    if (f64) {
      ((double *)host)[i] = v[i];
    } else {
      v[i] = (float)v[i];
      ((float *)host)[i] = (float)v[i];
    }
  }
}

static tyto_context *context(const char *gemm) {
  char text[64];
  snprintf(text, sizeof text, "[opencl]\ngemm = %s\n", gemm);
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = test_write_file(text);
  o.devices = "opencl:0";
  tyto_context *ctx = NULL;
  tyto_status st = tyto_context_new(&o, &ctx);
  unlink(o.config_path);
  ck_assert_msg(st == TYTO_OK, "gemm=%s: %s", gemm, tyto_errmsg());
  return ctx;
}

/* One case in dtype dt on ctx, checked against the bound. */
static void run_case(tyto_context *ctx, const char *gemm, const mm_case *c,
                     tyto_dtype dt) {
  const int f64 = dt == TYTO_F64;
  const int64_t nb = c->batch ? c->batch : 1;
  int64_t as[3], bs[3];
  int ra = 0, rb = 0;
  if (c->batch)
    as[ra++] = c->batch;
  as[ra++] = c->ta ? c->k : c->m;
  as[ra++] = c->ta ? c->m : c->k;
  if (c->batch && !c->shared_b)
    bs[rb++] = c->batch;
  bs[rb++] = c->tb ? c->n : c->k;
  bs[rb++] = c->tb ? c->k : c->n;
  const int64_t na = nb * c->m * c->k,
                nbe = (c->shared_b ? 1 : nb) * c->k * c->n,
                nc = nb * c->m * c->n;
  const size_t es = f64 ? 8 : 4;
  double *a = malloc((size_t)na * sizeof *a),
         *b = malloc((size_t)nbe * sizeof *b);
  void *ha = malloc((size_t)na * es), *hb = malloc((size_t)nbe * es),
       *hc = malloc((size_t)nc * es);
  ck_assert(a && b && ha && hb && hc);
  fill(a, ha, na, 1, f64);
  fill(b, hb, nbe, 2, f64);
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, dt, ra, as, "a");
  tyto_tensor *y = tyto_input(g, dt, rb, bs, "b");
  tyto_tensor *z = tyto_matmul(x, y, c->ta, c->tb);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &z, NULL, &p) == TYTO_OK,
                "%s: %s", c->what, tyto_errmsg());
  ck_assert_int_eq(tyto_program_set_input(p, x, ha, (size_t)na * es), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, y, hb, (size_t)nbe * es), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, hc, (size_t)nc * es),
                   TYTO_OK);
  const double u = f64 ? 0x1p-53 : 0x1p-24;
  for (int64_t q = 0; q < nb; q++)
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t j = 0; j < c->n; j++) {
        long double exact = 0;
        double mag = 0;
        for (int64_t k = 0; k < c->k; k++) {
          int64_t ia = q * c->m * c->k + (c->ta ? k * c->m + i : i * c->k + k);
          int64_t ib = (c->shared_b ? 0 : q * c->k * c->n) +
                       (c->tb ? j * c->k + k : k * c->n + j);
          exact += (long double)a[ia] * (long double)b[ib];
          mag += fabs(a[ia] * b[ib]);
        }
        int64_t ic = (q * c->m + i) * c->n + j;
        double got = f64 ? ((double *)hc)[ic] : (double)((float *)hc)[ic];
        double bound = 2.0 * (double)c->k * u * mag;
        ck_assert_msg(fabs(got - (double)exact) <= bound,
                      "gemm=%s, %s (%s): C[%lld][%lld][%lld] = %.17g, exact "
                      "%.17Lg, bound %.3g",
                      gemm, c->what, f64 ? "f64" : "f32", (long long)q,
                      (long long)i, (long long)j, got, exact, bound);
      }
  tyto_program_free(p);
  tyto_graph_free(g);
  free(a);
  free(b);
  free(ha);
  free(hb);
  free(hc);
}

static int no_device(void) {
  char why[1024];
  return getenv("TYTO_TEST_UNDER_VALGRIND") ||
         test_probe_devices("opencl:0", why, sizeof why) != 0;
}

static void run_all(const char *gemm) {
  tyto_context *ctx = context(gemm);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(ctx, gemm, &cases[i], TYTO_F32);
    run_case(ctx, gemm, &cases[i], TYTO_F64);
  }
  tyto_context_free(ctx);
}

START_TEST(tyto_kernels) {
  run_all("tyto");
}
END_TEST

START_TEST(clblast) {
  run_all("clblast");
}
END_TEST

START_TEST(bad_option_value) {
  tyto_context_options o;
  test_options(&o, 0);
  o.config_path = test_write_file("[opencl]\ngemm = fastest\n");
  o.devices = "opencl:0";
  tyto_context *ctx = NULL;
  tyto_status st = tyto_context_new(&o, &ctx);
  unlink(o.config_path);
  ck_assert_int_ne(st, TYTO_OK);
  ck_assert_msg_contains(tyto_errmsg(),
                         "option gemm=\"fastest\" is not valid; allowed "
                         "values: auto, clblast, tyto");
}
END_TEST

int main(void) {
  if (no_device())
    return 77;
  Suite *s = suite_create("gemm_opencl");
  TCase *tc = tcase_create("gemm_opencl");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, tyto_kernels);
  tcase_add_test(tc, clblast);
  tcase_add_test(tc, bad_option_value);
  suite_add_tcase(s, tc);
  return test_run(s);
}
