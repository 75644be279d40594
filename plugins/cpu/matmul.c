/*
 * MATMUL through OpenBLAS: [..., m, k] x [..., k, n] -> [..., m, n], batch
 * axes broadcast by NumPy rules, optional transposes of either input's last
 * two axes (iattrs[0], iattrs[1]).
 *
 * Every matrix (both inputs and the output) is looked at as a 2-D view with
 * two strides. A view that is row-major or column-major with a unit stride
 * goes to cblas_?gemm directly (the column-major case as a transposed
 * operand, or, for the output, by computing C^T = B^T A^T); any other view
 * (steps in both axes, negative or zero strides) is packed into the
 * workspace first, and an unusual output is computed in the workspace and
 * scattered. A broadcast right operand over a batch that collapses into the
 * rows of A and C (a linear layer applied to [batch, seq, features]) becomes
 * one taller GEMM. Batches of small GEMMs run in parallel on the pool, each
 * chunk with its own slice of the workspace; a big lone GEMM is split over
 * the pool by rows or columns, one single-threaded OpenBLAS call a block.
 *
 * Big f32 GEMMs (MM_DNNL_MIN) go instead to oneDNN's matmul primitive when
 * it has a brgemm kernel for the operands as bound (onednn.h; made at
 * prepare, logged at debug level with the path taken, and never with
 * TYTO_CPU_NO_DNNL): the choice depends on the shapes, the strides and the
 * machine only, never on timing or memory pressure (a kernel oneDNN offers
 * but cannot make fails the prepare), so one program gives the same bits
 * on every run with the same threads (cpu:0's, which oneDNN's OpenMP team
 * takes too: onednn.h).
 */
#include "config.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/common.h"
#include "onednn.h"
#include "ops.h"

/* Below this many multiply-adds per GEMM a batch is spread over the pool;
 * above it OpenBLAS's own threads do better. */
#define MM_SMALL_GEMM ((int64_t)96 * 96 * 96)
#define MM_MAX_CHUNKS 64

/* f32 GEMMs from this many multiply-adds, with at least MM_DNNL_SIDE rows
 * and columns, run on oneDNN's brgemm kernels where it has them. On a
 * Zen 4 (AVX-512) they took 0.55 to 0.92 of OpenBLAS's time from 128^3
 * up, on 1 and on 2 threads, the products of a dense layer at a small
 * batch among them ([64,6272] x [6272,1024] and its two gradients), whose
 * weight OpenBLAS packs afresh at every call; below that size a oneDNN
 * call costs more than it saves. Other implementations oneDNN may offer
 * (its own JIT sgemm on a CPU without AVX-512) are not taken: they were
 * not measured against OpenBLAS. */
#define MM_DNNL_MIN ((int64_t)1 << 21)
#define MM_DNNL_SIDE 32

enum { MM_ROW, MM_COL, MM_PACK };

/* A logical r x c matrix at element strides (sr, sc). */
typedef struct mm_view {
  int64_t r, c, sr, sc;
  int mode;   /* MM_ROW, MM_COL or MM_PACK */
  int64_t ld; /* leading dimension for MM_ROW / MM_COL */
} mm_view;

typedef struct mm_op {
  cpu_op base;
  const tyto_plugin_host *h;
  size_t elem;
  int64_t m, n, k;
  uint32_t nb; /* batch axes (the output's) */
  int64_t bshape[TYTO_PLUGIN_MAX_RANK];
  int64_t bstride[3][TYTO_PLUGIN_MAX_RANK]; /* a, b, c; 0 where broadcast */
  int64_t off[3];                           /* layout offsets of a, b, c */
  int64_t batches;
  mm_view a, b, c;
  int shared[2];         /* a / b packed once: same matrix in every batch */
  int64_t shared_off[2]; /* element offsets of the shared packs */
  int64_t slot_elems;    /* per-chunk workspace: packed a, b, c */
  int64_t slot_base;     /* elements before the first slot */
  int64_t chunks;
  int64_t max_chunks; /* chunks on a machine with the most cores */
#ifdef TYTO_HAVE_DNNL
  cpu_dnnl_mm dn; /* a big f32 GEMM on oneDNN (dn.prim set) */
#endif
} mm_op;

