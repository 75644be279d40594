/* The compiled program's internals: built by the compile driver
 * (compile/: passes, lowering, placement, memory plan), run by exec/
 * (program.c: run, host access; eval.c; dot.c; profile.c). */
#ifndef TYTO_EXEC_PROGRAM_H
#define TYTO_EXEC_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>
#include <tyto/program.h>

#include "../graph/node.h"
#include "../runtime/runtime.h"
#include "sends.h"

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
  uint32_t dev;   /* the program device that holds it (p->devs) */
  /* A copy of another slot's node on this slot's device: that slot (its
   * xfer writes this one each run), or -1. */
  int src;
  int xfer; /* 1 + the copy between devices that writes it, or 0 */
  /* An exchange's recv: 1 + its stage (set by the host after that
   * stage's phase); 0 for any other slot. */
  int recv;
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
  uint32_t dev;   /* the program device that runs it */
  int xfer;       /* 1 + the copy between devices it stands for, or 0 */
  uint32_t flags; /* TYTO_PLUGIN_KERNEL_* from prepare */
} exec_kernel;

/* How a copy between two devices travels. */
typedef enum exec_route {
  EXEC_ROUTE_PEER,   /* copy_peer() on the consumer's stream */
  EXEC_ROUTE_STAGED, /* producer -> host memory -> consumer, pipelined */
} exec_route;

/* Staged copies go in chunks of at least this many bytes, at most
 * EXEC_MAX_CHUNKS of them: the host uploads chunk i while the producer
 * still downloads chunk i + 1. */
#define EXEC_CHUNK_BYTES (UINT64_C(4) << 20)
#define EXEC_MAX_CHUNKS 8

/* A copy of slot `src` (device a) into slot `dst` (device b). */
typedef struct exec_xfer {
  int src, dst;
  exec_route route;
  int pinned_host; /* the staging memory is the producer plugin's pinned */
  void *staging;   /* bytes of host memory (staged) */
  uint32_t n_chunks;
  tyto_plugin_event *done_src[EXEC_MAX_CHUNKS]; /* on a: chunk downloaded */
  tyto_plugin_event *done_dst; /* on b: the copy finished (peer) */
  int pending;                 /* downloaded, not yet uploaded (staged) */
} exec_xfer;

typedef struct exec_graph {
  uint64_t eager_runs;  /* runs of the range before it was recorded */
  tyto_plugin_graph *g; /* the recording, or NULL */
  int refused;          /* recording failed or cannot work: run eagerly */
} exec_graph;

/* One device of a program: its stream, arena and figures. */
typedef struct exec_dev {
  tyto_device *dev;
  size_t ctx_index; /* among the context's selected devices */
  tyto_plugin_stream *stream;
  tyto_plugin_buffer *arena;
  tyto_program_device_stats stats;
} exec_dev;

struct tyto_program {
  struct tyto_context *ctx; /* held (rt_context_hold) until freed */
  exec_dev *devs; /* the devices it runs on; devs[0] is the caller's first */
  size_t n_devs;
  exec_xfer *xfers; /* copies between devices */
  size_t n_xfers;
  tyto_program_copy *copies; /* their public description (stats) */
  tyto_graph *src;           /* the caller's graph: tensors passed in are its */
  tyto_graph *graph;         /* owned: the graph after the passes */
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
  int *out_slot; /* the slot of each output */
  /* Exchanges with the host (tyto_program_options.n_exchanges): the slot
   * of each send, the caller's graph index of each recv, the stage of
   * each, and the phases: launches [phase_at[k], phase_at[k + 1]) of
   * p->launch are phase k, k < n_phases (1 without exchanges, else the
   * stages + 1). */
  size_t n_sends;
  int *send_slot;
  int64_t *recv_index;
  size_t *send_stage;
  size_t n_phases;
  size_t *phase_at;
  /* Streamed sends (sends.c; tyto_program_stream_sends): n_sends of them
   * in the order they become ready, or none. */
  exec_sent *streamed;
  size_t n_streamed, next_streamed;
  size_t first_streamed, stream_stage; /* the phase streaming now */
  tyto_program_send_fn send_fn;
  void *send_user;
  /* The phase tyto_program_run_phase may run next but 0 (which may always
   * run): 1 + the last phase run, 0 after the last phase or a failure. */
  size_t next_phase;
  size_t n_updates; /* parameter updates (tyto_program_options) */
  int *upd_param;   /* the slot of each updated parameter */
  int *upd_value;   /* the slot of each update's value */
  /* While lowering: per slot, the first slot of a FUSED_OUTPUT node that
   * reads it, and the next one reading the same FUSED node; -1 ends. */
  int *fused_first, *fused_next;
  tyto_program_stats stats;
  tyto_pass_stats *pass_stats;
  /* ran: the last whole run (or last phase) succeeded, so the outputs
   * hold its values; failed: the last run or phase failed, leaving the
   * outputs part old and part new (read_output refuses them). */
  int ran, failed;
  /* TYTO_PROFILE: each kernel timed on its own (synchronised after every
   * launch); the table is printed to stderr when the program is freed. */
  int profile;
  double *prof_seconds; /* per kernel */
  uint64_t prof_runs;
  double prof_total;
  /* Graphs (one-device programs only): per range, graphs[0] for the whole
   * run and graphs[1 + k] for phase k (n_phases + 1 of them), and why none
   * are made (devs[0].stats.graph_note points here). */
  int no_graphs;
  exec_graph *graphs;
  char graph_note[256];
};

