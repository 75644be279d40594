/* Forward mode agrees with reverse mode: for 200 random functions built
 * from random ops on random shapes (fixed seed), the Jacobian built from
 * forward sweeps (columns, J e_j) equals the one built from reverse sweeps
 * (rows, J^T e_i); every tenth function is also checked against central
 * differences. Float64. Under valgrind (TYTO_TEST_UNDER_VALGRIND) the
 * first 20 functions only: the point there is memory, not coverage. */
#include "ad/ad_test.h"

#define N_GRAPHS 200

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next(rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int pick(rng *r, int n) {
  return (int)(next(r) % (uint64_t)n);
}

static double uniform(rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(next(r) >> 11) * 0x1.0p-53);
}

static tyto_tensor *random_constant(rng *r, tyto_graph *g, int rank,
                                    const int64_t *shape) {
  double v[128];
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= shape[i];
  ck_assert_int_le(n, 128);
  for (int64_t i = 0; i < n; i++)
    v[i] = uniform(r, -1, 1);
  return tyto_constant(g, TYTO_F64, rank, shape, v);
}

/* A smooth unary function, defined everywhere. */
static tyto_tensor *smooth(rng *r, tyto_tensor *t) {
  switch (pick(r, 14)) {
  case 0: return tyto_sin(t);
  case 1: return tyto_cos(t);
  case 2: return tyto_tanh(t);
  case 3: return tyto_sigmoid(t);
  case 4: return tyto_softplus(t);
  case 5: return tyto_atan(t);
  case 6: return tyto_erf(t);
  case 7: return tyto_square(t);
  case 8: return tyto_neg(t);
  case 9: return tyto_asinh(t);
  case 10: return tyto_exp(tyto_tanh(t));
  case 11: return tyto_log1p(tyto_square(t));
  case 12: return tyto_sqrt(tyto_add_scalar(tyto_square(t), 1));
  default: return tyto_reciprocal(tyto_add_scalar(tyto_square(t), 1));
  }
}

static int broadcastable(const tyto_tensor *a, const tyto_tensor *b) {
  int ra = tyto_tensor_rank(a), rb = tyto_tensor_rank(b);
  for (int i = 1; i <= ra && i <= rb; i++) {
    int64_t x = tyto_tensor_dim(a, -i), y = tyto_tensor_dim(b, -i);
    if (x != y && x != 1 && y != 1)
      return 0;
  }
  return 1;
}

static tyto_tensor *binary(rng *r, tyto_tensor *a, tyto_tensor *b) {
  if (!broadcastable(a, b))
    b = tyto_sum(b, 0, NULL, 0);
  switch (pick(r, 8)) {
  case 0: return tyto_add(a, b);
  case 1: return tyto_sub(a, b);
  case 2: return tyto_mul(a, b);
  case 3: return tyto_div(a, tyto_add_scalar(tyto_square(b), 1));
  case 4: return tyto_max(a, b);
  case 5: return tyto_min(a, b);
  case 6: return tyto_atan2(a, tyto_add_scalar(tyto_square(b), 0.5));
  default:
    return tyto_pow(tyto_add_scalar(tyto_softplus(a), 0.5), tyto_tanh(b));
  }
}

static tyto_tensor *reduction(rng *r, tyto_tensor *t) {
  int rank = tyto_tensor_rank(t), axes[TYTO_MAX_RANK], n = 0;
  for (int i = 0; i < rank; i++)
    if (pick(r, 2))
      axes[n++] = i;
  if (!n && rank)
    axes[n++] = pick(r, rank);
  int keep = pick(r, 2);
  switch (pick(r, 6)) {
  case 0: return tyto_sum(t, n, axes, keep);
  case 1: return tyto_mean(t, n, axes, keep);
  case 2: return tyto_log_sum_exp(t, n, axes, keep);
  case 3: return tyto_reduce_max(t, n, axes, keep);
  case 4: return tyto_prod(t, n, axes, keep);
  default: return tyto_norm_l2(tyto_add_scalar(t, 2), n, axes, keep);
  }
}

static tyto_tensor *layout(rng *r, tyto_tensor *t) {
  int rank = tyto_tensor_rank(t);
  int64_t n = tyto_tensor_numel(t);
  if (rank == 0)
    return tyto_reshape(t, 2, AD_S(1, 1));
  int ax = pick(r, rank);
  int64_t ext = tyto_tensor_dim(t, ax);
  switch (pick(r, 8)) {
  case 0: {
    int perm[TYTO_MAX_RANK];
    for (int i = 0; i < rank; i++)
      perm[i] = rank - 1 - i;
    return tyto_permute(t, rank, perm);
  }
  case 1: return tyto_reshape(t, 1, &n);
  case 2: return tyto_slice_axis(t, ax, TYTO_END, TYTO_END, -1);
  case 3: return ext > 1 ? tyto_slice_axis(t, ax, 0, TYTO_END, 2) : t;
  case 4: {
    tyto_tensor *two[2] = {t, tyto_sin(t)};
    return tyto_concat(2, two, ax);
  }
  case 5: {
    int64_t before[TYTO_MAX_RANK] = {0}, after[TYTO_MAX_RANK] = {0};
    before[ax] = 1;
    after[ax] = ext > 1 ? 1 : 0;
    return tyto_pad(t, before, after,
                    ext > 1 ? TYTO_PAD_REFLECT : TYTO_PAD_CONSTANT, 0.5);
  }
  case 6: {
    int64_t reps[TYTO_MAX_RANK];
    for (int i = 0; i < rank; i++)
      reps[i] = i == ax ? 2 : 1;
    return tyto_tile(t, rank, reps);
  }
  default: return tyto_flip(t, 1, &ax);
  }
}

