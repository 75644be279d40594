/*
 * Op constructors: each builds one tensor (or a few) in a graph, inferring
 * its shape and dtype at once.
 *
 * Rules shared by every constructor (see <tyto/graph.h> for sticky errors):
 * - The result belongs to the graph of the arguments and is owned by it.
 *   It is never NULL when a graph can be found: from `g`, or else from any
 *   non-NULL tensor argument. Only when there is neither is NULL returned.
 * - An error tensor argument gives the error tensor, with no new message.
 * - A mistake gives the error tensor and makes the graph's status
 *   TYTO_ERR_INVALID_ARGUMENT (out of memory: TYTO_ERR_OUT_OF_MEMORY) with a
 *   message naming the op; the main messages are written below, where
 *   [a] stands for a shape such as [64,784].
 *     "<op>: tensors belong to different graphs"
 *     "<op>: input 2 is NULL"
 *     "<op>: dtypes differ: f32[2,3] and f64[3]"
 *     "<op>: rank 9 exceeds 8"                    (shape arguments)
 *     "<op>: negative extent in [2,-1]"
 *     "<op>: axis 2 out of range for [3,4]"
 *     "<op>: axis 1 repeated for [3,4]"
 * - Tensors of every kind may be mixed; all inputs must share one dtype.
 * - Composite constructors (marked so) build their result from other ops
 *   and add no op of their own.
 */
#ifndef TYTO_OPS_H
#define TYTO_OPS_H

#include <stdint.h>

#include <tyto/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------- */
/* Sources                                                                 */

/* An input, fed at each run; name may be NULL (copied). */
TYTO_API tyto_tensor *tyto_input(tyto_graph *g, tyto_dtype dtype, int rank,
                                 const int64_t *shape, const char *name);
/* A parameter: persistent state whose value is set at run time. */
TYTO_API tyto_tensor *tyto_parameter(tyto_graph *g, tyto_dtype dtype, int rank,
                                     const int64_t *shape, const char *name);
/* A constant holding numel(shape) values, row-major, converted to dtype
 * (rounded to nearest, ties to even) and copied (op TYTO_OP_CONSTANT). values
 * may be NULL only when the shape has no element; otherwise "constant: values
 * is NULL". */
TYTO_API tyto_tensor *tyto_constant(tyto_graph *g, tyto_dtype dtype, int rank,
                                    const int64_t *shape, const double *values);
/* A constant holding numel(shape) elements given as stored in dtype
 * (bytes = numel * tyto_dtype_size(dtype), host byte order), copied: the
 * way to give i64 values beyond 2^53, or bf16 bit patterns, exactly.
 * "constant_raw: 12 bytes for i64[2] (expected 16)". */
TYTO_API tyto_tensor *tyto_constant_raw(tyto_graph *g, tyto_dtype dtype,
                                        int rank, const int64_t *shape,
                                        const void *data, size_t bytes);
/* A constant whose every element is `value` (op TYTO_OP_FULL, no data).
 * For an integer dtype the value must be a whole number the dtype holds,
 * at most 2^53 in magnitude: "full: 2.5 is not an i32". */
TYTO_API tyto_tensor *tyto_full(tyto_graph *g, tyto_dtype dtype, int rank,
                                const int64_t *shape, double value);
/* A rank-0 TYTO_OP_FULL constant. Scalars broadcast against anything, so
 * tyto_mul(x, tyto_scalar(g, TYTO_F32, 2.0)) doubles x. */
TYTO_API tyto_tensor *tyto_scalar(tyto_graph *g, tyto_dtype dtype,
                                  double value);
/* A rank-0 constant of x's graph and dtype; the error tensor if x is one. */
TYTO_API tyto_tensor *tyto_scalar_like(tyto_tensor *x, double value);

