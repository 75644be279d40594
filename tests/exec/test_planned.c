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

/* tyto_tensor_eval with the wrong byte count or no buffer: the message
 * names the caller's function and tensor, also on a cache hit whose
 * program was compiled from another graph (where the tensor it reads
 * has another index). */
START_TEST(eval_checks_its_buffer) {
  tyto_eval_cache *c = NULL;
  ck_assert_int_eq(tyto_eval_cache_new(ctx, &c), TYTO_OK);
  float v[4];
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *y = tyto_exp(tyto_full(g, TYTO_F32, 1, S(4), 1.0));
  ck_assert_int_eq(tyto_tensor_eval(c, y, v, sizeof v), TYTO_OK);
  tyto_graph_free(g);
  g = tyto_graph_new();
  tyto_input(g, TYTO_F32, 1, S(2), "unused");
  y = tyto_exp(tyto_full(g, TYTO_F32, 1, S(4), 1.0));
  tyto_tensor_set_name(y, "y");
  ck_assert_int_eq(tyto_tensor_eval(c, y, v, 3), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(),
                   "eval: tensor 'y' (#2) is f32[4] (16 bytes), got 3 bytes");
  ck_assert_int_eq(tyto_tensor_eval(c, y, NULL, sizeof v),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "eval: dst is NULL");
  ck_assert_int_eq(tyto_tensor_eval(c, y, v, sizeof v), TYTO_OK);
  ck_assert_uint_eq(tyto_eval_cache_compiles(c), 1);
  tyto_graph_free(g);
  tyto_eval_cache_free(c);
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

static tyto_program *compile_updates(tyto_graph *g, size_t n,
                                     tyto_tensor **outs, size_t n_u,
                                     tyto_tensor **params, tyto_tensor **values,
                                     unsigned passes_off, int no_plan) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.passes_off = passes_off;
  o.no_memory_plan = no_plan;
  o.n_updates = n_u;
  o.update_params = params;
  o.update_values = values;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, n, outs, &o, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  return p;
}

/* SGD on loss = sum(w * x): w <- w - 0.5 x each run, written in place;
 * the loss of each run uses the w from before it. */
START_TEST(sgd_update_in_place) {
  for (int variant = 0; variant < 3; variant++) {
    tyto_graph *g = tyto_graph_new();
    tyto_tensor *x = tyto_input(g, TYTO_F64, 1, S(1000), "x");
    tyto_tensor *w = tyto_parameter(g, TYTO_F64, 1, S(1000), "w");
    tyto_tensor *loss = tyto_sum(tyto_mul(w, x), 0, NULL, 0);
    tyto_tensor *w2 = tyto_sub(w, tyto_mul_scalar(x, 0.5));
    tyto_program *p =
        compile_updates(g, 1, &loss, 1, &w, &w2,
                        variant == 1 ? TYTO_PASS_ALL : 0, variant == 2);
    tyto_program_stats st = stats(p);
    ck_assert_uint_eq(st.updates_in_place, 1);
    double xv[1000], wv[1000], got;
    for (int i = 0; i < 1000; i++) {
      xv[i] = 0.001 * i;
      wv[i] = 1.0;
    }
    ck_assert_int_eq(tyto_program_write_parameter(p, w, wv, sizeof wv),
                     TYTO_OK);
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    for (int run = 0; run < 3; run++) {
      ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
      ck_assert_int_eq(tyto_program_read_output(p, 0, &got, sizeof got),
                       TYTO_OK);
      double want = 0;
      for (int i = 0; i < 1000; i++)
        want += (1.0 - 0.5 * run * xv[i]) * xv[i];
      ck_assert_double_eq_tol(got, want, 1e-9);
    }
    ck_assert_int_eq(tyto_program_read_parameter(p, w, wv, sizeof wv), TYTO_OK);
    for (int i = 0; i < 1000; i++)
      ck_assert_double_eq_tol(wv[i], 1.0 - 1.5 * xv[i], 1e-12);
    tyto_program_free(p);
    tyto_graph_free(g);
  }
}
END_TEST

/* Adam (as the training issue writes it) on a quadratic, three steps:
 * p, m, v and the step counter are all updated in place, and the values
 * match a float64 transcription of the same formulas. */
