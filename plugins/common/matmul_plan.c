/*
 * MATMUL planned for a GPU BLAS (matmul_plan.h), as the CUDA and OpenCL
 * plugins hand it to cuBLAS and CLBlast. A column-major view goes to the
 * library as a transposed operand, a column-major C by computing
 * C^T = B^T A^T; views with steps in both axes, negative or zero strides
 * are packed into the workspace, and such an output is computed there and
 * copied out.
 */
#include "matmul_plan.h"

#include <stdio.h>
#include <string.h>

#include "common.h"
#include "text.h"

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
static void set_view(tpc_mm_opnd *o, const tyto_plugin_layout *l, int t) {
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
 * (its transpose is row-major) or packed; the library takes ld as an int.
 * pack: every operand is packed. */
static void pick(tpc_mm_opnd *v, int64_t index_max, int pack) {
  if (pack) {
    v->mode = TPC_MM_PACK;
  } else if ((v->c <= 1 || v->sc == 1) &&
             (v->r <= 1 || v->sr >= max64(v->c, 1))) {
    v->mode = TPC_MM_ROW;
    v->ld = v->r <= 1 ? max64(v->c, 1) : v->sr;
  } else if ((v->r <= 1 || v->sr == 1) &&
             (v->c <= 1 || v->sc >= max64(v->r, 1))) {
    v->mode = TPC_MM_COL;
    v->ld = v->c <= 1 ? max64(v->r, 1) : v->sc;
  } else {
    v->mode = TPC_MM_PACK;
  }
  if (v->mode != TPC_MM_PACK && v->ld > index_max)
    v->mode = TPC_MM_PACK;
}

/* Merges the batch axes and the row axis of A and C into one row axis when
 * B is the same matrix in every batch and the merged rows keep one stride
 * in both A and C: one taller GEMM (a linear layer over [batch, seq, in]). */
static void fold_batches(tpc_mm_plan *p, int64_t index_max) {
  tpc_mm_opnd *a = &p->o[0], *c = &p->o[2];
  if (p->batches <= 1 || p->m * p->batches > index_max)
    return;
  for (uint32_t ax = 0; ax < p->nb; ax++)
    if (p->bshape[ax] > 1 && p->o[1].bstride[ax] != 0)
      return;
  int64_t ext[TPC_MM_MAXR + 1], sa[TPC_MM_MAXR + 1], sc[TPC_MM_MAXR + 1];
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

void tpc_mm_compact(const int64_t *shape, uint32_t rank, int64_t *str) {
  int64_t st = 1;
  for (uint32_t i = rank; i-- > 0;) {
    str[i] = st;
    st *= shape[i];
  }
}

uint32_t tpc_mm_pack_dims(const tpc_mm_plan *p, const tpc_mm_opnd *o,
                          int64_t *shape, int64_t *str) {
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
 * through uniformly, then picks the library routine. */
static void collapse(tpc_mm_plan *p) {
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
    p->call = TPC_MM_SINGLE;
  } else if (ng == 1) {
    int neg = 0, pos = 0;
    for (int i = 0; i < 3; i++) {
      neg |= p->o[i].g[0] < 0;
      pos |= p->o[i].g[0] > 0;
    }
    p->call = neg && pos ? TPC_MM_LIST : TPC_MM_STRIDED;
    if (neg && !pos) /* every stride <= 0: run the batches backwards */
      for (int i = 0; i < 3; i++) {
        p->o[i].shift = (p->gshape[0] - 1) * p->o[i].g[0];
        p->o[i].g[0] = -p->o[i].g[0];
      }
  } else {
    p->call = TPC_MM_LIST;
  }
  for (int i = 0; i < 3; i++) {
    tpc_mm_opnd *o = &p->o[i];
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

/* Checks the operand counts and the transpose flags into t. */
static int check_attrs(const tpc_operands *a, int *t, char *why,
                       size_t why_size) {
  const int bad = TYTO_PLUGIN_ERR_INVALID_ARGUMENT;
  if (a->n_in != 2 || a->n_out != 1)
    return tpc_fail(why, why_size, bad,
                    "matmul: expected 2 inputs and 1 output, got %u and %u",
                    (unsigned)a->n_in, (unsigned)a->n_out);
  if (a->n_iattrs != 0 && a->n_iattrs != 2)
    return tpc_fail(why, why_size, bad,
                    "matmul: expected 0 or 2 integer attributes (the "
                    "transpose flags of the inputs), got %u",
                    (unsigned)a->n_iattrs);
  for (uint32_t i = 0; i < a->n_iattrs; i++) {
    if (a->iattrs[i] != 0 && a->iattrs[i] != 1)
      return tpc_fail(why, why_size, bad,
                      "matmul: transpose flag iattrs[%u] must be 0 or 1, "
                      "got %lld",
                      (unsigned)i, (long long)a->iattrs[i]);
    t[i] = (int)a->iattrs[i];
  }
  return 0;
}

/* Sets the views, the batch grid and the batch strides of A, B and C, and
 * checks the shapes (ss: A's, B's and C's shape strings). */
static int check_shapes(const tpc_operands *a, const int *t, tpc_mm_plan *p,
                        char (*ss)[100], char *why, size_t why_size) {
  const int bad = TYTO_PLUGIN_ERR_INVALID_ARGUMENT;
  const tyto_plugin_layout *la = a->in[0], *lb = a->in[1], *lc = a->out[0];
  const char *sa = ss[0], *sb = ss[1], *sc = ss[2];
  if (la->rank < 2 || lb->rank < 2)
    return tpc_fail(why, why_size, bad,
                    "matmul: both inputs need rank 2 or more, got %s x %s", sa,
                    sb);
  tpc_mm_opnd *A = &p->o[0], *B = &p->o[1], *C = &p->o[2];
  set_view(A, la, t[0]);
  set_view(B, lb, t[1]);
  if (A->c != B->r)
    return tpc_fail(why, why_size, bad,
                    "matmul: inner dimensions differ: %s x %s", sa, sb);
  uint32_t nba = la->rank - 2, nbb = lb->rank - 2;
  uint32_t nb = nba > nbb ? nba : nbb;
  for (uint32_t ax = 0; ax < nb; ax++) {
    int64_t ea = ax + nba >= nb ? la->shape[ax + nba - nb] : 1;
    int64_t eb = ax + nbb >= nb ? lb->shape[ax + nbb - nb] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      return tpc_fail(why, why_size, bad,
                      "matmul: batch axes do not broadcast: %s x %s", sa, sb);
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
    return tpc_fail(why, why_size, bad,
                    "matmul: output is %s, expected %s for %s x %s", sc, want,
                    sa, sb);
  }
  for (uint32_t ax = 0; ax < lc->rank; ax++)
    if (lc->shape[ax] > 1 && lc->strides[ax] == 0)
      return tpc_fail(why, why_size, bad,
                      "matmul: output %s has a stride-0 axis %u: every "
                      "element needs its own place",
                      sc, (unsigned)ax);
  p->m = A->r;
  p->k = A->c;
  p->n = B->c;
  p->nb = nb;
  return 0;
}

/* Picks how each operand reaches the library, lays out the packed ones in
 * the workspace and checks that one matrix stays within lim's indices. */
static int place(tpc_mm_plan *p, size_t elem, const tpc_mm_limits *lim,
                 int pack, char *why, size_t why_size) {
  const int64_t index_max = lim->index_max;
  int64_t align_e = (int64_t)(lim->align / elem), ws = 0;
  for (int i = 0; i < 3; i++) {
    tpc_mm_opnd *o = &p->o[i];
    pick(o, index_max, pack);
    o->trans = o->mode == TPC_MM_COL;
    memcpy(o->g, o->bstride, sizeof o->g);
    if (o->mode != TPC_MM_PACK) {
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
        tpc_mm_compact(p->bshape, p->nb, o->g);
        for (uint32_t ax = 0; ax < p->nb; ax++)
          o->g[ax] *= mat; /* <= region: no overflow */
      }
    }
    if (o->mhi > index_max - align_e)
      return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                      "matmul: %s: one matrix of operand %s spans %lld "
                      "elements, more than %s's 32-bit indices reach",
                      p->what,
                      i == 0   ? "A"
                      : i == 1 ? "B"
                               : "C",
                      (long long)o->mhi + 1, lim->library);
  }
  int64_t bytes;
  if (__builtin_mul_overflow(ws, (int64_t)elem, &bytes))
    goto too_big;
  p->ws_elems = ws;
  return 0;
too_big:
  return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                  "matmul: the packing workspace for %s is larger than 64 "
                  "bits can count",
                  p->what);
}

static int plan_make(const tpc_operands *a, size_t elem,
                     const tpc_mm_limits *lim, int pack, tpc_mm_plan *p,
                     char *why, size_t why_size) {
  memset(p, 0, sizeof *p);
  int t[2] = {0, 0};
  int code = check_attrs(a, t, why, why_size);
  if (code != 0)
    return code;
  const tyto_plugin_layout *lc = a->out[0];
  char ss[3][100];
  fmt_shape(ss[0], sizeof ss[0], a->in[0], t[0]);
  fmt_shape(ss[1], sizeof ss[1], a->in[1], t[1]);
  fmt_shape(ss[2], sizeof ss[2], lc, 0);
  snprintf(p->what, sizeof p->what, "%s x %s", ss[0], ss[1]);
  code = check_shapes(a, t, p, ss, why, why_size);
  if (code != 0)
    return code;
  int empty = 0; /* the output has no element */
  for (uint32_t ax = 0; ax < lc->rank; ax++)
    empty |= lc->shape[ax] == 0;
  if (empty || p->k == 0)
    return 0; /* nothing to compute, or zeros only: no GEMM */
  const int64_t index_max = lim->index_max;
  if (p->m > index_max || p->n > index_max || p->k > index_max)
    return tpc_fail(why, why_size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                    "matmul: %s has a matrix dimension above %lld, more "
                    "than %s's 32-bit indices reach",
                    p->what, (long long)index_max, lim->library);
  p->batches = 1;
  for (uint32_t ax = 0; ax < p->nb; ax++)
    p->batches *= p->bshape[ax]; /* <= the output's element count */
  tpc_mm_opnd *C = &p->o[2];
  C->r = p->m;
  C->c = p->n;
  C->sr = lc->strides[p->nb];
  C->sc = lc->strides[p->nb + 1];
  fold_batches(p, index_max);
  code = place(p, elem, lim, pack, why, why_size);
  if (code != 0)
    return code;
  p->swap = C->trans;
  collapse(p);
  return 0;
}

int tpc_mm_plan_make(const tpc_operands *a, size_t elem,
                     const tpc_mm_limits *lim, tpc_mm_plan *p, char *why,
                     size_t why_size) {
  return plan_make(a, elem, lim, 0, p, why, why_size);
}

int tpc_mm_plan_make_packed(const tpc_operands *a, size_t elem,
                            const tpc_mm_limits *lim, tpc_mm_plan *p, char *why,
                            size_t why_size) {
  return plan_make(a, elem, lim, 1, p, why, why_size);
}
