/*
 * The generic half of the CPU plugin's prepare/launch (see ops.h): every
 * layout is read into our struct size and measured once, at prepare, with
 * overflow checks, so that launch only compares byte ranges with the bound
 * buffers. Op families check descriptors (for supports_op and prepare
 * alike) and build the cpu_op that runs; kernels are refcounted so that a
 * release with launches still queued is safe.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "cpu.h"
#include "onednn.h"
#include "ops.h"
#include "pool.h"

struct tyto_plugin_kernel {
  atomic_int refs; /* the owner's, plus one per queued launch */
  uint32_t code;   /* the op */
  cpu_desc desc;   /* desc.d is NULL after prepare */
  cpu_op *op;
  cpu_pool *pool;
  size_t in_elem[CPU_MAX_IO], out_elem[CPU_MAX_IO];
};

size_t cpu_dtype_size(uint32_t dtype) {
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F32:
  case TYTO_PLUGIN_DTYPE_I32: return 4;
  case TYTO_PLUGIN_DTYPE_F64:
  case TYTO_PLUGIN_DTYPE_I64: return 8;
  case TYTO_PLUGIN_DTYPE_F16:
  case TYTO_PLUGIN_DTYPE_BF16: return 2;
  default: return 0;
  }
}

const char *cpu_dtype_name(uint32_t dtype) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16",
                                      "i32", "i64", "u8"};
  return dtype < sizeof names / sizeof names[0] ? names[dtype] : "unknown";
}

const char *cpu_op_name(uint32_t op) {
  switch (op) {
#define NAME(code, name)                                                       \
  case TYTO_PLUGIN_OP_##code: return name;
    /* clang-format off */
  NAME(COPY, "copy") NAME(FILL, "fill")
  NAME(NEG, "neg") NAME(ABS, "abs") NAME(SIGN, "sign") NAME(EXP, "exp")
  NAME(LOG, "log") NAME(LOG1P, "log1p") NAME(EXPM1, "expm1")
  NAME(SQRT, "sqrt") NAME(RSQRT, "rsqrt") NAME(SQUARE, "square")
  NAME(RECIPROCAL, "reciprocal") NAME(SIN, "sin") NAME(COS, "cos")
  NAME(TAN, "tan") NAME(ASIN, "asin") NAME(ACOS, "acos") NAME(ATAN, "atan")
  NAME(SINH, "sinh") NAME(COSH, "cosh") NAME(TANH, "tanh")
  NAME(ASINH, "asinh") NAME(ACOSH, "acosh") NAME(ATANH, "atanh")
  NAME(SIGMOID, "sigmoid") NAME(RELU, "relu") NAME(LEAKY_RELU, "leaky_relu")
  NAME(ELU, "elu") NAME(SOFTPLUS, "softplus") NAME(ERF, "erf")
  NAME(FLOOR, "floor") NAME(CEIL, "ceil") NAME(ROUND, "round")
  NAME(ADD, "add") NAME(SUB, "sub") NAME(MUL, "mul") NAME(DIV, "div")
  NAME(POW, "pow") NAME(MAX, "max") NAME(MIN, "min") NAME(ATAN2, "atan2")
  NAME(EQ, "eq") NAME(NE, "ne") NAME(LT, "lt") NAME(LE, "le") NAME(GT, "gt")
  NAME(GE, "ge") NAME(WHERE, "where") NAME(FMA, "fma")
  NAME(SUM, "sum") NAME(MEAN, "mean") NAME(MAX_REDUCE, "max_reduce")
  NAME(MIN_REDUCE, "min_reduce") NAME(PROD, "prod") NAME(ARGMAX, "argmax")
  NAME(ARGMIN, "argmin") NAME(LOG_SUM_EXP, "log_sum_exp")
  NAME(NORM_L1, "norm_l1") NAME(NORM_L2, "norm_l2")
  NAME(MATMUL, "matmul") NAME(PAD, "pad") NAME(GATHER, "gather")
  NAME(SCATTER_ADD, "scatter_add") NAME(ONE_HOT, "one_hot")
  NAME(SOFTMAX, "softmax") NAME(LOG_SOFTMAX, "log_softmax")
  NAME(CONV2D, "conv2d") NAME(MAX_POOL2D, "max_pool2d")
  NAME(AVG_POOL2D, "avg_pool2d") NAME(RANDOM_UNIFORM, "random_uniform")
  NAME(RANDOM_NORMAL, "random_normal")
  NAME(RANDOM_BERNOULLI, "random_bernoulli") NAME(INV, "inv")
  NAME(DET, "det") NAME(LOGDET, "logdet") NAME(SOLVE, "solve")
  NAME(CHOLESKY, "cholesky") NAME(QR, "qr")
  NAME(TRIANGULAR_SOLVE, "triangular_solve")
  NAME(CONV2D_BACKWARD_DATA, "conv2d_backward_data")
  NAME(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter")
  NAME(MAX_POOL2D_BACKWARD, "max_pool2d_backward")
  NAME(MAX_POOL2D_SELECT, "max_pool2d_select")
  NAME(AVG_POOL2D_BACKWARD, "avg_pool2d_backward")
  NAME(FUSED, "fused")
    /* clang-format on */
#undef NAME
                                                                                        case TYTO_PLUGIN_OP_INVALID
        : break;
  }
  return "op";
}

int64_t cpu_numel(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t i = 0; i < l->rank; i++)
    n *= l->shape[i];
  return n;
}

