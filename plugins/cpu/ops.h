/*
 * How op families plug into the CPU plugin's kernels.
 *
 * kernels.c owns the generic part of prepare/launch: it reads and measures
 * every layout (overflow-checked reach), refcounts kernels, checks each
 * binding against its buffer, and queues launches. An op family (copy.c,
 * eltwise.c, reduce.c, matmul.c, ...) only checks the descriptor of its ops
 * and builds a cpu_op that knows how to run.
 */
#ifndef TYTO_PLUGIN_CPU_OPS_H
#define TYTO_PLUGIN_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "pool.h"

#define CPU_MAX_IO 4 /* inputs or outputs of one op */

/* A layout and the bytes it reaches relative to its binding. */
typedef struct cpu_reach {
  tyto_plugin_layout l;
  int64_t lo_bytes, end_bytes; /* first byte (may be negative), one past last */
  int empty;
} cpu_reach;

/* What a family sees of a descriptor: the layouts already read into the
 * plugin's own struct size and measured. */
typedef struct cpu_desc {
  const tyto_plugin_op_desc *d; /* attributes: d->iattrs, d->fattrs, blob */
  uint32_t n_in, n_out;
  cpu_reach in[CPU_MAX_IO], out[CPU_MAX_IO];
} cpu_desc;

typedef struct cpu_op cpu_op;
struct cpu_op {
  /* Runs the op. args: the inputs' then the outputs' base addresses (the
   * binding plus nothing else: layout offsets are still to be applied),
   * then the workspace (NULL when workspace_bytes is 0). Called on a
   * stream's worker thread; may use the pool. Returns NULL or an error
   * made with host->error_new. */
  tyto_plugin_error *(*run)(const cpu_op *op, const cpu_desc *desc,
                            unsigned char *const *args, cpu_pool *pool);
  /* Frees the op (a family embeds cpu_op first in its own struct). */
  void (*destroy)(cpu_op *op);
  uint64_t workspace_bytes;
};

/* A family's prepare: *out = a new op, or an error. UNSUPPORTED errors
 * say why the op/dtype/shape is not run here. The descriptor's layouts
 * have been measured; the family checks counts, dtypes, shapes, attrs. */
typedef tyto_plugin_error *(*cpu_family_fn)(const tyto_plugin_host *h,
                                            const cpu_desc *desc, cpu_op **out);

/* The families, one file each. */
tyto_plugin_error *cpu_copy_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out);
/* eltwise.c: unary, binary, ternary elementwise ops (NEG .. FMA). */
tyto_plugin_error *cpu_eltwise_prepare(const tyto_plugin_host *h,
                                       const cpu_desc *desc, cpu_op **out);
/* reduce.c: reductions (SUM .. NORM_L2), SOFTMAX, LOG_SOFTMAX. */
tyto_plugin_error *cpu_reduce_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* matmul.c: MATMUL through OpenBLAS. */
tyto_plugin_error *cpu_matmul_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* conv.c: CONV2D, MAX_POOL2D, AVG_POOL2D and their derivatives
 * CONV2D_BACKWARD_DATA .. AVG_POOL2D_BACKWARD (oneDNN, im2col fallback). */
tyto_plugin_error *cpu_conv_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out);
/* layout.c: PAD, GATHER, SCATTER_ADD, ONE_HOT. */
tyto_plugin_error *cpu_layout_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* random.c: Philox-4x32-10 uniform, normal, bernoulli. */
tyto_plugin_error *cpu_random_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* linalg.c: INV, DET, LOGDET, SOLVE, CHOLESKY, QR through LAPACK,
 * TRIANGULAR_SOLVE through cblas. */
tyto_plugin_error *cpu_linalg_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);

/* Helpers shared by families. */
size_t cpu_dtype_size(uint32_t dtype);
const char *cpu_dtype_name(uint32_t dtype);
const char *cpu_op_name(uint32_t op);
int64_t cpu_numel(const tyto_plugin_layout *l);
/* Row-major contiguity of a layout (strides exactly the packed ones). */
int cpu_contiguous(const tyto_plugin_layout *l);

#endif
