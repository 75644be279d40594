/* Casts in the passes (mixed precision, issue 19): fusion takes CASTs into
 * elementwise groups, so that a FUSED node's inputs and outputs differ in
 * dtype and every instruction of its program carries its value's dtype;
 * it does not where the pass options keep CAST out (a device whose plugin
 * is older than ABI 1.5). Algebra removes a pair of casts only when the
 * inner one changes no value; CSE keeps casts to different dtypes apart. */
#include "passes_test.h"

#define INP TYTO_PLUGIN_FUSED_INPUT
#define CON TYTO_PLUGIN_FUSED_CONST
#define OUT TYTO_PLUGIN_FUSED_OUTPUT

/* One expected instruction: op, args, dtype. */
typedef struct want_instr {
  int64_t op, a0, a1, a2, dtype;
} want_instr;

/* Fused node f holds exactly the program want[0 .. n). */
static void program_is(const tyto_tensor *f, const want_instr *want, size_t n) {
  ck_assert_int_eq(f->op, TYTO_OP_FUSED);
  ck_assert_uint_eq(fused_n_instrs(f), n);
  ck_assert_uint_eq(f->n_iattrs, 1 + FUSED_FIELDS * n);
  for (size_t i = 0; i < n; i++) {
    const int64_t got[5] = {
        fused_field(f, i, FUSED_OP), fused_field(f, i, FUSED_ARG0),
        fused_field(f, i, FUSED_ARG1), fused_field(f, i, FUSED_ARG2),
        fused_field(f, i, FUSED_DTYPE)};
    const int64_t exp[5] = {want[i].op, want[i].a0, want[i].a1, want[i].a2,
                            want[i].dtype};
    for (int k = 0; k < 5; k++)
      ck_assert_msg(got[k] == exp[k],
                    "instruction %zu field %d: %lld, expected %lld", i, k,
                    (long long)got[k], (long long)exp[k]);
  }
}

/* The mixed-precision layer: bf16 a [4,8] x b [8,16], cast to f32, plus an
 * f32 bias [16], relu, cast back to bf16. */
typedef struct layer {
  tyto_tensor *a, *b, *bias, *mm, *y;
} layer;

static layer build_layer(tyto_graph *g) {
  layer l;
  l.a = tyto_input(g, TYTO_BF16, 2, S(4, 8), "a");
  l.b = tyto_input(g, TYTO_BF16, 2, S(8, 16), "b");
  l.bias = tyto_input(g, TYTO_F32, 1, S(16), "bias");
  l.mm = tyto_matmul(l.a, l.b, 0, 0);
  tyto_tensor *h = tyto_relu(tyto_add(tyto_cast(l.mm, TYTO_F32), l.bias));
  l.y = tyto_cast(h, TYTO_BF16);
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  return l;
}

/* The pass over g with options opt. */
static pass_run fuse_with(tyto_graph *g, size_t n, tyto_tensor **outs,
                          const pass_options *opt) {
  pass_graph in = {g, n, outs};
  pass_run r = {0, {NULL, 0, NULL}, malloc(g->n_nodes * sizeof(tyto_tensor *))};
  char msg[256] = "";
  r.changed = pass_fuse(&in, &r.out, r.map, opt, msg, sizeof msg);
  ck_assert_msg(r.changed >= 0, "fuse failed: %s", msg);
  return r;
}

