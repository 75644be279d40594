/* The optimisers' update rules in compiled float64 programs, run by run
 * against the float64 reference of optim_test.h (tol 1e-12) and after
 * three updates against constants from torch.optim (1e-12; see
 * tests/optim/torch_reference.py); options, names, the state list and the
 * error messages. */
#include "optim_test.h"

#include <stddef.h>

/* ---------------------------------------------------------------------- */
/* Update rules                                                            */

typedef struct rule_case {
  const char *name;
  tyto_optim_kind kind;
  double lr, momentum, weight_decay, alpha;
  int nesterov;
  double clip_value, clip_norm;
  int has_torch;
  double torch[NP]; /* p after 3 updates, from torch_reference.py */
} rule_case;

static const rule_case rule_cases[] = {
    {"sgd",
     TYTO_OPTIM_SGD,
     0.1,
     0,
     0,
     0,
     0,
     0,
     0,
     1,
     {0.41489999999999999, -0.35599999999999993, 1.6772249999999997,
      1.1587000000000001, -0.16053125000000001}},
    {"sgd momentum",
     TYTO_OPTIM_SGD,
     0.1,
     0.9,
     0,
     0,
     0,
     0,
     0,
     1,
     {0.37259999999999999, 0.23350000000000012, 1.3820249999999998,
      0.83379999999999999, -0.09078124999999998}},
    {"sgd nesterov weight decay",
     TYTO_OPTIM_SGD,
     0.1,
     0.9,
     0.01,
     0,
     1,
     0,
     0,
     1,
     {0.30659246308049998, 0.46671291720900004, 1.144438586992,
      0.79867438958150005, -0.043823326772749999}},
    {"sgd weight decay", TYTO_OPTIM_SGD, 0.1, 0, 0.05, 0, 0, 0, 0, 0, {0}},
    {"sgd momentum weight decay",
     TYTO_OPTIM_SGD,
     0.1,
     0.5,
     0.05,
     0,
     0,
     0,
     0,
     0,
     {0}},
    {"adagrad", TYTO_OPTIM_ADAGRAD, 0.1, 0, 0, 0, 0, 0, 0, 0, {0}},
    {"adagrad weight decay",
     TYTO_OPTIM_ADAGRAD,
     0.1,
     0,
     0.01,
     0,
     0,
     0,
     0,
     1,
     {0.23032656462595869, -0.77491134817879515, 1.7768387483863495,
      1.2965106464988261, -0.078910888005104901}},
    {"rmsprop weight decay",
     TYTO_OPTIM_RMSPROP,
     0.01,
     0,
     0.01,
     0.9,
     0,
     0,
     0,
     1,
     {0.41182175380772151, -0.92593106646444479, 1.9271748319576112,
      1.4297351519812573, -0.18379441163071741}},
    {"adam", TYTO_OPTIM_ADAM, 0.01, 0, 0, 0, 0, 0, 0, 0, {0}},
    {"adam weight decay",
     TYTO_OPTIM_ADAM,
     0.01,
     0,
     0.01,
     0,
     0,
     0,
     0,
     1,
     {0.47149696041797245, -0.96999019723330004, 1.9700859105694934,
      1.4701825934768946, -0.22144356839649346}},
    {"adamw",
     TYTO_OPTIM_ADAMW,
     0.01,
     0,
     0.1,
     0,
     0,
     0,
     0,
     1,
     {0.4700909426226228, -0.96702371181306723, 1.9641258642112422,
      1.4657254590629765, -0.22074856476339383}},
    {"adam clipped",
     TYTO_OPTIM_ADAM,
     0.01,
     0,
     0,
     0,
     0,
     0.5,
     1.0,
     1,
     {0.47147217031510108, -0.9700362898025966, 1.9700362898025965,
      1.4700362898025965, -0.22143550687864619}},
};

