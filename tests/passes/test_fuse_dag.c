/*
 * Fusion must never join groups that reach each other through outside
 * nodes (issue 14, section 1): the graph the issue gives, a gradient and a
 * Hessian-vector product compiled together, and a property test over
 * random DAGs (elementwise ops, reductions, broadcasts and matmuls of
 * shapes that broadcast, random output sets). Every compile must succeed,
 * and the program compiled with fusion must give what the same program
 * compiled without the fuse pass gives, within a relative tolerance of
 * 1e-12 (f64) and 2e-6 (f32): fusion changes only roundings (an FMA for a
 * MUL and an ADD).
 */
#include "passes_test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tyto/tyto.h>

static tyto_context *ctx;

static void setup(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_int_eq(tyto_context_new(&o, &ctx), TYTO_OK);
}

static void teardown(void) {
  tyto_context_free(ctx);
  ctx = NULL;
}

/* ---------------------------------------------------------------------- */
/* Compiling and comparing                                                 */

static uint64_t rng_state;

static uint64_t rnd(void) {
  /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int pick(int n) {
  return (int)(rnd() % (uint64_t)n);
}

/* In [-1, 1). */
static double uniform(void) {
  return (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1;
}

/* Compiles outs of g (fused or with the fuse pass off), feeds every input
 * in ins the same values each time, runs, and returns the outputs as
 * doubles (vals[k] malloc'd). Returns the fused node count. */
static size_t run(tyto_graph *g, size_t n_in, tyto_tensor *const *ins,
                  size_t n_out, tyto_tensor *const *outs, int fuse,
                  double **vals, const char *what) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.passes_off = fuse ? 0 : TYTO_PASS_FUSE;
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ctx, g, n_out, outs, &o, &p) == TYTO_OK,
                "%s: compile (%s): %s", what, fuse ? "fused" : "fuse off",
                tyto_errmsg());
  for (size_t i = 0; i < n_in; i++) {
    tyto_tensor *x = ins[i];
    int64_t n = tyto_tensor_numel(x);
    tyto_dtype dt = tyto_tensor_dtype(x);
    size_t es = tyto_dtype_size(dt);
    unsigned char *buf = malloc((size_t)n * es + 1);
    uint64_t saved = rng_state;
    rng_state = 77 + (uint64_t)i; /* the same values for both programs */
    for (int64_t j = 0; j < n; j++) {
      double v = 2 * uniform();
      if (dt == TYTO_F64)
        ((double *)buf)[j] = v;
      else
        ((float *)buf)[j] = (float)v;
    }
    rng_state = saved;
    tyto_status rc = tyto_program_set_input(p, x, buf, (size_t)n * es);
    free(buf);
    /* An input the passes found unneeded is not part of the program. */
    if (rc != TYTO_OK)
      ck_assert_msg_contains(tyto_errmsg(), "not used by this program");
  }
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s: %s", what, tyto_errmsg());
  for (size_t k = 0; k < n_out; k++) {
    int64_t n = tyto_tensor_numel(outs[k]);
    tyto_dtype dt = tyto_tensor_dtype(outs[k]);
    size_t es = tyto_dtype_size(dt);
    unsigned char *buf = malloc((size_t)n * es + 1);
    ck_assert_int_eq(tyto_program_read_output(p, k, buf, (size_t)n * es),
                     TYTO_OK);
    vals[k] = malloc(((size_t)n + 1) * sizeof(double));
    for (int64_t j = 0; j < n; j++)
      vals[k][j] =
          dt == TYTO_F64 ? ((double *)buf)[j] : (double)((float *)buf)[j];
    free(buf);
  }
  tyto_program_stats st;
  st.struct_size = sizeof st;
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  tyto_program_free(p);
  return st.fused_nodes;
}

/* Compiles outs with and without fusion and compares; returns the worst
 * relative difference and adds the fused node count to *fused. */
