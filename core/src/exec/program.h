/* The compiled program's internals, shared by program.c (compile, run,
 * host access), lower.c (graph node -> kernel descriptors) and eval.c. */
#ifndef TYTO_EXEC_PROGRAM_H
#define TYTO_EXEC_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>
#include <tyto/program.h>

#include "../graph/node.h"

#define EXEC_MAX_IO 4

/* One device buffer per needed node. */
typedef struct exec_slot {
  tyto_tensor *t;
  tyto_plugin_buffer *buf;
  uint64_t bytes;
  tyto_kind kind; /* copied: eager programs outlive their graph */
  int set;        /* inputs: bound since compile */
  char desc[192]; /* "input 'x' (#0) is f32[2] (8 bytes)", for messages */
} exec_slot;

/* One launch: the plugin op, its layouts and bindings. in/out are slot
 * numbers, or -1 for the kernel's own scratch output (QR's other factor). */
typedef struct exec_kernel {
  tyto_plugin_op_desc desc;
  uint32_t op;
  uint32_t n_in, n_out;
  tyto_plugin_layout in_l[EXEC_MAX_IO], out_l[EXEC_MAX_IO];
  int in[EXEC_MAX_IO], out[EXEC_MAX_IO];
  int64_t iattrs[2 * TYTO_MAX_RANK + 1];
  uint32_t n_iattrs;
  double fattrs[2];
  uint32_t n_fattrs;
  tyto_plugin_kernel *k;
  tyto_plugin_buffer *workspace;
  tyto_plugin_buffer *scratch; /* for an out[] of -1 */
} exec_kernel;

struct tyto_program {
  tyto_device *dev;
  tyto_plugin_stream *stream;
  exec_slot *slots;
  size_t n_slots;
  int *slot_of; /* graph index -> slot, -1 when not needed */
  size_t n_graph;
  exec_kernel *kernels;
  size_t n_kernels, cap_kernels;
  size_t n_outputs;
  tyto_tensor **outputs;
  int *out_slot; /* the slot of each output */
  int ran;
};

/* A row-major layout of t's shape. */
void exec_layout(tyto_plugin_layout *l, const tyto_tensor *t);

/* Appends the kernels computing slot s's node (which is computed or a
 * FULL/random source) to p. Fails with "compile: op <name> cannot be
 * lowered yet" for ops it cannot lower. */
tyto_status exec_lower(tyto_program *p, int s);

/* 1 when the program reads or computes tensor t (an input it needs, say). */
int exec_uses(const tyto_program *p, const tyto_tensor *t);

#endif
