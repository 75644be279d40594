/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX on the CPU, in f32,
 * f64, f16 and bf16, over any strided layouts. This file plans and cuts the
 * work; reduce_fold.c folds runs of elements, reduce_col.c is the column
 * mode, reduce.h their shared types.
 *
 * Prepare turns a descriptor into a plan: the kept axes (one output element
 * per index, with their input and output strides) and the reduced axes
 * (extent-1 axes dropped, ordered by stride, adjacent ones merged), so that
 * each output element is a walk over "runs" of the innermost reduced axis.
 * A run of stride 1 is a plain loop with eight independent accumulators,
 * which GCC turns into vector code without reassociating anything itself.
 *
 * Every reduction keeps a small state (rstate) that two pieces of one
 * reduction can merge, in order. That lets the pool split the work either
 * over blocks of output elements or, for a few outputs with long
 * reductions (a full reduction), over fixed chunks of each output's
 * elements, whose states are merged in index order at the end (ties of
 * ARGMAX/ARGMIN still go to the first index; the partial states live in
 * the kernel's workspace).
 *
 * Reductions over outer axes of a tensor whose kept inner axis is
 * contiguous (a sum over the batch axis of [N, C]) use a column mode
 * instead: one pass over the reduced rows updates a panel of neighbouring
 * outputs, the panel loop being the vector loop.
 *
 * Accuracy: every sum (SUM, MEAN, NORM_L1, NORM_L2, LOG_SUM_EXP, softmax
 * denominators) accumulates in double, for f32 and f64 inputs alike: eight
 * interleaved partial sums per contiguous run, one partial per chunk, and
 * in column mode one running double per output. A 1e7-element f32 sum is
 * thus within one f32 rounding of the exact sum (the test checks 1e6 at
 * 2^-23). LOG_SUM_EXP and softmax subtract the maximum; NORM_L2 of f64
 * scales by the largest magnitude (the idea of LAPACK's dnrm2), while f32
 * squares cannot overflow a double and need no scaling.
 *
 * Results never depend on the pool's size: the chunking is fixed by the
 * shapes, and each output folds its elements in a fixed order.
 *
 * NaN: MAX/MIN and every sum propagate it; ARGMAX/ARGMIN return the index
 * of the first NaN (as NumPy). Indices are whole numbers in the output's
 * dtype, exact up to 2^24 in f32 and 2^53 in f64; f16 and bf16 hold them
 * only up to 2^11 and 2^8, so longer axes are refused there.
 *
 * F16 and BF16 are read into f32 blocks at the edge (a run, a column
 * panel's row, a softmax row) and folded by the f32 code, which
 * accumulates in double; the result, a double, is rounded once to the
 * dtype.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"

/* Work below this many elements is not worth handing to the pool. */
#define RED_GRAIN 16384
/* Chunked reductions: only below this many outputs, and at most this many
 * partial states in all. */
#define RED_CHUNK_OUTS 64
#define RED_MAX_CHUNKS 256

/* A block of consecutive output elements, each reduced whole. */
static void block_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  size_t e = red_elem_size(p);
  int64_t o0 = (int64_t)t * j->per_task, o1 = o0 + j->per_task;
  if (o1 > p->nout)
    o1 = p->nout;
  int64_t idx[TYTO_PLUGIN_MAX_RANK], in, out;
  red_kept_offsets(p, o0, &in, &out);
  int64_t rem = o0;
  for (int a = p->nk - 1; a >= 0; a--) {
    idx[a] = rem % p->kext[a];
    rem /= p->kext[a];
  }
  for (int64_t o = o0; o < o1; o++) {
    if (p->softmax) {
      red_softmax_row(p, j->x + in * (int64_t)e, j->y + out * (int64_t)e);
    } else {
      rstate st = red_state_init(p->op);
      red_segment(p, j->x + in * (int64_t)e, 0, p->count, &st);
      red_store(p, j->y, out, red_state_final(p->op, &st, p->count));
    }
    /* Step the kept index (and both offsets) like an odometer. */
    for (int a = p->nk - 1; a >= 0; a--) {
      in += p->kin[a];
      out += p->kout[a];
      if (++idx[a] < p->kext[a])
        break;
      in -= p->kext[a] * p->kin[a];
      out -= p->kext[a] * p->kout[a];
      idx[a] = 0;
    }
  }
}

/* One chunk of one output element's reduced elements. */
static void chunk_task(void *ctx, size_t t) {
  const red_job *j = ctx;
  const red_plan *p = j->p;
  int64_t o = (int64_t)t / j->chunks, c = (int64_t)t % j->chunks;
  /* Chunk c covers [c*q + min(c, rem), ...): sizes differ by at most 1. */
  int64_t q = p->count / j->chunks, rem = p->count % j->chunks;
  int64_t r0 = c * q + (c < rem ? c : rem), r1 = r0 + q + (c < rem);
  int64_t in, out;
  red_kept_offsets(p, o, &in, &out);
  rstate st = red_state_init(p->op);
  red_segment(p, j->x + in * (int64_t)red_elem_size(p), r0, r1, &st);
  j->partial[t] = st;
}

static tyto_plugin_error *red_run(const cpu_op *base, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  const red_plan *p = (const red_plan *)base;
  if (p->nout == 0)
    return NULL;
  size_t e = red_elem_size(p), eo = cpu_dtype_size(p->odtype);
  red_job j = {p,
               args[0] + d->in[0].l.offset * (int64_t)e,
               args[1] + d->out[0].l.offset * (int64_t)eo,
               p->nout,
               1,
               NULL};
  /* How a reduction is cut never depends on the pool's size, so results
   * are the same bits on every machine: long reductions of few outputs go
   * in fixed chunks, merged in order; otherwise each output is reduced
   * whole and only the blocks of outputs depend on the threads. */
  if (p->col >= 0) {
    /* Wide panels read long contiguous rows (fewer TLB misses, better
     * prefetching); narrower ones when the pool needs more tasks. The
     * width changes no result: each output still folds in order. */
    int64_t groups = p->nout / p->kext[p->col], ext = p->kext[p->col];
    int64_t want = 2 * (int64_t)cpu_pool_size(pool);
    int64_t w = groups >= want ? COL_PANEL : ext * groups / want;
    w = w < 64 ? 64 : w > COL_PANEL ? COL_PANEL : (w + 7) / 8 * 8;
    j.per_task = w;
    int64_t units = groups * red_col_panels(p, w);
    if (cpu_pool_size(pool) <= 1 || p->nout * p->count < 2 * RED_GRAIN) {
      for (int64_t t = 0; t < units; t++)
        red_col_task(&j, (size_t)t);
    } else {
      /* Many small panels (short reductions) go several to a task. */
      j.chunks = (units + 4 * want - 1) / (4 * want);
      cpu_pool_for(pool, (size_t)((units + j.chunks - 1) / j.chunks),
                   red_col_tasks, &j);
    }
    return NULL;
  }
  int64_t chunks = p->chunks;
  if (chunks < 2) {
    unsigned threads = cpu_pool_size(pool);
    int64_t work = p->nout * (p->count > 1 ? p->count : 1);
    int64_t tasks = work / RED_GRAIN; /* tasks worth making */
    if (tasks > 4 * (int64_t)threads)
      tasks = 4 * (int64_t)threads;
    if (tasks > p->nout)
      tasks = p->nout;
    if (threads <= 1 || tasks <= 1) {
      block_task(&j, 0);
      return NULL;
    }
    j.per_task = (p->nout + tasks - 1) / tasks;
    cpu_pool_for(pool, (size_t)((p->nout + j.per_task - 1) / j.per_task),
                 block_task, &j);
    return NULL;
  }
  j.chunks = chunks;
  size_t n = (size_t)(p->nout * j.chunks);
  /* The partial states live in the workspace (a kernel may run on several
   * streams at once, so it keeps no scratch of its own). */
  uintptr_t ws = (uintptr_t)args[2];
  ws = (ws + _Alignof(rstate) - 1) & ~(uintptr_t)(_Alignof(rstate) - 1);
  j.partial = (rstate *)ws;
  cpu_pool_for(pool, n, chunk_task, &j);
  for (int64_t o = 0; o < p->nout; o++) {
    rstate st = j.partial[o * j.chunks];
    for (int64_t c = 1; c < j.chunks; c++)
      red_state_merge(p->op, &st, &j.partial[o * j.chunks + c]);
    int64_t in, out;
    red_kept_offsets(p, o, &in, &out);
    red_store(p, j.y, out, red_state_final(p->op, &st, p->count));
  }
  return NULL;
}

static void red_destroy(cpu_op *op) {
  free(op);
}

/* "[2,3,4]" into buf. */
static const char *fmt_shape(char *buf, size_t size, const int64_t *shape,
                             uint32_t rank) {
  size_t n = (size_t)snprintf(buf, size, "[");
  for (uint32_t i = 0; i < rank && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                          (long long)shape[i]);
  if (n < size)
    snprintf(buf + n, size - n, "]");
  return buf;
}

static int is_arg(uint32_t op) {
  return op == TYTO_PLUGIN_OP_ARGMAX || op == TYTO_PLUGIN_OP_ARGMIN;
}

/* Checks the axes of a reduction (or the one axis of a softmax). */
static tyto_plugin_error *check_axes(const tyto_plugin_host *h,
                                     const cpu_desc *desc, int softmax,
                                     unsigned char *reduced) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  uint32_t rank = desc->in[0].l.rank;
  if (softmax && d->n_iattrs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected the axis as the only integer attribute, "
                        "got %u integer attributes",
                        name, d->n_iattrs);
  if (is_arg(d->op) && d->n_iattrs != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected exactly one axis as integer attribute, "
                        "got %u axes",
                        name, d->n_iattrs);
  memset(reduced, 0, TYTO_PLUGIN_MAX_RANK);
  for (uint32_t i = 0; i < d->n_iattrs; i++) {
    int64_t a = d->iattrs[i];
    if (a < 0 || a >= (int64_t)rank)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axis %lld is out of range for an input of rank "
                          "%u (axes are 0 to rank - 1)",
                          name, (long long)a, rank);
    if (i > 0 && a == d->iattrs[i - 1])
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axis %lld is repeated; each axis may be reduced "
                          "once",
                          name, (long long)a);
    if (i > 0 && a < d->iattrs[i - 1])
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "%s: axes must be ascending, but axis %lld follows "
                          "axis %lld",
                          name, (long long)a, (long long)d->iattrs[i - 1]);
    reduced[a] = 1;
  }
  return NULL;
}

