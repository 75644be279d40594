/* The compiled program's internals, shared by program.c (compile, run,
 * host access), lower.c (graph node -> kernel descriptors) and eval.c. */
#ifndef TYTO_EXEC_PROGRAM_H
#define TYTO_EXEC_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>
#include <tyto/program.h>

#include "../graph/node.h"

/* The most inputs or outputs of one launch (a fused node's). */
#define EXEC_MAX_IO TYTO_PLUGIN_FUSED_MAX_IO

/* One device buffer position per needed node. */
typedef struct exec_slot {
  tyto_tensor *t; /* a node of the program's own graph */
  tyto_plugin_buffer *buf;
  uint64_t offset; /* bytes into buf (the arena for planned slots) */
  uint64_t bytes;
  tyto_kind kind; /* copied: eager programs outlive their graph */
  int owned;      /* buf is this slot's own (pinned, or no plan) */
  int set;        /* inputs: bound since compile */
} exec_slot;

/* "input 'x' (#0) is f32[2] (8 bytes)": slot sl for messages, with the
 * caller's index for the tensor; into buf (EXEC_DESC bytes). */
#define EXEC_DESC 192
const char *exec_slot_desc(const struct tyto_program *p, const exec_slot *sl,
                           char *buf);
/* The same as a noun phrase, "input 'x' (#0), f32[2] (8 bytes)", for
 * "... failed for <it>". */
const char *exec_slot_name(const struct tyto_program *p, const exec_slot *sl,
                           char *buf);

/* One launch: the plugin op, its layouts and bindings. in/out are slot
 * numbers, or -1 for the kernel's own scratch output (QR's other factor,
 * a fused output nothing reads). The arrays hold n_in and n_out entries
 * (one allocation with the kernel). */
typedef struct exec_kernel {
  tyto_plugin_op_desc desc;
  uint32_t op;
  uint32_t n_in, n_out;
  tyto_plugin_layout *in_l, *out_l;
  int *in, *out;
  int64_t iattrs[2 * TYTO_MAX_RANK + 1];
  uint32_t n_iattrs;
  double fattrs[2];
  uint32_t n_fattrs;
  void *blob; /* a fused program, malloc'd; freed after prepare */
  size_t blob_size;
  int slot;   /* the node it computes; for an update's copy, the value */
  int update; /* 1 + the update it copies, or 0 */
  int skip;   /* not launched: a reshape planned in place */
  tyto_plugin_kernel *k;
  uint64_t workspace_bytes;
  tyto_plugin_buffer *workspace;
  uint64_t workspace_offset;
  int workspace_owned;
  tyto_plugin_buffer *scratch[EXEC_MAX_IO]; /* for outputs of -1 */
} exec_kernel;

struct tyto_program {
  tyto_device *dev;
  tyto_plugin_stream *stream;
  tyto_graph *src;   /* the caller's graph: tensors passed in are its */
  tyto_graph *graph; /* owned: the graph after the passes */
  exec_slot *slots;
  size_t n_slots;
  int *slot_of;        /* program graph index -> slot, -1 when not needed */
  int *user_slot;      /* caller's graph index -> slot, -1 when not used */
  int64_t *user_index; /* program graph index -> the caller's, or -1 */
  size_t n_graph;      /* nodes of the caller's graph at compile */
  exec_kernel *kernels;
  size_t n_kernels, cap_kernels;
  size_t *launch; /* kernel indices in run order */
  size_t n_launch;
  size_t n_outputs;
  tyto_tensor **outputs;
  int *out_slot;    /* the slot of each output */
  size_t n_updates; /* parameter updates (tyto_program_options) */
  int *upd_param;   /* the slot of each updated parameter */
  int *upd_value;   /* the slot of each update's value */
  tyto_plugin_buffer *arena;
  /* While lowering: per slot, the first slot of a FUSED_OUTPUT node that
   * reads it, and the next one reading the same FUSED node; -1 ends. */
  int *fused_first, *fused_next;
  tyto_program_stats stats;
  tyto_pass_stats *pass_stats;
  int ran;
  /* TYTO_PROFILE: each kernel timed on its own (synchronised after every
   * launch); the table is printed to stderr when the program is freed. */
  int profile;
  double *prof_seconds; /* per kernel */
  uint64_t prof_runs;
  double prof_total;
};

/* Prints the profile table of p to stderr (profile.c). */
void exec_profile_report(const tyto_program *p);

/* A row-major layout of t's shape. */
void exec_layout(tyto_plugin_layout *l, const tyto_tensor *t);

/* Appends the kernels computing slot s's node (which is computed or a
 * FULL/random source) to p. Fails with "compile: op <name> cannot be
 * lowered yet" for ops it cannot lower. */
tyto_status exec_lower(tyto_program *p, int s);

/* Appends and prepares the COPY that writes update u's value over its
 * parameter at the end of a run (lower.c). */
tyto_status exec_lower_update(tyto_program *p, size_t u);

/* Fills k's descriptor, asks the device and prepares it (program.c). */
tyto_status exec_prepare(tyto_program *p, exec_kernel *k, const tyto_tensor *t);

/* 1 when the program reads or computes tensor t of the caller's graph
 * (an input it needs, say). */
int exec_uses(const tyto_program *p, const tyto_tensor *t);

/* Seconds on a monotonic clock. */
double exec_now(void);

/* Buffer sizes: whole multiples of EXEC_ALIGN (64), as allocations take. */
#define EXEC_ALIGN 64
static inline uint64_t exec_round_up(uint64_t bytes) {
  return (bytes + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
}

/* The index in the caller's graph of t (a node of p's graph), for
 * messages; -1 for a node the passes made. */
int64_t exec_user_index(const tyto_program *p, const tyto_tensor *t);

/* Plans the memory of p's slots and kernels (after lowering and
 * preparing) and fills p->launch: one arena for everything but pinned
 * slots, which get buffers of their own (memory.c). With `plan` 0 every
 * slot gets its own buffer and the graph's order is kept. */
tyto_status exec_plan_memory(tyto_program *p, int plan);

#endif
