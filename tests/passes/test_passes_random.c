/*
 * Property test of the passes and the memory planner together: random
 * graphs of random ops and shapes (fixed seed) compiled twice, once with
 * no pass and no memory plan, once with everything, must give the same
 * outputs (within a tolerance: folding and FMA change roundings), and
 * every plan must pass the verifier (tyto_program_compile runs it in
 * builds without NDEBUG, and this test sets TYTO_VERIFY_PLAN=1 for the
 * others) with lower bound <= planned <= naive.
 */
#include "passes_test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tyto/tyto.h>

enum { POOL = 64 };

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

static double uniform(void) {
  return (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1;
}

typedef struct gen {
  tyto_graph *g;
  tyto_dtype dt;
  tyto_tensor *pool[POOL];
  int n;
  tyto_tensor *inputs[4];
  int n_in;
} gen;

static const int64_t shapes[5][2] = {{4, 3}, {1, 3}, {4, 1}, {3, 0}, {0, 0}};
static const int ranks[5] = {2, 2, 2, 1, 0};

static void add(gen *s, tyto_tensor *t) {
  if (!t || tyto_tensor_is_error(t))
    return;
  if (s->n < POOL)
    s->pool[s->n++] = t;
  else
    s->pool[pick(POOL)] = t;
}

static int broadcastable(const tyto_tensor *a, const tyto_tensor *b) {
  for (int d = 1; d <= a->rank && d <= b->rank; d++) {
    int64_t x = a->shape[a->rank - d], y = b->shape[b->rank - d];
    if (x != y && x != 1 && y != 1)
      return 0;
  }
  return 1;
}

static tyto_tensor *any(gen *s) {
  return s->pool[pick(s->n)];
}

static tyto_tensor *partner(gen *s, const tyto_tensor *a) {
  for (int tries = 0; tries < 8; tries++) {
    tyto_tensor *b = any(s);
    if (broadcastable(a, b))
      return b;
  }
  return tyto_scalar_like((tyto_tensor *)a, 0.5);
}

/* Bounded inputs keep every op in its domain: tanh before what grows. */
static void step(gen *s) {
  tyto_graph *g = s->g;
  tyto_tensor *a = any(s), *b;
  static const tyto_op unary[] = {
      TYTO_OP_NEG,      TYTO_OP_ABS,     TYTO_OP_SIN,  TYTO_OP_COS,
      TYTO_OP_TANH,     TYTO_OP_SIGMOID, TYTO_OP_RELU, TYTO_OP_SQUARE,
      TYTO_OP_SOFTPLUS, TYTO_OP_ATAN};
  static const tyto_op binary[] = {TYTO_OP_ADD, TYTO_OP_SUB, TYTO_OP_MUL,
                                   TYTO_OP_MAX, TYTO_OP_MIN};
  switch (pick(16)) {
  case 0:
  case 1:
  case 2: add(s, tyto_unary(unary[pick(10)], a)); break;
  case 3: add(s, tyto_exp(tyto_tanh(a))); break;
  case 4:
  case 5:
  case 6:
    b = partner(s, a);
    add(s, tyto_binary(binary[pick(5)], a, b));
    break;
  case 7: /* a / (1 + b^2) */
    b = partner(s, a);
    add(s, tyto_div(a, tyto_add_scalar(tyto_square(b), 1)));
    break;
  case 8: { /* identities for the algebra pass */
    static const double v[] = {0, 1, 0, 1, 2};
    int k = pick(5);
    tyto_tensor *c = pick(2) ? tyto_scalar_like(a, v[k])
                             : tyto_full(g, s->dt, a->rank, a->shape, v[k]);
    switch (pick(4)) {
    case 0: add(s, tyto_add(a, c)); break;
    case 1: add(s, tyto_mul(c, a)); break;
    case 2: add(s, tyto_neg(tyto_neg(a))); break;
    default: add(s, tyto_sub(a, tyto_neg(c))); break;
    }
    break;
  }
  case 9: /* the same expression twice, for CSE */
    b = partner(s, a);
    add(s, tyto_mul(tyto_sin(a), b));
    add(s, tyto_mul(tyto_sin(a), b));
    break;
  case 10: /* constants, for folding */
    add(s, tyto_mul(tyto_add(tyto_scalar_like(a, 1.5),
                             tyto_full(g, s->dt, 1, (int64_t[]){3}, 0.25)),
                    a));
    break;
  case 11: /* reductions */
    if (a->rank == 2) {
      int axis = pick(2);
      add(s, tyto_reduce(pick(2) ? TYTO_OP_SUM : TYTO_OP_REDUCE_MAX, a, 1,
                         &axis, 1));
    } else {
      add(s, tyto_mean(a, 0, NULL, 0));
    }
    break;
  case 12: /* transposes, into matmul or back */
    if (a->rank == 2) {
      tyto_tensor *t = tyto_transpose(a, 0, 1);
      if (pick(2)) {
        add(s, tyto_transpose(tyto_tanh(t), 0, 1));
      } else {
        b = any(s);
        if (b->rank == 2 && b->shape[0] == a->shape[0] &&
            b->shape[1] == a->shape[1])
          add(s, tyto_matmul(t, b, 0, 0)); /* a^T b: [3,3] or [1,1]... */
      }
    }
    break;
  case 13: /* reshapes and broadcasts */
    if (a->rank == 2) {
      int64_t n = a->shape[0] * a->shape[1];
      add(s, tyto_reshape(tyto_reshape(tyto_tanh(a), 1, &n), 2, a->shape));
    } else {
      add(s, tyto_add(tyto_broadcast_to(a, 2, (int64_t[]){4, 3}), any(s)));
    }
    break;
  case 14: /* where and fma */
    b = partner(s, a);
    if (broadcastable(a, b))
      add(s, pick(2) ? tyto_where(tyto_gt(a, b), a, b)
                     : tyto_fma(a, b, tyto_scalar_like(a, 0.25)));
    break;
  default: /* a long elementwise chain, for fusion */
    add(s, tyto_sigmoid(
               tyto_add(tyto_mul_scalar(tyto_tanh(a), 0.5), partner(s, a))));
    break;
  }
}

static tyto_context *ctx;
static size_t rewrites; /* by every pass of every program compiled */

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

/* Compiles outs with the options, binds the inputs, runs, reads. */
static void run(gen *s, size_t n_out, tyto_tensor **outs, int all,
                double **vals, tyto_program_stats *st) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  if (!all) {
    o.passes_off = TYTO_PASS_ALL;
    o.no_memory_plan = 1;
  }
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ctx, s->g, n_out, outs, &o, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  for (int i = 0; i < s->n_in; i++) {
    tyto_tensor *x = s->inputs[i];
    int64_t n = tyto_tensor_numel(x);
    size_t es = tyto_dtype_size(s->dt);
    unsigned char *buf = malloc((size_t)n * es + 1);
    uint64_t saved = rng_state;
    rng_state = 1000 + (uint64_t)i; /* the same values for both runs */
    for (int64_t j = 0; j < n; j++) {
      double v = 2 * uniform();
      if (s->dt == TYTO_F64)
        ((double *)buf)[j] = v;
      else
        ((float *)buf)[j] = (float)v;
    }
    rng_state = saved;
    tyto_status rc = tyto_program_set_input(p, x, buf, (size_t)n * es);
    free(buf);
    /* An input the passes found unneeded (x * 0) is not part of it. */
    if (rc != TYTO_OK)
      ck_assert_msg_contains(tyto_errmsg(), "not used by this program");
  }
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  for (size_t k = 0; k < n_out; k++) {
    int64_t n = tyto_tensor_numel(outs[k]);
    size_t es = tyto_dtype_size(s->dt);
    unsigned char *buf = malloc((size_t)n * es + 1);
    ck_assert_int_eq(tyto_program_read_output(p, k, buf, (size_t)n * es),
                     TYTO_OK);
    vals[k] = malloc(((size_t)n + 1) * sizeof(double));
    for (int64_t j = 0; j < n; j++)
      vals[k][j] =
          s->dt == TYTO_F64 ? ((double *)buf)[j] : (double)((float *)buf)[j];
    free(buf);
  }
  st->struct_size = sizeof *st;
  ck_assert_int_eq(tyto_program_stats_get(p, st), TYTO_OK);
  /* st->passes belongs to p: count the rewrites while it lives. */
  for (size_t i = 0; i < st->n_passes; i++)
    rewrites += (size_t)st->passes[i].changed;
  st->passes = NULL;
  tyto_program_free(p);
}