/* Formats a shape as "[64,784]" with a "^T" when `t`. */
static const char *shape_str(char *buf, size_t size,
                             const tyto_plugin_layout *l, int t) {
  tpc_format_shape_as(l, 1, buf, size);
  size_t used = strlen(buf);
  if (t && used < size)
    snprintf(buf + used, size - used, "^T");
  return buf;
}

static int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* Chooses how gemm sees a view: row-major (unit column stride, ld = row
 * stride >= columns), column-major (its transpose is row-major), or packed. */
static void pick(mm_view *v) {
  if ((v->c <= 1 || v->sc == 1) && (v->r <= 1 || v->sr >= max64(v->c, 1))) {
    v->mode = MM_ROW;
    v->ld = v->r <= 1 ? max64(v->c, 1) : v->sr;
  } else if ((v->r <= 1 || v->sr == 1) &&
             (v->c <= 1 || v->sc >= max64(v->r, 1))) {
    v->mode = MM_COL;
    v->ld = v->c <= 1 ? max64(v->r, 1) : v->sc;
  } else {
    v->mode = MM_PACK;
    v->ld = max64(v->c, 1);
  }
  if (v->ld > INT_MAX) {
    v->mode = MM_PACK;
    v->ld = max64(v->c, 1);
  }
}

/* Row-major C (ld) = op(A) op(B), beta = 0. */
static void gemm(size_t elem, int ta, int tb, int64_t m, int64_t n, int64_t k,
                 const void *a, int64_t lda, const void *b, int64_t ldb,
                 void *c, int64_t ldc) {
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
  if (elem == 4)
    cblas_sgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0f, a,
                (int)lda, b, (int)ldb, 0.0f, c, (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0, a, (int)lda,
                b, (int)ldb, 0.0, c, (int)ldc);
}

/* Copies a strided r x c view to (dir 0) or from (dir 1) a row-major
 * contiguous matrix; fills the view with zeros when packed is NULL. */
static void move(size_t elem, const mm_view *v, unsigned char *base,
                 unsigned char *packed, int dir) {
  for (int64_t i = 0; i < v->r; i++)
    for (int64_t j = 0; j < v->c; j++) {
      unsigned char *s = base + (i * v->sr + j * v->sc) * (int64_t)elem;
      if (!packed)
        memset(s, 0, elem);
      else if (dir == 0)
        memcpy(packed + (i * v->c + j) * (int64_t)elem, s, elem);
      else
        memcpy(s, packed + (i * v->c + j) * (int64_t)elem, elem);
    }
}

typedef struct mm_run {
  const mm_op *op;
  unsigned char *base[3]; /* a, b, c with their layout offsets applied */
  unsigned char *ws;
} mm_run;

/* One batch: pointers of a, b, c, then the GEMM. */
static void one_batch(const mm_run *r, int64_t bi, unsigned char *slot) {
  const mm_op *op = r->op;
  int64_t e = (int64_t)op->elem;
  unsigned char *p[3];
  for (int t = 0; t < 3; t++) {
    int64_t off = 0, rest = bi;
    for (uint32_t ax = op->nb; ax-- > 0;) {
      off += (rest % op->bshape[ax]) * op->bstride[t][ax];
      rest /= op->bshape[ax];
    }
    p[t] = r->base[t] + off * e;
  }
  if (op->k == 0) {
    move(op->elem, &op->c, p[2], NULL, 0);
    return;
  }
  const void *A = p[0], *B = p[1];
  unsigned char *cur = slot;
  if (op->a.mode == MM_PACK) {
    if (op->shared[0]) {
      A = r->ws + op->shared_off[0] * e;
    } else {
      move(op->elem, &op->a, p[0], cur, 0);
      A = cur;
      cur += op->m * op->k * e;
    }
  }
  if (op->b.mode == MM_PACK) {
    if (op->shared[1]) {
      B = r->ws + op->shared_off[1] * e;
    } else {
      move(op->elem, &op->b, p[1], cur, 0);
      B = cur;
      cur += op->k * op->n * e;
    }
  }
  int ta = op->a.mode == MM_COL, tb = op->b.mode == MM_COL;
  if (op->c.mode == MM_ROW) {
    gemm(op->elem, ta, tb, op->m, op->n, op->k, A, op->a.ld, B, op->b.ld, p[2],
         op->c.ld);
  } else if (op->c.mode == MM_COL) {
    /* C^T = B^T A^T, written row-major into the column-major C. */
    gemm(op->elem, !tb, !ta, op->n, op->m, op->k, B, op->b.ld, A, op->a.ld,
         p[2], op->c.ld);
  } else {
    gemm(op->elem, ta, tb, op->m, op->n, op->k, A, op->a.ld, B, op->b.ld, cur,
         max64(op->n, 1));
    move(op->elem, &op->c, p[2], cur, 1);
  }
}

