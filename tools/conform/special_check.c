/*
 * The checks of the special-value cases (see specials.h): the device's
 * outputs against the host model of sdk/docs/ops.md, refusals, launches
 * that must fail, and FUSED programs against their instructions run one by
 * one (stepwise.h).
 */
#include "specials.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "fmt.h"
#include "model.h"
#include "stepwise.h"

#define OP(x) TYTO_PLUGIN_OP_##x

static double *as_doubles(const cf_tensor *t, const void *bytes) {
  double *d = malloc((size_t)(t->storage ? t->storage : 1) * sizeof *d);
  if (d == NULL)
    return NULL;
  for (int64_t i = 0; i < t->storage; i++)
    d[i] = cf_fmt_load(t->l.dtype, bytes, i);
  return d;
}

/* Ops whose 16-bit results are checked bit for bit: those a device
 * computes in f32 exactly or correctly rounded on any hardware (IEEE
 * addition, multiplication and fma, selections, comparisons, moves), so
 * that only the two roundings ops.md allows (the exact value rounded once
 * to the dtype, or through f32) can come out, and a tie of the format
 * must go to even. Division is not among them (GPUs divide in f32 to
 * 2.5 ulp), nor LEAKY_RELU (its slope is read into f32 first). */
static int ieee_exact(uint32_t op) {
  switch (op) {
  case OP(COPY):
  case OP(FILL):
  case OP(NEG):
  case OP(ABS):
  case OP(SIGN):
  case OP(SQUARE):
  case OP(RELU):
  case OP(FLOOR):
  case OP(CEIL):
  case OP(ROUND):
  case OP(CAST):
  case OP(ADD):
  case OP(SUB):
  case OP(MUL):
  case OP(MAX):
  case OP(MIN):
  case OP(EQ):
  case OP(NE):
  case OP(LT):
  case OP(LE):
  case OP(GT):
  case OP(GE):
  case OP(WHERE):
  case OP(FMA):
  case OP(MAX_REDUCE):
  case OP(MIN_REDUCE):
  case OP(ARGMAX):
  case OP(ARGMIN):
  case OP(PAD):
  case OP(GATHER):
  case OP(ONE_HOT):
  case OP(MAX_POOL2D):
  case OP(MAX_POOL2D_SELECT): return 1;
  default: return 0;
  }
}

/* Whether c's results are compared bit for bit with the model's. */
static int strict(const cf_case *c) {
  return c->bitwise || (cf_dtype_16(c->dtype) && ieee_exact(c->op));
}

/* Whether got matches want: NaN for NaN, the same infinity, a zero of the
 * same sign unless free_sign, else within the case's tolerance (strict:
 * the same value). */
static int match(const cf_case *c, double got, double want, int free_sign) {
  if (isnan(want))
    return isnan(got);
  if (isinf(want) || !isfinite(got))
    return got == want;
  if (want == 0 && got == 0 && !free_sign)
    return signbit(want) == signbit(got);
  if (strict(c))
    return got == want;
  return fabs(got - want) <= c->atol + c->rtol * fabs(want);
}

static int elementwise(const cf_case *c) {
  return c->op == OP(FUSED) || c->op == OP(COPY) ||
         (c->op >= OP(NEG) && c->op <= OP(FMA));
}

/* v for a message: %.9g, and for a bit-for-bit check its exact value in
 * hex too (a tie and its neighbours print alike in decimal). */
static const char *show(const cf_case *c, double v, char buf[48]) {
  if (strict(c) && isfinite(v) && v != 0)
    snprintf(buf, 48, "%.9g (%a)", v, v);
  else
    snprintf(buf, 48, "%.9g", v);
  return buf;
}

/* The answers the model allows: [0] the exact value rounded once, then
 * (where they differ) rounded through f32, and each with subnormals
 * flushed. */
typedef struct wants {
  cf_expect e[4];
  int n;
  int flush_from; /* e[k] for k >= flush_from are the flushed ones */
} wants;

