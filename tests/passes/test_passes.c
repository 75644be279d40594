/*
 * Each graph pass on small graphs: the graph in, the graph expected out,
 * and the count of rewrites. Values are checked by test_passes_random.c
 * and tests/exec/test_planned.c; here it is structure.
 */
#include "passes_test.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* DCE                                                                     */

START_TEST(dce_drops_what_no_output_needs) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 4), *unused = IN(g, 1, 4);
  tyto_tensor *y = tyto_exp(x);
  tyto_tensor *dead = tyto_add(tyto_sin(x), unused);
  (void)dead;
  tyto_tensor *outs[1] = {y};
  pass_run r = run_pass(pass_dce, g, 1, outs, 0);
  ck_assert_int_eq(r.changed, 3); /* unused, sin, add */
  ck_assert_uint_eq(r.out.g->n_nodes, 2);
  ck_assert_int_eq(r.out.outs[0]->op, TYTO_OP_EXP);
  ck_assert_ptr_null(r.map[unused->index]);
  ck_assert_ptr_nonnull(r.map[x->index]);
  ck_assert_int_eq(r.map[x->index]->kind, TYTO_KIND_INPUT);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(dce_leaves_a_lean_graph_alone) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *y = tyto_exp(IN(g, 1, 4));
  pass_run r = run_pass(pass_dce, g, 1, &y, 0);
  ck_assert_int_eq(r.changed, 0);
  ck_assert_ptr_null(r.out.g);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* CSE                                                                     */

START_TEST(cse_merges_identical_subexpressions) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 4), *z = IN(g, 1, 4);
  tyto_tensor *a = tyto_mul(tyto_exp(x), tyto_scalar(g, TYTO_F32, 2));
  tyto_tensor *b = tyto_mul(tyto_exp(x), tyto_scalar(g, TYTO_F32, 2));
  tyto_tensor *c = tyto_add(tyto_exp(z), tyto_exp(x)); /* z is not x */
  tyto_tensor *outs[3] = {a, b, c};
  pass_run r = run_pass(pass_cse, g, 3, outs, 0);
  /* exp(x) twice more, the scalar, and the mul */
  ck_assert_int_eq(r.changed, 4);
  ck_assert_ptr_eq(r.out.outs[0], r.out.outs[1]);
  ck_assert_ptr_ne(r.out.outs[2]->inputs[0], r.out.outs[2]->inputs[1]);
  ck_assert_ptr_eq(r.out.outs[2]->inputs[1], r.out.outs[0]->inputs[0]);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(cse_keeps_inputs_and_distinct_values_apart) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 2), *y = IN(g, 1, 2);
  tyto_tensor *p1 = tyto_parameter(g, TYTO_F32, 1, S(2), "p");
  tyto_tensor *p2 = tyto_parameter(g, TYTO_F32, 1, S(2), "p");
  tyto_tensor *c1 = tyto_constant(g, TYTO_F32, 1, S(2), (double[]){1, 2});
  tyto_tensor *c2 = tyto_constant(g, TYTO_F32, 1, S(2), (double[]){1, 3});
  tyto_tensor *c3 = tyto_constant(g, TYTO_F32, 1, S(2), (double[]){1, 2});
  /* Same seed, different stream offsets: different numbers. */
  tyto_tensor *r1 = tyto_random_uniform(g, TYTO_F32, 1, S(2), 0, 1, 7);
  tyto_tensor *r2 = tyto_random_uniform(g, TYTO_F32, 1, S(2), 0, 1, 7);
  tyto_tensor *outs[9] = {x, y, p1, p2, c1, c2, c3, r1, r2};
  pass_run r = run_pass(pass_cse, g, 9, outs, 0);
  ck_assert_int_eq(r.changed, 1); /* c3 is c1 */
  ck_assert_ptr_eq(r.out.outs[6], r.out.outs[4]);
  ck_assert_ptr_ne(r.out.outs[0], r.out.outs[1]);
  ck_assert_ptr_ne(r.out.outs[2], r.out.outs[3]);
  ck_assert_ptr_ne(r.out.outs[4], r.out.outs[5]);
  ck_assert_ptr_ne(r.out.outs[7], r.out.outs[8]);
  ck_assert_str_eq(r.out.outs[2]->name, "p");
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Constant folding                                                        */

