/*
 * Lowering: each graph node becomes one or more kernel descriptors of the
 * plugin ABI. Views (reshape, permute, broadcast, slice, flip, tile) are
 * strided COPYs; elementwise inputs are broadcast to the output's shape
 * with stride-0 layouts; reductions write their packed result through a
 * layout that keeps the reduced axes at extent 1.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "../exec/program.h"
#include "../graph/dtype.h"
#include "../runtime/error.h"
#include "../runtime/runtime.h"

/* Graph op codes are passed to plugins as kernel op codes in these ranges;
 * keep the two enums in step. */
_Static_assert((int)TYTO_OP_CAST == (int)TYTO_PLUGIN_OP_CAST,
               "the graph's and the ABI's CAST codes agree");
_Static_assert((int)TYTO_OP_NEG == (int)TYTO_PLUGIN_OP_NEG &&
                   (int)TYTO_OP_ROUND == (int)TYTO_PLUGIN_OP_ROUND,
               "unary op codes");
_Static_assert((int)TYTO_OP_ADD == (int)TYTO_PLUGIN_OP_ADD &&
                   (int)TYTO_OP_GE == (int)TYTO_PLUGIN_OP_GE,
               "binary op codes");
_Static_assert((int)TYTO_OP_WHERE == (int)TYTO_PLUGIN_OP_WHERE &&
                   (int)TYTO_OP_FMA == (int)TYTO_PLUGIN_OP_FMA,
               "ternary op codes");
_Static_assert((int)TYTO_OP_SUM == (int)TYTO_PLUGIN_OP_SUM &&
                   (int)TYTO_OP_NORM_L2 == (int)TYTO_PLUGIN_OP_NORM_L2,
               "reduction op codes");
_Static_assert((int)TYTO_OP_INV == (int)TYTO_PLUGIN_OP_INV &&
                   (int)TYTO_OP_QR == (int)TYTO_PLUGIN_OP_QR &&
                   (int)TYTO_OP_TRIANGULAR_SOLVE ==
                       (int)TYTO_PLUGIN_OP_TRIANGULAR_SOLVE,
               "linear algebra op codes");
/* The neural ops are mapped by offset from SOFTMAX (the graph's and the
 * ABI's ranges start at different values but run in one order). */
_Static_assert(TYTO_OP_CONV2D - TYTO_OP_SOFTMAX ==
                       TYTO_PLUGIN_OP_CONV2D - TYTO_PLUGIN_OP_SOFTMAX &&
                   TYTO_OP_AVG_POOL2D_BACKWARD - TYTO_OP_SOFTMAX ==
                       TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD -
                           TYTO_PLUGIN_OP_SOFTMAX &&
                   TYTO_OP_CONV2D_BACKWARD_DATA - TYTO_OP_SOFTMAX ==
                       TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA -
                           TYTO_PLUGIN_OP_SOFTMAX,
               "neural op codes");

void exec_layout(tyto_plugin_layout *l, const tyto_tensor *t) {
  memset(l, 0, sizeof *l);
  l->struct_size = sizeof *l;
  l->dtype = dtype_info_of(t->dtype)->abi;
  l->rank = (uint32_t)t->rank;
  int64_t n = 1;
  for (int i = t->rank; i-- > 0;) {
    l->shape[i] = t->shape[i];
    l->strides[i] = n;
    n *= t->shape[i];
  }
}

/* x's row-major layout seen with out's shape (NumPy broadcasting: leading
 * axes added, extent-1 axes repeated with stride 0), in x's dtype (a CAST's
 * or a converting FUSED node's input differs from its output). */
static void broadcast_layout(tyto_plugin_layout *l, const tyto_tensor *x,
                             const tyto_tensor *out) {
  tyto_plugin_layout src;
  exec_layout(&src, x);
  exec_layout(l, out);
  l->dtype = src.dtype;
  int lead = out->rank - x->rank;
  for (int i = 0; i < out->rank; i++) {
    int j = i - lead;
    l->strides[i] = j < 0 || x->shape[j] == 1 ? 0 : src.strides[j];
  }
}

/* A new kernel computing slot s with room for n_in inputs and n_out
 * outputs (at least two: QR's). */
