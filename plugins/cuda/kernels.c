/*
 * The op path: check an op descriptor, simplify its layouts, build (or find
 * in the cache) the kernel for it, and launch it with every binding checked
 * against its buffer. Ops so far: COPY (any dtype: it moves bits) and FILL
 * (f32, f64).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_plugin.h"

/* An op descriptor after checking: what the kernel needs, with dimensions
 * of extent 1 dropped and dimensions that are contiguous in every tensor
 * merged, so a transposed copy of a [64,3,32,32] tensor runs as rank 2-3. */
typedef struct plan {
  uint32_t op, dtype, rank;
  size_t elem;
  int64_t n;
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t in_stride[TYTO_PLUGIN_MAX_RANK], out_stride[TYTO_PLUGIN_MAX_RANK];
  int64_t in_offset, out_offset;
  double value;
  int64_t in_lo, in_hi, out_lo, out_hi; /* element ranges touched */
  int idx32;
} plan;

static size_t dtype_size(uint32_t dtype) {
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F32:
  case TYTO_PLUGIN_DTYPE_I32: return 4;
  case TYTO_PLUGIN_DTYPE_F64:
  case TYTO_PLUGIN_DTYPE_I64: return 8;
  case TYTO_PLUGIN_DTYPE_F16:
  case TYTO_PLUGIN_DTYPE_BF16: return 2;
  case TYTO_PLUGIN_DTYPE_U8: return 1;
  default: return 0;
  }
}

static const char *op_name(uint32_t op) {
  return op == TYTO_PLUGIN_OP_COPY   ? "copy"
         : op == TYTO_PLUGIN_OP_FILL ? "fill"
                                     : "op";
}

/* "[2,3,4]" into buf, for messages. */
static const char *shape_str(const tyto_plugin_layout *l, char *buf,
                             size_t size) {
  size_t used = 0;
  int w = snprintf(buf, size, "[");
  used = w > 0 ? (size_t)w : 0;
  for (uint32_t k = 0; k < l->rank && used < size; k++) {
    w = snprintf(buf + used, size - used, "%s%lld", k ? "," : "",
                 (long long)l->shape[k]);
    used += w > 0 ? (size_t)w : 0;
  }
  if (used < size)
    snprintf(buf + used, size - used, "]");
  return buf;
}

/* Checks one layout and returns it, or NULL with *err set. */
static const tyto_plugin_layout *layout_at(const tyto_plugin_host *host,
                                           uint32_t op, const char *which,
                                           const tyto_plugin_layout *array,
                                           uint32_t i,
                                           tyto_plugin_error **err) {
  const tyto_plugin_layout *l;
  *err = NULL;
  if (array == NULL) {
    *err = host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s layouts are NULL", op_name(op), which);
    return NULL;
  }
  l = tcu_abi_at(array, sizeof *array, i);
  if (!TYTO_PLUGIN_HAS_FIELD(l, tyto_plugin_layout, offset)) {
    *err = host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s %u layout is truncated (struct_size %zu)",
                           op_name(op), which, i, l->struct_size);
    return NULL;
  }
  if (dtype_size(l->dtype) == 0) {
    *err = host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s %u has unknown dtype %u", op_name(op), which,
                           i, l->dtype);
    return NULL;
  }
  if (l->rank > TYTO_PLUGIN_MAX_RANK) {
    *err = host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s %u has rank %u; at most %d", op_name(op),
                           which, i, l->rank, TYTO_PLUGIN_MAX_RANK);
    return NULL;
  }
  for (uint32_t k = 0; k < l->rank; k++) {
    if (l->shape[k] < 0) {
      *err = host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: %s %u has negative extent %lld in "
                             "dimension %u",
                             op_name(op), which, i, (long long)l->shape[k], k);
      return NULL;
    }
  }
  return l;
}

/* Element range [lo, hi] a layout touches relative to its binding, and its
 * reach (|offset| + sum |(extent-1)*stride|), which bounds every partial
 * index sum the kernel forms. Returns 0 on int64 overflow. */