START_TEST(test_rule) {
  const rule_case *rc = &rule_cases[_i];
  tyto_optim_options o;
  tyto_optim_options_init(&o, rc->kind);
  o.lr = rc->lr;
  o.momentum = rc->momentum;
  o.nesterov = rc->nesterov;
  o.weight_decay = rc->weight_decay;
  if (rc->alpha)
    o.alpha = rc->alpha;
  o.clip_value = rc->clip_value;
  o.clip_norm = rc->clip_norm;
  problem pb;
  ref r;
  problem_build(&pb, TYTO_F64);
  problem_compile(&pb, &o);
  ref_init(&r);
  compare_runs(&pb, &o, &r, 0, 3, 1e-12);
  /* Each update must have moved every parameter (a rule that did nothing
   * would match a reference that did nothing). */
  for (int i = 0; i < NP; i++)
    ck_assert_msg(fabs(r.p[i] - P0[i]) > 1e-4, "%s: p[%d] barely moved",
                  rc->name, i);
  if (rc->has_torch) {
    double got[NP];
    problem_read(&pb, "", got);
    expect_near(rc->name, 3, got, rc->torch, NP, 1e-12);
  }
  problem_free(&pb);
}
END_TEST

/* The same rules in float32, against the float64 reference. */
START_TEST(test_rule_f32) {
  static const tyto_optim_kind kinds[] = {TYTO_OPTIM_SGD, TYTO_OPTIM_ADAMW};
  tyto_optim_options o;
  tyto_optim_options_init(&o, kinds[_i]);
  o.momentum = kinds[_i] == TYTO_OPTIM_SGD ? 0.9 : 0.0;
  problem pb;
  ref r;
  problem_build(&pb, TYTO_F32);
  problem_compile(&pb, &o);
  ref_init(&r);
  compare_runs(&pb, &o, &r, 0, 3, 1e-5);
  problem_free(&pb);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Options, names, state                                                   */

START_TEST(test_defaults) {
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_SGD);
  ck_assert_uint_eq(o.struct_size, sizeof o);
  ck_assert(o.lr == 0.01 && o.momentum == 0 && !o.nesterov &&
            o.weight_decay == 0 && o.eps == 1e-8);
  ck_assert(o.schedule == TYTO_SCHEDULE_CONSTANT && o.gamma == 0.1 &&
            o.warmup_steps == 0 && o.clip_value == 0 && o.clip_norm == 0 &&
            o.accumulate == 1);
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAGRAD);
  ck_assert(o.lr == 0.01 && o.eps == 1e-10);
  tyto_optim_options_init(&o, TYTO_OPTIM_RMSPROP);
  ck_assert(o.lr == 0.01 && o.alpha == 0.99 && o.eps == 1e-8);
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAM);
  ck_assert(o.lr == 0.001 && o.beta1 == 0.9 && o.beta2 == 0.999 &&
            o.eps == 1e-8 && o.weight_decay == 0);
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAMW);
  ck_assert(o.lr == 0.001 && o.weight_decay == 0.01);
}
END_TEST

START_TEST(test_names) {
  static const char *kinds[] = {"sgd", "adagrad", "rmsprop", "adam", "adamw"};
  static const char *scheds[] = {"constant", "step", "exponential", "cosine"};
  for (int i = 0; i < 5; i++) {
    ck_assert_str_eq(tyto_optim_kind_name((tyto_optim_kind)i), kinds[i]);
    ck_assert_int_eq(tyto_optim_kind_from_name(kinds[i]), i);
  }
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(tyto_schedule_name((tyto_schedule_kind)i), scheds[i]);
    ck_assert_int_eq(tyto_schedule_from_name(scheds[i]), i);
  }
  ck_assert_str_eq(tyto_optim_kind_name((tyto_optim_kind)5), "?");
  ck_assert_str_eq(tyto_schedule_name((tyto_schedule_kind)-1), "?");
  ck_assert_int_eq(tyto_optim_kind_from_name("lbfgs"), -1);
  ck_assert_int_eq(tyto_optim_kind_from_name(NULL), -1);
  ck_assert_int_eq(tyto_schedule_from_name("linear"), -1);
}
END_TEST

