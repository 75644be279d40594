/*
 * A partial asynchronous test device for the tests of multi-device
 * placement: a device that runs some ops and refuses the rest, so that a
 * graph placed over it and another device must be split, with real
 * transfers and waits between the two. Its machinery is kitplug.c's
 * (tests/plugins/kitplug.c): it claims the CPU as one device whose buffers
 * are host memory reached only through the copy functions, whose streams
 * are worker threads that run their commands in order, and whose events
 * really order streams (a wait on an event recorded on another stream, of
 * this or another open device, holds the waiting stream back).
 *
 * Kernels, f32 only (every other dtype is refused with UNSUPPORTED): COPY
 * and FILL, every elementwise op (NEG .. ROUND, ADD .. GE, WHERE, FMA) over
 * any strided layouts with the semantics of sdk/docs/ops.md, and FUSED
 * programs of those ops, except a program that holds EXP (so that a test
 * can see a fused chain refused for one op; EXP alone runs). Every other
 * op (reductions, MATMUL, layout and neural ops, random numbers, linear
 * algebra) is refused with UNSUPPORTED by supports_op and prepare alike.
 * A launch checks that each binding holds its layout's elements.
 *
 * Environment, read at init:
 *   TYTO_PART_DELAY_US  (default 0): every command queued on a stream
 *                       (copies, launches, event records and waits)
 *                       sleeps this many microseconds before it runs, to
 *                       make a producer slow enough that a consumer which
 *                       does not wait for it is caught every time
 *   TYTO_PART_DEVICES   (default 1, at most 4): how many devices it
 *                       claims; with two or more they copy between each
 *                       other with copy_peer (TYTO_PLUGIN_CAP_PEER_COPY)
 *   TYTO_PART_FAIL_LAUNCH  (default 0: never): the N-th launch of the
 *                       plugin's life fails when its stream runs it: the
 *                       kernel is skipped and the stream's next
 *                       synchronize returns an error, as a device that
 *                       faults at run time does
 *   TYTO_PART_GRAPHS    (default on): on, the device records graphs
 *                       (graph_begin .. graph_end keep the launches, and
 *                       graph_launch queues them again); off, the four
 *                       graph functions are NULL; fail, graph_end refuses
 *                       every recording with UNSUPPORTED
 *
 * ABS kernels are prepared with TYTO_PLUGIN_KERNEL_HOST_SYNC, as a kernel
 * that reads device memory back at launch would be, so that a test can
 * see a program that holds one run without a graph.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tyto/plugin.h>

#define PP_MAX_IO TYTO_PLUGIN_FUSED_MAX_IO

/* The smallest fused structs read: the whole of ABI 1.2's. */
#define PP_PROG_MIN                                                            \
  (offsetof(tyto_plugin_fused_program, instrs) +                               \
   sizeof(((tyto_plugin_fused_program *)0)->instrs))
#define PP_INSTR_MIN                                                           \
  (offsetof(tyto_plugin_fused_instr, attr) +                                   \
   sizeof(((tyto_plugin_fused_instr *)0)->attr))

typedef struct tyto_plugin_kernel pp_kernel;

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  long delay_us;      /* TYTO_PART_DELAY_US */
  long n_devices;     /* TYTO_PART_DEVICES */
  long fail_at;       /* TYTO_PART_FAIL_LAUNCH */
  long launches;      /* launches run so far (under mu) */
  int graphs_fail;    /* TYTO_PART_GRAPHS=fail */
  long replays;       /* launches queued by graph_launch (under mu) */
  pthread_mutex_t mu; /* events and kernel references */
  pthread_cond_t cv;  /* an event was signalled */
};

struct tyto_plugin_buffer {
  unsigned char *p;
  uint64_t size;
};

struct tyto_plugin_event {
  uint64_t recorded, done; /* generations: the last recorded, signalled */
  int refs;                /* the handle and the queued commands */
};

/* A fused instruction as kept by a kernel; c: a CONST's value in f32. */
typedef struct pp_instr {
  uint32_t op, arg[3];
  double attr;
  float c;
} pp_instr;

struct tyto_plugin_kernel {
  uint32_t op, n_in, n_out;
  tyto_plugin_layout lay[2 * PP_MAX_IO];        /* inputs, then outputs */
  int64_t lo[2 * PP_MAX_IO], hi[2 * PP_MAX_IO]; /* elements each reaches */
  int64_t numel;
  double attr; /* FILL's value, LEAKY_RELU's slope, ELU's alpha */
  float fill;
  uint32_t n_instrs; /* FUSED: the program */
  pp_instr *prog;
  uint32_t out_src[PP_MAX_IO]; /* FUSED: the value each output stores */
  int refs;                    /* the handle and the queued launches */
};

enum { CMD_COPY, CMD_LAUNCH, CMD_SIGNAL, CMD_WAIT, CMD_QUIT };

typedef struct pp_cmd {
  int kind;
  struct pp_cmd *next;
  void *dst;
  const void *src;
  uint64_t size;
  pp_kernel *k;
  unsigned char *args[2 * PP_MAX_IO]; /* inputs then outputs, bound */
  float *vals;                        /* FUSED: one value per instruction */
  struct tyto_plugin_event *e;
  uint64_t gen;
} pp_cmd;

/* A recorded graph: the launch commands, each holding its kernel. */
struct tyto_plugin_graph {
  pp_cmd *cmds;
  size_t n, cap;
};

struct tyto_plugin_stream {
  tyto_plugin_state *st;
  struct tyto_plugin_graph *rec; /* recording (graph_begin), or NULL */
  int rec_failed;                /* a launch could not be kept */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a command arrived or one finished */
  pp_cmd *head, *tail;
  pp_cmd *quit; /* the last command, made with the stream */
  int busy;
  long failed; /* the launch that failed (TYTO_PART_FAIL_LAUNCH), or 0 */
};

struct tyto_plugin_device {
  tyto_plugin_state *st;
};

static tyto_plugin_error *oom(tyto_plugin_state *st) {
  return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                             "part: out of memory");
}

/* --------------------------------------------------------------- names -- */

static const char *dtype_name(uint32_t d) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16",
                                      "i32", "i64", "u8"};
  return d < sizeof names / sizeof names[0] ? names[d] : "unknown";
}