static double compare(tyto_graph *g, size_t n_in, tyto_tensor *const *ins,
                      size_t n_out, tyto_tensor *const *outs, size_t *fused,
                      const char *what) {
  double *ref[8], *got[8];
  ck_assert_uint_le(n_out, 8);
  run(g, n_in, ins, n_out, outs, 0, ref, what);
  *fused += run(g, n_in, ins, n_out, outs, 1, got, what);
  double worst = 0;
  for (size_t k = 0; k < n_out; k++) {
    tyto_dtype dt = tyto_tensor_dtype(outs[k]);
    double tol = dt == TYTO_F64 ? 1e-12 : 2e-6;
    int64_t n = tyto_tensor_numel(outs[k]);
    for (int64_t j = 0; j < n; j++) {
      double a = ref[k][j], b = got[k][j];
      double err = fabs(a - b) / (1 + fabs(a));
      if (err > worst && err == err)
        worst = err;
      ck_assert_msg(err <= tol || (a != a && b != b) || a == b,
                    "%s: output %zu element %lld: %.17g without fusion, "
                    "%.17g with (%s)",
                    what, k, (long long)j, a, b, tyto_dtype_name(dt));
    }
    free(ref[k]);
    free(got[k]);
  }
  return worst;
}

/* ---------------------------------------------------------------------- */
/* The cases of the issue                                                  */

/* {k, k2} and {a, n} are each convex, but k -> j -> n and a -> k2 make
 * the two fused nodes wait for each other. */
START_TEST(fuse_the_issue_graph) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(5, 3), "x");
  tyto_tensor *k = tyto_exp(x);
  int axis = 0;
  tyto_tensor *j = tyto_sum(k, 1, &axis, 1);
  tyto_tensor *y = tyto_input(g, TYTO_F64, 2, S(1, 3), "y");
  tyto_tensor *a = tyto_sin(y);
  tyto_tensor *k2 = tyto_mul(k, a);
  tyto_tensor *n = tyto_add(a, j);
  tyto_tensor *outs[2] = {n, k2}, *ins[2] = {x, y};
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  size_t fused = 0;
  compare(g, 2, ins, 2, outs, &fused, "issue graph");
  ck_assert_uint_ge(fused, 1); /* one of the two groups still fuses */

  /* And the pass alone: every node after what it reads. */
  pass_run r = run_pass(pass_fuse, g, 2, outs, 1);
  const tyto_graph *o = r.out.g ? r.out.g : g;
  for (size_t i = 0; i < o->n_nodes; i++)
    for (size_t q = 0; q < o->nodes[i]->n_inputs; q++)
      ck_assert_int_lt(o->nodes[i]->inputs[q]->index, (int64_t)i);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* f(x) = sum(sin(x) * sum(sigmoid(x), axis 1)): its gradient and its
 * Hessian-vector product compile one at a time, and must together. */
START_TEST(fuse_grad_and_hessianv_together) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(5, 3), "x");
  int axis = 1;
  tyto_tensor *s = tyto_sum(tyto_sigmoid(x), 1, &axis, 1);
  tyto_tensor *f = tyto_sum(tyto_mul(tyto_sin(x), s), 0, NULL, 0);
  tyto_tensor *v = tyto_input(g, TYTO_F64, 2, S(5, 3), "v");
  tyto_tensor *gr = tyto_grad(f, x);
  tyto_tensor *hv = tyto_hessianv(f, x, v);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  tyto_tensor *ins[2] = {x, v}, *both[2] = {gr, hv};
  size_t fused = 0;
  compare(g, 2, ins, 1, &gr, &fused, "grad");
  compare(g, 2, ins, 1, &hv, &fused, "hessianv");
  compare(g, 2, ins, 2, both, &fused, "grad and hessianv");
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Random DAGs                                                             */

enum { POOL = 128 }; /* more than a graph makes */