START_TEST(fold_uniform_elementwise_to_full) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_full(g, TYTO_F64, 2, S(3, 4), 2.0);
  tyto_tensor *b = tyto_scalar(g, TYTO_F64, 3.0);
  tyto_tensor *y = tyto_sqrt(tyto_add(a, b)); /* sqrt(5), [3,4] */
  pass_run r = run_pass(pass_fold, g, 1, &y, 0);
  ck_assert_int_eq(r.changed, 2);
  tyto_tensor *o = r.out.outs[0];
  ck_assert_int_eq(o->op, TYTO_OP_FULL);
  ck_assert_int_eq(o->rank, 2);
  ck_assert_int_eq(o->shape[0], 3);
  ck_assert_int_eq(o->shape[1], 4);
  ck_assert_double_eq(o->fattrs[0], sqrt(5.0));
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fold_f32_rounds_to_float) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *y =
      tyto_div(tyto_scalar(g, TYTO_F32, 1), tyto_scalar(g, TYTO_F32, 3));
  pass_run r = run_pass(pass_fold, g, 1, &y, 0);
  ck_assert_double_eq(r.out.outs[0]->fattrs[0], (double)(1.0f / 3.0f));
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fold_small_constants_elementwise_with_broadcasting) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_constant(g, TYTO_F64, 2, S(2, 1), (double[]){1, 2});
  tyto_tensor *b = tyto_constant(g, TYTO_F64, 1, S(3), (double[]){10, 20, 30});
  tyto_tensor *y = tyto_mul(a, b);
  pass_run r = run_pass(pass_fold, g, 1, &y, 0);
  ck_assert_int_eq(r.changed, 1);
  tyto_tensor *o = r.out.outs[0];
  ck_assert_int_eq(o->op, TYTO_OP_CONSTANT);
  const double *d = o->data;
  double want[6] = {10, 20, 30, 20, 40, 60};
  for (int i = 0; i < 6; i++)
    ck_assert_double_eq(d[i], want[i]);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fold_views_and_reductions_of_full) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *f = tyto_full(g, TYTO_F32, 2, S(3, 4), 2.0);
  tyto_tensor *s = tyto_sum(f, 1, (const int[]){1}, 0);        /* [3] of 8 */
  tyto_tensor *m = tyto_reduce_max(f, 0, NULL, 0);             /* 2 */
  tyto_tensor *p = tyto_prod(f, 1, (const int[]){0}, 1);       /* [1,4] of 8 */
  tyto_tensor *t = tyto_transpose(f, 0, 1);                    /* [4,3] of 2 */
  tyto_tensor *c = tyto_concat(2, (tyto_tensor *[]){f, f}, 0); /* [6,4] */
  tyto_tensor *outs[5] = {s, m, p, t, c};
  pass_run r = run_pass(pass_fold, g, 5, outs, 0);
  ck_assert_int_eq(r.changed, 5);
  double want[5] = {8, 2, 8, 2, 2};
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(r.out.outs[i]->op, TYTO_OP_FULL);
    ck_assert_double_eq(r.out.outs[i]->fattrs[0], want[i]);
  }
  ck_assert_int_eq(r.out.outs[3]->shape[0], 4);
  ck_assert_int_eq(r.out.outs[4]->shape[0], 6);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fold_leaves_large_and_random_values_to_the_device) {
  tyto_graph *g = tyto_graph_new();
  double *v = calloc(5000, sizeof *v);
  v[1] = 1;
  tyto_tensor *big = tyto_constant(g, TYTO_F32, 1, S(5000), v);
  free(v);
  tyto_tensor *rnd = tyto_random_normal(g, TYTO_F32, 1, S(4), 0, 1, 1);
  tyto_tensor *outs[2] = {tyto_exp(big), tyto_exp(rnd)};
  pass_run r = run_pass(pass_fold, g, 2, outs, 0);
  ck_assert_int_eq(r.changed, 0);
  ck_assert_ptr_null(r.out.g);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Algebra                                                                 */

/* Runs the algebra pass on y; returns what y became. */
static tyto_tensor *alg(tyto_graph *g, tyto_tensor *y, pass_run *r) {
  *r = run_pass(pass_algebra, g, 1, &y, 0);
  ck_assert_int_ge(r->changed, 1);
  return r->out.outs[0];
}

START_TEST(algebra_identities_give_x) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 2, 2, 3);
  tyto_tensor *zero = tyto_scalar(g, TYTO_F32, 0);
  tyto_tensor *one = tyto_full(g, TYTO_F32, 1, S(3), 1);
  tyto_tensor *ones = tyto_constant(g, TYTO_F32, 1, S(3), (double[]){1, 1, 1});
  tyto_tensor *cases[] = {tyto_add(x, zero),    tyto_add(zero, x),
                          tyto_sub(x, zero),    tyto_mul(x, one),
                          tyto_mul(one, x),     tyto_div(x, ones),
                          tyto_neg(tyto_neg(x))};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pass_run r;
    tyto_tensor *o = alg(g, cases[i], &r);
    ck_assert_msg(o->op == TYTO_OP_INPUT, "case %zu gave %s", i,
                  tyto_op_name(o->op));
    run_free(&r);
  }
  tyto_graph_free(g);
}
END_TEST

