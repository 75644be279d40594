/* Placement across devices: the CPU plugin and the partial test plugin
 * (tests/plugins/partplug.c: f32 elementwise ops and copies only, a fused
 * program with exp refused, f64 refused; its streams are worker threads
 * that can be made slow). Every op class compiled over both devices gives
 * the one-device results; refused ops go to the CPU and each copy is
 * reported; a fused chain refused for one op or one dtype is split and
 * placed; strict placement and bad pins are errors that name the op, the
 * device and the reason; a consumer waits for a slow producer on another
 * device; a training step split over both devices follows the one-device
 * step.
 *
 * Tolerances: the two plugins compute the elementwise ops with different
 * code (the CPU's vector kernels, the test plugin's libm), so f32 results
 * agree to a few units in the last place: 1e-6 relative, 1e-6 absolute
 * for values near 0. Where both devices run the same code (the ops the
 * test plugin refuses run on the CPU either way) the results are equal. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <unistd.h>

#include <tyto/optim.h>

#ifndef TEST_PART_PLUGIN_DIR
#error "TEST_PART_PLUGIN_DIR must name the directory of tyto_plugin_part.so"
#endif

static char logged[16384];

static void capture(void *user, tyto_log_level level, const char *origin,
                    const char *msg) {
  (void)user;
  size_t n = strlen(logged);
  snprintf(logged + n, sizeof logged - n, "%d %s: %s\n", (int)level, origin,
           msg);
}

/* cpu:0 is device 0, part:0 device 1. */
static tyto_context *two_devices(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = "cpu:0,part:0";
  o.log_level = TYTO_LOG_INFO;
  o.log_fn = capture;
  logged[0] = '\0';
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_uint_eq(tyto_context_device_count(ctx), 2);
  return ctx;
}

static const size_t both[2] = {0, 1};

static tyto_program *compile(tyto_context *ctx, tyto_graph *g, size_t n,
                             tyto_tensor *const *outs, int n_devs,
                             tyto_place_policy policy, int strict) {
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_devices = (size_t)n_devs;
  po.devices = both;
  po.placement = policy;
  po.strict = strict;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, n, outs, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  return p;
}

static void fill(float *x, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 9) % 2000) / 1000.0f - 1.0f;
  }
}

static void close_to(const float *a, const float *b, size_t n,
                     const char *what) {
  for (size_t i = 0; i < n; i++) {
    float tol = 1e-6f + 1e-6f * fabsf(b[i]);
    ck_assert_msg(fabsf(a[i] - b[i]) <= tol || (isnan(a[i]) && isnan(b[i])),
                  "%s[%zu]: %.9g, one device %.9g", what, i, (double)a[i],
                  (double)b[i]);
  }
}

/* One op of each class on x [8,16] and w [16,4], built in the scope of
 * device `scope` (-1: none): elementwise ones, comparisons and where,
 * layout ops (transpose, concat, slice), a reduction, a matrix product,
 * softmax. outs: h, m, o, tt, cc, sl, wh (NOUT of them); refused: the
 * reduction, the product and softmax, which the test device does not
 * run. */
#define NOUT 7
typedef struct op_graph {
  tyto_tensor *x, *w, *outs[NOUT], *refused[3];
} op_graph;

static const size_t out_sizes[NOUT] = {128, 32, 32, 128, 256, 56, 128};

