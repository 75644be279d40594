/*
 * Elementwise work (the ops of the table in common.h and FUSED programs)
 * planned over its operands as the GPU plugins plan it: the shapes checked
 * against the output's, and the iteration space collapsed into as few
 * dimensions as every operand allows; and the arithmetic of a kernel's
 * element loop written out. Depends on the plugin ABI header and the C
 * library only.
 */
#ifndef TYTO_PLUGINS_ELTWISE_PLAN_H
#define TYTO_PLUGINS_ELTWISE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "common.h"
#include "geometry.h"
#include "text.h"

/* Operands of one elementwise op at most: inputs, then outputs. */
#define TPC_ELT_MAX_OPERANDS (2 * TYTO_PLUGIN_FUSED_MAX_IO)

/* The iteration space collapsed over every operand (inputs, then
 * outputs), fastest dimension first. */
typedef struct tpc_elt_plan {
  uint32_t rank; /* 0: one element */
  int dense;     /* rank <= 1 and every operand has unit stride */
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t strides[TPC_ELT_MAX_OPERANDS][TYTO_PLUGIN_MAX_RANK];
} tpc_elt_plan;

/* Checks that every operand of `a` has output 0's shape. Returns 0, or
 * TYTO_PLUGIN_ERR_INVALID_ARGUMENT with the reason in why ("<op>: input 1
 * has shape [2, 3] but the output has shape [3] (...)"; 512 bytes hold
 * it). */
int tpc_elt_check_shapes(const tpc_operands *a, char *why, size_t why_size);

/* Plans a checked, non-empty op: drops size-1 dimensions and merges a
 * dimension into the faster one next to it when every operand's stride
 * continues that one's. The dimensions go from output 0's largest stride
 * to its smallest, so that neighbouring threads write neighbouring
 * elements whatever the order of the output's dimensions. */
void tpc_elt_plan_make(const tpc_operands *a, tpc_elt_plan *p);

/* Whether one linear index can address every operand of the plan (nops
 * operands, the first n_in inputs): at most one dimension, over which
 * every output steps by 1 and every input by 1 or 0. *bcast gets bit j
 * for each input j of stride 0 (a scalar broadcast, read at its origin);
 * 0 when the answer is no. plan.dense is the case of no such input. */
int tpc_elt_plan_linear(const tpc_elt_plan *p, uint32_t n_in, uint32_t nops,
                        uint32_t *bcast);

/* The layout table of the kernels that index by coordinates: v[0 .. 8) the
 * shape (1 past the rank), then 8 strides per operand (0 past the rank),
 * nops operands; 8 + 8 * nops entries in all. */
void tpc_elt_plan_table(const tpc_elt_plan *p, uint32_t nops, int64_t *v);

/* ---- the element loop's source (eltwise_src.c) -------------------------- */

/* Writes into b a literal of the kernel's element type (dtype) that
 * holds v exactly (rounded to f32 first for TYTO_PLUGIN_DTYPE_F32). */
typedef void (*tpc_literal_writer)(tpc_text *b, uint32_t dtype, double v);

/* Writes the statements of one element of program fi (n instructions,
 * live as tpc_fused_live gives it), in the dialect OpenCL C and CUDA C++
 * share, for a program of one dtype: every live input loaded ("T v<i> =
 * in<j>[a<j>];"), then the arithmetic ("T v<i> = te_<op>(v<x>, ...);", the
 * parameter of LEAKY_RELU and ELU as the kernel argument pa when pa_arg,
 * else as a literal), then every output stored ("out<j>[b<j>] = v<i>;"),
 * each indented by four spaces. The element offsets a<j>, b<j> and the
 * helpers te_<op> are the caller's. */
void tpc_elt_put_body(tpc_text *b, const tpc_instr *fi, uint32_t n,
                      const unsigned char *live, int pa_arg, uint32_t dtype,
                      tpc_literal_writer literal);

