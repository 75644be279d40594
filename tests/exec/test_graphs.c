/* Graphs: a one-device program on a plugin that records (the partial test
 * plugin, tests/plugins/partplug.c, keeps the launches between graph_begin
 * and graph_end and queues them again at graph_launch) runs eagerly once,
 * is recorded on its second run and replayed from then on. Every run's
 * results are checked against values computed here, so a replay that
 * dropped, repeated or reordered a launch, or used stale inputs, fails.
 * Runs are not recorded when the caller turns graphs off (option or
 * TYTO_GRAPHS=off), when the plugin cannot record, when a kernel reads
 * back at launch (the test plugin flags ABS so), or when recording fails;
 * each case says why in tyto_program_device_stats.graph_note and still
 * computes the same values. Two-phase programs record each phase. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <stdlib.h>

#ifndef TEST_PART_PLUGIN_DIR
#error "TEST_PART_PLUGIN_DIR must name the directory of tyto_plugin_part.so"
#endif

#define N 8

static tyto_context *part_context(const char *graphs_env) {
  if (graphs_env)
    setenv("TYTO_PART_GRAPHS", graphs_env, 1);
  else
    unsetenv("TYTO_PART_GRAPHS");
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = "part:0";
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  unsetenv("TYTO_PART_GRAPHS");
  return ctx;
}

/* y = (x * w + 1) * 0.5 (or abs(x * w) + 1 with `with_abs`); w <- w + x
 * every run. Fusion off, so each op is its own launch. */
typedef struct prog {
  tyto_graph *g;
  tyto_tensor *x, *w, *y;
  tyto_program *p;
} prog;

static tyto_status build(tyto_context *ctx, prog *s, int with_abs,
                         int no_graphs) {
  s->g = tyto_graph_new();
  int64_t shp[1] = {N};
  s->x = tyto_input(s->g, TYTO_F32, 1, shp, "x");
  s->w = tyto_parameter(s->g, TYTO_F32, 1, shp, "w");
  tyto_tensor *xw = tyto_mul(s->x, s->w);
  if (with_abs)
    s->y = tyto_add(tyto_abs(xw), tyto_scalar(s->g, TYTO_F32, 1.0));
  else
    s->y = tyto_mul(tyto_add(xw, tyto_scalar(s->g, TYTO_F32, 1.0)),
                    tyto_scalar(s->g, TYTO_F32, 0.5));
  tyto_tensor *upd = tyto_add(s->w, s->x);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.passes_off = TYTO_PASS_FUSE;
  po.n_updates = 1;
  po.update_params = &s->w;
  po.update_values = &upd;
  po.no_graphs = no_graphs;
  return tyto_program_compile(ctx, s->g, 1, &s->y, &po, &s->p);
}

/* Runs s `runs` times with new inputs, checking y and w after each. */
static void run_checked(prog *s, int with_abs, int runs) {
  float x[N], w[N], y[N];
  for (int i = 0; i < N; i++)
    w[i] = (float)(i - 3);
  ck_assert_int_eq(tyto_program_write_parameter(s->p, s->w, w, sizeof w),
                   TYTO_OK);
  for (int r = 0; r < runs; r++) {
    for (int i = 0; i < N; i++)
      x[i] = (float)((r * 7 + i * 3) % 11) - 5.0f;
    ck_assert_int_eq(tyto_program_set_input(s->p, s->x, x, sizeof x), TYTO_OK);
    ck_assert_msg(tyto_program_run(s->p) == TYTO_OK, "run %d: %s", r,
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(s->p, 0, y, sizeof y), TYTO_OK);
    for (int i = 0; i < N; i++) {
      /* Small whole numbers and halves: exact in f32. */
      float want =
          with_abs ? fabsf(x[i] * w[i]) + 1.0f : (x[i] * w[i] + 1.0f) * 0.5f;
      ck_assert_msg(y[i] == want, "run %d, y[%d] = %g, expected %g", r, i,
                    (double)y[i], (double)want);
      w[i] += x[i];
    }
    float wv[N];
    ck_assert_int_eq(tyto_program_read_parameter(s->p, s->w, wv, sizeof wv),
                     TYTO_OK);
    for (int i = 0; i < N; i++)
      ck_assert_msg(wv[i] == w[i], "run %d, w[%d] = %g, expected %g", r, i,
                    (double)wv[i], (double)w[i]);
  }
}

static tyto_program_device_stats dev_stats(const tyto_program *p) {
  tyto_program_device_stats ds;
  memset(&ds, 0, sizeof ds);
  ds.struct_size = sizeof ds;
  ck_assert_int_eq(tyto_program_device_stats_get(p, 0, &ds), TYTO_OK);
  return ds;
}

static void destroy(prog *s) {
  tyto_program_free(s->p);
  tyto_graph_free(s->g);
}

/* The device's info says whether its plugin records (tyto-info shows it). */
static int device_records(tyto_context *ctx) {
  const tyto_device_info *info =
      tyto_device_get_info(tyto_context_device(ctx, 0));
  ck_assert_ptr_nonnull(info);
  return (info->flags & TYTO_DEVICE_GRAPHS) != 0;
}

