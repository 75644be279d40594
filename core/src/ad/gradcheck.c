/*
 * The public finite-difference checker: AD derivatives against central
 * differences, element by element in reverse mode and along a random
 * direction in forward mode.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/ad.h>
#include <tyto/program.h>

#include "../graph/dtype.h"
#include "../graph/shape.h"
#include "../runtime/error.h"
#include "rules.h"

void tyto_gradcheck_options_init(tyto_gradcheck_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->seed = 0x9e3779b97f4a7c15ull;
}

/* splitmix64: the random weights and directions, in [-1, 1). */
static double next_uniform(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

typedef struct check {
  tyto_context *ctx;
  tyto_gradcheck_options o;
  tyto_gradcheck_report *rep;
  tyto_dtype dtype;
  size_t n_bind;      /* xs then fixed */
  tyto_tensor **bind; /* the tensors bound */
  double **val;       /* their values as doubles */
  void *scratch;      /* one value in the dtype, for binding */
  size_t scratch_bytes;
} check;

static size_t bytes_of(const tyto_tensor *t) {
  return (size_t)tyto_tensor_numel(t) * tyto_dtype_size(t->dtype);
}

static void to_dtype(void *dst, const double *src, int64_t n, tyto_dtype dt) {
  const dtype_info *di = dtype_info_of(dt);
  for (int64_t i = 0; i < n; i++)
    di->store(dst, (size_t)i, src[i]);
}

static void from_dtype(double *dst, const void *src, int64_t n, tyto_dtype dt) {
  const dtype_info *di = dtype_info_of(dt);
  for (int64_t i = 0; i < n; i++)
    dst[i] = di->load(src, (size_t)i);
}

/* v as the device holds it in dtype. */
static double rounded(tyto_dtype dtype, double v) {
  double r;
  to_dtype(&r, &v, 1, dtype);
  from_dtype(&r, &r, 1, dtype);
  return r;
}

/* Binds tensor k's current values into p when p uses it. */
static tyto_status bind_one(check *c, tyto_program *p, size_t k) {
  tyto_tensor *t = c->bind[k];
  /* check_bindable let in only inputs and parameters, the kinds the public
   * check answers for. */
  if (!tyto_program_uses(p, t))
    return TYTO_OK;
  to_dtype(c->scratch, c->val[k], tyto_tensor_numel(t), t->dtype);
  return t->kind == TYTO_KIND_INPUT
             ? tyto_program_set_input(p, t, c->scratch, bytes_of(t))
             : tyto_program_write_parameter(p, t, c->scratch, bytes_of(t));
}

static tyto_status bind_all(check *c, tyto_program *p) {
  tyto_status st = TYTO_OK;
  for (size_t k = 0; k < c->n_bind && st == TYTO_OK; k++)
    st = bind_one(c, p, k);
  return st;
}

/* Runs p and reads output i (numel n) as doubles. */
static tyto_status run_read(check *c, tyto_program *p, size_t i, double *dst,
                            int64_t n) {
  tyto_status st = tyto_program_run(p);
  if (st != TYTO_OK)
    return st;
  size_t bytes = (size_t)n * tyto_dtype_size(c->dtype);
  if (bytes > c->scratch_bytes)
    return rt_fail(TYTO_ERR_INTERNAL, "gradcheck: scratch too small");
  st = tyto_program_read_output(p, i, c->scratch, bytes);
  if (st == TYTO_OK)
    from_dtype(dst, c->scratch, n, c->dtype);
  return st;
}

/* Records one comparison; keeps the worst. */
static void compare(check *c, int mode, size_t input, int64_t element,
                    double analytic, double numeric) {
  double err = analytic == numeric ? 0 : fabs(analytic - numeric);
  double tol = c->o.atol + c->o.rtol * fabs(numeric);
  double ratio = err / tol;
  if (isnan(analytic) != isnan(numeric) || (isnan(ratio) && !isnan(numeric)))
    ratio = INFINITY;
  else if (isnan(ratio))
    ratio = 0; /* both NaN: the function is undefined here, as is its AD;
                  equal infinities have err 0 */
  tyto_gradcheck_report *r = c->rep;
  r->n_checked++;
  if (r->n_checked == 1 || ratio > r->ratio) {
    r->mode = mode;
    r->input = input;
    r->element = element;
    r->analytic = analytic;
    r->numeric = numeric;
    r->abs_error = err;
    r->ratio = ratio;
  }
}

/* Every input and parameter y depends on must be bound. */
static tyto_status check_sources(check *c, tyto_tensor *y) {
  tyto_graph *g = y->graph;
  size_t n = (size_t)y->index + 1;
  unsigned char *anc = calloc(n, 1);
  if (!anc)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
  anc[y->index] = 1;
  tyto_status st = TYTO_OK;
  for (size_t i = n; i-- > 0 && st == TYTO_OK;) {
    if (!anc[i])
      continue;
    tyto_tensor *t = g->nodes[i];
    for (size_t j = 0; j < t->n_inputs; j++)
      anc[t->inputs[j]->index] = 1;
    if (t->kind != TYTO_KIND_INPUT && t->kind != TYTO_KIND_PARAMETER)
      continue;
    size_t k = 0;
    while (k < c->n_bind && c->bind[k] != t)
      k++;
    if (k == c->n_bind)
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: y depends on %s '%s' (#%lld), which is "
                   "neither checked nor fixed",
                   tyto_kind_name(t->kind), t->name ? t->name : "",
                   (long long)t->index);
  }
  free(anc);
  return st;
}

static tyto_status check_bindable(const char *what, size_t k, tyto_tensor *t,
                                  tyto_graph *g, const void *value) {
  if (!t)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "gradcheck: %s[%zu] is NULL",
                   what, k);
  if (t->graph != g)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: %s[%zu] belongs to another graph than y", what,
                   k);
  if (t->kind != TYTO_KIND_INPUT && t->kind != TYTO_KIND_PARAMETER)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: %s[%zu] (#%lld) is a %s tensor; only inputs "
                   "and parameters can be given values",
                   what, k, (long long)t->index, tyto_kind_name(t->kind));
  if (!value && tyto_tensor_numel(t))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: the value of %s[%zu] is NULL", what, k);
  return TYTO_OK;
}

