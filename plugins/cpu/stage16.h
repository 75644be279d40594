/*
 * Staging 16-bit tensors (ABI 1.5) for the kernels that compute on dense
 * or wider copies of their operands: MATMUL and the convolutions in bf16
 * and f16 (matmul16.c, conv16.c).
 *
 * A stage pairs a bound tensor with a dense copy of it in the kernel's
 * workspace: the same shape, row-major strides over the axes the tensor
 * steps through, stride 0 kept where it broadcasts (so a broadcast operand
 * is copied once), offset 0. Moving between the two reads 16-bit values
 * exactly into f32, rounds f32 once to the 16-bit dtype (to nearest, ties
 * to even, with ../common/half.h's integer conversions, which the threads'
 * FTZ and DAZ do not touch), or copies 16-bit values bit for bit.
 */
#ifndef TYTO_PLUGIN_CPU_STAGE16_H
#define TYTO_PLUGIN_CPU_STAGE16_H

#include <stdint.h>

#include <tyto/plugin.h>

#include "ops.h"
#include "pool.h"

typedef struct cpu_stage {
  tyto_plugin_layout src;   /* the bound tensor's layout (16-bit) */
  tyto_plugin_layout dense; /* the copy's: f32 or the 16-bit dtype */
  int64_t elems;            /* elements the copy holds */
} cpu_stage;

/* A stage of layout l (a 16-bit dtype) whose copy has `dtype` (f32, or
 * l's own dtype for a bit copy). */
void cpu_stage_init(cpu_stage *s, const tyto_plugin_layout *l, uint32_t dtype);

/* Bytes of the copy. */
uint64_t cpu_stage_bytes(const cpu_stage *s);

/* The copy as a family sees an operand (kernels.c's measure of it). */
void cpu_stage_reach(const cpu_stage *s, cpu_reach *r);

/* Bound tensor -> copy. `bound`: the binding (the layout's offset still to
 * apply). Runs on the pool when the tensor is large. */
void cpu_stage_in(const cpu_stage *s, const unsigned char *bound, void *copy,
                  cpu_pool *pool);

/* Copy -> bound tensor (each element the tensor names, once). */
void cpu_stage_out(const cpu_stage *s, const void *copy, unsigned char *bound,
                   cpu_pool *pool);

/* Writes zeros (+0) into every element of the bound 16-bit tensor. */
void cpu_stage_zero(const tyto_plugin_layout *l, unsigned char *bound);

/* Workspace regions: *used grows by `bytes`, rounded up to 64 bytes; the
 * region's offset is returned. */
static inline uint64_t cpu_ws_take(uint64_t *used, uint64_t bytes) {
  uint64_t at = *used;
  *used += (bytes + 63) & ~(uint64_t)63;
  return at;
}

/* Whether dtype is one of the 16-bit storage formats. */
static inline int cpu_dtype_is16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

#endif
