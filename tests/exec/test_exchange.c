/* Exchanges with the host in the middle of a run (what data-parallel
 * training does between backward and update): phase 0 computes the
 * sends, the host reads them and sets the recvs, phase 1 runs what needs
 * them. Checked against values worked out by hand, on one device and
 * across two (the CPU and the partial test plugin); the phases' order and
 * bad exchanges are errors that say what was expected. */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>

#ifndef TEST_PART_PLUGIN_DIR
#error "TEST_PART_PLUGIN_DIR must name the directory of tyto_plugin_part.so"
#endif

static tyto_context *context(const char *devices) {
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = devices;
  tyto_context *ctx;
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  return ctx;
}

/* g = x * w (sent), r received, w <- w - 0.5 r; the loss sum(g) is an
 * output. With split = 1 the product runs on device 1 (the test plugin)
 * and the update and the sum on the CPU. */
typedef struct step {
  tyto_graph *g;
  tyto_tensor *x, *w, *grad, *recv, *loss;
  tyto_program *p;
} step;

static void build(tyto_context *ctx, step *s, int split) {
  s->g = tyto_graph_new();
  int64_t shp[1] = {4};
  s->x = tyto_input(s->g, TYTO_F32, 1, shp, "x");
  s->w = tyto_parameter(s->g, TYTO_F32, 1, shp, "w");
  if (split)
    tyto_graph_set_device_scope(s->g, 1);
  s->grad = tyto_mul(s->x, s->w);
  tyto_graph_set_device_scope(s->g, -1);
  s->recv = tyto_input(s->g, TYTO_F32, 1, shp, "w.grad_in");
  s->loss = tyto_sum(s->grad, 0, NULL, 0);
  tyto_tensor *upd =
      tyto_sub(s->w, tyto_mul(s->recv, tyto_scalar(s->g, TYTO_F32, 0.5)));
  tyto_program_options po;
  tyto_program_options_init(&po);
  const size_t both[2] = {0, 1};
  if (split) {
    po.n_devices = 2;
    po.devices = both;
  }
  po.n_updates = 1;
  po.update_params = &s->w;
  po.update_values = &upd;
  po.n_exchanges = 1;
  po.exchange_sends = &s->grad;
  po.exchange_recvs = &s->recv;
  ck_assert_msg(tyto_program_compile(ctx, s->g, 1, &s->loss, &po, &s->p) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
}

static void two_phases(const step *s) {
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, g[4], r[4], loss;
  ck_assert_int_eq(tyto_program_set_input(s->p, s->x, x, sizeof x), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(s->p, s->w, w, sizeof w),
                   TYTO_OK);
  /* Phase 1 first, a send before phase 0: errors. */
  ck_assert_int_eq(tyto_program_run_phase(s->p, 1), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "needs phase 0 run first"), "%s",
                tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_send(s->p, 0, g, sizeof g),
                   TYTO_ERR_INVALID_ARGUMENT);
  for (int it = 0; it < 3; it++) {
    ck_assert_msg(tyto_program_run_phase(s->p, 0) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_send(s->p, 0, g, sizeof g), TYTO_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(g[i], x[i] * w[i]);
      r[i] = 2.0f * g[i]; /* what an all-reduce of two replicas gives */
    }
    if (it == 0) {
      /* The recv was never set: phase 1 says so. */
      ck_assert_int_eq(tyto_program_run_phase(s->p, 1),
                       TYTO_ERR_INVALID_ARGUMENT);
      ck_assert_msg(strstr(tyto_errmsg(), "receives an exchange"), "%s",
                    tyto_errmsg());
    }
    ck_assert_int_eq(tyto_program_set_input(s->p, s->recv, r, sizeof r),
                     TYTO_OK);
    ck_assert_msg(tyto_program_run_phase(s->p, 1) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(s->p, 0, &loss, sizeof loss),
                     TYTO_OK);
    ck_assert_float_eq(loss, g[0] + g[1] + g[2] + g[3]);
    for (int i = 0; i < 4; i++)
      w[i] -= 0.5f * r[i];
    float wv[4];
    ck_assert_int_eq(tyto_program_read_parameter(s->p, s->w, wv, sizeof wv),
                     TYTO_OK);
    for (int i = 0; i < 4; i++)
      ck_assert_float_eq(wv[i], w[i]);
    ck_assert_int_eq(tyto_program_run_phase(s->p, 1),
                     TYTO_ERR_INVALID_ARGUMENT); /* phase 0 again first */
  }
  /* A whole run uses the recv as last set. */
  ck_assert_msg(tyto_program_run(s->p) == TYTO_OK, "%s", tyto_errmsg());
  float wv[4];
  ck_assert_int_eq(tyto_program_read_parameter(s->p, s->w, wv, sizeof wv),
                   TYTO_OK);
  for (int i = 0; i < 4; i++)
    ck_assert_float_eq(wv[i], w[i] - 0.5f * r[i]);
}

static void destroy(step *s) {
  tyto_program_free(s->p);
  tyto_graph_free(s->g);
}

START_TEST(exchange_on_one_device) {
  tyto_context *ctx = context("cpu");
  step s;
  build(ctx, &s, 0);
  two_phases(&s);
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(exchange_across_two_devices) {
  tyto_context *ctx = context("cpu:0,part:0");
  step s;
  build(ctx, &s, 1);
  ck_assert_int_eq(tyto_program_tensor_device(s.p, s.grad), 1);
  ck_assert_int_eq(tyto_program_tensor_device(s.p, s.w), 1);
  two_phases(&s);
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(bad_exchanges) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4}, s3[1] = {3};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *y = tyto_neg(x);
  tyto_tensor *r3 = tyto_input(g, TYTO_F32, 1, s3, "r3");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, s4, "w");
  tyto_tensor *z = tyto_add(y, y);
  tyto_program_options po;
  tyto_program_options_init(&po);
  tyto_program *p = NULL;
  po.n_exchanges = 1;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &z, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "exchange_sends or exchange_recvs is "
                                      "NULL"),
                "%s", tyto_errmsg());
  po.exchange_sends = &y;
  po.exchange_recvs = &w; /* a parameter, not an input */
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &z, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "expected an input to receive into"),
                "%s", tyto_errmsg());
  po.exchange_recvs = &r3; /* of another shape */
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &z, &po, &p),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "dtype or shape differ"), "%s",
                tyto_errmsg());
  ck_assert_ptr_null(p);
  /* Without exchanges phase 0 is the whole run and there is no phase 1. */
  tyto_program_options_init(&po);
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &z, &po, &p), TYTO_OK);
  float xv[4] = {1, 2, 3, 4}, zv[4];
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  ck_assert_int_eq(tyto_program_run_phase(p, 0), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 0, zv, sizeof zv), TYTO_OK);
  ck_assert_float_eq(zv[3], -8.0f);
  ck_assert_int_eq(tyto_program_run_phase(p, 1), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(tyto_program_run_phase(p, 2), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(tyto_program_read_send(p, 0, zv, sizeof zv),
                   TYTO_ERR_INVALID_ARGUMENT);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("exchange");
  TCase *tc = tcase_create("exchange");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, exchange_on_one_device);
  tcase_add_test(tc, exchange_across_two_devices);
  tcase_add_test(tc, bad_exchanges);
  suite_add_tcase(s, tc);
  return test_run(s);
}
