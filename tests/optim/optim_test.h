/* Helpers for the optimiser suites: a tiny problem with hand-written
 * gradients, compiled with an optimiser into a CPU program, and a float64
 * reference of every optimiser, schedule, clipping and accumulation rule
 * written here from the formulas of <tyto/optim.h> as plain loops (no
 * library code), to compare the program against run by run.
 *
 * The problem: parameters w [3] and u [2] (one vector p of NP = 5 in the
 * reference), z [2] whose gradient is NULL (left alone), inputs xw [3] and
 * xu [2], and the gradient g = A (p - C) + x(run) built from ops, with
 * x(run)[i] = 0.1 ((7 run + 3 i) mod 5 - 2). tests/optim/torch_reference.py
 * runs the same problem through torch.optim. */
#ifndef TYTO_TESTS_OPTIM_TEST_H
#define TYTO_TESTS_OPTIM_TEST_H

#include "common.h"

#include <math.h>

#define NP 5
static const double P0[NP] = {0.5, -1.0, 2.0, 1.5, -0.25};
static const double A[NP] = {1.0, 2.0, 0.5, 3.0, 1.5};
static const double C[NP] = {0.2, 0.3, -0.4, 1.0, 0.0};
static const double Z0[2] = {7.0, -8.0};

static inline double xval(int run, int i) {
  return 0.1 * (double)((7 * run + 3 * i) % 5 - 2);
}

static tyto_context *ctx;

static inline void optim_setup(void) {
  tyto_context_options o;
  test_options(&o, 0);
  o.devices = "cpu";
  ck_assert_msg(tyto_context_new(&o, &ctx) == TYTO_OK, "%s", tyto_errmsg());
}

static inline void optim_teardown(void) {
  tyto_context_free(ctx);
}

typedef struct problem {
  tyto_dtype dt;
  tyto_graph *g;
  tyto_tensor *w, *u, *z, *xw, *xu;
  tyto_tensor *params[3], *grads[3];
  tyto_optim *opt;
  tyto_program *prog; /* outputs: lr, grad_norm, step, z */
} problem;

/* a (x - c) with a, c the constants at A + off, C + off. */
static inline tyto_tensor *problem_grad(problem *pb, tyto_tensor *x,
                                        tyto_tensor *in, int off, int n) {
  int64_t s[1] = {n};
  tyto_tensor *a = tyto_constant(pb->g, pb->dt, 1, s, A + off);
  tyto_tensor *c = tyto_constant(pb->g, pb->dt, 1, s, C + off);
  return tyto_add(tyto_mul(a, tyto_sub(x, c)), in);
}

/* The graph: parameters, inputs and gradients. */
static inline void problem_build(problem *pb, tyto_dtype dt) {
  memset(pb, 0, sizeof *pb);
  pb->dt = dt;
  pb->g = tyto_graph_new();
  ck_assert_ptr_nonnull(pb->g);
  pb->w = tyto_parameter(pb->g, dt, 1, (int64_t[]){3}, "w");
  pb->u = tyto_parameter(pb->g, dt, 1, (int64_t[]){2}, "u");
  pb->z = tyto_parameter(pb->g, dt, 1, (int64_t[]){2}, "z");
  pb->xw = tyto_input(pb->g, dt, 1, (int64_t[]){3}, "xw");
  pb->xu = tyto_input(pb->g, dt, 1, (int64_t[]){2}, "xu");
  pb->params[0] = pb->w;
  pb->params[1] = pb->u;
  pb->params[2] = pb->z;
  pb->grads[0] = problem_grad(pb, pb->w, pb->xw, 0, 3);
  pb->grads[1] = problem_grad(pb, pb->u, pb->xu, 3, 2);
  pb->grads[2] = NULL;
  ck_assert_msg(tyto_graph_status(pb->g) == TYTO_OK, "%s",
                tyto_graph_error_message(pb->g));
}