static void op_classes(tyto_graph *g, int scope, op_graph *q) {
  int old = tyto_graph_set_device_scope(g, scope);
  int64_t xs[2] = {8, 16}, ws[2] = {16, 4};
  q->x = tyto_input(g, TYTO_F32, 2, xs, "x");
  q->w = tyto_parameter(g, TYTO_F32, 2, ws, "w");
  tyto_tensor *h = tyto_tanh(tyto_add(tyto_mul(q->x, q->x), q->x));
  int ax = 1;
  tyto_tensor *r = tyto_sum(h, 1, &ax, 1);
  tyto_tensor *m = tyto_matmul(tyto_sub(h, r), q->w, 0, 0);
  tyto_tensor *s = tyto_softmax(m, 1);
  tyto_tensor *o = tyto_relu(tyto_exp(s));
  tyto_tensor *tt = tyto_transpose(h, 0, 1);
  tyto_tensor *two[2] = {h, tyto_relu(h)};
  tyto_tensor *cc = tyto_concat(2, two, 0);
  int64_t st[2] = {0, 2}, sp[2] = {8, 16}, step[2] = {1, 2};
  tyto_tensor *sl = tyto_slice(h, st, sp, step);
  tyto_tensor *wh = tyto_where(tyto_gt(q->x, h), q->x, tyto_neg(h));
  tyto_tensor *outs[NOUT] = {h, m, o, tt, cc, sl, wh};
  memcpy(q->outs, outs, sizeof outs);
  q->refused[0] = r;
  q->refused[1] = m;
  q->refused[2] = s;
  tyto_graph_set_device_scope(g, old);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
}

static void run_all(tyto_program *p, const op_graph *q, const float *xv,
                    const float *wv, float out[NOUT][256]) {
  ck_assert_int_eq(tyto_program_set_input(p, q->x, xv, 128 * sizeof *xv),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(p, q->w, wv, 64 * sizeof *wv),
                   TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  for (size_t i = 0; i < NOUT; i++)
    ck_assert_msg(tyto_program_read_output(
                      p, i, out[i], out_sizes[i] * sizeof(float)) == TYTO_OK,
                  "%s", tyto_errmsg());
}

static void compare_all(float a[NOUT][256], float b[NOUT][256]) {
  static const char *names[NOUT] = {"h",      "m",     "o",    "transpose",
                                    "concat", "slice", "where"};
  for (size_t i = 0; i < NOUT; i++)
    close_to(a[i], b[i], out_sizes[i], names[i]);
}

START_TEST(every_op_class_matches_one_device) {
  tyto_context *ctx = two_devices();
  /* The reference: the graph with no pins, on the CPU alone. */
  tyto_graph *g1 = tyto_graph_new();
  op_graph q1;
  op_classes(g1, -1, &q1);
  tyto_program *one = compile(ctx, g1, NOUT, q1.outs, 0, TYTO_PLACE_DEFAULT, 0);
  ck_assert_uint_eq(tyto_program_device_count(one), 1);
  ck_assert_uint_eq(tyto_program_copy_count(one), 0);
  static float a[NOUT][256], b[NOUT][256];
  float xv[128], wv[64];
  fill(wv, 64, 2);
  for (int policy = TYTO_PLACE_PINNED; policy <= TYTO_PLACE_AUTO; policy++) {
    tyto_graph *g = tyto_graph_new();
    op_graph q;
    op_classes(g, 1, &q);
    ck_assert_int_eq(tyto_tensor_device(q.outs[0]), 1);
    /* Pins to a device the program may not use are refused by name. */
    tyto_program_options po;
    tyto_program_options_init(&po);
    tyto_program *bad = NULL;
    ck_assert_int_eq(tyto_program_compile(ctx, g, NOUT, q.outs, &po, &bad),
                     TYTO_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(tyto_errmsg(), "pinned to device 1 (part:0)") &&
                      strstr(tyto_errmsg(), "may not use"),
                  "%s", tyto_errmsg());
    ck_assert_ptr_null(bad);
    logged[0] = '\0';
    tyto_program *two =
        compile(ctx, g, NOUT, q.outs, 2, (tyto_place_policy)policy, 0);
    ck_assert_uint_eq(tyto_program_device_count(two), 2);
    for (int k = 0; k < 3; k++) {
      /* Several runs with new inputs: no stale copies. */
      fill(xv, 128, 1u + (unsigned)k);
      run_all(one, &q1, xv, wv, b);
      run_all(two, &q, xv, wv, a);
      compare_all(a, b);
    }
    /* The test device runs no reduction, matmul or softmax. */
    for (int i = 0; i < 3; i++)
      ck_assert_int_eq(tyto_program_tensor_device(two, q.refused[i]), 0);
    if (policy == TYTO_PLACE_PINNED) {
      /* Pinned: what the test device runs stays there (elementwise,
       * layout), so values cross in both directions, each reported. */
      ck_assert_int_eq(tyto_program_tensor_device(two, q.x), 1);
      for (int i = 3; i < NOUT; i++)
        ck_assert_int_eq(tyto_program_tensor_device(two, q.outs[i]), 1);
      size_t nc = tyto_program_copy_count(two);
      ck_assert_uint_ge(nc, 2);
      int to_cpu = 0, to_part = 0;
      for (size_t i = 0; i < nc; i++) {
        tyto_program_copy c = {.struct_size = sizeof c};
        ck_assert_int_eq(tyto_program_copy_get(two, i, &c), TYTO_OK);
        ck_assert_uint_ne(c.from, c.to);
        ck_assert_uint_gt(c.bytes, 0);
        ck_assert_str_eq(c.route, "staged through host memory");
        to_cpu += c.to == 0;
        to_part += c.to == 1;
      }
      ck_assert_int_gt(to_cpu, 0);
      ck_assert_int_gt(to_part, 0);
      tyto_program_device_stats ds = {.struct_size = sizeof ds};
      ck_assert_int_eq(tyto_program_device_stats_get(two, 0, &ds), TYTO_OK);
      ck_assert_str_eq(ds.id, "cpu:0");
      ck_assert_uint_ge(ds.fallbacks, 3);
      ck_assert_uint_ge(ds.nodes, 3);
      ck_assert_int_eq(tyto_program_device_stats_get(two, 2, &ds),
                       TYTO_ERR_INVALID_ARGUMENT);
      ck_assert_msg(strstr(logged, "placement: sum") &&
                        strstr(logged, "part:0 refuses it"),
                    "%s", logged);
      ck_assert_msg(strstr(logged, "program placed: cpu:0"), "%s", logged);
      /* The report names both devices and every copy. */
      char *text = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&text, &len);
      ck_assert_int_eq(tyto_program_report_placement(two, f), TYTO_OK);
      fclose(f);
      ck_assert_msg(strstr(text, "cpu:0") && strstr(text, "part:0") &&
                        strstr(text, "copy #"),
                    "%s", text);
      free(text);
    }
    tyto_program_free(two);
    tyto_graph_free(g);
  }
  tyto_program_free(one);
  tyto_graph_free(g1);
  tyto_context_free(ctx);
}
END_TEST

