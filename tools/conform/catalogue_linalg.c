/*
 * Catalogue cases of the linear algebra ops: INV, DET, LOGDET, SOLVE,
 * CHOLESKY, QR and TRIANGULAR_SOLVE (see catalogue_int.h). Every A is
 * strictly diagonally dominant (symmetric positive definite for CHOLESKY;
 * see cf_values), so every factorisation is well-conditioned and a device
 * may pivot differently from LAPACK and still agree to the tolerance. QR is
 * compared after fixing the signs of R's diagonal (CF_POST_QR_SIGNS).
 */
#include "catalogue_int.h"

#include <stdio.h>
#include <string.h>

#define OP(x) TYTO_PLUGIN_OP_##x

/* How a batch of [rows, cols] matrices is laid out. */
enum mat {
  M_ROW,    /* row-major */
  M_COL,    /* each matrix column-major (a transposed view) */
  M_PADDED, /* rows 3 elements apart more than needed, offset 2 */
  M_BCAST   /* row-major matrices, stride 0 on the batch axes */
};

/* Fills shape/strides of a rank `lead` + 2 tensor; returns the offset. */
static int64_t mat_layout(enum mat kind, uint32_t lead, const int64_t *batch,
                          int64_t rows, int64_t cols, int64_t *shape,
                          int64_t *st) {
  int64_t rs = cols, cs = 1, size;
  if (lead > 0) /* batch may be NULL when there is none */
    memcpy(shape, batch, lead * sizeof *shape);
  shape[lead] = rows;
  shape[lead + 1] = cols;
  switch (kind) {
  case M_COL: rs = 1, cs = rows; break;
  case M_PADDED: rs = cols + 3; break;
  default: break;
  }
  st[lead] = rs;
  st[lead + 1] = cs;
  size = kind == M_PADDED ? rows * (cols + 3) : rows * cols;
  for (uint32_t a = lead; a-- > 0; size *= batch[a])
    st[a] = kind == M_BCAST ? 0 : size;
  return kind == M_PADDED ? 2 : 0;
}

static void in_mat(cf_builder *b, cf_case *c, uint32_t i, enum mat kind,
                   uint32_t lead, const int64_t *batch, int64_t rows,
                   int64_t cols) {
  int64_t shape[TYTO_PLUGIN_MAX_RANK], st[TYTO_PLUGIN_MAX_RANK];
  int64_t off = mat_layout(kind, lead, batch, rows, cols, shape, st);
  cf_in_set(b, c, i, lead + 2, shape, st, off);
}

static void out_mat(cf_builder *b, cf_case *c, uint32_t i, enum mat kind,
                    uint32_t lead, const int64_t *batch, int64_t rows,
                    int64_t cols) {
  int64_t shape[TYTO_PLUGIN_MAX_RANK], st[TYTO_PLUGIN_MAX_RANK];
  int64_t off = mat_layout(kind, lead, batch, rows, cols, shape, st);
  cf_out_set(b, c, i, lead + 2, shape, st, off);
}

/* INV, CHOLESKY (A -> [n, n]), DET, LOGDET (A -> one value per matrix). */
static void square_case(cf_builder *b, const char *name, uint32_t lead,
                        const int64_t *batch, int64_t n, enum mat ka,
                        enum mat ko) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  in_mat(b, c, 0, ka, lead, batch, n, n);
  if (b->e->op == OP(DET) || b->e->op == OP(LOGDET))
    cf_out_set(b, c, 0, lead, batch, NULL, 0);
  else
    out_mat(b, c, 0, ko, lead, batch, n, n);
}

/* SOLVE, TRIANGULAR_SOLVE: A [n, n], B [n, k] -> X [n, k]. tri: lower,
 * transpose, unit_diagonal (TRIANGULAR_SOLVE only). B's values are
 * uniform in [-2, 2]. */
static void solve_case(cf_builder *b, const char *name, uint32_t lead,
                       const int64_t *batch, int64_t n, int64_t k, enum mat ka,
                       enum mat kb, const int tri[3]) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  in_mat(b, c, 0, ka, lead, batch, n, n);
  in_mat(b, c, 1, kb, lead, batch, n, k);
  cf_in_values(c, 1, CF_UNIFORM, -2, 2);
  out_mat(b, c, 0, M_ROW, lead, batch, n, k);
  if (b->e->op == OP(TRIANGULAR_SOLVE)) {
    c->n_iattrs = 3;
    for (int i = 0; i < 3; i++)
      c->iattrs[i] = tri[i];
    /* A unit diagonal is not stored: keep the triangle small so that the
     * matrix stays well-conditioned without it. */
    if (tri[2])
      cf_in_values(c, 0, CF_DIAG_DOMINANT, -0.3, 0.3);
  }
}

