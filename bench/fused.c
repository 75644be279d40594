/*
 * bench/fused: the CPU plugin's FUSED kernel (a vectorised interpreter over
 * L1-sized blocks) against the alternatives, in one run:
 *
 *   unfused  the same ops launched one kernel at a time, intermediates in
 *            memory (what runs without the fuse pass);
 *   fused    one FUSED kernel;
 *   C loop   the expression as one hand-written C loop compiled ahead of
 *            time (-O3, restrict, AVX-512/AVX2 clones), split over as
 *            many threads as the plugin's pool: the best C generated and
 *            compiled at run time could do;
 *   cc       the wall time of compiling such generated C (emitted here from
 *            the same program) with `cc -O2 -shared -fPIC`, the price a
 *            run-time code generator pays per new kernel.
 *
 * Two expressions: Adam's update (4 inputs p, g, m, v; 3 outputs p', m',
 * v'; 14 ops) and a 6-op chain sigmoid(x*w + b) * tanh(y) + x; f32, at 4K,
 * 256K and 4M elements. Also checks that all three give the same bits.
 * Prints a table, then one line starting with "BENCH ".
 *
 *   build/bench/fused [--quick]
 *
 * Not a test: nothing here fails on timing.
 */
#include "config.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tyto/tyto.h>

#include "runtime/error.h"
#include "runtime/runtime.h"

/* The plugin's elementwise loops, compiled here for the baseline ISA: the
 * C loop below borrows their e^x. */
#define ELT_SUF bench
#include "../plugins/cpu/eltwise_ops.h"
#include "../plugins/cpu/eltwise_kern.h"

extern char **environ;

#define MAXI 64
#define MAXB 64 /* buffers of one variant */
/* The plugin runs smaller ops on the calling thread alone; so does the C
 * loop here. */
#define PAR_MIN 65536

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* The expressions                                                           */
/* ------------------------------------------------------------------------ */

typedef void (*hand_fn)(size_t lo, size_t hi, float *const *out,
                        const float *const *in);

typedef struct expr {
  const char *name;
  uint32_t n_in, n_out, n_ops;
  tyto_plugin_fused_instr ins[MAXI];
  uint32_t n;
  hand_fn hand;
} expr;

static uint32_t emit(expr *x, uint32_t op, uint32_t a0, uint32_t a1,
                     double attr) {
  tyto_plugin_fused_instr *i = &x->ins[x->n];
  memset(i, 0, sizeof *i);
  i->struct_size = sizeof *i;
  i->op = op;
  i->arg[0] = a0;
  i->arg[1] = a1;
  i->attr = attr;
  if (op < TYTO_PLUGIN_FUSED_INPUT)
    x->n_ops++;
  return x->n++;
}

#define IN(x, k) emit(x, TYTO_PLUGIN_FUSED_INPUT, k, 0, 0)
#define CONST(x, c) emit(x, TYTO_PLUGIN_FUSED_CONST, 0, 0, c)
#define OUT(x, v, k) emit(x, TYTO_PLUGIN_FUSED_OUTPUT, v, k, 0)
#define OP1(x, o, a) emit(x, TYTO_PLUGIN_OP_##o, a, 0, 0)
#define OP2(x, o, a, b) emit(x, TYTO_PLUGIN_OP_##o, a, b, 0)

/* Adam (Kingma & Ba 2015, Algorithm 1) at step t = 10. */
static const double b1 = 0.9, b2 = 0.999, lr = 1e-3, eps = 1e-8;
#define ADAM_C1 (1.0 - 0.3486784401)      /* 1 - b1^10 */
#define ADAM_C2 (1.0 - 0.990044880209748) /* 1 - b2^10 */

/* The C loops: at -O3, restrict, cloned for AVX-512, AVX2 and the
 * baseline and picked at load time: what a code generator could ask of
 * the compiler (-O3 -march=native). */
#pragma GCC push_options
#pragma GCC optimize("O3", "no-math-errno")
#define HAND_ISA __attribute__((target_clones("avx512f", "avx2", "default")))

HAND_ISA static void adam_body(size_t lo, size_t hi, float *restrict po,
                               float *restrict mo, float *restrict vo,
                               const float *restrict p, const float *restrict g,
                               const float *restrict m,
                               const float *restrict v) {
  const float fb1 = (float)b1, fnb1 = (float)(1 - b1), fb2 = (float)b2,
              fnb2 = (float)(1 - b2), fc1 = (float)ADAM_C1,
              fc2 = (float)ADAM_C2, flr = (float)lr, feps = (float)eps;
  for (size_t i = lo; i < hi; i++) {
    float mi = fb1 * m[i] + fnb1 * g[i];
    float vi = fb2 * v[i] + fnb2 * (g[i] * g[i]);
    po[i] = p[i] - flr * ((mi / fc1) / (sqrtf(vi / fc2) + feps));
    mo[i] = mi;
    vo[i] = vi;
  }
}