/* Compares outputs got[] with the model over the elements of output
 * positions whose batch index (axis 0) is `only` (-1: every element).
 * Returns the number of mismatches; the first is described in msg. */
static int64_t compare(const cf_case *c, double *const *in, double *const *got,
                       int64_t *const *ints, const wants *w, int64_t only,
                       char *msg, size_t size) {
  int64_t bad = 0;
  for (uint32_t o = 0; o < c->n_out; o++) {
    const tyto_plugin_layout *l = &c->out[o].l;
    int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
    if (cf_shape_count(l->rank, l->shape) == 0)
      continue;
    do {
      if (only >= 0 && idx[0] != only)
        continue;
      const int64_t at = cf_layout_at(l, idx);
      const double g = got[o][at], v = w->e[0].want[o][at];
      int ok = 0;
      /* Integers exactly, as stored: the model's wanted values are whole
       * numbers (or saturated ones) a double holds. */
      for (int k = 0; k < w->n && !ok; k++)
        ok = ints[o]
                 ? ints[o][at] == cf_fmt_to_int(l->dtype, w->e[k].want[o][at])
                 : match(c, g, w->e[k].want[o][at], w->e[k].free_sign[o][at]);
      if (ok || bad++ > 0)
        continue;
      /* The other answers allowed, named. */
      char alt[160] = "";
      size_t n = 0;
      for (int k = 1; k < w->n && n < sizeof alt; k++) {
        const double a = w->e[k].want[o][at];
        int seen = cf_fmt_same(a, v);
        for (int j = 1; j < k; j++)
          seen |= cf_fmt_same(a, w->e[j].want[o][at]);
        if (!seen)
          n += (size_t)snprintf(alt + n, sizeof alt - n, " (or %.9g, %s)", a,
                                k >= w->flush_from ? "flushing subnormals"
                                                   : "rounding through f32");
      }
      char gs[48], vs[48], as[48];
      if (elementwise(c) && c->n_in > 0) {
        char args[160] = "";
        size_t m = 0;
        for (uint32_t i = 0; i < c->n_in && m < sizeof args; i++)
          m += (size_t)snprintf(args + m, sizeof args - m, "%s%s",
                                i ? ", " : "", show(c, in[i][at], as));
        snprintf(msg, size, "%s(%s) output %u: got %s, want %s%s%s", c->op_name,
                 args, o, show(c, g, gs), show(c, v, vs), alt,
                 strict(c) ? " bit for bit" : "");
      } else {
        snprintf(msg, size, "output %u element %lld: got %s, want %s%s%s", o,
                 (long long)at, show(c, g, gs), show(c, v, vs), alt,
                 strict(c) ? " bit for bit" : "");
      }
    } while (cf_index_next(l->rank, l->shape, idx));
  }
  return bad;
}

/* Whether some element of matrix `b` (axis 0) of c's outputs is NaN. */
static int has_nan(const cf_case *c, double *const *got, int64_t b) {
  for (uint32_t o = 0; o < c->n_out; o++) {
    const tyto_plugin_layout *l = &c->out[o].l;
    int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
    do {
      if (idx[0] == b && isnan(got[o][cf_layout_at(l, idx)]))
        return 1;
    } while (cf_index_next(l->rank, l->shape, idx));
  }
  return 0;
}