static int span(const plan *p, const int64_t *stride, int64_t offset,
                int64_t *lo, int64_t *hi, int64_t *reach) {
  int64_t l = offset, h = offset, r;
  if (offset == INT64_MIN)
    return 0;
  r = offset < 0 ? -offset : offset;
  for (uint32_t k = 0; k < p->rank; k++) {
    int64_t d;
    if (__builtin_mul_overflow(p->shape[k] - 1, stride[k], &d) ||
        d == INT64_MIN)
      return 0;
    if (d < 0 ? __builtin_add_overflow(l, d, &l)
              : __builtin_add_overflow(h, d, &h))
      return 0;
    if (__builtin_add_overflow(r, d < 0 ? -d : d, &r))
      return 0;
  }
  *lo = l;
  *hi = h;
  *reach = r;
  return 1;
}

/* Drops extent-1 dimensions and merges an outer dimension into the next
 * inner one where, in both tensors, outer stride == inner stride * inner
 * extent: the pair then walks memory like one dimension. */
static void simplify(plan *p) {
  uint32_t r = 0;
  for (uint32_t k = 0; k < p->rank; k++) {
    int64_t merged;
    if (p->shape[k] == 1)
      continue;
    if (r > 0 &&
        !__builtin_mul_overflow(p->in_stride[k], p->shape[k], &merged) &&
        merged == p->in_stride[r - 1] &&
        !__builtin_mul_overflow(p->out_stride[k], p->shape[k], &merged) &&
        merged == p->out_stride[r - 1]) {
      p->shape[r - 1] *= p->shape[k]; /* <= n, cannot overflow */
      p->in_stride[r - 1] = p->in_stride[k];
      p->out_stride[r - 1] = p->out_stride[k];
      continue;
    }
    p->shape[r] = p->shape[k];
    p->in_stride[r] = p->in_stride[k];
    p->out_stride[r] = p->out_stride[k];
    r++;
  }
  p->rank = r;
  /* Unused entries are zero, so equal plans pass equal arguments. */
  for (uint32_t k = r; k < TYTO_PLUGIN_MAX_RANK; k++)
    p->shape[k] = p->in_stride[k] = p->out_stride[k] = 0;
}

/* Everything prepare() and supports_op() check, without compiling. */
static tyto_plugin_error *analyse(tyto_plugin_device *dev,
                                  const tyto_plugin_op_desc *d, plan *p) {
  const tyto_plugin_host *host = dev->state->host;
  const tyto_plugin_layout *in = NULL, *out;
  tyto_plugin_error *err;
  int64_t in_reach = 0, out_reach = 0;
  uint32_t op;
  char s1[160], s2[160];

  memset(p, 0, sizeof *p);
  if (d == NULL || !TYTO_PLUGIN_HAS_FIELD(d, tyto_plugin_op_desc, outputs))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "op descriptor is NULL or truncated");
  op = d->op;
  if (op != TYTO_PLUGIN_OP_COPY && op != TYTO_PLUGIN_OP_FILL)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "op %u is not supported by the cuda plugin (it "
                           "provides copy and fill)",
                           op);
  if (d->n_inputs != (op == TYTO_PLUGIN_OP_COPY ? 1u : 0u) || d->n_outputs != 1)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: takes %u input and 1 output, got %u and %u",
                           op_name(op), op == TYTO_PLUGIN_OP_COPY ? 1u : 0u,
                           d->n_inputs, d->n_outputs);
  if ((out = layout_at(host, op, "output", d->outputs, 0, &err)) == NULL)
    return err;
  p->op = op;
  p->dtype = out->dtype;
  p->elem = dtype_size(out->dtype);
  p->rank = out->rank;
  p->out_offset = out->offset;
  memcpy(p->shape, out->shape, sizeof p->shape);
  memcpy(p->out_stride, out->strides, sizeof p->out_stride);

  if (op == TYTO_PLUGIN_OP_COPY) {
    if ((in = layout_at(host, op, "input", d->inputs, 0, &err)) == NULL)
      return err;
    if (in->dtype != out->dtype)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "copy: input is %s but output is %s; copy does "
                             "not convert",
                             tcu_dtype_name(in->dtype),
                             tcu_dtype_name(out->dtype));
    if (in->rank != out->rank ||
        memcmp(in->shape, out->shape, in->rank * sizeof in->shape[0]) != 0)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "copy: input shape %s differs from output shape "
                             "%s (broadcast with stride 0, not by shape)",
                             shape_str(in, s1, sizeof s1),
                             shape_str(out, s2, sizeof s2));
    memcpy(p->in_stride, in->strides, sizeof p->in_stride);
    p->in_offset = in->offset;
  } else {
    if (!TYTO_PLUGIN_HAS_FIELD(d, tyto_plugin_op_desc, fattrs) ||
        d->n_fattrs < 1 || d->fattrs == NULL)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "fill: needs its value in fattrs[0]");
    if (out->dtype != TYTO_PLUGIN_DTYPE_F32 &&
        out->dtype != TYTO_PLUGIN_DTYPE_F64)
      return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                             "fill: %s output not supported by the cuda "
                             "plugin yet (f32, f64)",
                             tcu_dtype_name(out->dtype));
    p->value = d->fattrs[0];
  }

  p->n = 1;
  for (uint32_t k = 0; k < p->rank; k++)
    if (__builtin_mul_overflow(p->n, p->shape[k], &p->n))
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: shape %s has more than 2^63 elements",
                             op_name(op), shape_str(out, s1, sizeof s1));
  /* Two threads writing one element would race: an output stride of 0
   * is only harmless on an extent of 1. */
  for (uint32_t k = 0; k < p->rank && p->n > 0; k++)
    if (p->out_stride[k] == 0 && p->shape[k] > 1)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: output stride of dimension %u is 0 with "
                             "extent %lld; outputs must not overlap",
                             op_name(op), k, (long long)p->shape[k]);
  if (p->n == 0)
    return NULL; /* nothing to run: launch() only checks its bindings */

  simplify(p);
  if (!span(p, p->out_stride, p->out_offset, &p->out_lo, &p->out_hi,
            &out_reach) ||
      (in != NULL &&
       !span(p, p->in_stride, p->in_offset, &p->in_lo, &p->in_hi, &in_reach)))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: strides and offsets of shape %s overflow "
                           "64-bit element indices",
                           op_name(op), shape_str(out, s1, sizeof s1));
  /* 32-bit division is several times cheaper on the GPU; use it whenever
   * no index the kernel forms can exceed int32. */
  p->idx32 =
      p->n <= INT32_MAX && out_reach <= INT32_MAX && in_reach <= INT32_MAX;
  return NULL;
}

