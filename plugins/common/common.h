/*
 * Pure helpers every plugin of this tree links (libtyto_plugin_common.a):
 * op and dtype names, layout arithmetic, the elementwise op table and
 * fused-program decoding. They depend on the plugin ABI header and the C
 * library only, never on libtyto, so a plugin stays loadable on its own.
 * Names carry the prefix tpc_ (tyto plugin common); the objects are built
 * -fvisibility=hidden so nothing here leaks from a plugin's .so.
 */
#ifndef TYTO_PLUGINS_COMMON_H
#define TYTO_PLUGINS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

/* ---- names (names.c) ---------------------------------------------------- */

/* The op's name as in sdk/docs/ops.md ("add", "conv2d"); "unknown op". */
const char *tpc_op_name(uint32_t op);
/* "f32", "f64", ...; "unknown dtype". */
const char *tpc_dtype_name(uint32_t dtype);
/* Bytes per element, 0 for an unknown dtype. */
size_t tpc_dtype_size(uint32_t dtype);

/* ---- environment (names.c) ---------------------------------------------- */

/* A plugin's on/off environment variable, as libtyto reads its own: 1 for
 * 1, on, yes or true (any case); 0 for 0, off, no, false, empty or unset;
 * any other value counts as on (libtyto refuses the variables it knows of
 * when a context is created, so such a value seldom gets this far). */
int tpc_env_on(const char *name);

/* ---- ABI arrays ---------------------------------------------------------- */

/* Entry i of an array of boundary structs (the hardware offer, an op's
 * layouts, launch bindings), stepped by the first entry's struct_size as
 * plugin.h's "Arrays" asks. NULL for a NULL array, and for i > 0 when that
 * struct_size is too small to be a stride. Inline, so that a file built on
 * its own (opencl/pci.c in its unit test) may use it without this library. */
static inline const void *tpc_at(const void *array, uint32_t i) {
  if (array == NULL || i == 0)
    return array;
  size_t step = *(const size_t *)array;
  return step < sizeof(size_t) ? NULL : (const char *)array + (size_t)i * step;
}

/* ---- layouts (layout.c) ------------------------------------------------- */

/* *r = a + b, *r = a * b; 0 when it would overflow. */
int tpc_add_ok(int64_t a, int64_t b, int64_t *r);
int tpc_mul_ok(int64_t a, int64_t b, int64_t *r);

/* "[2, 3, 4]" into buf (always terminated). */
void tpc_format_shape(const tyto_plugin_layout *l, char *buf, size_t size);
/* The same for `rank` extents (at most TYTO_PLUGIN_MAX_RANK) given
 * alone; returns buf. */
const char *tpc_format_extents(const int64_t *shape, uint32_t rank, char *buf,
                               size_t size);
/* Whether l is dense row-major (unit dimensions may have any stride). */
int tpc_dense(const tyto_plugin_layout *l);

/* As tpc_format_shape or, tight, "[2,3,4]" (the CPU plugin's messages). */
void tpc_format_shape_as(const tyto_plugin_layout *l, int tight, char *buf,
                         size_t size);

/* Element count *n and the range [*lo, *hi] of element indices `l`
 * reaches (offset included; meaningful when *n > 0). Returns 0 and a
 * reason in `why` (naming the layout `which`) for a rank above 8, a
 * negative extent or 64-bit overflow. */
int tpc_layout_extent(const tyto_plugin_layout *l, const char *which,
                      int64_t *n, int64_t *lo, int64_t *hi, char *why,
                      size_t why_size);

/* ---- elementwise ops and fused programs (eltwise.c) --------------------- */

/* An elementwise op as a C expression of x (y, z) and pa (LEAKY_RELU's
 * slope, ELU's alpha) in the element type T, valid in OpenCL C and CUDA
 * C++ alike. The semantics are the CPU plugin's (cpu/eltwise_ops.h): SIGN
 * keeps the sign of a zero and propagates NaN; RELU, LEAKY_RELU, ELU, MAX
 * and MIN propagate NaN; comparisons with NaN are false (1 only for NE);
 * ROUND takes halves away from zero; FMA rounds once. */
typedef struct tpc_eltop {
  uint32_t op;
  int arity;
  const char *expr;
} tpc_eltop;

/* The table, in op order; n_out gets its length. */
const tpc_eltop *tpc_eltops(size_t *n_out);
/* The entry of op, or NULL for an op that is not elementwise. */
const tpc_eltop *tpc_eltop_find(uint32_t op);
/* Whether op takes pa (LEAKY_RELU, ELU). */
int tpc_eltop_has_param(uint32_t op);

/* An instruction of a fused program as plugins keep it (the caller's array
 * is gone after prepare). */
typedef struct tpc_instr {
  uint32_t op, arg[3];
  double attr;
  /* The value's dtype (ABI 1.5): as the program gave it for CAST and CONST
   * after tpc_fused_read (TPC_DTYPE_UNSET when its struct stops before
   * the field), for every instruction after tpc_fused_types. */
  uint32_t dtype;
} tpc_instr;

#define TPC_DTYPE_UNSET UINT32_MAX

/* Reads and checks the fused program `blob` of an op with n_in inputs and
 * n_out outputs: every operand names an earlier value, every output is
 * written exactly once, at most max_instrs instructions. On success
 * returns 0 with *out (malloc'd, the caller frees it) and *n. Otherwise
 * returns the tyto_plugin_code (INVALID_ARGUMENT, UNSUPPORTED for a program
 * over max_instrs, OUT_OF_MEMORY) with a message in why that begins
 * "fused: " and names `plugin` where it matters. */
