/*
 * The compile driver's internals (compile.c drives; placement.c places
 * the lowered kernels on devices and inserts the copies between them).
 * Data flows one way: graph -> ad -> passes -> place -> plan -> exec.
 */
#ifndef TYTO_COMPILE_H
#define TYTO_COMPILE_H

#include <tyto/program.h>

#include "../exec/program.h"
#include "../passes/passes.h"

/* What tyto_program_compile() was asked, options resolved. */
typedef struct compile_opts {
  unsigned passes_off;
  int plan;
  size_t n_updates;
  tyto_tensor *const *update_params;
  tyto_tensor *const *update_values;
  size_t n_exchanges;
  tyto_tensor *const *exchange_sends;
  tyto_tensor *const *exchange_recvs;
  const size_t *exchange_stages; /* NULL: all 0 */
  size_t n_stages;               /* 1 + the largest; 0 without exchanges */
  tyto_context *ctx;
  size_t n_devs;
  size_t *devs; /* context device indices; devs[0] is the caller's first */
  tyto_place_policy policy; /* PINNED or AUTO */
  int strict;
  int no_graphs; /* tyto_program_options.no_graphs or TYTO_GRAPHS=off */
  /* Devices that fuse nothing, or cannot be sent programs that convert
   * (plugin ABI older than 1.5: op CAST); grown by placement when a
   * device refuses a fused node: the graph is then optimised again
   * without those fusions. */
  pass_nofuse *nofuse;
  size_t n_nofuse, cap_nofuse;
} compile_opts;

/* The parameter updates and the exchanges of o checked against g (the
 * latter sets o->n_stages) (check.c). */
tyto_status compile_check_updates(const tyto_graph *g, const compile_opts *o);
tyto_status compile_check_exchanges(const tyto_graph *g, compile_opts *o);

/* Adds an exclusion to o->nofuse: 1 when new, 0 when there already,
 * -1 on out of memory. */
int compile_add_nofuse(compile_opts *o, uint32_t pin, int op, int dtype);

/* Whether device dev runs elementwise op `op` (a graph op code, which
 * for these equals the ABI's; CAST included) alone in a fused program
 * whose value is of dtype dt, reading operands of dtype dt (of in_dt for
 * a CAST, which only a plugin of ABI 1.5 or newer may be sent); 1 for ops
 * that are not elementwise, 0 for a device that fuses nothing. */
int compile_fuses_op(const tyto_device *dev, int op, tyto_plugin_dtype dt,
                     tyto_plugin_dtype in_dt, double attr);

/* "sum (tensor #9 'loss')", "exp (made by the graph passes)": node t of
 * p's graph for messages, into buf. */
void compile_describe(const tyto_program *p, const tyto_tensor *t, char *buf,
                      size_t n);

/* Puts every slot and kernel of p (lowered, not prepared) on one of its
 * devices. Sets *retry (and grows o->nofuse) when a fused node must be
 * split and the compile started again. */
tyto_status compile_place(tyto_program *p, compile_opts *o, int *retry);

/* For a program of one device, which placement does not ask: splits a
 * fused node the device refuses as placement would (*retry set, o->nofuse
 * grown), so that a device that runs an op alone but not fused (CAST, say)
 * still runs the program. */
tyto_status compile_split_refused(tyto_program *p, compile_opts *o, int *retry);

/* Adds the copies between devices: a slot per value a device reads from
 * another, written by a copy kernel (exec_kernel.xfer), placed right
 * after its source in slot order; remaps the kernels' inputs and the
 * updates to them. */
tyto_status compile_copies(tyto_program *p);

/* Streams, events and staging memory for p's devices and copies; the
 * per-device figures and the copies' descriptions. */
tyto_status compile_devices(tyto_program *p);

/* Fills the per-device figures and the copies' descriptions, and logs
 * the one-line placement summary at info level (after the plan). */
void compile_summary(tyto_program *p, tyto_context *ctx);

#endif
