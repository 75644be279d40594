/*
 * MATMUL through cuBLAS: [..., m, k] x [..., k, n] -> [..., m, n], batch
 * axes broadcast by NumPy rules, optional transposes of either input's last
 * two axes (iattrs[0], iattrs[1]).
 *
 * Planned once at prepare exactly as the OpenCL plugin plans for CLBlast
 * (opencl/blas.c): every matrix (A, B, C) is a 2-D view with two strides.
 * A view that is row-major or column-major with a unit stride goes to
 * cuBLAS directly (cuBLAS is column-major: a row-major product C = A B is
 * the column-major C^T = B^T A^T); any other view (steps in both axes,
 * negative or zero strides) is packed into the workspace by a strided-copy
 * kernel first, and such an output is computed in the workspace and copied
 * out. A right operand that is the same matrix in every batch folds the
 * batch into the rows of A and C (one taller GEMM). The batch axes that
 * remain collapse, where they can, into one axis of uniform strides, run by
 * cublas<t>gemmStridedBatched; otherwise each batch is one cublas<t>gemm.
 * k = 0 fills the output with zeros.
 *
 * f32 products keep f32 accuracy (no TF32) unless the plugin option
 * allow_tf32 says yes.
 */
#include "ops.h"

#include <cublas_v2.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"

#define MM_INDEX_MAX ((int64_t)INT_MAX)
#define MM_MAXR TYTO_PLUGIN_MAX_RANK

enum { MM_ROW, MM_COL, MM_PACK };        /* how a view reaches cuBLAS */
enum { MM_SINGLE, MM_STRIDED, MM_LIST }; /* which cuBLAS routine runs */

/* One of A, B, C. */
typedef struct mm_opnd {
  /* The r x c matrix at strides (sr, sc) in its bound buffer, and its batch
   * strides over the plan's grid (0 where broadcast). */
  int64_t r, c, sr, sc;
  int64_t bstride[MM_MAXR];
  int mode; /* MM_ROW, MM_COL or MM_PACK */
  /* As cuBLAS reads it: the packed copy in the workspace for MM_PACK. */
  int trans;          /* stored column-major: a transposed operand */
  int64_t ld;         /* leading dimension */
  int shared;         /* packed once: the same matrix in every batch */
  int64_t ws_off;     /* packed: its region of the workspace, in elements */
  int64_t g[MM_MAXR]; /* batch strides over the collapsed grid */
  int64_t shift;      /* offset of collapsed batch 0 from the base */
  int64_t mhi;        /* last element of one matrix from its first */
  int64_t lo, hi;     /* elements all batches reach, from the base */
} mm_opnd;

typedef struct mm_plan {
  int64_t m, n, k; /* m counts the folded batch rows */
  uint32_t nb;     /* batch axes of the grid */
  int64_t bshape[MM_MAXR];
  int64_t batches;
  mm_opnd o[3]; /* A, B, C */
  uint32_t ng;  /* axes of the collapsed grid */
  int64_t gshape[MM_MAXR];
  int call; /* MM_SINGLE, MM_STRIDED or MM_LIST */
  int swap; /* C is column-major: cuBLAS computes C^T = B^T A^T */
  int64_t ws_elems;
  char what[240]; /* "[3, 5, 7] x [7, 4]^T" for messages */
  cudaKernel_t pack, fill;
  int tf32;
} mm_plan;

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_MATMUL;
}

static int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* "[2, 3]" or "[2, 3]^T" into buf. */
static void fmt_shape(char *buf, size_t size, const tyto_plugin_layout *l,
                      int t) {
  tpc_format_shape(l, buf, size);
  size_t used = strlen(buf);
  if (t && used + 2 < size)
    memcpy(buf + used, "^T", 3);
}

/* The last two axes of l, transposed when t. */
static void set_view(mm_opnd *o, const tyto_plugin_layout *l, int t) {
  uint32_t r = l->rank;
  o->r = l->shape[r - 2];
  o->c = l->shape[r - 1];
  o->sr = l->strides[r - 2];
  o->sc = l->strides[r - 1];
  if (t) {
    int64_t x = o->r;
    o->r = o->c;
    o->c = x;
    x = o->sr;
    o->sr = o->sc;
    o->sc = x;
  }
}

