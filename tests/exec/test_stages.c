/* Exchanges in stages (tyto_program_options.exchange_stages), what
 * synchronised statistics need: a = x * w is sent after phase 0, its recv
 * ra (what a sum over three replicas gives: 3a) feeds b = ra * x, sent
 * after phase 1, whose recv rb updates w <- w - 0.5 rb in phase 2; c =
 * a + 1 needs no recv. Checked against values worked out by hand, on one
 * device and with the products on the partial test plugin: the phases'
 * order, which recvs each phase needs, which sends each has computed,
 * streamed sends arriving in their own stage's phase, a recv set from its
 * own send on the device stage by stage, and bad stages refused with a
 * message saying what was expected. */
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

typedef struct staged {
  tyto_graph *g;
  tyto_tensor *x, *w, *a, *ra, *b, *rb, *c;
  tyto_program *p;
} staged;

static const size_t stages[2] = {0, 1};

static void build(tyto_context *ctx, staged *s, int split,
                  const size_t *stage_of) {
  s->g = tyto_graph_new();
  int64_t shp[1] = {4};
  s->x = tyto_input(s->g, TYTO_F32, 1, shp, "x");
  s->w = tyto_parameter(s->g, TYTO_F32, 1, shp, "w");
  s->ra = tyto_input(s->g, TYTO_F32, 1, shp, "ra");
  s->rb = tyto_input(s->g, TYTO_F32, 1, shp, "rb");
  if (split)
    tyto_graph_set_device_scope(s->g, 1);
  s->a = tyto_mul(s->x, s->w);
  s->b = tyto_mul(s->ra, s->x);
  tyto_graph_set_device_scope(s->g, -1);
  s->c = tyto_add_scalar(s->a, 1.0);
  tyto_tensor *upd =
      tyto_sub(s->w, tyto_mul(s->rb, tyto_scalar(s->g, TYTO_F32, 0.5)));
  tyto_program_options po;
  tyto_program_options_init(&po);
  const size_t both[2] = {0, 1};
  if (split) {
    po.n_devices = 2;
    po.devices = both;
  }
  tyto_tensor *sends[2] = {s->a, s->b}, *recvs[2] = {s->ra, s->rb};
  po.n_updates = 1;
  po.update_params = &s->w;
  po.update_values = &upd;
  po.n_exchanges = 2;
  po.exchange_sends = sends;
  po.exchange_recvs = recvs;
  po.exchange_stages = stage_of;
  s->p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, s->g, 1, &s->c, &po, &s->p) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
}

static void destroy(staged *s) {
  tyto_program_free(s->p);
  tyto_graph_free(s->g);
}

static void expect_error(tyto_status st, const char *part) {
  ck_assert_int_eq(st, TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), part), "expected '%s' in: %s", part,
                tyto_errmsg());
}

static void check_w(const staged *s, const float *want) {
  float wv[4];
  ck_assert_int_eq(tyto_program_read_parameter(s->p, s->w, wv, sizeof wv),
                   TYTO_OK);
  for (int i = 0; i < 4; i++)
    ck_assert_float_eq(wv[i], want[i]);
}

/* Three steps by hand: each phase in turn, the host's sums between. */
static void three_phases(const staged *s) {
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, a[4], b[4], r[4], c[4];
  ck_assert_int_eq(tyto_program_phase_count(s->p), 3);
  ck_assert_int_eq(tyto_program_exchange_stage(s->p, 0), 0);
  ck_assert_int_eq(tyto_program_exchange_stage(s->p, 1), 1);
  ck_assert_int_eq(tyto_program_exchange_stage(s->p, 2), -1);
  ck_assert_int_eq(tyto_program_set_input(s->p, s->x, x, sizeof x), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(s->p, s->w, w, sizeof w),
                   TYTO_OK);
  expect_error(tyto_program_run_phase(s->p, 1), "needs phase 0 run first");
  expect_error(tyto_program_run_phase(s->p, 3), "expected 0 .. 2");
  for (int it = 0; it < 3; it++) {
    ck_assert_msg(tyto_program_run_phase(s->p, 0) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_send(s->p, 0, a, sizeof a), TYTO_OK);
    /* Send 1 is the last step's until phase 1 runs again. */
    expect_error(tyto_program_read_send(s->p, 1, b, sizeof b),
                 "has not run phase 1");
    if (it == 0) {
      expect_error(tyto_program_run_phase(s->p, 2), "needs phase 1 run first");
      expect_error(tyto_program_run_phase(s->p, 1), "receives an exchange");
    }
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(a[i], x[i] * w[i]);
      r[i] = 3.0f * a[i];
    }
    ck_assert_int_eq(tyto_program_set_input(s->p, s->ra, r, sizeof r), TYTO_OK);
    ck_assert_msg(tyto_program_run_phase(s->p, 1) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_send(s->p, 1, b, sizeof b), TYTO_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(b[i], r[i] * x[i]);
      r[i] = 2.0f * b[i];
    }
    if (it == 0)
      expect_error(tyto_program_run_phase(s->p, 2), "receives an exchange");
    ck_assert_int_eq(tyto_program_set_input(s->p, s->rb, r, sizeof r), TYTO_OK);
    ck_assert_msg(tyto_program_run_phase(s->p, 2) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_int_eq(tyto_program_read_output(s->p, 0, c, sizeof c), TYTO_OK);
    for (int i = 0; i < 4; i++) {
      ck_assert_float_eq(c[i], a[i] + 1.0f);
      w[i] -= 0.5f * r[i];
    }
    check_w(s, w);
    expect_error(tyto_program_run_phase(s->p, 1), "needs phase 0 run first");
  }
}

