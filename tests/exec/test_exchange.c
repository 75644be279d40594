/* Exchanges with the host in the middle of a run (what data-parallel
 * training does between backward and update): phase 0 computes the
 * sends, the host reads them and sets the recvs, phase 1 runs what needs
 * them. Checked against values worked out by hand, on one device and
 * across two (the CPU and the partial test plugin); the phases' order and
 * bad exchanges are errors that say what was expected. Streamed sends
 * (tyto_program_stream_sends) arrive once each per phase 0, in the order
 * the launches complete them, with the values tyto_program_read_send
 * gives, eagerly, across two devices and replayed as a graph. */
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

/* Three sends computed one after another: a = x * w, b = tanh(a) + x,
 * c = sum(b * b) (b * b with graphs); phase 1 only updates w from a's
 * recv. */
typedef struct chain {
  tyto_graph *g;
  tyto_tensor *x, *w, *send[3], *recv[3];
  tyto_program *p;
} chain;

static void build_chain(tyto_context *ctx, chain *c, int split, int graphs) {
  c->g = tyto_graph_new();
  int64_t shp[1] = {4};
  c->x = tyto_input(c->g, TYTO_F32, 1, shp, "x");
  c->w = tyto_parameter(c->g, TYTO_F32, 1, shp, "w");
  if (split)
    tyto_graph_set_device_scope(c->g, 1);
  /* Listed last-first, so that the order they are computed in is not
   * the order they are listed in. */
  c->send[2] = tyto_mul(c->x, c->w);
  c->send[1] = tyto_add(tyto_tanh(c->send[2]), c->x);
  tyto_graph_set_device_scope(c->g, -1);
  /* The test device alone (graphs) runs no reductions. */
  c->send[0] = tyto_mul(c->send[1], c->send[1]);
  if (!graphs)
    c->send[0] = tyto_sum(c->send[0], 0, NULL, 0);
  for (int i = 0; i < 3; i++)
    c->recv[i] = tyto_input(c->g, TYTO_F32, tyto_tensor_rank(c->send[i]),
                            tyto_tensor_shape(c->send[i]), NULL);
  tyto_tensor *upd = tyto_sub(c->w, c->recv[2]);
  tyto_program_options po;
  tyto_program_options_init(&po);
  const size_t both[2] = {0, 1};
  if (split) {
    po.n_devices = 2;
    po.devices = both;
  }
  po.no_graphs = !graphs;
  po.n_updates = 1;
  po.update_params = &c->w;
  po.update_values = &upd;
  po.n_exchanges = 3;
  po.exchange_sends = c->send;
  po.exchange_recvs = c->recv;
  ck_assert_msg(tyto_program_compile(ctx, c->g, 1, &c->send[0], &po, &c->p) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
}

/* What the streamed sends' function saw in one phase 0. */
typedef struct seen {
  size_t n, order[8];
  float v[8][4];
  size_t bytes[8];
} seen;

static void on_send(void *user, size_t i, const void *data, size_t bytes) {
  seen *s = user;
  ck_assert_uint_lt(s->n, 8);
  ck_assert_uint_le(bytes, sizeof s->v[0]);
  s->order[s->n] = i;
  s->bytes[s->n] = bytes;
  memcpy(s->v[s->n++], data, bytes);
}

static void streamed(tyto_context *ctx, int split, int graphs) {
  chain c;
  build_chain(ctx, &c, split, graphs);
  seen s;
  size_t order[3];
  ck_assert_int_eq(tyto_program_send_order(c.p, order, 3), TYTO_OK);
  /* c, which needs a and b, comes last, whatever the list says (a and b
   * may be computed by one fused launch, and then come in list order). */
  if (!graphs) {
    ck_assert_uint_eq(order[2], 0);
    ck_assert_msg(order[0] + order[1] == 3, "order %zu %zu %zu", order[0],
                  order[1], order[2]);
  }
  ck_assert_int_eq(tyto_program_stream_sends(c.p, on_send, &s), TYTO_OK);
  float x[4] = {1, -2, 0.5f, 3}, w[4] = {0.5f, 0.25f, -1, 2};
  ck_assert_int_eq(tyto_program_set_input(c.p, c.x, x, sizeof x), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(c.p, c.w, w, sizeof w),
                   TYTO_OK);
  for (int run = 0; run < 4; run++) {
    memset(&s, 0, sizeof s);
    ck_assert_msg(tyto_program_run_phase(c.p, 0) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_uint_eq(s.n, 3);
    float want_a[4], want_b[4], want_c[4], got[4];
    for (int j = 0; j < 4; j++) {
      want_a[j] = x[j] * w[j];
      want_b[j] = tanhf(want_a[j]) + x[j];
      want_c[j] = want_b[j] * want_b[j];
    }
    if (!graphs)
      want_c[0] += want_c[1] + want_c[2] + want_c[3];
    for (size_t k = 0; k < 3; k++) {
      ck_assert_uint_eq(s.order[k], order[k]);
      size_t i = s.order[k], n = i == 0 && !graphs ? 1 : 4;
      ck_assert_uint_eq(s.bytes[k], n * sizeof(float));
      ck_assert_int_eq(tyto_program_read_send(c.p, i, got, n * sizeof *got),
                       TYTO_OK);
      ck_assert_mem_eq(got, s.v[k], n * sizeof *got);
      for (size_t j = 0; j < n; j++) {
        float want = i == 2 ? want_a[j] : i == 1 ? want_b[j] : want_c[j];
        ck_assert_msg(fabsf(s.v[k][j] - want) <= 1e-5f * (1 + fabsf(want)),
                      "run %d send %zu [%zu]: %g, want %g", run, i, j,
                      (double)s.v[k][j], (double)want);
      }
    }
    /* Only a's recv is read (by the update). */
    float r[4];
    ck_assert_int_eq(tyto_program_read_send(c.p, 2, r, sizeof r), TYTO_OK);
    ck_assert_int_eq(tyto_program_set_input(c.p, c.recv[2], r, sizeof r),
                     TYTO_OK);
    ck_assert_msg(tyto_program_run_phase(c.p, 1) == TYTO_OK, "%s",
                  tyto_errmsg());
    for (int j = 0; j < 4; j++)
      w[j] -= r[j];
  }
  if (graphs) {
    tyto_program_device_stats ds;
    ds.struct_size = sizeof ds;
    ck_assert_int_eq(tyto_program_device_stats_get(c.p, 0, &ds), TYTO_OK);
    ck_assert_msg(ds.graph_replays >= 2, "%llu replays: %s",
                  (unsigned long long)ds.graph_replays, ds.graph_note);
  }
  /* Off again: nothing more is delivered. */
  ck_assert_int_eq(tyto_program_stream_sends(c.p, NULL, NULL), TYTO_OK);
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(tyto_program_run_phase(c.p, 0), TYTO_OK);
  ck_assert_uint_eq(s.n, 0);
  tyto_program_free(c.p);
  tyto_graph_free(c.g);
}

START_TEST(streamed_sends) {
  tyto_context *ctx = context("cpu:0,part:0");
  streamed(ctx, 0, 0); /* the CPU alone, its streams asynchronous */
  streamed(ctx, 1, 0); /* two sends on the test device, one on the CPU */
  tyto_context_free(ctx);
  /* The test device alone records its runs: the sends come after the
   * replayed graph. */
  setenv("TYTO_PART_GRAPHS", "on", 1);
  tyto_context_options o;
  test_options(&o, 0);
  o.plugin_path = test_plugin_dirs_and(TEST_PART_PLUGIN_DIR);
  o.devices = "part:0";
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
  unsetenv("TYTO_PART_GRAPHS");
  streamed(ctx, 0, 1);
  tyto_context_free(ctx);
}
END_TEST

/* tyto_program_recv_sends: each recv set from its own send on the device
 * (the step exchanging with itself): w <- w - 0.5 x w, three times, on one
 * device and with the send on the test device and the recv on the CPU. */
static void recv_own(const step *s) {
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, got[4];
  ck_assert_int_eq(tyto_program_set_input(s->p, s->x, x, sizeof x), TYTO_OK);
  ck_assert_int_eq(tyto_program_write_parameter(s->p, s->w, w, sizeof w),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_recv_sends(s->p), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "phase 0 has not run"), "%s",
                tyto_errmsg());
  for (int it = 0; it < 3; it++) {
    ck_assert_msg(tyto_program_run_phase(s->p, 0) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_msg(tyto_program_recv_sends(s->p) == TYTO_OK, "%s",
                  tyto_errmsg());
    ck_assert_msg(tyto_program_run_phase(s->p, 1) == TYTO_OK, "%s",
                  tyto_errmsg());
    for (int j = 0; j < 4; j++)
      w[j] -= 0.5f * x[j] * w[j];
    ck_assert_int_eq(tyto_program_read_parameter(s->p, s->w, got, sizeof got),
                     TYTO_OK);
    for (int j = 0; j < 4; j++)
      ck_assert_float_eq(got[j], w[j]);
  }
}

START_TEST(recv_sends_on_the_device) {
  tyto_context *ctx = context("cpu:0,part:0");
  for (int split = 0; split < 2; split++) {
    step s;
    build(ctx, &s, split);
    recv_own(&s);
    destroy(&s);
  }
  tyto_context_free(ctx);
}
END_TEST

START_TEST(bad_streamed_sends) {
  tyto_context *ctx = context("cpu");
  tyto_graph *g = tyto_graph_new();
  int64_t s4[1] = {4};
  tyto_tensor *x = tyto_input(g, TYTO_F32, 1, s4, "x");
  tyto_tensor *y = tyto_neg(x);
  tyto_program *p = NULL;
  ck_assert_int_eq(tyto_program_compile(ctx, g, 1, &y, NULL, &p), TYTO_OK);
  seen s;
  ck_assert_int_eq(tyto_program_stream_sends(p, on_send, &s),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "has no exchanges"), "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_stream_sends(p, NULL, NULL), TYTO_OK);
  ck_assert_int_eq(tyto_program_stream_sends(NULL, on_send, &s),
                   TYTO_ERR_INVALID_ARGUMENT);
  size_t order[1];
  ck_assert_int_eq(tyto_program_send_order(p, order, 1),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "has 0 sends"), "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_send_order(p, NULL, 0), TYTO_OK);
  ck_assert_int_eq(tyto_program_recv_sends(p), TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg(strstr(tyto_errmsg(), "has no exchanges"), "%s", tyto_errmsg());
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
  tcase_add_test(tc, streamed_sends);
  tcase_add_test(tc, recv_sends_on_the_device);
  tcase_add_test(tc, bad_streamed_sends);
  suite_add_tcase(s, tc);
  return test_run(s);
}