typedef struct gen {
  tyto_graph *g;
  tyto_dtype dt;
  tyto_tensor *pool[POOL];
  int n;
  tyto_tensor *inputs[8];
  int n_in;
  /* The latest value of each of the shapes [4,3], [1,3], [4,1]: chains
   * of those shapes grow side by side and read each other. */
  tyto_tensor *head[3];
  tyto_tensor *side[3]; /* the latest reduction of head[0] to shape i */
} gen;

/* Shapes that broadcast with each other (and the matmul results). */
static const int64_t shapes[6][2] = {{4, 3}, {1, 3}, {4, 1},
                                     {3, 0}, {0, 0}, {1, 1}};
static const int ranks[6] = {2, 2, 2, 1, 0, 2};

static int head_of(const tyto_tensor *t) {
  if (tyto_tensor_rank(t) != 2)
    return -1;
  int64_t r = tyto_tensor_dim(t, 0), c = tyto_tensor_dim(t, 1);
  return r == 4 && c == 3   ? 0
         : r == 1 && c == 3 ? 1
         : r == 4 && c == 1 ? 2
                            : -1;
}

static void add_value(gen *s, tyto_tensor *t, int may_be_head) {
  ck_assert_msg(!tyto_tensor_is_error(t), "%s", tyto_graph_error_message(s->g));
  if (s->n < POOL)
    s->pool[s->n++] = t;
  else
    s->pool[pick(POOL)] = t;
  int h = head_of(t);
  if (h >= 0 && may_be_head >= 0 &&
      (!s->head[h] || may_be_head > 1 || (may_be_head && pick(4))))
    s->head[h] = t;
}

static void add(gen *s, tyto_tensor *t) {
  add_value(s, t, 1);
}

/* The chains' latest values and recent values more often than old ones:
 * chains, and groups to fuse. */
static tyto_tensor *any(gen *s) {
  tyto_tensor *h = s->head[pick(3)];
  int r = pick(4);
  if (h && r < 2)
    return h;
  if (r == 2 && s->n > 4)
    return s->pool[s->n - 1 - pick(4)];
  return s->pool[pick(s->n)];
}

static int broadcastable(const tyto_tensor *a, const tyto_tensor *b) {
  int ra = tyto_tensor_rank(a), rb = tyto_tensor_rank(b);
  for (int d = 1; d <= ra && d <= rb; d++) {
    int64_t x = tyto_tensor_dim(a, ra - d), y = tyto_tensor_dim(b, rb - d);
    if (x != y && x != 1 && y != 1)
      return 0;
  }
  return 1;
}

static tyto_tensor *partner(gen *s, tyto_tensor *a) {
  for (int tries = 0; tries < 8; tries++) {
    tyto_tensor *b = any(s);
    if (broadcastable(a, b))
      return b;
  }
  return tyto_scalar_like(a, 0.5);
}

/* One random op on the pool. Values stay bounded (tanh before what
 * grows) so that roundings, not overflow, are all fusion can change. */