static const char *op_name(uint32_t op) {
  static const struct {
    uint32_t op;
    const char *name;
  } names[] = {
/* clang-format off */
#define N(o, s) {TYTO_PLUGIN_OP_##o, s}
      N(INVALID, "invalid"), N(COPY, "copy"), N(FILL, "fill"), N(NEG, "neg"),
      N(ABS, "abs"), N(SIGN, "sign"), N(EXP, "exp"), N(LOG, "log"),
      N(LOG1P, "log1p"), N(EXPM1, "expm1"), N(SQRT, "sqrt"), N(RSQRT, "rsqrt"),
      N(SQUARE, "square"), N(RECIPROCAL, "reciprocal"), N(SIN, "sin"),
      N(COS, "cos"), N(TAN, "tan"), N(ASIN, "asin"), N(ACOS, "acos"),
      N(ATAN, "atan"), N(SINH, "sinh"), N(COSH, "cosh"), N(TANH, "tanh"),
      N(ASINH, "asinh"), N(ACOSH, "acosh"), N(ATANH, "atanh"),
      N(SIGMOID, "sigmoid"), N(RELU, "relu"), N(LEAKY_RELU, "leaky_relu"),
      N(ELU, "elu"), N(SOFTPLUS, "softplus"), N(ERF, "erf"), N(FLOOR, "floor"),
      N(CEIL, "ceil"), N(ROUND, "round"), N(ADD, "add"), N(SUB, "sub"),
      N(MUL, "mul"), N(DIV, "div"), N(POW, "pow"), N(MAX, "max"), N(MIN, "min"),
      N(ATAN2, "atan2"), N(EQ, "eq"), N(NE, "ne"), N(LT, "lt"), N(LE, "le"),
      N(GT, "gt"), N(GE, "ge"), N(WHERE, "where"), N(FMA, "fma"), N(SUM, "sum"),
      N(MEAN, "mean"), N(MAX_REDUCE, "max_reduce"), N(MIN_REDUCE, "min_reduce"),
      N(PROD, "prod"), N(ARGMAX, "argmax"), N(ARGMIN, "argmin"),
      N(LOG_SUM_EXP, "log_sum_exp"), N(NORM_L1, "norm_l1"),
      N(NORM_L2, "norm_l2"), N(MATMUL, "matmul"), N(PAD, "pad"),
      N(GATHER, "gather"), N(SCATTER_ADD, "scatter_add"), N(ONE_HOT, "one_hot"),
      N(SOFTMAX, "softmax"), N(LOG_SOFTMAX, "log_softmax"), N(CONV2D, "conv2d"),
      N(MAX_POOL2D, "max_pool2d"), N(AVG_POOL2D, "avg_pool2d"),
      N(CONV2D_BACKWARD_DATA, "conv2d_backward_data"),
      N(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter"),
      N(MAX_POOL2D_BACKWARD, "max_pool2d_backward"),
      N(MAX_POOL2D_SELECT, "max_pool2d_select"),
      N(AVG_POOL2D_BACKWARD, "avg_pool2d_backward"),
      N(RANDOM_UNIFORM, "random_uniform"), N(RANDOM_NORMAL, "random_normal"),
      N(RANDOM_BERNOULLI, "random_bernoulli"), N(INV, "inv"), N(DET, "det"),
      N(LOGDET, "logdet"), N(SOLVE, "solve"), N(CHOLESKY, "cholesky"),
      N(QR, "qr"), N(TRIANGULAR_SOLVE, "triangular_solve"), N(FUSED, "fused"),
#undef N
      /* clang-format on */
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].op == op)
      return names[i].name;
  return "unknown";
}

/* The number of inputs of an elementwise op (NEG .. FMA), 0 for any other
 * op code. */
static int eltwise_arity(uint32_t op) {
  if (op >= TYTO_PLUGIN_OP_NEG && op <= TYTO_PLUGIN_OP_ROUND)
    return 1;
  if (op >= TYTO_PLUGIN_OP_ADD && op <= TYTO_PLUGIN_OP_GE)
    return 2;
  if (op == TYTO_PLUGIN_OP_WHERE || op == TYTO_PLUGIN_OP_FMA)
    return 3;
  return 0;
}

/* ---------------------------------------------------------- arithmetic -- */

/* v rounded to f32 to nearest, ties to even; beyond f32's range an
 * infinity, as IEEE rounding gives (from FLT_MAX + half an ulp on), without
 * a conversion C leaves undefined. */
static float to_f32(double v) {
  if (v >= 0x1.ffffffp127)
    return INFINITY;
  if (v <= -0x1.ffffffp127)
    return -INFINITY;
  return (float)v;
}

/* Elementwise op `op` of sdk/docs/ops.md on x[0 .. arity-1] in f32; a is
 * LEAKY_RELU's slope or ELU's alpha. */