static tyto_status graph_error(tyto_graph *g) {
  return rt_fail(tyto_graph_status(g), "gradcheck: %s",
                 tyto_graph_error_message(g));
}

static tyto_status run_checks(check *c, tyto_tensor *y, size_t n,
                              tyto_tensor *const *xs) {
  tyto_graph *g = y->graph;
  int64_t ny = tyto_tensor_numel(y);
  uint64_t rng = c->o.seed;
  /* s = sum(w * y), w random: one scalar whose gradient involves every
   * element of y's Jacobian. */
  double *w = malloc((size_t)(ny ? ny : 1) * sizeof *w);
  if (!w)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
  for (int64_t i = 0; i < ny; i++)
    w[i] = next_uniform(&rng);
  tyto_tensor *s =
      ny == 1
          ? tyto_reshape(y, 0, NULL)
          : tyto_sum(
                tyto_mul(tyto_constant(g, y->dtype, y->rank, y->shape, w), y),
                0, NULL, 0);
  free(w);
  /* Forward directions, one per x. */
  double **dir = calloc(n, sizeof *dir);
  tyto_tensor **vs = calloc(n, sizeof *vs);
  tyto_tensor **grads = calloc(n, sizeof *grads);
  tyto_program *pad = NULL, *pf = NULL;
  double *buf = NULL, *ana = NULL, *yp = NULL, *ym = NULL;
  tyto_status st = TYTO_OK;
  if (!dir || !vs || !grads) {
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    goto out;
  }
  int rev = c->o.modes & TYTO_GRADCHECK_REVERSE;
  int fwd = c->o.modes & TYTO_GRADCHECK_FORWARD;
  tyto_tensor *jv = NULL;
  if (rev)
    tyto_grads(s, n, xs, grads);
  if (fwd) {
    for (size_t k = 0; k < n; k++) {
      int64_t nk = tyto_tensor_numel(xs[k]);
      dir[k] = malloc((size_t)(nk ? nk : 1) * sizeof **dir);
      if (!dir[k]) {
        st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
        goto out;
      }
      for (int64_t i = 0; i < nk; i++)
        dir[k][i] = next_uniform(&rng);
      vs[k] = tyto_constant(g, xs[k]->dtype, xs[k]->rank, xs[k]->shape, dir[k]);
    }
    tyto_jvp(n, xs, vs, 1, &y, &jv);
  }
  if (tyto_graph_status(g) != TYTO_OK) {
    st = graph_error(g);
    goto out;
  }
  /* One program for the derivatives, one for the function. */
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.device = c->o.device;
  tyto_tensor **outs = grads;
  size_t n_out = rev ? n : 0;
  tyto_tensor *only_jv[1] = {jv};
  if (!rev) { /* forward only; with both, J.v is compiled later */
    outs = only_jv;
    n_out = 1;
  }
  if ((st = tyto_program_compile(c->ctx, g, n_out, outs, &po, &pad)) != TYTO_OK)
    goto out;
  tyto_tensor *fouts[2] = {s, y};
  if ((st = tyto_program_compile(c->ctx, g, 2, fouts, &po, &pf)) != TYTO_OK)
    goto out;
  if ((st = bind_all(c, pad)) != TYTO_OK || (st = bind_all(c, pf)) != TYTO_OK)
    goto out;
  int64_t most = ny;
  for (size_t k = 0; k < n; k++)
    if (tyto_tensor_numel(xs[k]) > most)
      most = tyto_tensor_numel(xs[k]);
  buf = malloc((size_t)(most ? most : 1) * sizeof *buf);
  ana = malloc((size_t)(most ? most : 1) * sizeof *ana);
  yp = malloc((size_t)(ny ? ny : 1) * sizeof *yp);
  ym = malloc((size_t)(ny ? ny : 1) * sizeof *ym);
  if (!buf || !ana || !yp || !ym) {
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    goto out;
  }
  if (rev) {
    if ((st = tyto_program_run(pad)) != TYTO_OK)
      goto out;
    for (size_t k = 0; k < n && st == TYTO_OK; k++) {
      int64_t nk = tyto_tensor_numel(xs[k]);
      size_t bytes = (size_t)nk * tyto_dtype_size(c->dtype);
      if ((st = tyto_program_read_output(pad, k, c->scratch, bytes)) != TYTO_OK)
        goto out;
      from_dtype(ana, c->scratch, nk, c->dtype);
      for (int64_t i = 0; i < nk && st == TYTO_OK; i++) {
        double x0 = c->val[k][i], h = c->o.step * fmax(1.0, fabs(x0));
        /* The device sees x0 +- h rounded to the dtype: divide by the
         * step actually taken. */
        double xp = rounded(c->dtype, x0 + h), xm = rounded(c->dtype, x0 - h);
        double sp, sm;
        c->val[k][i] = x0 + h;
        if ((st = bind_one(c, pf, k)) == TYTO_OK)
          st = run_read(c, pf, 0, &sp, 1);
        c->val[k][i] = x0 - h;
        if (st == TYTO_OK && (st = bind_one(c, pf, k)) == TYTO_OK)
          st = run_read(c, pf, 0, &sm, 1);
        c->val[k][i] = x0;
        if (st == TYTO_OK)
          compare(c, TYTO_GRADCHECK_REVERSE, k, i, ana[i],
                  (sp - sm) / (xp - xm));
      }
      if (st == TYTO_OK)
        st = bind_one(c, pf, k);
    }
  }
  if (fwd && st == TYTO_OK) {
    tyto_program *pj = pad;
    if (rev) {
      tyto_program_free(pad);
      pad = NULL;
      if ((st = tyto_program_compile(c->ctx, g, 1, only_jv, &po, &pad)) !=
          TYTO_OK)
        goto out;
      if ((st = bind_all(c, pad)) != TYTO_OK)
        goto out;
      pj = pad;
    }
    if ((st = run_read(c, pj, 0, ana, ny)) != TYTO_OK)
      goto out;
    /* One step along every direction at once, scaled by the largest x. */
    double scale = 1.0;
    for (size_t k = 0; k < n; k++)
      for (int64_t i = 0; i < tyto_tensor_numel(xs[k]); i++)
        scale = fmax(scale, fabs(c->val[k][i]));
    double h = c->o.step * scale;
    for (int sign = 1; sign >= -1 && st == TYTO_OK; sign -= 2) {
      for (size_t k = 0; k < n && st == TYTO_OK; k++) {
        for (int64_t i = 0; i < tyto_tensor_numel(xs[k]); i++)
          c->val[k][i] += sign * h * dir[k][i];
        st = bind_one(c, pf, k);
      }
      if (st == TYTO_OK)
        st = run_read(c, pf, 1, sign > 0 ? yp : ym, ny);
      for (size_t k = 0; k < n; k++)
        for (int64_t i = 0; i < tyto_tensor_numel(xs[k]); i++)
          c->val[k][i] -= sign * h * dir[k][i];
    }
    for (int64_t i = 0; i < ny && st == TYTO_OK; i++)
      compare(c, TYTO_GRADCHECK_FORWARD, 0, i, ana[i],
              (yp[i] - ym[i]) / (2 * h));
  }
out:
  tyto_program_free(pad);
  tyto_program_free(pf);
  if (dir)
    for (size_t k = 0; k < n; k++)
      free(dir[k]);
  free(dir);
  free(vs);
  free(grads);
  free(buf);
  free(ana);
  free(yp);
  free(ym);
  return st;
}

