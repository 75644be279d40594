/*
 * Programs with the passes and the memory planner: what the statistics
 * say, the arena's reuse and in-place updates, the dot export, the
 * options, and values through fused and in-place kernels against a
 * program compiled without either.
 */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <unistd.h>

#define S(...) ((const int64_t[]){__VA_ARGS__})

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

static tyto_program *compile(tyto_graph *g, size_t n, tyto_tensor **outs,
                             unsigned passes_off, int no_plan) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.passes_off = passes_off;
  o.no_memory_plan = no_plan;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, n, outs, &o, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  return p;
}

static tyto_program_stats stats(const tyto_program *p) {
  tyto_program_stats st;
  st.struct_size = sizeof st;
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  return st;
}

/* A chain of elementwise ops on 1 MiB: without fusion, each intermediate
 * takes the storage of the one before (in place), so the arena holds one
 * tensor. */
START_TEST(elementwise_chain_runs_in_place) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, S(262144), "x");
  tyto_tensor *y = tyto_exp(tyto_sin(tyto_cos(tyto_tanh(x))));
  tyto_program *p = compile(g, 1, &y, TYTO_PASS_FUSE, 0);
  tyto_program_stats st = stats(p);
  ck_assert_uint_eq(st.arena_bytes, 262144 * 4);
  ck_assert_uint_eq(st.pinned_bytes, 2 * 262144 * 4);
  ck_assert_uint_eq(st.naive_bytes, 5 * 262144 * 4);
  ck_assert_uint_eq(st.planned_bytes, 3 * 262144 * 4);
  ck_assert_uint_eq(st.lower_bound_bytes, 3 * 262144 * 4);
  ck_assert_uint_eq(st.kernels, 4);
  float *in = malloc(262144 * sizeof *in), *out = malloc(262144 * sizeof *out);
  for (int i = 0; i < 262144; i++)
    in[i] = (float)(i % 1000) * 0.003f - 1.5f;
  ck_assert_int_eq(tyto_program_set_input(p, x, in, 262144 * 4), TYTO_OK);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 0, out, 262144 * 4), TYTO_OK);
  for (int i = 0; i < 262144; i += 97)
    ck_assert_float_eq_tol(out[i], expf(sinf(cosf(tanhf(in[i])))), 1e-5f);
  free(in);
  free(out);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* Fused, the same chain is one kernel and needs no arena at all. */
START_TEST(fused_chain_is_one_kernel) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(33, 17), "x");
  tyto_tensor *y =
      tyto_exp(tyto_sin(tyto_add_scalar(tyto_mul_scalar(x, 0.5), 0.25)));
  tyto_program *p = compile(g, 1, &y, 0, 0);
  tyto_program_stats st = stats(p);
  ck_assert_uint_eq(st.kernels, 1);
  ck_assert_uint_eq(st.fused_nodes, 1);
  ck_assert_uint_eq(st.arena_bytes, 0);
  ck_assert_uint_lt(st.nodes_after, st.nodes_before);
  ck_assert_uint_ge(st.n_passes, 5);
  ck_assert_ptr_nonnull(st.order_name);
  double in[33 * 17], out[33 * 17];
  for (int i = 0; i < 33 * 17; i++)
    in[i] = 0.01 * i - 2;
  tyto_program_set_input(p, x, in, sizeof in);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  tyto_program_read_output(p, 0, out, sizeof out);
  for (int i = 0; i < 33 * 17; i++)
    ck_assert_double_eq_tol(out[i], exp(sin(in[i] * 0.5 + 0.25)), 1e-14);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* A reshape of a value nothing else reads costs nothing: it takes its
 * input's storage and launches no copy. */
START_TEST(reshape_in_place_launches_nothing) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 2, S(6, 4), "x");
  tyto_tensor *w = tyto_input(g, TYTO_F64, 2, S(4, 3), "w");
  tyto_tensor *h = tyto_matmul(x, w, 0, 0); /* [6,3] */
  tyto_tensor *r = tyto_reshape(h, 2, S(9, 2));
  tyto_tensor *y = tyto_sum(r, 1, (const int[]){1}, 0); /* [9] */
  tyto_program *p = compile(g, 1, &y, 0, 0);
  tyto_program_stats st = stats(p);
  ck_assert_uint_eq(st.kernels, 2); /* matmul, sum */
  double xv[24], wv[12], out[9], want[9] = {0};
  for (int i = 0; i < 24; i++)
    xv[i] = i * 0.5 - 3;
  for (int i = 0; i < 12; i++)
    wv[i] = 1.0 / (i + 1);
  double hv[18];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 3; j++) {
      hv[i * 3 + j] = 0;
      for (int k = 0; k < 4; k++)
        hv[i * 3 + j] += xv[i * 4 + k] * wv[k * 3 + j];
    }
  for (int i = 0; i < 9; i++)
    want[i] = hv[2 * i] + hv[2 * i + 1];
  tyto_program_set_input(p, x, xv, sizeof xv);
  tyto_program_set_input(p, w, wv, sizeof wv);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  tyto_program_read_output(p, 0, out, sizeof out);
  for (int i = 0; i < 9; i++)
    ck_assert_double_eq_tol(out[i], want[i], 1e-12);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