START_TEST(casts_join_the_elementwise_group) {
  tyto_graph *g = tyto_graph_new();
  layer l = build_layer(g);
  pass_run r = run_pass(pass_fuse, g, 1, &l.y, 1);
  ck_assert_int_eq(r.changed, 4); /* cast, add, relu, cast */
  /* a, b, bias, the matmul and one fused node: no CAST of its own */
  ck_assert_uint_eq(r.out.g->n_nodes, 5);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_CAST), 0);
  tyto_tensor *f = r.out.outs[0];
  ck_assert_int_eq(f->dtype, TYTO_BF16);
  ck_assert_uint_eq(f->n_inputs, 2);
  ck_assert_int_eq(f->inputs[0]->op, TYTO_OP_MATMUL);
  ck_assert_int_eq(f->inputs[0]->dtype, TYTO_BF16);
  ck_assert_ptr_eq(f->inputs[1], r.map[l.bias->index]);
  ck_assert_int_eq(f->iattrs[0], 1);
  const want_instr want[] = {
      {INP, 0, 0, 0, TYTO_BF16},         {INP, 1, 0, 0, TYTO_F32},
      {TYTO_OP_CAST, 0, 0, 0, TYTO_F32}, {TYTO_OP_ADD, 2, 1, 0, TYTO_F32},
      {TYTO_OP_RELU, 3, 0, 0, TYTO_F32}, {TYTO_OP_CAST, 4, 0, 0, TYTO_BF16},
      {OUT, 5, 0, 0, TYTO_BF16},
  };
  program_is(f, want, sizeof want / sizeof *want);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(casts_stay_out_for_a_device_older_than_abi_1_5) {
  tyto_graph *g = tyto_graph_new();
  layer l = build_layer(g);
  /* What compile.c gives the passes for an unpinned graph whose first
   * device's plugin is ABI 1.4. */
  const pass_nofuse old = {0, TYTO_OP_CAST, -1};
  const pass_options opt = {1, 1, &old, 0, NULL};
  pass_run r = fuse_with(g, 1, &l.y, &opt);
  ck_assert_int_eq(r.changed, 2); /* add and relu only */
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_CAST), 2);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_FUSED), 1);
  tyto_tensor *y = r.out.outs[0];
  ck_assert_int_eq(y->op, TYTO_OP_CAST);
  tyto_tensor *f = y->inputs[0];
  ck_assert_int_eq(f->dtype, TYTO_F32);
  ck_assert_int_eq(f->inputs[0]->op, TYTO_OP_CAST);
  const want_instr want[] = {
      {INP, 0, 0, 0, TYTO_F32},         {INP, 1, 0, 0, TYTO_F32},
      {TYTO_OP_ADD, 0, 1, 0, TYTO_F32}, {TYTO_OP_RELU, 2, 0, 0, TYTO_F32},
      {OUT, 3, 0, 0, TYTO_F32},
  };
  program_is(f, want, sizeof want / sizeof *want);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(casts_stay_out_only_where_the_old_device_runs) {
  /* Two chains x -> cast f64 -> neg -> cast f32, one pinned to device 1
   * (pin 2), whose plugin is old, one unpinned. */
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *outs[2];
  for (int k = 0; k < 2; k++) {
    int old = tyto_graph_set_device_scope(g, k == 0 ? 1 : -1);
    tyto_tensor *x = IN(g, 1, 8);
    outs[k] = tyto_cast(tyto_neg(tyto_cast(x, TYTO_F64)), TYTO_F32);
    tyto_graph_set_device_scope(g, old);
  }
  ck_assert_int_eq(tyto_graph_status(g), TYTO_OK);
  ck_assert_uint_eq(outs[0]->pin, 2);
  const pass_nofuse old = {2, TYTO_OP_CAST, -1};
  const pass_options opt = {1, 1, &old, 0, NULL};
  pass_run r = fuse_with(g, 2, outs, &opt);
  ck_assert_int_eq(r.out.outs[0]->op, TYTO_OP_CAST);
  ck_assert_int_eq(r.out.outs[0]->inputs[0]->op, TYTO_OP_NEG);
  tyto_tensor *f = r.out.outs[1];
  const want_instr want[] = {
      {INP, 0, 0, 0, TYTO_F32},         {TYTO_OP_CAST, 0, 0, 0, TYTO_F64},
      {TYTO_OP_NEG, 1, 0, 0, TYTO_F64}, {TYTO_OP_CAST, 2, 0, 0, TYTO_F32},
      {OUT, 3, 0, 0, TYTO_F32},
  };
  program_is(f, want, sizeof want / sizeof *want);
  ck_assert_int_eq(f->pin, 0);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(outputs_keep_their_dtypes) {
  /* h = relu(x) (f32, an output) and z = cast(h, f64) * w + 0.5 (f64):
   * one node with an f32 output and an f64 one; the FMA and the constant
   * are f64. */
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 8);
  tyto_tensor *w = tyto_input(g, TYTO_F64, 1, S(8), "w");
  tyto_tensor *h = tyto_relu(x);
  tyto_tensor *z = tyto_add(tyto_mul(tyto_cast(h, TYTO_F64), w),
                            tyto_scalar(g, TYTO_F64, 0.5));
  tyto_tensor *outs[2] = {z, h};
  pass_run r = run_pass(pass_fuse, g, 2, outs, 1);
  tyto_tensor *f = r.out.outs[1];
  ck_assert_int_eq(f->dtype, TYTO_F32); /* output 0: h, the first member */
  ck_assert_int_eq(r.out.outs[0]->op, TYTO_OP_FUSED_OUTPUT);
  ck_assert_int_eq(r.out.outs[0]->dtype, TYTO_F64);
  ck_assert_ptr_eq(r.out.outs[0]->inputs[0], f);
  ck_assert_int_eq(f->iattrs[0], 2);
  const want_instr want[] = {
      {INP, 0, 0, 0, TYTO_F32},          {INP, 1, 0, 0, TYTO_F64},
      {TYTO_OP_RELU, 0, 0, 0, TYTO_F32}, {TYTO_OP_CAST, 2, 0, 0, TYTO_F64},
      {CON, 0, 0, 0, TYTO_F64},          {TYTO_OP_FMA, 3, 1, 4, TYTO_F64},
      {OUT, 2, 0, 0, TYTO_F32},          {OUT, 5, 1, 0, TYTO_F64},
  };
  program_is(f, want, sizeof want / sizeof *want);
  ck_assert(f->fattrs[4] == 0.5);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(a_chain_of_casts_that_rounds_twice_is_one_node) {
  /* f64 -> f32 -> bf16 cannot become one cast; the passes make it one
   * pass over memory instead. */
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, S(8), "x");
  tyto_tensor *y = tyto_cast(tyto_cast(x, TYTO_F32), TYTO_BF16);
  pass_graph in = {g, 1, &y}, out;
  tyto_tensor **map = malloc(g->n_nodes * sizeof *map);
  tyto_pass_stats *st;
  size_t n_st;
  pass_options opt = {1, 0, NULL, 0, NULL};
  char msg[256];
  ck_assert_int_eq(
      passes_run(&in, &out, map, 0, &opt, 8, &st, &n_st, msg, sizeof msg), 0);
  ck_assert_uint_eq(out.g->n_nodes, 2);
  const want_instr want[] = {
      {INP, 0, 0, 0, TYTO_F64},
      {TYTO_OP_CAST, 0, 0, 0, TYTO_F32},
      {TYTO_OP_CAST, 1, 0, 0, TYTO_BF16},
      {OUT, 2, 0, 0, TYTO_BF16},
  };
  program_is(out.outs[0], want, sizeof want / sizeof *want);
  free(st);
  free(map);
  pass_graph_free(&out);
  tyto_graph_free(g);
}
END_TEST

