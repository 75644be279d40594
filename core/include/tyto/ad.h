/*
 * Automatic differentiation, after Owl's Algodiff.
 *
 * AD in tyto is a graph transformation, not a tape: each function below
 * takes tensors of one graph, where the function being differentiated is
 * the subgraph from x to y, and adds to that graph the tensors that compute
 * the derivative. The result is an ordinary tensor: compile it, evaluate it,
 * or differentiate it again (higher-order derivatives are repeated
 * transformation). Forward mode pushes a tangent from x towards y (one
 * sweep per input direction); reverse mode pulls an adjoint from y back to
 * x (one sweep per output direction).
 *
 * Derivatives are taken with respect to the tensors named, so nested
 * derivatives cannot confuse their perturbations: the derivative of
 * x * diff(x + y, y) with respect to x is 1.
 *
 * x may be any tensor of the graph (an input, a parameter, or an
 * intermediate result); a tensor that y does not depend on has a zero
 * derivative. For an intermediate x the derivative holds x's own inputs
 * fixed (it is the adjoint or tangent at x). Only the tensors on the paths
 * from x to y get derivative tensors: differentiating with respect to some
 * inputs adds nothing for the others. Every call builds new tensors; none
 * is cached or shared between calls.
 *
 * A tensor listed twice among several xs gets, in reverse mode, the whole
 * adjoint at each position; in forward mode its tangents add up.
 *
 * Conventions where a function is not differentiable: relu'(0) = 0,
 * abs'(0) = sign(0) = 0, leaky_relu'(0) = the slope, floor, ceil, round,
 * sign and comparisons have derivative 0, max(a, b) and min(a, b) give
 * half the adjoint to each side on a tie, reduce_max and reduce_min share
 * it evenly among the tied elements, max_pool2d gives all of it to the
 * first maximum (row-major) of each window, and argmax/argmin/one_hot and
 * the random sources have derivative 0. cholesky is differentiated as
 * cholesky((A + A^T) / 2), since it reads one triangle. det and logdet
 * differentiate through the inverse: at a singular matrix the derivative
 * program fails at run time ("inv: matrix 0 of the batch is singular").
 * docs/autodiff.md lists every rule and the known limits.
 *
 * Errors are the graph's sticky errors (see <tyto/graph.h>): a wrong
 * argument gives the error tensor and a message such as "grad: y must
 * have one element, got [3,2]".
 */
#ifndef TYTO_AD_H
#define TYTO_AD_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/context.h>
#include <tyto/graph.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x's value, with a derivative of zero in every mode and at every order:
 * whatever is computed from it is differentiated as if it were a
 * constant (JAX's stop_gradient, PyTorch's detach). A target net's
 * output in a loss, a straight-through estimator (x + stop_gradient(
 * round(x) - x)), the moving statistics fed back into a model. Costs
 * nothing at run time: the compiled program reads x itself. */
TYTO_API tyto_tensor *tyto_stop_gradient(tyto_tensor *x);

/* A derivative rule of one's own for y, a function of x1 .. xn built from
 * any ops (docs/autodiff.md, "Custom derivative rules"). The callbacks
 * build, with ordinary ops of the graph, from the inputs xs, the tensor y
 * that tyto_custom_derivative returns (which has y's value) and:
 *
 *   jvp: the inputs' tangents (each shaped as its input; zeros where an
 *        input has none), returning y's tangent, shaped as y;
 *   vjp: y's adjoint (shaped as y) and an input's index i, returning the
 *        contribution to x_i's adjoint, shaped as x_i.
 *
 * Either may return NULL for a derivative of zero, and either may be
 * NULL: forward mode (tyto_diff, tyto_jacobianv, the forward sweep of
 * tyto_hessian) then fails on a rule without jvp, reverse mode (tyto_grad,
 * tyto_jacobianTv) on one without vjp, with a message naming the rule.
 * AD calls them each time it differentiates through the tensor, and
 * differentiates what they build like any graph: they are the rule at
 * every order, as far as they are differentiable themselves. */
typedef struct tyto_custom_rule {
  const char *name; /* for messages; copied ("custom" when NULL) */
  tyto_tensor *(*jvp)(void *user, size_t n, tyto_tensor *const *xs,
                      tyto_tensor *y, tyto_tensor *const *tangents);
  tyto_tensor *(*vjp)(void *user, size_t i, size_t n, tyto_tensor *const *xs,
                      tyto_tensor *y, tyto_tensor *adjoint);
  void *user; /* passed to both; must outlive every derivative built */
} tyto_custom_rule;