exec_kernel *exec_add_kernel(tyto_program *p, int s, uint32_t op, size_t n_in,
                             size_t n_out) {
  if (p->n_kernels == p->cap_kernels) {
    size_t cap = p->cap_kernels ? 2 * p->cap_kernels : 16;
    exec_kernel *k = realloc(p->kernels, cap * sizeof *k);
    if (!k)
      return NULL;
    p->kernels = k;
    p->cap_kernels = cap;
  }
  if (n_out < 2)
    n_out = 2;
  size_t nl = n_in + n_out;
  unsigned char *mem =
      calloc(1, nl * (sizeof(tyto_plugin_layout) + sizeof(int)));
  if (!mem)
    return NULL;
  exec_kernel *k = &p->kernels[p->n_kernels++];
  memset(k, 0, sizeof *k);
  k->op = op;
  k->slot = s;
  k->in_l = (tyto_plugin_layout *)mem;
  k->out_l = k->in_l + n_in;
  k->in = (int *)(k->out_l + n_out);
  k->out = k->in + n_in;
  return k;
}

static int slot_of(const tyto_program *p, const tyto_tensor *t) {
  return p->slot_of[t->index];
}

/* A kernel whose inputs are the node's inputs, row-major (or broadcast to
 * the output when `bcast`), writing slot s row-major. */
static exec_kernel *plain(tyto_program *p, int s, uint32_t op, int bcast) {
  const tyto_tensor *t = p->slots[s].t;
  exec_kernel *k = exec_add_kernel(p, s, op, t->n_inputs, 1);
  if (!k)
    return NULL;
  k->n_in = (uint32_t)t->n_inputs;
  for (size_t i = 0; i < t->n_inputs; i++) {
    k->in[i] = slot_of(p, t->inputs[i]);
    if (bcast)
      broadcast_layout(&k->in_l[i], t->inputs[i], t);
    else
      exec_layout(&k->in_l[i], t->inputs[i]);
  }
  k->n_out = 1;
  k->out[0] = s;
  exec_layout(&k->out_l[0], t);
  return k;
}

static void set_iattrs(exec_kernel *k, size_t n, const int64_t *a) {
  k->n_iattrs = (uint32_t)n;
  if (n)
    memcpy(k->iattrs, a, n * sizeof *a);
}

static void set_fattrs(exec_kernel *k, size_t n, const double *a) {
  k->n_fattrs = (uint32_t)n;
  if (n)
    memcpy(k->fattrs, a, n * sizeof *a);
}

static tyto_status oom(void) {
  return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "compile: out of memory");
}

static tyto_status cannot(const tyto_program *p, const tyto_tensor *t,
                          const char *why) {
  return rt_fail(TYTO_ERR_UNSUPPORTED,
                 "compile: op %s (tensor #%lld) cannot be lowered yet%s%s",
                 tyto_op_name(t->op), (long long)exec_user_index(p, t),
                 why ? ": " : "", why ? why : "");
}

/* A COPY from x (viewed through `in`) into slot s (viewed through out). */
static exec_kernel *copy(tyto_program *p, int s, const tyto_tensor *x,
                         const tyto_plugin_layout *in,
                         const tyto_plugin_layout *out) {
  exec_kernel *k = exec_add_kernel(p, s, TYTO_PLUGIN_OP_COPY, 1, 1);
  if (!k)
    return NULL;
  k->n_in = 1;
  k->in[0] = slot_of(p, x);
  k->in_l[0] = *in;
  k->n_out = 1;
  k->out[0] = s;
  k->out_l[0] = *out;
  return k;
}