START_TEST(random_graphs_keep_their_values) {
  int n_graphs = getenv("TYTO_TEST_UNDER_VALGRIND") ? 60 : 1000;
  rng_state = 20261123;
  size_t fused = 0;
  rewrites = 0;
  double worst = 0;
  for (int it = 0; it < n_graphs; it++) {
    gen s;
    memset(&s, 0, sizeof s);
    s.g = tyto_graph_new();
    s.dt = it % 3 == 2 ? TYTO_F32 : TYTO_F64;
    s.n_in = 1 + pick(3);
    for (int i = 0; i < s.n_in; i++) {
      int k = pick(4);
      s.inputs[i] = tyto_input(s.g, s.dt, ranks[k], shapes[k], NULL);
      add(&s, s.inputs[i]);
    }
    if (pick(3) == 0)
      add(&s,
          tyto_constant(s.g, s.dt, 1, (int64_t[]){3}, (double[]){0.5, -1, 2}));
    int n_ops = 3 + pick(25);
    for (int i = 0; i < n_ops; i++)
      step(&s);
    ck_assert_msg(tyto_graph_status(s.g) == TYTO_OK, "graph %d: %s", it,
                  tyto_graph_error_message(s.g));
    tyto_tensor *outs[3];
    size_t n_out = 0;
    for (int k = 0; k < 3 && n_out < (size_t)(1 + pick(3)); k++) {
      tyto_tensor *t = s.pool[s.n - 1 - pick(s.n < 6 ? s.n : 6)];
      int dup = 0;
      for (size_t j = 0; j < n_out; j++)
        dup |= outs[j] == t;
      if (!dup)
        outs[n_out++] = t;
    }
    double *ref[3], *got[3];
    tyto_program_stats st0, st;
    run(&s, n_out, outs, 0, ref, &st0);
    run(&s, n_out, outs, 1, got, &st);
    ck_assert_uint_le(st.lower_bound_bytes, st.planned_bytes);
    ck_assert_uint_le(st.planned_bytes, st.naive_bytes);
    ck_assert_uint_eq(st0.planned_bytes, st0.naive_bytes);
    ck_assert_uint_le(st.nodes_after, st.nodes_before + 2 * st.fused_nodes);
    fused += st.fused_nodes;
    double tol = s.dt == TYTO_F64 ? 1e-12 : 2e-6;
    for (size_t k = 0; k < n_out; k++) {
      int64_t n = tyto_tensor_numel(outs[k]);
      for (int64_t j = 0; j < n; j++) {
        double a = ref[k][j], b = got[k][j];
        double err = fabs(a - b) / (1 + fabs(a));
        if (err > worst)
          worst = err;
        ck_assert_msg(err <= tol || (a != a && b != b),
                      "graph %d output %zu element %lld: %.17g without "
                      "passes, %.17g with (%s)",
                      it, k, (long long)j, a, b, tyto_dtype_name(s.dt));
      }
      free(ref[k]);
      free(got[k]);
    }
    tyto_graph_free(s.g);
  }
  printf("random_graphs: %d graphs, %zu rewrites, %zu fused nodes, worst "
         "relative difference %.3g\n",
         n_graphs, rewrites, fused, worst);
  ck_assert_uint_gt(fused, (size_t)n_graphs / 4);
  ck_assert_uint_gt(rewrites, (size_t)n_graphs);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("passes_random");
  TCase *tc = tcase_create("random");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, random_graphs_keep_their_values);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  setenv("TYTO_VERIFY_PLAN", "1", 1);
  return test_run(suite());
}
