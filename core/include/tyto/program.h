/*
 * Compiled programs: a graph's outputs compiled for a device, run again and
 * again with inputs bound from host memory, and eager evaluation of single
 * tensors.
 *
 * A program holds one device buffer per tensor it needs (inputs,
 * parameters and constants included) and one prepared kernel per launch;
 * running it costs only the launches. Values cross as the tensor's dtype
 * (float, double, or uint16_t bit patterns for f16 and bf16), row-major, with
 * exactly numel * dtype size bytes. Parameters live on the device between runs;
 * they start as zeros.
 *
 * A program uses the graph's tensors as handles only: the graph may be
 * changed (new tensors added) after compiling, and must outlive the
 * program while tensors are passed to it. A program is used by one thread
 * at a time.
 */
#ifndef TYTO_PROGRAM_H
#define TYTO_PROGRAM_H

#include <stddef.h>
#include <stdio.h>

#include <tyto/context.h>
#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_program tyto_program;

/* How a program's nodes are put on its devices (docs/placement.md). */
typedef enum tyto_place_policy {
  TYTO_PLACE_DEFAULT = 0, /* TYTO_PLACEMENT=pinned|auto[,strict], else pinned */
  /* Pinned tensors (tyto_tensor_set_device, tyto_graph_set_device_scope)
   * go to their device, everything else to the first device. */
  TYTO_PLACE_PINNED = 1,
  /* Pinned tensors as above; every other node goes where the estimated
   * time of the whole program, copies included, is least, from measured
   * device and link profiles (tyto_device_profile_get). */
  TYTO_PLACE_AUTO = 2
} tyto_place_policy;

/* Compile options; fill with tyto_program_options_init() first. */
typedef struct tyto_program_options {
  /* sizeof(tyto_program_options) as the caller compiled it; set by
   * tyto_program_options_init(). Fields past it are taken as defaults. */
  size_t struct_size;
  /* Index into the context's selected devices (0: the first): the device
   * of a one-device program (n_devices 0). */
  size_t device;
  /* Graph passes to skip: an OR of TYTO_PASS_* bits (0: run them all). */
  unsigned passes_off;
  /* Non-zero: every buffer gets memory of its own (no arena, no reuse).
   * For debugging the planner and for measuring what it saves. */
  int no_memory_plan;
  /* Parameter updates, the write-back of a training step: after each run
   * parameter update_params[i] holds what update_values[i] computed, as if
   * assigned at the end of the run (every read of the parameter in the
   * run sees its old value). A value is a tensor of the graph with its
   * parameter's dtype and shape; a parameter is updated at most once.
   * Where the value's last kernel is elementwise over the parameter (an
   * optimiser's update), it writes the parameter's memory in place;
   * otherwise the value is copied over the parameter once nothing reads
   * the old one. n_updates 0: none. */
  size_t n_updates;
  tyto_tensor *const *update_params;
  tyto_tensor *const *update_values;
  /* The devices the program may use (docs/placement.md): n_devices
   * indices into the context's selected devices, the first being the
   * caller's own (where unpinned work goes under TYTO_PLACE_PINNED).
   * n_devices 0: `device` alone, exactly as a one-device program. */
  size_t n_devices;
  const size_t *devices;
  /* How nodes are put on those devices (TYTO_PLACE_DEFAULT: the
   * environment's TYTO_PLACEMENT, else pinned). */
  tyto_place_policy placement;
  /* Non-zero (or TYTO_PLACEMENT naming "strict"): a node that cannot run
   * where the policy puts it is an error naming the op, the device and
   * its reason, instead of going to another device with a warning. */
  int strict;
  /* An exchange with the host in the middle of a run (what data-parallel
   * training does between backward and update): the run splits in two
   * phases. Phase 0 computes exchange_sends[i] (tensors of g, kept like
   * outputs) and everything that does not need an exchange_recvs[i];
   * then the host reads the sends (tyto_program_read_send) and sets the
   * recvs (inputs of g, tyto_program_set_input); phase 1 runs the rest
   * (tyto_program_run_phase). tyto_program_run runs both with the recvs
   * as last set. A send and its recv have one dtype and shape. 0: none. */
  size_t n_exchanges;
  tyto_tensor *const *exchange_sends;
  tyto_tensor *const *exchange_recvs;
  /* Exchanges in stages (data-parallel training's replica sums: a batch
   * norm's statistics summed over the replicas in the forward pass, and
   * again in the backward): exchange i happens after phase
   * exchange_stages[i]; NULL: every exchange after phase 0. Stages 0 ..
   * S - 1 must each hold an exchange; the run then has S + 1 phases.
   * Phase k computes the sends of stage k and whatever does not need a
   * recv of stage k or later; a send of stage k may need recvs of earlier
   * stages only. */
  const size_t *exchange_stages;
  /* Graphs: on a device whose plugin can record work (CUDA), a run's
   * launches are recorded on the second run and replayed from then on, one
   * call per run instead of one per kernel. Non-zero turns that off, as
   * does the environment variable TYTO_GRAPHS=off. */
  int no_graphs;
} tyto_program_options;