tyto_plugin_error *tcu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *desc) {
  plan p;
  tyto_plugin_error *err = analyse(dev, desc, &p);
  if (err != NULL)
    return err;
  if (dev->arch[0] == '\0')
    return dev->state->host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                                       "cuda:%d: %s", dev->index,
                                       dev->arch_error);
  return NULL;
}

tyto_plugin_error *tcu_prepare(tyto_plugin_device *dev,
                               const tyto_plugin_op_desc *desc,
                               tyto_plugin_kernel **out,
                               tyto_plugin_kernel_info *info) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_kernel *k;
  tyto_plugin_error *err;
  plan p;
  if (out == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "prepare: out is NULL");
  *out = NULL;
  if ((err = analyse(dev, desc, &p)) != NULL)
    return err;
  k = calloc(1, sizeof *k);
  if (k == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "prepare: out of host memory");
  k->op = p.op;
  k->n_inputs = p.op == TYTO_PLUGIN_OP_COPY ? 1 : 0;
  k->n_outputs = 1;
  k->in_elem = k->out_elem = p.elem;
  k->in_lo = p.in_lo;
  k->in_hi = p.in_hi;
  k->out_lo = p.out_lo;
  k->out_hi = p.out_hi;
  k->args.n = p.n;
  memcpy(k->args.shape, p.shape, sizeof p.shape);
  memcpy(k->args.in_stride, p.in_stride, sizeof p.in_stride);
  memcpy(k->args.out_stride, p.out_stride, sizeof p.out_stride);
  k->args.in_offset = p.in_offset;
  k->args.out_offset = p.out_offset;
  k->args.value = p.value;

  if (p.n > 0) {
    char *source = tcu_codegen(p.op, p.dtype, p.elem, p.rank, p.idx32);
    int64_t blocks = p.n / TCU_BLOCK + (p.n % TCU_BLOCK != 0);
    /* Enough blocks to fill every SM several times over; the grid-stride
     * loop covers the rest. */
    int64_t cap = (int64_t)(dev->sm_count ? dev->sm_count : 1) * 32;
    if (source == NULL) {
      free(k);
      return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                             "prepare: cannot generate kernel source");
    }
    err = tcu_module_get(dev, source, &k->module);
    free(source);
    if (err != NULL) {
      free(k);
      return err;
    }
    k->grid = (unsigned)(blocks < cap ? blocks : cap);
  }
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = 0;
  *out = k;
  return NULL;
}