static void chunk_fn(void *ctx, size_t i) {
  const mm_run *r = ctx;
  const mm_op *op = r->op;
  int64_t lo = op->batches * (int64_t)i / op->chunks,
          hi = op->batches * ((int64_t)i + 1) / op->chunks;
  unsigned char *slot =
      r->ws ? r->ws + (op->slot_base + (int64_t)i * op->slot_elems) *
                          (int64_t)op->elem
            : NULL;
  for (int64_t b = lo; b < hi; b++)
    one_batch(r, b, slot);
}

/* A single GEMM split over the pool: block i of `parts` takes rows of A
 * and C (by_cols 0) or columns of B and C (by_cols 1), in multiples of 16,
 * and runs as one single-threaded GEMM. */
typedef struct mm_split {
  const mm_run *r;
  int by_cols;
  int64_t parts, extent;
} mm_split;

static void split_fn(void *ctx, size_t i) {
  const mm_split *sp = ctx;
  const mm_op *op = sp->r->op;
  int64_t e = (int64_t)op->elem;
  int64_t units = (sp->extent + 15) / 16;
  int64_t lo = 16 * (units * (int64_t)i / sp->parts),
          hi = 16 * (units * ((int64_t)i + 1) / sp->parts);
  if (hi > sp->extent)
    hi = sp->extent;
  if (lo >= hi)
    return;
  const unsigned char *A = sp->r->base[0], *B = sp->r->base[1];
  unsigned char *C = sp->r->base[2];
  int64_t m = op->m, n = op->n;
  if (sp->by_cols) {
    B += lo * op->b.sc * e;
    C += lo * op->c.sc * e;
    n = hi - lo;
  } else {
    A += lo * op->a.sr * e;
    C += lo * op->c.sr * e;
    m = hi - lo;
  }
  int ta = op->a.mode == MM_COL, tb = op->b.mode == MM_COL;
  if (op->c.mode == MM_ROW)
    gemm(op->elem, ta, tb, m, n, op->k, A, op->a.ld, B, op->b.ld, C, op->c.ld);
  else
    gemm(op->elem, !tb, !ta, n, m, op->k, B, op->b.ld, A, op->a.ld, C,
         op->c.ld);
}

/* Below this many multiply-adds a lone GEMM runs on one thread. */
#define MM_SPLIT_MIN ((int64_t)1 << 18)

