/* Synchronised batch normalisation (tyto_nn_options.sync_batch_norm) on
 * one device, where a replica sum is its operand: the same outputs,
 * gradients of x, gamma and beta, and running statistics as the plain
 * batch norm, in f32 (within 1e-5) and f64 (within 1e-12), for [N, F] and
 * [N, C, H, W]; its own derivatives against central differences; the
 * replica sums in its graph; the local count check left to the global
 * batch; and the field defaulting for callers built before it. */
#include "nn/nn_test.h"

#include <stddef.h>

/* n values of nn_fill(k, scale, offset) as dtype (f32 or f64) in dst. */
static void fill_as(tyto_dtype dt, void *dst, int64_t n, int k, double scale,
                    double offset) {
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  nn_fill(v, n, k, scale, offset);
  for (int64_t i = 0; i < n; i++) {
    if (dt == TYTO_F32)
      ((float *)dst)[i] = (float)v[i];
    else
      ((double *)dst)[i] = v[i];
  }
  free(v);
}

/* A network of dtype in g, TRAIN mode, with sync_batch_norm as given. */
static tyto_nn *make(tyto_graph *g, tyto_dtype dt, int sync) {
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  o.dtype = dt;
  o.sync_batch_norm = sync;
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_OK);
  return nn;
}

/* REPLICA_SUM nodes of g, of kind PLAIN (n[0]) and SHARES (n[1]). */
static void count_sums(const tyto_graph *g, int n[2]) {
  n[0] = n[1] = 0;
  for (size_t i = 0; i < tyto_graph_size(g); i++) {
    tyto_tensor *t = tyto_graph_tensor(g, i);
    if (tyto_tensor_op(t) == TYTO_OP_REPLICA_SUM)
      n[tyto_tensor_iattrs(t)[0] == TYTO_REPLICA_SUM_SHARES]++;
  }
}

enum { N_OUT = 6, MAX_VALUES = 64 };

/* One TRAIN step of a batch norm of x (shape), with the gradients of
 * sum(c y^2) (c a fixed pattern) in x, gamma and beta, as doubles: y,
 * dx, dgamma, dbeta, running_mean, running_var into out[0 .. N_OUT). */
static void step(tyto_dtype dt, int sync, int rank, const int64_t *shape,
                 double out[N_OUT][MAX_VALUES]) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = make(g, dt, sync);
  tyto_tensor *x = tyto_nn_input(nn, rank, shape, "x");
  tyto_tensor *y = tyto_nn_batch_norm(nn, "bn", x, 0.3, 1e-3);
  int64_t n = tyto_tensor_numel(x), ch = shape[1];
  ck_assert_int_le(n, MAX_VALUES);
  double cv[MAX_VALUES];
  nn_fill(cv, n, 5, 1.0, 0.5);
  tyto_tensor *c = tyto_constant(g, dt, rank, shape, cv);
  tyto_tensor *l = tyto_sum(tyto_mul(c, tyto_square(y)), 0, NULL, 0);
  tyto_tensor *gamma = nn_named(nn, "bn.gamma"),
              *beta = nn_named(nn, "bn.beta");
  tyto_tensor *rm = nn_named(nn, "bn.running_mean");
  tyto_tensor *rv = nn_named(nn, "bn.running_var");
  tyto_tensor *wrt[3] = {x, gamma, beta}, *outs[4] = {y};
  tyto_grads(l, 3, wrt, outs + 1);
  tyto_program *p = nn_compile(g, 4, outs, nn);
  /* x, gamma, beta, running_mean, running_var */
  tyto_tensor *bound[5] = {x, gamma, beta, rm, rv};
  const double scale[5] = {2, 0.5, 0.5, 0.5, 0.5}, off[5] = {0.7, 1, 0, 0, 1};
  size_t es = tyto_dtype_size(dt);
  unsigned char buf[MAX_VALUES * sizeof(double)];
  for (int i = 0; i < 5; i++) {
    int64_t m = tyto_tensor_numel(bound[i]);
    fill_as(dt, buf, m, 30 + i, scale[i], off[i]);
    nn_bind_raw(p, bound[i], buf, (size_t)m * es);
  }
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "run: %s", tyto_errmsg());
  const int64_t sizes[N_OUT] = {n, n, ch, ch, ch, ch};
  for (int i = 0; i < N_OUT; i++) {
    size_t bytes = (size_t)sizes[i] * es;
    tyto_status st =
        i < 4 ? tyto_program_read_output(p, (size_t)i, buf, bytes)
              : tyto_program_read_parameter(p, i == 4 ? rm : rv, buf, bytes);
    ck_assert_msg(st == TYTO_OK, "read %d: %s", i, tyto_errmsg());
    for (int64_t j = 0; j < sizes[i]; j++)
      out[i][j] =
          dt == TYTO_F32 ? (double)((float *)buf)[j] : ((double *)buf)[j];
  }
  /* The synchronised graph sums over the replicas: one exchange for
   * the channel sums and count, one for the squares, and their
   * transposes in the gradient. */
  int k[2];
  count_sums(g, k);
  ck_assert_int_eq(k[0], sync ? 2 : 0);
  ck_assert_int_eq(k[1], sync ? 2 : 0);
  tyto_program_free(p);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}