/* Row-major (unit column stride, ld = row stride >= columns), column-major
 * (its transpose is row-major) or packed; cuBLAS takes ld as an int. */
static void pick(mm_opnd *v) {
  if ((v->c <= 1 || v->sc == 1) && (v->r <= 1 || v->sr >= max64(v->c, 1))) {
    v->mode = MM_ROW;
    v->ld = v->r <= 1 ? max64(v->c, 1) : v->sr;
  } else if ((v->r <= 1 || v->sr == 1) &&
             (v->c <= 1 || v->sc >= max64(v->r, 1))) {
    v->mode = MM_COL;
    v->ld = v->c <= 1 ? max64(v->r, 1) : v->sc;
  } else {
    v->mode = MM_PACK;
  }
  if (v->mode != MM_PACK && v->ld > MM_INDEX_MAX)
    v->mode = MM_PACK;
}

/* Merges the batch axes and the row axis of A and C into one row axis when
 * B is the same matrix in every batch and the merged rows keep one stride
 * in both A and C: one taller GEMM (a linear layer over [batch, seq, in]). */
static void fold_batches(mm_plan *p) {
  mm_opnd *a = &p->o[0], *c = &p->o[2];
  if (p->batches <= 1 || p->m * p->batches > MM_INDEX_MAX)
    return;
  for (uint32_t ax = 0; ax < p->nb; ax++)
    if (p->bshape[ax] > 1 && p->o[1].bstride[ax] != 0)
      return;
  int64_t ext[MM_MAXR + 1], sa[MM_MAXR + 1], sc[MM_MAXR + 1];
  int n = 0;
  for (uint32_t ax = 0; ax < p->nb; ax++)
    if (p->bshape[ax] > 1) {
      ext[n] = p->bshape[ax];
      sa[n] = a->bstride[ax];
      sc[n++] = c->bstride[ax];
    }
  if (p->m > 1) {
    ext[n] = p->m;
    sa[n] = a->sr;
    sc[n++] = c->sr;
  }
  for (int i = 0; i + 1 < n; i++)
    if (sa[i] != sa[i + 1] * ext[i + 1] || sc[i] != sc[i + 1] * ext[i + 1])
      return;
  p->m *= p->batches;
  a->r = c->r = p->m;
  a->sr = sa[n - 1];
  c->sr = sc[n - 1];
  p->nb = 0;
  p->batches = 1;
}

/* Row-major contiguous strides of `shape`. */
static void compact(const int64_t *shape, uint32_t rank, int64_t *str) {
  int64_t st = 1;
  for (uint32_t i = rank; i-- > 0;) {
    str[i] = st;
    st *= shape[i];
  }
}

/* The packed region of operand o: its matrices over the grid (one matrix
 * when shared), and the strides of the bound (source) layout over it. */
static uint32_t pack_dims(const mm_plan *p, const mm_opnd *o, int64_t *shape,
                          int64_t *str) {
  uint32_t r = 0;
  if (!o->shared)
    for (uint32_t ax = 0; ax < p->nb; ax++) {
      shape[r] = p->bshape[ax];
      str[r++] = o->bstride[ax];
    }
  shape[r] = o->r;
  str[r++] = o->sr;
  shape[r] = o->c;
  str[r++] = o->sc;
  return r;
}

/* Drops unit batch axes and merges neighbours that every operand steps
 * through uniformly, then picks the cuBLAS routine. */
