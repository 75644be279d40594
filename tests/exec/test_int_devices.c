/* Integer tensors through the public API, on every device that runs them
 * and placed across devices that do not all run them.
 *
 * One program of index work — an embedding lookup by i64 token ids, the
 * argmax of each row as i64, the accuracy against i64 labels, a bincount
 * (scatter_add of ones), one-hot rows, casts that truncate and saturate,
 * and a sum that wraps — is compiled on the CPU, on OpenCL where a device
 * opens, and over the partial test plugin (f32 elementwise ops only:
 * tests/plugins/partplug.c) with the CPU, where placement must send every
 * integer op to the CPU. Every output is checked exactly against values
 * computed here: index work has no rounding to tolerate, and the one
 * floating output (the accuracy) is a ratio of small integers. */
#include "common.h"

#include <math.h>
#include <stdint.h>

#include <tyto/ad.h>
#include <tyto/nn.h>

#ifndef TEST_PART_PLUGIN_DIR
#error "TEST_PART_PLUGIN_DIR must name the directory of tyto_plugin_part.so"
#endif

enum { V = 10, D = 4, N = 6, C = 4 };

static const int64_t tokens[N] = {9, 0, 3, 3, 7, 1};
static const int64_t labels[N] = {1, 0, 3, 2, 1, 3};
static const float special[5] = {NAN, 3e9f, -3e9f, -2.7f, 2.7f};

typedef struct prog {
  tyto_graph *g;
  tyto_tensor *table, *tok, *lab, *x;
  tyto_tensor *e, *pred, *acc, *counts, *oh, *trunc, *wrap;
} prog;

static void build(prog *q) {
  tyto_graph *g = q->g = tyto_graph_new();
  q->table = tyto_input(g, TYTO_F32, 2, (int64_t[]){V, D}, "table");
  q->tok = tyto_input(g, TYTO_I64, 1, (int64_t[]){N}, "tokens");
  q->lab = tyto_input(g, TYTO_I64, 1, (int64_t[]){N}, "labels");
  q->x = tyto_input(g, TYTO_F32, 1, (int64_t[]){5}, "x");
  /* An elementwise f32 op (the partial plugin runs it) over the rows the
   * tokens pick. */
  q->e = tyto_exp(tyto_gather(q->table, q->tok, 0));
  q->pred = tyto_argmax_as(q->e, 1, 0, TYTO_I64);
  q->acc = tyto_mean(tyto_cast(tyto_eq(q->pred, q->lab), TYTO_F32), 0, NULL, 0);
  q->counts =
      tyto_scatter_add(tyto_full(g, TYTO_I64, 1, (int64_t[]){V}, 0), q->tok,
                       tyto_full(g, TYTO_I64, 1, (int64_t[]){N}, 1), 0);
  q->oh = tyto_one_hot(q->lab, C);
  q->trunc = tyto_cast(q->x, TYTO_I32);
  const int64_t near[2] = {INT64_MAX, 2};
  q->wrap = tyto_sum(
      tyto_constant_raw(g, TYTO_I64, 1, (int64_t[]){2}, near, sizeof near), 0,
      NULL, 0);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
}

static void table_values(float *t) {
  for (int i = 0; i < V * D; i++)
    t[i] = (float)((i * 7) % 11) / 4.0f - 1.0f;
}

/* Runs q on the context's devices (n of them, in order) and checks every
 * output against the host's own computation. */