/* a*b + exp(a) + b on device 1, whose fused kernels refuse exp (it runs
 * exp alone): the chain is split, exp runs alone, the rest stays fused,
 * everything on device 1. */
START_TEST(fused_chain_refused_for_one_op_is_split) {
  tyto_context *ctx = two_devices();
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {1000};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_tensor *b = tyto_input(g, TYTO_F32, 1, shp, "b");
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *e = tyto_exp(a);
  tyto_tensor *y = tyto_sub(tyto_add(tyto_mul(a, b), e), tyto_neg(b));
  tyto_graph_set_device_scope(g, -1);
  tyto_program *p = compile(ctx, g, 1, &y, 2, TYTO_PLACE_PINNED, 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, e), 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, y), 1);
  /* The inputs live where their readers are: nothing is copied. */
  ck_assert_int_eq(tyto_program_tensor_device(p, a), 1);
  ck_assert_uint_eq(tyto_program_copy_count(p), 0);
  tyto_program_stats st = {.struct_size = sizeof st};
  ck_assert_int_eq(tyto_program_stats_get(p, &st), TYTO_OK);
  ck_assert_uint_eq(st.fused_nodes, 1); /* mul, add, neg, sub */
  ck_assert_uint_eq(st.nodes_after, 4); /* a, b, exp, the fused rest */
  float av[1000], bv[1000], yv[1000];
  fill(av, 1000, 3);
  fill(bv, 1000, 4);
  ck_assert_int_eq(tyto_program_set_input(p, a, av, sizeof av), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, b, bv, sizeof bv), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, yv, sizeof yv), TYTO_OK);
  for (int i = 0; i < 1000; i++) {
    float ref = (av[i] * bv[i] + expf(av[i])) - (-bv[i]);
    ck_assert_msg(fabsf(yv[i] - ref) <= 1e-5f * fabsf(ref) + 1e-6f,
                  "y[%d] %.9g, expected %.9g", i, (double)yv[i], (double)ref);
  }
  tyto_program_free(p);
  /* A sum pinned to device 1 cannot run there: strict placement makes
   * that an error naming the op, the device and its reason. */
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *sy = tyto_sum(y, 0, NULL, 0);
  tyto_graph_set_device_scope(g, -1);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_devices = 2;
  po.devices = both;
  po.strict = 1;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &sy, &po, &p),
                   TYTO_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(tyto_errmsg(), "strict placement: sum") &&
                    strstr(tyto_errmsg(), "part:0") &&
                    strstr(tyto_errmsg(), "not run by this test device"),
                "%s", tyto_errmsg());
  /* TYTO_PLACEMENT=strict does the same; a word it does not know is an
   * error, not ignored. */
  po.strict = 0;
  setenv("TYTO_PLACEMENT", "pinned,strict", 1);
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &sy, &po, &p),
                   TYTO_ERR_UNSUPPORTED);
  unsetenv("TYTO_PLACEMENT");
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &sy, &po, &p), TYTO_OK);
  ck_assert_int_eq(tyto_program_tensor_device(p, sy), 0);
  tyto_program_free(p);
  setenv("TYTO_PLACEMENT", "sticky", 1);
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "\"sticky\" is not a word"), "%s",
                tyto_errmsg());
  unsetenv("TYTO_PLACEMENT");
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* An f64 chain pinned to device 1, which runs no f64: every node falls
 * back to the CPU, with a warning each (an error under strict). */