static tyto_tensor *other(rng *r, tyto_graph *g, tyto_tensor *t,
                          tyto_tensor *u) {
  int rank = tyto_tensor_rank(t);
  switch (pick(r, 5)) {
  case 0:
    if (rank >= 2)
      return tyto_matmul(t, t, 0, 1);
    return tyto_matmul(tyto_reshape(t, 2, AD_S(1, tyto_tensor_numel(t))),
                       random_constant(r, g, 2, AD_S(tyto_tensor_numel(t), 2)),
                       0, 0);
  case 1: return rank ? tyto_softmax(t, pick(r, rank)) : smooth(r, t);
  case 2: return rank ? tyto_log_softmax(t, -1) : smooth(r, t);
  case 3:
    return tyto_where(tyto_gt(tyto_sin(t), tyto_scalar_like(t, 0)), t,
                      tyto_cos(t));
  default:
    if (!broadcastable(t, u))
      u = tyto_sum(u, 0, NULL, 0);
    return tyto_fma(t, u, tyto_tanh(t));
  }
}

/* A random function of x; keeps its values moderate. */
static tyto_tensor *random_function(rng *r, tyto_graph *g, tyto_tensor *x) {
  tyto_tensor *pool[16];
  int n = 0;
  pool[n++] = x;
  int steps = 3 + pick(r, 5);
  for (int s = 0; s < steps; s++) {
    tyto_tensor *a = pool[pick(r, n)], *b = pool[pick(r, n)], *t;
    switch (pick(r, 5)) {
    case 0: t = smooth(r, a); break;
    case 1: t = binary(r, a, b); break;
    case 2: t = reduction(r, a); break;
    case 3: t = layout(r, a); break;
    default: t = other(r, g, a, b); break;
    }
    if (tyto_tensor_numel(t) > 36 || tyto_tensor_rank(t) > 4)
      t = tyto_sum(t, 1, (int[]){0}, 0);
    if (tyto_tensor_numel(t) == 0 || tyto_tensor_numel(t) > 36)
      t = tyto_sum(t, 0, NULL, 0);
    pool[n < 16 ? n++ : 15] = tyto_tanh(t); /* keep magnitudes bounded */
  }
  return pool[n - 1];
}

START_TEST(test_forward_equals_reverse) {
  rng r = {20261122};
  int checked_fd = 0;
  int n_graphs = getenv("TYTO_TEST_UNDER_VALGRIND") ? 20 : N_GRAPHS;
  for (int k = 0; k < n_graphs; k++) {
    tyto_graph *g = tyto_graph_new();
    int rank = 1 + pick(&r, 3);
    int64_t shape[3];
    for (int i = 0; i < rank; i++)
      shape[i] = 1 + pick(&r, 3);
    tyto_tensor *x = tyto_input(g, TYTO_F64, rank, shape, "x");
    tyto_tensor *y = random_function(&r, g, x);
    tyto_tensor *jf = tyto_jacobian_in_mode(y, x, TYTO_AD_FORWARD);
    tyto_tensor *jr = tyto_jacobian_in_mode(y, x, TYTO_AD_REVERSE);
    ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "graph %d: %s", k,
                  tyto_graph_error_message(g));
    int64_t nx = tyto_tensor_numel(x), m = tyto_tensor_numel(y) * nx;
    double xv[27], *a = malloc((size_t)m * sizeof *a),
                   *b = malloc((size_t)m * sizeof *b);
    ad_fill(xv, nx, -1.5, 1.5, (uint64_t)k + 1);
    const double *vals[1] = {xv};
    ad_eval(jf, 1, &x, vals, a);
    ad_eval(jr, 1, &x, vals, b);
    double scale = 1;
    for (int64_t i = 0; i < m; i++)
      scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < m; i++)
      if (!(fabs(a[i] - b[i]) <= 1e-10 * scale)) {
        tyto_graph_write_text(g, stderr);
        ck_abort_msg("graph %d: J[%lld] forward %.17g, reverse %.17g", k,
                     (long long)i, a[i], b[i]);
      }
    free(a);
    free(b);
    if (k % 10 == 0) {
      ad_check(y, 1, &x, vals, 1e-5, 1e-7);
      checked_fd++;
    }
    tyto_graph_free(g);
  }
  ck_assert_int_eq(checked_fd, n_graphs / 10);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ad_random");
  TCase *tc = tcase_create("random");
  ad_fixture(tc);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_forward_equals_reverse);
  suite_add_tcase(s, tc);
  return test_run(s);
}
