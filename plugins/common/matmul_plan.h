/*
 * MATMUL planned for a GPU BLAS (cuBLAS, CLBlast): the checks of the
 * descriptor and the plan that both GPU plugins hand their library, with
 * one set of messages. Every matrix (A, B and the output C) is a 2-D view
 * with two strides: row-major or column-major views go to the library
 * directly, any other view is packed into a workspace; a right operand that
 * is the same matrix in every batch folds the batch into the rows of A and
 * C; the batch axes that remain collapse, where they can, into one axis of
 * uniform strides. What a device adds (its kernels, its library calls)
 * stays in the plugin. Depends on the plugin ABI header and the C library
 * only.
 */
#ifndef TYTO_PLUGINS_MATMUL_PLAN_H
#define TYTO_PLUGINS_MATMUL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "geometry.h"

#define TPC_MM_MAXR TYTO_PLUGIN_MAX_RANK

enum { TPC_MM_ROW, TPC_MM_COL, TPC_MM_PACK }; /* how a view reaches the BLAS */
enum { TPC_MM_SINGLE, TPC_MM_STRIDED, TPC_MM_LIST }; /* which routine runs */

/* One of A, B, C. */
typedef struct tpc_mm_opnd {
  /* The r x c matrix at strides (sr, sc) in its bound buffer, and its batch
   * strides over the plan's grid (0 where broadcast). */
  int64_t r, c, sr, sc;
  int64_t bstride[TPC_MM_MAXR];
  int mode; /* TPC_MM_ROW, TPC_MM_COL or TPC_MM_PACK */
  /* As the library reads it: the packed copy in the workspace for PACK. */
  int trans;              /* stored column-major: a transposed operand */
  int64_t ld;             /* leading dimension */
  int shared;             /* packed once: the same matrix in every batch */
  int64_t ws_off;         /* packed: its region of the workspace, elements */
  int64_t g[TPC_MM_MAXR]; /* batch strides over the collapsed grid */
  int64_t shift;          /* offset of collapsed batch 0 from the base */
  int64_t mhi;            /* last element of one matrix from its first */
  int64_t lo, hi;         /* elements all batches reach, from the base */
} tpc_mm_opnd;

typedef struct tpc_mm_plan {
  int64_t m, n, k; /* m counts the folded batch rows */
  uint32_t nb;     /* batch axes of the grid */
  int64_t bshape[TPC_MM_MAXR];
  int64_t batches;
  tpc_mm_opnd o[3]; /* A, B, C */
  uint32_t ng;      /* axes of the collapsed grid */
  int64_t gshape[TPC_MM_MAXR];
  int call; /* TPC_MM_SINGLE, TPC_MM_STRIDED or TPC_MM_LIST */
  int swap; /* C is column-major: the library computes C^T = B^T A^T */
  int64_t ws_elems;
  char what[240]; /* "[3, 5, 7] x [7, 4]^T" for messages */
} tpc_mm_plan;

/* What the library and the device allow. */
typedef struct tpc_mm_limits {
  const char *library; /* "cuBLAS", "CLBlast": named in messages */
  int64_t index_max;   /* the highest element index its kernels address */
  size_t align;        /* bytes a sub-buffer's start is aligned to */
} tpc_mm_limits;

/* Checks MATMUL's operands `a` (counts, transpose flags iattrs[0..1],
 * shapes, broadcasting, an output that writes no element twice) and plans
 * it into *p for elements of `elem` bytes. Nothing is planned past the
 * checks when the output is empty or k = 0 (p->k tells). Returns 0, or
 * TYTO_PLUGIN_ERR_INVALID_ARGUMENT for a bad descriptor and
 * TYTO_PLUGIN_ERR_UNSUPPORTED for one beyond lim, with the reason in why
 * (beginning "matmul: "; 1 KiB holds every message). */
int tpc_mm_plan_make(const tpc_operands *a, size_t elem,
                     const tpc_mm_limits *lim, tpc_mm_plan *p, char *why,
                     size_t why_size);

/* As tpc_mm_plan_make, but every operand is packed: A and B into the
 * workspace, C computed there and copied out. For operands the library
 * cannot read in place (16-bit storage it cannot multiply: the packing
 * reads them into f32), elem then being the packed elements' size. */
int tpc_mm_plan_make_packed(const tpc_operands *a, size_t elem,
                            const tpc_mm_limits *lim, tpc_mm_plan *p, char *why,
                            size_t why_size);

/* Row-major contiguous strides of `shape` (rank axes) into str. */
void tpc_mm_compact(const int64_t *shape, uint32_t rank, int64_t *str);

/* The packed region of operand o: its matrices over the grid (one matrix
 * when shared) into shape, and the strides of the bound (source) layout
 * over it into str, slowest first. Returns the rank, at most
 * TPC_MM_MAXR + 2. */
uint32_t tpc_mm_pack_dims(const tpc_mm_plan *p, const tpc_mm_opnd *o,
                          int64_t *shape, int64_t *str);

#endif /* TYTO_PLUGINS_MATMUL_PLAN_H */