static void collapse(mm_plan *p) {
  uint32_t ng = 0;
  for (uint32_t ax = 0; ax < p->nb; ax++) {
    int64_t e = p->bshape[ax];
    if (e == 1)
      continue;
    int merge = ng > 0;
    for (int i = 0; i < 3 && merge; i++)
      merge = p->o[i].g[ng - 1] == p->o[i].g[ax] * e;
    if (merge) {
      p->gshape[ng - 1] *= e;
      for (int i = 0; i < 3; i++)
        p->o[i].g[ng - 1] = p->o[i].g[ax];
    } else {
      p->gshape[ng] = e;
      for (int i = 0; i < 3; i++)
        p->o[i].g[ng] = p->o[i].g[ax];
      ng++;
    }
  }
  p->ng = ng;
  for (int i = 0; i < 3; i++)
    p->o[i].shift = 0;
  if (ng == 0) {
    p->call = MM_SINGLE;
  } else if (ng == 1) {
    int neg = 0, pos = 0;
    for (int i = 0; i < 3; i++) {
      neg |= p->o[i].g[0] < 0;
      pos |= p->o[i].g[0] > 0;
    }
    p->call = neg && pos ? MM_LIST : MM_STRIDED;
    if (neg && !pos) /* every stride <= 0: run the batches backwards */
      for (int i = 0; i < 3; i++) {
        p->o[i].shift = (p->gshape[0] - 1) * p->o[i].g[0];
        p->o[i].g[0] = -p->o[i].g[0];
      }
  } else {
    p->call = MM_LIST;
  }
  for (int i = 0; i < 3; i++) {
    mm_opnd *o = &p->o[i];
    o->lo = o->hi = o->shift;
    for (uint32_t ax = 0; ax < ng; ax++) {
      int64_t span = (p->gshape[ax] - 1) * o->g[ax];
      if (span < 0)
        o->lo += span;
      else
        o->hi += span;
    }
    o->hi += o->mhi;
  }
}

