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

/* The layout table of the kernels that index by coordinates: v[0 .. 8) the
 * shape (1 past the rank), then 8 strides per operand (0 past the rank),
 * nops operands; 8 + 8 * nops entries in all. */
void tpc_elt_plan_table(const tpc_elt_plan *p, uint32_t nops, int64_t *v);

/* Writes into b a literal of the kernel's element type (dtype) that
 * holds v exactly (rounded to f32 first for TYTO_PLUGIN_DTYPE_F32). */
typedef void (*tpc_literal_writer)(tpc_text *b, uint32_t dtype, double v);

/* Writes the statements of one element of program fi (n instructions,
 * live as tpc_fused_live gives it), in the dialect OpenCL C and CUDA C++
 * share: every live input loaded ("T v<i> = in<j>[a<j>];"), then the
 * arithmetic ("T v<i> = te_<op>(v<x>, ...);", the parameter of LEAKY_RELU
 * and ELU as the kernel argument pa when pa_arg, else as a literal), then
 * every output stored ("out<j>[b<j>] = v<i>;"), each indented by four
 * spaces. The element offsets a<j>, b<j> and the helpers te_<op> are the
 * caller's. */
void tpc_elt_put_body(tpc_text *b, const tpc_instr *fi, uint32_t n,
                      const unsigned char *live, int pa_arg, uint32_t dtype,
                      tpc_literal_writer literal);

#endif /* TYTO_PLUGINS_ELTWISE_PLAN_H */
