/*
 * Reductions (SUM .. NORM_L2), SOFTMAX and LOG_SOFTMAX planned as the GPU
 * plugins run them (the kernels of tpc_reduce_folds): the operands and
 * axes checked as the CPU plugin checks them, the input's axes split into
 * kept and reduced ones, and the work cut into groups of lanes and, for
 * long reductions with few outputs, into chunks whose partial states a
 * second pass merges. The cut depends on the shapes and the device's
 * limits alone, so results repeat bit for bit. Depends on the plugin ABI
 * header and the C library only.
 */
#ifndef TYTO_PLUGINS_REDUCE_PLAN_H
#define TYTO_PLUGINS_REDUCE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "geometry.h"

/* Axes of one side of the split, fastest first: extents, input strides and
 * (kept axes) output strides. */
typedef struct tpc_reduce_dims {
  int rank;
  int64_t sh[TYTO_PLUGIN_MAX_RANK], xs[TYTO_PLUGIN_MAX_RANK],
      ys[TYTO_PLUGIN_MAX_RANK];
} tpc_reduce_dims;

/* A planned launch: groups of `lanes` work-items, each Lx = 2^lxs outputs
 * by Ly = lanes / Lx lanes; `tiles` groups cover the outputs. */
typedef struct tpc_reduce_grid {
  int lxs;
  size_t lanes;
  int64_t tiles;
} tpc_reduce_grid;

typedef struct tpc_reduce_plan {
  uint32_t op;
  int softmax, logsm;
  tpc_reduce_dims kept, red;
  int64_t nout, count;         /* outputs (softmax: rows), elements of each */
  int64_t chunk, chunks;       /* pass 1 cuts each output's elements so */
  int64_t sy;                  /* softmax: output stride along the axis */
  int64_t span;                /* elements of a lane's block; 0: interleave */
  tpc_reduce_grid grid, mgrid; /* pass 1 (softmax), pass 2 */
  uint64_t ws_bytes; /* the partial states' workspace; 0 without chunks */
} tpc_reduce_plan;

/* Whether op is one the plan covers. */
int tpc_reduce_op(uint32_t op);

/* Checks the operands of a (one input, one output), the axes (iattrs:
 * ascending, in range, one for SOFTMAX, LOG_SOFTMAX, ARGMAX and ARGMIN)
 * and the output's shape, as the CPU plugin does. Returns 0, or
 * TYTO_PLUGIN_ERR_INVALID_ARGUMENT with the reason in why (beginning with
 * the op's name; 512 bytes hold every message). */
int tpc_reduce_check(const tpc_operands *a, char *why, size_t why_size);

/* Splits a checked op's input axes into p's kept and reduced ones (extent-1
 * axes dropped, each set ordered by input stride, fastest first, and
 * neighbours that step as one merged) and counts the outputs and the
 * elements of each. Fills everything before the grid. */
void tpc_reduce_split(const tpc_operands *a, tpc_reduce_plan *p);

/* The device's side of the cut. */
typedef struct tpc_reduce_device {
  int wgl;            /* groups of at most 2^wgl work-items (2^wgl <= 256) */
  int64_t units;      /* compute units (SMs); the chunks fill 8 per unit */
  int64_t max_chunks; /* chunks of one output at most */
  /* A CPU: lanes fold contiguous blocks of `span` elements and at least
   * 1024 elements each; else they interleave and fold at least 16. */
  int cpu;
} tpc_reduce_device;

/* Plans the grids and the chunks of a split plan for elements of elem
 * bytes: p->grid, p->chunk, p->chunks, p->span, p->mgrid and p->ws_bytes
 * (partial states within 64 MiB; SOFTMAX rows are never cut). */
void tpc_reduce_cut(tpc_reduce_plan *p, const tpc_reduce_device *dev,
                    size_t elem);

#endif /* TYTO_PLUGINS_REDUCE_PLAN_H */