const char *cpu_shape_str(const tyto_plugin_layout *l, char *buf, size_t size) {
  tpc_format_shape_as(l, 1, buf, size);
  return buf;
}

int cpu_contiguous(const tyto_plugin_layout *l) {
  return tpc_dense(l);
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

/* Reads and measures one layout, refusing any overflow. */
static tyto_plugin_error *measure(const tyto_plugin_host *h, uint32_t op,
                                  const tyto_plugin_layout *src,
                                  const char *which, uint32_t index,
                                  cpu_reach *r) {
  r->l = read_layout(src);
  const tyto_plugin_layout *l = &r->l;
  if (l->rank > TYTO_PLUGIN_MAX_RANK)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: %s %u has rank %u, more than %d", cpu_op_name(op),
                        which, index, l->rank, TYTO_PLUGIN_MAX_RANK);
  if (!cpu_dtype_size(l->dtype))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: dtype %s is not supported by the cpu device "
                        "(f32, f64, f16, bf16, i32 and i64 are)",
                        cpu_op_name(op), cpu_dtype_name(l->dtype));
  int64_t elem = (int64_t)cpu_dtype_size(l->dtype), lo = l->offset,
          hi = l->offset, n = 1;
  int overflow = 0;
  r->empty = 0;
  for (uint32_t i = 0; i < l->rank; i++) {
    if (l->shape[i] < 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: %s %u has a negative dimension %lld",
                          cpu_op_name(op), which, index,
                          (long long)l->shape[i]);
    r->empty |= l->shape[i] == 0;
    overflow |= __builtin_mul_overflow(n, l->shape[i], &n);
  }
  for (uint32_t i = 0; i < l->rank && !r->empty; i++) {
    int64_t span;
    overflow |= __builtin_mul_overflow(l->shape[i] - 1, l->strides[i], &span);
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
                        cpu_op_name(op), which);
  return NULL;
}

/* The families, and the one that runs each op code. `half`: the family's
 * check sees F16 and BF16 operands (and runs them, or refuses them with
 * its own reason); for the others describe() refuses them. */
static const cpu_family
    copy_family = {cpu_copy_check, cpu_copy_prepare, 1},
    eltwise_family = {cpu_eltwise_check, cpu_eltwise_prepare, 1},
    reduce_family = {cpu_reduce_check, cpu_reduce_prepare, 1},
    matmul_family = {cpu_matmul_check, cpu_matmul_prepare, 0},
    conv_family = {cpu_conv_check, cpu_conv_prepare, 0},
    widen_family = {cpu_widen_check, cpu_widen_prepare, 1},
    layout_family = {cpu_layout_check, cpu_layout_prepare, 1},
    random_family = {cpu_random_check, cpu_random_prepare, 1},
    linalg_family = {cpu_linalg_check, cpu_linalg_prepare, 1},
    fused_family = {cpu_fused_check, cpu_fused_prepare, 1},
    matmul16_family = {cpu_matmul16_check, cpu_matmul16_prepare, 1},
    conv16_family = {cpu_conv16_check, cpu_conv16_prepare, 1};