/* The checkpoint-relevant state list: names, order, shapes, kinds. */
START_TEST(test_state_names) {
  problem pb;
  problem_build(&pb, TYTO_F64);
  size_t before = tyto_graph_size(pb.g);
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAM);
  o.accumulate = 2;
  ck_assert_msg(tyto_optim_build(&o, 3, pb.params, pb.grads, &pb.opt) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  static const char *want[] = {"optim.step", "optim.micro", "w.acc", "u.acc",
                               "w.m",        "w.v",         "u.m",   "u.v"};
  static const int64_t numel[] = {1, 1, 3, 2, 3, 3, 2, 2};
  ck_assert_uint_eq(tyto_optim_state_count(pb.opt), 8);
  for (size_t i = 0; i < 8; i++) {
    tyto_tensor *s = tyto_optim_state(pb.opt, i);
    ck_assert_str_eq(tyto_tensor_name(s), want[i]);
    ck_assert_int_eq(tyto_tensor_kind(s), TYTO_KIND_PARAMETER);
    ck_assert_int_eq(tyto_tensor_dtype(s), TYTO_F64);
    ck_assert_int_eq(tyto_tensor_numel(s), numel[i]);
    ck_assert_int_eq(tyto_tensor_rank(s), i < 2 ? 0 : 1);
    ck_assert_int_gt(tyto_tensor_index(s), (int64_t)before - 1);
  }
  ck_assert_ptr_null(tyto_optim_state(pb.opt, 8));
  ck_assert_ptr_eq(tyto_optim_step(pb.opt), tyto_optim_state(pb.opt, 0));
  ck_assert_int_eq(tyto_tensor_rank(tyto_optim_lr(pb.opt)), 0);
  ck_assert_int_eq(tyto_tensor_rank(tyto_optim_grad_norm(pb.opt)), 0);
  /* Updates: w and u, every state tensor; z (no gradient) is not one. */
  size_t n = tyto_optim_update_count(pb.opt);
  ck_assert_uint_eq(n, 10);
  tyto_tensor *const *ps = tyto_optim_update_params(pb.opt);
  tyto_tensor *const *vs = tyto_optim_update_values(pb.opt);
  int seen_w = 0, seen_u = 0;
  for (size_t i = 0; i < n; i++) {
    ck_assert_ptr_ne(ps[i], pb.z);
    seen_w += ps[i] == pb.w;
    seen_u += ps[i] == pb.u;
    ck_assert_int_eq(tyto_tensor_numel(vs[i]), tyto_tensor_numel(ps[i]));
  }
  ck_assert(seen_w == 1 && seen_u == 1);
  tyto_optim_free(pb.opt);
  pb.opt = NULL;

  /* A plain SGD keeps only the step counter; momentum adds "<p>.b",
   * Adagrad and RMSprop "<p>.s". */
  static const struct {
    tyto_optim_kind kind;
    double momentum;
    const char *names[3];
    size_t n;
  } kinds[] = {{TYTO_OPTIM_SGD, 0, {"optim.step"}, 1},
               {TYTO_OPTIM_SGD, 0.9, {"optim.step", "w.b", "u.b"}, 3},
               {TYTO_OPTIM_ADAGRAD, 0, {"optim.step", "w.s", "u.s"}, 3},
               {TYTO_OPTIM_RMSPROP, 0, {"optim.step", "w.s", "u.s"}, 3}};
  for (size_t k = 0; k < 4; k++) {
    tyto_graph_free(pb.g);
    problem_build(&pb, TYTO_F64);
    tyto_optim_options_init(&o, kinds[k].kind);
    o.momentum = kinds[k].momentum;
    ck_assert(tyto_optim_build(&o, 3, pb.params, pb.grads, &pb.opt) == TYTO_OK);
    ck_assert_uint_eq(tyto_optim_state_count(pb.opt), kinds[k].n);
    ck_assert_uint_eq(tyto_optim_update_count(pb.opt), kinds[k].n + 2);
    for (size_t i = 0; i < kinds[k].n; i++)
      ck_assert_str_eq(tyto_tensor_name(tyto_optim_state(pb.opt, i)),
                       kinds[k].names[i]);
    tyto_optim_free(pb.opt);
    pb.opt = NULL;
  }
  /* No gradient at all: only the step counter. */
  tyto_graph_free(pb.g);
  problem_build(&pb, TYTO_F64);
  tyto_tensor *none[3] = {NULL, NULL, NULL};
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAM);
  o.accumulate = 3;
  ck_assert(tyto_optim_build(&o, 3, pb.params, none, &pb.opt) == TYTO_OK);
  ck_assert_uint_eq(tyto_optim_state_count(pb.opt), 2);
  ck_assert_uint_eq(tyto_optim_update_count(pb.opt), 2);
  ck_assert_str_eq(tyto_tensor_name(tyto_optim_state(pb.opt, 1)),
                   "optim.micro");
  problem_free(&pb);
  /* NULL is harmless. */
  tyto_optim_free(NULL);
  ck_assert_uint_eq(tyto_optim_state_count(NULL), 0);
  ck_assert_ptr_null(tyto_optim_lr(NULL));
}
END_TEST

