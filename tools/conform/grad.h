/*
 * tyto-conform's grad mode: small graphs built with tyto's public API,
 * differentiated with its reverse-mode AD, compiled by libtyto for a device
 * of the plugin under test and for the CPU reference, run on the same
 * inputs; every output (values and gradients) is compared.
 */
#ifndef TYTO_CONFORM_GRAD_H
#define TYTO_CONFORM_GRAD_H

#include <stdint.h>

#include <tyto/ad.h>
#include <tyto/graph.h>
#include <tyto/ops.h>

#include "catalogue.h"

#define CF_GRAD_MAX_IN 8
#define CF_GRAD_MAX_OUT 16

/* An input or parameter of a case graph and how its values are drawn
 * (cf_values; matrices are its last two axes). */
typedef struct cf_grad_input {
  tyto_tensor *t;
  int parameter; /* 1: written with tyto_program_write_parameter */
  cf_values values;
  double lo, hi;
} cf_grad_input;

/* A case graph, as its builder leaves it. */
typedef struct cf_grad_graph {
  tyto_graph *g;
  tyto_dtype dtype;
  uint32_t n_in;
  cf_grad_input in[CF_GRAD_MAX_IN];
  uint32_t n_out;
  tyto_tensor *out[CF_GRAD_MAX_OUT];
  char out_name[CF_GRAD_MAX_OUT][32];
  /* Parameter updates (tyto_program_options) and how many runs to make
   * before the outputs are read (0 means 1). */
  uint32_t n_upd;
  tyto_tensor *upd_param[2], *upd_value[2];
  int runs;
} cf_grad_graph;

typedef struct cf_grad_case {
  const char *group; /* the table's op column: "elementwise", "conv2d" */
  const char *name;
  void (*build)(cf_grad_graph *G);
} cf_grad_case;

/* The case table (static storage) and its length. */
const cf_grad_case *cf_grad_cases(size_t *n);

/* Whether `group` names a group of the case table. */
int cf_grad_group_known(const char *group);

/* Runs grad mode: plugin and reference are .so paths, only_group NULL or a
 * group, dtypes[d] runs dtype d (f32, f64, f16, bf16), listed: only those
 * the device lists. The 16-bit dtypes are not run: a row per device says
 * why. Prints the table or (json) the JSON report. Returns the exit status
 * (see tyto-conform.c). */
int cf_grad_main(const char *plugin, const char *reference,
                 const char *only_group, int json, const int dtypes[4],
                 int listed);

#endif
