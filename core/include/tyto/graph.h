/*
 * Computation graphs: tensors, their dtypes, shapes and kinds, the ops that
 * make them, queries, and export (Graphviz dot, text).
 *
 * A tyto_graph is an arena that owns every tensor built in it: tensors never
 * move and are freed with the graph. Tensors are handles (tyto_tensor *);
 * the constructors are in <tyto/ops.h>.
 *
 * Errors are sticky, as in cairo. Building an op checks shapes and dtypes at
 * once; a mistake makes the graph's status an error holding a message that
 * names the op and the shapes ("matmul: inner dimensions differ: [64,784] x
 * [128,10]"), and the op returns the graph's error tensor. Every op given an
 * error tensor returns the error tensor again without a new message, so user
 * code can chain ops and check tyto_graph_status() once. Ops on valid tensors
 * keep working after an error (the graph stays inspectable), but the status
 * and message stay those of the first failure.
 *
 * Shapes are written [64,784]; rank 0 is []. Axes may be negative, counting
 * from the end as in NumPy (-1 is the last axis).
 *
 * A graph and its tensors are used by one thread at a time; different
 * graphs are independent.
 */
#ifndef TYTO_GRAPH_H
#define TYTO_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The highest rank a tensor may have. */
#define TYTO_MAX_RANK 8

typedef struct tyto_graph tyto_graph;
typedef struct tyto_tensor tyto_tensor;

/* Element types. The values equal the plugin ABI's TYTO_PLUGIN_DTYPE_*.
 * F16 (IEEE 754 binary16) and BF16 (bfloat16) are storage formats: 2 bytes
 * an element, with arithmetic in f32 where a device runs them. I32 and I64
 * are two's-complement integers for indices and counts: the results of
 * tyto_argmax_as(), the indices of gather, scatter_add and one_hot, class
 * labels. Integer tensors take the ops that make sense on whole numbers
 * (sources, casts, layout, indexing, add, sub, mul, neg, abs, min, max,
 * comparisons, where, sum, reduce_max, reduce_min), wrapping on overflow;
 * any other op says "exp: input 1 is i64; exp takes floating-point tensors
 * (tyto_cast it to f32 first)". They carry no derivative.
 * Graphs of every dtype can be built; compiling one needs a device whose
 * plugin runs its dtype, and the host-side helpers (gradient checks,
 * initialisers, optimisers, datasets) handle f32 and f64 only and say so. */
typedef enum tyto_dtype {
  TYTO_F32 = 0,
  TYTO_F64 = 1,
  TYTO_F16 = 2,
  TYTO_BF16 = 3,
  TYTO_I32 = 4,
  TYTO_I64 = 5
} tyto_dtype;

/* What a tensor is. */
typedef enum tyto_kind {
  TYTO_KIND_INPUT = 0,     /* fed at each run */
  TYTO_KIND_PARAMETER = 1, /* persistent state, lives on its device */
  TYTO_KIND_CONSTANT = 2,  /* known when the graph is built */
  TYTO_KIND_COMPUTED = 3,  /* the result of an op */
  TYTO_KIND_ERROR = 4      /* the graph's error tensor */
} tyto_kind;

/* Graph-level ops. Attributes are int64 (iattrs) and double (fattrs)
 * arrays whose layout per op is given here; axes are stored normalised
 * (0 <= axis < rank). Every op's output has the dtype of its inputs,
 * except CAST's, ARGMAX/ARGMIN's (an index dtype may be asked for) and
 * ONE_HOT's of integer indices; the indices of GATHER, SCATTER_ADD and
 * ONE_HOT may be integers whatever the data's dtype.
 * Append-only: a value never changes meaning. */