/* y's value, with the derivative `rule` gives with respect to xs (n of
 * them, of y's graph; y computed from them) in place of y's own: AD does
 * not look inside y's sub-graph. Compiled, it is y itself. */
TYTO_API tyto_tensor *tyto_custom_derivative(tyto_tensor *y, size_t n,
                                             tyto_tensor *const *xs,
                                             const tyto_custom_rule *rule);

/* dy/dx for y and x with one element each (any rank), forward mode;
 * shaped as y. */
TYTO_API tyto_tensor *tyto_diff(tyto_tensor *y, tyto_tensor *x);

/* The gradient of a one-element y with respect to x, reverse mode;
 * shaped as x. */
TYTO_API tyto_tensor *tyto_grad(tyto_tensor *y, tyto_tensor *x);

/* The gradients of a one-element y with respect to n tensors in one
 * reverse sweep: out[i] shaped as xs[i] (every out[i] is the error tensor
 * on failure). */
TYTO_API void tyto_grads(tyto_tensor *y, size_t n, tyto_tensor *const *xs,
                         tyto_tensor **out);

/* J·v, forward mode: v shaped as x; the result is shaped as y. */
TYTO_API tyto_tensor *tyto_jacobianv(tyto_tensor *y, tyto_tensor *x,
                                     tyto_tensor *v);

/* Jᵀ·v, reverse mode: v shaped as y; the result is shaped as x. */
TYTO_API tyto_tensor *tyto_jacobianTv(tyto_tensor *y, tyto_tensor *x,
                                      tyto_tensor *v);

/* The general forms: tangents of n_x tensors pushed to n_y outputs, and
 * adjoints of n_y outputs pulled back to n_x tensors, each in one sweep.
 * A NULL tangent or adjoint is zero, and so are all of them when the
 * tangents or adjoints array itself is NULL. out has n_y (jvp) or n_x
 * (vjp) entries, shaped as ys[i] or xs[i]. */
TYTO_API void tyto_jvp(size_t n_x, tyto_tensor *const *xs,
                       tyto_tensor *const *tangents, size_t n_y,
                       tyto_tensor *const *ys, tyto_tensor **out);
TYTO_API void tyto_vjp(size_t n_y, tyto_tensor *const *ys,
                       tyto_tensor *const *adjoints, size_t n_x,
                       tyto_tensor *const *xs, tyto_tensor **out);

typedef enum tyto_ad_mode {
  TYTO_AD_FORWARD = 0, /* one forward sweep per element of x */
  TYTO_AD_REVERSE = 1  /* one reverse sweep per element of y */
} tyto_ad_mode;

/* The mode tyto_jacobian(y, x) uses (both non-NULL): forward when x has
 * fewer elements than y, reverse otherwise. */
TYTO_API tyto_ad_mode tyto_jacobian_mode(const tyto_tensor *y,
                                         const tyto_tensor *x);

/* The Jacobian as a matrix [numel(y), numel(x)] (both taken row-major):
 * element (i, j) is dy_i/dx_j. */
TYTO_API tyto_tensor *tyto_jacobian(tyto_tensor *y, tyto_tensor *x);
/* The same in the mode asked for. */
TYTO_API tyto_tensor *tyto_jacobian_in_mode(tyto_tensor *y, tyto_tensor *x,
                                            tyto_ad_mode mode);

/* The Hessian of a one-element y, [numel(x), numel(x)], forward over
 * reverse (one forward sweep of the gradient per element of x). */
TYTO_API tyto_tensor *tyto_hessian(tyto_tensor *y, tyto_tensor *x);

/* H·v without forming H (forward over reverse): v shaped as x, the result
 * too. */
TYTO_API tyto_tensor *tyto_hessianv(tyto_tensor *y, tyto_tensor *x,
                                    tyto_tensor *v);

/* The trace of the Hessian of a one-element y (rank 0). */
TYTO_API tyto_tensor *tyto_laplacian(tyto_tensor *y, tyto_tensor *x);