int tpc_fused_read(const void *blob, size_t blob_size, uint32_t n_in,
                   uint32_t n_out, uint32_t max_instrs, const char *plugin,
                   tpc_instr **out, uint32_t *n, char *why, size_t why_size);

/* Gives every value of a program read by tpc_fused_read its dtype
 * (fi[i].dtype; an OUTPUT gets its output's) and checks them against the
 * op's layouts d: an INPUT's is its input's, a CAST's and a CONST's are the
 * instruction's own (a CONST of an older host: output 0's), any other op's
 * operands share one dtype, which is its value's, and every OUTPUT writes
 * a value of its output's dtype. A CAST converts between F32, F64, F16 and
 * BF16. Returns 0, or TYTO_PLUGIN_ERR_INVALID_ARGUMENT with a message in
 * why naming the instruction ("fused: instruction 4 (add) reads values of
 * dtypes f32 and bf16; convert with CAST first"). */
int tpc_fused_types(tpc_instr *fi, uint32_t n, const tyto_plugin_op_desc *d,
                    char *why, size_t why_size);

/* Whether a program has a CAST or operands of more than one dtype (after
 * tpc_fused_types): plugins that run one dtype per program refuse it. */
int tpc_fused_mixed(const tpc_instr *fi, uint32_t n);

/* The arity of instruction op `op` in a fused program: 1 for CAST and the
 * unary ops, 2, 3; 0 for INPUT, CONST, OUTPUT and unknown codes. */
int tpc_fused_arity(uint32_t op);

/* live[i] (n bytes): whether value i reaches an OUTPUT (OUTPUTs count). */
void tpc_fused_live(const tpc_instr *fi, uint32_t n, unsigned char *live);

/* The program of op o run alone, "load the inputs, apply o, store output
 * 0", into fi (room for TPC_FUSED_SINGLE_MAX instructions) with its live[]
 * as tpc_fused_live gives it; returns the instruction count. o->op's
 * arguments are (0, 1, 2) and its attr 0. */
#define TPC_FUSED_SINGLE_MAX 5
uint32_t tpc_fused_single(const tpc_eltop *o, tpc_instr *fi,
                          unsigned char *live);

/* ---- reductions (reduce_src.c) ------------------------------------------ */

/* Kernel-source macros for the ten reductions (SUM .. NORM_L2): a partial
 * state is (a, b, i) of types T, T and a 64-bit index; for each op X, X_I
 * makes the empty state, X_E folds element v of reduced index r, X_M
 * merges the state (a2, b2, i2) and X_F is the result over `count`
 * elements; RED_OPS(X) lists (name, op code) and RED_CASE_{I,E,M,F} make
 * switch cases. Needs T, INFINITY, NAN, fabs, exp, log, sqrt, isinf. */
extern const char tpc_reduce_folds[];

/* ---- integer dtypes (ABI 1.6) -------------------------------------------- */

/* Whether dtype is I32 or I64. */
static inline int tpc_dtype_int(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_I32 || dtype == TYTO_PLUGIN_DTYPE_I64;
}

/* The elementwise ops (NEG, ABS, SIGN, ADD, SUB, MUL, MAX, MIN, the
 * comparisons, WHERE) and the reductions (SUM, MAX_REDUCE, MIN_REDUCE)
 * sdk/docs/ops.md ("Integer dtypes") defines on I32 and I64, each of its
 * operands in one integer dtype. */
static inline int tpc_int_eltwise(uint32_t op) {
  switch (op) {
  case TYTO_PLUGIN_OP_NEG:
  case TYTO_PLUGIN_OP_ABS:
  case TYTO_PLUGIN_OP_SIGN:
  case TYTO_PLUGIN_OP_ADD:
  case TYTO_PLUGIN_OP_SUB:
  case TYTO_PLUGIN_OP_MUL:
  case TYTO_PLUGIN_OP_MAX:
  case TYTO_PLUGIN_OP_MIN:
  case TYTO_PLUGIN_OP_EQ:
  case TYTO_PLUGIN_OP_NE:
  case TYTO_PLUGIN_OP_LT:
  case TYTO_PLUGIN_OP_LE:
  case TYTO_PLUGIN_OP_GT:
  case TYTO_PLUGIN_OP_GE:
  case TYTO_PLUGIN_OP_WHERE: return 1;
  default: return 0;
  }
}
static inline int tpc_int_reduce(uint32_t op) {
  return op == TYTO_PLUGIN_OP_SUM || op == TYTO_PLUGIN_OP_MAX_REDUCE ||
         op == TYTO_PLUGIN_OP_MIN_REDUCE;
}

/* v converted to I32 or I64 as CAST converts (ops.md): truncated toward
 * zero, saturated at the dtype's limits, NaN giving 0. The limits are
 * compared first: C leaves the conversion of a value out of range
 * undefined, and INT64_MAX is no double (it rounds to 2^63). Inline: the
 * CPU's conversion loops call it per element, with dtype a constant. */
static inline int64_t tpc_int_of_f64(uint32_t dtype, double v) {
  const double lim =
      dtype == TYTO_PLUGIN_DTYPE_I32 ? 2147483648.0 : 9223372036854775808.0;
  const int64_t hi = dtype == TYTO_PLUGIN_DTYPE_I32 ? INT32_MAX : INT64_MAX;
  if (v != v)
    return 0;
  if (v >= lim)
    return hi;
  if (v <= -lim)
    return -hi - 1;
  return (int64_t)v;
}

#endif /* TYTO_PLUGINS_COMMON_H */