START_TEST(algebra_keeps_the_broadcast_shape) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 3);
  tyto_tensor *zeros = tyto_full(g, TYTO_F32, 2, S(2, 3), 0);
  pass_run r;
  tyto_tensor *o = alg(g, tyto_add(x, zeros), &r);
  ck_assert_int_eq(o->op, TYTO_OP_BROADCAST_TO);
  ck_assert_int_eq(o->shape[0], 2);
  ck_assert_int_eq(o->inputs[0]->op, TYTO_OP_INPUT);
  run_free(&r);
  o = alg(g, tyto_mul(IN(g, 2, 4, 1), tyto_full(g, TYTO_F32, 1, S(5), 0)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_FULL);
  ck_assert_double_eq(o->fattrs[0], 0);
  ck_assert_int_eq(o->shape[0], 4);
  ck_assert_int_eq(o->shape[1], 5);
  run_free(&r);
  o = alg(g, tyto_sub(tyto_scalar(g, TYTO_F32, 0), x), &r);
  ck_assert_int_eq(o->op, TYTO_OP_NEG);
  ck_assert_int_eq(o->inputs[0]->op, TYTO_OP_INPUT);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(algebra_negation_into_subtraction) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 3), *y = IN(g, 1, 3);
  pass_run r;
  tyto_tensor *o = alg(g, tyto_add(x, tyto_neg(y)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_SUB);
  ck_assert_int_eq(o->inputs[0]->index, 0);
  ck_assert_int_eq(o->inputs[1]->index, 1);
  run_free(&r);
  o = alg(g, tyto_add(tyto_neg(x), y), &r);
  ck_assert_int_eq(o->op, TYTO_OP_SUB);
  ck_assert_int_eq(o->inputs[0]->index, 1);
  ck_assert_int_eq(o->inputs[1]->index, 0);
  run_free(&r);
  o = alg(g, tyto_sub(x, tyto_neg(y)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_ADD);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(algebra_permutes_and_reshapes_compose) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 3, 2, 3, 4);
  pass_run r;
  /* transpose twice: gone */
  tyto_tensor *o = alg(g, tyto_transpose(tyto_transpose(x, 0, 2), 0, 2), &r);
  ck_assert_int_eq(o->op, TYTO_OP_INPUT);
  run_free(&r);
  /* two permutes: one, [2,3,4] -> perm (1,2,0) then (2,0,1)... */
  tyto_tensor *p1 = tyto_permute(x, 3, (const int[]){1, 2, 0});  /* [3,4,2] */
  tyto_tensor *p2 = tyto_permute(p1, 3, (const int[]){0, 2, 1}); /* [3,2,4] */
  o = alg(g, p2, &r);
  ck_assert_int_eq(o->op, TYTO_OP_PERMUTE);
  ck_assert_int_eq(o->inputs[0]->op, TYTO_OP_INPUT);
  /* output axis i is x's axis p1[p2[i]]: (1, 0, 2) */
  ck_assert_int_eq(o->iattrs[0], 1);
  ck_assert_int_eq(o->iattrs[1], 0);
  ck_assert_int_eq(o->iattrs[2], 2);
  run_free(&r);
  /* reshape twice: one; back to x's shape: gone */
  o = alg(g, tyto_reshape(tyto_reshape(x, 2, S(6, 4)), 1, S(24)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_RESHAPE);
  ck_assert_int_eq(o->inputs[0]->op, TYTO_OP_INPUT);
  run_free(&r);
  o = alg(g, tyto_reshape(tyto_reshape(x, 2, S(6, 4)), 3, S(2, 3, 4)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_INPUT);
  run_free(&r);
  o = alg(g, tyto_broadcast_to(x, 3, S(2, 3, 4)), &r);
  ck_assert_int_eq(o->op, TYTO_OP_INPUT);
  run_free(&r);
  tyto_tensor *v = IN(g, 1, 4);
  o = alg(g, tyto_broadcast_to(tyto_broadcast_to(v, 2, S(3, 4)), 3, S(2, 3, 4)),
          &r);
  ck_assert_int_eq(o->op, TYTO_OP_BROADCAST_TO);
  ck_assert_ptr_eq(o->inputs[0], r.map[v->index]);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(algebra_transpose_into_matmul_flags) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 2, 5, 3), *b = IN(g, 2, 5, 4);
  pass_run r;
  tyto_tensor *o = alg(g, tyto_matmul(tyto_transpose(a, 0, 1), b, 0, 0), &r);
  ck_assert_int_eq(o->op, TYTO_OP_MATMUL);
  ck_assert_int_eq(o->inputs[0]->op, TYTO_OP_INPUT);
  ck_assert_int_eq(o->iattrs[0], 1);
  ck_assert_int_eq(o->iattrs[1], 0);
  run_free(&r);
  o = alg(g, tyto_matmul(a, tyto_transpose(b, -1, -2), 1, 1), &r);
  ck_assert_int_eq(o->inputs[1]->op, TYTO_OP_INPUT);
  ck_assert_int_eq(o->iattrs[0], 1);
  ck_assert_int_eq(o->iattrs[1], 0);
  ck_assert_int_eq(o->shape[0], 3);
  ck_assert_int_eq(o->shape[1], 4);
  run_free(&r);
  tyto_graph_free(g);
  /* A permute of batch axes is not a matrix transpose: kept. */
  g = tyto_graph_new();
  tyto_tensor *c = IN(g, 3, 2, 4, 4);
  tyto_tensor *y = tyto_matmul(tyto_permute(c, 3, (const int[]){1, 0, 2}),
                               IN(g, 2, 4, 4), 0, 0);
  r = run_pass(pass_algebra, g, 1, &y, 0);
  ck_assert_int_eq(r.changed, 0);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(algebra_drops_broadcasts_the_consumer_does_itself) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 4), *y = IN(g, 2, 3, 4);
  pass_run r;
  tyto_tensor *o = alg(g, tyto_add(tyto_broadcast_to(x, 2, S(3, 4)), y), &r);
  ck_assert_int_eq(o->op, TYTO_OP_ADD);
  ck_assert_ptr_eq(o->inputs[0], r.map[x->index]);
  run_free(&r);
  tyto_graph_free(g);
  /* Needed when the other operand does not give the shape: kept. */
  g = tyto_graph_new();
  x = IN(g, 1, 4);
  y = IN(g, 2, 3, 4);
  tyto_tensor *k = tyto_mul(tyto_broadcast_to(x, 2, S(3, 4)), IN(g, 1, 4));
  r = run_pass(pass_algebra, g, 1, &k, 0);
  ck_assert_int_eq(r.changed, 0);
  run_free(&r);
  /* A tile of extent-1 axes is a broadcast: tile -> broadcast_to, which
   * the add (rewritten after it in the same sweep) then drops. */
  tyto_tensor *col = IN(g, 2, 3, 1);
  tyto_tensor *t = tyto_add(tyto_tile(col, 2, S(1, 4)), y);
  pass_run r1 = run_pass(pass_algebra, g, 1, &t, 0);
  ck_assert_int_eq(r1.changed, 2);
  ck_assert_int_eq(r1.out.outs[0]->op, TYTO_OP_ADD);
  ck_assert_ptr_eq(r1.out.outs[0]->inputs[0], r1.map[col->index]);
  run_free(&r1);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Fusion                                                                  */

/* The instructions of fused node f: op of instruction i. */
static int64_t instr_op(const tyto_tensor *f, size_t i) {
  return fused_field(f, i, FUSED_OP);
}

static size_t count_instr(const tyto_tensor *f, int64_t op) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_fattrs; i++)
    n += instr_op(f, i) == op;
  return n;
}