/* Random tensors from the Philox-4x32-10 stream `seed`. Each random node
 * also records a stream offset: the graph's counter, advanced by each
 * random node by ceil(numel / 4), so two calls with the same seed in one
 * graph draw different numbers while a rebuilt graph draws the same.
 * Errors: "uniform: low 1 is not below high 0", "uniform: expected finite
 * bounds, got low 0 and high inf", "normal: expected a finite mean, got
 * inf", "normal: expected a finite stddev >= 0, got -1", "bernoulli: p
 * 1.5 outside [0, 1]" (and the same from tyto_random_stepped). */
TYTO_API tyto_tensor *tyto_random_uniform(tyto_graph *g, tyto_dtype dtype,
                                          int rank, const int64_t *shape,
                                          double low, double high,
                                          uint64_t seed);
TYTO_API tyto_tensor *tyto_random_normal(tyto_graph *g, tyto_dtype dtype,
                                         int rank, const int64_t *shape,
                                         double mean, double stddev,
                                         uint64_t seed);
TYTO_API tyto_tensor *tyto_random_bernoulli(tyto_graph *g, tyto_dtype dtype,
                                            int rank, const int64_t *shape,
                                            double p, uint64_t seed);
/* A random op (TYTO_OP_RANDOM_UNIFORM, _NORMAL or _BERNOULLI, with a, b
 * the parameters above: low, high / mean, stddev / p, unused) that draws
 * fresh numbers at every run: step is a rank-0 tensor (typically a
 * parameter that a training step advances) whose value, truncated to an
 * integer s in [0, 2^53], selects Philox counter words 2 and 3
 * (sdk/docs/random.md). s = 0 draws exactly the numbers of the op without
 * a step; each other s an independent stream. The output has step's
 * dtype: a 16-bit step counts exactly only to 256 (bf16) or 2048 (f16),
 * so keep the step in f32 and tyto_cast the draw (a 16-bit draw is the
 * f32 one rounded once). "random: step must be a rank-0 tensor, got
 * [3]". */
TYTO_API tyto_tensor *tyto_random_stepped(tyto_op op, tyto_tensor *step,
                                          int rank, const int64_t *shape,
                                          double a, double b, uint64_t seed);

/* ---------------------------------------------------------------------- */
/* Elementwise                                                             */

/* x converted to `dtype` (op TYTO_OP_CAST): each element rounded to
 * nearest, ties to even; NaN stays NaN, infinities and signed zeros are
 * kept, a value beyond dtype's range becomes an infinity. To i32 or i64:
 * truncated toward zero (as C and PyTorch convert), saturated at the
 * dtype's limits, NaN giving 0; from i64 to i32: the low 32 bits. x itself
 * when it has that dtype already. Differentiable between floating dtypes:
 * the derivative of a cast is the cast back (a gradient arrives in the
 * dtype of what it is the gradient of); a cast to or from an integer
 * dtype has none. "cast: unknown dtype 9" for a dtype tyto lacks. */
TYTO_API tyto_tensor *tyto_cast(tyto_tensor *x, tyto_dtype dtype);

/* Any unary op (TYTO_OP_NEG .. TYTO_OP_ROUND but LEAKY_RELU and ELU);
 * "unary: TYTO_OP 64 is not a unary op" otherwise. */
