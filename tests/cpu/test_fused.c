/* The CPU plugin's FUSED kernel through the plugin ABI.
 *
 * The reference for every fused program is the same program run one op at
 * a time through the plugin's own single-op kernels (harness_run): FUSED
 * promises bit-identical results, so outputs are compared bit for bit
 * (two NaNs count as equal, wherever the random program makes them). The
 * attribute test also checks closed forms in float64 (tolerance 1e-6
 * relative for f32: one rounding of the inputs and one of the result).
 * Refusals are checked by message, from supports_op and prepare alike. */
#include "cpu/fused_harness.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* The reference: one op at a time                                           */
/* ------------------------------------------------------------------------ */

/* Runs every instruction of p alone; vals[i] is value i as a tensor of the
 * outputs' shape (INPUT: the input itself, layout and all; CONST: a
 * stride-0 tensor). Returns the number of values filled. */
static void reference(harness *hx, const prog *p, h_tensor *in, uint32_t dt,
                      uint32_t rank, const int64_t *shape, h_tensor *vals,
                      int *own) {
  for (uint32_t i = 0; i < p->n; i++) {
    const tyto_plugin_fused_instr *x = &p->ins[i];
    own[i] = 0;
    memset(&vals[i], 0, sizeof vals[i]);
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      vals[i] = in[x->arg[0]];
      continue;
    }
    own[i] = 1;
    if (x->op == TYTO_PLUGIN_FUSED_CONST) {
      double c = dt == F32 ? (double)(float)x->attr : x->attr;
      vals[i] = h_tensor_new(dt, 0, shape, &c);
      vals[i].layout.rank = rank;
      for (uint32_t a = 0; a < rank; a++) {
        vals[i].layout.shape[a] = shape[a];
        vals[i].layout.strides[a] = 0;
      }
      continue;
    }
    int arity = x->op <= TYTO_PLUGIN_OP_ROUND ? 1
                : x->op <= TYTO_PLUGIN_OP_GE  ? 2
                                              : 3;
    h_tensor args[3];
    for (int k = 0; k < arity; k++)
      args[k] = vals[x->arg[k]];
    vals[i] = h_tensor_new(dt, rank, shape, NULL);
    int attr =
        x->op == TYTO_PLUGIN_OP_LEAKY_RELU || x->op == TYTO_PLUGIN_OP_ELU;
    const char *e = harness_run(hx, x->op, args, (uint32_t)arity, &vals[i], 1,
                                NULL, 0, &x->attr, attr ? 1 : 0);
    ck_assert_msg(e == NULL, "single op %u: %s", x->op, e);
  }
}

static int same_bits(double a, double b) {
  if (isnan(a) && isnan(b))
    return 1;
  return memcmp(&a, &b, sizeof a) == 0;
}

/* Steps idx through shape (row-major); returns 0 after the last. */
static int next_index(int64_t *idx, uint32_t rank, const int64_t *shape) {
  for (uint32_t a = rank; a-- > 0;) {
    if (++idx[a] < shape[a])
      return 1;
    idx[a] = 0;
  }
  return 0;
}

static int64_t numel(uint32_t rank, const int64_t *shape) {
  int64_t n = 1;
  for (uint32_t a = 0; a < rank; a++)
    n *= shape[a];
  return n;
}

/* Compares output k of a fused run with the value its OUTPUT names, and
 * checks the storage the layout does not reach still holds `fill` (or,
 * for an output bound to an input's buffer, outside[i]). */
static void check_output(const h_tensor *o, const h_tensor *want, double fill,
                         const double *outside, const char *what, uint32_t k) {
  uint32_t rank = o->layout.rank;
  const int64_t *shape = o->layout.shape;
  unsigned char *hit = calloc((size_t)o->storage + 1, 1);
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  if (numel(rank, shape) > 0)
    do {
      int64_t at = h_at(o, idx), wt = h_at(want, idx);
      hit[at] = 1;
      if (!same_bits(o->values[at], want->values[wt]))
        ck_abort_msg("%s: output %u element %lld is %.17g, one op at a time "
                     "gives %.17g",
                     what, k, (long long)at, o->values[at], want->values[wt]);
    } while (next_index(idx, rank, shape));
  for (int64_t i = 0; i < o->storage; i++)
    if (!hit[i] && !same_bits(o->values[i], outside ? outside[i] : fill))
      ck_abort_msg("%s: output %u storage element %lld outside the layout "
                   "changed to %.17g",
                   what, k, (long long)i, o->values[i]);
  free(hit);
}

