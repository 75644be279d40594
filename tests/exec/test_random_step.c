/*
 * Random ops with a step input (tyto_random_stepped): step 0 draws the
 * plain op's numbers, another step the stream with Philox counter words 2
 * and 3 set to it (sdk/docs/random.md, checked against philox.h directly),
 * a step parameter advanced by an update gives fresh numbers at every run,
 * derivatives through a random op are zero in its step, and bad steps are
 * refused.
 */
#include "common.h"

#include <math.h>

#include "../../plugins/cpu/philox.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})
enum { N = 4096 };

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

static tyto_program *compile(tyto_graph *g, tyto_tensor *y, size_t n_upd,
                             tyto_tensor **up, tyto_tensor **uv) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.n_updates = n_upd;
  o.update_params = up;
  o.update_values = uv;
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 1, &y, &o, &p) == TYTO_OK, "%s",
                tyto_errmsg());
  return p;
}

static void run_read(tyto_program *p, float *out) {
  ck_assert_msg(tyto_program_run(p) == TYTO_OK, "%s", tyto_errmsg());
  ck_assert_int_eq(tyto_program_read_output(p, 0, out, N * sizeof(float)),
                   TYTO_OK);
}

START_TEST(step_zero_is_the_plain_op_and_steps_follow_the_stream) {
  /* Each graph's first random node has stream offset 0. */
  tyto_graph *ga = tyto_graph_new(), *gb = tyto_graph_new();
  tyto_tensor *plain = tyto_random_uniform(ga, TYTO_F32, 1, S(N), -2, 3, 77);
  tyto_tensor *step = tyto_parameter(gb, TYTO_F32, 0, NULL, "step");
  tyto_tensor *r =
      tyto_random_stepped(TYTO_OP_RANDOM_UNIFORM, step, 1, S(N), -2, 3, 77);
  ck_assert_int_eq(tyto_graph_status(gb), TYTO_OK);
  ck_assert_int_eq(tyto_tensor_kind(r), TYTO_KIND_COMPUTED);
  tyto_program *pa = compile(ga, plain, 0, NULL, NULL);
  tyto_program *pb = compile(gb, r, 0, NULL, NULL);
  static float a[N], b[N];
  run_read(pa, a);
  run_read(pb, b);
  ck_assert_mem_eq(a, b, sizeof a);

  /* Step 5 (written as 5.75: truncated): element i is lane i % 4 of the
   * block (seed, n = i / 4, step 5). */
  float s = 5.75f;
  ck_assert_int_eq(tyto_program_write_parameter(pb, step, &s, sizeof s),
                   TYTO_OK);
  run_read(pb, b);
  int differ = 0;
  for (int i = 0; i < N; i++) {
    uint32_t w[4];
    tyto_philox_block_step(77, (uint64_t)i / 4, 5, w);
    float want = fmaf(5.0f, tyto_philox_u01_f32(w[i % 4]), -2.0f);
    ck_assert_msg(b[i] == want, "element %d: %.9g != %.9g", i, (double)b[i],
                  (double)want);
    differ += b[i] != a[i];
  }
  ck_assert_int_gt(differ, N - 8);
  tyto_program_free(pa);
  tyto_program_free(pb);
  tyto_graph_free(ga);
  tyto_graph_free(gb);
}
END_TEST

START_TEST(an_updated_step_draws_fresh_masks) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *step = tyto_parameter(g, TYTO_F32, 0, NULL, "step");
  tyto_tensor *keep =
      tyto_random_stepped(TYTO_OP_RANDOM_BERNOULLI, step, 1, S(N), 0.3, 0, 5);
  tyto_tensor *next = tyto_add_scalar(step, 1.0);
  tyto_program *p = compile(g, keep, 1, &step, &next);
  tyto_program *fresh = compile(g, keep, 0, NULL, NULL);
  static float m[3][N], f[N];
  for (int k = 0; k < 3; k++) {
    run_read(p, m[k]);
    /* A program without the update, its step written by hand, draws the
     * same mask. */
    float s = (float)k;
    ck_assert_int_eq(tyto_program_write_parameter(fresh, step, &s, sizeof s),
                     TYTO_OK);
    run_read(fresh, f);
    ck_assert_mem_eq(m[k], f, sizeof f);
    double ones = 0;
    for (int i = 0; i < N; i++) {
      ck_assert(m[k][i] == 0.0f || m[k][i] == 1.0f);
      ones += m[k][i];
    }
    /* Binomial(4096, 0.3): sigma = 29.3; 4 sigma. */
    ck_assert_msg(fabs(ones - 0.3 * N) < 4 * sqrt(N * 0.3 * 0.7),
                  "%g ones of %d", ones, N);
  }
  int same01 = 0, same12 = 0;
  for (int i = 0; i < N; i++) {
    same01 += m[0][i] == m[1][i];
    same12 += m[1][i] == m[2][i];
  }
  /* Independent masks agree on 0.3^2 + 0.7^2 = 58% of the elements. */
  ck_assert_int_lt(same01, (int)(0.62 * N));
  ck_assert_int_lt(same12, (int)(0.62 * N));
  float s;
  ck_assert_int_eq(tyto_program_read_parameter(p, step, &s, sizeof s), TYTO_OK);
  ck_assert(s == 3.0f);
  tyto_program_free(p);
  tyto_program_free(fresh);
  tyto_graph_free(g);
}
END_TEST