static tyto_status lower_view(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t, *x = t->inputs[0];
  tyto_plugin_layout src, in, out;
  exec_layout(&src, x);
  exec_layout(&out, t);
  in = out; /* the output's shape, read from x's buffer */
  switch (t->op) {
  case TYTO_OP_RESHAPE:
  case TYTO_OP_STOP_GRADIENT:
  case TYTO_OP_CUSTOM_DERIVATIVE:
  case TYTO_OP_REPLICA_SUM: break; /* one device: the sum of x alone */
  case TYTO_OP_PERMUTE:
    for (int i = 0; i < t->rank; i++)
      in.strides[i] = src.strides[t->iattrs[i]];
    break;
  case TYTO_OP_BROADCAST_TO: broadcast_layout(&in, x, t); break;
  case TYTO_OP_SLICE:
    for (int i = 0; i < t->rank; i++) {
      in.strides[i] = src.strides[i] * t->iattrs[2 * i + 1];
      if (t->shape[i] > 0)
        in.offset += t->iattrs[2 * i] * src.strides[i];
    }
    break;
  case TYTO_OP_FLIP:
    for (size_t j = 0; j < t->n_iattrs; j++) {
      int64_t a = t->iattrs[j];
      in.strides[a] = -src.strides[a];
      if (t->shape[a] > 0)
        in.offset += (t->shape[a] - 1) * src.strides[a];
    }
    break;
  case TYTO_OP_TILE: {
    /* Output axis i (extent reps*n) split into (rep, position): the rep
     * axis reads x with stride 0. Trivial axes are dropped to stay within
     * the ABI's rank. */
    int lead = t->rank - x->rank, r = 0;
    tyto_plugin_layout ti = in, to = out;
    for (int i = 0; i < t->rank; i++) {
      int64_t reps = t->iattrs[i];
      int64_t n = i < lead ? 1 : x->shape[i - lead];
      int64_t xs = i < lead ? 0 : src.strides[i - lead];
      if (reps != 1) {
        if (r == TYTO_PLUGIN_MAX_RANK)
          return cannot(p, t, "more than 8 axes after splitting repetitions");
        ti.shape[r] = to.shape[r] = reps;
        ti.strides[r] = 0;
        to.strides[r] = n * out.strides[i];
        r++;
      }
      if (n != 1 || reps == 1) {
        if (r == TYTO_PLUGIN_MAX_RANK)
          return cannot(p, t, "more than 8 axes after splitting repetitions");
        ti.shape[r] = to.shape[r] = n;
        ti.strides[r] = xs;
        to.strides[r] = out.strides[i];
        r++;
      }
    }
    ti.rank = to.rank = (uint32_t)r;
    return copy(p, s, x, &ti, &to) ? TYTO_OK : oom();
  }
  default: return cannot(p, t, NULL);
  }
  return copy(p, s, x, &in, &out) ? TYTO_OK : oom();
}

/* SLICE_BACKWARD: zeros, then g copied into the output through a strided
 * view (the slice's own view, written instead of read). The fill is left
 * out when g covers every element: the steps are non-zero, so equal counts
 * mean every position is written once. */
static tyto_status lower_slice_backward(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t, *x = t->inputs[0];
  int64_t placed = 1, total = 1;
  for (int i = 0; i < t->rank; i++) {
    placed *= x->shape[i];
    total *= t->shape[i];
  }
  if (placed != total) {
    exec_kernel *k = exec_add_kernel(p, s, TYTO_PLUGIN_OP_FILL, 0, 1);
    if (!k)
      return oom();
    double zero = 0;
    k->n_out = 1;
    k->out[0] = s;
    exec_layout(&k->out_l[0], t);
    set_fattrs(k, 1, &zero);
  }
  if (placed == 0)
    return TYTO_OK;
  tyto_plugin_layout in, dst, out;
  exec_layout(&in, x);
  exec_layout(&dst, t);
  out = in; /* g's shape, written into the output's buffer */
  out.offset = 0;
  for (int i = 0; i < t->rank; i++) {
    out.strides[i] = dst.strides[i] * t->iattrs[2 * i + 1];
    out.offset += t->iattrs[2 * i] * dst.strides[i];
  }
  return copy(p, s, x, &in, &out) ? TYTO_OK : oom();
}

static tyto_status lower_concat(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t;
  int64_t axis = t->iattrs[0], pos = 0;
  tyto_plugin_layout out;
  exec_layout(&out, t);
  for (size_t i = 0; i < t->n_inputs; i++) {
    const tyto_tensor *x = t->inputs[i];
    tyto_plugin_layout in, o = out;
    exec_layout(&in, x);
    o.shape[axis] = x->shape[axis];
    o.offset = pos * out.strides[axis];
    pos += x->shape[axis];
    if (!copy(p, s, x, &in, &o))
      return oom();
  }
  return TYTO_OK;
}