/* Orders the reduced axes innermost-smallest-stride and merges neighbours
 * that step as one axis. ARG* keep their single axis. */
static void plan_reduced(red_plan *p, const tyto_plugin_layout *in,
                         const unsigned char *reduced) {
  int n = 0, empty = 0;
  int64_t count = 1;
  for (uint32_t a = 0; a < in->rank; a++) {
    if (!reduced[a])
      continue;
    count *= in->shape[a];
    empty |= in->shape[a] == 0;
    if (in->shape[a] == 1)
      continue;
    p->rext[n] = in->shape[a];
    p->rst[n] = in->strides[a];
    n++;
  }
  p->count = count;
  if (empty || n == 0) {
    p->nr = 1;
    p->rext[0] = empty ? 0 : 1;
    p->rst[0] = 0;
    return;
  }
  /* Insertion sort by |stride|, largest first (stable). */
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && llabs(p->rst[k - 1]) < llabs(p->rst[k]); k--) {
      int64_t te = p->rext[k], ts = p->rst[k];
      p->rext[k] = p->rext[k - 1];
      p->rst[k] = p->rst[k - 1];
      p->rext[k - 1] = te;
      p->rst[k - 1] = ts;
    }
  int m = 0;
  for (int i = 1; i < n; i++) {
    if (p->rst[m] == p->rst[i] * p->rext[i]) {
      p->rext[m] *= p->rext[i];
      p->rst[m] = p->rst[i];
    } else {
      m++;
      p->rext[m] = p->rext[i];
      p->rst[m] = p->rst[i];
    }
  }
  p->nr = m + 1;
}