/* A caller compiled against a shorter struct gets defaults past it. */
START_TEST(test_struct_size) {
  problem pb;
  problem_build(&pb, TYTO_F64);
  tyto_optim_options o;
  memset(&o, 0xff, sizeof o); /* garbage past lr */
  o.struct_size = offsetof(tyto_optim_options, momentum);
  o.kind = TYTO_OPTIM_ADAM;
  o.lr = 0.01;
  ck_assert_msg(tyto_optim_build(&o, 3, pb.params, pb.grads, &pb.opt) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  ck_assert_uint_eq(tyto_optim_state_count(pb.opt), 5);
  tyto_optim_free(pb.opt);
  pb.opt = NULL;
  o.struct_size = offsetof(tyto_optim_options, kind);
  ck_assert_int_eq(tyto_optim_build(&o, 3, pb.params, pb.grads, &pb.opt),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), "struct_size");
  problem_free(&pb);
}
END_TEST

/* ---------------------------------------------------------------------- */
/* Errors: each message, and the graph left as it was                     */

typedef struct bad_case {
  tyto_optim_kind kind;
  const char *field;
  double value;
  const char *message;
} bad_case;

static void set_field(tyto_optim_options *o, const char *f, double v) {
  if (!strcmp(f, "lr"))
    o->lr = v;
  else if (!strcmp(f, "momentum"))
    o->momentum = v;
  else if (!strcmp(f, "nesterov"))
    o->nesterov = (int)v;
  else if (!strcmp(f, "weight_decay"))
    o->weight_decay = v;
  else if (!strcmp(f, "beta1"))
    o->beta1 = v;
  else if (!strcmp(f, "beta2"))
    o->beta2 = v;
  else if (!strcmp(f, "alpha"))
    o->alpha = v;
  else if (!strcmp(f, "eps"))
    o->eps = v;
  else if (!strcmp(f, "kind"))
    o->kind = (tyto_optim_kind)v;
  else if (!strcmp(f, "schedule"))
    o->schedule = (tyto_schedule_kind)v;
  else if (!strcmp(f, "step"))
    o->schedule = TYTO_SCHEDULE_STEP, o->step_size = (int64_t)v;
  else if (!strcmp(f, "step_gamma"))
    o->schedule = TYTO_SCHEDULE_STEP, o->step_size = 3, o->gamma = v;
  else if (!strcmp(f, "exp_gamma"))
    o->schedule = TYTO_SCHEDULE_EXPONENTIAL, o->gamma = v;
  else if (!strcmp(f, "cosine"))
    o->schedule = TYTO_SCHEDULE_COSINE, o->total_steps = (int64_t)v;
  else if (!strcmp(f, "min_lr"))
    o->schedule = TYTO_SCHEDULE_COSINE, o->total_steps = 10, o->min_lr = v;
  else if (!strcmp(f, "gamma"))
    o->gamma = v;
  else if (!strcmp(f, "cosine_step_size"))
    o->schedule = TYTO_SCHEDULE_COSINE, o->total_steps = 10,
    o->step_size = (int64_t)v;
  else if (!strcmp(f, "exp_total_steps"))
    o->schedule = TYTO_SCHEDULE_EXPONENTIAL, o->total_steps = (int64_t)v;
  else if (!strcmp(f, "warmup_steps"))
    o->warmup_steps = (int64_t)v;
  else if (!strcmp(f, "clip_value"))
    o->clip_value = v;
  else if (!strcmp(f, "clip_norm"))
    o->clip_norm = v;
  else if (!strcmp(f, "accumulate"))
    o->accumulate = (int64_t)v;
  else
    ck_abort_msg("unknown field %s", f);
}