START_TEST(a_lone_cast_stays_a_cast) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 8);
  tyto_tensor *y = tyto_sum(tyto_cast(x, TYTO_F64), 0, NULL, 0);
  pass_run r = run_pass(pass_fuse, g, 1, &y, 1);
  ck_assert_int_eq(r.changed, 0);
  ck_assert_ptr_null(r.out.g);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Algebra and CSE                                                         */

/* Whether every value of dtype d is one of dtype w, written out here
 * rather than asked of the dtype table: [w][d], in tyto_dtype order f32,
 * f64, f16, bf16. */
static const int holds[4][4] = {
    /* f32 holds */ {1, 0, 1, 1},
    /* f64 holds */ {1, 1, 1, 1},
    /* f16 holds */ {0, 0, 1, 0},
    /* bf16 holds */ {0, 0, 0, 1},
};

START_TEST(algebra_removes_a_cast_pair_only_when_the_inner_is_exact) {
  static const tyto_dtype dts[4] = {TYTO_F32, TYTO_F64, TYTO_F16, TYTO_BF16};
  int folded = 0, kept = 0, shortened = 0;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int c = 0; c < 4; c++) {
        if (b == a || c == b)
          continue;
        tyto_graph *g = tyto_graph_new();
        tyto_tensor *x = tyto_input(g, dts[a], 1, S(8), "x");
        tyto_tensor *y = tyto_cast(tyto_cast(x, dts[b]), dts[c]);
        pass_run r = run_pass(pass_algebra, g, 1, &y, 0);
        tyto_tensor *o = out_of(&r, &y, 0);
        const tyto_graph *og = r.out.g ? r.out.g : g;
        ck_assert_int_eq(o->dtype, dts[c]);
        if (!holds[b][a]) {
          /* The inner cast rounds: both stay. */
          ck_assert_msg(r.changed == 0, "%s -> %s -> %s was rewritten",
                        tyto_dtype_name(dts[a]), tyto_dtype_name(dts[b]),
                        tyto_dtype_name(dts[c]));
          ck_assert_uint_eq(count_op(og, TYTO_OP_CAST), 2);
          kept++;
        } else if (c == a) {
          /* There and back through a wider dtype: x itself. */
          ck_assert_int_eq(o->op, TYTO_OP_INPUT);
          ck_assert_ptr_eq(o, r.map[x->index]);
          folded++;
        } else {
          /* One rounding, x's to c. */
          ck_assert_int_eq(o->op, TYTO_OP_CAST);
          ck_assert_ptr_eq(o->inputs[0], r.map[x->index]);
          shortened++;
        }
        run_free(&r);
        tyto_graph_free(g);
      }
  /* f16, bf16 through f32 and f64, and f32 through f64 */
  ck_assert_int_eq(folded, 5);
  ck_assert_int_eq(shortened, 10);
  ck_assert_int_eq(kept, 21);
}
END_TEST

