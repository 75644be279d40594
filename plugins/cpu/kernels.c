/*
 * CPU kernels reached through prepare/launch. So far the ABI defines two
 * ops: COPY (a strided copy between any two layouts of one shape) and FILL.
 * The graph layer's op set arrives with its own kernels.
 *
 * Every layout is checked once, at prepare: the bytes it reaches are
 * computed with overflow checks, so that launch only compares byte ranges
 * with the bound buffers.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* A layout and the bytes it reaches relative to its binding. */
typedef struct reach {
  tyto_plugin_layout l;
  int64_t lo_bytes, end_bytes; /* first byte (may be negative), one past last */
  int empty;
} reach;

struct tyto_plugin_kernel {
  atomic_int refs; /* the owner's, plus one per queued launch */
  uint32_t op;
  reach in, out;
  double value;
  size_t elem; /* bytes per element */
};

static size_t dtype_size(uint32_t dtype) {
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F32: return 4;
  case TYTO_PLUGIN_DTYPE_F64: return 8;
  default: return 0;
  }
}

static const char *dtype_name(uint32_t dtype) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16",
                                      "i32", "i64", "u8"};
  return dtype < sizeof names / sizeof names[0] ? names[dtype] : "unknown";
}

static const char *op_name(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_COPY: return "copy";
  case TYTO_PLUGIN_OP_FILL: return "fill";
  default: return "op";
  }
}

static tyto_plugin_error *check_layout(const tyto_plugin_host *h, uint32_t op,
                                       const tyto_plugin_layout *l,
                                       const char *which) {
  if (l->rank > TYTO_PLUGIN_MAX_RANK)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: %s has rank %u, more than %d", op_name(op), which,
                        l->rank, TYTO_PLUGIN_MAX_RANK);
  if (!dtype_size(l->dtype))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: dtype %s is not supported by the cpu device "
                        "(f32 and f64 are)",
                        op_name(op), dtype_name(l->dtype));
  for (uint32_t i = 0; i < l->rank; i++)
    if (l->shape[i] < 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: %s has a negative dimension %lld", op_name(op),
                          which, (long long)l->shape[i]);
  return NULL;
}

/* Copies a layout of the caller's struct_size into one of ours. */
static tyto_plugin_layout read_layout(const tyto_plugin_layout *src) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  size_t n = src->struct_size < sizeof l ? src->struct_size : sizeof l;
  memcpy(&l, src, n);
  l.struct_size = sizeof l;
  return l;
}

/* Computes the bytes a layout reaches, refusing any overflow. */
static tyto_plugin_error *measure(const tyto_plugin_host *h, uint32_t op,
                                  const tyto_plugin_layout *src,
                                  const char *which, reach *r) {
  r->l = read_layout(src);
  tyto_plugin_error *e = check_layout(h, op, &r->l, which);
  if (e)
    return e;
  int64_t elem = (int64_t)dtype_size(r->l.dtype), lo = r->l.offset,
          hi = r->l.offset, n = 1;
  int overflow = 0;
  r->empty = 0;
  for (uint32_t i = 0; i < r->l.rank; i++) {
    r->empty |= r->l.shape[i] == 0;
    overflow |= __builtin_mul_overflow(n, r->l.shape[i], &n);
  }
  for (uint32_t i = 0; i < r->l.rank && !r->empty; i++) {
    int64_t span;
    overflow |=
        __builtin_mul_overflow(r->l.shape[i] - 1, r->l.strides[i], &span);
    if (span < 0)
      overflow |= __builtin_add_overflow(lo, span, &lo);
    else
      overflow |= __builtin_add_overflow(hi, span, &hi);
  }
  overflow |= __builtin_mul_overflow(lo, elem, &r->lo_bytes);
  overflow |= __builtin_add_overflow(hi, 1, &hi);
  overflow |= __builtin_mul_overflow(hi, elem, &r->end_bytes);
  if (overflow)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the %s layout spans more bytes than 64 bits "
                        "can count",
                        op_name(op), which);
  return NULL;
}

