/*
 * CPU kernels reached through prepare/launch. So far the ABI defines two
 * ops: COPY (a strided copy between any two layouts of one shape) and FILL.
 * The graph layer's op set arrives with its own kernels.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu.h"

struct tyto_plugin_kernel {
  uint32_t op;
  tyto_plugin_layout in, out;
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

tyto_plugin_error *cpu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *d) {
  const tyto_plugin_host *h = dev->st->host;
  tyto_plugin_error *e;
  switch (d->op) {
  case TYTO_PLUGIN_OP_COPY:
    if (d->n_inputs != 1 || d->n_outputs != 1)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "copy: expected 1 input and 1 output, got %u and %u",
                          d->n_inputs, d->n_outputs);
    if ((e = check_layout(h, d->op, &d->inputs[0], "input")) ||
        (e = check_layout(h, d->op, &d->outputs[0], "output")))
      return e;
    if (d->inputs[0].dtype != d->outputs[0].dtype)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "copy: input is %s but output is %s",
                          dtype_name(d->inputs[0].dtype),
                          dtype_name(d->outputs[0].dtype));
    if (d->inputs[0].rank != d->outputs[0].rank ||
        memcmp(d->inputs[0].shape, d->outputs[0].shape,
               d->inputs[0].rank * sizeof(int64_t)) != 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "copy: input and output shapes differ");
    return NULL;
  case TYTO_PLUGIN_OP_FILL:
    if (d->n_inputs != 0 || d->n_outputs != 1 || d->n_fattrs < 1)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "fill: expected no input, 1 output and 1 real "
                          "attribute, got %u, %u and %u",
                          d->n_inputs, d->n_outputs, d->n_fattrs);
    return check_layout(h, d->op, &d->outputs[0], "output");
  default:
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u is not supported by the cpu device", d->op);
  }
}

tyto_plugin_error *cpu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *d,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  tyto_plugin_error *e = cpu_supports_op(dev, d);
  if (e)
    return e;
  tyto_plugin_kernel *k = calloc(1, sizeof *k);
  if (!k)
    return dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "out of memory preparing a kernel");
  k->op = d->op;
  k->out = d->outputs[0];
  if (d->n_inputs)
    k->in = d->inputs[0];
  if (d->n_fattrs)
    k->value = d->fattrs[0];
  k->elem = dtype_size(k->out.dtype);
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = 0;
  *out = k;
  return NULL;
}

void cpu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k);
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
  const tyto_plugin_layout *in = &k->in, *out = &k->out;
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
  /* A fill is a copy from a one-element source broadcast everywhere. */
  float f = (float)k->value;
  double v = k->value;
  memset(src.in.strides, 0, sizeof src.in.strides);
  src.in.offset = 0;
  src.in.rank = k->out.rank;
  strided_copy(&src, k->elem == 4 ? (unsigned char *)&f : (unsigned char *)&v,
               dst);
}

tyto_plugin_error *cpu_kernel_run(const tyto_plugin_host *h,
                                  tyto_plugin_kernel *k, unsigned char **args) {
  switch (k->op) {
  case TYTO_PLUGIN_OP_COPY: strided_copy(k, args[0], args[1]); return NULL;
  case TYTO_PLUGIN_OP_FILL: fill(k, args[0]); return NULL;
  default:
    return h->error_new(TYTO_PLUGIN_ERR_INTERNAL, "kernel for op %u is missing",
                        k->op);
  }
}

/* Whether every element the layout reaches lies inside the binding. */
static int layout_fits(const tyto_plugin_layout *l, size_t elem,
                       const tyto_plugin_binding *b) {
  if (numel(l) == 0)
    return 1;
  int64_t lo = l->offset, hi = l->offset;
  for (uint32_t i = 0; i < l->rank; i++) {
    int64_t span = (l->shape[i] - 1) * l->strides[i];
    if (span < 0)
      lo += span;
    else
      hi += span;
  }
  int64_t first = (int64_t)b->offset + lo * (int64_t)elem;
  int64_t end = (int64_t)b->offset + (hi + 1) * (int64_t)elem;
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
  if (!s || n_inputs != want_in || n_outputs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: launch expected a stream, %u input and 1 output "
                        "binding; got %u and %u",
                        op_name(k->op), want_in, n_inputs, n_outputs);
  cpu_cmd *c = calloc(1, sizeof *c);
  unsigned char **args = calloc(n_inputs + n_outputs, sizeof *args);
  if (!c || !args) {
    free(c);
    free(args);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory queueing a launch");
  }
  for (uint32_t i = 0; i < n_inputs + n_outputs; i++) {
    const tyto_plugin_binding *b =
        i < n_inputs ? &inputs[i] : &outputs[i - n_inputs];
    if (!b->buffer || b->offset > b->buffer->size) {
      free(c);
      free(args);
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: binding %u has no buffer or an offset past its "
                          "end",
                          op_name(k->op), i);
    }
    const tyto_plugin_layout *l = i < n_inputs ? &k->in : &k->out;
    if (!layout_fits(l, k->elem, b)) {
      free(c);
      free(args);
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: the %s layout reaches outside its buffer of "
                          "%llu bytes (bound at offset %llu)",
                          op_name(k->op), i < n_inputs ? "input" : "output",
                          (unsigned long long)b->buffer->size,
                          (unsigned long long)b->offset);
    }
    args[i] = b->buffer->ptr + b->offset;
  }
  c->kind = CPU_CMD_LAUNCH;
  c->u.launch.kernel = k;
  c->u.launch.args = args;
  c->u.launch.n_args = n_inputs + n_outputs;
  return cpu_stream_enqueue(s, c);
}