/* QR: A [m, n] -> Q [m, k], R [k, n], k = min(m, n). */
static void qr_case(cf_builder *b, const char *name, uint32_t lead,
                    const int64_t *batch, int64_t m, int64_t n, enum mat ka,
                    enum mat ko) {
  const int64_t k = m < n ? m : n;
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  in_mat(b, c, 0, ka, lead, batch, m, n);
  out_mat(b, c, 0, ko, lead, batch, m, k);
  out_mat(b, c, 1, ko, lead, batch, k, n);
  c->post = CF_POST_QR_SIGNS;
}

static void square_cases(cf_builder *b) {
  static const int64_t b1[1] = {3}, b2[1] = {2}, none[1] = {0};
  const int det = b->e->op == OP(DET) || b->e->op == OP(LOGDET);
  square_case(b, "[5,5]", 0, none, 5, M_ROW, M_ROW);
  square_case(b, "[1,1]", 0, none, 1, M_ROW, M_ROW);
  square_case(b, "batch [3,4,4]", 1, b1, 4, M_ROW, M_ROW);
  square_case(b, "transposed batch [2,6,6]", 1, b2, 6, M_COL, M_ROW);
  square_case(b, "padded rows+offset [2,5,5]", 1, b2, 5, M_PADDED, M_ROW);
  square_case(b, "broadcast batch (stride 0) [3,4,4]", 1, b1, 4, M_BCAST,
              M_ROW);
  if (!det) {
    square_case(b, "transposed output [6,6]", 0, none, 6, M_ROW, M_COL);
    square_case(b, "padded output [2,5,5]", 1, b2, 5, M_ROW, M_PADDED);
  }
  square_case(b, "size-0 [0,0]", 0, none, 0, M_ROW, M_ROW);
  square_case(b, det ? "[24,24]" : "[40,40]", 0, none, det ? 24 : 40, M_ROW,
              M_ROW);
}

static void solve_cases(cf_builder *b) {
  static const int64_t b2[1] = {2}, none[1] = {0};
  static const int tris[4][3] = {{1, 0, 0}, {0, 1, 0}, {1, 1, 1}, {0, 0, 1}};
  static const char *const tri_names[4] = {"lower", "upper, transposed",
                                           "lower, transposed, unit diagonal",
                                           "upper, unit diagonal"};
  const int tri = b->e->op == OP(TRIANGULAR_SOLVE);
  char name[64];
  for (int t = 0; t < (tri ? 4 : 1); t++) {
    const int *at = tris[t];
#define NAME(s)                                                                \
  (snprintf(name, sizeof name, "%s%s%s", s, tri ? ": " : "",                   \
            tri ? tri_names[t] : ""),                                          \
   name)
    solve_case(b, NAME("[5,5] B [5,3]"), 0, none, 5, 3, M_ROW, M_ROW, at);
    solve_case(b, NAME("batch [2,4,4] B [2,4,2]"), 1, b2, 4, 2, M_ROW, M_ROW,
               at);
    solve_case(b, NAME("A broadcast batch, B^T"), 1, b2, 4, 3, M_BCAST, M_COL,
               at);
    solve_case(b, NAME("A^T, padded B"), 0, none, 6, 2, M_COL, M_PADDED, at);
#undef NAME
  }
  solve_case(b, "B one column [7,1]", 0, none, 7, 1, M_ROW, M_ROW, tris[0]);
  solve_case(b, "B broadcast batch [2,5,3]", 1, b2, 5, 3, M_PADDED, M_BCAST,
             tris[1]);
  solve_case(b, "k=0 B [4,0]", 0, none, 4, 0, M_ROW, M_ROW, tris[0]);
  solve_case(b, "[30,30] B [30,7]", 0, none, 30, 7, M_ROW, M_ROW, tris[0]);
}

static void qr_cases(cf_builder *b) {
  static const int64_t b2[1] = {2}, none[1] = {0};
  qr_case(b, "square [5,5]", 0, none, 5, 5, M_ROW, M_ROW);
  qr_case(b, "tall [7,4]", 0, none, 7, 4, M_ROW, M_ROW);
  qr_case(b, "wide [3,5]", 0, none, 3, 5, M_ROW, M_ROW);
  qr_case(b, "batch [2,6,3]", 1, b2, 6, 3, M_ROW, M_ROW);
  qr_case(b, "transposed input [5,4]", 0, none, 5, 4, M_COL, M_ROW);
  qr_case(b, "padded input, batch [2,8,5]", 1, b2, 8, 5, M_PADDED, M_ROW);
  qr_case(b, "transposed outputs [6,4]", 0, none, 6, 4, M_ROW, M_COL);
  qr_case(b, "[40,20]", 0, none, 40, 20, M_ROW, M_ROW);
}

void cf_linalg_cases(cf_builder *b) {
  /* Not defined for f16 and bf16: specials.c's case checks the refusal. */
  if (cf_dtype_16(b->dtype))
    return;
  switch (b->e->op) {
  case OP(SOLVE):
  case OP(TRIANGULAR_SOLVE): solve_cases(b); break;
  case OP(QR): qr_cases(b); break;
  default: square_cases(b); break;
  }
}