typedef enum tyto_op {
  TYTO_OP_ERROR = 0, /* the error tensor */

  /* Sources, no inputs. CONSTANT: values in tyto_tensor_data(). FULL:
   * fattrs[0] = the value of every element. RANDOM_*: iattrs[0] = seed (a
   * uint64 stored as int64), iattrs[1] = Philox stream offset; UNIFORM
   * fattrs = low, high; NORMAL fattrs = mean, stddev; BERNOULLI fattrs[0]
   * = p. */
  TYTO_OP_INPUT = 1,
  TYTO_OP_PARAMETER = 2,
  TYTO_OP_CONSTANT = 3,
  TYTO_OP_FULL = 4,
  TYTO_OP_RANDOM_UNIFORM = 5,
  TYTO_OP_RANDOM_NORMAL = 6,
  TYTO_OP_RANDOM_BERNOULLI = 7,

  /* Elementwise unary, 1 input, same shape. LEAKY_RELU: fattrs[0] =
   * negative slope; ELU: fattrs[0] = alpha. */
  TYTO_OP_NEG = 16,
  TYTO_OP_ABS,
  TYTO_OP_SIGN,
  TYTO_OP_EXP,
  TYTO_OP_LOG,
  TYTO_OP_LOG1P,
  TYTO_OP_EXPM1,
  TYTO_OP_SQRT,
  TYTO_OP_RSQRT,
  TYTO_OP_SQUARE,
  TYTO_OP_RECIPROCAL,
  TYTO_OP_SIN,
  TYTO_OP_COS,
  TYTO_OP_TAN,
  TYTO_OP_ASIN,
  TYTO_OP_ACOS,
  TYTO_OP_ATAN,
  TYTO_OP_SINH,
  TYTO_OP_COSH,
  TYTO_OP_TANH,
  TYTO_OP_ASINH,
  TYTO_OP_ACOSH,
  TYTO_OP_ATANH,
  TYTO_OP_SIGMOID,
  TYTO_OP_RELU,
  TYTO_OP_LEAKY_RELU,
  TYTO_OP_ELU,
  TYTO_OP_SOFTPLUS,
  TYTO_OP_ERF,
  TYTO_OP_FLOOR,
  TYTO_OP_CEIL,
  TYTO_OP_ROUND, /* halves away from zero, as C's round() */

  /* Conversion, 1 input, same shape: the input's value rounded to the
   * node's dtype (to nearest, ties to even; NaN, infinities and signed
   * zeros kept; beyond the range, an infinity). To an integer dtype: the
   * value truncated toward zero, saturated at the dtype's limits, NaN
   * giving 0; i64 to i32, the low 32 bits (as C and PyTorch wrap), i32
   * to i64 sign-extended. tyto_cast in <tyto/ops.h>. */
  TYTO_OP_CAST = 48,

  /* Elementwise binary, 2 inputs broadcast by NumPy rules. Comparisons
   * give 1 or 0 in the inputs' dtype. On integers ADD, SUB, MUL (and
   * NEG, ABS) wrap modulo 2^bits. */
  TYTO_OP_ADD = 64,
  TYTO_OP_SUB,
  TYTO_OP_MUL,
  TYTO_OP_DIV,
  TYTO_OP_POW,
  TYTO_OP_MAX,
  TYTO_OP_MIN,
  TYTO_OP_ATAN2,
  TYTO_OP_EQ,
  TYTO_OP_NE,
  TYTO_OP_LT,
  TYTO_OP_LE,
  TYTO_OP_GT,
  TYTO_OP_GE,

  /* Elementwise ternary, 3 inputs broadcast together. WHERE: (cond, a, b)
   * gives a where cond != 0, else b. FMA: (a, b, c) gives a*b + c. */
  TYTO_OP_WHERE = 96,
  TYTO_OP_FMA,

  /* Reductions, 1 input. iattrs[0] = keepdims (0 or 1), then the reduced
   * axes, ascending. ARGMAX/ARGMIN reduce one axis and give the index
   * (the first, on ties) in the node's dtype: the input's (floating) one,
   * or i32/i64 (tyto_argmax_as). NORM_L1 = sum |x|, NORM_L2 =
   * sqrt(sum x^2). */
  TYTO_OP_SUM = 128,
  TYTO_OP_MEAN,
  TYTO_OP_REDUCE_MAX,
  TYTO_OP_REDUCE_MIN,
  TYTO_OP_PROD,
  TYTO_OP_ARGMAX,
  TYTO_OP_ARGMIN,
  TYTO_OP_LOG_SUM_EXP,
  TYTO_OP_NORM_L1,
  TYTO_OP_NORM_L2,

  /* Matrix product: inputs [..., m, k] and [..., k, n] (batch axes
   * broadcast), output [..., m, n]. iattrs[0], iattrs[1]: the last two
   * axes of input 0, input 1 are transposed first. */
  TYTO_OP_MATMUL = 160,

  /* Layout. RESHAPE: the output shape says it all. PERMUTE: iattrs = the
   * permutation (output axis i is input axis iattrs[i]). BROADCAST_TO:
   * the output shape. SLICE: iattrs = (start, step) for each axis, the start
   * clamped into range (the output extent is the count). CONCAT: n inputs,
   * iattrs[0] = axis. PAD: iattrs = mode (0 constant, 1 reflect) then (before,
   * after) per axis; fattrs[0] = the constant. TILE: iattrs = repetitions per
   * output axis (the input is first given leading 1-extents up to the output's
   * rank). FLIP: iattrs = the flipped axes, ascending. SLICE_BACKWARD: (g)
   * placed into zeros of the output shape; iattrs = (start, step) for each
   * axis as SLICE's (g's element i lands at start + i*step). */
  TYTO_OP_RESHAPE = 192,
  TYTO_OP_PERMUTE,
  TYTO_OP_BROADCAST_TO,
  TYTO_OP_SLICE,
  TYTO_OP_CONCAT,
  TYTO_OP_PAD,
  TYTO_OP_TILE,
  TYTO_OP_FLIP,
  TYTO_OP_SLICE_BACKWARD,

  /* Indexing. GATHER: (data, indices), iattrs[0] = axis; output
   * data[:axis] + indices + data[axis+1:] (NumPy's take). SCATTER_ADD:
   * (base, indices, updates), iattrs[0] = axis, updates shaped as GATHER's
   * output; output shaped as base. ONE_HOT: (indices), iattrs[0] = depth;
   * output [..., depth]. Indices are i32 or i64, or whole numbers in the
   * data's floating dtype (ONE_HOT: the output's). */
  TYTO_OP_GATHER = 224,
  TYTO_OP_SCATTER_ADD,
  TYTO_OP_ONE_HOT,

  /* Neural. SOFTMAX, LOG_SOFTMAX: iattrs[0] = axis. CONV2D: inputs x
   * [N,C,H,W], w [O,C/groups,KH,KW] and optionally bias [O]; iattrs =
   * stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups.
   * MAX_POOL2D, AVG_POOL2D: iattrs = kernel_h, kernel_w, stride_h,
   * stride_w, pad_h, pad_w (AVG: padding not counted).
   * The derivative ops: CONV2D_BACKWARD_DATA: (dy [N,O,OH,OW], w) gives
   * dx [N,C,H,W]; iattrs = CONV2D's seven, then H, W. CONV2D_BACKWARD_FILTER:
   * (x, dy) gives dw [O,C/groups,KH,KW]; iattrs = CONV2D's seven, then KH,
   * KW. MAX_POOL2D_BACKWARD: (x, dy [N,C,OH,OW]) gives [N,C,H,W]: each dy
   * element added at the first maximum (row-major) of its window of x.
   * MAX_POOL2D_SELECT: (x, t [N,C,H,W]) gives [N,C,OH,OW]: t at that
   * position (the JVP of MAX_POOL2D; the two are each other's adjoint).
   * AVG_POOL2D_BACKWARD: (dy) gives [N,C,H,W]; iattrs = AVG_POOL2D's six,
   * then H, W. Pool iattrs as MAX/AVG_POOL2D. */
  TYTO_OP_SOFTMAX = 256,
  TYTO_OP_LOG_SOFTMAX,
  TYTO_OP_CONV2D,
  TYTO_OP_MAX_POOL2D,
  TYTO_OP_AVG_POOL2D,
  TYTO_OP_CONV2D_BACKWARD_DATA,
  TYTO_OP_CONV2D_BACKWARD_FILTER,
  TYTO_OP_MAX_POOL2D_BACKWARD,
  TYTO_OP_MAX_POOL2D_SELECT,
  TYTO_OP_AVG_POOL2D_BACKWARD,

  /* Linear algebra on the last two axes, batched over the rest. DET and
   * LOGDET (log |det|) drop the last two axes. SOLVE: (A, B) gives X with
   * A X = B. CHOLESKY: lower factor. QR: iattrs[0] = 0 for Q [..., m, k],
   * 1 for R [..., k, n], k = min(m, n) (reduced); the two nodes of one
   * tyto_qr() call share their input and may share a kernel.
   * TRIANGULAR_SOLVE: (A [..., n, n], B [..., n, k]), batch axes broadcast,
   * gives X with op(A) X = B reading only one triangle of A; iattrs =
   * lower (1: lower triangle, 0: upper), transpose (op(A) = A^T),
   * unit_diagonal (the diagonal is taken as ones). */
  TYTO_OP_INV = 288,
  TYTO_OP_DET,
  TYTO_OP_LOGDET,
  TYTO_OP_SOLVE,
  TYTO_OP_CHOLESKY,
  TYTO_OP_QR,
  TYTO_OP_TRIANGULAR_SOLVE,

  /* Made by the graph passes, never by user code (and not differentiable:
   * differentiate first, then compile). FUSED: an elementwise expression
   * over its inputs, each broadcast to its shape; iattrs = the number of
   * outputs, then five per instruction (op, arg0, arg1, arg2, as
   * tyto_plugin_fused_instr in <tyto/plugin.h>, and the tyto_dtype of the
   * value it defines: an INPUT's is its input's, a CONST's or an op's its
   * result's, an OUTPUT's its output's), fattrs = one attr per
   * instruction. The inputs and outputs may differ in dtype when the
   * program converts between them with CAST instructions (every other
   * instruction's operands share its dtype). Its value is output 0, of
   * the node's dtype. FUSED_OUTPUT: (a FUSED node), iattrs[0] = the output
   * index (>= 1) it stands for; its dtype is that output's. */
  TYTO_OP_FUSED = 320,
  TYTO_OP_FUSED_OUTPUT,

  /* Graph-only: never lowered to a plugin op. STOP_GRADIENT: (x), x's
   * value, with derivative zero in every mode and at every order
   * (tyto_stop_gradient in <tyto/ad.h>); compiled as x itself.
   * CUSTOM_DERIVATIVE: (y, x1 .. xn), y's value, differentiated with the
   * rule iattrs[0] of its graph instead of through y's own sub-graph
   * (tyto_custom_derivative in <tyto/ad.h>); compiled as y itself.
   * REPLICA_SUM: (x), x summed over the replicas of a data-parallel step
   * (tyto_replica_sum in <tyto/parallel.h>): iattrs[0] =
   * TYTO_REPLICA_SUM_PLAIN, y = sum over replicas r of x_r, or
   * TYTO_REPLICA_SUM_SHARES, its transpose as AD needs it, y = (sum over
   * r of w_r x_r) / w (w_r: replica r's share of the loss, w this
   * replica's); compiled as x itself outside data-parallel training. */
  TYTO_OP_STOP_GRADIENT = 352,
  TYTO_OP_CUSTOM_DERIVATIVE,
  TYTO_OP_REPLICA_SUM
} tyto_op;