/* Checks the descriptor and plans it into *p (kernels not built). */
static tyto_plugin_error *plan_make(tyto_plugin_device *dev, const tcu_desc *d,
                                    mm_plan *p) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const tyto_plugin_op_desc *od = d->d;
  memset(p, 0, sizeof *p);
  if (d->n_in != 2 || d->n_out != 1)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "matmul: expected 2 inputs and 1 output, got %u and %u",
        (unsigned)d->n_in, (unsigned)d->n_out);
  if (od->n_iattrs != 0 && od->n_iattrs != 2)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "matmul: expected 0 or 2 integer attributes (the "
                           "transpose flags of the inputs), got %u",
                           (unsigned)od->n_iattrs);
  int t[2] = {0, 0};
  for (uint32_t i = 0; i < od->n_iattrs; i++) {
    if (od->iattrs[i] != 0 && od->iattrs[i] != 1)
      return host->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "matmul: transpose flag iattrs[%u] must be 0 or 1, "
          "got %lld",
          (unsigned)i, (long long)od->iattrs[i]);
    t[i] = (int)od->iattrs[i];
  }
  const tyto_plugin_layout *la = &d->in[0].l, *lb = &d->in[1].l,
                           *lc = &d->out[0].l;
  char sa[100], sb[100], sc[100];
  fmt_shape(sa, sizeof sa, la, t[0]);
  fmt_shape(sb, sizeof sb, lb, t[1]);
  fmt_shape(sc, sizeof sc, lc, 0);
  snprintf(p->what, sizeof p->what, "%s x %s", sa, sb);
  if (la->rank < 2 || lb->rank < 2)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "matmul: both inputs need rank 2 or more, got %s x %s", sa, sb);
  mm_opnd *A = &p->o[0], *B = &p->o[1], *C = &p->o[2];
  set_view(A, la, t[0]);
  set_view(B, lb, t[1]);
  if (A->c != B->r)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "matmul: inner dimensions differ: %s x %s", sa, sb);
  uint32_t nba = la->rank - 2, nbb = lb->rank - 2;
  uint32_t nb = nba > nbb ? nba : nbb;
  for (uint32_t ax = 0; ax < nb; ax++) {
    int64_t ea = ax + nba >= nb ? la->shape[ax + nba - nb] : 1;
    int64_t eb = ax + nbb >= nb ? lb->shape[ax + nbb - nb] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "matmul: batch axes do not broadcast: %s x %s", sa,
                             sb);
    p->bshape[ax] = ea == 1 ? eb : ea;
    A->bstride[ax] = ea == 1 ? 0 : la->strides[ax + nba - nb];
    B->bstride[ax] = eb == 1 ? 0 : lb->strides[ax + nbb - nb];
    C->bstride[ax] = p->bshape[ax] == 1 ? 0 : lc->strides[ax];
  }
  int shape_ok =
      lc->rank == nb + 2 && lc->shape[nb] == A->r && lc->shape[nb + 1] == B->c;
  for (uint32_t ax = 0; shape_ok && ax < nb; ax++)
    shape_ok = lc->shape[ax] == p->bshape[ax];
  if (!shape_ok) {
    char want[160];
    size_t used = (size_t)snprintf(want, sizeof want, "[");
    for (uint32_t ax = 0; ax < nb && used < sizeof want; ax++)
      used += (size_t)snprintf(want + used, sizeof want - used, "%lld, ",
                               (long long)p->bshape[ax]);
    if (used < sizeof want)
      snprintf(want + used, sizeof want - used, "%lld, %lld]", (long long)A->r,
               (long long)B->c);
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "matmul: output is %s, expected %s for %s x %s", sc,
                           want, sa, sb);
  }
  for (uint32_t ax = 0; ax < lc->rank; ax++)
    if (lc->shape[ax] > 1 && lc->strides[ax] == 0)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "matmul: output %s has a stride-0 axis %u: every "
                             "element needs its own place",
                             sc, (unsigned)ax);
  p->m = A->r;
  p->k = A->c;
  p->n = B->c;
  p->nb = nb;
  if (d->out[0].n == 0 || p->k == 0)
    return NULL; /* nothing to compute, or zeros only: no GEMM */
  if (p->m > MM_INDEX_MAX || p->n > MM_INDEX_MAX || p->k > MM_INDEX_MAX)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "matmul: %s has a matrix dimension above %lld, more "
                           "than cuBLAS's 32-bit indices reach",
                           p->what, (long long)MM_INDEX_MAX);
  p->batches = 1;
  for (uint32_t ax = 0; ax < nb; ax++)
    p->batches *= p->bshape[ax]; /* <= the output's element count */
  C->r = p->m;
  C->c = p->n;
  C->sr = lc->strides[nb];
  C->sc = lc->strides[nb + 1];
  fold_batches(p);
  size_t elem = d->elem;
  int64_t align_e = (int64_t)(256 / elem), ws = 0;
  for (int i = 0; i < 3; i++) {
    mm_opnd *o = &p->o[i];
    pick(o);
    o->trans = o->mode == MM_COL;
    memcpy(o->g, o->bstride, sizeof o->g);
    if (o->mode != MM_PACK) {
      o->mhi = (o->r > 1 ? (o->r - 1) * o->sr : 0) +
               (o->c > 1 ? (o->c - 1) * o->sc : 0);
    } else {
      int shared = i < 2;
      for (uint32_t ax = 0; ax < p->nb; ax++)
        shared &= o->bstride[ax] == 0;
      o->shared = shared;
      o->ld = o->c;
      int64_t region, mat;
      if (__builtin_mul_overflow(o->r, o->c, &mat))
        goto too_big;
      o->mhi = mat - 1;
      region = mat;
      if (!shared && __builtin_mul_overflow(region, p->batches, &region))
        goto too_big;
      o->ws_off = ws;
      if (__builtin_add_overflow(ws, region, &ws))
        goto too_big;
      if (shared) {
        memset(o->g, 0, sizeof o->g);
      } else {
        compact(p->bshape, p->nb, o->g);
        for (uint32_t ax = 0; ax < p->nb; ax++)
          o->g[ax] *= mat; /* <= region: no overflow */
      }
    }
    if (o->mhi > MM_INDEX_MAX - align_e)
      return host->error_new(
          TYTO_PLUGIN_ERR_UNSUPPORTED,
          "matmul: %s: one matrix of operand %s spans %lld "
          "elements, more than cuBLAS's 32-bit indices reach",
          p->what,
          i == 0   ? "A"
          : i == 1 ? "B"
                   : "C",
          (long long)o->mhi + 1);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(ws, (int64_t)elem, &bytes))
    goto too_big;
  p->ws_elems = ws;
  p->swap = C->trans;
  collapse(p);
  return NULL;
too_big:
  return host->error_new(
      TYTO_PLUGIN_ERR_UNSUPPORTED,
      "matmul: the packing workspace for %s is larger than 64 "
      "bits can count",
      p->what);
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  mm_plan *p = malloc(sizeof *p);
  if (p == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "matmul: out of host memory");
  tyto_plugin_error *e = plan_make(dev, d, p);
  free(p);
  return e;
}