static void adam_hand(size_t lo, size_t hi, float *const *out,
                      const float *const *in) {
  adam_body(lo, hi, out[0], out[1], out[2], in[0], in[1], in[2], in[3]);
}

/* sigmoid and tanh with the plugin's own e^x and tanh (eltwise_kern.h):
 * the same bits as FUSED. */
HAND_ISA static void chain_body(size_t lo, size_t hi, float *restrict o,
                                const float *restrict x,
                                const float *restrict w,
                                const float *restrict b,
                                const float *restrict y) {
  for (size_t i = lo; i < hi; i++) {
    float t = x[i] * w[i] + b[i];
    float s = 1.0f / (1.0f + k_bench_expf_v(-t));
    o[i] = s * k_bench_tanhf_v(y[i]) + x[i];
  }
}

static void chain_hand(size_t lo, size_t hi, float *const *out,
                       const float *const *in) {
  chain_body(lo, hi, out[0], in[0], in[1], in[2], in[3]);
}
#pragma GCC pop_options

static void adam(expr *x) {
  memset(x, 0, sizeof *x);
  x->name = "adam";
  x->n_in = 4;
  x->n_out = 3;
  x->hand = adam_hand;
  uint32_t p = IN(x, 0), g = IN(x, 1), m = IN(x, 2), v = IN(x, 3);
  uint32_t m2 = OP2(x, ADD, OP2(x, MUL, CONST(x, b1), m),
                    OP2(x, MUL, CONST(x, 1 - b1), g));
  uint32_t v2 = OP2(x, ADD, OP2(x, MUL, CONST(x, b2), v),
                    OP2(x, MUL, CONST(x, 1 - b2), OP2(x, MUL, g, g)));
  uint32_t mh = OP2(x, DIV, m2, CONST(x, ADAM_C1));
  uint32_t vh = OP2(x, DIV, v2, CONST(x, ADAM_C2));
  uint32_t den = OP2(x, ADD, OP1(x, SQRT, vh), CONST(x, eps));
  uint32_t p2 = OP2(x, SUB, p, OP2(x, MUL, CONST(x, lr), OP2(x, DIV, mh, den)));
  OUT(x, p2, 0);
  OUT(x, m2, 1);
  OUT(x, v2, 2);
}

static void chain(expr *e) {
  memset(e, 0, sizeof *e);
  e->name = "chain6";
  e->n_in = 4;
  e->n_out = 1;
  e->hand = chain_hand;
  uint32_t x = IN(e, 0), w = IN(e, 1), b = IN(e, 2), y = IN(e, 3);
  uint32_t s = OP1(e, SIGMOID, OP2(e, ADD, OP2(e, MUL, x, w), b));
  OUT(e, OP2(e, ADD, OP2(e, MUL, s, OP1(e, TANH, y)), x), 0);
}

/* ------------------------------------------------------------------------ */
/* The hand-written loop, on as many threads as the pool                     */
/* ------------------------------------------------------------------------ */

/* A team of threads - 1 workers that sleep on a condition variable between
 * jobs, as the plugin's pool does, so the loop pays a wake-up per run and
 * no thread creation. */
typedef struct team {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  unsigned threads, busy;
  uint64_t gen;
  int quit;
  hand_fn fn;
  float *const *out;
  const float *const *in;
  size_t n;
  pthread_t tid[64];
  unsigned started;
} team;

typedef struct team_arg {
  team *t;
  unsigned index;
} team_arg;

static team_arg team_args[64];

static void *team_main(void *arg) {
  team_arg *a = arg;
  team *t = a->t;
  uint64_t seen = 0;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (!t->quit && t->gen == seen)
      pthread_cond_wait(&t->wake, &t->mu);
    if (t->quit)
      break;
    seen = t->gen;
    size_t lo = t->n * a->index / t->threads,
           hi = t->n * (a->index + 1) / t->threads;
    pthread_mutex_unlock(&t->mu);
    t->fn(lo, hi, t->out, t->in);
    pthread_mutex_lock(&t->mu);
    if (--t->busy == 0)
      pthread_cond_signal(&t->done);
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

static void team_start(team *t, unsigned threads) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->wake, NULL);
  pthread_cond_init(&t->done, NULL);
  t->threads = threads > 64 ? 64 : threads ? threads : 1;
  for (unsigned i = 1; i < t->threads; i++) {
    team_args[i] = (team_arg){t, i};
    if (pthread_create(&t->tid[t->started], NULL, team_main, &team_args[i]))
      break;
    t->started++;
  }
  t->threads = t->started + 1;
}