static float eval(uint32_t op, const float *x, double a) {
  const float u = x[0];
  switch (op) {
  case TYTO_PLUGIN_OP_NEG: return -u;
  case TYTO_PLUGIN_OP_ABS: return fabsf(u);
  case TYTO_PLUGIN_OP_SIGN:
    return u != u ? u : copysignf(u == 0.0f ? 0.0f : 1.0f, u);
  case TYTO_PLUGIN_OP_EXP: return expf(u);
  case TYTO_PLUGIN_OP_LOG: return logf(u);
  case TYTO_PLUGIN_OP_LOG1P: return log1pf(u);
  case TYTO_PLUGIN_OP_EXPM1: return expm1f(u);
  case TYTO_PLUGIN_OP_SQRT: return sqrtf(u);
  case TYTO_PLUGIN_OP_RSQRT: return 1.0f / sqrtf(u);
  case TYTO_PLUGIN_OP_SQUARE: return u * u;
  case TYTO_PLUGIN_OP_RECIPROCAL: return 1.0f / u;
  case TYTO_PLUGIN_OP_SIN: return sinf(u);
  case TYTO_PLUGIN_OP_COS: return cosf(u);
  case TYTO_PLUGIN_OP_TAN: return tanf(u);
  case TYTO_PLUGIN_OP_ASIN: return asinf(u);
  case TYTO_PLUGIN_OP_ACOS: return acosf(u);
  case TYTO_PLUGIN_OP_ATAN: return atanf(u);
  case TYTO_PLUGIN_OP_SINH: return sinhf(u);
  case TYTO_PLUGIN_OP_COSH: return coshf(u);
  case TYTO_PLUGIN_OP_TANH: return tanhf(u);
  case TYTO_PLUGIN_OP_ASINH: return asinhf(u);
  case TYTO_PLUGIN_OP_ACOSH: return acoshf(u);
  case TYTO_PLUGIN_OP_ATANH: return atanhf(u);
  case TYTO_PLUGIN_OP_SIGMOID: return 1.0f / (1.0f + expf(-u));
  /* Not x > 0 ? x : 0, which gets NaN and -0 wrong. */
  case TYTO_PLUGIN_OP_RELU: return u < 0.0f ? 0.0f : u;
  case TYTO_PLUGIN_OP_LEAKY_RELU: return u < 0.0f ? to_f32(a * u) : u;
  case TYTO_PLUGIN_OP_ELU: return u < 0.0f ? to_f32(a * expm1((double)u)) : u;
  /* log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, no cancellation */
  case TYTO_PLUGIN_OP_SOFTPLUS:
    return (u > 0.0f ? u : 0.0f) + log1pf(expf(-fabsf(u)));
  case TYTO_PLUGIN_OP_ERF: return erff(u);
  case TYTO_PLUGIN_OP_FLOOR: return floorf(u);
  case TYTO_PLUGIN_OP_CEIL: return ceilf(u);
  case TYTO_PLUGIN_OP_ROUND: return roundf(u);
  case TYTO_PLUGIN_OP_ADD: return u + x[1];
  case TYTO_PLUGIN_OP_SUB: return u - x[1];
  case TYTO_PLUGIN_OP_MUL: return u * x[1];
  case TYTO_PLUGIN_OP_DIV: return u / x[1];
  case TYTO_PLUGIN_OP_POW: return powf(u, x[1]);
  /* NaN when either is NaN, unlike fmaxf and fminf. */
  case TYTO_PLUGIN_OP_MAX: return (u > x[1] || u != u) ? u : x[1];
  case TYTO_PLUGIN_OP_MIN: return (u < x[1] || u != u) ? u : x[1];
  case TYTO_PLUGIN_OP_ATAN2: return atan2f(u, x[1]);
  case TYTO_PLUGIN_OP_EQ: return u == x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_NE: return u != x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_LT: return u < x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_LE: return u <= x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_GT: return u > x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_GE: return u >= x[1] ? 1.0f : 0.0f;
  case TYTO_PLUGIN_OP_WHERE: return u != 0.0f ? x[1] : x[2];
  default: /* FMA, rounded once */ return fmaf(u, x[1], x[2]);
  }
}

/* ------------------------------------------------------------- kernels -- */

/* Runs k over its outputs' shape, row-major, with the operands bound at
 * args (inputs, then outputs); vals: a FUSED program's values. Offsets are
 * stepped along with the index rather than recomputed per element. */
static void run_kernel(const pp_kernel *k, unsigned char *const *args,
                       float *vals) {
  const uint32_t n_ops = k->n_in + k->n_out;
  const tyto_plugin_layout *o = &k->lay[k->n_in];
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0}, off[2 * PP_MAX_IO];
  for (uint32_t j = 0; j < n_ops; j++)
    off[j] = k->lay[j].offset;
  const float *in[PP_MAX_IO];
  float *out[PP_MAX_IO];
  for (uint32_t j = 0; j < k->n_in; j++)
    in[j] = (const float *)(const void *)args[j];
  for (uint32_t j = 0; j < k->n_out; j++)
    out[j] = (float *)(void *)args[k->n_in + j];
  const int64_t *oo = off + k->n_in;
  for (int64_t e = 0; e < k->numel; e++) {
    float x[3];
    switch (k->op) {
    case TYTO_PLUGIN_OP_COPY: /* values moved, bit for bit */
      memcpy(&out[0][oo[0]], &in[0][off[0]], sizeof(float));
      break;
    case TYTO_PLUGIN_OP_FILL: out[0][oo[0]] = k->fill; break;
    case TYTO_PLUGIN_OP_FUSED:
      /* Every value first, then the stores: an output may be an input's
       * memory (the host's in-place updates). */
      for (uint32_t i = 0; i < k->n_instrs; i++) {
        const pp_instr *p = &k->prog[i];
        switch (p->op) {
        case TYTO_PLUGIN_FUSED_INPUT:
          vals[i] = in[p->arg[0]][off[p->arg[0]]];
          break;
        case TYTO_PLUGIN_FUSED_CONST: vals[i] = p->c; break;
        case TYTO_PLUGIN_FUSED_OUTPUT: break;
        default: {
          const int n = eltwise_arity(p->op);
          for (int q = 0; q < n; q++)
            x[q] = vals[p->arg[q]];
          vals[i] = eval(p->op, x, p->attr);
        }
        }
      }
      for (uint32_t j = 0; j < k->n_out; j++)
        out[j][oo[j]] = vals[k->out_src[j]];
      break;
    default:
      for (uint32_t j = 0; j < k->n_in; j++)
        x[j] = in[j][off[j]];
      out[0][oo[0]] = eval(k->op, x, k->attr);
    }
    for (uint32_t a = o->rank; a-- > 0;) {
      if (++idx[a] < o->shape[a]) {
        for (uint32_t j = 0; j < n_ops; j++)
          off[j] += k->lay[j].strides[a];
        break;
      }
      idx[a] = 0;
      for (uint32_t j = 0; j < n_ops; j++)
        off[j] -= k->lay[j].strides[a] * (o->shape[a] - 1);
    }
  }
}

static void kernel_unref(tyto_plugin_state *st, pp_kernel *k) {
  pthread_mutex_lock(&st->mu);
  int last = --k->refs == 0;
  pthread_mutex_unlock(&st->mu);
  if (last) {
    free(k->prog);
    free(k);
  }
}

static void event_unref(tyto_plugin_state *st, struct tyto_plugin_event *e) {
  pthread_mutex_lock(&st->mu);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&st->mu);
  if (last)
    free(e);
}

/* ------------------------------------------------------------- streams -- */

static void graph_free(tyto_plugin_state *st, struct tyto_plugin_graph *g);