/* Runs p fused and one op at a time and compares every output. */
static void check_program(harness *hx, const prog *p, h_tensor *in,
                          uint32_t n_in, h_tensor *out, uint32_t n_out,
                          const int *alias, const char *what) {
  uint32_t dt = out[0].layout.dtype, rank = out[0].layout.rank;
  const int64_t *shape = out[0].layout.shape;
  h_tensor *vals = calloc(p->n, sizeof *vals);
  int *own = calloc(p->n, sizeof *own);
  reference(hx, p, in, dt, rank, shape, vals, own);
  const double fill = 12345.0;
  for (uint32_t k = 0; k < n_out; k++)
    for (int64_t i = 0; i < out[k].storage; i++)
      out[k].values[i] = fill;
  const char *e = fused_run(hx, p, in, n_in, out, n_out, alias);
  ck_assert_msg(e == NULL, "%s: %s", what, e);
  for (uint32_t i = 0; i < p->n; i++) {
    const tyto_plugin_fused_instr *x = &p->ins[i];
    if (x->op != TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    uint32_t k = x->arg[1];
    /* An output bound to an input's buffer keeps that input's values
     * outside the layout. */
    const double *outside = alias && alias[k] >= 0 ? in[alias[k]].values : NULL;
    check_output(&out[k], &vals[x->arg[0]], fill, outside, what, k);
  }
  for (uint32_t i = 0; i < p->n; i++)
    if (own[i])
      h_tensor_free(&vals[i]);
  free(vals);
  free(own);
}

/* ------------------------------------------------------------------------ */
/* Random programs                                                           */
/* ------------------------------------------------------------------------ */

static uint64_t rng_state;
static uint32_t rnd_u(uint32_t n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)((rng_state >> 33) % n);
}
static double rnd_d(double lo, double hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * ((double)(rng_state >> 11) / 9007199254740992.0);
}

/* Ops random programs draw from, total on the reals first (most draws),
 * then ones whose domain the values may leave (NaN, inf: compared by
 * position). */
static const uint32_t safe_ops[] = {
    TYTO_PLUGIN_OP_NEG,     TYTO_PLUGIN_OP_ABS,      TYTO_PLUGIN_OP_SIGN,
    TYTO_PLUGIN_OP_EXP,     TYTO_PLUGIN_OP_SQUARE,   TYTO_PLUGIN_OP_SIN,
    TYTO_PLUGIN_OP_COS,     TYTO_PLUGIN_OP_ATAN,     TYTO_PLUGIN_OP_TANH,
    TYTO_PLUGIN_OP_SIGMOID, TYTO_PLUGIN_OP_RELU,     TYTO_PLUGIN_OP_LEAKY_RELU,
    TYTO_PLUGIN_OP_ELU,     TYTO_PLUGIN_OP_SOFTPLUS, TYTO_PLUGIN_OP_ERF,
    TYTO_PLUGIN_OP_FLOOR,   TYTO_PLUGIN_OP_CEIL,     TYTO_PLUGIN_OP_ROUND,
    TYTO_PLUGIN_OP_ASINH,   TYTO_PLUGIN_OP_ADD,      TYTO_PLUGIN_OP_SUB,
    TYTO_PLUGIN_OP_MUL,     TYTO_PLUGIN_OP_MAX,      TYTO_PLUGIN_OP_MIN,
    TYTO_PLUGIN_OP_ATAN2,   TYTO_PLUGIN_OP_EQ,       TYTO_PLUGIN_OP_NE,
    TYTO_PLUGIN_OP_LT,      TYTO_PLUGIN_OP_LE,       TYTO_PLUGIN_OP_GT,
    TYTO_PLUGIN_OP_GE,      TYTO_PLUGIN_OP_WHERE,    TYTO_PLUGIN_OP_FMA,
    TYTO_PLUGIN_OP_ADD,     TYTO_PLUGIN_OP_MUL,      TYTO_PLUGIN_OP_FMA,
    TYTO_PLUGIN_OP_WHERE};