static void team_stop(team *t) {
  pthread_mutex_lock(&t->mu);
  t->quit = 1;
  pthread_cond_broadcast(&t->wake);
  pthread_mutex_unlock(&t->mu);
  for (unsigned i = 0; i < t->started; i++)
    pthread_join(t->tid[i], NULL);
  pthread_cond_destroy(&t->done);
  pthread_cond_destroy(&t->wake);
  pthread_mutex_destroy(&t->mu);
}

static void hand_run(team *t, hand_fn fn, size_t n, float *const *out,
                     const float *const *in) {
  if (n < PAR_MIN || t->threads <= 1) {
    fn(0, n, out, in);
    return;
  }
  pthread_mutex_lock(&t->mu);
  t->fn = fn;
  t->out = out;
  t->in = in;
  t->n = n;
  t->busy = t->started;
  t->gen++;
  pthread_cond_broadcast(&t->wake);
  pthread_mutex_unlock(&t->mu);
  fn(0, n / t->threads, out, in);
  pthread_mutex_lock(&t->mu);
  while (t->busy)
    pthread_cond_wait(&t->done, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------------------ */
/* Running through the plugin                                                */
/* ------------------------------------------------------------------------ */

typedef struct bench {
  const tyto_plugin_device_fns *f;
  tyto_plugin_device *h;
  tyto_plugin_stream *s;
  unsigned threads;
  team team; /* runs the C loops */
} bench;

static tyto_plugin_layout layout1(int64_t n, int64_t stride) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = TYTO_PLUGIN_DTYPE_F32;
  l.rank = 1;
  l.shape[0] = n;
  l.strides[0] = stride;
  return l;
}

static tyto_plugin_buffer *buffer(bench *b, size_t n, float fill_lo,
                                  float fill_hi, unsigned seed) {
  tyto_plugin_buffer *buf = NULL;
  if (b->f->buffer_alloc(b->h, n * 4, &buf))
    return NULL;
  float *p = b->f->buffer_host_ptr(b->h, buf);
  uint64_t st = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < n; i++) {
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = fill_lo +
           (fill_hi - fill_lo) * (float)((double)(st >> 40) / 16777216.0);
  }
  return buf;
}

/* One kernel launch with its bindings. */
typedef struct launch {
  tyto_plugin_kernel *k;
  uint32_t n_in, n_out;
  tyto_plugin_binding in[TYTO_PLUGIN_FUSED_MAX_IO],
      out[TYTO_PLUGIN_FUSED_MAX_IO];
} launch;

typedef struct variant {
  launch l[MAXI];
  uint32_t n;
  tyto_plugin_buffer *own[MAXB]; /* buffers to free */
  uint32_t n_own;
} variant;

static tyto_plugin_binding bind(tyto_plugin_buffer *buf) {
  tyto_plugin_binding bd = {sizeof bd, buf, 0};
  return bd;
}

static int prepare(bench *b, tyto_plugin_op_desc *d, launch *l, char *why,
                   size_t cap) {
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_error *e = b->f->prepare(b->h, d, &l->k, &ki);
  if (e) {
    snprintf(why, cap, "%s", rt_error_message(e));
    rt_error_free(e);
    return -1;
  }
  return 0;
}

/* The expression as one FUSED kernel. */
static int build_fused(bench *b, const expr *x, int64_t n,
                       tyto_plugin_buffer **in, tyto_plugin_buffer **out,
                       variant *v, char *why, size_t cap) {
  memset(v, 0, sizeof *v);
  tyto_plugin_layout lin[TYTO_PLUGIN_FUSED_MAX_IO],
      lout[TYTO_PLUGIN_FUSED_MAX_IO];
  launch *l = &v->l[v->n++];
  for (uint32_t j = 0; j < x->n_in; j++) {
    lin[j] = layout1(n, 1);
    l->in[j] = bind(in[j]);
  }
  for (uint32_t k = 0; k < x->n_out; k++) {
    lout[k] = layout1(n, 1);
    l->out[k] = bind(out[k]);
  }
  l->n_in = x->n_in;
  l->n_out = x->n_out;
  tyto_plugin_fused_program fp = {sizeof fp, x->n, x->ins};
  tyto_plugin_op_desc d = {sizeof d,  TYTO_PLUGIN_OP_FUSED,
                           x->n_in,   x->n_out,
                           lin,       lout,
                           0,         NULL,
                           0,         NULL,
                           sizeof fp, &fp};
  return prepare(b, &d, l, why, cap);
}