static const bad_case bad_cases[] = {
    {TYTO_OPTIM_SGD, "lr", -1, "optim: lr must be positive and finite, got -1"},
    {TYTO_OPTIM_ADAM, "lr", 0, "optim: lr must be positive and finite, got 0"},
    {TYTO_OPTIM_SGD, "lr", INFINITY,
     "optim: lr must be positive and finite, got inf"},
    {TYTO_OPTIM_SGD, "nesterov", 1, "optim: nesterov needs momentum > 0"},
    {TYTO_OPTIM_SGD, "momentum", -0.5,
     "optim: momentum must be >= 0 and finite, got -0.5"},
    {TYTO_OPTIM_ADAM, "momentum", 0.9,
     "optim: momentum and nesterov apply to sgd only, not adam"},
    {TYTO_OPTIM_RMSPROP, "weight_decay", -1,
     "optim: weight_decay must be >= 0 and finite, got -1"},
    {TYTO_OPTIM_ADAM, "beta1", 1, "optim: beta1 must be in [0, 1), got 1"},
    {TYTO_OPTIM_ADAMW, "beta2", -0.1,
     "optim: beta2 must be in [0, 1), got -0.1"},
    {TYTO_OPTIM_RMSPROP, "alpha", 1.5,
     "optim: alpha must be in [0, 1], got 1.5"},
    {TYTO_OPTIM_ADAGRAD, "eps", NAN,
     "optim: eps must be >= 0 and finite, got nan"},
    {TYTO_OPTIM_SGD, "kind", 7,
     "optim: unknown optimiser kind 7 (expected 0 to 4)"},
    {TYTO_OPTIM_SGD, "schedule", 9,
     "optim: unknown schedule 9 (expected 0 to 3)"},
    {TYTO_OPTIM_SGD, "step", 0,
     "optim: step schedule needs step_size >= 1, got 0"},
    {TYTO_OPTIM_SGD, "step_gamma", 0,
     "optim: step schedule needs gamma positive and finite, got 0"},
    {TYTO_OPTIM_SGD, "exp_gamma", -2,
     "optim: exponential schedule needs gamma positive and finite, got -2"},
    {TYTO_OPTIM_SGD, "cosine", 0,
     "optim: cosine schedule needs total_steps >= 1, got 0"},
    {TYTO_OPTIM_SGD, "min_lr", 0.5,
     "optim: cosine schedule needs min_lr in [0, lr = 0.01], got 0.5"},
    {TYTO_OPTIM_SGD, "warmup_steps", -3,
     "optim: warmup_steps must be >= 0, got -3"},
    {TYTO_OPTIM_SGD, "clip_value", -1,
     "optim: clip_value must be >= 0 and finite (0: off), got -1"},
    {TYTO_OPTIM_SGD, "clip_norm", INFINITY,
     "optim: clip_norm must be >= 0 and finite (0: off), got inf"},
    {TYTO_OPTIM_SGD, "accumulate", 0, "optim: accumulate must be >= 1, got 0"},
    {TYTO_OPTIM_SGD, "accumulate", 16777217,
     "optim: accumulate must be at most 2^24 (16777216), got 16777217"},
    /* fields the kind or schedule does not read keep their defaults */
    {TYTO_OPTIM_SGD, "beta1", 0.5,
     "optim: beta1 and beta2 apply to adam and adamw only, not sgd"},
    {TYTO_OPTIM_RMSPROP, "beta2", 0.9,
     "optim: beta1 and beta2 apply to adam and adamw only, not rmsprop"},
    {TYTO_OPTIM_ADAM, "alpha", 0.5,
     "optim: alpha applies to rmsprop only, not adam"},
    {TYTO_OPTIM_SGD, "eps", 1e-6,
     "optim: eps applies to adagrad, rmsprop, adam and adamw, not sgd"},
    {TYTO_OPTIM_ADAM, "gamma", 0.5,
     "optim: gamma applies to the step and exponential schedules only, not "
     "constant"},
    {TYTO_OPTIM_SGD, "cosine_step_size", 3,
     "optim: step_size applies to the step schedule only, not cosine"},
    {TYTO_OPTIM_SGD, "exp_total_steps", 9,
     "optim: total_steps and min_lr apply to the cosine schedule only, not "
     "exponential"},
};