/* TYTO_OP_REPLICA_SUM's iattrs[0]. */
enum { TYTO_REPLICA_SUM_PLAIN = 0, TYTO_REPLICA_SUM_SHARES = 1 };

/* Short lower-case names: "f32", "f64", "f16", "bf16", "i32", "parameter",
 * "matmul", "reduce_max". Never NULL ("?" for an unknown value). */
TYTO_API const char *tyto_dtype_name(tyto_dtype dtype);
/* Bytes of one stored element (4, 8, 2, 2, 4, 8); 0 for a value that is
 * not a tyto_dtype, so that callers can check a dtype with it. */
TYTO_API size_t tyto_dtype_size(tyto_dtype dtype);
/* 1 for TYTO_I32 and TYTO_I64, 0 otherwise (unknown values included). */
TYTO_API int tyto_dtype_is_integer(tyto_dtype dtype);
TYTO_API const char *tyto_kind_name(tyto_kind kind);
TYTO_API const char *tyto_op_name(tyto_op op);

/* ---------------------------------------------------------------------- */
/* Graphs                                                                  */

/* A new, empty graph, or NULL when out of memory. Free it with
 * tyto_graph_free(), which frees every tensor in it. */
TYTO_API tyto_graph *tyto_graph_new(void);
TYTO_API void tyto_graph_free(tyto_graph *g); /* NULL ok */