/* The expression as one kernel per op; constants are stride-0 scalars,
 * intermediates fresh buffers, and an op whose value is an output writes
 * that output directly (as a planned program would). */
static int build_unfused(bench *b, const expr *x, int64_t n,
                         tyto_plugin_buffer **in, tyto_plugin_buffer **out,
                         variant *v, char *why, size_t cap) {
  memset(v, 0, sizeof *v);
  tyto_plugin_buffer *val[MAXI] = {0};
  int scalar[MAXI] = {0};
  for (uint32_t i = 0; i < x->n; i++)
    if (x->ins[i].op == TYTO_PLUGIN_FUSED_OUTPUT)
      val[x->ins[i].arg[0]] = out[x->ins[i].arg[1]];
  for (uint32_t i = 0; i < x->n; i++) {
    const tyto_plugin_fused_instr *t = &x->ins[i];
    if (t->op == TYTO_PLUGIN_FUSED_OUTPUT)
      continue;
    if (t->op == TYTO_PLUGIN_FUSED_INPUT) {
      val[i] = in[t->arg[0]];
      continue;
    }
    if (t->op == TYTO_PLUGIN_FUSED_CONST) {
      val[i] = v->own[v->n_own++] = buffer(b, 1, 0, 0, 0);
      if (!val[i])
        return -1;
      *(float *)b->f->buffer_host_ptr(b->h, val[i]) = (float)t->attr;
      scalar[i] = 1;
      continue;
    }
    if (!val[i] &&
        !(val[i] = v->own[v->n_own++] = buffer(b, (size_t)n, 0, 0, 0)))
      return -1;
    uint32_t arity = t->op <= TYTO_PLUGIN_OP_ROUND ? 1 : 2;
    tyto_plugin_layout lin[2], lout = layout1(n, 1);
    launch *l = &v->l[v->n++];
    for (uint32_t k = 0; k < arity; k++) {
      lin[k] = layout1(n, scalar[t->arg[k]] ? 0 : 1);
      l->in[k] = bind(val[t->arg[k]]);
    }
    l->out[0] = bind(val[i]);
    l->n_in = arity;
    l->n_out = 1;
    tyto_plugin_op_desc d = {sizeof d, t->op, arity, 1,    lin, &lout,
                             0,        NULL,  0,     NULL, 0,   NULL};
    if (prepare(b, &d, l, why, cap))
      return -1;
  }
  return 0;
}

static void variant_free(bench *b, variant *v) {
  for (uint32_t i = 0; i < v->n; i++)
    b->f->kernel_release(b->h, v->l[i].k);
  for (uint32_t i = 0; i < v->n_own; i++)
    b->f->buffer_free(b->h, v->own[i]);
}

static int variant_run(bench *b, const variant *v) {
  for (uint32_t i = 0; i < v->n; i++) {
    const launch *l = &v->l[i];
    tyto_plugin_error *e =
        b->f->launch(b->h, b->s, l->k, l->in, l->n_in, l->out, l->n_out, NULL);
    if (e) {
      fprintf(stderr, "bench/fused: %s\n", rt_error_message(e));
      rt_error_free(e);
      return -1;
    }
  }
  return 0;
}

static void sync_stream(bench *b) {
  tyto_plugin_error *e = b->f->stream_synchronize(b->h, b->s);
  if (e) {
    fprintf(stderr, "bench/fused: %s\n", rt_error_message(e));
    rt_error_free(e);
  }
}

/* Seconds per run of the variant: best of 3 timed batches after a
 * warm-up batch. */
static double time_variant(bench *b, const variant *v, int iters) {
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = now();
    for (int it = 0; it < iters; it++)
      if (variant_run(b, v))
        return -1;
    sync_stream(b);
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  return best;
}

static double time_hand(team *tm, hand_fn fn, size_t n, int iters,
                        float *const *out, const float *const *in) {
  double best = 1e30;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = now();
    for (int it = 0; it < iters; it++)
      hand_run(tm, fn, n, out, in);
    double t = (now() - t0) / iters;
    if (rep > 0 && t < best)
      best = t;
  }
  return best;
}

