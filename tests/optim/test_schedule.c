/* Learning-rate schedules with warm-up, gradient clipping and gradient
 * accumulation in compiled float64 programs, run by run against the
 * float64 reference of optim_test.h (tol 1e-12), the schedules also
 * against torch.optim.lr_scheduler constants (1e-15 relative; see
 * tests/optim/torch_reference.py). */
#include "optim_test.h"

/* ---------------------------------------------------------------------- */
/* Schedules                                                               */

#define SCHED_RUNS 8

typedef struct sched_case {
  const char *name;
  tyto_schedule_kind kind;
  int64_t step_size;
  double gamma;
  int64_t total_steps;
  double min_lr;
  int64_t warmup;
  int n_want;
  double want[SCHED_RUNS]; /* lr of updates 1..n_want */
} sched_case;

static const sched_case sched_cases[] = {
    /* Warm-up alone: min(1, k/3) 0.1. */
    {"constant, warm-up 3",
     TYTO_SCHEDULE_CONSTANT,
     0,
     0.1,
     0,
     0,
     3,
     5,
     {0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1}},
    /* torch StepLR(step_size=2, gamma=0.5) */
    {"step",
     TYTO_SCHEDULE_STEP,
     2,
     0.5,
     0,
     0,
     0,
     6,
     {0.10000000000000001, 0.10000000000000001, 0.050000000000000003,
      0.050000000000000003, 0.025000000000000001, 0.025000000000000001}},
    {"step, warm-up 4", TYTO_SCHEDULE_STEP, 3, 0.5, 0, 0, 4, 0, {0}},
    /* torch ExponentialLR(gamma=0.9) */
    {"exponential",
     TYTO_SCHEDULE_EXPONENTIAL,
     0,
     0.9,
     0,
     0,
     0,
     6,
     {0.10000000000000001, 0.090000000000000011, 0.081000000000000016,
      0.07290000000000002, 0.065610000000000016, 0.059049000000000018}},
    {"exponential, warm-up 2",
     TYTO_SCHEDULE_EXPONENTIAL,
     0,
     0.8,
     0,
     0,
     2,
     0,
     {0}},
    /* torch CosineAnnealingLR(T_max=4, eta_min=0.01), then held at min_lr */
    {"cosine",
     TYTO_SCHEDULE_COSINE,
     0,
     0.1,
     4,
     0.01,
     0,
     8,
     {0.10000000000000001, 0.086819805153394644, 0.055000000000000007,
      0.023180194846605363, 0.01, 0.01, 0.01, 0.01}},
    {"cosine, warm-up 2", TYTO_SCHEDULE_COSINE, 0, 0.1, 5, 0, 2, 0, {0}},
};

START_TEST(test_schedule) {
  const sched_case *sc = &sched_cases[_i];
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_SGD);
  o.lr = 0.1;
  o.schedule = sc->kind;
  o.step_size = sc->step_size;
  o.gamma = sc->gamma;
  o.total_steps = sc->total_steps;
  o.min_lr = sc->min_lr;
  o.warmup_steps = sc->warmup;
  problem pb;
  ref r;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  ref_init(&r);
  double lo = INFINITY, hi = 0;
  for (int run = 0; run < SCHED_RUNS; run++) {
    /* lr and the update it makes, against the reference. */
    compare_runs(&pb, &o, &r, run, 1, 1e-12);
    double lr = problem_output(&pb, 0);
    if (run < sc->n_want)
      ck_assert_msg(fabs(lr - sc->want[run]) <= 1e-15 * sc->want[run],
                    "%s: update %d: lr %.17g, want %.17g", sc->name, run + 1,
                    lr, sc->want[run]);
    lo = fmin(lo, lr);
    hi = fmax(hi, lr);
  }
  /* Each of these schedules changes the lr by a fair amount. */
  ck_assert_msg(hi > 1.5 * lo, "%s: lr from %g to %g only", sc->name, lo, hi);
  problem_free(&pb);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Clipping                                                                */

/* SGD with lr 0.5 (the update shows the clipped gradient). */
typedef struct clip_case {
  const char *name;
  double momentum, weight_decay;
  double clip_value, clip_norm;
  int clips; /* whether the first update differs from an unclipped one */
} clip_case;

static const clip_case clip_cases[] = {
    {"by value", 0.5, 0, 0.15, 0, 1},
    {"by norm", 0.5, 0, 0, 0.5, 1},
    {"by norm, above the norm", 0.5, 0, 0, 100, 0},
    {"by value then norm", 0.5, 0, 0.5, 0.6, 1},
    {"by value then norm, weight decay", 0, 0.1, 1.0, 0.8, 1},
};