static tyto_program *run_and_check(tyto_context *ctx, prog *q, size_t n) {
  tyto_tensor *outs[6] = {q->pred, q->acc, q->counts, q->oh, q->trunc, q->wrap};
  tyto_program_options po;
  tyto_program_options_init(&po);
  size_t devs[2] = {0, 1};
  po.n_devices = n;
  po.devices = devs;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, q->g, 6, outs, &po, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  float table[V * D];
  table_values(table);
  ck_assert_int_eq(tyto_program_set_input(p, q->table, table, sizeof table),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, q->tok, tokens, sizeof tokens),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, q->lab, labels, sizeof labels),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, q->x, special, sizeof special),
                   TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());

  /* The argmax of each picked row (exp keeps the order), the first on
   * ties; the accuracy; the bincount. */
  int64_t pred[N], want_pred[N], counts[V], want_counts[V] = {0};
  int hits = 0;
  for (int i = 0; i < N; i++) {
    const float *row = table + tokens[i] * D;
    int best = 0;
    for (int j = 1; j < D; j++)
      if (row[j] > row[best])
        best = j;
    want_pred[i] = best;
    hits += best == labels[i];
    want_counts[tokens[i]]++;
  }
  ck_assert_int_eq(tyto_program_read_output(p, 0, pred, sizeof pred), TYTO_OK);
  ck_assert_mem_eq(pred, want_pred, sizeof pred);
  float acc;
  ck_assert_int_eq(tyto_program_read_output(p, 1, &acc, sizeof acc), TYTO_OK);
  ck_assert_float_eq(acc, (float)hits / N);
  ck_assert_int_eq(tyto_program_read_output(p, 2, counts, sizeof counts),
                   TYTO_OK);
  ck_assert_mem_eq(counts, want_counts, sizeof counts);
  float oh[N * C];
  ck_assert_int_eq(tyto_program_read_output(p, 3, oh, sizeof oh), TYTO_OK);
  for (int i = 0; i < N * C; i++)
    ck_assert_float_eq(oh[i], (float)(labels[i / C] == i % C));
  /* Toward zero, saturated, NaN 0; and INT64_MAX + 2 wraps. */
  int32_t trunc[5];
  const int32_t want_trunc[5] = {0, INT32_MAX, INT32_MIN, -2, 2};
  ck_assert_int_eq(tyto_program_read_output(p, 4, trunc, sizeof trunc),
                   TYTO_OK);
  ck_assert_mem_eq(trunc, want_trunc, sizeof trunc);
  int64_t wrap;
  ck_assert_int_eq(tyto_program_read_output(p, 5, &wrap, sizeof wrap), TYTO_OK);
  ck_assert_int_eq(wrap, INT64_MIN + 1);
  return p;
}

static tyto_context *open_devices(const char *devices, int part) {
  tyto_context_options o;
  test_options(&o, 0);
  if (part)
    o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = devices;
  tyto_context *ctx = NULL;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

START_TEST(index_program_on_the_cpu) {
  prog q;
  build(&q);
  tyto_context *ctx = open_devices("cpu:0", 0);
  tyto_program_free(run_and_check(ctx, &q, 1));
  tyto_context_free(ctx);
  tyto_graph_free(q.g);
}
END_TEST

START_TEST(index_program_on_opencl) {
  /* PoCL under valgrind takes minutes to build a program: the OpenCL
   * suites skip there, and so does this case. */
  char why[1024];
  if (getenv("TYTO_TEST_UNDER_VALGRIND") ||
      test_probe_devices("opencl:0", why, sizeof why) != 0)
    return; /* no OpenCL device here: the CPU case covers the API */
  prog q;
  build(&q);
  tyto_context *ctx = open_devices("opencl:0", 0);
  tyto_program_free(run_and_check(ctx, &q, 1));
  tyto_context_free(ctx);
  tyto_graph_free(q.g);
}
END_TEST

/* part:0 first: it takes the f32 elementwise op, and every integer op
 * (it lists f32 only) goes to the CPU, with the same results. */
START_TEST(integer_ops_placed_on_a_device_that_runs_them) {
  prog q;
  build(&q);
  tyto_context *ctx = open_devices("part:0,cpu:0", 1);
  tyto_program *p = run_and_check(ctx, &q, 2);
  ck_assert_int_eq(tyto_program_tensor_device(p, q.e), 0);
  ck_assert_int_eq(tyto_program_tensor_device(p, q.pred), 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, q.counts), 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, q.trunc), 1);
  tyto_program_free(p);
  tyto_context_free(ctx);
  tyto_graph_free(q.g);
}
END_TEST

/* An embedding layer looked up by i64 token ids (PyTorch's nn.Embedding
 * takes int64), and the gradient of its table: the rows the tokens name,
 * each once per occurrence. */
START_TEST(embedding_by_integer_ids) {
  tyto_graph *g = tyto_graph_new();
  tyto_nn_options no;
  tyto_nn_options_init(&no);
  tyto_nn *nn = NULL;
  ck_assert_int_eq(tyto_nn_new(g, &no, &nn), TYTO_OK);
  tyto_tensor *ids = tyto_input(g, TYTO_I64, 1, (int64_t[]){N}, "ids");
  tyto_tensor *y = tyto_nn_embedding(nn, "emb", ids, V, D, (tyto_init){0});
  ck_assert_msg(!tyto_tensor_is_error(y), "%s", tyto_graph_error_message(g));
  tyto_tensor *table = tyto_nn_parameter(nn, 0);
  tyto_tensor *gt = tyto_grad(tyto_sum(y, 0, NULL, 0), table);
  ck_assert_msg(!tyto_tensor_is_error(gt), "%s", tyto_graph_error_message(g));
  tyto_context *ctx = open_devices("cpu:0", 0);
  tyto_tensor *outs[2] = {y, gt};
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 2, outs, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  float w[V * D], got[N * D], grad[V * D];
  table_values(w);
  ck_assert_int_eq(tyto_program_write_parameter(p, table, w, sizeof w),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, ids, tokens, sizeof tokens),
                   TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 1, grad, sizeof grad), TYTO_OK);
  for (int i = 0; i < N; i++)
    ck_assert_mem_eq(got + i * D, w + tokens[i] * D, D * sizeof(float));
  int64_t uses[V] = {0};
  for (int i = 0; i < N; i++)
    uses[tokens[i]]++;
  for (int i = 0; i < V * D; i++)
    ck_assert_float_eq(grad[i], (float)uses[i / D]);
  tyto_program_free(p);
  tyto_context_free(ctx);
  tyto_nn_free(nn);
  tyto_graph_free(g);
}
END_TEST