/* ------------------------------------------------------------------------ */
/* Generated C and its compile time                                          */
/* ------------------------------------------------------------------------ */

/* The plugin's f32 e^x and tanh (eltwise_kern.h), which generated code
 * would have to carry to give the interpreter's bits. */
static const char math_src[] =
    "static inline float tyto_expf(float x) {\n"
    "  const float hi = 88.72283935546875f, lo = -103.972084045410f;\n"
    "  float xc = x > hi ? hi : (x < lo ? lo : (x == x ? x : 0.0f));\n"
    "  float t = xc * 1.44269504088896341f + 12582912.0f;\n"
    "  float n = t - 12582912.0f;\n"
    "  float r = xc - n * 0.693359375f;\n"
    "  r = r - n * -2.12194440e-4f;\n"
    "  float p = 1.9875691500e-4f;\n"
    "  p = p * r + 1.3981999507e-3f;\n"
    "  p = p * r + 8.3334519073e-3f;\n"
    "  p = p * r + 4.1665795894e-2f;\n"
    "  p = p * r + 1.6666665459e-1f;\n"
    "  p = p * r + 5.0000001201e-1f;\n"
    "  float y = p * (r * r) + r + 1.0f;\n"
    "  int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;\n"
    "  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) "
    "<< 23;\n"
    "  float s1, s2;\n"
    "  memcpy(&s1, &b1, sizeof s1);\n"
    "  memcpy(&s2, &b2, sizeof s2);\n"
    "  y = y * s1 * s2;\n"
    "  y = x > hi ? INFINITY : (x < lo ? 0.0f : y);\n"
    "  return x != x ? x : y;\n"
    "}\n"
    "static inline float tyto_tanhf(float x) {\n"
    "  float a = fabsf(x), z = a * a;\n"
    "  float p = -5.70498872745e-3f;\n"
    "  p = p * z + 2.06390887954e-2f;\n"
    "  p = p * z - 5.37397155531e-2f;\n"
    "  p = p * z + 1.33314422036e-1f;\n"
    "  p = p * z - 3.33332819422e-1f;\n"
    "  float small = a + a * z * p;\n"
    "  float big = 1.0f - 2.0f / (tyto_expf(2.0f * a) + 1.0f);\n"
    "  float r = copysignf(a < 0.625f ? small : big, x);\n"
    "  return x != x ? x : r;\n"
    "}\n";

/* Writes the C a code generator would emit for x: one loop over a range,
 * one statement per instruction. Returns 0, or -1 for an op it does not
 * know. */
static int generate_c(const expr *x, FILE *f) {
  fprintf(f,
          "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n"
          "#include <string.h>\n%s\n",
          math_src);
  /* restrict parameters: GCC ignores restrict on local pointers, and
   * versions a loop over 7 pointers for aliasing no more. */
  fprintf(f, "static void body(size_t lo, size_t hi");
  for (uint32_t k = 0; k < x->n_out; k++)
    fprintf(f, ", float *restrict o%u", k);
  for (uint32_t j = 0; j < x->n_in; j++)
    fprintf(f, ", const float *restrict i%u", j);
  fprintf(f, ") {\n  for (size_t i = lo; i < hi; i++) {\n");
  for (uint32_t i = 0; i < x->n; i++) {
    const tyto_plugin_fused_instr *t = &x->ins[i];
    unsigned a = t->arg[0], b = t->arg[1];
    switch (t->op) {
    case TYTO_PLUGIN_FUSED_INPUT:
      fprintf(f, "    const float v%u = i%u[i];\n", i, a);
      break;
    case TYTO_PLUGIN_FUSED_CONST:
      fprintf(f, "    const float v%u = %af;\n", i, (double)(float)t->attr);
      break;
    case TYTO_PLUGIN_FUSED_OUTPUT:
      fprintf(f, "    o%u[i] = v%u;\n", b, a);
      break;
    case TYTO_PLUGIN_OP_ADD:
      fprintf(f, "    const float v%u = v%u + v%u;\n", i, a, b);
      break;
    case TYTO_PLUGIN_OP_SUB:
      fprintf(f, "    const float v%u = v%u - v%u;\n", i, a, b);
      break;
    case TYTO_PLUGIN_OP_MUL:
      fprintf(f, "    const float v%u = v%u * v%u;\n", i, a, b);
      break;
    case TYTO_PLUGIN_OP_DIV:
      fprintf(f, "    const float v%u = v%u / v%u;\n", i, a, b);
      break;
    case TYTO_PLUGIN_OP_SQRT:
      fprintf(f, "    const float v%u = sqrtf(v%u);\n", i, a);
      break;
    case TYTO_PLUGIN_OP_TANH:
      fprintf(f, "    const float v%u = tyto_tanhf(v%u);\n", i, a);
      break;
    case TYTO_PLUGIN_OP_SIGMOID:
      fprintf(f, "    const float v%u = 1.0f / (1.0f + tyto_expf(-v%u));\n", i,
              a);
      break;
    default: return -1;
    }
  }
  fprintf(f,
          "  }\n}\n\nvoid tyto_fused_%s(size_t lo, size_t hi, "
          "float *const *out,\n    const float *const *in) {\n"
          "  body(lo, hi",
          x->name);
  for (uint32_t k = 0; k < x->n_out; k++)
    fprintf(f, ", out[%u]", k);
  for (uint32_t j = 0; j < x->n_in; j++)
    fprintf(f, ", in[%u]", j);
  fprintf(f, ");\n}\n");
  return 0;
}