static void delay(const tyto_plugin_state *st) {
  if (st->delay_us <= 0)
    return;
  struct timespec ts = {st->delay_us / 1000000, st->delay_us % 1000000 * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void run_cmd(tyto_plugin_stream *s, pp_cmd *c) {
  tyto_plugin_state *st = s->st;
  if (c->kind != CMD_QUIT)
    delay(st);
  switch (c->kind) {
  case CMD_COPY: memmove(c->dst, c->src, (size_t)c->size); break;
  case CMD_LAUNCH:
    pthread_mutex_lock(&st->mu);
    long n = ++st->launches;
    pthread_mutex_unlock(&st->mu);
    if (n == st->fail_at) {
      pthread_mutex_lock(&s->mu);
      s->failed = n;
      pthread_mutex_unlock(&s->mu);
    } else {
      run_kernel(c->k, c->args, c->vals);
    }
    free(c->vals);
    kernel_unref(st, c->k);
    break;
  case CMD_SIGNAL:
    pthread_mutex_lock(&st->mu);
    if (c->gen > c->e->done)
      c->e->done = c->gen;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    event_unref(st, c->e);
    break;
  case CMD_WAIT:
    pthread_mutex_lock(&st->mu);
    while (c->e->done < c->gen)
      pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    event_unref(st, c->e);
    break;
  default: break;
  }
}

static void *worker(void *arg) {
  tyto_plugin_stream *s = arg;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->head)
      pthread_cond_wait(&s->cv, &s->mu);
    pp_cmd *c = s->head;
    s->head = c->next;
    if (!s->head)
      s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    int quit = c->kind == CMD_QUIT;
    run_cmd(s, c);
    free(c);
    pthread_mutex_lock(&s->mu);
    s->busy = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (quit)
      return NULL;
  }
}

static tyto_plugin_error *enqueue(tyto_plugin_stream *s, const pp_cmd *c) {
  pp_cmd *q = malloc(sizeof *q);
  if (!q)
    return oom(s->st);
  *q = *c;
  q->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = q;
  else
    s->head = q;
  s->tail = q;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void drain(tyto_plugin_stream *s) {
  pthread_mutex_lock(&s->mu);
  while (s->head || s->busy)
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static tyto_plugin_error *pp_stream_create(tyto_plugin_device *d,
                                           tyto_plugin_stream **out) {
  tyto_plugin_stream *s = calloc(1, sizeof *s);
  pp_cmd *quit = calloc(1, sizeof *quit);
  if (!s || !quit) {
    free(s);
    free(quit);
    return oom(d->st);
  }
  quit->kind = CMD_QUIT;
  s->quit = quit;
  s->st = d->st;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, worker, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->quit);
    free(s);
    return d->st->host->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                                  "part: cannot start a stream thread");
  }
  *out = s;
  return NULL;
}

static void pp_stream_destroy(tyto_plugin_device *d, tyto_plugin_stream *s) {
  (void)d;
  if (!s)
    return;
  /* The command made at creation: destroying cannot run out of memory. */
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = s->quit;
  else
    s->head = s->quit;
  s->tail = s->quit;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  graph_free(s->st, s->rec); /* a recording never ended */
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

static tyto_plugin_error *pp_sync(tyto_plugin_device *d,
                                  tyto_plugin_stream *s) {
  drain(s);
  pthread_mutex_lock(&s->mu);
  long failed = s->failed;
  s->failed = 0;
  pthread_mutex_unlock(&s->mu);
  if (failed)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                                  "part: launch %ld failed on the device "
                                  "(TYTO_PART_FAIL_LAUNCH)",
                                  failed);
  return NULL;
}

/* -------------------------------------------------------------- events -- */

static tyto_plugin_error *pp_event_create(tyto_plugin_device *d,
                                          tyto_plugin_event **out) {
  *out = calloc(1, sizeof **out);
  if (!*out)
    return oom(d->st);
  (*out)->refs = 1;
  return NULL;
}

static void pp_event_destroy(tyto_plugin_device *d, tyto_plugin_event *e) {
  if (e)
    event_unref(d->st, e);
}

static tyto_plugin_error *pp_event_record(tyto_plugin_device *d,
                                          tyto_plugin_event *e,
                                          tyto_plugin_stream *s) {
  pp_cmd c = {.kind = CMD_SIGNAL, .e = e};
  pthread_mutex_lock(&d->st->mu);
  c.gen = ++e->recorded;
  e->refs++;
  pthread_mutex_unlock(&d->st->mu);
  tyto_plugin_error *err = enqueue(s, &c);
  if (err) {
    pthread_mutex_lock(&d->st->mu);
    e->done = c.gen; /* nothing will signal it */
    e->refs--;
    pthread_cond_broadcast(&d->st->cv);
    pthread_mutex_unlock(&d->st->mu);
  }
  return err;
}

/* The wait is a command of s: the worker of s blocks on it, whichever
 * stream (or open device of this plugin) the event was recorded on. */
static tyto_plugin_error *pp_event_wait(tyto_plugin_device *d,
                                        tyto_plugin_stream *s,
                                        tyto_plugin_event *e) {
  pp_cmd c = {.kind = CMD_WAIT, .e = e};
  pthread_mutex_lock(&d->st->mu);
  c.gen = e->recorded;
  e->refs++;
  pthread_mutex_unlock(&d->st->mu);
  tyto_plugin_error *err = enqueue(s, &c);
  if (err)
    event_unref(d->st, e);
  return err;
}

static tyto_plugin_error *pp_event_sync(tyto_plugin_device *d,
                                        tyto_plugin_event *e) {
  pthread_mutex_lock(&d->st->mu);
  uint64_t gen = e->recorded;
  while (e->done < gen)
    pthread_cond_wait(&d->st->cv, &d->st->mu);
  pthread_mutex_unlock(&d->st->mu);
  return NULL;
}

static tyto_plugin_error *pp_event_query(tyto_plugin_device *d,
                                         tyto_plugin_event *e, int *complete) {
  pthread_mutex_lock(&d->st->mu);
  *complete = e->done >= e->recorded;
  pthread_mutex_unlock(&d->st->mu);
  return NULL;
}

/* -------------------------------------------------------------- memory -- */

static tyto_plugin_error *pp_alloc(tyto_plugin_device *d, uint64_t size,
                                   tyto_plugin_buffer **out) {
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  void *mem = NULL;
  if (b && posix_memalign(&mem, 64, size ? (size_t)size : 1) == 0)
    b->p = mem;
  if (!b || !b->p) {
    free(b);
    return d->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                  "part: out of memory for a buffer of %llu "
                                  "bytes",
                                  (unsigned long long)size);
  }
  b->size = size;
  *out = b;
  return NULL;
}

static void pp_free(tyto_plugin_device *d, tyto_plugin_buffer *b) {
  (void)d;
  if (b)
    free(b->p);
  free(b);
}

