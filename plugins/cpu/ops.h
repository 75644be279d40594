/*
 * How op families plug into the CPU plugin's kernels.
 *
 * kernels.c owns the generic part of supports_op/prepare/launch: it reads
 * and measures every layout (overflow-checked reach), refcounts kernels,
 * checks each binding against its buffer, and queues launches. An op family
 * (copy.c, eltwise.c, reduce.c, matmul.c, ...) only checks the descriptor of
 * its ops and builds a cpu_op that knows how to run. The check is one
 * function that both supports_op and the family's prepare call, so the two
 * accept exactly the same descriptors with the same messages.
 */
#ifndef TYTO_PLUGIN_CPU_OPS_H
#define TYTO_PLUGIN_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "convert.h"
#include "pool.h"

/* Inputs or outputs of one op: FUSED takes the most. */
#define CPU_MAX_IO TYTO_PLUGIN_FUSED_MAX_IO

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

/* A family's check: NULL when its prepare builds an op for the descriptor,
 * else the error that prepare returns. UNSUPPORTED errors say why the
 * op/dtype/shape is not run here. The descriptor's layouts have been
 * measured; the check looks at counts, dtypes, shapes, attrs and the blob,
 * and nothing else: it allocates nothing and builds no library primitive,
 * since the host asks it about every node of every graph it places. */
typedef tyto_plugin_error *(*cpu_check_fn)(const tyto_plugin_host *h,
                                           const cpu_desc *desc);
/* A family's prepare: runs the family's check, then *out = a new op (to
 * free with its destroy), or an error: the check's, or OUT_OF_MEMORY. */
typedef tyto_plugin_error *(*cpu_prepare_fn)(const tyto_plugin_host *h,
                                             const cpu_desc *desc,
                                             cpu_op **out);

typedef struct cpu_family {
  cpu_check_fn check;
  cpu_prepare_fn prepare;
  int half; /* the check sees F16 and BF16 operands (kernels.c) */
} cpu_family;

/* The families, one file each. */
/* copy.c: COPY, FILL. */
tyto_plugin_error *cpu_copy_check(const tyto_plugin_host *h,
                                  const cpu_desc *desc);
tyto_plugin_error *cpu_copy_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out);
/* eltwise.c: unary, binary, ternary elementwise ops (NEG .. FMA) and
 * CAST. */
tyto_plugin_error *cpu_eltwise_check(const tyto_plugin_host *h,
                                     const cpu_desc *desc);
tyto_plugin_error *cpu_eltwise_prepare(const tyto_plugin_host *h,
                                       const cpu_desc *desc, cpu_op **out);
/* fused.c: FUSED, an elementwise expression program run block by block. */
tyto_plugin_error *cpu_fused_check(const tyto_plugin_host *h,
                                   const cpu_desc *desc);
tyto_plugin_error *cpu_fused_prepare(const tyto_plugin_host *h,
                                     const cpu_desc *desc, cpu_op **out);
/* reduce.c: reductions (SUM .. NORM_L2), SOFTMAX, LOG_SOFTMAX. */
tyto_plugin_error *cpu_reduce_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_reduce_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* matmul.c: MATMUL through OpenBLAS. */
tyto_plugin_error *cpu_matmul_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_matmul_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* conv.c: CONV2D, MAX_POOL2D, AVG_POOL2D and their derivatives
 * CONV2D_BACKWARD_DATA .. AVG_POOL2D_BACKWARD (oneDNN, im2col fallback). */
tyto_plugin_error *cpu_conv_check(const tyto_plugin_host *h,
                                  const cpu_desc *desc);
tyto_plugin_error *cpu_conv_prepare(const tyto_plugin_host *h,
                                    const cpu_desc *desc, cpu_op **out);
/* widen.c: MAX_POOL2D .. AVG_POOL2D_BACKWARD in F16 and BF16: conv.c's
 * f32 kernels between conversions at the edges. */
tyto_plugin_error *cpu_widen_check(const tyto_plugin_host *h,
                                   const cpu_desc *desc);
tyto_plugin_error *cpu_widen_prepare(const tyto_plugin_host *h,
                                     const cpu_desc *desc, cpu_op **out);
/* matmul16.c: MATMUL in bf16 (oneDNN) and f16 (through f32). */
tyto_plugin_error *cpu_matmul16_check(const tyto_plugin_host *h,
                                      const cpu_desc *desc);
tyto_plugin_error *cpu_matmul16_prepare(const tyto_plugin_host *h,
                                        const cpu_desc *desc, cpu_op **out);
/* conv16.c: CONV2D, CONV2D_BACKWARD_DATA, CONV2D_BACKWARD_FILTER in bf16
 * (oneDNN) and f16 (through f32). */
tyto_plugin_error *cpu_conv16_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_conv16_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* layout.c: PAD, GATHER, SCATTER_ADD, ONE_HOT. */
tyto_plugin_error *cpu_layout_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_layout_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* random.c: Philox-4x32-10 uniform, normal, bernoulli. */
tyto_plugin_error *cpu_random_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_random_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);
/* linalg.c: INV, DET, LOGDET, SOLVE, CHOLESKY, QR through LAPACK,
 * TRIANGULAR_SOLVE through cblas. */
tyto_plugin_error *cpu_linalg_check(const tyto_plugin_host *h,
                                    const cpu_desc *desc);
tyto_plugin_error *cpu_linalg_prepare(const tyto_plugin_host *h,
                                      const cpu_desc *desc, cpu_op **out);

/* ------------------------------------------------------------------------ */
/* Elementwise machinery shared by eltwise.c and fused.c (in eltwise.c)      */
/* ------------------------------------------------------------------------ */