/* Reductions: graph iattrs = keepdims, axes; the kernel's output keeps
 * the input's rank with the reduced axes at extent 1, which is the same
 * packed buffer as the graph's output. */
static tyto_status lower_reduce(tyto_program *p, int s, uint32_t op) {
  const tyto_tensor *t = p->slots[s].t, *x = t->inputs[0];
  exec_kernel *k = plain(p, s, op, 0);
  if (!k)
    return oom();
  tyto_plugin_layout *o = &k->out_l[0];
  o->rank = (uint32_t)x->rank;
  for (int i = 0; i < x->rank; i++)
    o->shape[i] = x->shape[i];
  for (size_t j = 1; j < t->n_iattrs; j++)
    o->shape[t->iattrs[j]] = 1;
  int64_t n = 1;
  for (int i = x->rank; i-- > 0;) {
    o->strides[i] = n;
    n *= o->shape[i];
  }
  set_iattrs(k, t->n_iattrs - 1, t->iattrs + 1);
  return TYTO_OK;
}

/* QR: each of the two graph nodes launches the factorisation, keeping its
 * own factor and writing the other into the kernel's scratch buffer. */
static tyto_status lower_qr(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t, *a = t->inputs[0];
  exec_kernel *k = plain(p, s, TYTO_PLUGIN_OP_QR, 0);
  if (!k)
    return oom();
  int which = (int)t->iattrs[0];
  int64_t m = a->shape[a->rank - 2], n = a->shape[a->rank - 1];
  int64_t kk = m < n ? m : n;
  tyto_plugin_layout other = k->out_l[0];
  other.shape[a->rank - 2] = which ? m : kk;
  other.shape[a->rank - 1] = which ? kk : n;
  int64_t c = 1;
  for (int i = a->rank; i-- > 0;) {
    other.strides[i] = c;
    c *= other.shape[i];
  }
  k->n_out = 2;
  k->out_l[which] = k->out_l[0];
  k->out[which] = s;
  k->out_l[1 - which] = other;
  k->out[1 - which] = -1;
  return TYTO_OK;
}

/* SOLVE and TRIANGULAR_SOLVE: A [..., n, n] and B [..., n, k] read with
 * the output's batch axes (stride 0 where an operand's batch axis is
 * broadcast). */
static tyto_status lower_solve(tyto_program *p, int s, uint32_t op) {
  const tyto_tensor *t = p->slots[s].t;
  exec_kernel *k = plain(p, s, op, 0);
  if (!k)
    return oom();
  set_iattrs(k, t->n_iattrs, t->iattrs); /* TRIANGULAR_SOLVE's three */
  for (int i = 0; i < 2; i++) {
    const tyto_tensor *x = t->inputs[i];
    tyto_plugin_layout src, *l = &k->in_l[i];
    exec_layout(&src, x);
    int lead = t->rank - x->rank;
    l->rank = (uint32_t)t->rank;
    for (int a = 0; a < t->rank; a++) {
      int j = a - lead;
      int batch = a < t->rank - 2;
      l->shape[a] = batch ? t->shape[a] : x->shape[j];
      l->strides[a] = j < 0 || (batch && x->shape[j] == 1) ? 0 : src.strides[j];
    }
  }
  return TYTO_OK;
}

/* FUSED: the node's inputs broadcast to its shape, its outputs (its own
 * slot, then its FUSED_OUTPUT nodes' by index; -1 for one nothing reads),
 * each in the dtype of the OUTPUT instruction that writes it, and the
 * expression as the plugin's fused program, every value with its dtype. */