START_TEST(fused_chain_refused_for_its_dtype) {
  tyto_context *ctx = two_devices();
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {64};
  tyto_tensor *a = tyto_input(g, TYTO_F64, 1, shp, "a");
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *y = tyto_tanh(tyto_mul(tyto_add(a, a), a));
  tyto_program *p = compile(ctx, g, 1, &y, 2, TYTO_PLACE_PINNED, 0);
  ck_assert_int_eq(tyto_program_tensor_device(p, y), 0);
  ck_assert_msg(strstr(logged, "f64") || strstr(logged, "F64"), "%s", logged);
  double av[64], yv[64];
  for (int i = 0; i < 64; i++)
    av[i] = 0.01 * i - 0.3;
  ck_assert_int_eq(tyto_program_set_input(p, a, av, sizeof av), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, yv, sizeof yv), TYTO_OK);
  for (int i = 0; i < 64; i++)
    ck_assert_double_eq_tol(yv[i], tanh((av[i] + av[i]) * av[i]), 1e-15);
  tyto_program_free(p);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_devices = 2;
  po.devices = both;
  po.strict = 1;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_UNSUPPORTED);
  ck_assert_msg(strstr(tyto_errmsg(), "strict placement") &&
                    strstr(tyto_errmsg(), "part:0"),
                "%s", tyto_errmsg());
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* A slow producer on device 1 (each launch there sleeps), its consumer
 * a reduction on the CPU: the CPU must wait for the value, run after run. */
START_TEST(consumer_waits_for_a_slow_producer) {
  setenv("TYTO_PART_DELAY_US", "20000", 1);
  tyto_context *ctx = two_devices();
  unsetenv("TYTO_PART_DELAY_US");
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {4096};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *h = tyto_mul(tyto_add(a, a), a); /* 2a^2, slow */
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *s = tyto_sum(h, 0, NULL, 0); /* on the CPU */
  tyto_program *p = compile(ctx, g, 1, &s, 2, TYTO_PLACE_PINNED, 0);
  ck_assert_int_eq(tyto_program_tensor_device(p, h), 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, s), 0);
  float av[4096];
  for (int k = 1; k <= 4; k++) {
    for (int i = 0; i < 4096; i++)
      av[i] = (float)k * 0.25f;
    ck_assert_int_eq(tyto_program_set_input(p, a, av, sizeof av), TYTO_OK);
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
    float sv;
    ck_assert_int_eq(tyto_program_read_output(p, 0, &sv, sizeof sv), TYTO_OK);
    float want = 4096.0f * 2.0f * (float)k * 0.25f * (float)k * 0.25f;
    ck_assert_msg(fabsf(sv - want) <= 1e-5f * want,
                  "run %d: sum %.9g, want "
                  "%.9g",
                  k, (double)sv, (double)want);
  }
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* Bad pins: out of range at the graph; to a device not in the list at
 * compile; a list with a device twice or one the context lacks. */