/* Batched derivatives (docs/autodiff.md): one sweep for every point of a
 * batch, not one per point.
 *
 * tyto_diff_elementwise: dy_i/dx_i at every element of x in one forward
 * sweep, for y computed elementwise from x (shaped as x; every op between
 * them elementwise, no broadcast of a tensor computed from x: checked, an
 * error names the op that is not).
 *
 * tyto_jacobian_batched: for x [B, ...] and y [B, ...] whose row b depends
 * on row b of x only (checked on the ops between them: reductions, matrix
 * products and normalisations that stay within a row, layout ops that keep
 * axis 0), the Jacobian of every row at once, [B, numel(y row), numel(x
 * row)], in min(row sizes) sweeps whatever B.
 *
 * tyto_hessian_batched: for y [B] (one value per row, rows apart as
 * above), every row's Hessian, [B, numel(x row), numel(x row)]: one
 * reverse sweep, then one forward sweep per element of a row. For scalar
 * points (x [B] or [B, 1]) the Hessians of all B points take two sweeps,
 * where tyto_hessian of their sum would take B. */
TYTO_API tyto_tensor *tyto_diff_elementwise(tyto_tensor *y, tyto_tensor *x);
TYTO_API tyto_tensor *tyto_jacobian_batched(tyto_tensor *y, tyto_tensor *x);
TYTO_API tyto_tensor *tyto_hessian_batched(tyto_tensor *y, tyto_tensor *x);

/* ---------------------------------------------------------------------- */
/* Finite-difference checking                                              */

/* What tyto_gradcheck() compares. */
enum {
  TYTO_GRADCHECK_REVERSE = 1, /* every gradient element vs a central
                                 difference in that element */
  TYTO_GRADCHECK_FORWARD = 2  /* J·v for a random direction v vs a central
                                 difference along v */
};

/* Options; fill with tyto_gradcheck_options_init() first. */
typedef struct tyto_gradcheck_options {
  size_t struct_size; /* set by tyto_gradcheck_options_init() */
  /* Central-difference step: element x_i moves by step * max(1, |x_i|).
   * 0: 1e-6 for f64, 1e-3 for f32 (about the cube root of the epsilon). */
  double step;
  /* An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
   * 0: rtol 1e-6 and atol 1e-8 for f64, 2e-2 and 2e-3 for f32. */
  double rtol, atol;
  /* TYTO_GRADCHECK_* flags; 0: both. */
  int modes;
  /* Seed of the random weights w (y is checked through sum(w * y) when it
   * has more than one element) and of the forward direction. */
  uint64_t seed;
  /* The device (index among the context's selected ones). */
  size_t device;
  /* Inputs and parameters y depends on that are held fixed, with their
   * values (numel * dtype size bytes each, row-major). */
  size_t n_fixed;
  tyto_tensor *const *fixed;
  const void *const *fixed_values;
} tyto_gradcheck_options;

TYTO_API void tyto_gradcheck_options_init(tyto_gradcheck_options *opts);

/* The outcome, with the worst element: the one whose error is largest
 * against its tolerance. */
typedef struct tyto_gradcheck_report {
  int passed;       /* every compared element within tolerance */
  size_t n_checked; /* elements compared */
  int mode;         /* TYTO_GRADCHECK_REVERSE or _FORWARD: the worst's */
  /* The worst element: the index into xs and the element (row-major) for
   * reverse mode; for forward mode the element of y. */
  size_t input;
  int64_t element;
  double analytic, numeric;
  double abs_error;  /* |analytic - numeric| */
  double ratio;      /* abs_error / (atol + rtol * |numeric|); passed: <= 1 */
  char message[512]; /* one line saying all of the above */
} tyto_gradcheck_report;

/* Checks the derivatives of y with respect to the n tensors xs (inputs or
 * parameters, values given as for tyto_program_set_input) against central
 * differences, on device opts->device of ctx. Every input and parameter y
 * depends on must be in xs or opts->fixed. Adds the tensors it needs to
 * y's graph. Returns TYTO_OK when the check ran (report->passed says how
 * it went), or an error as tyto_program_compile() and tyto_program_run()
 * with tyto_errmsg() saying why ("gradcheck: y depends on input 'b' (#3),
 * which is neither checked nor fixed"). Differences in f32 are coarse:
 * check in f64 where the device has it. A y of f16 or bf16 is refused
 * (TYTO_ERR_INVALID_ARGUMENT naming the dtype). */
TYTO_API tyto_status tyto_gradcheck(tyto_context *ctx, tyto_tensor *y, size_t n,
                                    tyto_tensor *const *xs,
                                    const void *const *values,
                                    const tyto_gradcheck_options *opts,
                                    tyto_gradcheck_report *report);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_AD_H */