START_TEST(no_memory_plan_gives_every_tensor_its_own) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, S(1024), "x");
  tyto_tensor *y = tyto_relu(tyto_exp(tyto_sin(x)));
  tyto_program *p = compile(g, 1, &y, TYTO_PASS_ALL, 1);
  tyto_program_stats st = stats(p);
  ck_assert_uint_eq(st.planned_bytes, st.naive_bytes);
  ck_assert_uint_eq(st.naive_bytes, 4 * 1024 * 4);
  ck_assert_uint_eq(st.arena_bytes, 0);
  ck_assert_uint_eq(st.n_passes, 0);
  ck_assert_uint_eq(st.kernels, 3);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* Outputs the passes turn into other tensors (x * 1 is x, two equal
 * expressions are one) still read back as themselves. */
START_TEST(outputs_rewritten_away_still_read) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F64, 1, S(3), "x");
  tyto_tensor *a = tyto_mul(x, tyto_scalar(g, TYTO_F64, 1));
  tyto_tensor *b = tyto_exp(x), *c = tyto_exp(x);
  tyto_tensor *outs[3] = {a, b, c};
  tyto_program *p = compile(g, 3, outs, 0, 0);
  double xv[3] = {0.5, -1, 2}, o[3];
  tyto_program_set_input(p, x, xv, sizeof xv);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 0, o, sizeof o), TYTO_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq(o[i], xv[i]);
  for (int k = 1; k < 3; k++) {
    ck_assert_int_eq(tyto_program_read_output(p, (size_t)k, o, sizeof o),
                     TYTO_OK);
    for (int i = 0; i < 3; i++)
      ck_assert_double_eq_tol(o[i], exp(xv[i]), 1e-15);
  }
  /* The input x is still bound by its own handle. */
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

START_TEST(bad_options_and_arguments_are_refused) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *y = tyto_exp(tyto_input(g, TYTO_F32, 1, S(3), "x"));
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.passes_off = 1u << 20;
  tyto_program *p = NULL;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &o, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "passes_off 0x100000");
  ck_assert_ptr_null(p);
  p = compile(g, 1, &y, 0, 0);
  tyto_program_stats st;
  st.struct_size = 2;
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "struct_size 2 is too small");
  ck_assert_int_eq(tyto_program_stats_get(NULL, &st),
                   TYTO_ERR_INVALID_ARGUMENT);
  /* An older caller's smaller struct is filled only as far as it goes. */
  memset(&st, 0xAB, sizeof st);
  st.struct_size = offsetof(tyto_program_stats, nodes_after);
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  ck_assert_uint_eq(st.nodes_before, 2);
  size_t pattern;
  memset(&pattern, 0xAB, sizeof pattern);
  ck_assert_uint_eq(st.nodes_after, pattern);
  ck_assert_int_eq(tyto_program_export_dot(p, NULL), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(tyto_program_export_dot(p, "/nonexistent-dir/tyto/plan.dot"),
                   TYTO_ERR_IO);
  ck_assert_msg_contains(tyto_errmsg(), "/nonexistent-dir/tyto/plan.dot");
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* The dot file: one colour per arena block, white for pinned tensors. */
START_TEST(dot_export_colours_memory_blocks) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, S(64, 64), "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 2, S(64, 64), "w");
  tyto_tensor *h = tyto_matmul(x, w, 0, 0);
  for (int i = 0; i < 4; i++)
    h = tyto_matmul(tyto_relu(h), w, 0, 0);
  tyto_tensor *y = tyto_sum(h, 0, NULL, 0);
  tyto_program *p = compile(g, 1, &y, 0, 0);
  char path[] = "/tmp/tyto-plan-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(tyto_program_export_dot(p, path), TYTO_OK);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char buf[16384];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  unlink(path);
  ck_assert_msg(strncmp(buf, "digraph tyto_program {", 22) == 0, "%s", buf);
  ck_assert_msg_contains(buf, "fillcolor=\"white\"");
  ck_assert_msg_contains(buf, "memory blocks");
  ck_assert_msg_contains(buf, "@0 +");
  /* The five matmuls and relus share at most a few blocks. */
  tyto_program_stats st = stats(p);
  ck_assert_uint_le(st.arena_bytes, 2 * 64 * 64 * 4);
  ck_assert_uint_le(st.lower_bound_bytes, st.planned_bytes);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("planned");
  TCase *tc = tcase_create("planned");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, elementwise_chain_runs_in_place);
  tcase_add_test(tc, fused_chain_is_one_kernel);
  tcase_add_test(tc, reshape_in_place_launches_nothing);
  tcase_add_test(tc, no_memory_plan_gives_every_tensor_its_own);
  tcase_add_test(tc, outputs_rewritten_away_still_read);
  tcase_add_test(tc, bad_options_and_arguments_are_refused);
  tcase_add_test(tc, dot_export_colours_memory_blocks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(suite());
}
