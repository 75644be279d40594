/*
 * The geometry of convolutions and pooling (CONV2D, its two derivatives,
 * MAX_POOL2D, AVG_POOL2D and their derivatives) as every plugin checks it:
 * operand counts, attributes, shapes and the output extent, with one set of
 * messages. What a device adds (its workspace, its index widths) stays in
 * the plugin. Depends on the plugin ABI header and the C library only.
 */
#ifndef TYTO_PLUGINS_GEOMETRY_H
#define TYTO_PLUGINS_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

/* The operands of one op as a shared check sees them: the op, the layouts
 * as the plugin read them (its own struct size), the integer and real
 * attributes and how messages write shapes. */
typedef struct tpc_operands {
  uint32_t op;
  uint32_t n_in, n_out;
  const tyto_plugin_layout *in[TYTO_PLUGIN_FUSED_MAX_IO];
  const tyto_plugin_layout *out[TYTO_PLUGIN_FUSED_MAX_IO];
  uint32_t n_iattrs;
  const int64_t *iattrs;
  uint32_t n_fattrs;
  const double *fattrs;
  int tight; /* shapes print "[2,3,4]" (the CPU plugin), else "[2, 3, 4]" */
} tpc_operands;

/* Fills *a for descriptor d (its op and attributes) and the
 * plugin's copies of the layouts: n_in of them from `in` on, each in_step
 * bytes after the last (the layout member of the plugin's per-operand
 * struct and sizeof that struct), and so for the outputs; counts above
 * TYTO_PLUGIN_FUSED_MAX_IO are clamped. `tight` as in tpc_operands. */
void tpc_operands_init(tpc_operands *a, const tyto_plugin_op_desc *d,
                       uint32_t n_in, const tyto_plugin_layout *in,
                       size_t in_step, uint32_t n_out,
                       const tyto_plugin_layout *out, size_t out_step,
                       int tight);

/* The layout of role index r: inputs first, then outputs. */
const tyto_plugin_layout *tpc_operand(const tpc_operands *a, int r);

/* A convolution's or pooling's geometry. x is the input [N, C, H, W], w the
 * weight [O, C/G, KH, KW] (none for pooling, where O = C, dilations and G
 * are 1), y the output [N, O, OH, OW] and t a tensor shaped as x
 * (MAX_POOL2D_BACKWARD's and AVG_POOL2D_BACKWARD's output,
 * MAX_POOL2D_SELECT's second input). */
typedef struct tpc_conv {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, G;
  /* Pooling: the cells that cover rows -ph .. H - 1 (columns -pw .. W - 1)
   * when the windows do not overlap; 0 for a convolution. */
  int64_t CH, CW;
  int has_bias; /* CONV2D's third input */
  /* The role indices (inputs first, then the output; -1 when the op has
   * no such tensor) and the names messages give x, w and y ("dx (the
   * output)", "dw (the output)", "dy" for the derivatives). */
  int x, w, y, t;
  const char *xname, *wname, *yname;
} tpc_conv;

/* Whether op is a pooling op (MAX_POOL2D, AVG_POOL2D and their
 * derivatives) rather than a convolution. */
int tpc_pool_op(uint32_t op);
/* Whether op is a convolution (CONV2D and its two derivatives). */
int tpc_conv_op(uint32_t op);

/* Checks a convolution or pooling op (a->op one of the eight above) as
 * the CPU plugin always has (same order, same messages, each beginning
 * with the op's name) and fills *g.
 * Returns 0, or TYTO_PLUGIN_ERR_INVALID_ARGUMENT with the reason in why
 * (always terminated; 1 KiB holds every message). *g is filled as far as
 * the check went. */
int tpc_conv_check(const tpc_operands *a, tpc_conv *g, char *why,
                   size_t why_size);

#endif /* TYTO_PLUGINS_GEOMETRY_H */