static tyto_plugin_error *mm_exec(const cpu_op *base, const cpu_desc *d,
                                  unsigned char *const *args, cpu_pool *pool) {
  (void)d;
  const mm_op *op = (const mm_op *)base;
  /* OpenBLAS runs single-threaded inside our pool's tasks (set when the
   * device opened). */
  unsigned threads = cpu_pool_size(pool);
  if (op->batches == 0 || op->m == 0 || op->n == 0)
    return NULL;
  int64_t e = (int64_t)op->elem;
#ifdef TYTO_HAVE_DNNL
  if (op->dn.prim) {
    dnnl_status_t st = cpu_dnnl_mm_run(
        &op->dn, args[0] + op->off[0] * e, args[1] + op->off[1] * e,
        args[2] + op->off[2] * e, op->base.workspace_bytes ? args[3] : NULL);
    if (st != dnnl_success)
      return op->h->error_new(st == dnnl_out_of_memory
                                  ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                  : TYTO_PLUGIN_ERR_DEVICE,
                              "matmul: oneDNN's f32 matmul (%s) failed with "
                              "status %d; set TYTO_CPU_NO_DNNL=1 to run it "
                              "on OpenBLAS",
                              op->dn.impl, (int)st);
    return NULL;
  }
#endif
  mm_run r = {op,
              {args[0] + op->off[0] * e, args[1] + op->off[1] * e,
               args[2] + op->off[2] * e},
              op->base.workspace_bytes ? args[3] : NULL};
  if (op->k > 0) {
    if (op->shared[0])
      move(op->elem, &op->a, r.base[0], r.ws + op->shared_off[0] * e, 0);
    if (op->shared[1])
      move(op->elem, &op->b, r.base[1], r.ws + op->shared_off[1] * e, 0);
  }
  if (op->chunks > 1) {
    cpu_pool_for(pool, (size_t)op->chunks, chunk_fn, &r);
  } else if (threads > 1 && op->batches == 1 && op->k > 0 &&
             op->a.mode != MM_PACK && op->b.mode != MM_PACK &&
             op->c.mode != MM_PACK && op->m * op->n * op->k >= MM_SPLIT_MIN &&
             (op->m >= 32 || op->n >= 32)) {
    mm_split sp = {&r, op->n >= op->m, 0, 0};
    sp.extent = sp.by_cols ? op->n : op->m;
    int64_t units = (sp.extent + 15) / 16;
    sp.parts = units < (int64_t)threads ? units : (int64_t)threads;
    cpu_pool_for(pool, (size_t)sp.parts, split_fn, &sp);
  } else {
    chunk_fn(&r, 0);
  }
  return NULL;
}

static void mm_destroy(cpu_op *base) {
#ifdef TYTO_HAVE_DNNL
  cpu_dnnl_mm_free(&((mm_op *)base)->dn);
#endif
  free(base);
}

/* Merges the batch axes that vary and the row axis of A and C into one row
 * axis when B is the same matrix in every batch and the merged rows keep
 * one stride in both A and C. */
static void fold_batches(mm_op *op) {
  if (op->batches <= 1)
    return;
  for (uint32_t ax = 0; ax < op->nb; ax++)
    if (op->bshape[ax] > 1 && op->bstride[1][ax] != 0)
      return;
  int64_t ext[TYTO_PLUGIN_MAX_RANK + 1], sa[TYTO_PLUGIN_MAX_RANK + 1],
      sc[TYTO_PLUGIN_MAX_RANK + 1];
  int n = 0;
  for (uint32_t ax = 0; ax < op->nb; ax++)
    if (op->bshape[ax] > 1) {
      ext[n] = op->bshape[ax];
      sa[n] = op->bstride[0][ax];
      sc[n++] = op->bstride[2][ax];
    }
  if (op->m > 1) {
    ext[n] = op->m;
    sa[n] = op->a.sr;
    sc[n++] = op->c.sr;
  }
  for (int i = 0; i + 1 < n; i++)
    if (sa[i] != sa[i + 1] * ext[i + 1] || sc[i] != sc[i + 1] * ext[i + 1])
      return;
  op->m *= op->batches;
  op->a.r = op->c.r = op->m;
  op->a.sr = sa[n - 1];
  op->c.sr = sc[n - 1];
  op->nb = 0;
  op->batches = 1;
}

/* Chunks a batch of small GEMMs is cut into on this machine: one per core,
 * up to op->max_chunks. */
static int64_t mm_chunks(const mm_op *op) {
  if (op->max_chunks <= 1)
    return 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t c = cores > 0 ? cores : 1;
  return c < op->max_chunks ? c : op->max_chunks;
}

/* The workspace's bytes with `chunks` slots; nonzero when 64 bits cannot
 * count them. */
static int mm_bytes(const mm_op *op, int64_t chunks, int64_t *bytes) {
  int64_t total;
  return __builtin_mul_overflow(op->slot_elems, chunks, &total) ||
         __builtin_add_overflow(total, op->slot_base, &total) ||
         __builtin_mul_overflow(total, (int64_t)op->elem, bytes);
}

/* The family's check, planning the op into *op as it goes: everything but
 * the run functions, the chunk count and the workspace size. */
