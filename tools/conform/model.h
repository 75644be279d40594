/*
 * The host model of sdk/docs/ops.md: what every op gives, NaN, infinities,
 * signed zeros and subnormals included, computed on the host in double
 * and rounded to the case's dtype (CAST's: to its output's, bit for bit by
 * the reference converter of fmt.h). tyto-conform checks its special-value
 * cases (specials.h) against it, so that a device (the CPU reference
 * included) is held to the document, not to another device.
 */
#ifndef TYTO_CONFORM_MODEL_H
#define TYTO_CONFORM_MODEL_H

#include "catalogue.h"

/* What c's outputs must be: each output's whole storage (elements no
 * output position covers keep their initial -777), and per element
 * whether the sign of a zero is left open. */
typedef struct cf_expect {
  double *want[CF_MAX_OUT];
  unsigned char *free_sign[CF_MAX_OUT];
} cf_expect;

/* Computes x from c's inputs, in[i] being input i's whole storage as
 * doubles (values of its dtype). With ftz, subnormal inputs read as zeros
 * of their sign and subnormal results become zeros (the flush to zero
 * ops.md allows, except for ops that only move values, c->exact). With
 * via_f32, results of a 16-bit dtype are rounded to f32 first and then to
 * the dtype (what a device computing in f32 gives; without, the exact
 * value rounded once: ops.md allows both), but for CAST, which rounds
 * once. Returns 0, or -1 when out of memory or when the op has no
 * model. */
int cf_model_run(const cf_case *c, double *const *in, int ftz, int via_f32,
                 cf_expect *x);
void cf_expect_free(cf_expect *x);

/* v rounded once to dtype (cf_fmt_round: to nearest, ties to even, out of
 * range to an infinity). */
double cf_round(uint32_t dtype, double v);

/* v rounded to dtype as c's model rounds (through f32 first for a 16-bit
 * dtype when c->model_via_f32). */
double cf_model_round(const cf_case *c, uint32_t dtype, double v);

/* v, or a zero of v's sign when v is below the smallest normal of the
 * computation of dtype: f64's for f64, f32's for f32 and the 16-bit
 * formats (computed in f32: a bf16 subnormal is an f32 one, an f16
 * subnormal an f32 normal, never flushed). */
double cf_flush(uint32_t dtype, double v);

/* An elementwise op (NEG .. ROUND, CAST, ADD .. GE, WHERE, FMA) on
 * operands x, y, z of dtype; attr: LEAKY_RELU's slope, ELU's alpha. The
 * result is rounded once to dtype (CAST: to dtype from x). */
double cf_model_eltwise(uint32_t op, uint32_t dtype, double x, double y,
                        double z, double attr);

/* model_nn.c: CONV2D, MAX_POOL2D, AVG_POOL2D and their derivatives. out[]
 * are the outputs' storages (filled with -777 by the caller), free_sign
 * too. Returns -1 when the op is not one of these. */
int cf_model_nn(const cf_case *c, double *const *in, double **out,
                unsigned char **free_sign);

/* The storage offset of element idx of l. */
int64_t cf_layout_at(const tyto_plugin_layout *l, const int64_t *idx);

/* Steps idx through shape[rank] in row-major order; 0 once past the end. */
int cf_index_next(uint32_t rank, const int64_t *shape, int64_t *idx);

/* Elements of a shape. */
int64_t cf_shape_count(uint32_t rank, const int64_t *shape);

#endif
