/*
 * The catalogue's builder, shared by catalogue.c (the op table and the
 * elementwise, reduction, matmul, conv and pool families), catalogue_nn.c
 * (layout ops and the conv/pool derivatives), catalogue_linalg.c,
 * catalogue_fused.c and catalogue_cast.c.
 */
#ifndef TYTO_CONFORM_CATALOGUE_INT_H
#define TYTO_CONFORM_CATALOGUE_INT_H

#include "catalogue.h"

/* Tolerance classes (cf_class): exact-ish arithmetic, transcendental
 * functions, accumulations (sums, products of matrices, factorisations). */
enum cf_tol {
  T_BASE = CF_CLASS_EXACT,
  T_TRANS = CF_CLASS_TRANS,
  T_ACCUM = CF_CLASS_ACCUM
};

typedef struct cf_op_entry {
  uint32_t op;
  const char *name;
  int family; /* how the op is exercised (catalogue.c's enum family) */
  enum cf_tol tol;
  cf_values values;
  double lo, hi;   /* domain of every input (binary: of the first) */
  double lo2, hi2; /* binary: domain of the second input (0, 0: same) */
} cf_op_entry;

/* A builder: the growing case array and the op being built. */
typedef struct cf_builder {
  cf_case *cases;
  size_t n, cap;
  uint32_t dtype;
  const cf_op_entry *e;
  int oom;
  const char *only; /* the op to build (its name), NULL for every op */
} cf_builder;

/* Appends a zeroed case of the current op named `name` with the op's
 * tolerance; NULL when out of memory (b->oom is then set). */
cf_case *cf_add(cf_builder *b, const char *name);

/* Sets input i of c (the op's value domain) or output i: strides NULL is
 * row-major. */
void cf_in_set(cf_builder *b, cf_case *c, uint32_t i, uint32_t rank,
               const int64_t *shape, const int64_t *strides, int64_t offset);
void cf_out_set(cf_builder *b, cf_case *c, uint32_t i, uint32_t rank,
                const int64_t *shape, const int64_t *strides, int64_t offset);

/* Sets the value domain of input i of c. */
void cf_in_values(cf_case *c, uint32_t i, cf_values v, double lo, double hi);

/* Strides of an [N, C, H, W] tensor stored row-major with its H and W
 * axes reversed (both strides negative); returns the offset of element
 * [0, 0, 0, 0]. H and W must not be 0. */
int64_t cf_flip_hw(const int64_t s[4], int64_t st[4]);

/* Appends a reduction case of the current op: input `shape` (strides NULL:
 * row-major), the n_axes `axes` reduced with their extents kept as 1. */
void cf_reduce_case(cf_builder *b, const char *name, uint32_t rank,
                    const int64_t *shape, const int64_t *strides,
                    const int64_t *axes, uint32_t n_axes);

/* The reduction layouts of an op (cf_reduce_case each): one axis of
 * [6,7,8] three ways and of [64,1031] ([64,256] with index16, for an
 * index that must be a 16-bit dtype's whole number); without arg also
 * two axes, all axes and an empty extent. */
void cf_reduce_layouts(cf_builder *b, int arg, int index16);

/* Row-major strides of `shape` with every element `step` apart. */
void cf_stepped(uint32_t rank, const int64_t *shape, int64_t step, int64_t *st);

/* Output extent of a convolution or pooling axis (floor mode). */
int64_t cf_out_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d);

/* Families of catalogue_nn.c, catalogue_linalg.c, catalogue_fused.c and
 * catalogue_cast.c, dispatching on b->e->op. */
void cf_layout_cases(cf_builder *b);
void cf_conv_bwd_cases(cf_builder *b);
void cf_pool_bwd_cases(cf_builder *b);
void cf_linalg_cases(cf_builder *b);
void cf_fused_cases(cf_builder *b);
void cf_cast_cases(cf_builder *b);

/* catalogue_intdt.c: every case of the run of integer dtype b->dtype (I32
 * or I64), restricted to b->only when not NULL. */
void cf_intdt_cases(cf_builder *b);

/* The layouts every elementwise op (and FUSED, COPY, CAST) is run over:
 * n_in inputs, n_out contiguous outputs of the case's shape; finish(b, c)
 * completes each case. */
void cf_eltwise_cases(cf_builder *b, uint32_t n_in, uint32_t n_out,
                      void (*finish)(cf_builder *, cf_case *));

/* specials.c: the special-value cases of b->e's op (FUSED's come from
 * catalogue.c, which has the programs). */
void cf_special_cases(cf_builder *b);

/* Makes c a special-value case over every combination of the special
 * values of n_in inputs (cf_special_list of b->dtype), each of a
 * contiguous [n]^n_in shape, with n_out outputs of that shape. */
void cf_special_grid(cf_builder *b, cf_case *c, uint32_t n_in, uint32_t n_out);

#endif