static tyto_plugin_error *range(tyto_plugin_device *d, tyto_plugin_buffer *b,
                                uint64_t off, uint64_t size) {
  if (off > b->size || size > b->size - off)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "part: copy of %llu bytes at offset %llu "
                                  "overruns a buffer of %llu bytes",
                                  (unsigned long long)size,
                                  (unsigned long long)off,
                                  (unsigned long long)b->size);
  return NULL;
}

/* A copy on s, or done now when s is NULL. */
static tyto_plugin_error *copy(tyto_plugin_stream *s, void *dst,
                               const void *src, uint64_t size) {
  if (size == 0)
    return NULL; /* nothing to order: host pointers may even be NULL */
  if (!s) {
    memmove(dst, src, (size_t)size);
    return NULL;
  }
  pp_cmd c = {.kind = CMD_COPY, .dst = dst, .src = src, .size = size};
  return enqueue(s, &c);
}

static tyto_plugin_error *pp_h2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t off,
                                 const void *src, uint64_t size) {
  tyto_plugin_error *e = range(d, dst, off, size);
  return e ? e : copy(s, dst->p + off, src, size);
}

static tyto_plugin_error *pp_d2h(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 void *dst, tyto_plugin_buffer *src,
                                 uint64_t off, uint64_t size) {
  tyto_plugin_error *e = range(d, src, off, size);
  return e ? e : copy(s, dst, src->p + off, size);
}

static tyto_plugin_error *pp_d2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t doff,
                                 tyto_plugin_buffer *src, uint64_t soff,
                                 uint64_t size) {
  tyto_plugin_error *e = range(d, dst, doff, size);
  if (!e)
    e = range(d, src, soff, size);
  return e ? e : copy(s, dst->p + doff, src->p + soff, size);
}

/* Between two devices of this plugin (all host memory), on a stream of
 * the destination. */
static tyto_plugin_error *pp_peer(tyto_plugin_device *dd, tyto_plugin_stream *s,
                                  tyto_plugin_buffer *dst, uint64_t doff,
                                  tyto_plugin_device *sd,
                                  tyto_plugin_buffer *src, uint64_t soff,
                                  uint64_t size) {
  tyto_plugin_error *e = range(dd, dst, doff, size);
  if (!e)
    e = range(sd, src, soff, size);
  return e ? e : copy(s, dst->p + doff, src->p + soff, size);
}

/* ------------------------------------------------------------ checking -- */

/* The elements layout l reaches, relative to its bound position: [*lo,
 * *hi], or none (returns 0) for an empty tensor; -1 when the span does not
 * fit in int64_t. */
static int span(const tyto_plugin_layout *l, int64_t *lo, int64_t *hi) {
  *lo = *hi = l->offset;
  for (uint32_t a = 0; a < l->rank; a++)
    if (l->shape[a] == 0)
      return 0;
  for (uint32_t a = 0; a < l->rank; a++) {
    const int64_t n = l->shape[a] - 1, st = l->strides[a];
    if (n > 0 && (st > INT64_MAX / n || st < -(INT64_MAX / n)))
      return -1;
    const int64_t step = n * st;
    if (step > 0 ? *hi > INT64_MAX / 2 - step : *lo < INT64_MIN / 2 - step)
      return -1;
    if (step > 0)
      *hi += step;
    else
      *lo += step;
  }
  return 1;
}

/* Checks a FUSED descriptor's program: what plugin.h and ops.md require
 * (INVALID_ARGUMENT otherwise), then that it holds no EXP (UNSUPPORTED). */
static tyto_plugin_error *check_program(const tyto_plugin_host *h,
                                        const tyto_plugin_op_desc *desc) {
  if (!desc->blob || desc->blob_size < PP_PROG_MIN)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: fused: expected a tyto_plugin_fused_program of "
                        "at least %zu bytes as the blob, got %zu bytes",
                        (size_t)PP_PROG_MIN, desc->blob ? desc->blob_size : 0);
  const tyto_plugin_fused_program *p = desc->blob;
  if (p->struct_size < PP_PROG_MIN || p->n_instrs == 0 || !p->instrs ||
      p->instrs[0].struct_size < PP_INSTR_MIN)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: fused: the program is empty or its structs "
                        "are smaller than ABI 1.2's (program struct_size "
                        "%zu, %u instructions)",
                        p->struct_size, p->n_instrs);
  int32_t writer[PP_MAX_IO];
  for (uint32_t j = 0; j < PP_MAX_IO; j++)
    writer[j] = -1;
  int32_t exp_at = -1;
  for (uint32_t i = 0; i < p->n_instrs; i++) {
    const tyto_plugin_fused_instr *x =
        TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, i);
    int n = 0;
    switch (x->op) {
    case TYTO_PLUGIN_FUSED_INPUT:
      if (x->arg[0] >= desc->n_inputs)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "part: fused: instruction %u reads input %u of "
                            "%u",
                            i, x->arg[0], desc->n_inputs);
      continue;
    case TYTO_PLUGIN_FUSED_CONST: continue;
    case TYTO_PLUGIN_FUSED_OUTPUT:
      if (x->arg[1] >= desc->n_outputs || writer[x->arg[1]] >= 0)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "part: fused: instruction %u writes output %u, "
                            "which is not one of the %u outputs or is "
                            "written twice",
                            i, x->arg[1], desc->n_outputs);
      writer[x->arg[1]] = (int32_t)i;
      n = 1;
      break;
    default:
      n = eltwise_arity(x->op);
      if (n == 0)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "part: fused: instruction %u has op code %u, "
                            "neither INPUT, CONST, OUTPUT nor an elementwise "
                            "op (NEG .. FMA)",
                            i, x->op);
      if (x->op == TYTO_PLUGIN_OP_EXP && exp_at < 0)
        exp_at = (int32_t)i;
    }
    for (int q = 0; q < n; q++) {
      const uint32_t v = x->arg[q];
      if (v >= i || TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, v)->op ==
                        TYTO_PLUGIN_FUSED_OUTPUT)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "part: fused: instruction %u reads value %u, "
                            "which no earlier instruction defines",
                            i, v);
    }
  }
  for (uint32_t j = 0; j < desc->n_outputs; j++)
    if (writer[j] < 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: fused: output %u is never written", j);
  if (exp_at >= 0)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "part: fused: instruction %d is exp, which this test "
                        "device refuses in a fused program (it runs exp "
                        "alone)",
                        (int)exp_at);
  return NULL;
}