START_TEST(fuse_a_chain_into_one_node) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 8), *w = IN(g, 1, 8);
  tyto_tensor *y = tyto_tanh(tyto_mul_scalar(tyto_add(tyto_exp(x), w), 2));
  pass_run r = run_pass(pass_fuse, g, 1, &y, 1);
  ck_assert_int_eq(r.changed, 4);
  tyto_tensor *f = r.out.outs[0];
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_uint_eq(f->n_inputs, 2);
  ck_assert_int_eq(f->iattrs[0], 1); /* one output */
  ck_assert_uint_eq(count_instr(f, TYTO_PLUGIN_FUSED_CONST), 1);
  ck_assert_uint_eq(count_instr(f, TYTO_PLUGIN_FUSED_OUTPUT), 1);
  /* x, w, the scalar (now unread: DCE's to drop) and the fused node */
  ck_assert_uint_eq(r.out.g->n_nodes, 4);
  for (size_t k = 0; k < f->n_inputs; k++)
    ck_assert_int_eq(f->inputs[k]->op, TYTO_OP_INPUT);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fuse_off_when_the_device_cannot) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *y = tyto_exp(tyto_sin(IN(g, 1, 8)));
  pass_run r = run_pass(pass_fuse, g, 1, &y, 0);
  ck_assert_int_eq(r.changed, 0);
  ck_assert_ptr_null(r.out.g);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fuse_mul_add_becomes_fma) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 1, 8), *b = IN(g, 1, 8), *c = IN(g, 1, 8);
  tyto_tensor *y = tyto_relu(tyto_add(c, tyto_mul(a, b)));
  pass_run r = run_pass(pass_fuse, g, 1, &y, 1);
  tyto_tensor *f = r.out.outs[0];
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_uint_eq(count_instr(f, TYTO_OP_FMA), 1);
  ck_assert_uint_eq(count_instr(f, TYTO_OP_MUL), 0);
  ck_assert_uint_eq(count_instr(f, TYTO_OP_ADD), 0);
  run_free(&r);
  tyto_graph_free(g);
  /* A product read elsewhere too stays a product (and is the fused node's
   * first output). */
  g = tyto_graph_new();
  a = IN(g, 1, 8);
  b = IN(g, 1, 8);
  c = IN(g, 1, 8);
  tyto_tensor *m = tyto_mul(a, b);
  tyto_tensor *outs[2] = {tyto_add(m, c), m};
  r = run_pass(pass_fuse, g, 2, outs, 1);
  f = r.out.outs[1];
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_int_eq(r.out.outs[0]->op, TYTO_OP_FUSED_OUTPUT);
  ck_assert_uint_eq(count_instr(f, TYTO_OP_FMA), 0);
  ck_assert_uint_eq(count_instr(f, TYTO_OP_MUL), 1);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fuse_values_read_outside_become_outputs) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 2, 4, 4);
  tyto_tensor *h = tyto_sigmoid(tyto_mul_scalar(x, 3));
  tyto_tensor *s = tyto_sum(h, 0, NULL, 0); /* reads h: h is an output */
  tyto_tensor *y = tyto_exp(tyto_neg(h));
  tyto_tensor *outs[2] = {y, s};
  pass_run r = run_pass(pass_fuse, g, 2, outs, 1);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_FUSED), 1);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_FUSED_OUTPUT), 1);
  tyto_tensor *sum = r.out.outs[1];
  ck_assert_int_eq(sum->op, TYTO_OP_SUM);
  tyto_tensor *f = sum->inputs[0]->op == TYTO_OP_FUSED
                       ? sum->inputs[0]
                       : sum->inputs[0]->inputs[0];
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_int_eq(f->iattrs[0], 2);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fuse_never_makes_a_cycle) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = IN(g, 2, 4, 4), *w = IN(g, 2, 4, 4);
  tyto_tensor *h = tyto_exp(a);
  /* h -> matmul -> add(h, .): fusing exp and add would need the matmul
   * inside the fused node. */
  tyto_tensor *y = tyto_add(tyto_tanh(h), tyto_matmul(h, w, 0, 0));
  pass_run r = run_pass(pass_fuse, g, 1, &y, 1);
  /* exp+tanh may fuse; the add stays after the matmul. */
  tyto_graph *o = r.out.g ? r.out.g : g;
  for (size_t i = 0; i < o->n_nodes; i++)
    for (size_t k = 0; k < o->nodes[i]->n_inputs; k++)
      ck_assert_int_lt(o->nodes[i]->inputs[k]->index, (int64_t)i);
  tyto_tensor *out = out_of(&r, &y, 0);
  int reads_matmul = 0;
  for (size_t k = 0; k < out->n_inputs; k++)
    reads_matmul |= out->inputs[k]->op == TYTO_OP_MATMUL;
  ck_assert(reads_matmul);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* Two groups of different shapes, each convex, that read each other: G
 * (shape [3]) feeds H ([4,3]) directly, and H feeds G through a sum.
 * Fusing both as they would like makes each fused node wait for the
 * other; the pass must see groups as the nodes they become. */