static inline size_t pack(tyto_dtype dt, const double *v, size_t n, void *buf) {
  for (size_t i = 0; i < n; i++) {
    if (dt == TYTO_F32)
      ((float *)buf)[i] = (float)v[i];
    else
      ((double *)buf)[i] = v[i];
  }
  return n * tyto_dtype_size(dt);
}

static inline void unpack(tyto_dtype dt, const void *buf, size_t n, double *v) {
  for (size_t i = 0; i < n; i++)
    v[i] = dt == TYTO_F32 ? ((const float *)buf)[i] : ((const double *)buf)[i];
}

static inline void write_param(problem *pb, tyto_tensor *t, const double *v) {
  unsigned char buf[64];
  size_t b = pack(pb->dt, v, (size_t)tyto_tensor_numel(t), buf);
  ck_assert_msg(tyto_program_write_parameter(pb->prog, t, buf, b) == TYTO_OK,
                "%s", tyto_errmsg());
}

static inline void read_param(problem *pb, tyto_tensor *t, double *v) {
  unsigned char buf[64];
  size_t n = (size_t)tyto_tensor_numel(t);
  ck_assert_msg(tyto_program_read_parameter(
                    pb->prog, t, buf, n * tyto_dtype_size(pb->dt)) == TYTO_OK,
                "%s", tyto_errmsg());
  unpack(pb->dt, buf, n, v);
}