/* Whether this device runs desc: NULL, or why not. Allocates nothing but
 * the error, so that supports_op stays cheap and agrees with prepare. */
static tyto_plugin_error *check(tyto_plugin_device *d,
                                const tyto_plugin_op_desc *desc) {
  const tyto_plugin_host *h = d->st->host;
  const uint32_t op = desc->op;
  const char *name = op_name(op);
  const uint32_t n_out = desc->n_outputs;
  int n_in = eltwise_arity(op);
  if (op == TYTO_PLUGIN_OP_COPY)
    n_in = 1;
  else if (op == TYTO_PLUGIN_OP_FILL)
    n_in = 0;
  else if (op == TYTO_PLUGIN_OP_FUSED) {
    if (desc->n_inputs < 1 || desc->n_inputs > PP_MAX_IO || n_out < 1 ||
        n_out > PP_MAX_IO)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: fused: expected 1 to %d inputs and 1 to %d "
                          "outputs, got %u and %u",
                          PP_MAX_IO, PP_MAX_IO, desc->n_inputs, n_out);
  } else if (n_in == 0)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "part: op %s (%u) is not run by this test device "
                        "(it runs copy, fill, the elementwise ops and fused "
                        "programs without exp, in f32)",
                        name, op);
  if (op != TYTO_PLUGIN_OP_FUSED &&
      (desc->n_inputs != (uint32_t)n_in || n_out != 1))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: %s: expected %d input%s and 1 output, got %u "
                        "and %u",
                        name, n_in, n_in == 1 ? "" : "s", desc->n_inputs,
                        n_out);
  const tyto_plugin_layout *o =
      TYTO_PLUGIN_AT(tyto_plugin_layout, desc->outputs, 0);
  if (o->dtype != TYTO_PLUGIN_DTYPE_F32)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "part: %s: dtype %s is not run by this test device "
                        "(f32 only)",
                        name, dtype_name(o->dtype));
  if (o->rank > TYTO_PLUGIN_MAX_RANK)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: %s: rank %u is above %d", name, o->rank,
                        TYTO_PLUGIN_MAX_RANK);
  for (uint32_t a = 0; a < o->rank; a++)
    if (o->shape[a] < 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: %s: the output's extent %lld on axis %u is "
                          "negative",
                          name, (long long)o->shape[a], a);
  for (uint32_t j = 0; j < desc->n_inputs + n_out; j++) {
    const int is_in = j < desc->n_inputs;
    const uint32_t q = is_in ? j : j - desc->n_inputs;
    const tyto_plugin_layout *l =
        is_in ? TYTO_PLUGIN_AT(tyto_plugin_layout, desc->inputs, q)
              : TYTO_PLUGIN_AT(tyto_plugin_layout, desc->outputs, q);
    const char *which = is_in ? "input" : "output";
    if (l->dtype != o->dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: %s: %s %u is %s, output 0 %s (all operands "
                          "must have one dtype)",
                          name, which, q, dtype_name(l->dtype),
                          dtype_name(o->dtype));
    if (l->rank != o->rank ||
        memcmp(l->shape, o->shape, o->rank * sizeof o->shape[0]) != 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: %s: %s %u is not of output 0's shape (%s)",
                          name, which, q,
                          is_in ? "inputs must arrive broadcast to it"
                                : "outputs have one shape");
    int64_t lo, hi;
    if (span(l, &lo, &hi) < 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: %s: the strides of %s %u reach beyond 64-bit "
                          "offsets",
                          name, which, q);
    for (uint32_t a = 0; !is_in && a < l->rank; a++)
      if (l->strides[a] == 0 && l->shape[a] > 1)
        return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                            "part: %s: output %u has stride 0 on axis %u of "
                            "extent %lld; each output element must have its "
                            "own place",
                            name, q, a, (long long)l->shape[a]);
  }
  const int needs_attr = op == TYTO_PLUGIN_OP_FILL ||
                         op == TYTO_PLUGIN_OP_LEAKY_RELU ||
                         op == TYTO_PLUGIN_OP_ELU;
  if (needs_attr && (desc->n_fattrs < 1 || !desc->fattrs))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: %s: expected real attribute 0 (%s), got %u "
                        "real attributes",
                        name,
                        op == TYTO_PLUGIN_OP_FILL         ? "the value"
                        : op == TYTO_PLUGIN_OP_LEAKY_RELU ? "the slope"
                                                          : "alpha",
                        desc->n_fattrs);
  if (needs_attr && op != TYTO_PLUGIN_OP_FILL && !isfinite(desc->fattrs[0]))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: %s: real attribute 0 is %g, expected a finite "
                        "value",
                        name, desc->fattrs[0]);
  return op == TYTO_PLUGIN_OP_FUSED ? check_program(h, desc) : NULL;
}

static tyto_plugin_error *pp_supports(tyto_plugin_device *d,
                                      const tyto_plugin_op_desc *desc) {
  return check(d, desc);
}

static tyto_plugin_error *pp_prepare(tyto_plugin_device *d,
                                     const tyto_plugin_op_desc *desc,
                                     tyto_plugin_kernel **out,
                                     tyto_plugin_kernel_info *info) {
  tyto_plugin_error *e = check(d, desc);
  if (e)
    return e;
  pp_kernel *k = calloc(1, sizeof *k);
  if (!k)
    return oom(d->st);
  k->op = desc->op;
  k->n_in = desc->n_inputs;
  k->n_out = desc->n_outputs;
  for (uint32_t j = 0; j < k->n_in + k->n_out; j++) {
    k->lay[j] =
        j < k->n_in
            ? *TYTO_PLUGIN_AT(tyto_plugin_layout, desc->inputs, j)
            : *TYTO_PLUGIN_AT(tyto_plugin_layout, desc->outputs, j - k->n_in);
    span(&k->lay[j], &k->lo[j], &k->hi[j]);
  }
  k->numel = 1;
  for (uint32_t a = 0; a < k->lay[k->n_in].rank; a++)
    k->numel *= k->lay[k->n_in].shape[a];
  k->attr = desc->n_fattrs ? desc->fattrs[0] : 0;
  k->fill = to_f32(k->attr);
  if (desc->op == TYTO_PLUGIN_OP_FUSED) {
    const tyto_plugin_fused_program *p = desc->blob;
    k->n_instrs = p->n_instrs;
    k->prog = calloc(p->n_instrs, sizeof *k->prog);
    if (!k->prog) {
      free(k);
      return oom(d->st);
    }
    for (uint32_t i = 0; i < p->n_instrs; i++) {
      const tyto_plugin_fused_instr *x =
          TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, i);
      pp_instr *y = &k->prog[i];
      y->op = x->op;
      memcpy(y->arg, x->arg, sizeof y->arg);
      y->attr = x->attr;
      y->c = to_f32(x->attr);
      if (x->op == TYTO_PLUGIN_FUSED_OUTPUT)
        k->out_src[x->arg[1]] = x->arg[0];
    }
  }
  k->refs = 1;
  /* No workspace; ABS pretends to read back at launch (see the top). */
  if (info && TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, flags))
    info->flags =
        k->op == TYTO_PLUGIN_OP_ABS ? TYTO_PLUGIN_KERNEL_HOST_SYNC : 0;
  *out = k;
  return NULL;
}

