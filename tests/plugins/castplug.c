/*
 * A synchronous test device for casts in fused programs (ABI 1.5), built
 * twice (tests/Makefile.am) for tests/compile/test_fuse_cast.c. It claims
 * the CPU as one device of f32 and f64 whose buffers are host memory and
 * whose launches run at once, on the calling thread.
 *
 * Kernels: COPY, FILL, NEG, RELU, ADD, MUL, MAX and FMA over any strided
 * layouts, CAST between f32 and f64, and FUSED programs of those ops
 * whose values may differ in dtype through CAST instructions, each value
 * rounded to its dtype after every instruction (sdk/docs/ops.md). The
 * device checks every program strictly against the layouts, as a plugin
 * that trusts the dtypes would not: an INPUT's dtype is its input's, an
 * op's operands share its dtype, a CAST converts, an OUTPUT's value and
 * its output have the OUTPUT's dtype; anything else is refused with
 * INVALID_ARGUMENT, so that a host that sends a wrong program fails to
 * compile instead of computing garbage.
 *
 *   CP_NAME           module name: the file is tyto_plugin_<CP_NAME>.so
 *   CP_NO_FUSED_CAST  fused programs holding a CAST are refused with
 *                     UNSUPPORTED (CAST alone still runs)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

#define CAT3(a, b, c) a##b##c
#define ENTRY(name) CAT3(tyto_plugin_, name, _LTX_init)
#define STR2(x) #x
#define STR(x) STR2(x)

enum { CP_MAX_IO = TYTO_PLUGIN_FUSED_MAX_IO, CP_MAX_INSTRS = 256 };

struct tyto_plugin_state {
  const tyto_plugin_host *host;
};
struct tyto_plugin_device {
  tyto_plugin_state *st;
};
struct tyto_plugin_buffer {
  unsigned char *p;
  uint64_t size;
};
struct tyto_plugin_stream {
  int unused;
};
struct tyto_plugin_event {
  int unused;
};

/* A fused instruction as a kernel keeps it. */
typedef struct cp_instr {
  uint32_t op, arg[3], dtype;
  double attr;
} cp_instr;

struct tyto_plugin_kernel {
  uint32_t op, n_in, n_out;
  tyto_plugin_layout lay[2 * CP_MAX_IO]; /* inputs, then outputs */
  double attr;                           /* FILL's value */
  uint32_t n_instrs;                     /* FUSED: the program */
  cp_instr *prog;
};

static tyto_plugin_error *fail(const tyto_plugin_device *d, int code,
                               const char *msg) {
  return d->st->host->error_new(code, "%s", msg);
}

/* ------------------------------------------------------------- values -- */

static int is_float(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F32 || dt == TYTO_PLUGIN_DTYPE_F64;
}

/* v rounded to dtype dt (f32: to nearest, beyond the range an infinity). */
static double round_to(uint32_t dt, double v) {
  if (dt == TYTO_PLUGIN_DTYPE_F64 || isnan(v))
    return v;
  if (v >= 0x1.ffffffp127)
    return INFINITY;
  if (v <= -0x1.ffffffp127)
    return -INFINITY;
  return (double)(float)v;
}

static double load(uint32_t dt, const unsigned char *p, int64_t i) {
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  double v;
  memcpy(&v, p + 8 * i, 8);
  return v;
}

static void store(uint32_t dt, unsigned char *p, int64_t i, double v) {
  if (dt == TYTO_PLUGIN_DTYPE_F32) {
    float f = (float)round_to(dt, v);
    memcpy(p + 4 * i, &f, 4);
  } else {
    memcpy(p + 8 * i, &v, 8);
  }
}

static int arity(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_FILL: return 0;
  case TYTO_PLUGIN_OP_COPY:
  case TYTO_PLUGIN_OP_NEG:
  case TYTO_PLUGIN_OP_RELU:
  case TYTO_PLUGIN_OP_CAST: return 1;
  case TYTO_PLUGIN_OP_ADD:
  case TYTO_PLUGIN_OP_MUL:
  case TYTO_PLUGIN_OP_MAX: return 2;
  case TYTO_PLUGIN_OP_FMA: return 3;
  default: return -1;
  }
}

/* Op `op` on x (exact values of dtype dt), rounded to dt; CAST rounds to
 * dt from any dtype. The sum and product of two f32 values, rounded first
 * to f64 and then to f32, are the f32 ones (53 >= 2 * 24 + 2 bits). */