START_TEST(bad_pins_and_device_lists) {
  tyto_context *ctx = two_devices();
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {4};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_tensor *y = tyto_neg(a);
  tyto_program_options po;
  tyto_program_options_init(&po);
  tyto_program *p = NULL;
  size_t twice[2] = {1, 1}, missing[2] = {0, 7};
  po.n_devices = 2;
  po.devices = twice;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "twice"), "%s", tyto_errmsg());
  po.devices = missing;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_NOT_FOUND);
  po.devices = NULL;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  po.n_devices = 0;
  po.placement = (tyto_place_policy)9;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(p);
  tyto_tensor_set_device(y, -2);
  ck_assert_int_ne(tyto_graph_status(g), TYTO_OK);
  ck_assert_msg(strstr(tyto_graph_error_message(g), "not a device index"), "%s",
                tyto_graph_error_message(g));
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* Least squares with Adam, the parameters and their elementwise math on
 * device 1, the reductions on the CPU: 20 steps follow the one-device
 * run. */
static void train(tyto_context *ctx, int split, float *loss, float *wout) {
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {256};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, shp, "x");
  tyto_tensor *t = tyto_input(g, TYTO_F32, 1, shp, "t");
  if (split)
    tyto_graph_set_device_scope(g, 1);
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, shp, "w");
  tyto_tensor *bias = tyto_parameter(g, TYTO_F32, 1, shp, "b");
  tyto_tensor *d = tyto_sub(tyto_add(tyto_mul(w, x), bias), t);
  tyto_tensor *sq = tyto_square(d);
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *l = tyto_mean(sq, 0, NULL, 0);
  tyto_tensor *ps[2] = {w, bias}, *gs[2];
  tyto_grads(l, 2, ps, gs);
  tyto_optim_options oo;
  tyto_optim_options_init(&oo, TYTO_OPTIM_ADAM);
  oo.lr = 0.05;
  tyto_optim *o = NULL;
  ck_assert_msg(tyto_optim_build(&oo, 2, ps, gs, &o) == TYTO_OK, "%s",
                tyto_errmsg());
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_devices = split ? 2 : 0;
  po.devices = both;
  po.n_updates = tyto_optim_update_count(o);
  po.update_params = tyto_optim_update_params(o);
  po.update_values = tyto_optim_update_values(o);
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &l, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  if (split) {
    ck_assert_int_eq(tyto_program_tensor_device(p, w), 1);
    ck_assert_int_eq(tyto_program_tensor_device(p, l), 0);
  }
  float xv[256], tv[256], wv[256] = {0}, bv[256] = {0};
  fill(wv, 256, 7);
  ck_assert_int_eq(tyto_program_write_parameter(p, w, wv, sizeof wv), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(p, bias, bv, sizeof bv),
                   TYTO_OK);
  for (int step = 0; step < 20; step++) {
    fill(xv, 256, 100u + (unsigned)step);
    for (int i = 0; i < 256; i++)
      tv[i] = 3.0f * xv[i] - 0.5f;
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    ck_assert_int_eq(tyto_program_set_input(p, t, tv, sizeof tv), TYTO_OK);
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(p, 0, &loss[step], sizeof *loss),
                     TYTO_OK);
  }
  ck_assert_int_eq(tyto_program_read_parameter(p, w, wout, 256 * sizeof *wout),
                   TYTO_OK);
  tyto_program_free(p);
  tyto_optim_free(o);
  tyto_graph_free(g);
}