/* The build fails with INVALID_ARGUMENT and `message`, leaving *out NULL
 * and the graph as it was. */
static void expect_refused(problem *pb, const tyto_optim_options *o, size_t n,
                           tyto_tensor *const *params,
                           tyto_tensor *const *grads, const char *message) {
  size_t size = tyto_graph_size(pb->g);
  tyto_status st0 = tyto_graph_status(pb->g);
  tyto_optim *opt = (tyto_optim *)&opt;
  ck_assert_int_eq(tyto_optim_build(o, n, params, grads, &opt),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_msg_contains(tyto_errmsg(), message);
  ck_assert_ptr_null(opt);
  ck_assert_uint_eq(tyto_graph_size(pb->g), size);
  ck_assert_int_eq(tyto_graph_status(pb->g), st0);
}

START_TEST(test_bad_options) {
  problem pb;
  problem_build(&pb, TYTO_F64);
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
    tyto_optim_options o;
    tyto_optim_options_init(&o, bad_cases[i].kind);
    set_field(&o, bad_cases[i].field, bad_cases[i].value);
    expect_refused(&pb, &o, 3, pb.params, pb.grads, bad_cases[i].message);
    ck_assert_str_eq(tyto_errmsg(), bad_cases[i].message);
  }
  tyto_optim *opt;
  ck_assert_int_eq(tyto_optim_build(NULL, 3, pb.params, pb.grads, &opt),
                   TYTO_ERR_INVALID_ARGUMENT);
  ck_assert_str_eq(tyto_errmsg(), "optim: opts is NULL");
  problem_free(&pb);
}
END_TEST