static tyto_status lower_fused(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t;
  size_t n_out = (size_t)t->iattrs[0], n = t->n_fattrs;
  exec_kernel *k = plain(p, s, TYTO_PLUGIN_OP_FUSED, 1);
  if (!k)
    return oom();
  if (n_out > 1) {
    /* plain() made room for two outputs: a fused node may have more. */
    size_t nl = k->n_in + n_out;
    unsigned char *mem =
        calloc(1, nl * (sizeof(tyto_plugin_layout) + sizeof(int)));
    if (!mem)
      return oom();
    tyto_plugin_layout *in_l = (tyto_plugin_layout *)mem;
    memcpy(in_l, k->in_l, k->n_in * sizeof *in_l);
    int *in = (int *)(in_l + nl);
    memcpy(in, k->in, k->n_in * sizeof *in);
    free(k->in_l);
    k->in_l = in_l;
    k->out_l = in_l + k->n_in;
    k->in = in;
    k->out = in + k->n_in;
  }
  k->n_out = (uint32_t)n_out;
  for (size_t i = 0; i < n_out; i++) {
    exec_layout(&k->out_l[i], t);
    k->out[i] = i == 0 ? s : -1;
  }
  for (size_t i = 0; i < n; i++) {
    int64_t o = fused_field(t, i, FUSED_ARG1);
    if (fused_field(t, i, FUSED_OP) == TYTO_PLUGIN_FUSED_OUTPUT && o >= 0 &&
        (size_t)o < n_out)
      k->out_l[o].dtype =
          dtype_info_of((tyto_dtype)fused_field(t, i, FUSED_DTYPE))->abi;
  }
  /* FUSED_OUTPUT nodes read only their fused node. */
  for (int o = p->fused_first[s]; o >= 0; o = p->fused_next[o])
    k->out[p->slots[o].t->iattrs[0]] = o;
  k->blob_size =
      sizeof(tyto_plugin_fused_program) + n * sizeof(tyto_plugin_fused_instr);
  if (!(k->blob = malloc(k->blob_size)))
    return oom();
  tyto_plugin_fused_program *prog = k->blob;
  tyto_plugin_fused_instr *ins = (tyto_plugin_fused_instr *)(prog + 1);
  prog->struct_size = sizeof *prog;
  prog->n_instrs = (uint32_t)n;
  prog->instrs = ins;
  for (size_t i = 0; i < n; i++) {
    ins[i].struct_size = sizeof ins[i];
    ins[i].op = (uint32_t)fused_field(t, i, FUSED_OP);
    for (int a = 0; a < 3; a++)
      ins[i].arg[a] = (uint32_t)fused_field(t, i, FUSED_ARG0 + a);
    ins[i].attr = t->fattrs[i];
    ins[i].dtype =
        dtype_info_of((tyto_dtype)fused_field(t, i, FUSED_DTYPE))->abi;
  }
  return TYTO_OK;
}

tyto_status exec_lower_update(tyto_program *p, size_t u) {
  int vs = p->upd_value[u], ps = p->upd_param[u];
  const tyto_tensor *t = p->slots[ps].t;
  tyto_plugin_layout l;
  exec_layout(&l, t);
  size_t i = p->n_kernels;
  exec_kernel *k = copy(p, vs, p->slots[vs].t, &l, &l);
  if (!k)
    return oom();
  k->in[0] = vs; /* the value on the parameter's device */
  k->out[0] = ps;
  k->dev = p->slots[ps].dev;
  k->update = (int)u + 1;
  return exec_prepare(p, &p->kernels[i], t);
}