START_TEST(stages_on_one_device) {
  tyto_context *ctx = context("cpu");
  staged s;
  build(ctx, &s, 0, stages);
  three_phases(&s);
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(stages_across_two_devices) {
  tyto_context *ctx = context("cpu:0,part:0");
  staged s;
  build(ctx, &s, 1, stages);
  ck_assert_int_eq(tyto_program_tensor_device(s.p, s.a), 1);
  three_phases(&s);
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

typedef struct seen {
  int phase;
  int got[2], when[2];
} seen;

static void on_send(void *user, size_t i, const void *data, size_t bytes) {
  seen *s = user;
  ck_assert_uint_lt(i, 2);
  ck_assert_uint_eq(bytes, 4 * sizeof(float));
  (void)data;
  s->got[i]++;
  s->when[i] = s->phase;
}

/* Streamed sends come in their own stage's phase; a program exchanging
 * with itself sets each stage's recvs from its sends on the device. */
START_TEST(stages_streamed_and_on_the_device) {
  tyto_context *ctx = context("cpu");
  staged s;
  build(ctx, &s, 0, stages);
  size_t order[2];
  ck_assert_int_eq(tyto_program_send_order(s.p, order, 2), TYTO_OK);
  ck_assert_uint_eq(order[0], 0);
  ck_assert_uint_eq(order[1], 1);
  seen sn = {0};
  ck_assert_int_eq(tyto_program_stream_sends(s.p, on_send, &sn), TYTO_OK);
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2};
  ck_assert_int_eq(tyto_program_set_input(s.p, s.x, x, sizeof x), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(s.p, s.w, w, sizeof w),
                   TYTO_OK);
  expect_error(tyto_program_recv_sends(s.p), "phase 0 has not run");
  for (int it = 0; it < 2; it++) {
    for (int ph = 0; ph < 3; ph++) {
      sn.phase = ph;
      ck_assert_msg(tyto_program_run_phase(s.p, ph) == TYTO_OK, "%s",
                    tyto_errmsg());
      if (ph < 2)
        ck_assert_msg(tyto_program_recv_sends(s.p) == TYTO_OK, "%s",
                      tyto_errmsg());
      else
        expect_error(tyto_program_recv_sends(s.p), "phase 0 has not run");
    }
    /* ra = a, rb = ra x = x^2 w: w <- w - 0.5 x^2 w. */
    for (int i = 0; i < 4; i++)
      w[i] -= 0.5f * (x[i] * w[i]) * x[i];
    check_w(&s, w);
    ck_assert_int_eq(sn.got[0], it + 1);
    ck_assert_int_eq(sn.got[1], it + 1);
    ck_assert_int_eq(sn.when[0], 0);
    ck_assert_int_eq(sn.when[1], 1);
  }
  /* A whole run: every phase, the recvs as last set (by the device). */
  ck_assert_msg(tyto_program_run(s.p) == TYTO_OK, "%s", tyto_errmsg());
  destroy(&s);
  tyto_context_free(ctx);
}
END_TEST

/* An update fused with what a send needs (t = exp(x), the send sum(t),
 * the state s <- 0.5 s + t: one fused kernel writes t and the new s, as
 * batch norm's mean and running mean): the update cannot be written in
 * place by a kernel that phase 0 runs, so it is copied over s after the
 * exchange; before, the steps made a cycle and the compile failed. */
START_TEST(update_fused_with_a_send) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *st = tyto_parameter(g, TYTO_F32, 1, s4, "s");
  tyto_tensor *r = tyto_input(g, TYTO_F32, 1, (int64_t[]){1}, "r");
  tyto_tensor *t = tyto_exp(x);
  tyto_tensor *send = tyto_sum(t, 0, NULL, 1),
              *upd = tyto_add(tyto_mul_scalar(st, 0.5), t);
  tyto_tensor *out = tyto_add_scalar(r, 1.0);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_exchanges = 1;
  po.exchange_sends = &send;
  po.exchange_recvs = &r;
  po.n_updates = 1;
  po.update_params = &st;
  po.update_values = &upd;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &out, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  float xv[4] = {0, 1, -1, 0.5f}, sv[4] = {1, 2, 3, 4}, got[4], o[1];
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(p, st, sv, sizeof sv), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 0) == TYTO_OK, "%s", tyto_errmsg());
  /* Phase 0 left the state as it was. */
  ck_assert_int_eq(tyto_program_read_parameter(p, st, got, sizeof got),
                   TYTO_OK);
  for (int i = 0; i < 4; i++)
    ck_assert_float_eq(got[i], sv[i]);
  ck_assert_int_eq(tyto_program_read_send(p, 0, got, sizeof(float)), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, r, got, sizeof(float)), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 1) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, o, sizeof o), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_parameter(p, st, sv, sizeof sv), TYTO_OK);
  double sum = 0;
  for (int i = 0; i < 4; i++) {
    double e = exp(xv[i]);
    sum += e;
    ck_assert_double_eq_tol(sv[i], 0.5 * (i + 1) + e, 1e-5);
  }
  ck_assert_double_eq_tol(o[0], sum + 1, 1e-5);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* An optimiser's update, w <- 0.9 w - 0.1 r with r received: 0.9 w
 * needs no recv, yet no send needs it either, so it joins the update's
 * group after the exchange, which writes w in place (a kernel of its own
 * in phase 0 would be a launch and a buffer more per run, on every
 * data-parallel replica). The send x * w is its own kernel, in phase 0. */
