/*
 * The dtype table: one row per tyto_dtype with everything the core needs to
 * know about it (size, names, the plugin ABI's number, the dtype arithmetic
 * runs in, and how one element is read and written on the host). Code that
 * would otherwise branch on "f32 or f64" asks the table instead, so a new
 * dtype is one new row. Internal to the core; the public queries are
 * tyto_dtype_name() and tyto_dtype_size() in <tyto/graph.h>.
 */
#ifndef TYTO_GRAPH_DTYPE_H
#define TYTO_GRAPH_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/graph.h>

typedef struct dtype_info {
  tyto_dtype dtype;
  const char *name;    /* "bf16", as tyto writes it in messages */
  const char *st_name; /* "BF16", the safetensors (and PyTorch) name */
  size_t size;         /* bytes of one stored element */
  int integer;         /* a two's-complement integer (i32, i64) */
  uint32_t abi;        /* its TYTO_PLUGIN_DTYPE_* */
  /* The dtype arithmetic on it runs in: itself for f32, f64 and the
   * integers, f32 for the 2-byte formats, which are storage formats only. */
  tyto_dtype arith;
  /* Element i of the array at p as a double: exactly, but for an i64
   * beyond 2^53 (rounded to nearest). */
  double (*load)(const void *p, size_t i);
  /* Stores v into element i of the array at p, as TYTO_OP_CAST converts:
   * to a floating dtype rounded to nearest (ties to even), NaN staying NaN
   * (quiet, sign kept), overflow becoming inf; to an integer dtype
   * truncated toward zero and saturated, NaN giving 0. */
  void (*store)(void *p, size_t i, double v);
  /* The format, as <float.h> gives it for float: significand digits
   * (hidden bit included), and the exponents of the least and greatest
   * normal binades (FLT_MIN_EXP, FLT_MAX_EXP). An integer's digits are
   * its value bits (31, 63), its exponents 0. */
  int digits, min_exp, max_exp;
} dtype_info;

/* The row of d, or NULL when d is not a tyto_dtype. */
const dtype_info *dtype_info_of(tyto_dtype d);

/* The row whose ABI dtype is abi (TYTO_PLUGIN_DTYPE_*), or NULL for an ABI
 * dtype the graph has no row for (u8). */
const dtype_info *dtype_info_of_abi(uint32_t abi);

/* Whether host code can compute in d directly: a floating dtype whose
 * stored type is its arithmetic type (f32, f64), as host evaluation,
 * gradient checks and optimisers need. */
int dtype_host_arith(tyto_dtype d);

/* Whether d is i32 or i64 (0 for an unknown value). */
int dtype_is_int(tyto_dtype d);

/* Whether a value given as a double is one integer dtype d holds exactly
 * through a double: a whole number in its range, at most 2^53 in
 * magnitude. Every value for a floating d (it is rounded). */
int dtype_takes_value(tyto_dtype d, double v);

/* The largest index d holds, with every whole number below it: 2^digits
 * for a floating dtype (256 in bf16), 2^bits - 1 for an integer one. */
double dtype_index_top(tyto_dtype d);

/* The dtype to hold indices 0 .. n - 1 of a computation in d: d itself
 * when it holds them all exactly (any device runs it), else i64. */
tyto_dtype dtype_index_for(tyto_dtype d, int64_t n);

/* Whether every value of dtype d (subnormals, infinities and NaN
 * included) is exactly a value of dtype w: a cast from d to w and back
 * gives what it started from. f16 and bf16 in f32 and f64, f32 in f64,
 * each in itself; never bf16 in f16 or f16 in bf16. i32 in i64 and f64;
 * no floating dtype in an integer one. */
int dtype_holds(tyto_dtype w, tyto_dtype d);

/* The number of rows, for loops over every dtype (0 .. dtype_count()-1 are
 * all valid, in enum order). */
int dtype_count(void);

/* The 2-byte formats, bit for bit (IEEE 754 binary16 and bfloat16). */
uint16_t dtype_f16_from_double(double v);
double dtype_f16_to_double(uint16_t h);
uint16_t dtype_bf16_from_double(double v);
double dtype_bf16_to_double(uint16_t b);

#endif