START_TEST(adam_updates_in_place_match_closed_form) {
  enum { N = 300 };
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *p = tyto_parameter(g, TYTO_F64, 1, S(N), "p");
  tyto_tensor *m = tyto_parameter(g, TYTO_F64, 1, S(N), "p.m");
  tyto_tensor *v = tyto_parameter(g, TYTO_F64, 1, S(N), "p.v");
  tyto_tensor *t = tyto_parameter(g, TYTO_F64, 0, NULL, "step");
  tyto_tensor *c = tyto_input(g, TYTO_F64, 1, S(N), "c");
  /* loss = sum((p - c)^2) / 2: the gradient is p - c */
  tyto_tensor *d = tyto_sub(p, c);
  tyto_tensor *loss = tyto_div_scalar(tyto_sum(tyto_square(d), 0, NULL, 0), 2);
  tyto_tensor *grad = tyto_grad(loss, p);
  double b1 = 0.9, b2 = 0.999, lr = 0.01, eps = 1e-8;
  tyto_tensor *t1 = tyto_add_scalar(t, 1);
  tyto_tensor *m2 =
      tyto_add(tyto_mul_scalar(m, b1), tyto_mul_scalar(grad, 1 - b1));
  tyto_tensor *v2 = tyto_add(tyto_mul_scalar(v, b2),
                             tyto_mul_scalar(tyto_square(grad), 1 - b2));
  tyto_tensor *c1 = tyto_sub(tyto_scalar(g, TYTO_F64, 1),
                             tyto_pow(tyto_scalar(g, TYTO_F64, b1), t1));
  tyto_tensor *c2 = tyto_sub(tyto_scalar(g, TYTO_F64, 1),
                             tyto_pow(tyto_scalar(g, TYTO_F64, b2), t1));
  tyto_tensor *p2 = tyto_sub(
      p, tyto_mul_scalar(
             tyto_div(tyto_div(m2, c1),
                      tyto_add_scalar(tyto_sqrt(tyto_div(v2, c2)), eps)),
             lr));
  tyto_tensor *params[4] = {p, m, v, t}, *values[4] = {p2, m2, v2, t1};
  tyto_program *prog = compile_updates(g, 1, &loss, 4, params, values, 0, 0);
  tyto_program_stats st = stats(prog);
  ck_assert_uint_eq(st.updates_in_place, 4);
  double pv[N], cv[N], mv[N] = {0}, vv[N] = {0}, step = 0, zeros[N] = {0};
  for (int i = 0; i < N; i++) {
    pv[i] = sin(i);
    cv[i] = 0.5 * cos(3 * i);
  }
  tyto_program_write_parameter(prog, p, pv, sizeof pv);
  tyto_program_write_parameter(prog, m, zeros, sizeof zeros);
  tyto_program_write_parameter(prog, v, zeros, sizeof zeros);
  tyto_program_write_parameter(prog, t, &step, sizeof step);
  tyto_program_set_input(prog, c, cv, sizeof cv);
  for (int k = 1; k <= 3; k++) {
    ck_assert_int_eq(tyto_program_run(prog), TYTO_OK);
    for (int i = 0; i < N; i++) {
      double gr = pv[i] - cv[i];
      mv[i] = b1 * mv[i] + (1 - b1) * gr;
      vv[i] = b2 * vv[i] + (1 - b2) * gr * gr;
      double mh = mv[i] / (1 - pow(b1, k)), vh = vv[i] / (1 - pow(b2, k));
      pv[i] -= lr * (mh / (sqrt(vh) + eps));
    }
  }
  double got[N];
  tyto_program_read_parameter(prog, p, got, sizeof got);
  for (int i = 0; i < N; i++)
    ck_assert_double_eq_tol(got[i], pv[i], 1e-12);
  tyto_program_read_parameter(prog, v, got, sizeof got);
  for (int i = 0; i < N; i++)
    ck_assert_double_eq_tol(got[i], vv[i], 1e-15);
  tyto_program_read_parameter(prog, t, &step, sizeof step);
  ck_assert_double_eq(step, 3);
  tyto_program_free(prog);
  tyto_graph_free(g);
}
END_TEST

/* An update that is no elementwise op of its parameter (a matrix product)
 * is copied at the end of the run, after every reader of the old value;
 * so is one whose value an output also reads. */