/* The family's check. Sets reduced[a] for each axis the attributes name (a
 * softmax's one axis too) and clears the others. */
static tyto_plugin_error *red_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc,
                                    unsigned char *reduced) {
  const tyto_plugin_op_desc *d = desc->d;
  const char *name = cpu_op_name(d->op);
  int softmax =
      d->op == TYTO_PLUGIN_OP_SOFTMAX || d->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  if (desc->n_in != 1 || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: expected 1 input and 1 output, got %u and %u",
                        name, desc->n_in, desc->n_out);
  const tyto_plugin_layout *in = &desc->in[0].l, *o = &desc->out[0].l;
  /* ARGMAX and ARGMIN may give their index in I32 or I64 (ABI 1.6);
   * kernels.c sends no integer input here but to SUM, MAX_REDUCE and
   * MIN_REDUCE. */
  if (in->dtype != o->dtype && !(is_arg(d->op) && tpc_dtype_int(o->dtype)))
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: input is %s but output is %s", name,
                        cpu_dtype_name(in->dtype), cpu_dtype_name(o->dtype));
  tyto_plugin_error *e = check_axes(h, desc, softmax, reduced);
  if (e)
    return e;
  int64_t want[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t a = 0; a < in->rank; a++)
    want[a] = reduced[a] && !softmax ? 1 : in->shape[a];
  if (o->rank != in->rank ||
      memcmp(o->shape, want, in->rank * sizeof(int64_t)) != 0) {
    char got[160], exp_[160];
    return h->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: output shape %s should be %s (%s)", name,
        fmt_shape(got, sizeof got, o->shape, o->rank),
        fmt_shape(exp_, sizeof exp_, want, in->rank),
        softmax ? "the input's shape"
                : "the input's, with each reduced axis kept at extent 1");
  }
  if (is_arg(d->op) && in->shape[d->iattrs[0]] == 0)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: axis %lld has extent 0, and an empty axis has no "
                        "index of its extreme",
                        name, (long long)d->iattrs[0]);
  /* The largest whole number below which a 16-bit dtype holds all. */
  int64_t exact = in->dtype == TYTO_PLUGIN_DTYPE_F16    ? 2048
                  : in->dtype == TYTO_PLUGIN_DTYPE_BF16 ? 256
                                                        : INT64_MAX;
  if (is_arg(d->op) && !tpc_dtype_int(o->dtype) &&
      in->shape[d->iattrs[0]] - 1 > exact)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: axis %lld has extent %lld, but %s holds whole "
                        "numbers exactly only up to %lld; cast the input to "
                        "f32 first",
                        name, (long long)d->iattrs[0],
                        (long long)in->shape[d->iattrs[0]],
                        cpu_dtype_name(in->dtype), (long long)exact);
  return NULL;
}