START_TEST(test_bad_tensors) {
  problem pb;
  problem_build(&pb, TYTO_F64);
  tyto_optim_options o;
  tyto_optim_options_init(&o, TYTO_OPTIM_ADAM);
  tyto_tensor *ps[3], *gs[3];
#define RESET()                                                                \
  (memcpy(ps, pb.params, sizeof ps), memcpy(gs, pb.grads, sizeof gs))

  expect_refused(&pb, &o, 0, pb.params, pb.grads,
                 "optim: needs n >= 1 parameters and their gradients (n is 0");
  expect_refused(&pb, &o, 3, pb.params, NULL, "grads NULL");
  RESET();
  ps[1] = NULL;
  expect_refused(&pb, &o, 3, ps, gs, "optim: params[1] is NULL");
  RESET();
  ps[1] = pb.xw;
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: params[1] ('xw') is not a parameter (kind input)");
  RESET();
  ps[2] = tyto_parameter(pb.g, TYTO_F64, 1, (int64_t[]){2}, NULL);
  expect_refused(&pb, &o, 3, ps, gs, "optim: params[2] has no name");
  RESET();
  ps[2] = tyto_parameter(pb.g, TYTO_F32, 1, (int64_t[]){2}, "h");
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: params[2] ('h') is f32 but params[0] is f64");
  RESET();
  ps[2] = pb.w;
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: params[2] ('w') is params[0] again");
  /* An integer parameter (no gradient: integers carry none) is named as
   * such, not by the op its state would have failed in. */
  tyto_tensor *ip = tyto_parameter(pb.g, TYTO_I32, 1, (int64_t[]){2}, "ids");
  tyto_tensor *ig = NULL;
  expect_refused(&pb, &o, 1, &ip, &ig,
                 "optim: params[0] ('ids') is i32; an optimiser trains "
                 "floating-point parameters");
  /* A 16-bit one too: its step counter would stop at 256 in bf16. */
  tyto_tensor *hp = tyto_parameter(pb.g, TYTO_BF16, 1, (int64_t[]){2}, "hw");
  expect_refused(&pb, &o, 1, &hp, &ig,
                 "optim: params[0] ('hw') is bf16; an optimiser trains f32 "
                 "or f64 parameters");
  RESET();
  ps[2] = tyto_parameter(pb.g, TYTO_F64, 1, (int64_t[]){2}, "u");
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: params[1] and params[2] are both named 'u'");
  RESET();
  gs[0] = gs[1];
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: the gradient of 'w' (grads[0]) is f64[2], expected "
                 "f64[3] as the parameter");

  tyto_graph *other = tyto_graph_new();
  RESET();
  ps[2] = tyto_parameter(other, TYTO_F64, 1, (int64_t[]){2}, "q");
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: params[2] belongs to another graph than params[0]");
  RESET();
  gs[2] = tyto_input(other, TYTO_F64, 1, (int64_t[]){2}, "gq");
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: the gradient of 'z' (grads[2]) belongs to another "
                 "graph");
  tyto_graph_free(other);

  /* The state names are taken: a parameter "w.m", or a second optimiser. */
  tyto_tensor *wm = tyto_parameter(pb.g, TYTO_F64, 1, (int64_t[]){3}, "w.m");
  expect_refused(&pb, &o, 3, pb.params, pb.grads,
                 "optim: the graph already has a parameter named 'w.m'");
  /* ... which no other kind minds. */
  tyto_optim_options sgd;
  tyto_optim_options_init(&sgd, TYTO_OPTIM_SGD);
  ck_assert_msg(tyto_optim_build(&sgd, 3, pb.params, pb.grads, &pb.opt) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  (void)wm;
  expect_refused(&pb, &sgd, 3, pb.params, pb.grads,
                 "optim: the graph already has a parameter named "
                 "'optim.step'");

  /* A graph in error. */
  tyto_add(pb.w, pb.u);
  ck_assert_int_ne(tyto_graph_status(pb.g), TYTO_OK);
  RESET();
  gs[0] = tyto_graph_error_tensor(pb.g);
  expect_refused(&pb, &o, 3, ps, gs,
                 "optim: the gradient of 'w' (grads[0]) "
                 "is the error tensor: add: shapes");
  expect_refused(&pb, &o, 3, pb.params, pb.grads,
                 "optim: graph is in error: add: shapes cannot be broadcast");
#undef RESET
  problem_free(&pb);
}
END_TEST

int main(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("rules");
  tcase_add_checked_fixture(tc, optim_setup, optim_teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_rule, 0,
                      (int)(sizeof rule_cases / sizeof rule_cases[0]));
  tcase_add_loop_test(tc, test_rule_f32, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("api");
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_names);
  tcase_add_test(tc, test_state_names);
  tcase_add_test(tc, test_struct_size);
  tcase_add_test(tc, test_bad_options);
  tcase_add_test(tc, test_bad_tensors);
  suite_add_tcase(s, tc);
  return test_run(s);
}
