/*
 * Layout planning for the copy and fill kernels: validates tensor layouts
 * from op descriptors, merges dimensions the kernels can walk as one, and
 * works out which elements a layout touches so that launch() can check it
 * against the bound buffer before the device sees it.
 *
 * Pure arithmetic, no OpenCL: every step is overflow-checked because the
 * numbers come from callers.
 */
#ifndef TYTO_OPENCL_LAYOUT_H
#define TYTO_OPENCL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

/* How a kernel walks its elements. Dimensions are fastest first (the
 * reverse of the layout's order) with unit dimensions dropped and
 * mergeable neighbours merged, so a contiguous copy becomes rank 1. */
typedef struct ocl_plan {
  uint32_t rank; /* 0 .. TYTO_PLUGIN_MAX_RANK */
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t in_strides[TYTO_PLUGIN_MAX_RANK];  /* elements; copy only */
  int64_t out_strides[TYTO_PLUGIN_MAX_RANK]; /* elements */
  int64_t n;                                 /* elements, may be 0 */
  int64_t in_offset, out_offset;             /* layouts' offsets */
  /* Lowest and highest element index touched, relative to the bound
   * position, the layout offset included. Meaningful when n > 0. */
  int64_t in_lo, in_hi, out_lo, out_hi;
  int in_dense, out_dense; /* rank <= 1 with unit stride: one block */
} ocl_plan;

/* Plans a copy from `in` to `out` (in != NULL) or a fill of `out`
 * (in == NULL). The layouts' dtype, rank and shape agreement is checked by
 * the caller. Returns 0 and a reason in `why` when a layout is unusable:
 * negative extents, arithmetic overflow, or (copy) an output that writes one
 * element twice through a zero stride. */
int ocl_plan_make(const tyto_plugin_layout *in, const tyto_plugin_layout *out,
                  ocl_plan *plan, char *why, size_t why_size);

/* Element count *n and the range [*lo, *hi] of element indices `l`
 * reaches (offset included; meaningful when *n > 0). Returns 0 and a
 * reason in `why` (naming the layout `which`) for a rank above 8, a
 * negative extent or 64-bit overflow. */
int ocl_layout_extent(const tyto_plugin_layout *l, const char *which,
                      int64_t *n, int64_t *lo, int64_t *hi, char *why,
                      size_t why_size);

/* *r = a + b, or 0 when it would overflow. */
int ocl_add_ok(int64_t a, int64_t b, int64_t *r);

/* "[2, 3, 4]" into buf. */
void ocl_format_shape(const tyto_plugin_layout *l, char *buf, size_t size);

#endif /* TYTO_OPENCL_LAYOUT_H */