START_TEST(update_after_the_exchange_fuses_whole) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *w = tyto_parameter(g, TYTO_F32, 1, s4, "w");
  tyto_tensor *r = tyto_input(g, TYTO_F32, 1, s4, "r");
  tyto_tensor *send = tyto_mul(x, w);
  tyto_tensor *upd = tyto_sub(tyto_mul_scalar(w, 0.9), tyto_mul_scalar(r, 0.1));
  tyto_tensor *out = tyto_sum(r, 0, NULL, 0);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_exchanges = 1;
  po.exchange_sends = &send;
  po.exchange_recvs = &r;
  po.n_updates = 1;
  po.update_params = &w;
  po.update_values = &upd;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &out, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  tyto_program_stats ps;
  ps.struct_size = sizeof ps;
  ck_assert_int_eq(tyto_program_stats_get(p, &ps), TYTO_OK);
  /* x * w; the update, fused; sum(r). */
  ck_assert_uint_eq(ps.kernels, 3);
  ck_assert_uint_eq(ps.updates_in_place, 1);
  float xv[4] = {1, 2, 3, 4}, wv[4] = {1, -1, 2, 0.5f}, sent[4], o[1];
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(p, w, wv, sizeof wv), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 0) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_send(p, 0, sent, sizeof sent), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, r, sent, sizeof sent), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 1) == TYTO_OK, "%s", tyto_errmsg());
  float got[4];
  ck_assert_int_eq(tyto_program_read_parameter(p, w, got, sizeof got), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 0, o, sizeof o), TYTO_OK);
  double sum = 0;
  for (int i = 0; i < 4; i++) {
    sum += (double)xv[i] * wv[i];
    ck_assert_double_eq_tol(got[i], 0.9 * wv[i] - 0.1 * xv[i] * wv[i], 1e-6);
  }
  ck_assert_double_eq_tol(o[0], sum, 1e-5);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

/* Fusion keeps the phases apart: t = exp(x) is sent at stage 0 (as 2t),
 * b = ra + t needs that stage's recv and is sent at stage 1. All three
 * are elementwise over one shape; one fused kernel holding them would
 * need its own output's exchange. */