/* ---------------------------------------------------------------------- */
/* Placement (docs/placement.md)                                           */

/* One device of a compiled program, as tyto_program_device_stats_get
 * gives it. */
typedef struct tyto_program_device_stats {
  size_t struct_size; /* set by the caller */
  size_t device;      /* index among the context's selected devices */
  const char *id;     /* "cpu:0" (owned by the context) */
  size_t nodes;       /* graph nodes it computes (fused ones count once) */
  size_t kernels;     /* launches per run, copies into it included */
  size_t fallbacks;   /* nodes placed here because another refused them */
  /* Its memory, in bytes, as tyto_program_stats counts the program's. */
  uint64_t planned_bytes, arena_bytes, pinned_bytes, lower_bound_bytes;
  /* Runs replayed from a recorded graph (tyto_program_options.no_graphs),
   * and NULL, or why this device's runs are not recorded ("the plugin
   * cannot record", "gather reads indices back on the host", ...). */
  uint64_t graph_replays;
  const char *graph_note;
} tyto_program_device_stats;

/* A copy between two devices that every run makes. */
typedef struct tyto_program_copy {
  size_t struct_size; /* set by the caller */
  int64_t tensor;     /* its index in the caller's graph; -1: made by the
                         passes */
  const char *name;   /* the tensor's name, or NULL */
  const char *op;     /* the op that computes it ("input", "matmul"...) */
  size_t from, to;    /* indices among the context's selected devices */
  uint64_t bytes;     /* per run */
  const char *route;  /* "peer" or "staged through host memory" */
} tyto_program_copy;

/* The number of devices p runs on (1 for a one-device program). */
TYTO_API size_t tyto_program_device_count(const tyto_program *p);
/* The figures of p's i-th device (set out->struct_size first). */
TYTO_API tyto_status tyto_program_device_stats_get(
    const tyto_program *p, size_t i, tyto_program_device_stats *out);
/* The copies between devices p makes per run, and the i-th. */
TYTO_API size_t tyto_program_copy_count(const tyto_program *p);
TYTO_API tyto_status tyto_program_copy_get(const tyto_program *p, size_t i,
                                           tyto_program_copy *out);
/* The device (an index among the context's selected devices) that
 * computes or holds tensor t of the compiled graph, or -1 when p does not
 * use t (the passes may have merged or dropped it). */
TYTO_API int tyto_program_tensor_device(const tyto_program *p,
                                        const tyto_tensor *t);
/* Writes the placement report (devices, their nodes, kernels and memory,
 * every copy) as text to f. */
TYTO_API tyto_status tyto_program_report_placement(const tyto_program *p,
                                                   FILE *f);

/* The graph passes, in the order they run (each round runs them all). */
typedef enum tyto_pass {
  TYTO_PASS_DCE = 1 << 0,     /* drop what no output needs */
  TYTO_PASS_CSE = 1 << 1,     /* merge identical subexpressions */
  TYTO_PASS_FOLD = 1 << 2,    /* evaluate ops whose inputs are constants */
  TYTO_PASS_ALGEBRA = 1 << 3, /* x+0, x*1, -(-x), transpose into matmul... */
  TYTO_PASS_FUSE = 1 << 4,    /* elementwise chains and DAGs -> fused nodes */
  TYTO_PASS_ALL = (1 << 5) - 1
} tyto_pass;

TYTO_API void tyto_program_options_init(tyto_program_options *opts);

/* Compiles the n_outputs tensors of `outputs` (n_outputs >= 1) of graph g
 * for one selected device of ctx (opts may be NULL: device 0), or for
 * several (opts->n_devices, docs/placement.md). Every kernel is prepared
 * and constants are uploaded now. On success *out owns
 * the program; free it with tyto_program_free() before ctx. Errors:
 * TYTO_ERR_INVALID_ARGUMENT for a graph in error ("compile: graph is in
 * error: <its message>"), an output of another graph or an error tensor,
 * a bad parameter update (not a parameter of g, updated twice, a value of
 * another dtype or shape, a value that is a parameter another update
 * changes);
 * a tensor pinned to a device the program may not use, a bad device list
 * or placement policy (or TYTO_PLACEMENT value);
 * TYTO_ERR_UNSUPPORTED for an op that cannot be lowered yet or that the
 * device refuses (the device's message), or, under strict placement, a
 * node its device refuses; TYTO_ERR_NOT_FOUND when ctx has no such
 * device; TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_program_compile(tyto_context *ctx, tyto_graph *g,
                                          size_t n_outputs,
                                          tyto_tensor *const *outputs,
                                          const tyto_program_options *opts,
                                          tyto_program **out);
TYTO_API void tyto_program_free(tyto_program *p); /* NULL ok */