static const uint32_t wild_ops[] = {
    TYTO_PLUGIN_OP_LOG,   TYTO_PLUGIN_OP_SQRT,  TYTO_PLUGIN_OP_RSQRT,
    TYTO_PLUGIN_OP_DIV,   TYTO_PLUGIN_OP_POW,   TYTO_PLUGIN_OP_RECIPROCAL,
    TYTO_PLUGIN_OP_LOG1P, TYTO_PLUGIN_OP_EXPM1, TYTO_PLUGIN_OP_TAN,
    TYTO_PLUGIN_OP_COSH,  TYTO_PLUGIN_OP_ASIN,  TYTO_PLUGIN_OP_ATANH};
#define NSAFE (sizeof safe_ops / sizeof safe_ops[0])
#define NWILD (sizeof wild_ops / sizeof wild_ops[0])

/* A random shape; the size class spans 0, 1, odd small sizes and sizes
 * that take many blocks and pool tasks. */
static uint32_t random_shape(int64_t *shape) {
  uint32_t c = rnd_u(20), rank;
  if (c == 0) { /* empty */
    rank = 1 + rnd_u(3);
    for (uint32_t a = 0; a < rank; a++)
      shape[a] = 1 + rnd_u(4);
    shape[rnd_u(rank)] = 0;
  } else if (c == 1) { /* one element */
    rank = rnd_u(3);
    for (uint32_t a = 0; a < rank; a++)
      shape[a] = 1;
  } else if (c < 16) { /* small, odd */
    rank = 1 + rnd_u(4);
    for (uint32_t a = 0; a < rank; a++)
      shape[a] = 1 + rnd_u(9);
  } else if (c < 18) { /* rows of a few blocks */
    rank = 2;
    shape[0] = 1 + rnd_u(5);
    shape[1] = 250 + rnd_u(3000);
  } else { /* many blocks and pool tasks */
    static const int64_t big[4][3] = {
        {70001, 0, 0}, {3, 40009, 0}, {301, 299, 0}, {5, 131, 157}};
    uint32_t b = rnd_u(4);
    rank = b == 0 ? 1 : b == 3 ? 3 : 2;
    for (uint32_t a = 0; a < rank; a++)
      shape[a] = big[b][a];
  }
  return rank;
}

/* An input of `shape`: contiguous, broadcast on some axes, permuted,
 * stepped or flipped; values in [-3, 3] with some whole numbers. */
static h_tensor random_input(uint32_t dt, uint32_t rank, const int64_t *shape,
                             int *proper) {
  int64_t st[TYTO_PLUGIN_MAX_RANK];
  uint32_t perm[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t a = 0; a < rank; a++)
    perm[a] = a;
  uint32_t kind = rnd_u(5);
  *proper = kind != 1;
  if (kind == 2) /* permuted */
    for (uint32_t a = rank; a > 1; a--) {
      uint32_t b = rnd_u(a), t = perm[a - 1];
      perm[a - 1] = perm[b];
      perm[b] = t;
    }
  int64_t n = kind == 3 ? 2 : 1; /* stepped: gaps between elements */
  for (uint32_t q = rank; q-- > 0;) {
    uint32_t a = perm[q];
    if (kind == 1 && rnd_u(2)) { /* broadcast */
      st[a] = 0;
      continue;
    }
    st[a] = n;
    n *= shape[a] ? shape[a] : 1;
  }
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  int64_t off = kind == 0 ? rnd_u(3) : 0, storage = n + off;
  for (uint32_t a = 0; a < rank; a++) {
    t.layout.strides[a] = st[a];
    if (kind == 4 && rnd_u(2) && shape[a] > 0) { /* flipped */
      t.layout.strides[a] = -st[a];
      off += (shape[a] - 1) * st[a];
    }
  }
  t.layout.offset = off;
  free(t.values);
  t.storage = storage > 0 ? storage : 1;
  t.values = calloc((size_t)t.storage, sizeof(double));
  for (int64_t i = 0; i < t.storage; i++) {
    double v = rnd_u(8) == 0 ? (double)((int)rnd_u(5) - 2) : rnd_d(-3, 3);
    t.values[i] = dt == F32 ? (double)(float)v : v;
  }
  return t;
}