/* TYTO_OK, or the status of the first failure (TYTO_ERR_INVALID_ARGUMENT
 * for a shape or dtype mistake, TYTO_ERR_OUT_OF_MEMORY). */
TYTO_API tyto_status tyto_graph_status(const tyto_graph *g);
/* The first failure's message, "" when none. Owned by g. */
TYTO_API const char *tyto_graph_error_message(const tyto_graph *g);

/* The graph's error tensor (kind TYTO_KIND_ERROR, op TYTO_OP_ERROR, f32,
 * rank 0, index -1). Owned by g. */
TYTO_API tyto_tensor *tyto_graph_error_tensor(tyto_graph *g);

/* Number of tensors built in g, and the i-th in creation order (which is a
 * topological order: inputs come before the tensors that use them). The
 * error tensor is not counted. NULL when i is out of range. */
TYTO_API size_t tyto_graph_size(const tyto_graph *g);
TYTO_API tyto_tensor *tyto_graph_tensor(const tyto_graph *g, size_t i);

/* ---------------------------------------------------------------------- */
/* Tensor queries. All take a non-NULL tensor; pointers are owned by its  */
/* graph and live as long as it.                                           */

TYTO_API tyto_graph *tyto_tensor_graph(const tyto_tensor *t);
/* Position in creation order; -1 for the error tensor. */
TYTO_API int64_t tyto_tensor_index(const tyto_tensor *t);
TYTO_API tyto_dtype tyto_tensor_dtype(const tyto_tensor *t);
TYTO_API int tyto_tensor_rank(const tyto_tensor *t);
/* The extents, rank of them (not NULL for rank 0; do not read past). */
TYTO_API const int64_t *tyto_tensor_shape(const tyto_tensor *t);
/* Extent of one axis (negative counts from the end); -1 when out of range. */
TYTO_API int64_t tyto_tensor_dim(const tyto_tensor *t, int axis);
/* Number of elements (1 for rank 0). */
TYTO_API int64_t tyto_tensor_numel(const tyto_tensor *t);
TYTO_API tyto_kind tyto_tensor_kind(const tyto_tensor *t);
TYTO_API tyto_op tyto_tensor_op(const tyto_tensor *t);
TYTO_API int tyto_tensor_is_error(const tyto_tensor *t);
/* The name given at creation or by tyto_tensor_set_name(); NULL if none. */
TYTO_API const char *tyto_tensor_name(const tyto_tensor *t);
/* Names a tensor (copied; NULL clears). Ignored for the error tensor. On
 * out of memory the graph's status becomes an error. */