START_TEST(split_training_step_follows_one_device) {
  tyto_context *ctx = two_devices();
  float l1[20], l2[20], w1[256], w2[256];
  train(ctx, 0, l1, w1);
  train(ctx, 1, l2, w2);
  ck_assert_float_lt(l1[19], l1[0]); /* it trains */
  close_to(l2, l1, 20, "loss");
  close_to(w2, w1, 256, "w after 20 steps");
  tyto_context_free(ctx);
}
END_TEST

/* The Graphviz export draws a cluster per device and dashed copies. */
START_TEST(dot_has_a_cluster_per_device) {
  tyto_context *ctx = two_devices();
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {16};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *h = tyto_neg(a);
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *s = tyto_sum(h, 0, NULL, 0);
  tyto_program *p = compile(ctx, g, 1, &s, 2, TYTO_PLACE_PINNED, 0);
  char path[] = "/tmp/tyto-place-dot-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert_int_eq(tyto_program_export_dot(p, path), TYTO_OK);
  FILE *f = fopen(path, "r");
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  ck_assert_msg(
      strstr(text, "subgraph cluster_0") && strstr(text, "label=\"cpu:0\"") &&
          strstr(text, "label=\"part:0\"") && strstr(text, "style=dashed"),
      "%s", text);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* Two devices of one plugin with copy_peer: the copies go peer to peer,
 * ordered by events across the two devices' streams (the producer slow). */
START_TEST(peer_copies_between_devices_of_one_plugin) {
  setenv("TYTO_PART_DEVICES", "2", 1);
  setenv("TYTO_PART_DELAY_US", "5000", 1);
  static char dirs[8192];
  tyto_context_options o;
  test_options(&o, 0);
  snprintf(dirs, sizeof dirs, "%s", TEST_PART_PLUGIN_DIR);
  o.plugin_path = dirs;
  o.devices = "part:0,part:1";
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  unsetenv("TYTO_PART_DEVICES");
  unsetenv("TYTO_PART_DELAY_US");
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {2048};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_tensor *h = tyto_add(tyto_mul(a, a), a); /* on part:0 */
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *y = tyto_tanh(tyto_sub(h, a)); /* on part:1 */
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *z = tyto_neg(y); /* back on part:0 */
  tyto_program *p = compile(ctx, g, 1, &z, 2, TYTO_PLACE_PINNED, 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, h), 0);
  ck_assert_int_eq(tyto_program_tensor_device(p, y), 1);
  size_t nc = tyto_program_copy_count(p);
  ck_assert_uint_ge(nc, 2);
  for (size_t i = 0; i < nc; i++) {
    tyto_program_copy c = {.struct_size = sizeof c};
    ck_assert_int_eq(tyto_program_copy_get(p, i, &c), TYTO_OK);
    ck_assert_str_eq(c.route, "peer");
  }
  float av[2048], zv[2048];
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 2048; i++)
      av[i] = (float)(i % 17) * 0.05f - 0.4f + 0.1f * (float)k;
    ck_assert_int_eq(tyto_program_set_input(p, a, av, sizeof av), TYTO_OK);
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(p, 0, zv, sizeof zv), TYTO_OK);
    for (int i = 0; i < 2048; i++) {
      float want = -tanhf((av[i] * av[i] + av[i]) - av[i]);
      ck_assert_msg(fabsf(zv[i] - want) <= 1e-6f,
                    "run %d z[%d] %.9g, want "
                    "%.9g",
                    k, i, (double)zv[i], (double)want);
    }
  }
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* A device that fails at run time: the run fails naming the device, the
 * program stays usable, and the next run is right. */