START_TEST(test_clip) {
  const clip_case *cc = &clip_cases[_i];
  tyto_optim_options o, plain;
  tyto_optim_options_init(&o, TYTO_OPTIM_SGD);
  o.lr = 0.5;
  o.momentum = cc->momentum;
  o.weight_decay = cc->weight_decay;
  plain = o;
  o.clip_value = cc->clip_value;
  o.clip_norm = cc->clip_norm;
  problem pb;
  ref r, unclipped;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  ref_init(&r);
  ref_init(&unclipped);
  compare_runs(&pb, &o, &r, 0, 1, 1e-12);
  ref_run(&plain, &unclipped, 0);
  /* grad_norm is the norm before clipping: sqrt(sum g^2) of run 0's
   * gradient, computed here once more from the problem's constants. */
  double sq = 0;
  for (int i = 0; i < NP; i++) {
    double g = A[i] * (P0[i] - C[i]) + xval(0, i);
    sq += g * g;
  }
  ck_assert_msg(fabs(problem_output(&pb, 1) - sqrt(sq)) <= 1e-12,
                "grad_norm %.17g, want %.17g", problem_output(&pb, 1),
                sqrt(sq));
  double d = 0;
  for (int i = 0; i < NP; i++)
    d = fmax(d, fabs(r.p[i] - unclipped.p[i]));
  ck_assert_msg(cc->clips ? d > 1e-3 : d == 0,
                "%s: clipping changed the update by %g", cc->name, d);
  compare_runs(&pb, &o, &r, 1, 2, 1e-12);
  problem_free(&pb);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Accumulation                                                            */

/* K = 3 over 6 runs: the parameters stay exactly as they were on the runs
 * that do not apply, and the two updates equal those of K = 1 fed the
 * mean of each group's inputs (the gradient is linear in the input and
 * the parameters do not change within a group). */
START_TEST(test_accumulate) {
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAM);
  o.lr = 0.01;
  o.accumulate = 3;
  problem pb;
  ref r;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  ref_init(&r);
  double prev[NP];
  memcpy(prev, P0, sizeof prev);
  for (int run = 0; run < 6; run++) {
    compare_runs(&pb, &o, &r, run, 1, 1e-12);
    double p[NP];
    problem_read(&pb, "", p);
    int applies = run % 3 == 2;
    ck_assert_msg(applies ? memcmp(p, prev, sizeof p) != 0
                          : memcmp(p, prev, sizeof p) == 0,
                  "run %d: parameters %s", run,
                  applies ? "unchanged on an update" : "changed between");
    memcpy(prev, p, sizeof p);
  }
  double acc_p[NP], acc_m[NP], acc_v[NP];
  problem_read(&pb, "", acc_p);
  problem_read(&pb, ".m", acc_m);
  problem_read(&pb, ".v", acc_v);
  problem_free(&pb);

  o.accumulate = 1;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  for (int group = 0; group < 2; group++) {
    double x[NP];
    for (int i = 0; i < NP; i++)
      x[i] = (xval(3 * group, i) + xval(3 * group + 1, i) +
              xval(3 * group + 2, i)) /
             3;
    problem_run_x(&pb, x);
  }
  double p[NP], m[NP], v[NP];
  problem_read(&pb, "", p);
  problem_read(&pb, ".m", m);
  problem_read(&pb, ".v", v);
  expect_near("parameters, K = 3 against K = 1 on the mean", 5, acc_p, p, NP,
              1e-12);
  expect_near("first moment, K = 3 against K = 1", 5, acc_m, m, NP, 1e-12);
  expect_near("second moment, K = 3 against K = 1", 5, acc_v, v, NP, 1e-12);
  ck_assert_double_eq(problem_output(&pb, 2), 2);
  problem_free(&pb);
}
END_TEST

/* Accumulation with everything else: the schedule and warm-up follow the
 * updates, not the runs; clipping sees the mean gradient. */
START_TEST(test_accumulate_combined) {
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_SGD);
  o.lr = 0.2;
  o.momentum = 0.9;
  o.nesterov = 1;
  o.weight_decay = 0.01;
  o.schedule = TYTO_SCHEDULE_STEP;
  o.step_size = 2;
  o.gamma = 0.5;
  o.warmup_steps = 2;
  o.clip_norm = 1.0;
  o.accumulate = 2;
  problem pb;
  ref r;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  ref_init(&r);
  compare_runs(&pb, &o, &r, 0, 8, 1e-12);
  ck_assert_double_eq(r.step, 4);
  problem_free(&pb);
}
END_TEST

int main(void) {
  Suite *s = suite_create("optim_schedule");
  TCase *tc = tcase_create("schedule");
  tcase_add_checked_fixture(tc, optim_setup, optim_teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_schedule, 0,
                      (int)(sizeof sched_cases / sizeof sched_cases[0]));
  tcase_add_loop_test(tc, test_clip, 0,
                      (int)(sizeof clip_cases / sizeof clip_cases[0]));
  tcase_add_test(tc, test_accumulate);
  tcase_add_test(tc, test_accumulate_combined);
  suite_add_tcase(s, tc);
  return test_run(s);
}