/* An output of `shape`: contiguous, with its last two axes transposed,
 * or with a gap after every element. */
static h_tensor random_output(uint32_t dt, uint32_t rank,
                              const int64_t *shape) {
  h_tensor t = h_tensor_new(dt, rank, shape, NULL);
  uint32_t kind = rnd_u(3);
  if (kind == 1 && rank >= 2) {
    t.layout.strides[rank - 1] = shape[rank - 2];
    t.layout.strides[rank - 2] = 1;
  } else if (kind == 2) {
    for (uint32_t a = 0; a < rank; a++)
      t.layout.strides[a] *= 2;
    free(t.values);
    t.storage = 2 * t.storage + 1;
    t.values = calloc((size_t)t.storage, sizeof(double));
  }
  return t;
}

static void random_program(harness *hx, int which) {
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  uint32_t rank = random_shape(shape);
  uint32_t dt = rnd_u(2) ? F64 : F32;
  uint32_t n_in = 1 + rnd_u(6), n_out = 1 + rnd_u(3);
  h_tensor in[MAXV], out[MAXV];
  int proper[MAXV], alias[MAXV];
  for (uint32_t j = 0; j < n_in; j++)
    in[j] = random_input(dt, rank, shape, &proper[j]);
  for (uint32_t k = 0; k < n_out; k++) {
    out[k] = random_output(dt, rank, shape);
    alias[k] = -1;
  }
  prog p = {.n = 0, .dtype = dt};
  for (uint32_t j = 0; j < n_in; j++)
    IN(&p, j);
  if (rnd_u(3) == 0)
    IN(&p, rnd_u(n_in)); /* the same input twice */
  uint32_t n_ops = 1 + rnd_u(14);
  for (uint32_t i = 0; i < n_ops; i++) {
    if (rnd_u(8) == 0) {
      CONST(&p, rnd_u(2) ? rnd_d(-2, 2) : (double)((int)rnd_u(5) - 2));
      continue;
    }
    uint32_t op = rnd_u(6) ? safe_ops[rnd_u(NSAFE)] : wild_ops[rnd_u(NWILD)];
    int arity = op <= TYTO_PLUGIN_OP_ROUND ? 1
                : op <= TYTO_PLUGIN_OP_GE  ? 2
                                           : 3;
    uint32_t a[3];
    for (int k = 0; k < arity; k++) /* favour recent values: deep chains */
      a[k] = rnd_u(2) ? p.n - 1 - rnd_u(p.n < 3 ? p.n : 3) : rnd_u(p.n);
    double attr = op == TYTO_PLUGIN_OP_LEAKY_RELU ? rnd_d(0.01, 0.5)
                  : op == TYTO_PLUGIN_OP_ELU      ? rnd_d(0.5, 2)
                                                  : 0;
    emit(&p, op, a[0], arity > 1 ? a[1] : 0, arity > 2 ? a[2] : 0, attr);
  }
  /* Output 0 is the last value (the deepest); others anything defined,
   * inputs and constants included. OUTPUTs come in random order. */
  uint32_t src[MAXV], order[MAXV];
  uint32_t last = p.n - 1;
  for (uint32_t k = 0; k < n_out; k++) {
    src[k] = k == 0 ? last : rnd_u(p.n);
    order[k] = k;
  }
  for (uint32_t k = n_out; k > 1; k--) {
    uint32_t b = rnd_u(k), t = order[k - 1];
    order[k - 1] = order[b];
    order[b] = t;
  }
  for (uint32_t k = 0; k < n_out; k++)
    OUT(&p, src[order[k]], order[k]);
  /* Sometimes update an input in place, as the host plans. */
  uint32_t j = rnd_u(n_in);
  int inplace = rnd_u(4) == 0 && proper[j];
  if (inplace) {
    uint32_t k = rnd_u(n_out);
    h_tensor_free(&out[k]);
    out[k] = h_tensor_new(dt, rank, shape, NULL);
    out[k].layout = in[j].layout;
    free(out[k].values);
    out[k].storage = in[j].storage;
    out[k].values = calloc((size_t)out[k].storage, sizeof(double));
    alias[k] = (int)j;
  }
  char what[96];
  snprintf(what, sizeof what,
           "program %d (%s, %u inputs, %u outputs, %lld elements%s)", which,
           dt == F32 ? "f32" : "f64", n_in, n_out,
           (long long)numel(rank, shape), inplace ? ", in place" : "");
  check_program(hx, &p, in, n_in, out, n_out, alias, what);
  for (uint32_t q = 0; q < n_in; q++)
    h_tensor_free(&in[q]);
  for (uint32_t q = 0; q < n_out; q++)
    h_tensor_free(&out[q]);
}