static void same_as_plain(tyto_dtype dt, int rank, const int64_t *shape,
                          double rtol) {
  static double plain[N_OUT][MAX_VALUES], sync[N_OUT][MAX_VALUES];
  step(dt, 0, rank, shape, plain);
  step(dt, 1, rank, shape, sync);
  static const char *const what[N_OUT] = {
      "y", "dx", "dgamma", "dbeta", "running_mean", "running_var"};
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= shape[i];
  char name[64];
  for (int i = 0; i < N_OUT; i++) {
    snprintf(name, sizeof name, "sync %s %s rank %d", what[i],
             tyto_dtype_name(dt), rank);
    nn_expect(sync[i], plain[i], i < 2 ? n : shape[1], rtol, name);
  }
}

START_TEST(equals_plain_f32) {
  same_as_plain(TYTO_F32, 2, S(6, 3), 1e-5);
  same_as_plain(TYTO_F32, 4, S(4, 3, 2, 2), 1e-5);
}
END_TEST

START_TEST(equals_plain_f64) {
  same_as_plain(TYTO_F64, 2, S(6, 3), 1e-12);
  same_as_plain(TYTO_F64, 4, S(4, 3, 2, 2), 1e-12);
}
END_TEST

/* Its derivatives in x, gamma and beta against central differences, both
 * modes (f64). */
START_TEST(gradcheck) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = make(g, TYTO_F64, 1);
  tyto_tensor *x = tyto_nn_input(nn, 4, S(3, 2, 2, 2), "x");
  tyto_tensor *y = tyto_nn_batch_norm(nn, "bn", x, 0, 0);
  nn_bind bs[3] = {{x, 40, 2.0, 0.3, NULL},
                   {nn_named(nn, "bn.gamma"), 41, 0.5, 1.0, NULL},
                   {nn_named(nn, "bn.beta"), 42, 0.5, 0, NULL}};
  nn_gradcheck(y, 3, bs, "sync batch_norm grad");
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* One value per channel on this replica: the plain batch norm refuses it,
 * the synchronised one leaves the count to the global batch. */
START_TEST(local_count_not_checked) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn *plain = make(g, TYTO_F32, 0);
  tyto_nn_batch_norm(plain, "bn", tyto_nn_input(plain, 2, S(1, 3), "a"), 0, 0);
  nn_expect_error(g, "batch_norm 'bn': x [1,3] has 1 value per channel");
  tyto_nn_free(plain);
  tyto_graph_free(g);
  g = tyto_graph_new();
  tyto_nn *sync = make(g, TYTO_F32, 1);
  tyto_tensor *y = tyto_nn_batch_norm(
      sync, "bn", tyto_nn_input(sync, 2, S(1, 3), "a"), 0, 0);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  nn_expect_shape(y, 2, S(1, 3), "sync batch_norm of one row");
  /* EVAL mode needs no statistics of the batch: no replica sum. */
  tyto_nn_set_mode(sync, TYTO_NN_EVAL);
  size_t before = tyto_graph_size(g);
  tyto_nn_batch_norm(sync, "bn", tyto_nn_input(sync, 2, S(1, 3), "b"), 0, 0);
  for (size_t i = before; i < tyto_graph_size(g); i++)
    ck_assert_int_ne(tyto_tensor_op(tyto_graph_tensor(g, i)),
                     TYTO_OP_REPLICA_SUM);
  tyto_nn_free(sync);
  tyto_graph_free(g);
}
END_TEST

/* A caller built before the field (a struct_size that ends before it)
 * gets the default, whatever the memory past its struct holds. */
START_TEST(options_default_off) {
  tyto_nn_options o;
  tyto_nn_options_init(&o);
  ck_assert_int_eq(o.sync_batch_norm, 0);
  o.sync_batch_norm = 1;
  o.struct_size = offsetof(tyto_nn_options, sync_batch_norm);
  tyto_graph *g = tyto_graph_new();
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, &o, &nn), TYTO_OK);
  tyto_nn_batch_norm(nn, "bn", tyto_nn_input(nn, 2, S(4, 3), "x"), 0, 0);
  int k[2];
  count_sums(g, k);
  ck_assert_int_eq(k[0] + k[1], 0);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("batch_norm_sync");
  TCase *tc = tcase_create("batch_norm_sync");
  nn_fixture(tc);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, equals_plain_f32);
  tcase_add_test(tc, equals_plain_f64);
  tcase_add_test(tc, gradcheck);
  tcase_add_test(tc, local_count_not_checked);
  tcase_add_test(tc, options_default_off);
  suite_add_tcase(s, tc);
  return test_run(s);
}