/* Number of outputs, and the i-th (NULL when out of range). */
TYTO_API size_t tyto_program_output_count(const tyto_program *p);
TYTO_API tyto_tensor *tyto_program_output(const tyto_program *p, size_t i);

/* Binds an input's value for the following runs (copied to the device
 * now; it stays bound until set again). Fails when `input` is not an
 * input the program reads or `bytes` is not its size. */
TYTO_API tyto_status tyto_program_set_input(tyto_program *p, tyto_tensor *input,
                                            const void *data, size_t bytes);

/* Runs every kernel in order and waits for them. Fails when an input was
 * never set, or with the device's message when a kernel fails. */
TYTO_API tyto_status tyto_program_run(tyto_program *p);

/* A program with exchanges (tyto_program_options.n_exchanges): runs phase
 * 0 (up to the sends) or phase 1 (the rest, after the recvs are set), and
 * waits for it. Phase 1 needs phase 0 run since the last phase 1; a
 * program without exchanges has phase 0 only (all of it). With exchanges
 * in S stages (exchange_stages) the phases are 0 .. S, run in order:
 * phase k + 1 needs phase k run, and the recvs of stage k set, since. */
TYTO_API tyto_status tyto_program_run_phase(tyto_program *p, int phase);
/* The number of phases: 1 without exchanges, else the stages + 1. */
TYTO_API int tyto_program_phase_count(const tyto_program *p);
/* The stage of exchange i (tyto_program_options.exchange_stages), or -1
 * for an i out of range. */
TYTO_API int tyto_program_exchange_stage(const tyto_program *p, size_t i);

/* Streamed sends: fn(user, i, data, bytes) is called during each later
 * run of the phase that computes send i (its stage's) with its value (bytes of
 * host memory, valid until the next phase 0) as soon as it is computed, while
 * the device goes on with the rest of the phase: the sends come in the order
 * the launches complete them (tyto_program_send_order), each once its copy has
 * landed, on the thread running the phase. Data-parallel training reduces each
 * gradient this way while the backward pass computes the next. A phase replayed
 * as a graph delivers them all at its end. A phase that fails stops the calls.
 * fn NULL turns it off. Fails when the program has no exchanges. */
typedef void (*tyto_program_send_fn)(void *user, size_t i, const void *data,
                                     size_t bytes);
TYTO_API tyto_status tyto_program_stream_sends(tyto_program *p,
                                               tyto_program_send_fn fn,
                                               void *user);

/* The sends (n = their count) in the order the phases complete them, into
 * order[]: by stage, then the last launch writing each, then the send's
 * index. */
TYTO_API tyto_status tyto_program_send_order(const tyto_program *p,
                                             size_t *order, size_t n);

/* Sets every recv of the stage just run from its own send, on the
 * device, with no copy through the host: the exchange of a program that
 * is its only participant (a data-parallel run down to one device).
 * Queued on the program's stream after phase k, so phase k + 1 sees it.
 * Fails when no phase but the last is the one just run, and on a program
 * without exchanges. */
TYTO_API tyto_status tyto_program_recv_sends(tyto_program *p);

/* Copies exchange send i (as computed by the last run of its stage's
 * phase) into dst (bytes = its size). */
TYTO_API tyto_status tyto_program_read_send(tyto_program *p, size_t i,
                                            void *dst, size_t bytes);

/* Copies output i of the last run into dst (bytes must be its size). Fails
 * before the first run, after a run that failed once it had launched work
 * (its outputs are part old, part new) until a run succeeds, and for i out
 * of range. */
TYTO_API tyto_status tyto_program_read_output(tyto_program *p, size_t i,
                                              void *dst, size_t bytes);

/* Reads or overwrites a parameter's device value between runs. Fails when
 * `param` is not a parameter the program uses or bytes is not its size. */
TYTO_API tyto_status tyto_program_read_parameter(tyto_program *p,
                                                 tyto_tensor *param, void *dst,
                                                 size_t bytes);
TYTO_API tyto_status tyto_program_write_parameter(tyto_program *p,
                                                  tyto_tensor *param,
                                                  const void *src,
                                                  size_t bytes);

/* Non-zero when t is an input or parameter that p reads (the graph's
 * tensor handles, as given to tyto_program_compile()); 0 otherwise, NULL
 * arguments included. For moving state between programs compiled from one
 * graph: a training step's parameters into an evaluation program. */
TYTO_API int tyto_program_uses(const tyto_program *p, const tyto_tensor *t);

/* ---------------------------------------------------------------------- */
/* What compiling did                                                      */