static void step(gen *s) {
  tyto_tensor *a = any(s), *b;
  int ra = tyto_tensor_rank(a);
  static const tyto_op unary[] = {TYTO_OP_NEG,  TYTO_OP_SIN,     TYTO_OP_COS,
                                  TYTO_OP_TANH, TYTO_OP_SIGMOID, TYTO_OP_ABS};
  static const tyto_op binary[] = {TYTO_OP_ADD, TYTO_OP_SUB, TYTO_OP_MUL,
                                   TYTO_OP_MAX, TYTO_OP_MIN};
  switch (pick(12)) {
  case 0:
  case 1: add(s, tyto_unary(unary[pick(6)], a)); break;
  case 2: add(s, tyto_exp(tyto_tanh(a))); break;
  case 3:
  case 4:
  case 5:
    b = partner(s, a);
    add(s, tyto_binary(binary[pick(5)], a, b));
    break;
  case 6: /* a reduction, over one axis or all, keeping dims or not */
    if (ra == 2) {
      int axis = pick(2);
      tyto_op op = pick(3) ? TYTO_OP_SUM : TYTO_OP_REDUCE_MAX;
      add_value(s, tyto_reduce(op, a, 1, &axis, pick(4) != 0), 0);
    } else {
      add(s, tyto_mean(a, 0, NULL, 0));
    }
    break;
  case 7: /* a broadcast the consumer might have done itself */
    if (broadcastable(a, s->pool[0]))
      add(s, tyto_broadcast_to(a, 2, (int64_t[]){4, 3}));
    break;
  case 8: /* matmuls: a [m,3] times [3,3]; a^T a */
    if (ra == 2 && tyto_tensor_dim(a, 1) == 3) {
      double c[9];
      for (int i = 0; i < 9; i++)
        c[i] = uniform() / 2;
      tyto_tensor *w = tyto_constant(s->g, s->dt, 2, (int64_t[]){3, 3}, c);
      add(s, tyto_matmul(a, w, 0, 0));
    } else if (ra == 2) {
      add(s, tyto_tanh(tyto_matmul(a, a, 1, 0)));
    }
    break;
  case 9: /* where and fma */
    b = partner(s, a);
    add(s, pick(2) ? tyto_where(tyto_gt(a, b), a, b)
                   : tyto_fma(a, b, tyto_scalar_like(a, 0.25)));
    break;
  case 10: /* a chain */
    add(s, tyto_sigmoid(
               tyto_add(tyto_mul_scalar(tyto_tanh(a), 0.5), partner(s, a))));
    break;
  default: /* a value read twice, by two shapes */
    b = partner(s, a);
    add(s, tyto_mul(tyto_sin(a), b));
    add(s, tyto_add(tyto_sin(a), tyto_cos(b)));
    break;
  }
}

/* One op on a chain: the chains of the three shapes grow side by side
 * and restart from fresh values; the [4,3] chain reads the others and is
 * reduced to their shapes, and they read those reductions later, so that
 * groups of different shapes interleave and reach each other through
 * outside nodes. */
static void chain_step(gen *s) {
  static const tyto_op unary[] = {TYTO_OP_SIN, TYTO_OP_TANH, TYTO_OP_SIGMOID,
                                  TYTO_OP_NEG};
  static const tyto_op binary[] = {TYTO_OP_ADD, TYTO_OP_MUL, TYTO_OP_SUB};
  int c = pick(3);
  tyto_tensor *h = s->head[c], *b;
  if (!h || (c > 0 && pick(4) == 0)) {
    /* A fresh start: a new input, or an old value scaled by a new
     * constant (which CSE cannot merge with what is there). */
    if (s->n_in < 6) {
      h = tyto_input(s->g, s->dt, 2, shapes[c], NULL);
      s->inputs[s->n_in++] = h;
    } else if (head_of(h = s->pool[pick(s->n)]) != c) {
      return;
    }
    add_value(s, tyto_mul_scalar(tyto_cos(h), 0.5 + uniform() / 4), 2);
    return;
  }
  int r = pick(4);
  if (r == 0) {
    add_value(s, tyto_unary(unary[pick(4)], h), 2);
  } else if (c > 0) { /* reads a reduction of the full chain */
    if (s->side[c])
      add_value(s, tyto_binary(binary[pick(3)], h, s->side[c]), 2);
  } else if (r < 3) { /* the full chain reads another */
    if ((b = s->head[1 + pick(2)]))
      add_value(s, tyto_binary(binary[pick(3)], h, b), 2);
  } else { /* the full chain reduced to the shape of another */
    int axis = pick(2);
    s->side[1 + axis] = tyto_sum(h, 1, &axis, 1);
    add_value(s, s->side[1 + axis], 0);
  }
}