static double apply(uint32_t op, uint32_t dt, const double *x, double attr) {
  switch (op) {
  case TYTO_PLUGIN_OP_FILL: return round_to(dt, attr);
  case TYTO_PLUGIN_OP_COPY: return x[0];
  case TYTO_PLUGIN_OP_CAST: return round_to(dt, x[0]);
  case TYTO_PLUGIN_OP_NEG: return -x[0];
  case TYTO_PLUGIN_OP_RELU: return x[0] < 0 ? 0 : x[0];
  case TYTO_PLUGIN_OP_ADD: return round_to(dt, x[0] + x[1]);
  case TYTO_PLUGIN_OP_MUL: return round_to(dt, x[0] * x[1]);
  case TYTO_PLUGIN_OP_MAX: return (x[0] > x[1] || x[0] != x[0]) ? x[0] : x[1];
  default: /* FMA, rounded once */
    return dt == TYTO_PLUGIN_DTYPE_F32
               ? (double)fmaf((float)x[0], (float)x[1], (float)x[2])
               : fma(x[0], x[1], x[2]);
  }
}

/* ---------------------------------------------------------- checking -- */

static const tyto_plugin_layout *layout(const tyto_plugin_op_desc *desc,
                                        uint32_t j) {
  return j < desc->n_inputs
             ? TYTO_PLUGIN_AT(tyto_plugin_layout, desc->inputs, j)
             : TYTO_PLUGIN_AT(tyto_plugin_layout, desc->outputs,
                              j - desc->n_inputs);
}

/* Reads and checks the fused program of desc into prog (CP_MAX_INSTRS
 * entries); returns its length, or 0 with the reason in *why (and
 * *unsupported set when the device could run no such program, rather
 * than the program being wrong). */
static uint32_t read_program(const tyto_plugin_op_desc *desc, cp_instr *prog,
                             const char **why, int *unsupported) {
#define BAD(msg)                                                               \
  do {                                                                         \
    *why = (msg);                                                              \
    return 0;                                                                  \
  } while (0)
  const tyto_plugin_fused_program *p = desc->blob;
  uint32_t written[CP_MAX_IO] = {0};
  *unsupported = 0;
  if (!p || desc->blob_size < sizeof *p || p->n_instrs == 0 ||
      p->n_instrs > CP_MAX_INSTRS || !p->instrs ||
      p->instrs[0].struct_size < sizeof(tyto_plugin_fused_instr))
    BAD("fused: no program, or one of ABI 1.4 or older");
  for (uint32_t i = 0; i < p->n_instrs; i++) {
    const tyto_plugin_fused_instr *in =
        TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, i);
    cp_instr *x = &prog[i];
    x->op = in->op;
    memcpy(x->arg, in->arg, sizeof x->arg);
    x->attr = in->attr;
    x->dtype = in->dtype;
    if (!is_float(x->dtype))
      BAD("fused: an instruction's dtype is not f32 or f64");
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      if (x->arg[0] >= desc->n_inputs)
        BAD("fused: an INPUT reads no input");
      if (layout(desc, x->arg[0])->dtype != x->dtype)
        BAD("fused: an INPUT's dtype is not its input's");
      continue;
    }
    if (x->op == TYTO_PLUGIN_FUSED_CONST)
      continue;
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      uint32_t o = x->arg[1];
      if (x->arg[0] >= i || prog[x->arg[0]].op == TYTO_PLUGIN_FUSED_OUTPUT ||
          o >= desc->n_outputs || written[o]++)
        BAD("fused: an OUTPUT of no value, or to no output, or twice");
      if (prog[x->arg[0]].dtype != x->dtype ||
          layout(desc, desc->n_inputs + o)->dtype != x->dtype)
        BAD("fused: an OUTPUT's value, dtype and output disagree");
      continue;
    }
    int n = arity(x->op);
    if (n < 1 || x->op == TYTO_PLUGIN_OP_COPY)
      BAD("fused: an op this device does not run");
    for (int k = 0; k < n; k++) {
      if (x->arg[k] >= i || prog[x->arg[k]].op == TYTO_PLUGIN_FUSED_OUTPUT)
        BAD("fused: an operand that is no earlier value");
      uint32_t dt = prog[x->arg[k]].dtype;
      if (x->op == TYTO_PLUGIN_OP_CAST ? dt == x->dtype : dt != x->dtype)
        BAD("fused: an op's operands differ from it in dtype (or a CAST "
            "converts to its own dtype)");
    }
#ifdef CP_NO_FUSED_CAST
    if (x->op == TYTO_PLUGIN_OP_CAST) {
      *unsupported = 1;
      BAD("this test device runs CAST alone, not in fused programs");
    }
#endif
  }
  for (uint32_t o = 0; o < desc->n_outputs; o++)
    if (!written[o])
      BAD("fused: an output is never written");
  return p->n_instrs;