START_TEST(derivatives_through_a_stepped_op) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *step = tyto_parameter(g, TYTO_F64, 0, NULL, "step");
  tyto_tensor *x = tyto_parameter(g, TYTO_F64, 1, S(8), "x");
  tyto_tensor *r =
      tyto_random_stepped(TYTO_OP_RANDOM_NORMAL, step, 1, S(8), 0, 1, 3);
  tyto_tensor *y = tyto_sum(tyto_mul(r, x), 0, NULL, 0);
  tyto_tensor *gx = tyto_grad(y, x), *gs = tyto_grad(y, step);
  ck_assert_msg(tyto_graph_status(g) == TYTO_OK, "%s",
                tyto_graph_error_message(g));
  tyto_tensor *outs[3] = {gx, gs, r};
  tyto_program *p = NULL;
  ck_assert_msg(tyto_program_compile(ctx, g, 3, outs, NULL, &p) == TYTO_OK,
                "%s", tyto_errmsg());
  double s = 2, dx[8], ds, rv[8];
  ck_assert_int_eq(tyto_program_write_parameter(p, step, &s, sizeof s),
                   TYTO_OK);
  ck_assert_int_eq(tyto_program_run(p), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 0, dx, sizeof dx), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 1, &ds, sizeof ds), TYTO_OK);
  ck_assert_int_eq(tyto_program_read_output(p, 2, rv, sizeof rv), TYTO_OK);
  for (int i = 0; i < 8; i++)
    ck_assert(dx[i] == rv[i]);
  ck_assert(ds == 0.0);
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

START_TEST(bad_steps_are_refused) {
  tyto_graph *g = tyto_graph_new();
  tyto_tensor *v = tyto_parameter(g, TYTO_F32, 1, S(3), "v");
  tyto_random_stepped(TYTO_OP_RANDOM_UNIFORM, v, 1, S(4), 0, 1, 1);
  ck_assert_msg_contains(tyto_graph_error_message(g),
                         "random: step must be a rank-0 tensor, got [3]");
  tyto_graph_free(g);

  g = tyto_graph_new();
  tyto_tensor *s = tyto_parameter(g, TYTO_F32, 0, NULL, "s");
  tyto_random_stepped(TYTO_OP_EXP, s, 1, S(4), 0, 1, 1);
  ck_assert_msg_contains(tyto_graph_error_message(g),
                         "random: op exp is not a random op");
  tyto_graph_free(g);

  g = tyto_graph_new();
  s = tyto_parameter(g, TYTO_F32, 0, NULL, "s");
  tyto_random_stepped(TYTO_OP_RANDOM_BERNOULLI, s, 1, S(4), 1.5, 0, 1);
  ck_assert_msg_contains(tyto_graph_error_message(g),
                         "bernoulli: p 1.5 outside [0, 1]");
  tyto_graph_free(g);

  /* A negative step is refused when the kernel runs. */
  g = tyto_graph_new();
  s = tyto_parameter(g, TYTO_F32, 0, NULL, "s");
  tyto_tensor *r =
      tyto_random_stepped(TYTO_OP_RANDOM_UNIFORM, s, 1, S(N), 0, 1, 1);
  tyto_program *p = compile(g, r, 0, NULL, NULL);
  float neg = -1;
  ck_assert_int_eq(tyto_program_write_parameter(p, s, &neg, sizeof neg),
                   TYTO_OK);
  ck_assert_int_ne(tyto_program_run(p), TYTO_OK);
  ck_assert_msg_contains(tyto_errmsg(), "step -1 is not in [0, 2^53]");
  tyto_program_free(p);
  tyto_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("random_step");
  TCase *tc = tcase_create("random_step");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, step_zero_is_the_plain_op_and_steps_follow_the_stream);
  tcase_add_test(tc, an_updated_step_draws_fresh_masks);
  tcase_add_test(tc, derivatives_through_a_stepped_op);
  tcase_add_test(tc, bad_steps_are_refused);
  suite_add_tcase(s, tc);
  return test_run(s);
}