TYTO_API tyto_tensor *tyto_unary(tyto_op op, tyto_tensor *x);
TYTO_API tyto_tensor *tyto_neg(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_abs(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_sign(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_exp(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_log(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_log1p(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_expm1(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_sqrt(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_rsqrt(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_square(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_reciprocal(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_sin(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_cos(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_tan(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_asin(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_acos(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_atan(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_sinh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_cosh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_tanh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_asinh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_acosh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_atanh(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_sigmoid(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_relu(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_leaky_relu(tyto_tensor *x, double slope);
TYTO_API tyto_tensor *tyto_elu(tyto_tensor *x, double alpha);
TYTO_API tyto_tensor *tyto_softplus(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_erf(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_floor(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_ceil(tyto_tensor *x);
TYTO_API tyto_tensor *tyto_round(tyto_tensor *x);

/* Binary ops with NumPy broadcasting: shapes are aligned at the right and
 * each pair of extents must be equal or contain a 1 ("add: shapes cannot
 * be broadcast: [2,3] and [4]"). A 0 extent broadcasts only with 0 or 1.
 * tyto_binary takes TYTO_OP_ADD .. TYTO_OP_GE. */
TYTO_API tyto_tensor *tyto_binary(tyto_op op, tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_add(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_sub(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_mul(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_div(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_pow(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_max(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_min(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_atan2(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_eq(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_ne(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_lt(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_le(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_gt(tyto_tensor *a, tyto_tensor *b);
TYTO_API tyto_tensor *tyto_ge(tyto_tensor *a, tyto_tensor *b);

/* Scalar forms: op(x, s) with s a tyto_scalar_like(x, s) constant. */
TYTO_API tyto_tensor *tyto_binary_scalar(tyto_op op, tyto_tensor *x, double s);
TYTO_API tyto_tensor *tyto_add_scalar(tyto_tensor *x, double s);
TYTO_API tyto_tensor *tyto_sub_scalar(tyto_tensor *x, double s);
TYTO_API tyto_tensor *tyto_mul_scalar(tyto_tensor *x, double s);
TYTO_API tyto_tensor *tyto_div_scalar(tyto_tensor *x, double s);
TYTO_API tyto_tensor *tyto_pow_scalar(tyto_tensor *x, double s);

/* cond != 0 ? a : b, the three broadcast together ("where: shapes cannot
 * be broadcast: [2,3], [3] and [4]"). */
TYTO_API tyto_tensor *tyto_where(tyto_tensor *cond, tyto_tensor *a,
                                 tyto_tensor *b);
/* a*b + c, broadcast together. */
TYTO_API tyto_tensor *tyto_fma(tyto_tensor *a, tyto_tensor *b, tyto_tensor *c);

/* ---------------------------------------------------------------------- */
/* Reductions                                                              */

/* Reduce over n_axes axes (negative ok; axes NULL: every axis). keepdims
 * keeps reduced axes with extent 1. Errors: "sum: axis 2 out of range for
 * [3,4]", "sum: axis 1 repeated for [3,4]". */
TYTO_API tyto_tensor *tyto_reduce(tyto_op op, tyto_tensor *x, int n_axes,
                                  const int *axes, int keepdims);
TYTO_API tyto_tensor *tyto_sum(tyto_tensor *x, int n_axes, const int *axes,
                               int keepdims);
TYTO_API tyto_tensor *tyto_mean(tyto_tensor *x, int n_axes, const int *axes,
                                int keepdims);
TYTO_API tyto_tensor *tyto_reduce_max(tyto_tensor *x, int n_axes,
                                      const int *axes, int keepdims);
TYTO_API tyto_tensor *tyto_reduce_min(tyto_tensor *x, int n_axes,
                                      const int *axes, int keepdims);
TYTO_API tyto_tensor *tyto_prod(tyto_tensor *x, int n_axes, const int *axes,
                                int keepdims);
TYTO_API tyto_tensor *tyto_log_sum_exp(tyto_tensor *x, int n_axes,
                                       const int *axes, int keepdims);
TYTO_API tyto_tensor *tyto_norm_l1(tyto_tensor *x, int n_axes, const int *axes,
                                   int keepdims);
TYTO_API tyto_tensor *tyto_norm_l2(tyto_tensor *x, int n_axes, const int *axes,
                                   int keepdims);
/* Index of the largest/smallest element along one axis (the first, on
 * ties), in x's dtype (exact below 2^24 in f32, 256 in bf16).
 * "argmax: axis of an empty extent in [3,0]" when the axis has extent 0. */
TYTO_API tyto_tensor *tyto_argmax(tyto_tensor *x, int axis, int keepdims);
TYTO_API tyto_tensor *tyto_argmin(tyto_tensor *x, int axis, int keepdims);
/* The same index in `dtype`: TYTO_I64 or TYTO_I32 (as TensorFlow's
 * output_type), or a floating dtype that holds every index of the axis
 * exactly: "argmax_as: axis extent 300 exceeds 257: bf16 holds indices
 * exactly only up to 256 (ask tyto_argmax_as for i32 or i64)", as
 * tyto_argmax says for x's dtype. x is floating-point. */
TYTO_API tyto_tensor *tyto_argmax_as(tyto_tensor *x, int axis, int keepdims,
                                     tyto_dtype dtype);
TYTO_API tyto_tensor *tyto_argmin_as(tyto_tensor *x, int axis, int keepdims,
                                     tyto_dtype dtype);

/* ---------------------------------------------------------------------- */
/* Products and linear algebra                                             */

/* Batched matrix product of [..., m, k] and [..., k, n] (after the
 * transposes asked for) with batch axes broadcast. Errors:
 * "matmul: inner dimensions differ: [64,784] x [128,10]" (a transposed
 * operand prints as [784,64]^T), "matmul: operands need rank >= 2: [3] x
 * [3,4]", "matmul: batch dimensions cannot be broadcast: [2,3,4] x
 * [5,4,6]". */
TYTO_API tyto_tensor *tyto_matmul(tyto_tensor *a, tyto_tensor *b,
                                  int transpose_a, int transpose_b);
/* Einstein summation (docs/einsum.md): NumPy's and PyTorch's spec
 * ("bij,bjk->bik", "ii->i", "...ij,...jk", an implicit output when there
 * is no arrow) or OCANNL's ("ij;jk=>ik", "...|...=>0" for a sum over
 * every axis). Shapes are inferred and checked: a bad spec or a shape it
 * does not fit fails with the spec quoted and a caret under the offending
 * character. Lowered to MATMUL, MUL, SUM, PERMUTE and RESHAPE, contracting
 * in the order of least cost, so it differentiates like any graph. */
TYTO_API tyto_tensor *tyto_einsum(const char *spec, size_t n,
                                  tyto_tensor *const *inputs);

/* Composite: the rank-0 inner product of two rank-1 tensors ("dot: needs
 * two vectors of one length: [3] . [4]"). */
TYTO_API tyto_tensor *tyto_dot(tyto_tensor *a, tyto_tensor *b);
/* Composite: [n] and [m] give [n, m] ("outer: needs two vectors: [3,1] and
 * [4]"). */
TYTO_API tyto_tensor *tyto_outer(tyto_tensor *a, tyto_tensor *b);

/* Square matrices [..., n, n] ("inv: needs square matrices [..., n, n],
 * got [3,4]"). det and logdet (log |det|) give [...]. */
TYTO_API tyto_tensor *tyto_inv(tyto_tensor *a);
TYTO_API tyto_tensor *tyto_det(tyto_tensor *a);
TYTO_API tyto_tensor *tyto_logdet(tyto_tensor *a);
TYTO_API tyto_tensor *tyto_cholesky(tyto_tensor *a);
/* X with A X = B: A [..., n, n], B [..., n, k], batch axes broadcast
 * ("solve: rows differ: [3,3] and [4,2]"). */
TYTO_API tyto_tensor *tyto_solve(tyto_tensor *a, tyto_tensor *b);
/* Reduced QR of [..., m, n] (rank >= 2): *q [..., m, k], *r [..., k, n],
 * k = min(m, n). Both are set (to error tensors on failure) unless NULL. */
TYTO_API void tyto_qr(tyto_tensor *a, tyto_tensor **q, tyto_tensor **r);

/* ---------------------------------------------------------------------- */
/* Layout                                                                  */

/* Same elements, new shape; one extent may be -1 (inferred). "reshape:
 * cannot reshape [2,3] (6 elements) to [4,2] (8 elements)", "reshape: more
 * than one -1 in [-1,-1]", "reshape: cannot infer -1 in [0,-1] for [0,3]". */
TYTO_API tyto_tensor *tyto_reshape(tyto_tensor *x, int rank,
                                   const int64_t *shape);
/* Output axis i is input axis perm[i] (negative ok): "permute: [0,0] is
 * not a permutation of the axes of [2,3]". */
TYTO_API tyto_tensor *tyto_permute(tyto_tensor *x, int rank, const int *perm);
/* Composite: swaps two axes (a PERMUTE). */
TYTO_API tyto_tensor *tyto_transpose(tyto_tensor *x, int axis0, int axis1);
/* NumPy broadcast to a shape of at least x's rank: "broadcast_to: cannot
 * broadcast [3,4] to [4,4]". */
TYTO_API tyto_tensor *tyto_broadcast_to(tyto_tensor *x, int rank,
                                        const int64_t *shape);

/* Use as a slice start or stop for "from the far end on" (Python's
 * omitted bound): TYTO_END for stop with a positive step or start with a
 * negative one, and so on; the sign of the step decides, as in Python. */
#define TYTO_END INT64_MAX
/* Python slicing on every axis: start/stop/step arrays of x's rank
 * (starts, stops NULL: the whole axis; steps NULL: 1). Negative indices
 * count from the end, out-of-range bounds are clamped, negative steps walk
 * backwards: x[::-1] is start TYTO_END, stop TYTO_END, step -1.
 * "slice: step 0 on axis 1 of [3,4]". */
TYTO_API tyto_tensor *tyto_slice(tyto_tensor *x, const int64_t *starts,
                                 const int64_t *stops, const int64_t *steps);
/* Slice of one axis, the others whole. */
TYTO_API tyto_tensor *tyto_slice_axis(tyto_tensor *x, int axis, int64_t start,
                                      int64_t stop, int64_t step);
/* Joins n tensors along an existing axis (n < 1 or xs NULL: NULL, as no
 * graph is known): "concat: shapes differ outside axis 1: [2,3] and
 * [3,4]", "concat: ranks differ: [2,3] and [3]". */
TYTO_API tyto_tensor *tyto_concat(int n, tyto_tensor *const *xs, int axis);
/* Composite: joins n tensors of one shape along a new axis (-1: a new
 * last axis) as reshapes and a concat (n < 1 or xs NULL: NULL): "stack:
 * shapes differ: [2,3] and [3,2]", "stack: axis 2 out of range for
 * stacking [2]". */
TYTO_API tyto_tensor *tyto_stack(int n, tyto_tensor *const *xs, int axis);
/* Composite: cuts x along axis into n parts of sizes[i] (NULL: equal
 * parts) as slices, stored in out[0..n-1] (every part the error tensor on
 * failure): "split: sizes sum to 5, axis 1 of [2,6] has 6", "split: 4
 * equal parts do not divide axis 1 of [2,6]", "split: negative size -1",
 * "split: number of parts must be positive" (out is left alone then). */
TYTO_API void tyto_split(tyto_tensor *x, int axis, int n, const int64_t *sizes,
                         tyto_tensor **out);

typedef enum tyto_pad_mode {
  TYTO_PAD_CONSTANT = 0,
  TYTO_PAD_REFLECT = 1 /* mirror without repeating the edge (NumPy) */
} tyto_pad_mode;
/* Pads before[i] and after[i] elements on each axis (arrays of x's rank):
 * "pad: negative padding -1 on axis 0 of [3,4]", "pad: reflect padding 3
 * on axis 1 needs an extent above 3, got [2,3]". */
TYTO_API tyto_tensor *tyto_pad(tyto_tensor *x, const int64_t *before,
                               const int64_t *after, tyto_pad_mode mode,
                               double value);
/* NumPy tile: n_reps repetitions, x padded with leading 1-extents when
 * n_reps exceeds its rank (and reps with leading 1s otherwise). reps are
 * checked as a shape ("tile: negative extent in [2,-1]"). */
TYTO_API tyto_tensor *tyto_tile(tyto_tensor *x, int n_reps,
                                const int64_t *reps);
/* Composite: NumPy repeat of each element `repeats` times along axis, as
 * reshape, broadcast_to, reshape: "repeat: negative repeats -2",
 * "repeat: needs rank below 8, got [..]". */
TYTO_API tyto_tensor *tyto_repeat(tyto_tensor *x, int axis, int64_t repeats);
/* Reverses the order along n_axes axes (axes NULL: every axis). */
TYTO_API tyto_tensor *tyto_flip(tyto_tensor *x, int n_axes, const int *axes);

/* ---------------------------------------------------------------------- */
/* Indexing                                                                */

/* Indices are i32 or i64 tensors, or whole numbers in the data's own
 * floating dtype; anything else: "gather: indices are f64; expected i32,
 * i64 or the data's f32". */

/* NumPy take: output data.shape[:axis] + indices.shape +
 * data.shape[axis+1:]. */
TYTO_API tyto_tensor *tyto_gather(tyto_tensor *data, tyto_tensor *indices,
                                  int axis);
/* A gather with rank-1 indices: "index_select: indices must have rank 1,
 * got [2,2]". "gather: result rank 9 exceeds 8 for [..] and indices
 * [..]". */
TYTO_API tyto_tensor *tyto_index_select(tyto_tensor *data, int axis,
                                        tyto_tensor *indices);
/* base with updates added at the gathered positions (the adjoint of
 * gather): updates must be shaped as tyto_gather(base, indices, axis):
 * "scatter_add: updates [2,3] do not match [4,3] for base [5,3], indices
 * [4], axis 0". */
TYTO_API tyto_tensor *tyto_scatter_add(tyto_tensor *base, tyto_tensor *indices,
                                       tyto_tensor *updates, int axis);
/* indices [...] to [..., depth], 1 at each index and 0 elsewhere, in the
 * indices' dtype when they are floating-point and in f32 when they are
 * integers: "one_hot: depth 0 must be positive". */
TYTO_API tyto_tensor *tyto_one_hot(tyto_tensor *indices, int64_t depth);
/* The same in `dtype`, any dtype (from indices of any dtype). */
TYTO_API tyto_tensor *tyto_one_hot_as(tyto_tensor *indices, int64_t depth,
                                      tyto_dtype dtype);

/* ---------------------------------------------------------------------- */
/* Neural                                                                  */

TYTO_API tyto_tensor *tyto_softmax(tyto_tensor *x, int axis);
TYTO_API tyto_tensor *tyto_log_softmax(tyto_tensor *x, int axis);

/* Convolution parameters; NULL for stride 1, padding 0, dilation 1, one
 * group. Index 0 is the height, 1 the width. */
typedef struct tyto_conv2d_params {
  int64_t stride[2];   /* >= 1 */
  int64_t padding[2];  /* >= 0, on both sides */
  int64_t dilation[2]; /* >= 1 */
  int64_t groups;      /* >= 1, divides C and O */
} tyto_conv2d_params;
/* x [N,C,H,W], w [O,C/groups,KH,KW], bias [O] or NULL; output [N,O,OH,OW]
 * with OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1. Errors:
 * "conv2d: x must have rank 4 (NCHW), got [3,32,32]", "conv2d: weight
 * must have rank 4 (OIHW), got [16,3,3]", "conv2d: input channels differ:
 * x [1,3,32,32] and w [16,4,3,3] with 1 groups", "conv2d: 16 output
 * channels not divisible by 3 groups", "conv2d: bias [8] does not match
 * 16 output channels", "conv2d: weight [16,3,0,3] has an empty kernel",
 * "conv2d: stride, dilation and groups must be positive, padding not
 * negative", "conv2d: kernel [5,5] (dilated) larger than padded input
 * [4,4]", "conv2d: dilated kernel of [..] is too large", "conv2d: padded
 * input of [..] is too large". */
TYTO_API tyto_tensor *tyto_conv2d(tyto_tensor *x, tyto_tensor *w,
                                  tyto_tensor *bias,
                                  const tyto_conv2d_params *params);
/* Pooling over x [N,C,H,W] windows kernel_h x kernel_w: OH = (H + 2*pad_h
 * - kernel_h) / stride_h + 1. "max_pool2d: padding 2 exceeds half the
 * kernel [3,3]", "max_pool2d: kernel [5,5] larger than padded input
 * [4,4]", "max_pool2d: kernel and stride must be positive, padding not
 * negative". */
TYTO_API tyto_tensor *tyto_max_pool2d(tyto_tensor *x, int64_t kernel_h,
                                      int64_t kernel_w, int64_t stride_h,
                                      int64_t stride_w, int64_t pad_h,
                                      int64_t pad_w);
TYTO_API tyto_tensor *tyto_avg_pool2d(tyto_tensor *x, int64_t kernel_h,
                                      int64_t kernel_w, int64_t stride_h,
                                      int64_t stride_w, int64_t pad_h,
                                      int64_t pad_w);

/* ---------------------------------------------------------------------- */
/* Derivative ops                                                          */
/*                                                                         */
/* The adjoints the AD rules of <tyto/ad.h> are written with. They are     */
/* ordinary ops (differentiable again) and may be used directly.           */

/* The adjoint of a slice: g placed into zeros of shape [rank: shape], g's
 * element (i0, i1, ...) at (starts[0] + i0*steps[0], ...). starts are
 * resolved positions (no negative counting, no clamping) and steps are
 * non-zero; every placed element must land inside the shape:
 * "slice_backward: axis 1 places 3 elements from 4 by step 2 outside
 * extent 7", "slice_backward: rank of g [2,3] differs from [4]". */
TYTO_API tyto_tensor *tyto_slice_backward(tyto_tensor *g, int rank,
                                          const int64_t *shape,
                                          const int64_t *starts,
                                          const int64_t *steps);

/* The gradient of tyto_conv2d(x, w, ...) with respect to x, given dy and
 * w: dx [N, C, h, w_] with C = w's input channels times groups. h and w_
 * are needed because several input sizes give one output size; they must
 * give dy's extents ("conv2d_backward_data: input [9,9] gives output
 * [4,4] for these parameters, but dy is [1,2,5,5]"). */
TYTO_API tyto_tensor *
tyto_conv2d_backward_data(tyto_tensor *dy, tyto_tensor *w, int64_t h,
                          int64_t w_, const tyto_conv2d_params *params);
/* The gradient with respect to w, given x and dy: [O, C/groups, kh, kw]. */
TYTO_API tyto_tensor *
tyto_conv2d_backward_filter(tyto_tensor *x, tyto_tensor *dy, int64_t kh,
                            int64_t kw, const tyto_conv2d_params *params);
/* The gradient of tyto_max_pool2d(x, ...) given dy: shaped as x, each dy
 * element added at the first maximum (row-major) of its window of x. */
TYTO_API tyto_tensor *
tyto_max_pool2d_backward(tyto_tensor *x, tyto_tensor *dy, int64_t kernel_h,
                         int64_t kernel_w, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w);
/* Pooled like tyto_max_pool2d(x, ...), but taking t's element (t shaped as
 * x) at the first maximum of each window of x: the tangent of a max pool,
 * and the adjoint of tyto_max_pool2d_backward() in dy. */
TYTO_API tyto_tensor *tyto_max_pool2d_select(tyto_tensor *x, tyto_tensor *t,
                                             int64_t kernel_h, int64_t kernel_w,
                                             int64_t stride_h, int64_t stride_w,
                                             int64_t pad_h, int64_t pad_w);
/* The gradient of tyto_avg_pool2d() on an [N, C, h, w_] input given dy. */
TYTO_API tyto_tensor *
tyto_avg_pool2d_backward(tyto_tensor *dy, int64_t h, int64_t w_,
                         int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                         int64_t stride_w, int64_t pad_h, int64_t pad_w);
/* X with op(A) X = B for triangular A [..., n, n] (lower or upper triangle
 * read, the other ignored), B [..., n, k], batch axes broadcast; op(A) =
 * A^T when transpose; unit_diagonal takes the diagonal as ones.
 * "triangular_solve: rows differ: [3,3] and [4,2]". */
TYTO_API tyto_tensor *tyto_triangular_solve(tyto_tensor *a, tyto_tensor *b,
                                            int lower, int transpose,
                                            int unit_diagonal);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_OPS_H */