/* Builds the optimiser and compiles the program; w, u, z start at P0, Z0. */
static inline void problem_compile(problem *pb, const tyto_optim_options *o) {
  ck_assert_msg(tyto_optim_build(o, 3, pb->params, pb->grads, &pb->opt) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  /* z is an output so that the program holds it (and could change it). */
  tyto_tensor *outs[4] = {tyto_optim_lr(pb->opt), tyto_optim_grad_norm(pb->opt),
                          tyto_optim_step(pb->opt), pb->z};
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.n_updates = tyto_optim_update_count(pb->opt);
  po.update_params = tyto_optim_update_params(pb->opt);
  po.update_values = tyto_optim_update_values(pb->opt);
  ck_assert_msg(tyto_program_compile(ctx, pb->g, 4, outs, &po, &pb->prog) ==
                    TYTO_OK,
                "%s", tyto_errmsg());
  write_param(pb, pb->w, P0);
  write_param(pb, pb->u, P0 + 3);
  write_param(pb, pb->z, Z0);
}

static inline void problem_free(problem *pb) {
  tyto_program_free(pb->prog);
  tyto_optim_free(pb->opt);
  tyto_graph_free(pb->g);
  memset(pb, 0, sizeof *pb);
}

/* One run with inputs x[NP]. */
static inline void problem_run_x(problem *pb, const double *x) {
  unsigned char buf[64];
  size_t b = pack(pb->dt, x, 3, buf);
  ck_assert(tyto_program_set_input(pb->prog, pb->xw, buf, b) == TYTO_OK);
  b = pack(pb->dt, x + 3, 2, buf);
  ck_assert(tyto_program_set_input(pb->prog, pb->xu, buf, b) == TYTO_OK);
  ck_assert_msg(tyto_program_run(pb->prog) == TYTO_OK, "%s", tyto_errmsg());
}

/* One run with the inputs of run number `run`. */
static inline void problem_run(problem *pb, int run) {
  double x[NP];
  for (int i = 0; i < NP; i++)
    x[i] = xval(run, i);
  problem_run_x(pb, x);
}

/* Output i (0 lr, 1 grad_norm, 2 step) of the last run. */
static inline double problem_output(problem *pb, size_t i) {
  unsigned char buf[8];
  double v;
  ck_assert(tyto_program_read_output(pb->prog, i, buf,
                                     tyto_dtype_size(pb->dt)) == TYTO_OK);
  unpack(pb->dt, buf, 1, &v);
  return v;
}

/* The state parameter named `name`, or NULL. */
static inline tyto_tensor *problem_state(problem *pb, const char *name) {
  for (size_t i = 0; i < tyto_optim_state_count(pb->opt); i++) {
    tyto_tensor *t = tyto_optim_state(pb->opt, i);
    if (strcmp(tyto_tensor_name(t), name) == 0)
      return t;
  }
  return NULL;
}

/* w<suffix> and u<suffix> (suffix "" for w and u themselves) into v[NP]. */
static inline void problem_read(problem *pb, const char *suffix, double *v) {
  char name[32];
  snprintf(name, sizeof name, "w%s", suffix);
  tyto_tensor *w = *suffix ? problem_state(pb, name) : pb->w;
  snprintf(name, sizeof name, "u%s", suffix);
  tyto_tensor *u = *suffix ? problem_state(pb, name) : pb->u;
  ck_assert_msg(w && u, "no state '%s'", suffix);
  read_param(pb, w, v);
  read_param(pb, u, v + 3);
}

/* ---------------------------------------------------------------------- */
/* The float64 reference                                                   */

typedef struct ref {
  double p[NP], buf[NP], s[NP], m[NP], v[NP], acc[NP];
  double step, micro;
  double lr, norm; /* what the last run used and measured */
} ref;

static inline void ref_init(ref *r) {
  memset(r, 0, sizeof *r);
  memcpy(r->p, P0, sizeof P0);
}

/* The learning rate of update k, from the header's formulas. */
static inline double ref_lr(const tyto_optim_options *o, double k) {
  const double pi = 3.14159265358979323846;
  double lr = o->lr;
  switch (o->schedule) {
  case TYTO_SCHEDULE_CONSTANT: break;
  case TYTO_SCHEDULE_STEP:
    lr = o->lr * pow(o->gamma, floor((k - 1) / (double)o->step_size));
    break;
  case TYTO_SCHEDULE_EXPONENTIAL: lr = o->lr * pow(o->gamma, k - 1); break;
  case TYTO_SCHEDULE_COSINE: {
    double t = (double)o->total_steps, e = k - 1 < t ? k - 1 : t;
    lr = o->min_lr + (o->lr - o->min_lr) * (1 + cos(pi * e / t)) / 2;
    break;
  }
  }
  if (o->warmup_steps > 0) {
    double f = k / (double)o->warmup_steps;
    lr *= f < 1 ? f : 1;
  }
  return lr;
}

/* One run of the program: accumulation, clipping, the rule. */
static inline void ref_run(const tyto_optim_options *o, ref *r, int run) {
  double g[NP];
  for (int i = 0; i < NP; i++)
    g[i] = A[i] * (r->p[i] - C[i]) + xval(run, i);
  int apply = 1;
  if (o->accumulate > 1) {
    double K = (double)o->accumulate;
    apply = r->micro + 1 == K;
    for (int i = 0; i < NP; i++) {
      r->acc[i] += g[i];
      g[i] = r->acc[i] / K;
      if (apply)
        r->acc[i] = 0;
    }
    r->micro = apply ? 0 : r->micro + 1;
  }
  double k = r->step + 1, lr = ref_lr(o, k), sq = 0;
  r->lr = lr;
  for (int i = 0; i < NP; i++)
    sq += g[i] * g[i];
  r->norm = sqrt(sq);
  if (o->clip_value > 0)
    for (int i = 0; i < NP; i++)
      g[i] = fmin(fmax(g[i], -o->clip_value), o->clip_value);
  if (o->clip_norm > 0) {
    sq = 0;
    for (int i = 0; i < NP; i++)
      sq += g[i] * g[i];
    double coef = fmin(1.0, o->clip_norm / (sqrt(sq) + 1e-6));
    for (int i = 0; i < NP; i++)
      g[i] *= coef;
  }
  if (!apply)
    return;
  for (int i = 0; i < NP; i++) {
    double p = r->p[i], gi = g[i];
    if (o->kind != TYTO_OPTIM_ADAMW)
      gi += o->weight_decay * p;
    switch (o->kind) {
    case TYTO_OPTIM_SGD:
      if (o->momentum == 0) {
        r->p[i] = p - lr * gi;
      } else {
        r->buf[i] = k == 1 ? gi : o->momentum * r->buf[i] + gi;
        double d = o->nesterov ? gi + o->momentum * r->buf[i] : r->buf[i];
        r->p[i] = p - lr * d;
      }
      break;
    case TYTO_OPTIM_ADAGRAD:
      r->s[i] += gi * gi;
      r->p[i] = p - lr * gi / (sqrt(r->s[i]) + o->eps);
      break;
    case TYTO_OPTIM_RMSPROP:
      r->s[i] = o->alpha * r->s[i] + (1 - o->alpha) * gi * gi;
      r->p[i] = p - lr * gi / (sqrt(r->s[i]) + o->eps);
      break;
    case TYTO_OPTIM_ADAM:
    case TYTO_OPTIM_ADAMW: {
      r->m[i] = o->beta1 * r->m[i] + (1 - o->beta1) * gi;
      r->v[i] = o->beta2 * r->v[i] + (1 - o->beta2) * gi * gi;
      double mh = r->m[i] / (1 - pow(o->beta1, k));
      double vh = r->v[i] / (1 - pow(o->beta2, k));
      double decay = o->kind == TYTO_OPTIM_ADAMW ? lr * o->weight_decay * p : 0;
      r->p[i] = p - lr * mh / (sqrt(vh) + o->eps) - decay;
      break;
    }
    }
  }
  r->step += 1;
}

/* |got - want| <= tol (1 + |want|) for n values. */
static inline void expect_near(const char *what, int run, const double *got,
                               const double *want, int n, double tol) {
  for (int i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                  "%s after run %d, element %d: got %.17g, want %.17g", what,
                  run, i, got[i], want[i]);
}

/* Runs the program and the reference `runs` times and compares, after each
 * run, the parameters, the rule's state, the accumulators, lr, the
 * gradient norm, the step counter and the untouched z. */
static inline void compare_runs(problem *pb, const tyto_optim_options *o,
                                ref *r, int first, int runs, double tol) {
  for (int run = first; run < first + runs; run++) {
    double got[NP], z[2];
    problem_run(pb, run);
    ref_run(o, r, run);
    problem_read(pb, "", got);
    expect_near("parameters", run, got, r->p, NP, tol);
    if (o->kind == TYTO_OPTIM_SGD && o->momentum != 0) {
      problem_read(pb, ".b", got);
      expect_near("momentum buffer", run, got, r->buf, NP, tol);
    }
    if (o->kind == TYTO_OPTIM_ADAGRAD || o->kind == TYTO_OPTIM_RMSPROP) {
      problem_read(pb, ".s", got);
      expect_near("square sum", run, got, r->s, NP, tol);
    }
    if (o->kind == TYTO_OPTIM_ADAM || o->kind == TYTO_OPTIM_ADAMW) {
      problem_read(pb, ".m", got);
      expect_near("first moment", run, got, r->m, NP, tol);
      problem_read(pb, ".v", got);
      expect_near("second moment", run, got, r->v, NP, tol);
    }
    if (o->accumulate > 1) {
      problem_read(pb, ".acc", got);
      expect_near("accumulator", run, got, r->acc, NP, tol);
      read_param(pb, problem_state(pb, "optim.micro"), got);
      expect_near("optim.micro", run, got, &r->micro, 1, 0);
    }
    double out[3] = {problem_output(pb, 0), problem_output(pb, 1),
                     problem_output(pb, 2)};
    /* step read as an output after the run: this run's update counted. */
    double want[3] = {r->lr, r->norm, r->step};
    expect_near("outputs lr, grad_norm, step", run, out, want, 3, tol);
    read_param(pb, tyto_optim_step(pb->opt), got);
    expect_near("optim.step", run, got, &r->step, 1, 0);
    read_param(pb, pb->z, z);
    expect_near("z (no gradient)", run, z, Z0, 2, 0);
  }
}

#endif
