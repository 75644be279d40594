/*
 * What conv.c and conv_direct.c share: the plan of a convolution kernel
 * and the direct path's entry points.
 */
#ifndef TYTO_OPENCL_CONV_H
#define TYTO_OPENCL_CONV_H

#include "../common/geometry.h"
#include "ops.h"

typedef struct conv {
  uint32_t op;
  uint32_t dtype;
  size_t elem; /* the workspace's elements: the compute dtype's */
  tpc_conv g;  /* the geometry (../common/geometry.h) */
  int w_dense; /* forward, data: w goes to CLBlast in place */
  int gemm;    /* whether GEMMs run (else the output is 0, or bias) */
  /* Workspace plan, in elements from the workspace's origin: the packed w
   * (or the weight gradient's accumulator) at 0, col at off_col, res at
   * off_res; nb images per chunk. */
  int64_t nb, off_col, off_res, ws_elems;
  /* Weight gradient: the partial results of up to max_slices slices at
   * off_part (max_slices 1: the GEMMs accumulate in place). */
  int64_t max_slices, off_part;
  /* The direct path: NB blocks of 16 NV output channels per group; for
   * the weight gradient S slices of L output pixels. */
  int direct;
  int64_t NV, NB, S, L;
  /* wcopy between tensors; wcopy_in (w into the workspace) and wcopy_out
   * (the weight gradient out of it) convert f16 and bf16. */
  cl_kernel im2col, out, pack, col2im, wcopy, wcopy_in, wcopy_out, sum;
  cl_kernel direct_k, wpack, dwpart, dwsum;
  ocl_gemm_kernels own; /* tyto's GEMM (gemm.c), where the device uses it */
} conv;

/* Plans the direct path of c (geometry filled in) for descriptor d, for
 * small reductions whose indices all fit an int: 1 when it runs, with
 * c->direct, its blocks, slices and c->ws_elems set; else 0. */
int conv_direct_plan(conv *c, const ocl_desc *d);
/* Builds the direct path's kernels into c. */
tyto_plugin_error *conv_direct_prepare(tyto_plugin_device *dev, conv *c);
/* Enqueues CONV2D or CONV2D_BACKWARD_FILTER by the direct path. */
tyto_plugin_error *conv_direct_launch(tyto_plugin_device *dev,
                                      tyto_plugin_stream *s, const conv *c,
                                      const ocl_desc *d, const ocl_arg *in,
                                      const ocl_arg *out, const ocl_arg *ws);

/* v[0 .. 4) as a long4. */
cl_long4 conv_long4(const int64_t *v);

#endif /* TYTO_OPENCL_CONV_H */