/* Strided copy between two layouts of one shape, and a fill with zeros. */
static const char mm_source[] =
    "extern \"C\" __global__ void tyto_mm_pack(const T *x, tcu_dims xd, T *y,\n"
    "                                          tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = x[tyto_offset(i, xd)];\n"
    "}\n"
    "extern \"C\" __global__ void tyto_mm_zero(T *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = (T)0;\n"
    "}\n";

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  mm_plan *p = calloc(1, sizeof *p);
  if (p == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "prepare: out of host memory");
  k->impl = p;
  tyto_plugin_error *e = plan_make(dev, &k->desc, p);
  if (e != NULL)
    return e;
  k->workspace_bytes = (uint64_t)p->ws_elems * k->desc.elem;
  p->tf32 = dev->state->allow_tf32 && k->desc.dtype == TYTO_PLUGIN_DTYPE_F32;
  if (k->desc.out[0].n == 0)
    return NULL;
  e = tcu_function(dev, k->desc.dtype, mm_source, "tyto_mm_pack", &p->pack);
  if (e == NULL)
    e = tcu_function(dev, k->desc.dtype, mm_source, "tyto_mm_zero", &p->fill);
  return e;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

/* Dims (slowest first, as pack_dims gives them) as a tcu_dims. */
static tcu_dims dims_rev(const int64_t *shape, const int64_t *str, uint32_t r) {
  tcu_dims d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < 8; i++)
    d.shape[i] = 1;
  for (uint32_t i = 0; i < r; i++) {
    d.shape[i] = shape[r - 1 - i];
    d.str[i] = str[r - 1 - i];
  }
  d.rank = (int)r;
  return d;
}

/* Copies operand o between its bound layout (base) and its packed region
 * of the workspace: in (to_ws) or out. */