/* The device functions and handle of program device i. */
static inline const tyto_plugin_device_fns *exec_fns(const tyto_program *p,
                                                     uint32_t i) {
  return &p->devs[i].dev->plugin->dfns;
}
static inline tyto_plugin_device *exec_handle(const tyto_program *p,
                                              uint32_t i) {
  return p->devs[i].dev->handle;
}
static inline const char *exec_dev_id(const tyto_program *p, uint32_t i) {
  return p->devs[i].dev->info.id;
}

/* Prints the profile table of p to stderr (profile.c). */
void exec_profile_report(const tyto_program *p);

/* A row-major layout of t's shape. */
void exec_layout(tyto_plugin_layout *l, const tyto_tensor *t);

/* A new kernel computing slot s with room for n_in inputs and n_out
 * outputs (at least two: QR's), appended to p->kernels (lower.c). */
exec_kernel *exec_add_kernel(tyto_program *p, int s, uint32_t op, size_t n_in,
                             size_t n_out);

/* Appends the kernels computing slot s's node (which is computed or a
 * FULL/random source) to p. Fails with "compile: op <name> cannot be
 * lowered yet" for ops it cannot lower. */
tyto_status exec_lower(tyto_program *p, int s);

/* Appends and prepares the COPY that writes update u's value over its
 * parameter at the end of a run (lower.c). */
tyto_status exec_lower_update(tyto_program *p, size_t u);

/* Fills k's descriptor (lower.c); the descriptor points into k. */
void exec_describe(exec_kernel *k);

/* NULL when device dev's plugin declares every dtype of k's layouts and
 * of its fused program's values (its dtypes mask); otherwise the reason, naming
 * the dtype and the ones it runs ("needs f16, which plugin cpu does not run (it
 * runs f32, f64)"), malloc'd (NULL too when out of memory). */
char *exec_dtype_refusal(const tyto_device *dev, const exec_kernel *k);

/* NULL when device dev's plugin is of an ABI that knows everything k
 * asks (a random op's step input: 1.3; CAST, f16 and bf16, and fused
 * programs that convert between dtypes: 1.5); otherwise the reason
 * ("needs a plugin of ABI 1.5 or newer (for CAST); plugin old is ABI
 * 1.4"), malloc'd (NULL too when out of memory). */
char *exec_abi_refusal(const tyto_device *dev, const exec_kernel *k);

/* Prepares k on its device (k->dev), which the caller has asked or
 * which runs the whole program (compile/compile.c). */
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

/* Plans the memory of p's slots and kernels (after lowering, placing and
 * preparing) and fills p->launch: one arena per device for everything but
 * pinned slots, which get buffers of their own (compile/memory.c). With
 * `plan` 0 every slot gets its own buffer. */
tyto_status exec_plan_memory(tyto_program *p, int plan);

/* Frees what the program holds on its devices (program.c). */
void exec_release(tyto_program *p);

/* Input t of `bytes` bytes written in place (program.c): the host address
 * of its memory when that memory is the host's (a device of unified
 * memory, the input in a buffer of its own, which inputs get), else NULL.
 * The caller may write it while no launch of the program reads it (a
 * recv, during the phases before its exchange) and then marks it set
 * with exec_input_written(). */
void *exec_input_in_place(tyto_program *p, const tyto_tensor *t, size_t bytes);
void exec_input_written(tyto_program *p, const tyto_tensor *t);

#endif