/* Modules stay in the device's cache for the next prepare(); the kernel
 * handle itself is only parameters. */
void tcu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k);
}

/* Checks one binding and returns the device address of its position. */
static tyto_plugin_error *bind(tyto_plugin_device *dev,
                               const tyto_plugin_kernel *k, const char *which,
                               const tyto_plugin_binding *array, uint32_t i,
                               size_t elem, int64_t lo, int64_t hi,
                               char **ptr) {
  const tyto_plugin_host *host = dev->state->host;
  const tyto_plugin_binding *b;
  const tyto_plugin_buffer *buf;
  int64_t base, first, last, end;
  if (array == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s bindings are NULL", which);
  b = tcu_abi_at(array, sizeof *array, i);
  if (!TYTO_PLUGIN_HAS_FIELD(b, tyto_plugin_binding, offset) ||
      b->buffer == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s %u has no buffer", which, i);
  buf = b->buffer;
  if (buf->device != dev->index)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s %u is a buffer of cuda:%d, not cuda:%d",
                           which, i, buf->device, dev->index);
  if (b->offset % elem != 0 || b->offset > buf->size)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s %u offset %llu bytes is %s", which, i,
                           (unsigned long long)b->offset,
                           b->offset > buf->size ? "past the buffer's end"
                                                 : "not a multiple of the "
                                                   "element size");
  *ptr = (char *)buf->ptr + b->offset;
  if (k->args.n == 0)
    return NULL;
  base = (int64_t)(b->offset / elem);
  if (__builtin_add_overflow(base, lo, &first) ||
      __builtin_add_overflow(base, hi, &last) || first < 0 ||
      __builtin_mul_overflow(last + 1, (int64_t)elem, &end) ||
      (uint64_t)end > buf->size)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "launch: %s %u reaches elements %lld..%lld from its position "
        "(offset %llu bytes, %zu-byte elements) but the buffer holds %llu "
        "bytes",
        which, i, (long long)lo, (long long)hi, (unsigned long long)b->offset,
        elem, (unsigned long long)buf->size);
  return NULL;
}

tyto_plugin_error *
tcu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  char *in_ptr = NULL, *out_ptr = NULL;
  void *params[3];
  tcu_args args;
  cudaError_t e;
  (void)workspace; /* prepare() never asks for one */

  if (k == NULL || s == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s is NULL",
                           k == NULL ? "kernel" : "stream");
  if (s->device != dev->index)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: the stream belongs to cuda:%d, not "
                           "cuda:%d",
                           s->device, dev->index);
  if (n_inputs != k->n_inputs || n_outputs != k->n_outputs)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "launch: %s kernel takes %u input(s) and %u "
                           "output(s), got %u and %u",
                           op_name(k->op), k->n_inputs, k->n_outputs, n_inputs,
                           n_outputs);
  if (k->n_inputs > 0 && (err = bind(dev, k, "input", inputs, 0, k->in_elem,
                                     k->in_lo, k->in_hi, &in_ptr)) != NULL)
    return err;
  if ((err = bind(dev, k, "output", outputs, 0, k->out_elem, k->out_lo,
                  k->out_hi, &out_ptr)) != NULL)
    return err;
  if (k->args.n == 0)
    return NULL;

  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  args = k->args;
  if (k->op == TYTO_PLUGIN_OP_COPY) {
    params[0] = &in_ptr;
    params[1] = &out_ptr;
    params[2] = &args;
  } else {
    params[0] = &out_ptr;
    params[1] = &args;
  }
  /* A cudaKernel_t from cudaLibraryGetKernel is accepted in place of a
   * function symbol. */
  e = cudaLaunchKernel((const void *)k->module->kernel, (dim3){k->grid, 1, 1},
                       (dim3){TCU_BLOCK, 1, 1}, params, 0, s->stream);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: %s: cudaLaunchKernel (%u blocks)",
                          dev->index, op_name(k->op), k->grid);
  return NULL;
}