/* prepare (and supports_op) must refuse c. */
static cf_verdict expect_refused(cf_device *d, cf_case *c, char *msg,
                                 size_t size) {
  tyto_plugin_op_desc desc;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki;
  if (d->fns->prepare == NULL) {
    snprintf(msg, size, "memory-only device (no prepare)");
    return CF_V_UNSUPPORTED;
  }
  cf_case_desc(c, &desc);
  memset(&ki, 0, sizeof ki);
  ki.struct_size = sizeof ki;
  tyto_plugin_error *e = d->fns->prepare(d->dev, &desc, &k, &ki);
  if (e != NULL) {
    tyto_plugin_code code = cf_error_take(e, msg, size);
    return code == TYTO_PLUGIN_ERR_UNSUPPORTED ? CF_V_UNSUPPORTED : CF_V_PASS;
  }
  if (k && d->fns->kernel_release)
    d->fns->kernel_release(d->dev, k);
  snprintf(msg, size,
           "prepare accepted attributes (%g, %g): expected an error, "
           "INVALID_ARGUMENT (sdk/docs/random.md)",
           c->fattrs[0], c->n_fattrs > 1 ? c->fattrs[1] : 0.0);
  return CF_V_FAIL;
}

/* supports_op (where the device has it) and prepare must both refuse c
 * with TYTO_PLUGIN_ERR_UNSUPPORTED: an op ops.md does not define for the
 * dtype. */
static cf_verdict expect_unsupported(cf_device *d, cf_case *c, char *msg,
                                     size_t size) {
  tyto_plugin_op_desc desc;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki;
  char why[1024];
  const char *dt = cf_fmt_name(c->dtype);
  if (d->fns->prepare == NULL) {
    snprintf(msg, size, "memory-only device (no prepare)");
    return CF_V_UNSUPPORTED;
  }
  cf_case_desc(c, &desc);
  for (int f = 0; f < 2; f++) {
    tyto_plugin_error *e;
    const char *fn = f ? "prepare" : "supports_op";
    memset(&ki, 0, sizeof ki);
    ki.struct_size = sizeof ki;
    if (f == 0 && d->fns->supports_op == NULL)
      continue;
    e = f ? d->fns->prepare(d->dev, &desc, &k, &ki)
          : d->fns->supports_op(d->dev, &desc);
    if (e == NULL) {
      if (k && d->fns->kernel_release)
        d->fns->kernel_release(d->dev, k);
      if (cf_fmt_int(c->dtype))
        snprintf(msg, size,
                 "%s accepted %s on %s: the op is not defined for the integer "
                 "dtypes (sdk/docs/ops.md, Integer dtypes); refuse it with "
                 "TYTO_PLUGIN_ERR_UNSUPPORTED",
                 fn, c->op_name, dt);
      else
        snprintf(msg, size,
                 "%s accepted %s in %s: linear algebra is not defined for the "
                 "16-bit dtypes (sdk/docs/ops.md, Dtypes); refuse it with "
                 "TYTO_PLUGIN_ERR_UNSUPPORTED",
                 fn, c->op_name, dt);
      return CF_V_FAIL;
    }
    const tyto_plugin_code code = cf_error_take(e, why, sizeof why);
    if (code != TYTO_PLUGIN_ERR_UNSUPPORTED) {
      snprintf(msg, size,
               "%s refused %s in %s with code %d (%.600s); expected "
               "TYTO_PLUGIN_ERR_UNSUPPORTED (%d): the op is not defined for "
               "the dtype (sdk/docs/ops.md, Dtypes)",
               fn, c->op_name, dt, (int)code, why,
               (int)TYTO_PLUGIN_ERR_UNSUPPORTED);
      return CF_V_FAIL;
    }
  }
  return CF_V_PASS;
}

/* The model's answers for c (see wants). Returns -1 when out of memory. */
static int model_wants(const cf_case *c, double *const *in, wants *w) {
  const int via = cf_dtype_16(c->dtype) && c->op != OP(CAST);
  memset(w, 0, sizeof *w);
  w->flush_from = 4; /* none flushed */
  for (int ftz = 0; ftz <= !c->exact; ftz++) {
    if (ftz)
      w->flush_from = w->n;
    for (int v = 0; v <= via; v++) {
      if (cf_model_run(c, in, ftz, v, &w->e[w->n]) != 0)
        return -1;
      w->n++;
    }
  }
  return 0;
}