tyto_status exec_lower(tyto_program *p, int s) {
  const tyto_tensor *t = p->slots[s].t;
  exec_kernel *k;
  tyto_op op = t->op;
  if (op >= TYTO_OP_NEG && op <= TYTO_OP_ROUND) {
    /* The graph's and the ABI's unary, binary and ternary codes agree. */
    if (!(k = plain(p, s, (uint32_t)op, 1)))
      return oom();
    set_fattrs(k, t->n_fattrs, t->fattrs);
    return TYTO_OK;
  }
  if ((op >= TYTO_OP_ADD && op <= TYTO_OP_GE) || op == TYTO_OP_WHERE ||
      op == TYTO_OP_FMA || op == TYTO_OP_CAST)
    return plain(p, s, (uint32_t)op, 1) ? TYTO_OK : oom();
  if (op >= TYTO_OP_SUM && op <= TYTO_OP_NORM_L2)
    return lower_reduce(p, s, (uint32_t)op);
  switch (op) {
  case TYTO_OP_FULL:
    if (!(k = plain(p, s, TYTO_PLUGIN_OP_FILL, 0)))
      return oom();
    set_fattrs(k, 1, t->fattrs);
    return TYTO_OK;
  case TYTO_OP_RANDOM_UNIFORM:
  case TYTO_OP_RANDOM_NORMAL:
  case TYTO_OP_RANDOM_BERNOULLI:
    /* A step input needs ABI 1.3 (exec_prepare checks the device). */
    if (!(k = plain(p, s,
                    TYTO_PLUGIN_OP_RANDOM_UNIFORM +
                        (uint32_t)(op - TYTO_OP_RANDOM_UNIFORM),
                    0)))
      return oom();
    set_iattrs(k, t->n_iattrs, t->iattrs);
    set_fattrs(k, t->n_fattrs, t->fattrs);
    return TYTO_OK;
  case TYTO_OP_MATMUL:
  case TYTO_OP_PAD:
  case TYTO_OP_GATHER:
  case TYTO_OP_SCATTER_ADD:
  case TYTO_OP_ONE_HOT:
  case TYTO_OP_SOFTMAX:
  case TYTO_OP_LOG_SOFTMAX:
  case TYTO_OP_CONV2D:
  case TYTO_OP_MAX_POOL2D:
  case TYTO_OP_AVG_POOL2D:
  case TYTO_OP_CONV2D_BACKWARD_DATA:
  case TYTO_OP_CONV2D_BACKWARD_FILTER:
  case TYTO_OP_MAX_POOL2D_BACKWARD:
  case TYTO_OP_MAX_POOL2D_SELECT:
  case TYTO_OP_AVG_POOL2D_BACKWARD: {
    uint32_t code =
        op == TYTO_OP_MATMUL        ? TYTO_PLUGIN_OP_MATMUL
        : op == TYTO_OP_PAD         ? TYTO_PLUGIN_OP_PAD
        : op == TYTO_OP_GATHER      ? TYTO_PLUGIN_OP_GATHER
        : op == TYTO_OP_SCATTER_ADD ? TYTO_PLUGIN_OP_SCATTER_ADD
        : op == TYTO_OP_ONE_HOT
            ? TYTO_PLUGIN_OP_ONE_HOT
            : TYTO_PLUGIN_OP_SOFTMAX + (uint32_t)(op - TYTO_OP_SOFTMAX);
    if (!(k = plain(p, s, code, 0)))
      return oom();
    /* ONE_HOT's depth is the output's last extent. The derivative ops
     * keep CONV2D's seven or the pool's six: the sizes they add (H, W or
     * KH, KW) are the output's extents. */
    size_t n_iattrs = op == TYTO_OP_ONE_HOT ? 0
                      : op == TYTO_OP_CONV2D_BACKWARD_DATA ||
                              op == TYTO_OP_CONV2D_BACKWARD_FILTER
                          ? 7
                      : op == TYTO_OP_AVG_POOL2D_BACKWARD ? 6
                                                          : t->n_iattrs;
    set_iattrs(k, n_iattrs, t->iattrs);
    set_fattrs(k, t->n_fattrs, t->fattrs);
    return TYTO_OK;
  }
  case TYTO_OP_SOLVE: return lower_solve(p, s, TYTO_PLUGIN_OP_SOLVE);
  case TYTO_OP_TRIANGULAR_SOLVE:
    return lower_solve(p, s, TYTO_PLUGIN_OP_TRIANGULAR_SOLVE);
  case TYTO_OP_SLICE_BACKWARD: return lower_slice_backward(p, s);
  case TYTO_OP_INV:
  case TYTO_OP_DET:
  case TYTO_OP_LOGDET:
  case TYTO_OP_CHOLESKY: return plain(p, s, (uint32_t)op, 0) ? TYTO_OK : oom();
  case TYTO_OP_QR: return lower_qr(p, s);
  case TYTO_OP_CONCAT: return lower_concat(p, s);
  case TYTO_OP_RESHAPE:
  case TYTO_OP_STOP_GRADIENT:
  case TYTO_OP_CUSTOM_DERIVATIVE:
  case TYTO_OP_REPLICA_SUM:
  case TYTO_OP_PERMUTE:
  case TYTO_OP_BROADCAST_TO:
  case TYTO_OP_SLICE:
  case TYTO_OP_FLIP:
  case TYTO_OP_TILE: return lower_view(p, s);
  case TYTO_OP_FUSED: return lower_fused(p, s);
  case TYTO_OP_FUSED_OUTPUT: return TYTO_OK; /* written by its FUSED */
  default: return cannot(p, t, NULL);
  }
}