START_TEST(fuse_random_dags_keep_their_values) {
  /* About 1 in 100 of these graphs made the old pass build a cycle. */
  int n_graphs = getenv("TYTO_TEST_UNDER_VALGRIND") ? 150 : 1000;
  rng_state = 20261401;
  size_t fused = 0, ad_cases = 0;
  double worst = 0;
  for (int it = 0; it < n_graphs; it++) {
    gen s;
    memset(&s, 0, sizeof s);
    s.g = tyto_graph_new();
    s.dt = it % 4 == 3 ? TYTO_F32 : TYTO_F64;
    /* A [4,3] input first: broadcasts and matmuls have a full shape. */
    s.inputs[s.n_in++] = tyto_input(s.g, s.dt, 2, shapes[0], NULL);
    add_value(&s, s.inputs[0], -1);
    for (int i = 0, n = pick(3); i < n; i++) {
      int k = pick(6);
      s.inputs[s.n_in] = tyto_input(s.g, s.dt, ranks[k], shapes[k], NULL);
      add_value(&s, s.inputs[s.n_in++], -1);
    }
    int n_ops = 8 + pick(32);
    for (int i = 0; i < n_ops; i++) {
      if (pick(4))
        chain_step(&s);
      else
        step(&s);
    }
    ck_assert_msg(tyto_graph_status(s.g) == TYTO_OK, "graph %d: %s", it,
                  tyto_graph_error_message(s.g));
    tyto_tensor *outs[6];
    size_t n_out = 0;
    char what[64];
    if (it % 5 == 4) {
      /* Second order: the gradient and H·v of a scalar function of the
       * first input, together, and maybe the function too. */
      tyto_tensor *x = s.inputs[0];
      s.inputs[s.n_in] = tyto_input(s.g, s.dt, 2, shapes[0], "v");
      tyto_tensor *v = s.inputs[s.n_in++];
      tyto_tensor *f = tyto_sum(s.pool[s.n - 1], 0, NULL, 0);
      outs[n_out++] = tyto_grad(f, x);
      outs[n_out++] = tyto_hessianv(f, x, v);
      if (pick(2))
        outs[n_out++] = f;
      ad_cases++;
      snprintf(what, sizeof what, "graph %d (grad, hessianv)", it);
    } else {
      /* Each chain's last value or not, and up to 3 values of the pool. */
      tyto_tensor *cand[6] = {s.head[0], s.head[1], s.head[2],
                              any(&s),   any(&s),   s.pool[pick(s.n)]};
      for (int k = 0; k < 6; k++) {
        tyto_tensor *t = cand[k];
        int dup = !t || pick(2);
        for (size_t q = 0; q < n_out; q++)
          dup |= outs[q] == t;
        if (!dup)
          outs[n_out++] = t;
      }
      if (n_out == 0)
        outs[n_out++] = s.pool[s.n - 1];
      snprintf(what, sizeof what, "graph %d", it);
    }
    ck_assert_msg(tyto_graph_status(s.g) == TYTO_OK, "graph %d: %s", it,
                  tyto_graph_error_message(s.g));
    double w =
        compare(s.g, (size_t)s.n_in, s.inputs, n_out, outs, &fused, what);
    if (w > worst)
      worst = w;
    tyto_graph_free(s.g);
  }
  printf("fuse_random_dags: %d graphs (%zu with grad and hessianv), %zu "
         "fused nodes, worst relative difference %.3g\n",
         n_graphs, ad_cases, fused, worst);
  ck_assert_uint_gt(fused, (size_t)n_graphs / 2);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("fuse_dag");
  TCase *tc = tcase_create("issue");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, fuse_the_issue_graph);
  tcase_add_test(tc, fuse_grad_and_hessianv_together);
  suite_add_tcase(s, tc);
  tc = tcase_create("random");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, fuse_random_dags_keep_their_values);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  setenv("TYTO_VERIFY_PLAN", "1", 1);
  return test_run(suite());
}