static tyto_plugin_error *pack(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const mm_plan *p, const mm_opnd *o, void *base,
                               void *ws, size_t elem, int to_ws) {
  int64_t shape[MM_MAXR + 2], str[MM_MAXR + 2], cstr[MM_MAXR + 2];
  uint32_t r = pack_dims(p, o, shape, str);
  compact(shape, r, cstr);
  int64_t n = 1;
  for (uint32_t i = 0; i < r; i++)
    n *= shape[i];
  tcu_dims bound = dims_rev(shape, str, r), packed = dims_rev(shape, cstr, r);
  void *region = (char *)ws + o->ws_off * (int64_t)elem;
  void *src = to_ws ? base : region, *dst = to_ws ? region : base;
  tcu_dims *sd = to_ws ? &bound : &packed, *dd = to_ws ? &packed : &bound;
  void *params[] = {&src, sd, &dst, dd, &n};
  return tcu_run(dev, s, p->pack, (dim3){tcu_blocks(dev, n), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, params, "matmul packing kernel");
}

static const char *status_name(cublasStatus_t st) {
  const char *s = cublasGetStatusString(st);
  return s != NULL ? s : "unknown status";
}

/* One GEMM (or a strided batch of `count`) of operands at a, b, c. */
static cublasStatus_t gemm(cublasHandle_t h, const mm_plan *p, int f64,
                           const void *a, const void *b, void *c, int64_t count,
                           const int64_t *bstr) {
  const mm_opnd *A = &p->o[0], *B = &p->o[1], *C = &p->o[2];
  /* Row-major C = A B is column-major C^T = B^T A^T; a column-major C
   * (swap) is C = A B in cuBLAS's own terms. */
  const void *x = p->swap ? a : b, *y = p->swap ? b : a;
  const mm_opnd *X = p->swap ? A : B, *Y = p->swap ? B : A;
  int rows = (int)(p->swap ? p->m : p->n), cols = (int)(p->swap ? p->n : p->m);
  cublasOperation_t ox = (X->trans != p->swap) ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t oy = (Y->trans != p->swap) ? CUBLAS_OP_T : CUBLAS_OP_N;
  long long sx = p->swap ? bstr[0] : bstr[1], sy = p->swap ? bstr[1] : bstr[0];
  int ldx = (int)X->ld, ldy = (int)Y->ld, ldc = (int)C->ld, kk = (int)p->k;
  if (f64) {
    const double one = 1, zero = 0;
    if (count <= 1)
      return cublasDgemm(h, ox, oy, rows, cols, kk, &one, x, ldx, y, ldy, &zero,
                         c, ldc);
    return cublasDgemmStridedBatched(h, ox, oy, rows, cols, kk, &one, x, ldx,
                                     sx, y, ldy, sy, &zero, c, ldc, bstr[2],
                                     (int)count);
  }
  const float one = 1, zero = 0;
  if (count <= 1)
    return cublasSgemm(h, ox, oy, rows, cols, kk, &one, x, ldx, y, ldy, &zero,
                       c, ldc);
  return cublasSgemmStridedBatched(h, ox, oy, rows, cols, kk, &one, x, ldx, sx,
                                   y, ldy, sy, &zero, c, ldc, bstr[2],
                                   (int)count);
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const mm_plan *p = k->impl;
  const size_t elem = k->desc.elem;
  tyto_plugin_error *e = NULL;
  void *base[3] = {in[0].ptr, in[1].ptr, out[0].ptr};
  if (p->k == 0) {
    tcu_dims yd = tcu_dims_of(&k->desc.out[0].l);
    int64_t n = k->desc.out[0].n;
    void *params[] = {&base[2], &yd, &n};
    return tcu_run(dev, s, p->fill, (dim3){tcu_blocks(dev, n), 1, 1},
                   (dim3){TCU_BLOCK, 1, 1}, 0, params, "matmul zero fill");
  }
  /* Where each operand's matrices start as cuBLAS reads them. */
  char *at[3];
  for (int i = 0; i < 3 && e == NULL; i++) {
    const mm_opnd *o = &p->o[i];
    if (o->mode == MM_PACK) {
      at[i] = (char *)ws->ptr + o->ws_off * (int64_t)elem;
      if (i < 2)
        e = pack(dev, s, p, o, base[i], ws->ptr, elem, 1);
    } else {
      at[i] = (char *)base[i];
    }
    at[i] += o->shift * (int64_t)elem;
  }
  if (e != NULL)
    return e;
  pthread_mutex_lock(&dev->lib_lock);
  void *hv = NULL;
  e = tcu_cublas(dev, &hv);
  cublasHandle_t h = hv;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  if (e == NULL) {
    st = cublasSetStream(h, s->stream);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasSetMathMode(h, p->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                        : CUBLAS_DEFAULT_MATH);
  }
  const int f64 = k->desc.dtype == TYTO_PLUGIN_DTYPE_F64;
  if (e == NULL && st == CUBLAS_STATUS_SUCCESS) {
    if (p->call != MM_LIST) {
      int64_t count = p->call == MM_STRIDED ? p->gshape[0] : 1;
      int64_t bstr[3] = {0, 0, 0};
      for (int i = 0; i < 3 && p->call == MM_STRIDED; i++)
        bstr[i] = p->o[i].g[0];
      st = gemm(h, p, f64, at[0], at[1], at[2], count, bstr);
    } else {
      /* One GEMM per batch, walking the collapsed grid. */
      int64_t idx[MM_MAXR] = {0}, total = 1;
      for (uint32_t ax = 0; ax < p->ng; ax++)
        total *= p->gshape[ax];
      const int64_t none[3] = {0, 0, 0};
      for (int64_t b = 0; b < total && st == CUBLAS_STATUS_SUCCESS; b++) {
        char *q[3];
        for (int i = 0; i < 3; i++) {
          int64_t off = 0;
          for (uint32_t ax = 0; ax < p->ng; ax++)
            off += idx[ax] * p->o[i].g[ax];
          q[i] = at[i] + off * (int64_t)elem;
        }
        st = gemm(h, p, f64, q[0], q[1], q[2], 1, none);
        for (uint32_t ax = p->ng; ax-- > 0;) {
          if (++idx[ax] < p->gshape[ax])
            break;
          idx[ax] = 0;
        }
      }
    }
  }
  pthread_mutex_unlock(&dev->lib_lock);
  if (e != NULL)
    return e;
  if (st != CUBLAS_STATUS_SUCCESS)
    return tcu_lib_error(
        dev,
        st == CUBLAS_STATUS_ALLOC_FAILED ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                         : TYTO_PLUGIN_ERR_INTERNAL,
        "matmul", f64 ? "cublasDgemm" : "cublasSgemm", status_name(st));
  if (p->o[2].mode == MM_PACK)
    e = pack(dev, s, p, &p->o[2], base[2], ws->ptr, elem, 0);
  return e;
}

const tcu_family tcu_family_blas = {"blas",  owns,   check,
                                    prepare, launch, release};