START_TEST(fuse_never_makes_a_cycle_between_groups) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 3), *w = IN(g, 2, 4, 3);
  tyto_tensor *t = tyto_tanh(x);
  tyto_tensor *e = tyto_exp(t);
  tyto_tensor *m = tyto_mul_scalar(t, 0.5);
  tyto_tensor *sg = tyto_sigmoid(tyto_add(m, x));
  tyto_tensor *pw = tyto_mul_scalar(w, 2);        /* H */
  tyto_tensor *q = tyto_sigmoid(pw);              /* H, not from G */
  tyto_tensor *r = tyto_add(m, pw);               /* H, reads G */
  tyto_tensor *u = tyto_min(sg, tyto_sigmoid(r)); /* H, reads G */
  tyto_tensor *s = tyto_sum(q, 0, NULL, 0);
  tyto_tensor *y = tyto_fma(e, s, tyto_scalar(g, TYTO_F32, 0.25)); /* G */
  tyto_tensor *outs[2] = {y, u};
  pass_run run = run_pass(pass_fuse, g, 2, outs, 1);
  ck_assert_ptr_nonnull(run.out.g);
  const tyto_graph *o = run.out.g;
  for (size_t i = 0; i < o->n_nodes; i++)
    for (size_t k = 0; k < o->nodes[i]->n_inputs; k++)
      ck_assert_int_lt(o->nodes[i]->inputs[k]->index, (int64_t)i);
  run_free(&run);
  tyto_graph_free(g);
}
END_TEST