/* Checks a descriptor and measures its layouts into k. */
static tyto_plugin_error *check_desc(const tyto_plugin_host *h,
                                     const tyto_plugin_op_desc *d,
                                     tyto_plugin_kernel *k) {
  tyto_plugin_error *e;
  if (d->op != TYTO_PLUGIN_OP_COPY && d->op != TYTO_PLUGIN_OP_FILL)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u is not supported by the cpu device", d->op);
  uint32_t want_in = d->op == TYTO_PLUGIN_OP_COPY ? 1 : 0;
  if (d->n_inputs != want_in || d->n_outputs != 1 || !d->outputs ||
      (want_in && !d->inputs))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected %u input and 1 output, got %u and %u",
                        op_name(d->op), want_in, d->n_inputs, d->n_outputs);
  if ((e = measure(h, d->op, d->outputs, "output", &k->out)) != NULL)
    return e;
  if (d->op == TYTO_PLUGIN_OP_FILL) {
    if (d->n_fattrs < 1 || !d->fattrs)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "fill: expected the value as real attribute 0, got "
                          "%u real attributes",
                          d->n_fattrs);
    k->value = d->fattrs[0];
    return NULL;
  }
  if ((e = measure(h, d->op, d->inputs, "input", &k->in)) != NULL)
    return e;
  const tyto_plugin_layout *in = &k->in.l, *out = &k->out.l;
  if (in->dtype != out->dtype)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "copy: input is %s but output is %s",
                        dtype_name(in->dtype), dtype_name(out->dtype));
  if (in->rank != out->rank ||
      memcmp(in->shape, out->shape, in->rank * sizeof(int64_t)) != 0)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "copy: input and output shapes differ");
  return NULL;
}

tyto_plugin_error *cpu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *d) {
  tyto_plugin_kernel scratch;
  return check_desc(dev->st->host, d, &scratch);
}

tyto_plugin_error *cpu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *d,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  const tyto_plugin_host *h = dev->st->host;
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (!k)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory preparing a kernel");
  tyto_plugin_error *e = check_desc(h, d, k);
  if (e) {
    free(k);
    return e;
  }
  atomic_init(&k->refs, 1);
  k->op = d->op;
  k->elem = dtype_size(k->out.l.dtype);
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = 0;
  *out = k;
  return NULL;
}

static void kernel_unref(tyto_plugin_kernel *k) {
  if (atomic_fetch_sub(&k->refs, 1) == 1)
    free(k);
}

/* Queued launches hold their own reference: the kernel lives until the
 * last of them has run. */
void cpu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  if (k)
    kernel_unref(k);
}

static int64_t numel(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t i = 0; i < l->rank; i++)
    n *= l->shape[i];
  return n;
}

/* Walks the index space in row-major order, the last axis innermost. */
static void strided_copy(const tyto_plugin_kernel *k, unsigned char *src,
                         unsigned char *dst) {
  const tyto_plugin_layout *in = &k->in.l, *out = &k->out.l;
  int64_t n = numel(out);
  if (n == 0)
    return;
  uint32_t r = out->rank;
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t inner = r ? out->shape[r - 1] : 1;
  int64_t is = r ? in->strides[r - 1] : 0, os = r ? out->strides[r - 1] : 0;
  size_t e = k->elem;
  for (int64_t done = 0; done < n; done += inner) {
    int64_t ioff = in->offset, ooff = out->offset;
    for (uint32_t a = 0; a + 1 < r; a++) {
      ioff += idx[a] * in->strides[a];
      ooff += idx[a] * out->strides[a];
    }
    if (e == 4) {
      float *s = (float *)src + ioff, *d = (float *)dst + ooff;
      for (int64_t i = 0; i < inner; i++)
        d[i * os] = s[i * is];
    } else {
      double *s = (double *)src + ioff, *d = (double *)dst + ooff;
      for (int64_t i = 0; i < inner; i++)
        d[i * os] = s[i * is];
    }
    for (int64_t a = (int64_t)r - 2; a >= 0; a--) {
      if (++idx[a] < out->shape[a])
        break;
      idx[a] = 0;
    }
  }
}