START_TEST(test_recorded_and_replayed) {
  tyto_context *ctx = part_context(NULL);
  ck_assert(device_records(ctx));
  prog s;
  ck_assert_msg(build(ctx, &s, 0, 0) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 0, 6);
  tyto_program_device_stats ds = dev_stats(s.p);
  /* Run 1 eager, runs 2 to 6 replayed (run 2 right after recording). */
  ck_assert_uint_eq(ds.graph_replays, 5);
  ck_assert_ptr_null(ds.graph_note);
  /* Parameters written between runs reach the replays. */
  run_checked(&s, 0, 2);
  ck_assert_uint_eq(dev_stats(s.p).graph_replays, 7);
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(test_turned_off) {
  tyto_context *ctx = part_context(NULL);
  prog s;
  ck_assert_msg(build(ctx, &s, 0, 1) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 0, 4);
  tyto_program_device_stats ds = dev_stats(s.p);
  ck_assert_uint_eq(ds.graph_replays, 0);
  ck_assert_ptr_nonnull(ds.graph_note);
  ck_assert_msg(strstr(ds.graph_note, "turned off"), "%s", ds.graph_note);
  destroy(&s);

  setenv("TYTO_GRAPHS", "off", 1);
  ck_assert_msg(build(ctx, &s, 0, 0) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 0, 4);
  ck_assert_uint_eq(dev_stats(s.p).graph_replays, 0);
  destroy(&s);

  setenv("TYTO_GRAPHS", "sometimes", 1);
  ck_assert_int_eq(build(ctx, &s, 0, 0), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "TYTO_GRAPHS=sometimes: expected on or "
                                      "off"),
                "%s", tyto_errmsg());
  tyto_graph_free(s.g);
  unsetenv("TYTO_GRAPHS");
  tyto_context_free(ctx);
}
END_TEST

START_TEST(test_not_recorded) {
  /* The plugin cannot record. */
  tyto_context *ctx = part_context("off");
  ck_assert(!device_records(ctx));
  prog s;
  ck_assert_msg(build(ctx, &s, 0, 0) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 0, 4);
  tyto_program_device_stats ds = dev_stats(s.p);
  ck_assert_uint_eq(ds.graph_replays, 0);
  ck_assert_msg(ds.graph_note && strstr(ds.graph_note, "cannot record"), "%s",
                ds.graph_note ? ds.graph_note : "(null)");
  destroy(&s);
  tyto_context_free(ctx);

  /* A kernel that reads back at launch (abs, in the test plugin). */
  ctx = part_context(NULL);
  ck_assert_msg(build(ctx, &s, 1, 0) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 1, 4);
  ds = dev_stats(s.p);
  ck_assert_uint_eq(ds.graph_replays, 0);
  ck_assert_msg(ds.graph_note && strstr(ds.graph_note, "abs reads device "
                                                       "memory back"),
                "%s", ds.graph_note ? ds.graph_note : "(null)");
  destroy(&s);
  tyto_context_free(ctx);

  /* Recording fails: nothing recorded ran, the run goes on eagerly. */
  ctx = part_context("fail");
  ck_assert_msg(build(ctx, &s, 0, 0) == TYTO_OK, "%s", tyto_errmsg());
  run_checked(&s, 0, 4);
  ds = dev_stats(s.p);
  ck_assert_uint_eq(ds.graph_replays, 0);
  ck_assert_msg(ds.graph_note && strstr(ds.graph_note, "recording failed") &&
                    strstr(ds.graph_note, "TYTO_PART_GRAPHS=fail"),
                "%s", ds.graph_note ? ds.graph_note : "(null)");
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

/* Two phases: g = x * w is sent, r received, w <- w - 0.5 r; y = g + 1.
 * Each phase is recorded on its own. */
START_TEST(test_phases) {
  tyto_context *ctx = part_context(NULL);
  tyto_graph *g = tyto_graph_new();
  int64_t shp[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, shp, "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, shp, "w");
  tyto_tensor *grad = tyto_mul(x, w);
  tyto_tensor *recv = tyto_input(g, TYTO_F32, 1, shp, "recv");
  tyto_tensor *y = tyto_add(grad, tyto_scalar(g, TYTO_F32, 1.0));
  tyto_tensor *upd = tyto_sub(w, tyto_mul(recv, tyto_scalar(g, TYTO_F32, 0.5)));
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = 1;
  po.update_params = &w;
  po.update_values = &upd;
  po.n_exchanges = 1;
  po.exchange_sends = &grad;
  po.exchange_recvs = &recv;
  tyto_program *p;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &y, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  float xv[4] = {1, 2, 3, 4}, wv[4] = {1, 1, 2, 2}, sv[4], r[4], yv[4];
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(p, w, wv, sizeof wv), TYTO_OK);
  for (int it = 0; it < 5; it++) {
    ck_assert_msg(tyto_program_run_phase(p, 0) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_send(p, 0, sv, sizeof sv), TYTO_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(sv[i], xv[i] * wv[i]);
      r[i] = 2.0f * sv[i];
    }
    ck_assert_int_eq(tyto_program_set_input(p, recv, r, sizeof r), TYTO_OK);
    ck_assert_msg(tyto_program_run_phase(p, 1) == TYTO_OK, "%s", tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(p, 0, yv, sizeof yv), TYTO_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(yv[i], sv[i] + 1.0f);
      wv[i] -= 0.5f * r[i];
    }
    float got[4];
    ck_assert_int_eq(tyto_program_read_parameter(p, w, got, sizeof got),
                     TYTO_OK);
    for (int i = 0; i < 4; i++)
      ck_assert_float_eq(got[i], wv[i]);
  }
  /* 5 runs of each phase: 4 replays each. */
  ck_assert_uint_eq(dev_stats(p).graph_replays, 8);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("graphs");
  TCase *tc = tcase_create("graphs");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_recorded_and_replayed);
  tcase_add_test(tc, test_turned_off);
  tcase_add_test(tc, test_not_recorded);
  tcase_add_test(tc, test_phases);
  suite_add_tcase(s, tc);
  return test_run(s);
}