tyto_status tyto_gradcheck(tyto_context *ctx, tyto_tensor *y, size_t n,
                           tyto_tensor *const *xs, const void *const *values,
                           const tyto_gradcheck_options *opts,
                           tyto_gradcheck_report *report) {
  if (!ctx || !y || !report || !xs || !values)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: ctx, y, xs, values and report must not be "
                   "NULL");
  memset(report, 0, sizeof *report);
  if (n == 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: n is 0: no tensor to check");
  if (opts && opts->struct_size == 0)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: opts->struct_size is 0; fill the options with "
                   "tyto_gradcheck_options_init() first");
  check c;
  memset(&c, 0, sizeof c);
  c.ctx = ctx;
  c.rep = report;
  tyto_gradcheck_options_init(&c.o);
  if (opts)
    memcpy(&c.o, opts,
           opts->struct_size < sizeof c.o ? opts->struct_size : sizeof c.o);
  c.o.struct_size = sizeof c.o;
  tyto_graph *g = y->graph;
  if (tyto_tensor_is_error(y) || tyto_graph_status(g) != TYTO_OK)
    return graph_error(g);
  c.dtype = y->dtype;
  /* Central differences with a step that the format can represent need
   * at least f32's precision; the default tolerances know f32 and f64. */
  if (!dtype_host_arith(c.dtype))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: y is %s, expected f32 or f64 (finite "
                   "differences in a 2-byte format measure its rounding, "
                   "not the derivative); build the function in f32 or f64",
                   tyto_dtype_name(c.dtype));
  int f64 = c.dtype == TYTO_F64;
  if (c.o.step <= 0)
    c.o.step = f64 ? 1e-6 : 1e-3;
  if (c.o.rtol <= 0)
    c.o.rtol = f64 ? 1e-6 : 2e-2;
  if (c.o.atol <= 0)
    c.o.atol = f64 ? 1e-8 : 2e-3;
  if (!(c.o.modes & (TYTO_GRADCHECK_REVERSE | TYTO_GRADCHECK_FORWARD)))
    c.o.modes = TYTO_GRADCHECK_REVERSE | TYTO_GRADCHECK_FORWARD;
  if (c.o.n_fixed && (!c.o.fixed || !c.o.fixed_values))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: n_fixed is %zu but fixed or fixed_values is "
                   "NULL",
                   c.o.n_fixed);
  tyto_status st = TYTO_OK;
  for (size_t k = 0; k < n && st == TYTO_OK; k++)
    st = check_bindable("xs", k, xs[k], g, values[k]);
  for (size_t k = 0; k < c.o.n_fixed && st == TYTO_OK; k++)
    st = check_bindable("fixed", k, c.o.fixed[k], g, c.o.fixed_values[k]);
  /* A tensor given twice would be bound to two values at once. */
  for (size_t k = 1; k < n + c.o.n_fixed && st == TYTO_OK; k++) {
    tyto_tensor *a = k < n ? xs[k] : c.o.fixed[k - n];
    for (size_t j = 0; j < k; j++) {
      tyto_tensor *b = j < n ? xs[j] : c.o.fixed[j - n];
      if (a == b) {
        st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "gradcheck: tensor #%lld is given twice (%s[%zu] and "
                     "%s[%zu])",
                     (long long)a->index, j < n ? "xs" : "fixed",
                     j < n ? j : j - n, k < n ? "xs" : "fixed",
                     k < n ? k : k - n);
        break;
      }
    }
  }
  if (st != TYTO_OK)
    return st;
  c.n_bind = n + c.o.n_fixed;
  c.bind = calloc(c.n_bind ? c.n_bind : 1, sizeof *c.bind);
  c.val = calloc(c.n_bind ? c.n_bind : 1, sizeof *c.val);
  int64_t most = tyto_tensor_numel(y);
  if (!c.bind || !c.val) {
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    goto out;
  }
  for (size_t k = 0; k < c.n_bind && st == TYTO_OK; k++) {
    tyto_tensor *t = k < n ? xs[k] : c.o.fixed[k - n];
    const void *v = k < n ? values[k] : c.o.fixed_values[k - n];
    int64_t nk = tyto_tensor_numel(t);
    if (t->dtype != c.dtype) {
      st = rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "gradcheck: %s[%zu] is %s, y is %s", k < n ? "xs" : "fixed",
                   k < n ? k : k - n, tyto_dtype_name(t->dtype),
                   tyto_dtype_name(c.dtype));
      break;
    }
    c.bind[k] = t;
    c.val[k] = malloc((size_t)(nk ? nk : 1) * sizeof **c.val);
    if (!c.val[k]) {
      st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
      break;
    }
    from_dtype(c.val[k], v, nk, t->dtype);
    if (nk > most)
      most = nk;
  }
  if (st == TYTO_OK)
    st = check_sources(&c, y);
  if (st != TYTO_OK)
    goto out;
  c.scratch_bytes = (size_t)(most ? most : 1) * tyto_dtype_size(c.dtype);
  if (!(c.scratch = malloc(c.scratch_bytes))) {
    st = rt_fail(TYTO_ERR_OUT_OF_MEMORY, "gradcheck: out of memory");
    goto out;
  }
  st = run_checks(&c, y, n, xs);
  if (st == TYTO_OK && report->n_checked == 0) {
    report->passed = 1;
    snprintf(report->message, sizeof report->message,
             "gradcheck passed: nothing to compare (y or every x is empty)");
  } else if (st == TYTO_OK) {
    report->passed = report->ratio <= 1.0;
    snprintf(report->message, sizeof report->message,
             "gradcheck %s: %zu elements; worst: %s, %s element %lld: "
             "analytic %.10g, numeric %.10g, error %.3g (%.3g of the "
             "tolerance %.3g + %.3g * |numeric|)",
             report->passed ? "passed" : "FAILED", report->n_checked,
             report->mode == TYTO_GRADCHECK_FORWARD ? "forward" : "reverse",
             report->mode == TYTO_GRADCHECK_FORWARD ? "J.v" : "gradient",
             (long long)report->element, report->analytic, report->numeric,
             report->abs_error, report->ratio, c.o.atol, c.o.rtol);
    if (report->mode == TYTO_GRADCHECK_REVERSE && n > 1) {
      size_t len = strlen(report->message);
      snprintf(report->message + len, sizeof report->message - len,
               " [input %zu]", report->input);
    }
  }
out:
  if (c.val)
    for (size_t k = 0; k < c.n_bind; k++)
      free(c.val[k]);
  free(c.val);
  free(c.bind);
  free(c.scratch);
  return st;
}