START_TEST(device_failing_at_run_time) {
  setenv("TYTO_PART_FAIL_LAUNCH", "2", 1);
  tyto_context *ctx = two_devices();
  unsetenv("TYTO_PART_FAIL_LAUNCH");
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {64};
  tyto_tensor *a = tyto_input(g, TYTO_F32, 1, shp, "a");
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *h = tyto_mul(a, a);
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *s = tyto_sum(h, 0, NULL, 0);
  tyto_program *p = compile(ctx, g, 1, &s, 2, TYTO_PLACE_PINNED, 0);
  float av[64], sv = 0;
  for (int i = 0; i < 64; i++)
    av[i] = 0.5f;
  ck_assert_int_eq(tyto_program_set_input(p, a, av, sizeof av), TYTO_OK);
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  /* The second launch on the test device fails. */
  ck_assert_int_ne(tyto_program_run(p), TYTO_OK);
  ck_assert_msg(strstr(tyto_errmsg(), "part:0") &&
                    strstr(tyto_errmsg(), "TYTO_PART_FAIL_LAUNCH"),
                "%s", tyto_errmsg());
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, &sv, sizeof sv), TYTO_OK);
  ck_assert_float_eq(sv, 16.0f);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* Eager evaluation of a value pinned to device 1 runs it there. */
START_TEST(eager_eval_of_pinned_values) {
  tyto_context *ctx = two_devices();
  tyto_eval_cache *c = NULL;
  ck_assert_int_eq(tyto_eval_cache_new(ctx, &c), TYTO_OK);
  tyto_graph *g = tyto_graph_new();
  double v[4] = {1, -2, 3, -4};
  float out[4];
  int64_t shp[1] = {4};
  tyto_tensor *k = tyto_constant(g, TYTO_F32, 1, shp, v);
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *y = tyto_relu(tyto_neg(k));
  tyto_graph_set_device_scope(g, -1);
  tyto_tensor *s = tyto_sum(y, 0, NULL, 0); /* on the CPU */
  ck_assert_msg(tyto_tensor_eval(c, y, out, sizeof out) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_float_eq(out[0], 0.0f);
  ck_assert_float_eq(out[1], 2.0f);
  ck_assert_float_eq(out[3], 4.0f);
  ck_assert_msg(tyto_tensor_eval(c, s, out, sizeof(float)) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_float_eq(out[0], 6.0f);
  tyto_eval_cache_free(c);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* A staged copy read only through a reshape planned in place (which
 * launches nothing) must still arrive before the reshape's readers run:
 * x -> relu on device 1, reshape and sum on the CPU, new x every run. */
START_TEST(copy_read_through_an_in_place_reshape) {
  tyto_context *ctx = two_devices();
  tyto_graph *g = tyto_graph_new();
  int64_t xs[3] = {4, 2, 2}, rs[2] = {4, 4};
  tyto_graph_set_device_scope(g, 1);
  tyto_tensor *x = tyto_input(g, TYTO_F32, 3, xs, "x");
  tyto_tensor *h = tyto_relu(x);
  tyto_graph_set_device_scope(g, 0);
  tyto_tensor *s = tyto_sum(tyto_reshape(h, 2, rs), 0, NULL, 0);
  tyto_graph_set_device_scope(g, -1);
  tyto_program *p = compile(ctx, g, 1, &s, 2, TYTO_PLACE_PINNED, 1);
  ck_assert_int_eq(tyto_program_tensor_device(p, h), 1);
  float xv[16], sv;
  for (int k = 1; k <= 3; k++) {
    for (int i = 0; i < 16; i++)
      xv[i] = (float)k;
    ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
    ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(p, 0, &sv, sizeof sv), TYTO_OK);
    ck_assert_msg(sv == 16.0f * (float)k, "run %d: sum %g, expected %g", k,
                  (double)sv, 16.0 * k);
  }
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("placement");
  TCase *tc = tcase_create("placement");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, every_op_class_matches_one_device);
  tcase_add_test(tc, fused_chain_refused_for_one_op_is_split);
  tcase_add_test(tc, fused_chain_refused_for_its_dtype);
  tcase_add_test(tc, consumer_waits_for_a_slow_producer);
  tcase_add_test(tc, bad_pins_and_device_lists);
  tcase_add_test(tc, split_training_step_follows_one_device);
  tcase_add_test(tc, dot_has_a_cluster_per_device);
  tcase_add_test(tc, peer_copies_between_devices_of_one_plugin);
  tcase_add_test(tc, device_failing_at_run_time);
  tcase_add_test(tc, eager_eval_of_pinned_values);
  tcase_add_test(tc, copy_read_through_an_in_place_reshape);
  suite_add_tcase(s, tc);
  return test_run(s);
}