/* One contiguous elementwise loop (eltwise_ops.h's elt_kern): n elements of
 * out from a, b, c (unused ones NULL); p: the op's real attributes or NULL.
 * out may alias an operand exactly. */
typedef void (*cpu_elt_kern)(size_t n, void *out, const void *a, const void *b,
                             const void *c, const double *p);

/* Operands (inputs then outputs) of an elementwise iteration space. */
#define CPU_ELT_MAX_OPERANDS (2 * CPU_MAX_IO)
/* Elements per block within a row: what the inner loops are called with. */
#define CPU_ELT_BLOCK 256
/* Scratch a task gets on its stack; more comes from the heap. */
#define CPU_ELT_STACK_SCRATCH (32 << 10)

/* Inputs of an elementwise op (1 .. 3), or 0 for a code outside NEG .. FMA. */
int cpu_eltwise_arity(uint32_t op);
/* Whether the op's loop calls libm rather than vectorising. */
int cpu_eltwise_slow(uint32_t op);
/* The widest loop this CPU runs for an elementwise op and dtype (f32/f64;
 * F16 and BF16 run the f32 loop between conversions); the same function
 * the single-op kernels call. */
cpu_elt_kern cpu_eltwise_kern(uint32_t op, uint32_t dtype);
/* eltwise_int.c: the loop for an elementwise op on I32 or I64 (NEG, ABS,
 * SIGN, ADD .. MIN, EQ .. GE, WHERE; wrapping), or NULL. */
cpu_elt_kern cpu_eltwise_int_kern(uint32_t op, uint32_t dtype);
/* Checks that every input and output has output 0's shape (and, when
 * one_dtype, its dtype) and that no output has stride 0 on an axis of
 * extent > 1. `name` prefixes the message. */
tyto_plugin_error *cpu_eltwise_check_operands(const tyto_plugin_host *h,
                                              const cpu_desc *desc,
                                              const char *name, int one_dtype);

/* The iteration space of an elementwise op over its operands (inputs then
 * outputs, as launch passes them): size-1 axes dropped, axes merged where
 * every operand steps through them as one, rows cut into pool tasks. */
typedef struct cpu_elt_space {
  uint32_t n;                       /* operands */
  size_t esize;                     /* output 0's element size */
  size_t esz[CPU_ELT_MAX_OPERANDS]; /* each operand's */
  uint32_t rank;                    /* >= 1 when numel > 0; innermost last */
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t strides[CPU_ELT_MAX_OPERANDS][TYTO_PLUGIN_MAX_RANK];
  int64_t offset[CPU_ELT_MAX_OPERANDS]; /* the layouts' offsets */
  int64_t numel, inner, rows;
  /* Tasks: rows_per_task rows each, or (when a row is longer than a chunk)
   * segs_per_row pieces of seg elements of one row. */
  int64_t rows_per_task, segs_per_row, seg, tasks;
  int64_t par_min;      /* fewer elements run on the calling thread */
  size_t scratch_bytes; /* what each task's segments get; set by the user */
} cpu_elt_space;

/* Builds the space of desc's operands (all of output 0's shape, checked
 * by cpu_eltwise_check_operands). slow: libm-bound work, cut into smaller
 * tasks. scratch_bytes starts at 0. */
void cpu_elt_space_init(cpu_elt_space *sp, const cpu_desc *desc, int slow);

/* Computes n elements of one row of the space: operand j's first element
 * is base[j] + off[j] elements (of sp->esz[j] bytes), its step
 * sp->strides[j][sp->rank - 1].
 * scratch: sp->scratch_bytes bytes, 64-byte aligned, private to the call's
 * task. */
typedef void (*cpu_elt_segment_fn)(const void *ctx, unsigned char *const *base,
                                   const int64_t *off, int64_t n,
                                   unsigned char *scratch);

/* Runs fn over the whole space, on the pool when it is worth it. args: the
 * operands' bindings (offsets still to apply). Returns 0, or -1 when a
 * task's scratch could not be allocated (the output is then partial). */
int cpu_elt_space_run(const cpu_elt_space *sp, unsigned char *const *args,
                      cpu_pool *pool, cpu_elt_segment_fn fn, const void *ctx);

/* A strided CAST between two layouts of one shape (the op, and the edges
 * of widen.c): built once, run many times. */
typedef struct cpu_cast {
  cpu_elt_space sp; /* operand 0 the source, 1 the destination */
  cpu_cvt_fn cvt;
} cpu_cast;
/* Plans the cast from layout `in` to layout `out` (dtypes F32, F64, F16,
 * BF16; shapes equal, checked by the caller). */
void cpu_cast_plan(cpu_cast *c, const tyto_plugin_layout *in,
                   const tyto_plugin_layout *out);
/* Runs it: src and dst are the bindings (layout offsets still to apply). */
void cpu_cast_run(const cpu_cast *c, unsigned char *src, unsigned char *dst,
                  cpu_pool *pool);

/* Helpers shared by families. */
size_t cpu_dtype_size(uint32_t dtype);
const char *cpu_dtype_name(uint32_t dtype);
const char *cpu_op_name(uint32_t op);
int64_t cpu_numel(const tyto_plugin_layout *l);
/* Writes a layout's shape as "[2,3,4]" into buf; returns buf. */
const char *cpu_shape_str(const tyto_plugin_layout *l, char *buf, size_t size);
/* Row-major contiguity of a layout (strides exactly the packed ones). */
int cpu_contiguous(const tyto_plugin_layout *l);

#endif