START_TEST(updates_copied_after_every_reader) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *a = tyto_input(g, TYTO_F64, 2, S(3, 3), "a");
  tyto_tensor *w = tyto_parameter(g, TYTO_F64, 2, S(3, 3), "w");
  tyto_tensor *u = tyto_parameter(g, TYTO_F64, 1, S(3), "u");
  tyto_tensor *w2 = tyto_matmul(a, w, 0, 0);
  tyto_tensor *u2 = tyto_exp(u);
  /* Outputs read the old w and the new u. */
  tyto_tensor *outs[2] = {tyto_sum(w, 0, NULL, 0), u2};
  tyto_tensor *params[2] = {w, u}, *values[2] = {w2, u2};
  tyto_program *p = compile_updates(g, 2, outs, 2, params, values, 0, 0);
  tyto_program_stats st = stats(p);
  ck_assert_uint_eq(st.updates_in_place, 0);
  double av[9] = {0, 1, 0, 0, 0, 1, 1, 0, 0}; /* a cyclic permutation */
  double wv[9], uv[3] = {0, 1, -1}, s, o[3];
  for (int i = 0; i < 9; i++)
    wv[i] = i + 1;
  tyto_program_write_parameter(p, w, wv, sizeof wv);
  tyto_program_write_parameter(p, u, uv, sizeof uv);
  tyto_program_set_input(p, a, av, sizeof av);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  tyto_program_read_output(p, 0, &s, sizeof s);
  ck_assert_double_eq(s, 45);
  tyto_program_read_output(p, 1, o, sizeof o);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(o[i], exp(uv[i]), 1e-15);
  double w1[9], u1[3];
  tyto_program_read_parameter(p, w, w1, sizeof w1);
  tyto_program_read_parameter(p, u, u1, sizeof u1);
  /* a w moves the rows of w up by one */
  for (int i = 0; i < 9; i++)
    ck_assert_double_eq(w1[i], wv[(i + 3) % 9]);
  for (int i = 0; i < 3; i++)
    ck_assert_double_eq_tol(u1[i], exp(uv[i]), 1e-15);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

/* A reader of the old value that also depends on the new one: the value's
 * kernel cannot overwrite the parameter (the reader would have to run
 * before and after it), so the update is copied. Passes off, so the two
 * stay separate kernels. */
START_TEST(update_whose_old_value_is_read_downstream) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *w = tyto_parameter(g, TYTO_F64, 2, S(2, 2), "w");
  tyto_tensor *w2 = tyto_mul_scalar(w, 2);
  tyto_tensor *z = tyto_matmul(w2, w, 0, 0); /* reads w and w2 */
  for (int passes = 0; passes < 2; passes++) {
    tyto_program *p =
        compile_updates(g, 1, &z, 1, &w, &w2, passes ? 0 : TYTO_PASS_ALL, 0);
    ck_assert_uint_eq(stats(p).updates_in_place, 0);
    double wv[4] = {1, 2, 3, 4}, got[4];
    double want[4] = {2 * 7, 2 * 10, 2 * 15, 2 * 22}; /* 2 w w */
    tyto_program_write_parameter(p, w, wv, sizeof wv);
    ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
    tyto_program_read_output(p, 0, got, sizeof got);
    for (int i = 0; i < 4; i++)
      ck_assert_double_eq(got[i], want[i]);
    tyto_program_read_parameter(p, w, wv, sizeof wv);
    ck_assert_double_eq(wv[3], 8);
    tyto_program_free(p);
  }
  tyto_graph_free(g);
}
END_TEST

START_TEST(bad_updates_are_refused) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, S(3), "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, S(3), "w");
  tyto_tensor *y = tyto_add(x, w);
  tyto_tensor *big = tyto_parameter(g, TYTO_F32, 1, S(4), "b");
  struct {
    tyto_tensor *param, *value;
    const char *msg;
  } cases[] = {
      {x, y, "expected a parameter to update, found input 'x' (#0) f32[3]"},
      {big, y,
       "parameter 'b' (#3) f32[4] cannot take the value of "
       "computed (#2) f32[3]"},
  };
  for (size_t i = 0; i < 2; i++) {
    tyto_program_options o;
    tyto_program_options_init(&o);
    o.n_updates = 1;
    o.update_params = &cases[i].param;
    o.update_values = &cases[i].value;
    tyto_program *p = NULL;
    ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &o, &p),
                     TYTO_ERR_INVALID_ARGUMENT);
    ck_assert_msg_contains(tyto_errmsg(), cases[i].msg);
    ck_assert_ptr_null(p);
  }
  tyto_tensor *twice[2] = {w, w}, *vals[2] = {y, y};
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.n_updates = 2;
  o.update_params = twice;
  o.update_values = vals;
  tyto_program *p = NULL;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &o, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "is already updated by update 0");
  /* A swap: each parameter's value is the other, updated in the same run. */
  tyto_tensor *w2 = tyto_parameter(g, TYTO_F32, 1, S(3), "w2");
  tyto_tensor *swap_p[2] = {w, w2}, *swap_v[2] = {w2, w};
  o.update_params = swap_p;
  o.update_values = swap_v;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &o, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "the value is parameter 'w2' (#4) "
                                        "f32[3], which update 1 changes");
  o.update_params = NULL;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &o, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "n_updates is 2 but update_params");
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
  tcase_add_test(tc, sgd_update_in_place);
  tcase_add_test(tc, adam_updates_in_place_match_closed_form);
  tcase_add_test(tc, updates_copied_after_every_reader);
  tcase_add_test(tc, update_whose_old_value_is_read_downstream);
  tcase_add_test(tc, bad_updates_are_refused);
  tcase_add_test(tc, eval_checks_its_buffer);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(suite());
}