static tyto_plugin_error *mm_plan(const tyto_plugin_host *h,
                                  const cpu_desc *desc, mm_op *op) {
  const tyto_plugin_op_desc *d = desc->d;
  if (desc->n_in != 2 || desc->n_out != 1)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: expected 2 inputs and 1 output, got %u and %u",
                        desc->n_in, desc->n_out);
  if (d->n_iattrs != 0 && d->n_iattrs != 2)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: expected 0 or 2 integer attributes (the "
                        "transpose flags of the inputs), got %u",
                        d->n_iattrs);
  int t[2] = {0, 0};
  for (uint32_t i = 0; i < d->n_iattrs; i++) {
    if (d->iattrs[i] != 0 && d->iattrs[i] != 1)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "matmul: transpose flag iattrs[%u] must be 0 or 1, "
                          "got %lld",
                          i, (long long)d->iattrs[i]);
    t[i] = (int)d->iattrs[i];
  }
  const tyto_plugin_layout *la = &desc->in[0].l, *lb = &desc->in[1].l,
                           *lc = &desc->out[0].l;
  /* Shapes for the messages, formatted only when one is made: the check
   * runs for every node the host places. */
  char sa[160], sb[160], sc[160];
  if (la->dtype != lb->dtype || la->dtype != lc->dtype)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: inputs and output must share one dtype, got "
                        "%s x %s -> %s",
                        cpu_dtype_name(la->dtype), cpu_dtype_name(lb->dtype),
                        cpu_dtype_name(lc->dtype));
  if (la->rank < 2 || lb->rank < 2)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: both inputs need rank 2 or more, got %s x %s",
                        shape_str(sa, sizeof sa, la, t[0]),
                        shape_str(sb, sizeof sb, lb, t[1]));
  /* The logical (transposed) last two axes: a is [m, k], b is [k, n]. */
  uint32_t ra = la->rank, rb = lb->rank;
  mm_view a = {la->shape[ra - 2],
               la->shape[ra - 1],
               la->strides[ra - 2],
               la->strides[ra - 1],
               0,
               0};
  mm_view b = {lb->shape[rb - 2],
               lb->shape[rb - 1],
               lb->strides[rb - 2],
               lb->strides[rb - 1],
               0,
               0};
  if (t[0]) {
    a = (mm_view){a.c, a.r, a.sc, a.sr, 0, 0};
  }
  if (t[1]) {
    b = (mm_view){b.c, b.r, b.sc, b.sr, 0, 0};
  }
  if (a.c != b.r)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: inner dimensions differ: %s x %s",
                        shape_str(sa, sizeof sa, la, t[0]),
                        shape_str(sb, sizeof sb, lb, t[1]));
  uint32_t nba = ra - 2, nbb = rb - 2, nb = nba > nbb ? nba : nbb;
  int64_t bshape[TYTO_PLUGIN_MAX_RANK];
  for (uint32_t ax = 0; ax < nb; ax++) {
    int64_t ea = ax + nba >= nb ? la->shape[ax + nba - nb] : 1;
    int64_t eb = ax + nbb >= nb ? lb->shape[ax + nbb - nb] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "matmul: batch axes do not broadcast: %s x %s",
                          shape_str(sa, sizeof sa, la, t[0]),
                          shape_str(sb, sizeof sb, lb, t[1]));
    bshape[ax] = ea == 1 ? eb : ea;
  }
  int shape_ok =
      lc->rank == nb + 2 && lc->shape[nb] == a.r && lc->shape[nb + 1] == b.c;
  for (uint32_t ax = 0; shape_ok && ax < nb; ax++)
    shape_ok = lc->shape[ax] == bshape[ax];
  if (!shape_ok) {
    char want[160];
    size_t used = (size_t)snprintf(want, sizeof want, "[");
    for (uint32_t ax = 0; ax < nb && used < sizeof want; ax++)
      used += (size_t)snprintf(want + used, sizeof want - used, "%lld,",
                               (long long)bshape[ax]);
    if (used < sizeof want)
      snprintf(want + used, sizeof want - used, "%lld,%lld]", (long long)a.r,
               (long long)b.c);
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "matmul: output is %s, expected %s for %s x %s",
                        shape_str(sc, sizeof sc, lc, 0), want,
                        shape_str(sa, sizeof sa, la, t[0]),
                        shape_str(sb, sizeof sb, lb, t[1]));
  }
  for (uint32_t ax = 0; ax < lc->rank; ax++)
    if (lc->shape[ax] > 1 && lc->strides[ax] == 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "matmul: output %s has a stride-0 axis %u: every "
                          "element needs its own place",
                          shape_str(sc, sizeof sc, lc, 0), ax);
  if (a.r > INT_MAX || a.c > INT_MAX || b.c > INT_MAX)
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "matmul: %s x %s has a matrix dimension above %d, "
                        "more than cblas can index",
                        shape_str(sa, sizeof sa, la, t[0]),
                        shape_str(sb, sizeof sb, lb, t[1]), INT_MAX);

  op->elem = cpu_dtype_size(la->dtype);
  op->m = a.r;
  op->k = a.c;
  op->n = b.c;
  op->nb = nb;
  op->batches = 1;
  for (uint32_t ax = 0; ax < nb; ax++) {
    op->bshape[ax] = bshape[ax];
    op->batches *= bshape[ax];
    int64_t ea = ax + nba >= nb ? la->shape[ax + nba - nb] : 1;
    int64_t eb = ax + nbb >= nb ? lb->shape[ax + nbb - nb] : 1;
    op->bstride[0][ax] = ea == 1 ? 0 : la->strides[ax + nba - nb];
    op->bstride[1][ax] = eb == 1 ? 0 : lb->strides[ax + nbb - nb];
    op->bstride[2][ax] = bshape[ax] == 1 ? 0 : lc->strides[ax];
  }
  op->off[0] = la->offset;
  op->off[1] = lb->offset;
  op->off[2] = lc->offset;
  op->a = a;
  op->b = b;
  op->c = (mm_view){op->m, op->n, lc->strides[nb], lc->strides[nb + 1], 0, 0};
  fold_batches(op);
  if (op->m > INT_MAX) { /* folding made A too tall for cblas: undo */
    op->m = a.r;
    op->a = a;
    op->c = (mm_view){op->m, op->n, lc->strides[nb], lc->strides[nb + 1], 0, 0};
    op->nb = nb;
    op->batches = 1;
    for (uint32_t ax = 0; ax < nb; ax++)
      op->batches *= bshape[ax];
  }
  pick(&op->a);
  pick(&op->b);
  pick(&op->c);

  /* Workspace: packs shared by all batches, then one slot per chunk. */
  int64_t am = op->m * op->k, bm = op->k * op->n, cm = op->m * op->n;
  for (int s = 0; s < 2; s++) {
    const int64_t *bs = op->bstride[s];
    int same = 1;
    for (uint32_t ax = 0; ax < op->nb; ax++)
      same &= bs[ax] == 0;
    op->shared[s] =
        (s ? op->b.mode : op->a.mode) == MM_PACK && same && op->batches > 1;
  }
  int64_t base_elems = 0;
  if (op->shared[0]) {
    op->shared_off[0] = base_elems;
    base_elems += am;
  }
  if (op->shared[1]) {
    op->shared_off[1] = base_elems;
    base_elems += bm;
  }
  int64_t slot = 0, slot_check;
  int too_big = 0;
  if (op->a.mode == MM_PACK && !op->shared[0])
    too_big |= __builtin_add_overflow(slot, am, &slot);
  if (op->b.mode == MM_PACK && !op->shared[1])
    too_big |= __builtin_add_overflow(slot, bm, &slot);
  if (op->c.mode == MM_PACK)
    too_big |= __builtin_add_overflow(slot, cm, &slot);
  too_big |= op->shared[1] && __builtin_add_overflow(am, bm, &slot_check);
  if (op->k == 0) { /* zeros only: no GEMM, no packing */
    slot = base_elems = 0;
    op->shared[0] = op->shared[1] = 0;
  }
  op->max_chunks = 1;
  int64_t flops;
  if (op->batches > 1 && (__builtin_mul_overflow(cm, op->k, &flops) == 0 &&
                          flops <= MM_SMALL_GEMM))
    op->max_chunks = op->batches < MM_MAX_CHUNKS ? op->batches : MM_MAX_CHUNKS;
  op->slot_base = base_elems;
  op->slot_elems = slot;
  /* The workspace grows with the chunks: when the most a batch can have
   * fits, this machine's count fits too, and the check need not ask the
   * system for its cores. */
  int64_t bytes;
  if (too_big || (mm_bytes(op, op->max_chunks, &bytes) &&
                  mm_bytes(op, mm_chunks(op), &bytes)))
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "matmul: the packing workspace for %s x %s is larger "
                        "than 64 bits can count",
                        shape_str(sa, sizeof sa, la, t[0]),
                        shape_str(sb, sizeof sb, lb, t[1]));
  return NULL;
}