START_TEST(algebra_keeps_double_rounding_f64_f32_bf16) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, S(8), "x");
  tyto_tensor *y = tyto_cast(tyto_cast(x, TYTO_F32), TYTO_BF16);
  tyto_tensor *back = tyto_cast(tyto_cast(x, TYTO_F32), TYTO_F64);
  tyto_tensor *outs[2] = {y, back};
  pass_run r = run_pass(pass_algebra, g, 2, outs, 0);
  ck_assert_int_eq(r.changed, 0);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

START_TEST(cse_keeps_casts_to_different_dtypes_apart) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = IN(g, 1, 8);
  tyto_tensor *outs[4] = {tyto_cast(x, TYTO_F64), tyto_cast(x, TYTO_F16),
                          tyto_cast(x, TYTO_F64), tyto_cast(x, TYTO_BF16)};
  pass_run r = run_pass(pass_cse, g, 4, outs, 0);
  ck_assert_int_eq(r.changed, 1);
  ck_assert_uint_eq(count_op(r.out.g, TYTO_OP_CAST), 3);
  ck_assert_ptr_eq(r.out.outs[0], r.out.outs[2]);
  ck_assert_ptr_ne(r.out.outs[0], r.out.outs[1]);
  ck_assert_ptr_ne(r.out.outs[1], r.out.outs[3]);
  ck_assert_int_eq(r.out.outs[0]->dtype, TYTO_F64);
  ck_assert_int_eq(r.out.outs[1]->dtype, TYTO_F16);
  ck_assert_int_eq(r.out.outs[3]->dtype, TYTO_BF16);
  run_free(&r);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fuse_cast");
  TCase *tc = tcase_create("fuse");
  tcase_add_test(tc, casts_join_the_elementwise_group);
  tcase_add_test(tc, casts_stay_out_for_a_device_older_than_abi_1_5);
  tcase_add_test(tc, casts_stay_out_only_where_the_old_device_runs);
  tcase_add_test(tc, outputs_keep_their_dtypes);
  tcase_add_test(tc, a_chain_of_casts_that_rounds_twice_is_one_node);
  tcase_add_test(tc, a_lone_cast_stays_a_cast);
  suite_add_tcase(s, tc);
  tc = tcase_create("algebra_cse");
  tcase_add_test(tc, algebra_removes_a_cast_pair_only_when_the_inner_is_exact);
  tcase_add_test(tc, algebra_keeps_double_rounding_f64_f32_bf16);
  tcase_add_test(tc, cse_keeps_casts_to_different_dtypes_apart);
  suite_add_tcase(s, tc);
  return test_run(s);
}