/* The generated C of an expression compiled at run time: how long `cc`
 * took (best of 3, and the first), and the loaded kernel. */
typedef struct gen {
  double first, best; /* seconds; best < 0: no working cc */
  void *so;
  hand_fn fn; /* NULL unless loaded */
} gen;

/* Compiles x's generated C with `cc <flags> -shared -fPIC` three times;
 * with `load`, dlopens the result. */
static void gen_build(const expr *x, const char *const *flags, int load,
                      gen *g) {
  memset(g, 0, sizeof *g);
  g->best = -1;
  char dir[] = "/tmp/tyto-bench-fused-XXXXXX";
  if (!mkdtemp(dir))
    return;
  char src[64], lib[64];
  snprintf(src, sizeof src, "%s/k.c", dir);
  snprintf(lib, sizeof lib, "%s/k.so", dir);
  FILE *f = fopen(src, "w");
  int ok = f && generate_c(x, f) == 0;
  if (f)
    fclose(f);
  char *argv[16];
  int argc = 0;
  argv[argc++] = "cc";
  for (int i = 0; flags[i]; i++)
    argv[argc++] = (char *)flags[i];
  const char *tail_args[] = {"-shared", "-fPIC", "-o", lib, src, NULL};
  for (int i = 0; tail_args[i]; i++)
    argv[argc++] = (char *)tail_args[i];
  argv[argc] = NULL;
  for (int rep = 0; ok && rep < 3; rep++) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    double t0 = now();
    pid_t pid;
    int status = 0;
    int rc = posix_spawnp(&pid, "cc", &fa, NULL, argv, environ);
    if (rc == 0)
      waitpid(pid, &status, 0);
    double t = now() - t0;
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      g->best = -1;
      break;
    }
    if (rep == 0)
      g->first = t;
    if (g->best < 0 || t < g->best)
      g->best = t;
  }
  if (g->best >= 0 && load && (g->so = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) {
    char sym[64];
    snprintf(sym, sizeof sym, "tyto_fused_%s", x->name);
    void *p = dlsym(g->so, sym);
    memcpy(&g->fn, &p, sizeof p); /* POSIX: object to function pointer */
  }
  unlink(src);
  unlink(lib);
  rmdir(dir);
}

/* ------------------------------------------------------------------------ */

enum { V_UNFUSED, V_FUSED, V_HAND, V_GEN, NV };

typedef struct result {
  double t[NV];      /* seconds per run; 0: not run */
  size_t differ[NV]; /* elements whose bits differ from fused */
} result;