TYTO_API void tyto_tensor_set_name(tyto_tensor *t, const char *name);

TYTO_API size_t tyto_tensor_input_count(const tyto_tensor *t);
/* The i-th input, NULL when out of range. */
TYTO_API tyto_tensor *tyto_tensor_input(const tyto_tensor *t, size_t i);
/* The op's attributes, laid out as tyto_op documents. NULL when none. */
TYTO_API size_t tyto_tensor_iattr_count(const tyto_tensor *t);
TYTO_API const int64_t *tyto_tensor_iattrs(const tyto_tensor *t);
TYTO_API size_t tyto_tensor_fattr_count(const tyto_tensor *t);
TYTO_API const double *tyto_tensor_fattrs(const tyto_tensor *t);
/* A TYTO_OP_CONSTANT's values in its dtype (float, double, or the 16-bit
 * patterns of f16 and bf16 as uint16_t), row-major;
 * NULL for every other op. */
TYTO_API const void *tyto_tensor_data(const tyto_tensor *t);

/* ---------------------------------------------------------------------- */
/* Device pins (docs/placement.md). A program compiled over several of    */
/* the context's devices puts a pinned tensor on its device and everything */
/* else where its placement policy says; a program over one device ignores */
/* pins to that device and refuses pins to any other.                      */