static void fill(const tyto_plugin_kernel *k, unsigned char *dst) {
  tyto_plugin_kernel src = *k;
  /* A fill is a copy from one element broadcast everywhere. Values beyond
   * f32's range become infinities, as IEEE rounding would make them (a
   * plain conversion would be undefined behaviour in C). */
  double v = k->value;
  float f = v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
  memset(src.in.l.strides, 0, sizeof src.in.l.strides);
  src.in.l.offset = 0;
  src.in.l.rank = k->out.l.rank;
  strided_copy(&src, k->elem == 4 ? (unsigned char *)&f : (unsigned char *)&v,
               dst);
}

tyto_plugin_error *cpu_kernel_run(const tyto_plugin_host *h,
                                  tyto_plugin_kernel *k, unsigned char **args) {
  tyto_plugin_error *e = NULL;
  switch (k->op) {
  case TYTO_PLUGIN_OP_COPY: strided_copy(k, args[0], args[1]); break;
  case TYTO_PLUGIN_OP_FILL: fill(k, args[0]); break;
  default:
    e = h->error_new(TYTO_PLUGIN_ERR_INTERNAL, "kernel for op %u is missing",
                     k->op);
  }
  kernel_unref(k); /* the launch's reference */
  return e;
}

/* Whether every byte the layout reaches lies inside the binding. */
static int layout_fits(const reach *r, const tyto_plugin_binding *b) {
  if (r->empty)
    return 1;
  int64_t first, end;
  if (b->offset > (uint64_t)INT64_MAX ||
      __builtin_add_overflow((int64_t)b->offset, r->lo_bytes, &first) ||
      __builtin_add_overflow((int64_t)b->offset, r->end_bytes, &end))
    return 0;
  return first >= 0 && (uint64_t)end <= b->buffer->size;
}

tyto_plugin_error *
cpu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  (void)workspace;
  const tyto_plugin_host *h = dev->st->host;
  uint32_t want_in = k->op == TYTO_PLUGIN_OP_COPY ? 1 : 0;
  if (!s || n_inputs != want_in || n_outputs != 1 || !outputs ||
      (want_in && !inputs))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: launch expected a stream, %u input and 1 output "
                        "binding; got %u and %u",
                        op_name(k->op), want_in, n_inputs, n_outputs);
  unsigned char *args[2];
  for (uint32_t i = 0; i < n_inputs + n_outputs; i++) {
    const tyto_plugin_binding *b =
        i < n_inputs
            ? TYTO_PLUGIN_AT(tyto_plugin_binding, inputs, i)
            : TYTO_PLUGIN_AT(tyto_plugin_binding, outputs, i - n_inputs);
    const char *which = i < n_inputs ? "input" : "output";
    if (!b->buffer)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: the %s binding has no buffer", op_name(k->op),
                          which);
    if (b->offset % k->elem != 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: the %s binding's offset %llu is not a multiple "
                          "of the element size %zu",
                          op_name(k->op), which, (unsigned long long)b->offset,
                          k->elem);
    if (!layout_fits(i < n_inputs ? &k->in : &k->out, b))
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: the %s layout reaches outside its buffer of "
                          "%llu bytes (bound at offset %llu)",
                          op_name(k->op), which,
                          (unsigned long long)b->buffer->size,
                          (unsigned long long)b->offset);
    args[i] = b->buffer->ptr + b->offset;
  }
  cpu_cmd *c = calloc(1, sizeof *c);
  unsigned char **kept = calloc(n_inputs + n_outputs, sizeof *kept);
  if (!c || !kept) {
    free(c);
    free(kept);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory queueing a launch");
  }
  memcpy(kept, args, (n_inputs + n_outputs) * sizeof *kept);
  atomic_fetch_add(&k->refs, 1);
  c->kind = CPU_CMD_LAUNCH;
  c->u.launch.kernel = k;
  c->u.launch.args = kept;
  c->u.launch.n_args = n_inputs + n_outputs;
  return cpu_stream_enqueue(s, c);
}