static size_t count_diff(const float *a, const float *b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    d += memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

static int run_case(bench *b, const expr *x, hand_fn gen_fn, size_t n,
                    int quick, result *r, char *why, size_t cap) {
  memset(r, 0, sizeof *r);
  tyto_plugin_buffer *in[4], *out[NV][3];
  static const float lo[4] = {-1, -1, -0.1f, 0}, hi[4] = {1, 1, 0.1f, 0.01f};
  for (uint32_t j = 0; j < x->n_in; j++)
    if (!(in[j] = buffer(b, n, lo[j], hi[j], j + 1)))
      return -1;
  for (int v = 0; v < NV; v++)
    for (uint32_t k = 0; k < x->n_out; k++)
      if (!(out[v][k] = buffer(b, n, 0, 0, 0)))
        return -1;
  variant vu, vf;
  int rc = build_unfused(b, x, (int64_t)n, in, out[V_UNFUSED], &vu, why, cap);
  if (!rc)
    rc = build_fused(b, x, (int64_t)n, in, out[V_FUSED], &vf, why, cap);
  if (!rc) {
    double work = (double)n * x->n_ops;
    int iters = (int)((quick ? 2e7 : 1e8) / work);
    iters = iters < 3 ? 3 : iters > 20000 ? 20000 : iters;
    r->t[V_UNFUSED] = time_variant(b, &vu, iters);
    r->t[V_FUSED] = time_variant(b, &vf, iters);
    const float *hin[4];
    float *hout[NV][3];
    for (uint32_t j = 0; j < x->n_in; j++)
      hin[j] = b->f->buffer_host_ptr(b->h, in[j]);
    for (int v = 0; v < NV; v++)
      for (uint32_t k = 0; k < x->n_out; k++)
        hout[v][k] = b->f->buffer_host_ptr(b->h, out[v][k]);
    r->t[V_HAND] = time_hand(&b->team, x->hand, n, iters, hout[V_HAND], hin);
    if (gen_fn)
      r->t[V_GEN] = time_hand(&b->team, gen_fn, n, iters, hout[V_GEN], hin);
    for (int v = 0; v < NV; v++)
      for (uint32_t k = 0; v != V_FUSED && r->t[v] > 0 && k < x->n_out; k++)
        r->differ[v] += count_diff(hout[v][k], hout[V_FUSED][k], n);
  }
  variant_free(b, &vu);
  variant_free(b, &vf);
  for (uint32_t j = 0; j < x->n_in; j++)
    b->f->buffer_free(b->h, in[j]);
  for (int v = 0; v < NV; v++)
    for (uint32_t k = 0; k < x->n_out; k++)
      b->f->buffer_free(b->h, out[v][k]);
  return rc;
}

static const char *const v_names[NV] = {"unfused", "fused", "c_loop",
                                        "generated"};

int main(int argc, char **argv) {
  int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
  tyto_context_options o;
  tyto_context_options_init(&o);
  o.devices = "cpu";
  tyto_context *ctx;
  if (tyto_context_new(&o, &ctx) != TYTO_OK) {
    fprintf(stderr, "bench/fused: %s\n", tyto_errmsg());
    return 1;
  }
  bench b;
  tyto_device *dev = tyto_context_device(ctx, 0);
  b.f = &dev->plugin->dfns;
  b.h = dev->handle;
  b.f->stream_create(b.h, &b.s);
  const tyto_topology *topo = tyto_context_topology(ctx);
  b.threads = topo->cores ? topo->cores : 1;
  team_start(&b.team, b.threads);
  (void)tab_bench_all; /* only its e^x is used */
  expr xs[2];
  adam(&xs[0]);
  chain(&xs[1]);

  /* What a code generator pays per new kernel: the flags a JIT would use
   * to vectorise (sqrt needs -fno-math-errno) and keep the bits (no FMA
   * contraction: every op rounds), and plain -O2. */
  static const char *const o3[] = {"-O3", "-march=native", "-fno-math-errno",
                                   "-ffp-contract=off", NULL};
  static const char *const o2[] = {"-O2", NULL};
  gen g3[2], g2[2];
  for (int e = 0; e < 2; e++) {
    gen_build(&xs[e], o2, 0, &g2[e]);
    gen_build(&xs[e], o3, 1, &g3[e]);
  }

  printf("bench/fused on %s (%u cores), tyto %s, f32\n", dev->info.name,
         topo->cores, tyto_version());
  printf("ns/element (GB/s: inputs + outputs once); generated = the "
         "expression's C\ncompiled at run time with cc -O3 -march=native "
         "-fno-math-errno -ffp-contract=off;\nC loop and generated run on "
         "as many threads as the pool, from %d elements\n\n",
         PAR_MIN);
  printf("%-7s %5s %15s %15s %15s %15s %7s %7s\n", "expr", "elems", "unfused",
         "fused", "C loop (AOT)", "generated", "unf/fus", "gen/fus");

  char json[8192], why[512];
  size_t jn = (size_t)snprintf(json, sizeof json, "BENCH {\"bench\":\"fused\"");
  const size_t sizes[3] = {4096, 262144, 4194304};
  const char *size_names[3] = {"4K", "256K", "4M"};
  result res[2][3];
  int identical = 1;
  for (int e = 0; e < 2; e++)
    for (int si = 0; si < 3; si++) {
      size_t n = sizes[si];
      result *r = &res[e][si];
      if (run_case(&b, &xs[e], g3[e].fn, n, quick, r, why, sizeof why)) {
        printf("%-7s %5s  failed: %s\n", xs[e].name, size_names[si], why);
        r->t[V_FUSED] = 0;
        continue;
      }
      double bytes = 4.0 * (xs[e].n_in + xs[e].n_out);
      char cell[NV][32];
      for (int v = 0; v < NV; v++)
        if (r->t[v] > 0)
          snprintf(cell[v], sizeof cell[v], "%6.3f (%5.1f)",
                   1e9 * r->t[v] / (double)n,
                   bytes * (double)n / r->t[v] / 1e9);
        else
          snprintf(cell[v], sizeof cell[v], "n/a");
      char ratio[16] = "n/a";
      if (r->t[V_GEN] > 0)
        snprintf(ratio, sizeof ratio, "%6.2fx", r->t[V_GEN] / r->t[V_FUSED]);
      printf("%-7s %5s %15s %15s %15s %15s %6.2fx %7s\n", xs[e].name,
             size_names[si], cell[V_UNFUSED], cell[V_FUSED], cell[V_HAND],
             cell[V_GEN], r->t[V_UNFUSED] / r->t[V_FUSED], ratio);
      jn += (size_t)snprintf(json + jn, sizeof json - jn, ",\"%s_%s\":{",
                             xs[e].name, size_names[si]);
      for (int v = 0; v < NV; v++) {
        jn += (size_t)snprintf(json + jn, sizeof json - jn,
                               "%s\"%s_ns_per_elem\":%.4f", v ? "," : "",
                               v_names[v], 1e9 * r->t[v] / (double)n);
        if (v != V_FUSED && r->t[v] > 0)
          jn += (size_t)snprintf(json + jn, sizeof json - jn,
                                 ",\"%s_bits_differ\":%zu", v_names[v],
                                 r->differ[v]);
        if (r->differ[v])
          printf("        %s differs from fused in %zu elements\n", v_names[v],
                 r->differ[v]);
        identical &= r->differ[v] == 0;
      }
      jn += (size_t)snprintf(json + jn, sizeof json - jn, "}");
    }
  printf("\nall variants bit-identical to fused: %s\n",
         identical ? "yes" : "NO");

  printf("\ncompiling the generated C (best of 3, first in brackets):\n");
  printf("%-7s %18s %18s  %s\n", "expr", "cc -O2", "cc -O3 -march=...",
         "launches until -O3 pays off: 4K / 256K / 4M");
  jn += (size_t)snprintf(json + jn, sizeof json - jn, ",\"cc_ms\":{");
  for (int e = 0; e < 2; e++) {
    char c2[32] = "n/a", c3[32] = "n/a", pay[3][24];
    if (g2[e].best >= 0)
      snprintf(c2, sizeof c2, "%.1f ms (%.1f)", 1e3 * g2[e].best,
               1e3 * g2[e].first);
    if (g3[e].best >= 0)
      snprintf(c3, sizeof c3, "%.1f ms (%.1f)", 1e3 * g3[e].best,
               1e3 * g3[e].first);
    for (int si = 0; si < 3; si++) {
      const result *r = &res[e][si];
      double gain = r->t[V_FUSED] - r->t[V_GEN];
      if (g3[e].best < 0 || r->t[V_GEN] <= 0)
        snprintf(pay[si], sizeof pay[si], "n/a");
      else if (gain <= 0)
        snprintf(pay[si], sizeof pay[si], "never");
      else
        snprintf(pay[si], sizeof pay[si], "%.0f", g3[e].best / gain);
    }
    printf("%-7s %18s %18s  %s / %s / %s\n", xs[e].name, c2, c3, pay[0], pay[1],
           pay[2]);
    jn += (size_t)snprintf(json + jn, sizeof json - jn,
                           "%s\"%s\":{\"O2\":%.2f,\"O3_native\":%.2f}",
                           e ? "," : "", xs[e].name,
                           g2[e].best < 0 ? -1 : 1e3 * g2[e].best,
                           g3[e].best < 0 ? -1 : 1e3 * g3[e].best);
  }
  snprintf(json + jn, sizeof json - jn, "},\"threads\":%u,\"identical\":%s}",
           b.threads, identical ? "true" : "false");
  printf("\n%s\n", json);
  for (int e = 0; e < 2; e++)
    if (g3[e].so)
      dlclose(g3[e].so);
  team_stop(&b.team);
  b.f->stream_destroy(b.h, b.s);
  tyto_context_free(ctx);
  return 0;
}