/* Pins t to the context's selected device `device` (an index as for
 * tyto_context_device); -1 unpins. Ignored for the error tensor; below -1
 * (or past 65534) puts t's graph in error. A pin to a device the program
 * may not use is refused by tyto_program_compile. */
TYTO_API void tyto_tensor_set_device(tyto_tensor *t, int device);
/* The device t is pinned to, or -1. */
TYTO_API int tyto_tensor_device(const tyto_tensor *t);
/* Every tensor built in g from now on is pinned to `device` (-1: none):
 * a graph scope, so that tyto_nn layers built inside it (parameters
 * included) land on that device and a model can be split by layers.
 * Returns the scope it replaces, so scopes nest:
 *   int old = tyto_graph_set_device_scope(g, 1); ... ;
 *   tyto_graph_set_device_scope(g, old); */
TYTO_API int tyto_graph_set_device_scope(tyto_graph *g, int device);
TYTO_API int tyto_graph_device_scope(const tyto_graph *g);

/* ---------------------------------------------------------------------- */
/* Export                                                                  */

/* Writes g in Graphviz dot: one node per tensor labelled "#index op\n
 * shape dtype" (a name, when set, follows the op), an edge from each input
 * to its user. Inputs are boxes, parameters filled boxes, constants
 * (and random sources) notes, computed tensors ellipses; the n_outputs
 * tensors of `outputs` (may be NULL when 0) get a double border. Fails
 * with TYTO_ERR_IO when writing fails, TYTO_ERR_INVALID_ARGUMENT for an
 * output of another graph or a NULL g or f; tyto_errmsg() says why. */
TYTO_API tyto_status tyto_graph_write_dot(const tyto_graph *g, FILE *f,
                                          size_t n_outputs,
                                          tyto_tensor *const *outputs);
/* The same into the file at path, replaced atomically (a temporary file
 * beside it, fsync, rename): an existing file is never left damaged. */
TYTO_API tyto_status tyto_graph_save_dot(const tyto_graph *g, const char *path,
                                         size_t n_outputs,
                                         tyto_tensor *const *outputs);

/* Writes one line per tensor, "%3d op dtype[shape]", then " <- #i #j" for
 * the inputs, " i=[..]" and " f=[..]" for the attributes and " 'name'";
 * e.g. "  4 add f32[64,10] <- #3 #2". A FUSED node (made by the graph
 * passes) shows its program instead of its attributes, each value with
 * its dtype: " {v0=in0 bf16; v1=cast(v0) f32; v2=relu(v1) f32; out0=v2
 * f32}". A graph in error ends with a line "error: <message>". Fails
 * with TYTO_ERR_IO when writing fails, TYTO_ERR_INVALID_ARGUMENT for a
 * NULL g or f. */
TYTO_API tyto_status tyto_graph_write_text(const tyto_graph *g, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_GRAPH_H */