/* One run of one pass over the graph. */
typedef struct tyto_pass_stats {
  const char *name; /* "dce", "cse", "fold", "algebra", "fuse" */
  int round;        /* 1, 2, ...: passes run to a fixed point */
  size_t nodes_before, nodes_after;
  size_t edges_before, edges_after;
  long changed; /* rewrites made */
  double seconds;
} tyto_pass_stats;

/* The order the memory planner kept (it tries several, keeps the best). */
typedef enum tyto_plan_order {
  TYTO_PLAN_ORDER_GRAPH = 0,  /* the graph's creation order */
  TYTO_PLAN_ORDER_GREEDY = 1, /* memory-aware greedy list scheduling */
  TYTO_PLAN_ORDER_DEPTH = 2   /* depth-first from the outputs */
} tyto_plan_order;

typedef struct tyto_program_stats {
  size_t struct_size; /* set by the caller to sizeof(tyto_program_stats) */
  /* The graph the outputs need, before and after the passes. */
  size_t nodes_before, edges_before;
  size_t nodes_after, edges_after;
  size_t fused_nodes; /* fused elementwise nodes after the passes */
  size_t kernels;     /* launches per run */
  /* Every pass run, in order (owned by the program). */
  size_t n_passes;
  const tyto_pass_stats *passes;
  /* Device memory for the program's tensors, in bytes (each rounded up to
   * 64, as buffers are): every tensor its own buffer; what the plan uses
   * (pinned buffers plus the arena); the
   * live-set lower bound of the kept order (no placement in that order
   * can do better); the arena alone; inputs, parameters, constants and
   * outputs, which are never reused. */
  uint64_t naive_bytes, planned_bytes, lower_bound_bytes;
  uint64_t arena_bytes, pinned_bytes;
  /* naive_bytes is measured on the graph as given (what running it op by
   * op with a fresh buffer for every result would take, as Owl's figures
   * count "without CG"); this is the same on the graph after the passes. */
  uint64_t compiled_naive_bytes;
  /* Parameter updates written in place by their last kernel (the others
   * are copied at the end of the run). */
  size_t updates_in_place;
  tyto_plan_order order;
  const char *order_name; /* "graph", "greedy", "depth" */
  /* Seconds spent in each phase of tyto_program_compile(): the passes,
   * the memory plan (and its verification), preparing kernels, and
   * allocating and initialising device memory. */
  double passes_seconds, plan_seconds, prepare_seconds, alloc_seconds;
} tyto_program_stats;

/* Fills *stats (set stats->struct_size first; fields past it are left
 * alone). Pointers in it stay valid while p lives. TYTO_ERR_INVALID_ARGUMENT
 * for NULL arguments. */
TYTO_API tyto_status tyto_program_stats_get(const tyto_program *p,
                                            tyto_program_stats *stats);

/* Writes the compiled graph as Graphviz dot to `path`: one node per
 * tensor, fused nodes with their expressions, and one fill colour per
 * memory block of the arena (tensors that share memory share a colour;
 * pinned tensors are white), as in Owl's memory-reuse figures. The file is
 * written atomically (a temporary file renamed over path). Errors:
 * TYTO_ERR_INVALID_ARGUMENT, TYTO_ERR_IO with the system's reason. */
TYTO_API tyto_status tyto_program_export_dot(const tyto_program *p,
                                             const char *path);

/* ---------------------------------------------------------------------- */
/* Eager evaluation                                                        */

/* A cache of the programs behind eagerly evaluated tensors, for one
 * context (device 0, and the devices of any pinned tensor the value
 * needs, where those run). Keyed by the structure of the subgraph that
 * makes the tensor (ops, shapes, attributes, pins, constant values), so a
 * rebuilt graph reuses a program. Free it with tyto_eval_cache_free()
 * before ctx. */
typedef struct tyto_eval_cache tyto_eval_cache;

/* *out owns a new, empty cache. TYTO_ERR_OUT_OF_MEMORY. */
TYTO_API tyto_status tyto_eval_cache_new(tyto_context *ctx,
                                         tyto_eval_cache **out);
TYTO_API void tyto_eval_cache_free(tyto_eval_cache *c); /* NULL ok */
/* Programs compiled so far (for tests and statistics). */
TYTO_API size_t tyto_eval_cache_compiles(const tyto_eval_cache *c);

/* Evaluates t into dst (bytes = its size), compiling the minimal program
 * behind it on first use and reusing it afterwards. A tensor that depends
 * on an input or a parameter cannot be evaluated eagerly (their values
 * belong to a program): "eval: tensor #5 depends on input 'x' (#0);
 * compile a program and bind it with tyto_program_set_input". Other
 * errors as tyto_program_compile() and tyto_program_run(). */
TYTO_API tyto_status tyto_tensor_eval(tyto_eval_cache *c, tyto_tensor *t,
                                      void *dst, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_PROGRAM_H */
