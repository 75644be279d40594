/*
 * PAD, GATHER, SCATTER_ADD and ONE_HOT as the GPU plugins check them: the
 * operands and attributes by the rules of plugins/cpu/layout.c, with one
 * set of messages, and the host's part of GATHER's and SCATTER_ADD's index
 * check (every index a whole number in [0, extent), found in row-major
 * order). Depends on the plugin ABI header and the C library only.
 */
#ifndef TYTO_PLUGINS_INDEX_PLAN_H
#define TYTO_PLUGINS_INDEX_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#include "geometry.h"

/* What the check reads from the attributes. */
typedef struct tpc_index {
  int mode;                             /* PAD: 0 constant, 1 reflect */
  int64_t before[TYTO_PLUGIN_MAX_RANK]; /* PAD: the pads before, per axis */
  double value;                         /* PAD constant */
  float valuef;  /* the same, rounded to f32 as the CPU does */
  uint32_t axis; /* GATHER, SCATTER_ADD */
} tpc_index;

/* Whether op is one of the four above. */
int tpc_index_op(uint32_t op);

/* Checks an index op's operand counts, attributes (PAD's constant from
 * a->fattrs) and shapes as the CPU plugin does and fills *x. `plugin`
 * ("cuda", "opencl") names the plugin in the one limit of its own:
 * SCATTER_ADD's sorted indices take 16 bytes each of the workspace.
 * Returns 0, or TYTO_PLUGIN_ERR_INVALID_ARGUMENT (or _UNSUPPORTED for that
 * limit) with the reason in why (beginning with the op's name; 1 KiB holds
 * every message). */
int tpc_index_check(const tpc_operands *a, const char *plugin, tpc_index *x,
                    char *why, size_t why_size);

/* The dtype a kernel of op reads indices in: GATHER's and SCATTER_ADD's
 * input 1 (in1), ONE_HOT's input (in0), when it is I32 or I64; else the
 * data's dtype `data` (floating indices are stored in it; PAD's integer
 * data is read as it is). */
uint32_t tpc_index_dtype(uint32_t op, uint32_t in0, uint32_t in1,
                         uint32_t data);

/* The indices of a checked GATHER or SCATTER_ADD (op), read back to the
 * host: elements of il->dtype (a floating dtype or I32, I64) in `host`,
 * laid out as il with its origin at element `origin`; extent is the
 * data's (base's) extent along `axis`. */
typedef struct tpc_index_host {
  uint32_t op;
  const tyto_plugin_layout *il;
  const void *host;
  int64_t origin;
  int64_t extent;
  uint32_t axis;
} tpc_index_host;

/* Checks the indices in row-major order, as the CPU does. Returns 0, or
 * TYTO_PLUGIN_ERR_INVALID_ARGUMENT with the reason (the first index that is
 * not a whole number in [0, extent) and its row-major position) in why
 * (512 bytes hold every message). */
int tpc_index_scan(const tpc_index_host *ix, char *why, size_t why_size);

/* SCATTER_ADD's keys: checks the indices as tpc_index_scan does, then
 * stores in *keys a new array (the caller frees it with free()) of the
 * indices sorted by (index, row-major position), followed by the offset in
 * the updates (laid out as ul) of each: 2 * n int64 for n indices. Returns
 * 0, the scan's error, or TYTO_PLUGIN_ERR_OUT_OF_MEMORY with the reason in
 * why; *keys is NULL after a failure. */
int tpc_index_keys(const tpc_index_host *ix, const tyto_plugin_layout *ul,
                   int64_t **keys, char *why, size_t why_size);

#endif /* TYTO_PLUGINS_INDEX_PLAN_H */