static void pp_release(tyto_plugin_device *d, tyto_plugin_kernel *k) {
  if (k)
    kernel_unref(d->st, k);
}

/* Enqueues k; each binding must hold the elements of its layout. */
static tyto_plugin_error *pp_launch(tyto_plugin_device *d,
                                    tyto_plugin_stream *s, pp_kernel *k,
                                    const tyto_plugin_binding *in, uint32_t nin,
                                    const tyto_plugin_binding *out,
                                    uint32_t nout,
                                    const tyto_plugin_binding *ws) {
  const tyto_plugin_host *h = d->st->host;
  const char *name = op_name(k->op);
  (void)ws;
  if (nin != k->n_in || nout != k->n_out)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "part: launch of %s: expected %u inputs and %u "
                        "outputs, got %u and %u",
                        name, k->n_in, k->n_out, nin, nout);
  pp_cmd c = {.kind = CMD_LAUNCH, .k = k};
  for (uint32_t j = 0; j < nin + nout; j++) {
    const int is_in = j < nin;
    const uint32_t q = is_in ? j : j - nin;
    const tyto_plugin_binding *b =
        is_in ? TYTO_PLUGIN_AT(tyto_plugin_binding, in, q)
              : TYTO_PLUGIN_AT(tyto_plugin_binding, out, q);
    if (k->numel == 0) {
      c.args[j] = NULL; /* nothing is read or written */
      continue;
    }
    const uint64_t esize = sizeof(float);
    const tyto_plugin_buffer *buf = b->buffer;
    const int64_t lo = k->lo[j], hi = k->hi[j];
    if (!buf || b->offset % esize != 0 || b->offset > buf->size ||
        (lo < 0 && (uint64_t)-lo > b->offset / esize) ||
        (hi >= 0 && (uint64_t)hi >= (buf->size - b->offset) / esize))
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "part: launch of %s: %s %u reaches elements %lld "
                          "to %lld from byte %llu of a buffer of %llu bytes: "
                          "expected a binding aligned to 4 bytes that holds "
                          "them",
                          name, is_in ? "input" : "output", q, (long long)lo,
                          (long long)hi, (unsigned long long)b->offset,
                          buf ? (unsigned long long)buf->size : 0ULL);
    c.args[j] = buf->p + b->offset;
  }
  if (k->op == TYTO_PLUGIN_OP_FUSED && k->numel > 0) {
    c.vals = malloc(k->n_instrs * sizeof *c.vals);
    if (!c.vals)
      return oom(d->st);
  }
  pthread_mutex_lock(&d->st->mu);
  k->refs++;
  pthread_mutex_unlock(&d->st->mu);
  if (s->rec) {
    /* Kept, not run; the values of a fused program are made per replay. */
    free(c.vals);
    c.vals = NULL;
    struct tyto_plugin_graph *g = s->rec;
    if (g->n == g->cap) {
      size_t cap = 2 * g->cap + 8;
      pp_cmd *n = realloc(g->cmds, cap * sizeof *n);
      if (!n) {
        kernel_unref(d->st, k);
        s->rec_failed = 1;
        return oom(d->st);
      }
      g->cmds = n;
      g->cap = cap;
    }
    g->cmds[g->n++] = c;
    return NULL;
  }
  tyto_plugin_error *e = enqueue(s, &c);
  if (e) {
    free(c.vals);
    kernel_unref(d->st, k);
  }
  return e;
}

/* -------------------------------------------------------------- graphs -- */

static void graph_free(tyto_plugin_state *st, struct tyto_plugin_graph *g) {
  if (!g)
    return;
  for (size_t i = 0; i < g->n; i++)
    kernel_unref(st, g->cmds[i].k);
  free(g->cmds);
  free(g);
}

static tyto_plugin_error *pp_graph_begin(tyto_plugin_device *d,
                                         tyto_plugin_stream *s) {
  if (s->rec)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "part: graph_begin: the stream is already "
                                  "recording");
  if (!(s->rec = calloc(1, sizeof *s->rec)))
    return oom(d->st);
  s->rec_failed = 0;
  return NULL;
}

static tyto_plugin_error *pp_graph_end(tyto_plugin_device *d,
                                       tyto_plugin_stream *s,
                                       struct tyto_plugin_graph **out) {
  struct tyto_plugin_graph *g = s->rec;
  *out = NULL;
  s->rec = NULL;
  if (!g)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "part: graph_end: the stream is not "
                                  "recording");
  if (s->rec_failed || d->st->graphs_fail) {
    graph_free(d->st, g);
    return d->st->host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                                  "part: this recording cannot be replayed "
                                  "(TYTO_PART_GRAPHS=fail)");
  }
  *out = g;
  return NULL;
}

static tyto_plugin_error *pp_graph_launch(tyto_plugin_device *d,
                                          tyto_plugin_stream *s,
                                          struct tyto_plugin_graph *g) {
  for (size_t i = 0; i < g->n; i++) {
    pp_cmd c = g->cmds[i];
    if (c.k->op == TYTO_PLUGIN_OP_FUSED && c.k->numel > 0 &&
        !(c.vals = malloc(c.k->n_instrs * sizeof *c.vals)))
      return oom(d->st);
    pthread_mutex_lock(&d->st->mu);
    c.k->refs++;
    d->st->replays++;
    pthread_mutex_unlock(&d->st->mu);
    tyto_plugin_error *e = enqueue(s, &c);
    if (e) {
      free(c.vals);
      kernel_unref(d->st, c.k);
      return e;
    }
  }
  return NULL;
}

static void pp_graph_destroy(tyto_plugin_device *d,
                             struct tyto_plugin_graph *g) {
  graph_free(d->st, g);
}