START_TEST(fuse_keeps_shapes_apart) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 2, 4, 4), *v = IN(g, 1, 4);
  tyto_tensor *a = tyto_exp(tyto_sin(v));    /* [4] */
  tyto_tensor *y = tyto_mul(tyto_cos(x), a); /* [4,4], reads a */
  pass_run r = run_pass(pass_fuse, g, 1, &y, 1);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_FUSED), 2);
  tyto_tensor *f = r.out.outs[0];
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_int_eq(f->shape[0], 4);
  ck_assert_int_eq(f->rank, 2);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* Adam's update as the training issue writes it: one fused node with
 * three outputs (m, v, the parameter), and a scalar one for the bias
 * corrections. */
START_TEST(fuse_adam_update_into_one_node) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *p = tyto_parameter(g, TYTO_F32, 2, S(64, 32), "w");
  tyto_tensor *m = tyto_parameter(g, TYTO_F32, 2, S(64, 32), "w.m");
  tyto_tensor *v = tyto_parameter(g, TYTO_F32, 2, S(64, 32), "w.v");
  tyto_tensor *t = tyto_parameter(g, TYTO_F32, 0, NULL, "step");
  tyto_tensor *grad = IN(g, 2, 64, 32);
  double b1 = 0.9, b2 = 0.999, lr = 1e-3, eps = 1e-8;
  tyto_tensor *m2 =
      tyto_add(tyto_mul_scalar(m, b1), tyto_mul_scalar(grad, 1 - b1));
  tyto_tensor *v2 = tyto_add(tyto_mul_scalar(v, b2),
                             tyto_mul_scalar(tyto_square(grad), 1 - b2));
  tyto_tensor *c1 = tyto_sub(tyto_scalar(g, TYTO_F32, 1),
                             tyto_pow(tyto_scalar(g, TYTO_F32, b1), t));
  tyto_tensor *c2 = tyto_sub(tyto_scalar(g, TYTO_F32, 1),
                             tyto_pow(tyto_scalar(g, TYTO_F32, b2), t));
  tyto_tensor *upd = tyto_div(
      tyto_div(m2, c1), tyto_add_scalar(tyto_sqrt(tyto_div(v2, c2)), eps));
  tyto_tensor *p2 = tyto_sub(p, tyto_mul_scalar(upd, lr));
  tyto_tensor *outs[3] = {p2, m2, v2};
  pass_run r = run_pass(pass_fuse, g, 3, outs, 1);
  size_t big = 0;
  for (size_t i = 0; i < r.out.g->n_nodes; i++) {
    const tyto_tensor *n = r.out.g->nodes[i];
    if (n->op == TYTO_OP_FUSED && n->rank == 2) {
      big++;
      ck_assert_int_eq(n->iattrs[0], 3);
      ck_assert_uint_eq(n->n_inputs, 6); /* p, m, v, grad, c1, c2 */
    }
  }
  ck_assert_uint_eq(big, 1);
  /* Nothing elementwise is left outside fused nodes. */
  for (size_t i = 0; i < r.out.g->n_nodes; i++)
    ck_assert_msg(!pass_is_elementwise(r.out.g->nodes[i]->op), "left: %s",
                  tyto_op_name(r.out.g->nodes[i]->op));
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* SGD (p - lr g) and momentum (v' = mu v + g; p' = p - lr v'), each one
 * fused node: one output for SGD, two for momentum. */
START_TEST(fuse_sgd_and_momentum_updates) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *p = tyto_parameter(g, TYTO_F32, 2, S(128, 64), "w");
  tyto_tensor *v = tyto_parameter(g, TYTO_F32, 2, S(128, 64), "w.v");
  tyto_tensor *q = tyto_parameter(g, TYTO_F32, 1, S(64), "b");
  tyto_tensor *gw = tyto_exp(IN(g, 2, 128, 64)); /* some gradient */
  tyto_tensor *gb = tyto_sum(IN(g, 2, 128, 64), 1, (const int[]){0}, 0);
  tyto_tensor *v2 = tyto_add(tyto_mul_scalar(v, 0.9), gw);
  tyto_tensor *p2 = tyto_sub(p, tyto_mul_scalar(v2, 0.01));
  tyto_tensor *q2 = tyto_sub(q, tyto_mul_scalar(gb, 0.1));
  tyto_tensor *outs[3] = {p2, v2, q2};
  pass_run r = run_pass(pass_fuse, g, 3, outs, 1);
  size_t fused = 0;
  for (size_t i = 0; i < r.out.g->n_nodes; i++) {
    const tyto_tensor *n = r.out.g->nodes[i];
    if (n->op != TYTO_OP_FUSED)
      continue;
    fused++;
    if (n->rank == 1) { /* SGD on b: reads b and its gradient */
      ck_assert_int_eq(n->iattrs[0], 1);
      ck_assert_uint_eq(n->n_inputs, 2);
    } else { /* momentum on w: exp(x) joins it; reads x, v, w */
      ck_assert_int_eq(n->iattrs[0], 2);
      ck_assert_uint_eq(n->n_inputs, 3);
      /* mu v + g is one FMA (p - lr v' stays a product and a difference) */
      ck_assert_uint_eq(count_instr(n, TYTO_OP_FMA), 1);
    }
  }
  ck_assert_uint_eq(fused, 2);
  for (size_t i = 0; i < r.out.g->n_nodes; i++)
    ck_assert(!pass_is_elementwise(r.out.g->nodes[i]->op));
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* The driver                                                              */

START_TEST(passes_run_to_a_fixed_point_with_statistics) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 16);
  /* (x * (2 - 1)) + 0 twice over, and a dead branch. */
  tyto_tensor *one =
      tyto_sub(tyto_scalar(g, TYTO_F32, 2), tyto_scalar(g, TYTO_F32, 1));
  tyto_tensor *a = tyto_add(tyto_mul(x, one), tyto_scalar(g, TYTO_F32, 0));
  tyto_tensor *b = tyto_add(tyto_mul(x, one), tyto_scalar(g, TYTO_F32, 0));
  tyto_tensor *y = tyto_exp(tyto_add(a, b));
  (void)tyto_cos(x);
  pass_graph in = {g, 1, &y}, out;
  tyto_tensor **map = malloc(g->n_nodes * sizeof *map);
  tyto_pass_stats *st;
  size_t n_st;
  pass_options opt = {1, 0, NULL, 0, NULL};
  char msg[256];
  ck_assert_int_eq(
      passes_run(&in, &out, map, 0, &opt, 8, &st, &n_st, msg, sizeof msg), 0);
  /* x, one fused node for exp(x + x) */
  ck_assert_uint_eq(out.g->n_nodes, 2);
  ck_assert_int_eq(out.outs[0]->op, TYTO_OP_FUSED);
  ck_assert_uint_ge(n_st, 10); /* at least two rounds of five */
  ck_assert_str_eq(st[0].name, "dce");
  ck_assert_int_eq(st[0].round, 1);
  ck_assert_int_eq(st[n_st - 1].changed, 0);
  long total = 0;
  for (size_t i = 0; i < n_st; i++) {
    total += st[i].changed;
    ck_assert_uint_le(st[i].nodes_after, st[i].nodes_before + 8);
  }
  ck_assert_int_ge(total, 6);
  ck_assert_ptr_eq(map[x->index], out.g->nodes[0]);
  free(st);
  free(map);
  pass_graph_free(&out);
  tyto_graph_free(g);
}
END_TEST