static void wants_free(wants *w) {
  for (int k = 0; k < w->n; k++)
    cf_expect_free(&w->e[k]);
  w->n = 0;
}

cf_verdict cf_special_run(cf_device *d, cf_case *c, const void *const *in_bytes,
                          const void *const *out_init, char *msg, size_t size) {
  double *in[CF_MAX_IN] = {NULL};
  wants w;
  cf_run r;
  cf_verdict v = CF_V_PASS;
  tyto_plugin_stream *saved = d->stream, *fresh = NULL;
  msg[0] = '\0';
  if (c->expect == CF_EXPECT_REFUSED)
    return expect_refused(d, c, msg, size);
  if (c->expect == CF_EXPECT_UNSUPPORTED)
    return expect_unsupported(d, c, msg, size);
  if (c->expect == CF_EXPECT_STEPWISE)
    return cf_stepwise_run(d, c, in_bytes, out_init, msg, size);
  /* A launch expected to fail runs on a stream of its own, so that its
   * error cannot reach later cases. */
  if (c->expect != CF_EXPECT_VALUES) {
    tyto_plugin_error *e = d->fns->stream_create(d->dev, &fresh);
    if (e != NULL) {
      cf_error_take(e, msg, size);
      return CF_V_ERROR;
    }
    d->stream = fresh;
  }
  cf_status st = cf_run_case(d, c, in_bytes, out_init, &r);
  d->stream = saved;
  if (fresh)
    d->fns->stream_destroy(d->dev, fresh);
  if (st == CF_UNSUPPORTED) {
    snprintf(msg, size, "%s", r.msg);
    return CF_V_UNSUPPORTED;
  }
  if (st == CF_FAILED) {
    const int launch = strncmp(r.msg, "launch:", 7) == 0;
    snprintf(msg, size, "%s", r.msg);
    if (launch && c->expect != CF_EXPECT_VALUES)
      return CF_V_PASS; /* the error it must (or may) give */
    return CF_V_ERROR;
  }
  if (r.oob) {
    snprintf(msg, size, "%s", r.oob_msg);
    cf_run_clear(&r);
    return CF_V_OOB;
  }
  if (c->expect == CF_EXPECT_RUN_ERROR) {
    snprintf(msg, size,
             "the launch succeeded: expected launch or stream_synchronize "
             "to fail (INVALID_ARGUMENT) for a step that is not a whole "
             "number in [0, 2^53] (sdk/docs/random.md)");
    cf_run_clear(&r);
    return CF_V_FAIL;
  }
  for (uint32_t i = 0; i < c->n_in; i++)
    if ((in[i] = as_doubles(&c->in[i], in_bytes[i])) == NULL)
      v = CF_V_ERROR;
  if (v == CF_V_PASS && model_wants(c, in, &w) != 0) {
    wants_free(&w);
    v = CF_V_ERROR;
  }
  if (v == CF_V_ERROR) {
    snprintf(msg, size, "out of host memory");
  } else {
    cf_post_apply(c, r.out);
    int64_t bad =
        compare(c, in, r.out, r.ints, &w,
                c->expect == CF_EXPECT_NAN_OR_ERROR ? 0 : -1, msg, size);
    if (bad > 0) {
      size_t n = strlen(msg);
      snprintf(msg + n, size - n, " (%lld elements differ from ops.md)",
               (long long)bad);
      v = CF_V_FAIL;
    } else if (c->expect == CF_EXPECT_NAN_OR_ERROR && !has_nan(c, r.out, 1)) {
      snprintf(msg, size,
               "matrix 1 of the batch holds a NaN, but none of its results "
               "is NaN: expected an error or a NaN in its results");
      v = CF_V_FAIL;
    }
    wants_free(&w);
  }
  for (uint32_t i = 0; i < CF_MAX_IN; i++)
    free(in[i]);
  cf_run_clear(&r);
  return v;
}