static int is_pool(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MAX_POOL2D || op == TYTO_PLUGIN_OP_AVG_POOL2D ||
         (op >= TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD &&
          op <= TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD);
}

/* half: whether an operand is F16 or BF16. MATMUL and the convolutions
 * in those run in matmul16.c and conv16.c (oneDNN's bf16 kernels, or
 * through f32); pooling through the widening wrapper (widen.c) around
 * conv.c's f32 kernels. */
static const cpu_family *family_of(uint32_t op, int half) {
  if (op == TYTO_PLUGIN_OP_COPY || op == TYTO_PLUGIN_OP_FILL)
    return &copy_family;
  if (op >= TYTO_PLUGIN_OP_NEG && op <= TYTO_PLUGIN_OP_FMA)
    return &eltwise_family;
  if ((op >= TYTO_PLUGIN_OP_SUM && op <= TYTO_PLUGIN_OP_NORM_L2) ||
      op == TYTO_PLUGIN_OP_SOFTMAX || op == TYTO_PLUGIN_OP_LOG_SOFTMAX)
    return &reduce_family;
  if (op == TYTO_PLUGIN_OP_MATMUL)
    return half ? &matmul16_family : &matmul_family;
  if (op >= TYTO_PLUGIN_OP_CONV2D && op <= TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD)
    return !half ? &conv_family : is_pool(op) ? &widen_family : &conv16_family;
  if (op >= TYTO_PLUGIN_OP_PAD && op <= TYTO_PLUGIN_OP_ONE_HOT)
    return &layout_family;
  if (op >= TYTO_PLUGIN_OP_RANDOM_UNIFORM &&
      op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI)
    return &random_family;
  if (op >= TYTO_PLUGIN_OP_INV && op <= TYTO_PLUGIN_OP_TRIANGULAR_SOLVE)
    return &linalg_family;
  if (op == TYTO_PLUGIN_OP_FUSED)
    return &fused_family;
  return NULL;
}

/* Whether an op runs with I32 or I64 operands (sdk/docs/ops.md,
 * "Integer dtypes"): each family then checks how its operands' dtypes
 * agree. ARGMAX and ARGMIN give an integer index of a floating input. */
static int int_op(uint32_t op, const cpu_desc *desc) {
  if (tpc_int_eltwise(op) || tpc_int_reduce(op))
    return 1;
  switch (op) {
  case TYTO_PLUGIN_OP_COPY:
  case TYTO_PLUGIN_OP_FILL:
  case TYTO_PLUGIN_OP_PAD:
  case TYTO_PLUGIN_OP_CAST:
  case TYTO_PLUGIN_OP_GATHER:
  case TYTO_PLUGIN_OP_SCATTER_ADD:
  case TYTO_PLUGIN_OP_ONE_HOT: return 1;
  case TYTO_PLUGIN_OP_ARGMAX:
  case TYTO_PLUGIN_OP_ARGMIN:
    return desc->n_in < 1 || !tpc_dtype_int(desc->in[0].l.dtype);
  default: return 0;
  }
}

/* Reads a descriptor and measures its layouts into *desc: the part of the
 * checks every family shares. *family: the op's. */