/* A gather by an id past the table fails the run with the kernel's
 * message (on OpenCL, whose gather checks its indices when it launches,
 * "a launch on opencl:0", not a copy that never happened), and the
 * outputs of that failed run are refused, not the last good run's values
 * mixed with this one's. */
static void bad_id_fails_the_run(const char *devices, const char *where) {
  tyto_context *ctx = open_devices(devices, 0);
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *table = tyto_input(g, TYTO_F32, 2, (int64_t[]){V, D}, "table");
  tyto_tensor *tok = tyto_input(g, TYTO_I64, 1, (int64_t[]){N}, "tokens");
  tyto_tensor *e = tyto_gather(table, tok, 0);
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &e, NULL, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  float t[V * D], got[N * D];
  table_values(t);
  ck_assert_int_eq(tyto_program_set_input(p, table, t, sizeof t), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, tok, tokens, sizeof tokens),
                   TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got), TYTO_OK);
  int64_t bad[N];
  memcpy(bad, tokens, sizeof bad);
  bad[2] = V;
  ck_assert_int_eq(tyto_program_set_input(p, tok, bad, sizeof bad), TYTO_OK);
  ck_assert_int_eq(tyto_program_run(p), TYTO_ERR_INVALID_ARGUMENT);
  const char *m = tyto_errmsg();
  ck_assert_msg_contains(m, where);
  ck_assert_msg_contains(m, "gather: index 10 at position 2");
  ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "the program's last run failed");
  /* A good run makes the outputs readable again. */
  ck_assert_int_eq(tyto_program_set_input(p, tok, tokens, sizeof tokens),
                   TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, got, sizeof got), TYTO_OK);
  ck_assert_mem_eq(got, t + tokens[0] * D, D * sizeof(float));
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}

START_TEST(bad_id_on_the_cpu) {
  bad_id_fails_the_run("cpu:0", "tyto_program_run: a kernel on cpu:0 failed");
}
END_TEST

START_TEST(bad_id_on_opencl) {
  char why[1024];
  if (getenv("TYTO_TEST_UNDER_VALGRIND") ||
      test_probe_devices("opencl:0", why, sizeof why) != 0)
    return; /* as index_program_on_opencl */
  bad_id_fails_the_run("opencl:0",
                       "tyto_program_run: a launch on opencl:0 failed");
}
END_TEST

/* A device set none of whose devices runs integers: the compile names
 * the op, the dtype and what the device runs. */
START_TEST(no_device_runs_integers) {
  tyto_context *ctx = open_devices("part:0", 1);
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *x = tyto_input(g, TYTO_F32, 2, (int64_t[]){2, 3}, "x");
  tyto_tensor *y = tyto_argmax_as(x, 1, 0, TYTO_I64);
  tyto_program *p = NULL;
  ck_assert_int_ne(tyto_program_compile(ctx, g, 1, &y, NULL, &p), TYTO_OK);
  ck_assert_ptr_null(p);
  const char *m = tyto_errmsg();
  ck_assert_msg(strstr(m, "argmax") && strstr(m, "i64") &&
                    strstr(m, "it runs f32"),
                "%s", m);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("int-devices");
  TCase *tc = tcase_create("int-devices");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, index_program_on_the_cpu);
  tcase_add_test(tc, index_program_on_opencl);
  tcase_add_test(tc, integer_ops_placed_on_a_device_that_runs_them);
  tcase_add_test(tc, embedding_by_integer_ids);
  tcase_add_test(tc, no_device_runs_integers);
  tcase_add_test(tc, bad_id_on_the_cpu);
  tcase_add_test(tc, bad_id_on_opencl);
  suite_add_tcase(s, tc);
  return test_run(s);
}