START_TEST(passes_all_off_still_copy) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 4);
  tyto_tensor *y = tyto_add(x, tyto_scalar(g, TYTO_F32, 0));
  (void)tyto_sin(x);
  pass_graph in = {g, 1, &y}, out;
  tyto_tensor **map = malloc(g->n_nodes * sizeof *map);
  tyto_pass_stats *st;
  size_t n_st;
  char msg[256];
  ck_assert_int_eq(passes_run(&in, &out, map, TYTO_PASS_ALL, NULL, 8, &st,
                              &n_st, msg, sizeof msg),
                   0);
  ck_assert_uint_eq(n_st, 0);
  ck_assert_ptr_ne(out.g, g);
  ck_assert_uint_eq(out.g->n_nodes, 3); /* x, 0, add: sin is not needed */
  ck_assert_int_eq(out.outs[0]->op, TYTO_OP_ADD);
  free(st);
  free(map);
  pass_graph_free(&out);
  tyto_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("passes");
  TCase *tc = tcase_create("dce");
  tcase_add_test(tc, dce_drops_what_no_output_needs);
  tcase_add_test(tc, dce_leaves_a_lean_graph_alone);
  suite_add_tcase(s, tc);
  tc = tcase_create("cse");
  tcase_add_test(tc, cse_merges_identical_subexpressions);
  tcase_add_test(tc, cse_keeps_inputs_and_distinct_values_apart);
  suite_add_tcase(s, tc);
  tc = tcase_create("fold");
  tcase_add_test(tc, fold_uniform_elementwise_to_full);
  tcase_add_test(tc, fold_f32_rounds_to_float);
  tcase_add_test(tc, fold_small_constants_elementwise_with_broadcasting);
  tcase_add_test(tc, fold_views_and_reductions_of_full);
  tcase_add_test(tc, fold_leaves_large_and_random_values_to_the_device);
  suite_add_tcase(s, tc);
  tc = tcase_create("algebra");
  tcase_add_test(tc, algebra_identities_give_x);
  tcase_add_test(tc, algebra_keeps_the_broadcast_shape);
  tcase_add_test(tc, algebra_negation_into_subtraction);
  tcase_add_test(tc, algebra_permutes_and_reshapes_compose);
  tcase_add_test(tc, algebra_transpose_into_matmul_flags);
  tcase_add_test(tc, algebra_drops_broadcasts_the_consumer_does_itself);
  suite_add_tcase(s, tc);
  tc = tcase_create("fuse");
  tcase_add_test(tc, fuse_a_chain_into_one_node);
  tcase_add_test(tc, fuse_off_when_the_device_cannot);
  tcase_add_test(tc, fuse_mul_add_becomes_fma);
  tcase_add_test(tc, fuse_values_read_outside_become_outputs);
  tcase_add_test(tc, fuse_never_makes_a_cycle);
  tcase_add_test(tc, fuse_never_makes_a_cycle_between_groups);
  tcase_add_test(tc, fuse_keeps_shapes_apart);
  tcase_add_test(tc, fuse_adam_update_into_one_node);
  tcase_add_test(tc, fuse_sgd_and_momentum_updates);
  suite_add_tcase(s, tc);
  tc = tcase_create("driver");
  tcase_add_test(tc, passes_run_to_a_fixed_point_with_statistics);
  tcase_add_test(tc, passes_all_off_still_copy);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(suite());
}