tyto_plugin_error *cpu_reduce_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK];
  return red_check(h, desc, reduced);
}

tyto_plugin_error *cpu_reduce_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  const tyto_plugin_op_desc *d = desc->d;
  int softmax =
      d->op == TYTO_PLUGIN_OP_SOFTMAX || d->op == TYTO_PLUGIN_OP_LOG_SOFTMAX;
  unsigned char reduced[TYTO_PLUGIN_MAX_RANK];
  tyto_plugin_error *e = red_check(h, desc, reduced);
  if (e)
    return e;
  const tyto_plugin_layout *in = &desc->in[0].l, *o = &desc->out[0].l;
  if (tpc_dtype_int(in->dtype))
    return red_int_prepare(h, desc, out);
  red_plan *p = calloc(1, sizeof *p);
  if (!p)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  p->base.run = red_run;
  p->base.destroy = red_destroy;
  p->op = d->op;
  p->dtype = in->dtype;
  p->odtype = o->dtype;
  if (cpu_dtype_half(p->dtype)) {
    p->widen = cpu_cvt_arith(p->dtype);
    p->from_f64 = cpu_cvt(p->dtype, TYTO_PLUGIN_DTYPE_F64);
  }
  p->softmax = softmax;
  p->nout = 1;
  for (uint32_t a = 0; a < in->rank; a++) {
    if (reduced[a])
      continue;
    p->nout *= in->shape[a];
    if (in->shape[a] == 1)
      continue;
    p->kext[p->nk] = in->shape[a];
    p->kin[p->nk] = in->strides[a];
    p->kout[p->nk] = o->strides[a];
    p->nk++;
  }
  if (softmax) {
    int64_t a = d->iattrs[0];
    p->nr = 1;
    p->rext[0] = p->count = in->shape[a];
    p->rst[0] = in->strides[a];
    p->rout = o->strides[a];
    if (p->count == 0)
      p->nout = 0; /* nothing to write */
  } else {
    plan_reduced(p, in, reduced);
  }
  /* Column mode when the innermost reduced axis strides past a kept axis
   * of stride 1 and there are enough outputs to fill panels; the row mode
   * reads contiguous runs anyway when the reduced stride is 1. */
  p->col = -1;
  if (!softmax && red_col_op(p->op) && p->count >= 2 && p->nk > 0 &&
      llabs(p->rst[p->nr - 1]) > 1)
    for (int a = p->nk - 1; a >= 0; a--)
      if (p->kin[a] == 1 && p->kext[a] >= 8) {
        p->col = a;
        break;
      }
  /* Chunked (see red_run) only for few outputs with long reductions; the
   * cut depends on the shapes alone. */
  p->chunks = 1;
  if (p->col < 0 && !softmax && p->nout > 0 && p->nout < RED_CHUNK_OUTS) {
    int64_t c = p->count / RED_GRAIN, cap = RED_MAX_CHUNKS / p->nout;
    p->chunks = c < cap ? c : cap;
    if (p->chunks < 2)
      p->chunks = 1;
    else
      p->base.workspace_bytes = /* room to align the states too */
          (uint64_t)(p->nout * p->chunks) * sizeof(rstate) + _Alignof(rstate);
  }
  *out = &p->base;
  return NULL;
}