/* Programs whose values differ in dtype, and the 16-bit dtypes (ABI 1.5).
 *
 * Every value is held in its dtype's compute type, tpc_compute_type():
 * f16 and bf16 values in float (ops.md, "Dtypes": storage formats,
 * computed in f32 and rounded once), f32 in float, f64 in double, and
 * always holds a value of its dtype exactly, except the result of an op
 * that only OUTPUTs read (the store rounds it). A kernel language says how
 * it reads, writes and rounds the dtypes through a tpc_elt_dialect; the
 * arithmetic calls one helper per op and compute type,
 * te_<op>_<type> (te_exp_float, te_add_double), which
 * tpc_elt_put_helpers writes. */

/* F32 for F16 and BF16, else dtype itself. */
uint32_t tpc_compute_dtype(uint32_t dtype);
/* "double" for F64, else "float": the type names of OpenCL C and CUDA. */
const char *tpc_compute_type(uint32_t dtype);

/* How a kernel language handles each float dtype (F32, F64, F16, BF16).
 * Every callback appends text to b; ptr and index are the operand's
 * pointer and element index as the kernel names them ("in0", "a0"), v an
 * expression of tpc_compute_type(dtype) ("v3"). */
typedef struct tpc_elt_dialect {
  /* An expression of the compute type: element `index` of `ptr`, which
   * holds dtype's storage, read exactly ("in0[a0]",
   * "tyto_bf16_f32(in0[a0])"). */
  void (*load)(tpc_text *b, uint32_t dtype, const char *ptr, const char *index);
  /* A statement, ';' included: v rounded to dtype (to nearest, ties to
   * even, as CAST) stored at element `index` of `ptr`. */
  void (*store)(tpc_text *b, uint32_t dtype, const char *ptr, const char *index,
                const char *v);
  /* An expression of float: v, a value of tpc_compute_type(from), rounded
   * to `to`, which is F16 or BF16, as CAST rounds (one rounding: from f64
   * through round-to-odd, half.h's tpc_f64_to_f32_odd). */
  void (*round)(tpc_text *b, uint32_t from, uint32_t to, const char *v);
  /* A literal of tpc_compute_type(dtype) holding v rounded to dtype. */
  tpc_literal_writer literal;
} tpc_elt_dialect;

/* As tpc_elt_put_body for a program whose every value has its dtype
 * (fi[i].dtype as tpc_fused_types sets it, each F32, F64, F16 or BF16):
 *   "    <type> v<i> = <dl->load>;"            INPUT j, at a<j>
 *   "    <type> v<i> = <literal>;"             CONST
 *   "    <type> v<i> = te_<op>_<type>(v<x>, ...);"  an op, its result
 *       rounded to a 16-bit dtype (dl->round) when an instruction reads it
 *   "    <type> v<i> = <conversion>;"         CAST: dl->round into F16
 *       and BF16, a C cast into F32 and F64 ((float)v rounds to nearest)
 *   "    <dl->store>"                          OUTPUT j, at b<j>
 * with <type> tpc_compute_type(fi[i].dtype) and the parameter of LEAKY_RELU
 * and ELU as pa (pa_arg) or a literal of the compute type. Loads come
 * first and stores last, as in tpc_elt_put_body. Sets b->failed when out
 * of host memory. */
void tpc_elt_put_body_typed(tpc_text *b, const tpc_instr *fi, uint32_t n,
                            const unsigned char *live, int pa_arg,
                            const tpc_elt_dialect *dl);

/* The helper that tpc_elt_put_body_typed calls for elementwise op `op` in
 * the compute type of dtype: "<prefix><type> te_<op>_<type>(<type> x, ...)
 * { return <the op's expression, T read as type>; }" and a newline; prefix
 * is "" or the language's qualifiers ("__device__ __forceinline__ "). */
void tpc_elt_put_helper(tpc_text *b, uint32_t op, uint32_t dtype,
                        const char *prefix);

/* The helpers of every live op instruction of fi (dtypes set), each
 * (op, compute type) pair once. Sets b->failed when out of host memory. */
void tpc_elt_put_helpers(tpc_text *b, const tpc_instr *fi, uint32_t n,
                         const unsigned char *live, const char *prefix);

#endif /* TYTO_PLUGINS_ELTWISE_PLAN_H */