static tyto_plugin_error *describe(const tyto_plugin_host *h,
                                   const tyto_plugin_op_desc *d, cpu_desc *desc,
                                   const cpu_family **family) {
  *family = family_of(d->op, 0);
  if (!*family)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "op %u (%s) is not supported by the cpu device", d->op,
                        cpu_op_name(d->op));
  if (d->n_inputs > CPU_MAX_IO || d->n_outputs > CPU_MAX_IO ||
      (d->n_inputs && !d->inputs) || (d->n_outputs && !d->outputs))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: %u inputs and %u outputs described (at most %d "
                        "of each, with their layouts)",
                        cpu_op_name(d->op), d->n_inputs, d->n_outputs,
                        CPU_MAX_IO);
  memset(desc, 0, sizeof *desc);
  desc->d = d;
  desc->n_in = d->n_inputs;
  desc->n_out = d->n_outputs;
  tyto_plugin_error *e = NULL;
  for (uint32_t i = 0; !e && i < d->n_inputs; i++)
    e = measure(h, d->op, TYTO_PLUGIN_AT(tyto_plugin_layout, d->inputs, i),
                "input", i, &desc->in[i]);
  for (uint32_t i = 0; !e && i < d->n_outputs; i++)
    e = measure(h, d->op, TYTO_PLUGIN_AT(tyto_plugin_layout, d->outputs, i),
                "output", i, &desc->out[i]);
  if (!e && (d->n_iattrs && !d->iattrs))
    e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %u integer attributes but no array",
                     cpu_op_name(d->op), d->n_iattrs);
  if (!e && (d->n_fattrs && !d->fattrs))
    e = h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %u real attributes but no array", cpu_op_name(d->op),
                     d->n_fattrs);
  if (e)
    return e;
  for (uint32_t i = 0; i < desc->n_in + desc->n_out; i++) {
    uint32_t dt = i < desc->n_in ? desc->in[i].l.dtype
                                 : desc->out[i - desc->n_in].l.dtype;
    if (tpc_dtype_int(dt) && !int_op(d->op, desc))
      return h->error_new(
          TYTO_PLUGIN_ERR_UNSUPPORTED,
          "%s: %s %s is not supported by the cpu device: integers run only "
          "copy, fill, pad, cast, neg, abs, sign, add, sub, mul, max, min, "
          "the comparisons, where, sum, max_reduce, min_reduce, gather, "
          "scatter_add, one_hot, and argmax/argmin of a floating input; "
          "cast to a floating dtype first",
          cpu_op_name(d->op), i < desc->n_in ? "input" : "output",
          cpu_dtype_name(dt));
  }
  uint32_t half = UINT32_MAX; /* the first 16-bit operand's dtype */
  for (uint32_t i = 0; i < desc->n_in + desc->n_out && half == UINT32_MAX;
       i++) {
    uint32_t dt = i < desc->n_in ? desc->in[i].l.dtype
                                 : desc->out[i - desc->n_in].l.dtype;
    if (cpu_dtype_half(dt))
      half = dt;
  }
  if (half == UINT32_MAX)
    return NULL;
  *family = family_of(d->op, 1);
  if (!(*family)->half)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: %s is not supported by the cpu device for this "
                        "op (f32 and f64 are); cast to f32 first",
                        cpu_op_name(d->op), cpu_dtype_name(half));
  return NULL;
}

/* The answer prepare would give, from the descriptor alone: the family's
 * check is the one its prepare runs, and builds nothing. */
tyto_plugin_error *cpu_supports_op(tyto_plugin_device *dev,
                                   const tyto_plugin_op_desc *d) {
  const tyto_plugin_host *h = dev->st->host;
  const cpu_family *family;
  cpu_desc desc;
  tyto_plugin_error *e = describe(h, d, &desc, &family);
  return e ? e : family->check(h, &desc);
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
  const cpu_family *family;
  tyto_plugin_error *e = describe(h, d, &k->desc, &family);
  if (!e) {
    /* oneDNN primitives made here take cpu:0's team, not the caller's. */
    int team = cpu_dnnl_threads_enter(cpu_pool_size(dev->pool));
    e = family->prepare(h, &k->desc, &k->op);
    cpu_dnnl_threads_leave(team);
  }
  if (e) {
    free(k);
    return e;
  }
  k->desc.d = NULL; /* the descriptor is the caller's, valid only now */
  k->code = d->op;
  for (uint32_t i = 0; i < k->desc.n_in; i++)
    k->in_elem[i] = cpu_dtype_size(k->desc.in[i].l.dtype);
  for (uint32_t i = 0; i < k->desc.n_out; i++)
    k->out_elem[i] = cpu_dtype_size(k->desc.out[i].l.dtype);
  k->pool = dev->pool;
  atomic_init(&k->refs, 1);
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_kernel_info, workspace_bytes))
    info->workspace_bytes = k->op->workspace_bytes;
  *out = k;
  return NULL;
}

static void kernel_unref(tyto_plugin_kernel *k) {
  if (atomic_fetch_sub(&k->refs, 1) == 1) {
    k->op->destroy(k->op);
    free(k);
  }
}

/* Queued launches hold their own reference: the kernel lives until the
 * last of them has run. */
void cpu_kernel_release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  if (k)
    kernel_unref(k);
}

tyto_plugin_error *cpu_kernel_run(const tyto_plugin_host *h,
                                  tyto_plugin_kernel *k, unsigned char **args) {
  (void)h;
  cpu_dnnl_threads_use(cpu_pool_size(k->pool));
  tyto_plugin_error *e = k->op->run(k->op, &k->desc, args, k->pool);
  kernel_unref(k); /* the launch's reference */
  return e;
}