#undef BAD
}

static tyto_plugin_error *check(tyto_plugin_device *d,
                                const tyto_plugin_op_desc *desc, cp_instr *prog,
                                uint32_t *n_instrs) {
  const int n =
      desc->op == TYTO_PLUGIN_OP_FUSED ? (int)desc->n_inputs : arity(desc->op);
  if (n < 0)
    return fail(d, TYTO_PLUGIN_ERR_UNSUPPORTED,
                "an op this test device does not run");
  if (desc->op == TYTO_PLUGIN_OP_FUSED
          ? desc->n_inputs < 1 || desc->n_inputs > CP_MAX_IO ||
                desc->n_outputs < 1 || desc->n_outputs > CP_MAX_IO
          : desc->n_inputs != (uint32_t)n || desc->n_outputs != 1 ||
                (desc->op == TYTO_PLUGIN_OP_FILL && desc->n_fattrs < 1))
    return fail(d, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                "the wrong number of inputs or outputs");
  const tyto_plugin_layout *o = layout(desc, desc->n_inputs);
  for (uint32_t j = 0; j < desc->n_inputs + desc->n_outputs; j++) {
    const tyto_plugin_layout *l = layout(desc, j);
    if (!is_float(l->dtype) || l->rank != o->rank ||
        l->rank > TYTO_PLUGIN_MAX_RANK)
      return fail(d, TYTO_PLUGIN_ERR_UNSUPPORTED,
                  "a layout not of f32 or f64, or of another rank");
    for (uint32_t a = 0; a < o->rank; a++)
      if (l->shape[a] != o->shape[a])
        return fail(d, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "an operand not of the output's shape");
    /* Only CAST and FUSED convert. */
    if (l->dtype != o->dtype && desc->op != TYTO_PLUGIN_OP_CAST &&
        desc->op != TYTO_PLUGIN_OP_FUSED)
      return fail(d, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                  "operands that differ in dtype");
  }
  *n_instrs = 0;
  if (desc->op != TYTO_PLUGIN_OP_FUSED)
    return NULL;
  const char *why = NULL;
  int unsupported;
  if (!(*n_instrs = read_program(desc, prog, &why, &unsupported)))
    return fail(d,
                unsupported ? TYTO_PLUGIN_ERR_UNSUPPORTED
                            : TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                why);
  return NULL;
}

static tyto_plugin_error *cp_supports(tyto_plugin_device *d,
                                      const tyto_plugin_op_desc *desc) {
  cp_instr prog[CP_MAX_INSTRS];
  uint32_t n;
  return check(d, desc, prog, &n);
}