tyto_plugin_error *cpu_matmul_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc) {
  mm_op op;
  memset(&op, 0, sizeof op);
  return mm_plan(h, desc, &op);
}

#ifdef TYTO_HAVE_DNNL
/* Puts the planned op on oneDNN's brgemm kernels (*taken = 1, op->dn
 * holding the primitive) when it is a big f32 GEMM (MM_DNNL_MIN) that
 * oneDNN has one for over the layouts as bound; else leaves it to OpenBLAS.
 * A kernel oneDNN offered but could not make (out of memory) is an error,
 * not another path, so that the library a product runs on never depends on
 * memory pressure. */
static tyto_plugin_error *mm_try_dnnl(const tyto_plugin_host *h,
                                      const cpu_desc *desc, mm_op *op,
                                      int *taken) {
  const tyto_plugin_layout *l[3] = {&desc->in[0].l, &desc->in[1].l,
                                    &desc->out[0].l};
  uint32_t nb = l[2]->rank - 2;
  int64_t m = l[2]->shape[nb], n = l[2]->shape[nb + 1], mn, mnk;
  *taken = 0;
  if (op->elem != 4 || op->k <= 0 || op->batches == 0 || m < MM_DNNL_SIDE ||
      n < MM_DNNL_SIDE || cpu_dnnl_off())
    return NULL;
  if (!__builtin_mul_overflow(m, n, &mn) &&
      !__builtin_mul_overflow(mn, op->k, &mnk) && mnk < MM_DNNL_MIN)
    return NULL;
  const int64_t *ia = desc->d->iattrs;
  int t[2] = {desc->d->n_iattrs ? (int)ia[0] : 0,
              desc->d->n_iattrs ? (int)ia[1] : 0};
  int ok = cpu_dnnl_mm_make(&op->dn, l, t, "brg");
  char sa[160], sb[160];
  shape_str(sa, sizeof sa, l[0], t[0]);
  shape_str(sb, sizeof sb, l[1], t[1]);
  if (ok < 0)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "matmul: oneDNN offered %s for the f32 product %s x "
                        "%s but could not make it (out of memory); set "
                        "TYTO_CPU_NO_DNNL=1 to run it on OpenBLAS",
                        op->dn.impl[0] ? op->dn.impl : "a kernel", sa, sb);
  if (ok)
    h->log(h->ctx, TYTO_PLUGIN_LOG_DEBUG, "matmul f32 %s x %s: oneDNN %s%s", sa,
           sb, op->dn.impl, op->dn.swap ? ", as C^T = B^T A^T" : "");
  else
    h->log(h->ctx, TYTO_PLUGIN_LOG_DEBUG,
           "matmul f32 %s x %s: OpenBLAS (oneDNN offers %s for these "
           "strides, not brgemm)",
           sa, sb, op->dn.impl[0] ? op->dn.impl : "nothing");
  *taken = ok;
  return NULL;
}
#endif

tyto_plugin_error *cpu_matmul_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out) {
  mm_op *op = calloc(1, sizeof *op);
  if (!op)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of memory");
  tyto_plugin_error *e = mm_plan(h, desc, op);
  if (e) {
    free(op);
    return e;
  }
  op->base.run = mm_exec;
  op->base.destroy = mm_destroy;
  op->h = h;
#ifdef TYTO_HAVE_DNNL
  int dn = 0;
  if ((e = mm_try_dnnl(h, desc, op, &dn)) != NULL) {
    free(op);
    return e;
  }
  if (dn) {
    op->base.workspace_bytes = cpu_dnnl_mm_scratch_bytes(&op->dn);
    *out = &op->base;
    return NULL;
  }
#endif
  op->chunks = mm_chunks(op);
  int64_t bytes = 0;
  mm_bytes(op, op->chunks, &bytes); /* fits: mm_plan checked */
  op->base.workspace_bytes = (uint64_t)bytes;
  *out = &op->base;
  return NULL;
}
