/*
 * The conformance op catalogue: for each op of tyto_plugin_op it covers,
 * descriptors over several layouts (contiguous, broadcast, transposed,
 * stepped, flipped, offset, size 0, rank 0) with the input domain to draw
 * random values from and the tolerance to compare with.
 */
#ifndef TYTO_CONFORM_CATALOGUE_H
#define TYTO_CONFORM_CATALOGUE_H

#include <stddef.h>

#include <tyto/plugin.h>

#include "fmt.h"

#define CF_MAX_IN 4
#define CF_MAX_OUT 2
#define CF_MAX_INSTRS 24

/* How an input's values are drawn. */
typedef enum cf_values {
  CF_UNIFORM = 0, /* uniform in [lo, hi] */
  CF_WHOLE = 1,   /* whole numbers in [lo, hi] */
  /* Matrices over the last two axes (linear algebra): off-diagonal
   * elements uniform in [lo, hi], each diagonal element of sign + or -
   * (drawn) and magnitude 1 + u + the sum of its row's other magnitudes
   * (u uniform in [0, 1)): strictly diagonally dominant, so nonsingular
   * and well-conditioned. Rectangular matrices get it on their leading
   * square block. */
  CF_DIAG_DOMINANT = 2,
  /* The same, symmetric (upper triangle mirrored) with a positive
   * diagonal: symmetric positive definite. */
  CF_SPD = 3,
  /* Magnitude uniform in [lo, hi], sign drawn: never zero when lo > 0. */
  CF_SIGNED = 4,
  /* Bit patterns of the tensor's dtype, written as they are: element j of
   * a 16-bit tensor holds pattern j mod 2^16 (a storage of 65536 holds
   * each once), a wider one random patterns (NaNs, infinities, subnormals
   * and every exponent). */
  CF_BITS_ALL = 5,
  /* Random bit patterns whose unbiased exponent is uniform in [lo, hi]
   * (clamped to the dtype's; below emin: subnormals), sign and fraction
   * bits drawn: a sweep of the values near another format's range. */
  CF_BITS_EXP = 6
} cf_values;

/* How a special-value case is checked (see specials.h). */
typedef enum cf_expect_kind {
  CF_EXPECT_VALUES = 0,       /* outputs as the host model of ops.md says */
  CF_EXPECT_REFUSED = 1,      /* supports_op or prepare returns an error */
  CF_EXPECT_RUN_ERROR = 2,    /* launch or stream_synchronize returns one */
  CF_EXPECT_NAN_OR_ERROR = 3, /* linear algebra on a batch whose matrix 1
                                 holds a NaN: an error, or matrix 0's
                                 results as the model says and matrix 1's
                                 holding a NaN */
  /* Not defined for the dtype (linear algebra in f16 and bf16):
   * supports_op and prepare refuse it with TYTO_PLUGIN_ERR_UNSUPPORTED. */
  CF_EXPECT_UNSUPPORTED = 4,
  /* FUSED: its outputs bit for bit those of its instructions run one by
   * one as ops on the same device (stepwise.h). */
  CF_EXPECT_STEPWISE = 5
} cf_expect_kind;

/* What is done to both devices' outputs before they are compared. */
typedef enum cf_post {
  CF_POST_NONE = 0,
  /* QR: Q and R are unique only up to the sign of each column of Q and the
   * matching row of R; both are scaled by sign(R[i][i]) so that R's
   * diagonal is >= 0, which makes a reduced QR of a full-rank matrix
   * unique. */
  CF_POST_QR_SIGNS = 1
} cf_post;

/* One tensor of a case: its layout (offset and strides index into a
 * storage of `storage` elements of the layout's dtype) and, for inputs,
 * its value domain. */
typedef struct cf_tensor {
  tyto_plugin_layout l;
  int64_t storage;
  cf_values values;
  double lo, hi;
  /* Special values, stored over the drawn ones. A grid: storage element
   * j takes list[(j / n_list^(grid_dims - 1 - grid_pos)) % n_list], so
   * that the grid_dims inputs of a case meet in every combination. And
   * single elements: storage element at[k] takes v[k]. */
  const double *list;
  uint32_t n_list, grid_pos, grid_dims;
  const double *v;
  const int64_t *at;
  uint32_t n_at;
} cf_tensor;

/* One descriptor to run on both devices. */
typedef struct cf_case {
  uint32_t op;
  const char *op_name;
  char name[64];
  uint32_t dtype; /* the row's dtype: every tensor's, but CAST's output and
                     the values of a FUSED program that converts */
  uint32_t n_in, n_out;
  cf_tensor in[CF_MAX_IN], out[CF_MAX_OUT];
  uint32_t n_iattrs;
  int64_t iattrs[24];
  uint32_t n_fattrs;
  double fattrs[4];
  uint32_t n_instrs; /* FUSED: the program */
  tyto_plugin_fused_instr instrs[CF_MAX_INSTRS];
  tyto_plugin_fused_program program;
  tyto_plugin_layout lin[CF_MAX_IN], lout[CF_MAX_OUT]; /* for the desc */
  cf_post post;
  cf_class cls; /* the op's accuracy class, and its tolerance: */
  double rtol, atol;
  /* Special-value cases (specials.h): checked against the host model of
   * sdk/docs/ops.md instead of the reference plugin. */
  int special;
  cf_expect_kind expect;
  int exact;   /* values are moved, not computed: no flush to zero */
  int bitwise; /* compared bit for bit with the model (CAST) */
  /* model.c's own, on its copy of the case: round results of a 16-bit
   * dtype through f32 first (the other answer ops.md allows). */
  int model_via_f32;
} cf_case;

/* Builds the cases of every catalogued op for `dtype` (F32, F64, F16,
 * BF16, or I32 and I64: catalogue_intdt.c), restricted to the op named
 * `only` when not NULL. Cases that also
 * involve other dtypes (CAST to each of them, FUSED programs that convert)
 * are included; cf_case_dtypes() tells which. *out is malloc'ed (free it
 * with free()). Returns -1 when out of memory. */
int cf_catalogue_build(uint32_t dtype, const char *only, cf_case **out,
                       size_t *n);

/* Whether dtype is one of the 16-bit storage formats (f16, bf16). */
int cf_dtype_16(uint32_t dtype);

/* TYTO_PLUGIN_DTYPE_BIT() of every dtype c's tensors and values have. */
uint32_t cf_case_dtypes(const cf_case *c);

/* Fills desc from c (pointing into c, which must outlive desc). */
void cf_case_desc(cf_case *c, tyto_plugin_op_desc *desc);

/* The name of an op code ("add"), or NULL when not catalogued. */
const char *cf_op_name(uint32_t op);

/* Whether `name` is the name of a catalogued op. */
int cf_op_known(const char *name);

/* Sets a tensor's layout: strides NULL means row-major; storage is computed
 * from offset and strides. */
void cf_tensor_set(cf_tensor *t, uint32_t dtype, uint32_t rank,
                   const int64_t *shape, const int64_t *strides,
                   int64_t offset);

#endif
