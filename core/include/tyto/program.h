/*
 * Compiled programs: a graph's outputs compiled for a device, run again and
 * again with inputs bound from host memory, and eager evaluation of single
 * tensors.
 *
 * A program holds one device buffer per tensor it needs (inputs,
 * parameters and constants included) and one prepared kernel per launch;
 * running it costs only the launches. Values cross as the tensor's dtype
 * (float or double), row-major, with exactly numel * dtype size bytes.
 * Parameters live on the device between runs; they start as zeros.
 *
 * A program uses the graph's tensors as handles only: the graph may be
 * changed (new tensors added) after compiling, and must outlive the
 * program while tensors are passed to it. A program is used by one thread
 * at a time.
 */
#ifndef TYTO_PROGRAM_H
#define TYTO_PROGRAM_H

#include <stddef.h>

#include <tyto/context.h>
#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_program tyto_program;

/* Compile options; fill with tyto_program_options_init() first. */
typedef struct tyto_program_options {
  /* sizeof(tyto_program_options) as the caller compiled it; set by
   * tyto_program_options_init(). Fields past it are taken as defaults. */
  size_t struct_size;
  /* Index into the context's selected devices (0: the first). Placement
   * across several devices comes with the planner. */
  size_t device;
} tyto_program_options;

TYTO_API void tyto_program_options_init(tyto_program_options *opts);

/* Compiles the n_outputs tensors of `outputs` (n_outputs >= 1) of graph g
 * for one selected device of ctx (opts may be NULL: device 0). Every
 * kernel is prepared and constants are uploaded now. On success *out owns
 * the program; free it with tyto_program_free() before ctx. Errors:
 * TYTO_ERR_INVALID_ARGUMENT for a graph in error ("compile: graph is in
 * error: <its message>"), an output of another graph or an error tensor;
 * TYTO_ERR_UNSUPPORTED for an op that cannot be lowered yet or that the
 * device refuses (the device's message); TYTO_ERR_NOT_FOUND when ctx has
 * no such device; TYTO_ERR_OUT_OF_MEMORY. */
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

/* Copies output i of the last run into dst (bytes must be its size). Fails
 * before the first run and for i out of range. */
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

/* ---------------------------------------------------------------------- */
/* Eager evaluation                                                        */

/* A cache of the programs behind eagerly evaluated tensors, for one
 * context (device 0). Keyed by the structure of the subgraph that makes the
 * tensor (ops, shapes, attributes, constant values), so a rebuilt graph
 * reuses a program. Free it with tyto_eval_cache_free() before ctx. */
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