/* -------------------------------------------------------------- plugin -- */

#define PP_DEVICE_NAME "partial test device"

static const char *const pp_names[] = {PP_DEVICE_NAME, PP_DEVICE_NAME " 1",
                                       PP_DEVICE_NAME " 2",
                                       PP_DEVICE_NAME " 3"};

/* Device 0 drives the offered CPU; the others are software devices. */
static tyto_plugin_error *pp_probe(tyto_plugin_state *st,
                                   const tyto_plugin_hw_device *offer,
                                   uint32_t n, const tyto_plugin_claims *c) {
  for (uint32_t i = 0; i < n; i++)
    if (TYTO_PLUGIN_AT(tyto_plugin_hw_device, offer, i)->kind ==
        TYTO_PLUGIN_HW_CPU) {
      c->claim(c->ctx, (int32_t)i, 0, PP_DEVICE_NAME);
      for (long k = 1; k < st->n_devices; k++)
        c->claim(c->ctx, -1, (uint32_t)k, pp_names[k]);
      break;
    }
  return NULL;
}

static tyto_plugin_error *pp_query(tyto_plugin_state *st, uint32_t ordinal,
                                   tyto_plugin_device_info *info) {
  if (ordinal >= (uint32_t)st->n_devices)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "part: no device %u (it has %ld)", ordinal,
                               st->n_devices);
  info->name = pp_names[ordinal];
  info->vendor = "tyto tests";
  info->driver_version = "";
  info->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32);
  info->flags = TYTO_PLUGIN_CAP_ASYNC |
                (st->n_devices > 1 ? TYTO_PLUGIN_CAP_PEER_COPY : 0u);
  info->memory_bytes = (uint64_t)1 << 30;
  info->alignment = 64;
  info->compute_units = 1;
  info->numa_node = -1;
  info->pci_bus_id = "";
  return NULL;
}

static tyto_plugin_error *pp_open(tyto_plugin_state *st, uint32_t ordinal,
                                  tyto_plugin_device **out) {
  if (ordinal >= (uint32_t)st->n_devices)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "part: no device %u (it has %ld)", ordinal,
                               st->n_devices);
  tyto_plugin_device *d = calloc(1, sizeof *d);
  if (!d)
    return oom(st);
  d->st = st;
  *out = d;
  return NULL;
}

static void pp_close(tyto_plugin_device *d) {
  free(d);
}

static void pp_shutdown(tyto_plugin_state *st) {
  pthread_mutex_destroy(&st->mu);
  pthread_cond_destroy(&st->cv);
  free(st);
}

static const tyto_plugin_fns pp_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = pp_probe,
    .device_query = pp_query,
    .device_open = pp_open,
    .shutdown = pp_shutdown,
};

static const tyto_plugin_device_fns pp_dfns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = pp_close,
    .buffer_alloc = pp_alloc,
    .buffer_free = pp_free,
    .stream_create = pp_stream_create,
    .stream_destroy = pp_stream_destroy,
    .stream_synchronize = pp_sync,
    .event_create = pp_event_create,
    .event_destroy = pp_event_destroy,
    .event_record = pp_event_record,
    .event_wait = pp_event_wait,
    .event_synchronize = pp_event_sync,
    .event_query = pp_event_query,
    .copy_h2d = pp_h2d,
    .copy_d2h = pp_d2h,
    .copy_d2d = pp_d2d,
    .copy_peer = pp_peer,
    .supports_op = pp_supports,
    .prepare = pp_prepare,
    .kernel_release = pp_release,
    .launch = pp_launch,
    .graph_begin = pp_graph_begin,
    .graph_end = pp_graph_end,
    .graph_launch = pp_graph_launch,
    .graph_destroy = pp_graph_destroy,
};

/* The same without graphs (TYTO_PART_GRAPHS=off); filled at init. */
static tyto_plugin_device_fns pp_dfns_plain;

static tyto_plugin_info pp_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = "part",
    .vendor = "tyto tests",
    .version = "0.0.1",
    .license = "MIT",
    .description = "an asynchronous f32 test device that runs copies, fills "
                   "and elementwise ops only",
    .fns = &pp_fns,
    .device_fns = &pp_dfns,
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_part_LTX_init(const tyto_plugin_host *host,
                          const tyto_plugin_info **info,
                          tyto_plugin_state **state);

static char env_message[160];

/* A whole number in [lo, hi] from the environment, or *out unchanged
 * when unset; 0 (and env_message) when malformed. */
static int env_long(const tyto_plugin_host *host, const char *name, long lo,
                    long hi, long *out) {
  (void)host;
  const char *v = getenv(name);
  if (!v || !*v)
    return 1;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < lo || x > hi) {
    snprintf(env_message, sizeof env_message,
             "part: %s is '%.40s': expected a whole number from %ld to %ld",
             name, v, lo, hi);
    return 0;
  }
  *out = x;
  return 1;
}

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_part_LTX_init(const tyto_plugin_host *host,
                          const tyto_plugin_info **info,
                          tyto_plugin_state **state) {
  long us = 0, n_dev = 1, fail_at = 0;
  if (!env_long(host, "TYTO_PART_DELAY_US", 0, 100000000, &us) ||
      !env_long(host, "TYTO_PART_DEVICES", 1, 4, &n_dev) ||
      !env_long(host, "TYTO_PART_FAIL_LAUNCH", 0, 1000000000, &fail_at))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s", env_message);
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "part: out of memory");
  st->host = host;
  st->delay_us = us;
  st->n_devices = n_dev;
  st->fail_at = fail_at;
  const char *gv = getenv("TYTO_PART_GRAPHS");
  pp_info.device_fns = &pp_dfns;
  if (gv && !strcmp(gv, "off")) {
    pp_dfns_plain = pp_dfns;
    pp_dfns_plain.graph_begin = NULL;
    pp_dfns_plain.graph_end = NULL;
    pp_dfns_plain.graph_launch = NULL;
    pp_dfns_plain.graph_destroy = NULL;
    pp_info.device_fns = &pp_dfns_plain;
  } else if (gv && !strcmp(gv, "fail")) {
    st->graphs_fail = 1;
  } else if (gv && *gv && strcmp(gv, "on")) {
    free(st);
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "part: TYTO_PART_GRAPHS is '%.40s': expected on, "
                           "off or fail",
                           gv);
  }
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  *info = &pp_info;
  *state = st;
  return NULL;
}