START_TEST(test_random_programs) {
  harness hx;
  harness_open(&hx);
  rng_state = 20240611u;
  for (int i = 0; i < 300; i++)
    random_program(&hx, i);
  harness_close(&hx);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Directed cases                                                            */
/* ------------------------------------------------------------------------ */

/* LEAKY_RELU and ELU with their attr, CONST, WHERE and FMA, against closed
 * forms as well as one op at a time. */
START_TEST(test_attr_const_where_fma) {
  harness hx;
  harness_open(&hx);
  for (uint32_t dt = F32; dt <= F64; dt++) {
    const int64_t n = 1001;
    h_tensor in[2], out[4];
    in[0] = h_tensor_new(dt, 1, &n, NULL);
    in[1] = h_tensor_new(dt, 1, &n, NULL);
    for (int64_t i = 0; i < n; i++) {
      in[0].values[i] = dt == F32 ? (double)(float)(-4.0 + 0.008 * (double)i)
                                  : -4.0 + 0.008 * (double)i;
      in[1].values[i] = (double)(i % 7) - 3.0;
    }
    for (int k = 0; k < 4; k++)
      out[k] = h_tensor_new(dt, 1, &n, NULL);
    prog p = {.n = 0, .dtype = dt};
    uint32_t x = IN(&p, 0), y = IN(&p, 1);
    uint32_t c = CONST(&p, 0.25);
    uint32_t lr = emit(&p, TYTO_PLUGIN_OP_LEAKY_RELU, x, 0, 0, 0.125);
    uint32_t el = emit(&p, TYTO_PLUGIN_OP_ELU, x, 0, 0, 0.5);
    uint32_t gt = OP2(&p, GT, y, c);
    uint32_t wh = OP3(&p, WHERE, gt, lr, el);
    uint32_t fm = OP3(&p, FMA, x, y, c);
    OUT(&p, wh, 0);
    OUT(&p, fm, 1);
    OUT(&p, c, 2);
    OUT(&p, el, 3);
    check_program(&hx, &p, in, 2, out, 4, NULL, "attr ops");
    double tol = dt == F32 ? 1e-6 : 1e-14;
    for (int64_t i = 0; i < n; i++) {
      double xv = in[0].values[i], yv = in[1].values[i];
      double lrv = xv < 0 ? 0.125 * xv : xv;
      double elv = xv < 0 ? 0.5 * expm1(xv) : xv;
      ck_assert(h_close(out[0].values[i], yv > 0.25 ? lrv : elv, tol, 1e-30));
      ck_assert(h_close(out[1].values[i], xv * yv + 0.25, tol, 1e-30));
      ck_assert(out[2].values[i] == 0.25);
      ck_assert(h_close(out[3].values[i], elv, tol, 1e-30));
    }
    for (int k = 0; k < 2; k++)
      h_tensor_free(&in[k]);
    for (int k = 0; k < 4; k++)
      h_tensor_free(&out[k]);
  }
  harness_close(&hx);
}
END_TEST

/* Adam's update in place: m, v and p are read and rewritten in one pass;
 * every input of an element is read before an output is written. */
START_TEST(test_in_place) {
  harness hx;
  harness_open(&hx);
  const int64_t shape[2] = {37, 4099}; /* many blocks and pool tasks */
  for (uint32_t dt = F32; dt <= F64; dt++) {
    h_tensor in[4], out[3];
    for (int j = 0; j < 4; j++) {
      in[j] = h_tensor_new(dt, 2, shape, NULL);
      for (int64_t i = 0; i < in[j].storage; i++) {
        double v = sin(0.37 * (double)i + j) + (j == 2 ? 1.5 : 0.0);
        in[j].values[i] = dt == F32 ? (double)(float)v : v;
      }
    }
    /* inputs: p, g, v, m; outputs: p, m, v bound to inputs 0, 3, 2 */
    int alias[3] = {0, 3, 2};
    for (int k = 0; k < 3; k++)
      out[k] = h_tensor_new(dt, 2, shape, NULL);
    prog q = {.n = 0, .dtype = dt};
    uint32_t p = IN(&q, 0), g = IN(&q, 1), v = IN(&q, 2), m = IN(&q, 3);
    uint32_t b1 = CONST(&q, 0.9), nb1 = CONST(&q, 0.1);
    uint32_t b2 = CONST(&q, 0.999), nb2 = CONST(&q, 0.001);
    uint32_t m2 = OP2(&q, ADD, OP2(&q, MUL, b1, m), OP2(&q, MUL, nb1, g));
    uint32_t v2 = OP3(&q, FMA, b2, v, OP2(&q, MUL, nb2, OP1(&q, SQUARE, g)));
    uint32_t den = OP2(&q, ADD, OP1(&q, SQRT, v2), CONST(&q, 1e-8));
    uint32_t p2 =
        OP2(&q, SUB, p, OP2(&q, MUL, CONST(&q, 1e-3), OP2(&q, DIV, m2, den)));
    OUT(&q, p2, 0);
    OUT(&q, m2, 1);
    OUT(&q, v2, 2);
    check_program(&hx, &q, in, 4, out, 3, alias, "adam in place");
    /* A swap: each output is the other input, stored in place of the
     * first; then a pass-through plus a sum into the same two buffers. */
    prog sw = {.n = 0, .dtype = dt};
    uint32_t x = IN(&sw, 0), y = IN(&sw, 1);
    OUT(&sw, y, 0);
    OUT(&sw, x, 1);
    int alias2[2] = {0, 1};
    check_program(&hx, &sw, in, 2, out, 2, alias2, "swap in place");
    sw.n = 2;
    OUT(&sw, OP2(&sw, ADD, x, y), 1);
    OUT(&sw, x, 0);
    check_program(&hx, &sw, in, 2, out, 2, alias2, "sum in place");
    for (int j = 0; j < 4; j++)
      h_tensor_free(&in[j]);
    for (int k = 0; k < 3; k++)
      h_tensor_free(&out[k]);
  }
  harness_close(&hx);
}
END_TEST

/* More live values than fit the register file's target (smaller blocks)
 * and than fit a task's stack (the heap). */
START_TEST(test_many_registers) {
  harness hx;
  harness_open(&hx);
  const int64_t n = 5003;
  int counts[2] = {60, 170};
  for (int c = 0; c < 2; c++) {
    h_tensor in = h_tensor_new(F64, 1, &n, NULL),
             out = h_tensor_new(F64, 1, &n, NULL);
    for (int64_t i = 0; i < n; i++)
      in.values[i] = 0.001 * (double)i;
    prog p = {.n = 0, .dtype = F64};
    uint32_t x = IN(&p, 0);
    uint32_t v[200] = {0};
    for (int k = 0; k < counts[c]; k++)
      v[k] = OP2(&p, MUL, x, CONST(&p, 1.0 + k)); /* all live to the end */
    uint32_t s = v[0];
    for (int k = 1; k < counts[c]; k++)
      s = OP2(&p, ADD, s, v[k]);
    OUT(&p, s, 0);
    check_program(&hx, &p, &in, 1, &out, 1, NULL, "many registers");
    h_tensor_free(&in);
    h_tensor_free(&out);
  }
  harness_close(&hx);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Refusals                                                                  */
/* ------------------------------------------------------------------------ */

/* The message a FUSED op over fresh f32 [2,3] tensors is refused with. */
static const char *refused(harness *hx, const prog *p, uint32_t n_in,
                           uint32_t n_out) {
  const int64_t s23[2] = {2, 3};
  h_tensor in[MAXV + 1], out[MAXV + 1];
  for (uint32_t j = 0; j < n_in; j++)
    in[j] = h_tensor_new(F32, 2, s23, NULL);
  for (uint32_t k = 0; k < n_out; k++)
    out[k] = h_tensor_new(F32, 2, s23, NULL);
  const char *e = fused_run(hx, p, in, n_in, out, n_out, NULL);
  for (uint32_t j = 0; j < n_in; j++)
    h_tensor_free(&in[j]);
  for (uint32_t k = 0; k < n_out; k++)
    h_tensor_free(&out[k]);
  return e ? e : "(accepted)";
}

/* Prepares a descriptor as given and returns the refusal (supports_op's,
 * checked to equal prepare's). */
static const char *refused_desc(harness *hx, const tyto_plugin_op_desc *d) {
  const tyto_plugin_device_fns *f = &hx->dev->plugin->dfns;
  tyto_plugin_device *h = hx->dev->handle;
  tyto_plugin_error *e = f->supports_op(h, d);
  if (!e)
    return "(accepted)";
  snprintf(hx->error, sizeof hx->error, "%s", rt_error_message(e));
  rt_error_free(e);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  e = f->prepare(h, d, &k, &ki);
  ck_assert_ptr_nonnull(e);
  ck_assert_str_eq(rt_error_message(e), hx->error);
  rt_error_free(e);
  return hx->error;
}

START_TEST(test_refusals) {
  harness hx;
  harness_open(&hx);
  prog p = {.n = 0};
  /* a well-formed base: out0 = in0 + in1 */
  uint32_t a = IN(&p, 0), b = IN(&p, 1);
  OUT(&p, OP2(&p, ADD, a, b), 0);
  ck_assert_str_eq(refused(&hx, &p, 2, 1), "(accepted)");

  prog q = p;
  q.ins[2].arg[1] = 5; /* ADD reads value 5 */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 2 reads value 5, which is not defined "
                   "before it (operands must name earlier instructions)");
  q = p;
  q.ins[2].arg[0] = 2; /* ADD reads itself */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 2 reads value 2, which is not defined "
                   "before it (operands must name earlier instructions)");
  q = p;
  q.ins[3].arg[0] = 3; /* OUTPUT of itself */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 3 reads value 3, which is not defined "
                   "before it (operands must name earlier instructions)");
  q = p;
  OP1(&q, NEG, 3); /* reads the OUTPUT */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 4 reads value 3, which is an OUTPUT "
                   "and defines no value");
  q = p;
  q.ins[1].arg[0] = 2; /* INPUT 2 of 2 */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 1 reads input 2, but the op has 2 "
                   "inputs");
  q = p;
  q.ins[2].op = 12345;
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 2 has op code 12345, which is neither "
                   "INPUT, CONST, OUTPUT nor an elementwise op (NEG .. "
                   "ROUND, CAST, ADD .. GE, WHERE, FMA)");
  q = p;
  q.ins[2].op = TYTO_PLUGIN_OP_SUM; /* an op, but not elementwise */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 2 has op code 128, which is neither "
                   "INPUT, CONST, OUTPUT nor an elementwise op (NEG .. "
                   "ROUND, CAST, ADD .. GE, WHERE, FMA)");
  q = p;
  OUT(&q, 2, 0); /* output 0 twice */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 4 writes output 0, which instruction "
                   "3 already writes (each output is written exactly once)");
  q = p;
  q.ins[3].arg[1] = 1; /* output 1 of 1 */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: instruction 3 writes output 1, but the op has 1 "
                   "output");
  ck_assert_str_eq(refused(&hx, &p, 2, 2), /* output 1 never written */
                   "fused: output 1 is never written (expected one OUTPUT "
                   "instruction for each of the 2 outputs)");
  q = p;
  q.n = 0;
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: the program has no instructions (expected at "
                   "least one OUTPUT for each of the 1 outputs)");
  q = p;
  q.n = 3; /* no OUTPUT at all */
  ck_assert_str_eq(refused(&hx, &q, 2, 1),
                   "fused: output 0 is never written (expected one OUTPUT "
                   "instruction for each of the 1 outputs)");
  ck_assert_str_eq(refused(&hx, &p, 0, 1),
                   "fused: expected 1 to 16 inputs and 1 to 16 outputs, got "
                   "0 and 1");
  ck_assert_str_eq(refused(&hx, &p, 2, 0),
                   "fused: expected 1 to 16 inputs and 1 to 16 outputs, got "
                   "2 and 0");
  ck_assert_str_eq(refused(&hx, &p, 17, 1),
                   "fused: 17 inputs and 1 outputs described (at most 16 of "
                   "each, with their layouts)");

  /* Blob and struct sizes, shapes and dtypes: descriptors built here. */
  const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  h_tensor in[2] = {h_tensor_new(F32, 2, s23, NULL),
                    h_tensor_new(F32, 2, s23, NULL)};
  h_tensor out[2] = {h_tensor_new(F32, 2, s23, NULL),
                     h_tensor_new(F32, 2, s23, NULL)};
  tyto_plugin_layout lin[2], lout[2];
  tyto_plugin_fused_program fp = {sizeof fp, p.n, p.ins};
  tyto_plugin_op_desc d = fused_desc(in, 2, out, 1, lin, lout, &fp, sizeof fp);
  ck_assert_str_eq(refused_desc(&hx, &d), "(accepted)");
  d.blob = NULL;
  d.blob_size = 0;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: expected a tyto_plugin_fused_program of at least "
                   "24 bytes as the blob, got no blob and 0 bytes");
  d.blob = &fp;
  d.blob_size = 12;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: expected a tyto_plugin_fused_program of at least "
                   "24 bytes as the blob, got 12 bytes");
  d.blob_size = sizeof fp;
  fp.struct_size = 8;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: the program's struct_size is 8, expected at least "
                   "24 (a tyto_plugin_fused_program of ABI 1.2)");
  fp.struct_size = sizeof fp;
  fp.instrs = NULL;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: the program has 4 instructions but no instruction "
                   "array");
  prog small = p;
  small.ins[0].struct_size = 16;
  fp.instrs = small.ins;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: the instructions' struct_size is 16, expected at "
                   "least 32 (a tyto_plugin_fused_instr of ABI 1.2)");
  fp.instrs = p.ins;
  lin[1].dtype = F64; /* ABI 1.5: mixed dtypes meet only through CAST */
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: instruction 2 (add) reads values of dtypes f32 and "
                   "f64; convert with CAST first");
  lin[1].dtype = F32;
  lin[1].shape[0] = 3;
  lin[1].shape[1] = 2;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: input 1 has shape [3,2] but the output has shape "
                   "[2,3] (inputs must arrive broadcast to the output's "
                   "shape)");
  lin[1] = in[1].layout;
  /* two outputs: the second must match the first */
  prog p2 = p;
  OUT(&p2, 0, 1);
  tyto_plugin_fused_program fp2 = {sizeof fp2, p2.n, p2.ins};
  h_tensor o32 = h_tensor_new(F32, 2, s32, NULL);
  h_tensor_free(&out[1]);
  out[1] = h_tensor_new(F64, 2, s23, NULL);
  d = fused_desc(in, 2, out, 2, lin, lout, &fp2, sizeof fp2);
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: instruction 4 writes a value of dtype f32 to "
                   "output 1, whose dtype is f64");
  lout[1] = o32.layout;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: output 1 has shape [3,2] but output 0 has shape "
                   "[2,3] (all outputs must have one shape)");
  lout[1] = out[0].layout;
  lout[1].strides[0] = 0;
  ck_assert_str_eq(refused_desc(&hx, &d),
                   "fused: output 1 has stride 0 on axis 0 of extent 2; each "
                   "output element must have its own place");
  lout[1] = out[0].layout;
  ck_assert_str_eq(refused_desc(&hx, &d), "(accepted)");
  h_tensor_free(&o32);
  for (int k = 0; k < 2; k++) {
    h_tensor_free(&in[k]);
    h_tensor_free(&out[k]);
  }
  harness_close(&hx);
}
END_TEST

static Suite *fused_suite(void) {
  Suite *s = suite_create("cpu_fused");
  TCase *tc = tcase_create("fused");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_refusals);
  tcase_add_test(tc, test_attr_const_where_fma);
  tcase_add_test(tc, test_in_place);
  tcase_add_test(tc, test_many_registers);
  tcase_add_test(tc, test_random_programs);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return test_run(fused_suite());
}