START_TEST(fusion_keeps_the_phases_apart) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *ra = tyto_input(g, TYTO_F32, 1, s4, "ra");
  tyto_tensor *rb = tyto_input(g, TYTO_F32, 1, s4, "rb");
  tyto_tensor *t = tyto_exp(x);
  tyto_tensor *sends[2] = {tyto_mul_scalar(t, 2.0), tyto_add(ra, t)};
  tyto_tensor *recvs[2] = {ra, rb}, *out = tyto_neg(rb);
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_exchanges = 2;
  po.exchange_sends = sends;
  po.exchange_recvs = recvs;
  po.exchange_stages = stages;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &out, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  float xv[4] = {0, 1, -1, 2}, a[4], b[4], o[4];
  ck_assert_int_eq(tyto_program_set_input(p, x, xv, sizeof xv), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 0) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_send(p, 0, a, sizeof a), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, ra, a, sizeof a), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 1) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_send(p, 1, b, sizeof b), TYTO_OK);
  ck_assert_int_eq(tyto_program_set_input(p, rb, b, sizeof b), TYTO_OK);
  ck_assert_msg(tyto_program_run_phase(p, 2) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, o, sizeof o), TYTO_OK);
  for (int i = 0; i < 4; i++) {
    double e = exp(xv[i]);
    ck_assert_double_eq_tol(a[i], 2 * e, 1e-5 * e);
    ck_assert_double_eq_tol(b[i], 3 * e, 1e-5 * e);
    ck_assert_double_eq_tol(o[i], -3 * e, 1e-5 * e);
  }
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

START_TEST(bad_stages) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *r1 = tyto_input(g, TYTO_F32, 1, s4, "r1");
  tyto_tensor *r2 = tyto_input(g, TYTO_F32, 1, s4, "r2");
  tyto_tensor *y = tyto_neg(x), *z = tyto_exp(x);
  tyto_tensor *out = tyto_add(r1, r2);
  tyto_tensor *sends[2] = {y, z}, *recvs[2] = {r1, r2};
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_exchanges = 2;
  po.exchange_sends = sends;
  po.exchange_recvs = recvs;
  tyto_program *p = NULL;
  const size_t gap[2] = {0, 2}, high[2] = {0, 7}, late[2] = {1, 1};
  po.exchange_stages = gap;
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p),
               "exchange 1: stage 2, with 2 exchanges (expected stages 0 .. "
               "1");
  po.exchange_stages = high;
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p), "stage 7");
  po.exchange_stages = late;
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p),
               "stage 0 holds no exchange");
  /* A send needing a recv of its own stage or a later one. */
  const size_t ok_stages[2] = {0, 1};
  po.exchange_stages = ok_stages;
  sends[0] = tyto_neg(r2);
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p),
               "needs the recv of a stage-1 exchange, but is sent at stage 0");
  po.exchange_stages = NULL;
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p),
               "needs the recv of a stage-0 exchange, but is sent at stage 0");
  sends[0] = y;
  /* One recv for exchanges of two stages. */
  tyto_tensor *twice[2] = {r1, r1};
  po.exchange_recvs = twice;
  po.exchange_stages = ok_stages;
  expect_error(tyto_program_compile(ctx, g, 1, &out, &po, &p),
               "receives exchanges of stages 0 and 1");
  po.exchange_recvs = recvs;
  ck_assert_ptr_null(p);
  /* Both in stage 0, as without stages: two phases. */
  po.exchange_stages = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &out, &po, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  ck_assert_int_eq(tyto_program_phase_count(p), 2);
  ck_assert_int_eq(tyto_program_exchange_stage(p, 1), 0);
  ck_assert_int_eq(tyto_program_phase_count(NULL), 0);
  tyto_program_free(p);
  tyto_graph_free(g);
  tyto_context_free(ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("stages");
  TCase *tc = tcase_create("stages");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, stages_on_one_device);
  tcase_add_test(tc, stages_across_two_devices);
  tcase_add_test(tc, stages_streamed_and_on_the_device);
  tcase_add_test(tc, update_fused_with_a_send);
  tcase_add_test(tc, update_after_the_exchange_fuses_whole);
  tcase_add_test(tc, fusion_keeps_the_phases_apart);
  tcase_add_test(tc, bad_stages);
  suite_add_tcase(s, tc);
  return test_run(s);
}