static tyto_plugin_error *cp_prepare(tyto_plugin_device *d,
                                     const tyto_plugin_op_desc *desc,
                                     tyto_plugin_kernel **out,
                                     tyto_plugin_kernel_info *info) {
  cp_instr prog[CP_MAX_INSTRS];
  uint32_t n;
  tyto_plugin_error *e = check(d, desc, prog, &n);
  if (e)
    return e;
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (!k || (n && !(k->prog = malloc(n * sizeof *prog)))) {
    free(k);
    return fail(d, TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  k->op = desc->op;
  k->n_in = desc->n_inputs;
  k->n_out = desc->n_outputs;
  for (uint32_t j = 0; j < k->n_in + k->n_out; j++)
    k->lay[j] = *layout(desc, j);
  k->attr = desc->n_fattrs ? desc->fattrs[0] : 0;
  k->n_instrs = n;
  if (n)
    memcpy(k->prog, prog, n * sizeof *prog);
  (void)info; /* no workspace */
  *out = k;
  return NULL;
}

static void cp_release(tyto_plugin_device *d, tyto_plugin_kernel *k) {
  (void)d;
  if (k)
    free(k->prog);
  free(k);
}

/* ----------------------------------------------------------- running -- */

/* Runs k over its outputs' shape, row-major, with the operands at args
 * (inputs, then outputs): every value of an element first, then its
 * stores (an output may be bound to an input's memory). */
static void run(const tyto_plugin_kernel *k, unsigned char *const *args) {
  const tyto_plugin_layout *o = &k->lay[k->n_in];
  const uint32_t n_ops = k->n_in + k->n_out;
  int64_t n = 1, idx[TYTO_PLUGIN_MAX_RANK] = {0};
  for (uint32_t a = 0; a < o->rank; a++)
    n *= o->shape[a];
  double v[CP_MAX_INSTRS];
  for (int64_t e = 0; e < n; e++) {
    int64_t off[2 * CP_MAX_IO];
    for (uint32_t j = 0; j < n_ops; j++) {
      off[j] = k->lay[j].offset;
      for (uint32_t a = 0; a < o->rank; a++)
        off[j] += idx[a] * k->lay[j].strides[a];
    }
    if (k->op != TYTO_PLUGIN_OP_FUSED) {
      double x[3];
      for (uint32_t j = 0; j < k->n_in; j++)
        x[j] = load(k->lay[j].dtype, args[j], off[j]);
      store(o->dtype, args[k->n_in], off[k->n_in],
            apply(k->op, o->dtype, x, k->attr));
    } else {
      for (uint32_t i = 0; i < k->n_instrs; i++) {
        const cp_instr *p = &k->prog[i];
        double x[3];
        if (p->op == TYTO_PLUGIN_FUSED_INPUT) {
          v[i] = load(p->dtype, args[p->arg[0]], off[p->arg[0]]);
        } else if (p->op == TYTO_PLUGIN_FUSED_CONST) {
          v[i] = round_to(p->dtype, p->attr);
        } else if (p->op != TYTO_PLUGIN_FUSED_OUTPUT) {
          for (int q = 0; q < arity(p->op); q++)
            x[q] = v[p->arg[q]];
          v[i] = apply(p->op, p->dtype, x, p->attr);
        }
      }
      for (uint32_t i = 0; i < k->n_instrs; i++) {
        const cp_instr *p = &k->prog[i];
        if (p->op != TYTO_PLUGIN_FUSED_OUTPUT)
          continue;
        uint32_t j = k->n_in + p->arg[1];
        store(p->dtype, args[j], off[j], v[p->arg[0]]);
      }
    }
    for (uint32_t a = o->rank; a-- > 0;)
      if (++idx[a] < o->shape[a])
        break;
      else
        idx[a] = 0;
  }
}

static tyto_plugin_error *
cp_launch(tyto_plugin_device *d, tyto_plugin_stream *s, tyto_plugin_kernel *k,
          const tyto_plugin_binding *in, uint32_t nin,
          const tyto_plugin_binding *out, uint32_t nout,
          const tyto_plugin_binding *ws) {
  (void)s, (void)ws;
  unsigned char *args[2 * CP_MAX_IO];
  if (nin != k->n_in || nout != k->n_out)
    return fail(d, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                "launch: the wrong number of bindings");
  for (uint32_t j = 0; j < nin + nout; j++) {
    const tyto_plugin_binding *b =
        j < nin ? TYTO_PLUGIN_AT(tyto_plugin_binding, in, j)
                : TYTO_PLUGIN_AT(tyto_plugin_binding, out, j - nin);
    args[j] = b->buffer->p + b->offset;
  }
  run(k, args);
  return NULL;
}

/* ------------------------------------------------- memory and streams -- */

static tyto_plugin_error *cp_alloc(tyto_plugin_device *d, uint64_t size,
                                   tyto_plugin_buffer **out) {
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  void *mem = NULL;
  if (b && posix_memalign(&mem, 64, size ? (size_t)size : 1) == 0)
    b->p = mem;
  if (!b || !b->p) {
    free(b);
    return fail(d, TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  }
  b->size = size;
  *out = b;
  return NULL;
}

static void cp_free(tyto_plugin_device *d, tyto_plugin_buffer *b) {
  (void)d;
  if (b)
    free(b->p);
  free(b);
}

static tyto_plugin_error *range(tyto_plugin_device *d, tyto_plugin_buffer *b,
                                uint64_t off, uint64_t size) {
  return off > b->size || size > b->size - off
             ? fail(d, TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "copy out of range")
             : NULL;
}

static tyto_plugin_error *cp_h2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t off,
                                 const void *src, uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, dst, off, size);
  if (!e && size)
    memcpy(dst->p + off, src, (size_t)size);
  return e;
}

static tyto_plugin_error *cp_d2h(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 void *dst, tyto_plugin_buffer *src,
                                 uint64_t off, uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, src, off, size);
  if (!e && size)
    memcpy(dst, src->p + off, (size_t)size);
  return e;
}

static tyto_plugin_error *cp_d2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t doff,
                                 tyto_plugin_buffer *src, uint64_t soff,
                                 uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, dst, doff, size);
  if (!e)
    e = range(d, src, soff, size);
  if (!e && size)
    memmove(dst->p + doff, src->p + soff, (size_t)size);
  return e;
}