/* Whether every byte the layout reaches lies inside the binding. */
static int layout_fits(const cpu_reach *r, const tyto_plugin_binding *b) {
  if (r->empty)
    return 1;
  int64_t first, end;
  if (b->offset > (uint64_t)INT64_MAX ||
      __builtin_add_overflow((int64_t)b->offset, r->lo_bytes, &first) ||
      __builtin_add_overflow((int64_t)b->offset, r->end_bytes, &end))
    return 0;
  return first >= 0 && (uint64_t)end <= b->buffer->size;
}

static tyto_plugin_error *
check_binding(const tyto_plugin_host *h, const tyto_plugin_kernel *k,
              const tyto_plugin_binding *b, const char *kind, uint32_t i,
              uint32_t n, const cpu_reach *r, size_t elem) {
  char which[32];
  if (n > 1)
    snprintf(which, sizeof which, "%s %u", kind, i);
  else
    snprintf(which, sizeof which, "%s", kind);
  const char *op = cpu_op_name(k->code);
  if (!b->buffer)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the %s binding has no buffer", op, which);
  if (b->offset % elem != 0)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the %s binding's offset %llu is not a multiple "
                        "of the element size %zu",
                        op, which, (unsigned long long)b->offset, elem);
  if (!layout_fits(r, b))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: the %s layout reaches outside its buffer of %llu "
                        "bytes (bound at offset %llu)",
                        op, which, (unsigned long long)b->buffer->size,
                        (unsigned long long)b->offset);
  return NULL;
}

tyto_plugin_error *
cpu_launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
           tyto_plugin_kernel *k, const tyto_plugin_binding *inputs,
           uint32_t n_inputs, const tyto_plugin_binding *outputs,
           uint32_t n_outputs, const tyto_plugin_binding *workspace) {
  const tyto_plugin_host *h = dev->st->host;
  const cpu_desc *d = &k->desc;
  if (!s || n_inputs != d->n_in || n_outputs != d->n_out ||
      (n_inputs && !inputs) || (n_outputs && !outputs))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "launch: expected a stream, %u input and %u output "
                        "bindings; got %u and %u",
                        d->n_in, d->n_out, n_inputs, n_outputs);
  unsigned char *args[2 * CPU_MAX_IO + 1];
  uint32_t n = 0;
  tyto_plugin_error *e = NULL;
  for (uint32_t i = 0; !e && i < n_inputs; i++) {
    const tyto_plugin_binding *b =
        TYTO_PLUGIN_AT(tyto_plugin_binding, inputs, i);
    e = check_binding(h, k, b, "input", i, n_inputs, &d->in[i], k->in_elem[i]);
    if (!e)
      args[n++] = b->buffer->ptr + b->offset;
  }
  for (uint32_t i = 0; !e && i < n_outputs; i++) {
    const tyto_plugin_binding *b =
        TYTO_PLUGIN_AT(tyto_plugin_binding, outputs, i);
    e = check_binding(h, k, b, "output", i, n_outputs, &d->out[i],
                      k->out_elem[i]);
    if (!e)
      args[n++] = b->buffer->ptr + b->offset;
  }
  if (e)
    return e;
  args[n] = NULL;
  if (k->op->workspace_bytes) {
    if (!workspace || !workspace->buffer ||
        workspace->offset > workspace->buffer->size ||
        workspace->buffer->size - workspace->offset < k->op->workspace_bytes)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "launch: the kernel needs a workspace of %llu "
                          "bytes",
                          (unsigned long long)k->op->workspace_bytes);
    args[n] = workspace->buffer->ptr + workspace->offset;
  }
  cpu_cmd *c = calloc(1, sizeof *c);
  unsigned char **kept = calloc(n + 1, sizeof *kept);
  if (!c || !kept) {
    free(c);
    free(kept);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of memory queueing a launch");
  }
  memcpy(kept, args, (n + 1) * sizeof *kept);
  atomic_fetch_add(&k->refs, 1);
  c->kind = CPU_CMD_LAUNCH;
  c->u.launch.kernel = k;
  c->u.launch.args = kept;
  c->u.launch.n_args = n;
  return cpu_stream_enqueue(s, c);
}