static tyto_plugin_error *cp_stream_create(tyto_plugin_device *d,
                                           tyto_plugin_stream **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL : fail(d, TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
}

static void cp_stream_destroy(tyto_plugin_device *d, tyto_plugin_stream *s) {
  (void)d;
  free(s);
}

static tyto_plugin_error *cp_sync(tyto_plugin_device *d,
                                  tyto_plugin_stream *s) {
  (void)d, (void)s;
  return NULL;
}

static tyto_plugin_error *cp_event_create(tyto_plugin_device *d,
                                          tyto_plugin_event **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL : fail(d, TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
}

static void cp_event_destroy(tyto_plugin_device *d, tyto_plugin_event *e) {
  (void)d;
  free(e);
}

/* Launches run at once: every event is complete when recorded. */
static tyto_plugin_error *cp_event_record(tyto_plugin_device *d,
                                          tyto_plugin_event *e,
                                          tyto_plugin_stream *s) {
  (void)d, (void)e, (void)s;
  return NULL;
}

static tyto_plugin_error *cp_event_wait(tyto_plugin_device *d,
                                        tyto_plugin_stream *s,
                                        tyto_plugin_event *e) {
  (void)d, (void)s, (void)e;
  return NULL;
}

static tyto_plugin_error *cp_event_sync(tyto_plugin_device *d,
                                        tyto_plugin_event *e) {
  (void)d, (void)e;
  return NULL;
}

static tyto_plugin_error *cp_event_query(tyto_plugin_device *d,
                                         tyto_plugin_event *e, int *complete) {
  (void)d, (void)e;
  *complete = 1;
  return NULL;
}

/* -------------------------------------------------------------- plugin -- */

static tyto_plugin_error *cp_probe(tyto_plugin_state *st,
                                   const tyto_plugin_hw_device *offer,
                                   uint32_t n, const tyto_plugin_claims *c) {
  (void)st;
  for (uint32_t i = 0; i < n; i++)
    if (TYTO_PLUGIN_AT(tyto_plugin_hw_device, offer, i)->kind ==
        TYTO_PLUGIN_HW_CPU) {
      c->claim(c->ctx, (int32_t)i, 0, "cast test device");
      break;
    }
  return NULL;
}

static tyto_plugin_error *cp_query(tyto_plugin_state *st, uint32_t ordinal,
                                   tyto_plugin_device_info *info) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND, "no device %u",
                               ordinal);
  info->name = "cast test device";
  info->vendor = "tyto tests";
  info->driver_version = "";
  info->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32) |
                 TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64);
  info->flags = 0;
  info->memory_bytes = (uint64_t)1 << 30;
  info->alignment = 64;
  info->compute_units = 1;
  info->numa_node = -1;
  info->pci_bus_id = "";
  return NULL;
}

static tyto_plugin_error *cp_open(tyto_plugin_state *st, uint32_t ordinal,
                                  tyto_plugin_device **out) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND, "no device %u",
                               ordinal);
  tyto_plugin_device *d = calloc(1, sizeof *d);
  if (!d)
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  d->st = st;
  *out = d;
  return NULL;
}

static void cp_close(tyto_plugin_device *d) {
  free(d);
}

static void cp_shutdown(tyto_plugin_state *st) {
  free(st);
}

static const tyto_plugin_fns cp_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = cp_probe,
    .device_query = cp_query,
    .device_open = cp_open,
    .shutdown = cp_shutdown,
};

static const tyto_plugin_device_fns cp_dfns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = cp_close,
    .buffer_alloc = cp_alloc,
    .buffer_free = cp_free,
    .stream_create = cp_stream_create,
    .stream_destroy = cp_stream_destroy,
    .stream_synchronize = cp_sync,
    .event_create = cp_event_create,
    .event_destroy = cp_event_destroy,
    .event_record = cp_event_record,
    .event_wait = cp_event_wait,
    .event_synchronize = cp_event_sync,
    .event_query = cp_event_query,
    .copy_h2d = cp_h2d,
    .copy_d2h = cp_d2h,
    .copy_d2d = cp_d2d,
    .supports_op = cp_supports,
    .prepare = cp_prepare,
    .kernel_release = cp_release,
    .launch = cp_launch,
};

static const tyto_plugin_info cp_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = STR(CP_NAME),
    .vendor = "tyto tests",
    .version = "0.0.1",
    .license = "MIT",
    .description = "a synchronous test device for casts in fused programs",
    .fns = &cp_fns,
    .device_fns = &cp_dfns,
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
    ENTRY(CP_NAME)(const tyto_plugin_host *host, const tyto_plugin_info **info,
                   tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
ENTRY(CP_NAME)(const tyto_plugin_host *host, const tyto_plugin_info **info,
               tyto_plugin_state **state) {
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  st->host = host;
  *info = &cp_info;
  *state = st;
  return NULL;
}
