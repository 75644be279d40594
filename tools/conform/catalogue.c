/*
 * The op catalogue of tyto-conform (see catalogue.h). Every case is a
 * descriptor the CPU reference plugin accepts; shapes are small enough that
 * the whole catalogue runs in seconds on a CPU.
 */
#include "catalogue_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How an op is exercised. */
enum family {
  F_COPY,
  F_FILL,
  F_UNARY,
  F_BINARY,
  F_TERNARY,
  F_REDUCE,
  F_MATMUL,
  F_SOFTMAX,
  F_CONV,
  F_POOL,
  F_RANDOM,
  F_FUSED,
  F_LAYOUT,   /* pad, gather, scatter_add, one_hot: catalogue_nn.c */
  F_CONV_BWD, /* catalogue_nn.c */
  F_POOL_BWD, /* catalogue_nn.c */
  F_LINALG,   /* catalogue_linalg.c */
  F_CAST      /* catalogue_cast.c */
};

#define O(x) TYTO_PLUGIN_OP_##x
static const cf_op_entry ops[] = {
    {O(COPY), "copy", F_COPY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(FILL), "fill", F_FILL, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(NEG), "neg", F_UNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(ABS), "abs", F_UNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(SIGN), "sign", F_UNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(EXP), "exp", F_UNARY, T_TRANS, CF_UNIFORM, -4, 4, 0, 0},
    {O(LOG), "log", F_UNARY, T_TRANS, CF_UNIFORM, 0.05, 10, 0, 0},
    {O(LOG1P), "log1p", F_UNARY, T_TRANS, CF_UNIFORM, -0.9, 10, 0, 0},
    {O(EXPM1), "expm1", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(SQRT), "sqrt", F_UNARY, T_TRANS, CF_UNIFORM, 0, 10, 0, 0},
    {O(RSQRT), "rsqrt", F_UNARY, T_TRANS, CF_UNIFORM, 0.05, 10, 0, 0},
    {O(SQUARE), "square", F_UNARY, T_BASE, CF_UNIFORM, -3, 3, 0, 0},
    {O(RECIPROCAL), "reciprocal", F_UNARY, T_BASE, CF_UNIFORM, 0.1, 4, 0, 0},
    {O(SIN), "sin", F_UNARY, T_TRANS, CF_UNIFORM, -6, 6, 0, 0},
    {O(COS), "cos", F_UNARY, T_TRANS, CF_UNIFORM, -6, 6, 0, 0},
    {O(TAN), "tan", F_UNARY, T_TRANS, CF_UNIFORM, -1.3, 1.3, 0, 0},
    {O(ASIN), "asin", F_UNARY, T_TRANS, CF_UNIFORM, -0.95, 0.95, 0, 0},
    {O(ACOS), "acos", F_UNARY, T_TRANS, CF_UNIFORM, -0.95, 0.95, 0, 0},
    {O(ATAN), "atan", F_UNARY, T_TRANS, CF_UNIFORM, -5, 5, 0, 0},
    {O(SINH), "sinh", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(COSH), "cosh", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(TANH), "tanh", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(ASINH), "asinh", F_UNARY, T_TRANS, CF_UNIFORM, -5, 5, 0, 0},
    {O(ACOSH), "acosh", F_UNARY, T_TRANS, CF_UNIFORM, 1.05, 6, 0, 0},
    {O(ATANH), "atanh", F_UNARY, T_TRANS, CF_UNIFORM, -0.95, 0.95, 0, 0},
    {O(SIGMOID), "sigmoid", F_UNARY, T_TRANS, CF_UNIFORM, -6, 6, 0, 0},
    {O(RELU), "relu", F_UNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(LEAKY_RELU), "leaky_relu", F_UNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(ELU), "elu", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(SOFTPLUS), "softplus", F_UNARY, T_TRANS, CF_UNIFORM, -6, 6, 0, 0},
    {O(ERF), "erf", F_UNARY, T_TRANS, CF_UNIFORM, -3, 3, 0, 0},
    {O(FLOOR), "floor", F_UNARY, T_BASE, CF_UNIFORM, -5, 5, 0, 0},
    {O(CEIL), "ceil", F_UNARY, T_BASE, CF_UNIFORM, -5, 5, 0, 0},
    {O(ROUND), "round", F_UNARY, T_BASE, CF_UNIFORM, -5, 5, 0, 0},
    {O(CAST), "cast", F_CAST, T_BASE, CF_UNIFORM, -3, 3, 0, 0},
    {O(ADD), "add", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(SUB), "sub", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(MUL), "mul", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(DIV), "div", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0.25, 4},
    {O(POW), "pow", F_BINARY, T_TRANS, CF_UNIFORM, 0.1, 3, -2, 2},
    {O(MAX), "max", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(MIN), "min", F_BINARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(ATAN2), "atan2", F_BINARY, T_TRANS, CF_UNIFORM, -2, 2, 0, 0},
    {O(EQ), "eq", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(NE), "ne", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(LT), "lt", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(LE), "le", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(GT), "gt", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(GE), "ge", F_BINARY, T_BASE, CF_WHOLE, -2, 2, 0, 0},
    {O(WHERE), "where", F_TERNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(FMA), "fma", F_TERNARY, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(SUM), "sum", F_REDUCE, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(MEAN), "mean", F_REDUCE, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(MAX_REDUCE), "max_reduce", F_REDUCE, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(MIN_REDUCE), "min_reduce", F_REDUCE, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(PROD), "prod", F_REDUCE, T_ACCUM, CF_UNIFORM, 0.6, 1.5, 0, 0},
    {O(ARGMAX), "argmax", F_REDUCE, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(ARGMIN), "argmin", F_REDUCE, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(LOG_SUM_EXP), "log_sum_exp", F_REDUCE, T_ACCUM, CF_UNIFORM, -3, 3, 0, 0},
    {O(NORM_L1), "norm_l1", F_REDUCE, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(NORM_L2), "norm_l2", F_REDUCE, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(MATMUL), "matmul", F_MATMUL, T_ACCUM, CF_UNIFORM, -1, 1, 0, 0},
    {O(SOFTMAX), "softmax", F_SOFTMAX, T_ACCUM, CF_UNIFORM, -4, 4, 0, 0},
    {O(LOG_SOFTMAX), "log_softmax", F_SOFTMAX, T_ACCUM, CF_UNIFORM, -4, 4, 0,
     0},
    {O(CONV2D), "conv2d", F_CONV, T_ACCUM, CF_UNIFORM, -1, 1, 0, 0},
    {O(MAX_POOL2D), "max_pool2d", F_POOL, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(AVG_POOL2D), "avg_pool2d", F_POOL, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(RANDOM_UNIFORM), "random_uniform", F_RANDOM, T_TRANS, CF_UNIFORM, 0, 0,
     0, 0},
    {O(RANDOM_NORMAL), "random_normal", F_RANDOM, T_TRANS, CF_UNIFORM, 0, 0, 0,
     0},
    {O(RANDOM_BERNOULLI), "random_bernoulli", F_RANDOM, T_BASE, CF_UNIFORM, 0,
     0, 0, 0},
    {O(FUSED), "fused", F_FUSED, T_TRANS, CF_UNIFORM, -2, 2, 0, 0},
    {O(PAD), "pad", F_LAYOUT, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(GATHER), "gather", F_LAYOUT, T_BASE, CF_UNIFORM, -2, 2, 0, 0},
    {O(SCATTER_ADD), "scatter_add", F_LAYOUT, T_ACCUM, CF_UNIFORM, -2, 2, 0, 0},
    {O(ONE_HOT), "one_hot", F_LAYOUT, T_BASE, CF_WHOLE, 0, 0, 0, 0},
    {O(CONV2D_BACKWARD_DATA), "conv2d_backward_data", F_CONV_BWD, T_ACCUM,
     CF_UNIFORM, -1, 1, 0, 0},
    {O(CONV2D_BACKWARD_FILTER), "conv2d_backward_filter", F_CONV_BWD, T_ACCUM,
     CF_UNIFORM, -1, 1, 0, 0},
    {O(MAX_POOL2D_BACKWARD), "max_pool2d_backward", F_POOL_BWD, T_BASE,
     CF_UNIFORM, -2, 2, 0, 0},
    {O(MAX_POOL2D_SELECT), "max_pool2d_select", F_POOL_BWD, T_BASE, CF_UNIFORM,
     -2, 2, 0, 0},
    {O(AVG_POOL2D_BACKWARD), "avg_pool2d_backward", F_POOL_BWD, T_ACCUM,
     CF_UNIFORM, -2, 2, 0, 0},
    /* Linear algebra: the matrices' structure and domains are set per case
     * (catalogue_linalg.c). */
    {O(INV), "inv", F_LINALG, T_ACCUM, CF_DIAG_DOMINANT, -1, 1, 0, 0},
    {O(DET), "det", F_LINALG, T_ACCUM, CF_DIAG_DOMINANT, -1, 1, 0, 0},
    {O(LOGDET), "logdet", F_LINALG, T_ACCUM, CF_DIAG_DOMINANT, -1, 1, 0, 0},
    {O(SOLVE), "solve", F_LINALG, T_ACCUM, CF_DIAG_DOMINANT, -1, 1, 0, 0},
    {O(CHOLESKY), "cholesky", F_LINALG, T_ACCUM, CF_SPD, -1, 1, 0, 0},
    {O(QR), "qr", F_LINALG, T_ACCUM, CF_DIAG_DOMINANT, -1, 1, 0, 0},
    {O(TRIANGULAR_SOLVE), "triangular_solve", F_LINALG, T_ACCUM,
     CF_DIAG_DOMINANT, -1, 1, 0, 0},
};
#undef O
#define N_OPS (sizeof ops / sizeof ops[0])

const char *cf_op_name(uint32_t op) {
  for (size_t i = 0; i < N_OPS; i++)
    if (ops[i].op == op)
      return ops[i].name;
  return NULL;
}

int cf_op_known(const char *name) {
  for (size_t i = 0; i < N_OPS; i++)
    if (strcmp(ops[i].name, name) == 0)
      return 1;
  return 0;
}

void cf_tensor_set(cf_tensor *t, uint32_t dtype, uint32_t rank,
                   const int64_t *shape, const int64_t *strides,
                   int64_t offset) {
  int64_t hi = offset, st = 1, empty = 0;
  memset(&t->l, 0, sizeof t->l);
  t->l.struct_size = sizeof t->l;
  t->l.dtype = dtype;
  t->l.rank = rank;
  t->l.offset = offset;
  for (uint32_t i = rank; i-- > 0;) {
    t->l.shape[i] = shape[i];
    t->l.strides[i] = strides ? strides[i] : st;
    st *= shape[i] > 0 ? shape[i] : 1;
    if (shape[i] == 0)
      empty = 1;
    else if (t->l.strides[i] > 0)
      hi += (shape[i] - 1) * t->l.strides[i];
  }
  t->storage = empty ? offset : hi + 1;
}

cf_case *cf_add(cf_builder *b, const char *name) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    cf_case *c = realloc(b->cases, cap * sizeof *c);
    if (c == NULL) {
      b->oom = 1;
      return NULL;
    }
    b->cases = c;
    b->cap = cap;
  }
  cf_case *c = &b->cases[b->n++];
  memset(c, 0, sizeof *c);
  c->op = b->e->op;
  c->op_name = b->e->name;
  snprintf(c->name, sizeof c->name, "%s", name);
  c->dtype = b->dtype;
  c->cls = (cf_class)b->e->tol;
  cf_fmt_tolerance(b->dtype, c->cls, &c->rtol, &c->atol);
  return c;
}

/* Sets input i of c with the entry's domain. */
void cf_in_set(cf_builder *b, cf_case *c, uint32_t i, uint32_t rank,
               const int64_t *shape, const int64_t *strides, int64_t offset) {
  cf_tensor *t = &c->in[i];
  cf_tensor_set(t, b->dtype, rank, shape, strides, offset);
  t->values = b->e->values;
  t->lo = b->e->lo;
  t->hi = b->e->hi;
  if (i == 1 && (b->e->lo2 != 0 || b->e->hi2 != 0)) {
    t->lo = b->e->lo2;
    t->hi = b->e->hi2;
  }
  if (i >= c->n_in)
    c->n_in = i + 1;
}

void cf_in_values(cf_case *c, uint32_t i, cf_values v, double lo, double hi) {
  c->in[i].values = v;
  c->in[i].lo = lo;
  c->in[i].hi = hi;
}

void cf_out_set(cf_builder *b, cf_case *c, uint32_t i, uint32_t rank,
                const int64_t *shape, const int64_t *strides, int64_t offset) {
  cf_tensor_set(&c->out[i], b->dtype, rank, shape, strides, offset);
  if (i >= c->n_out)
    c->n_out = i + 1;
}

/* ---------------------------------------------------------- elementwise -- */

void cf_eltwise_cases(cf_builder *b, uint32_t n_in, uint32_t n_out,
                      void (*finish)(cf_builder *, cf_case *)) {
  static const int64_t s2[2] = {4, 33};
  cf_case *c;
  uint32_t i;
#define EACH_OUT(rank, shape)                                                  \
  for (uint32_t o = 0; o < n_out; o++)                                         \
  cf_out_set(b, c, o, rank, shape, NULL, 0)

  if ((c = cf_add(b, "contiguous [4,33]")) != NULL) {
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, NULL, 0);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  if ((c = cf_add(b, "rank-0")) != NULL) {
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 0, NULL, NULL, 0);
    EACH_OUT(0, NULL);
    finish(b, c);
  }
  if ((c = cf_add(b, "size-0 [0,33]")) != NULL) {
    static const int64_t z[2] = {0, 33};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, z, NULL, 0);
    EACH_OUT(2, z);
    finish(b, c);
  }
  if ((c = cf_add(b, "transposed inputs")) != NULL) {
    static const int64_t st[2] = {1, 4};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, st, 0);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  if ((c = cf_add(b, "stepped+offset inputs")) != NULL) {
    static const int64_t st[2] = {70, 2};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, st, 5 + i);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  if ((c = cf_add(b, "flipped inputs")) != NULL) {
    static const int64_t st[2] = {-33, -1};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, st, 4 * 33 - 1);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  if ((c = cf_add(b, "broadcast (stride 0)")) != NULL) {
    static const int64_t st[3][2] = {{0, 1}, {1, 0}, {0, 0}};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, st[i % 3], 0);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  /* Dense operands beside scalars (a learning rate, a loss scale): one
   * dimension over which every input steps by 1 or by 0 (a lone input is
   * the scalar). */
  if ((c = cf_add(b, "scalar inputs (stride 0) beside dense")) != NULL) {
    static const int64_t st0[2] = {0, 0};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, s2, n_in == 1 || i % 2 ? st0 : NULL, 0);
    EACH_OUT(2, s2);
    finish(b, c);
  }
  if ((c = cf_add(b, "permuted rank-3 [3,4,5]")) != NULL) {
    static const int64_t s3[3] = {3, 4, 5}, st[3] = {1, 3, 12};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 3, s3, i % 2 ? NULL : st, 0);
    EACH_OUT(3, s3);
    finish(b, c);
  }
  if ((c = cf_add(b, "large [300,517]")) != NULL) {
    static const int64_t sl[2] = {300, 517};
    for (i = 0; i < n_in; i++)
      cf_in_set(b, c, i, 2, sl, NULL, 0);
    EACH_OUT(2, sl);
    finish(b, c);
  }
#undef EACH_OUT
}

static void finish_none(cf_builder *b, cf_case *c) {
  (void)b, (void)c;
}

static void finish_unary(cf_builder *b, cf_case *c) {
  if (b->e->op == TYTO_PLUGIN_OP_LEAKY_RELU) {
    c->n_fattrs = 1;
    c->fattrs[0] = 0.1;
  } else if (b->e->op == TYTO_PLUGIN_OP_ELU) {
    c->n_fattrs = 1;
    c->fattrs[0] = 0.7;
  }
}

static void finish_ternary(cf_builder *b, cf_case *c) {
  if (b->e->op == TYTO_PLUGIN_OP_WHERE) {
    c->in[0].values = CF_WHOLE;
    c->in[0].lo = 0;
    c->in[0].hi = 1;
  }
}

/* ------------------------------------------------------------ copy, fill -- */

static void copy_cases(cf_builder *b) {
  static const int64_t s2[2] = {4, 33};
  cf_case *c;
  cf_eltwise_cases(b, 1, 1, finish_none);
  if ((c = cf_add(b, "transposed output")) != NULL) {
    static const int64_t st[2] = {1, 4};
    cf_in_set(b, c, 0, 2, s2, NULL, 0);
    cf_out_set(b, c, 0, 2, s2, st, 0);
  }
  if ((c = cf_add(b, "stepped+offset output")) != NULL) {
    static const int64_t st[2] = {70, 2};
    cf_in_set(b, c, 0, 2, s2, NULL, 0);
    cf_out_set(b, c, 0, 2, s2, st, 3);
  }
}

static void fill_cases(cf_builder *b) {
  static const int64_t s2[2] = {4, 33}, z[2] = {0, 5}, st[2] = {70, 2};
  static const int64_t sl[2] = {300, 517};
  cf_case *c;
  if ((c = cf_add(b, "contiguous [4,33]")) != NULL)
    cf_out_set(b, c, 0, 2, s2, NULL, 0);
  if ((c = cf_add(b, "rank-0")) != NULL)
    cf_out_set(b, c, 0, 0, NULL, NULL, 0);
  if ((c = cf_add(b, "size-0 [0,5]")) != NULL)
    cf_out_set(b, c, 0, 2, z, NULL, 0);
  if ((c = cf_add(b, "stepped+offset output")) != NULL)
    cf_out_set(b, c, 0, 2, s2, st, 7);
  if ((c = cf_add(b, "large [300,517]")) != NULL)
    cf_out_set(b, c, 0, 2, sl, NULL, 0);
  for (size_t k = 0; k < b->n; k++)
    if (b->cases[k].op == TYTO_PLUGIN_OP_FILL) {
      b->cases[k].n_fattrs = 1;
      b->cases[k].fattrs[0] = -1.25;
    }
}

/* ------------------------------------------------------------ reductions -- */

void cf_reduce_case(cf_builder *b, const char *name, uint32_t rank,
                    const int64_t *shape, const int64_t *strides,
                    const int64_t *axes, uint32_t n_axes) {
  int64_t os[TYTO_PLUGIN_MAX_RANK];
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  for (uint32_t i = 0; i < rank; i++)
    os[i] = shape[i];
  for (uint32_t a = 0; a < n_axes; a++)
    os[axes[a]] = 1;
  cf_in_set(b, c, 0, rank, shape, strides, 0);
  cf_out_set(b, c, 0, rank, os, NULL, 0);
  c->n_iattrs = n_axes;
  for (uint32_t a = 0; a < n_axes; a++)
    c->iattrs[a] = axes[a];
}

void cf_reduce_layouts(cf_builder *b, int arg, int index16) {
  static const int64_t s3[3] = {6, 7, 8}, perm[3] = {1, 6, 42};
  static const int64_t ax0[1] = {0}, ax1[1] = {1}, ax2[1] = {2};
  static const int64_t ax02[2] = {0, 2}, ax012[3] = {0, 1, 2};
  static const int64_t big[2] = {64, 1031}, big16[2] = {64, 256};
  static const int64_t z[2] = {3, 0}, bias[3] = {32, 4, 390};
  cf_reduce_case(b, "[6,7,8] axis 2", 3, s3, NULL, ax2, 1);
  cf_reduce_case(b, "[6,7,8] axis 0", 3, s3, NULL, ax0, 1);
  cf_reduce_case(b, "permuted [6,7,8] axis 1", 3, s3, perm, ax1, 1);
  if (index16)
    cf_reduce_case(b, "[64,256] axis 1", 2, big16, NULL, ax1, 1);
  else
    cf_reduce_case(b, "[64,1031] axis 1", 2, big, NULL, ax1, 1);
  if (!arg) {
    cf_reduce_case(b, "[6,7,8] axes 0,2", 3, s3, NULL, ax02, 2);
    cf_reduce_case(b, "[6,7,8] all axes", 3, s3, NULL, ax012, 3);
    /* A convolution's bias gradient: two reduced axes, long enough to be
     * cut into chunks that start inside a run of the inner one. */
    cf_reduce_case(b, "[32,4,390] axes 0,2", 3, bias, NULL, ax02, 2);
    cf_reduce_case(b, "size-0 [3,0] axis 0", 2, z, NULL, ax0, 1);
  }
}

static void reduce_cases(cf_builder *b) {
  const int arg =
      b->e->op == TYTO_PLUGIN_OP_ARGMAX || b->e->op == TYTO_PLUGIN_OP_ARGMIN;
  /* ARG*'s index is a whole number of the dtype: a 16-bit axis holds
   * indices up to 256 (bf16's whole numbers), f32's any. */
  cf_reduce_layouts(b, arg, arg && cf_dtype_16(b->dtype));
}

static void softmax_cases(cf_builder *b) {
  static const int64_t s2[2] = {5, 17}, st[2] = {1, 5}, big[2] = {16, 2000};
  static const int64_t ax0[1] = {0}, ax1[1] = {1};
  const struct {
    const char *name;
    const int64_t *shape, *strides, *axis;
  } cs[] = {{"[5,17] axis 1", s2, NULL, ax1},
            {"[5,17] axis 0", s2, NULL, ax0},
            {"transposed [5,17] axis 1", s2, st, ax1},
            {"[16,2000] axis 1", big, NULL, ax1}};
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    cf_case *c = cf_add(b, cs[k].name);
    if (c == NULL)
      return;
    cf_in_set(b, c, 0, 2, cs[k].shape, cs[k].strides, 0);
    cf_out_set(b, c, 0, 2, cs[k].shape, NULL, 0);
    c->n_iattrs = 1;
    c->iattrs[0] = cs[k].axis[0];
  }
}

/* ----------------------------------------------------------------- matmul --
 */

static void matmul_case(cf_builder *b, const char *name, int64_t batch,
                        int64_t m, int64_t k, int64_t n, int ta, int tb,
                        int bcast_b, int strided_a) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  const uint32_t r = batch ? 3 : 2, o = batch ? 1 : 0;
  int64_t as[3] = {batch, ta ? k : m, ta ? m : k};
  int64_t bs[3] = {batch, tb ? n : k, tb ? k : n};
  int64_t ys[3] = {batch, m, n};
  int64_t ast[3], bst[3];
  const int64_t *ap = NULL, *bp = NULL;
  if (strided_a) { /* A stored column-major with padded columns */
    ast[1] = 1;
    ast[2] = as[1] + 3;
    ast[0] = ast[2] * as[2];
    ap = ast + (1 - o);
  }
  if (bcast_b) {
    bst[0] = 0;
    bst[1] = bs[2];
    bst[2] = 1;
    bp = bst;
  }
  cf_in_set(b, c, 0, r, as + (1 - o), ap, strided_a ? 2 : 0);
  cf_in_set(b, c, 1, r, bs + (1 - o), bp, 0);
  cf_out_set(b, c, 0, r, ys + (1 - o), NULL, 0);
  c->n_iattrs = 2;
  c->iattrs[0] = ta;
  c->iattrs[1] = tb;
}

static void matmul_cases(cf_builder *b) {
  matmul_case(b, "[5,7]x[7,3]", 0, 5, 7, 3, 0, 0, 0, 0);
  matmul_case(b, "[64,65]x[65,33]", 0, 64, 65, 33, 0, 0, 0, 0);
  matmul_case(b, "A^T [9,6]x[9,11]", 0, 6, 9, 11, 1, 0, 0, 0);
  matmul_case(b, "B^T [6,9]x[11,9]", 0, 6, 9, 11, 0, 1, 0, 0);
  matmul_case(b, "strided+offset A", 0, 6, 9, 11, 0, 0, 0, 1);
  matmul_case(b, "batch 3 [3,5,7]x[3,7,4]", 3, 5, 7, 4, 0, 0, 0, 0);
  matmul_case(b, "broadcast batch of B", 3, 5, 7, 4, 0, 0, 1, 0);
  matmul_case(b, "k=0 [4,0]x[0,5]", 0, 4, 0, 5, 0, 0, 0, 0);
  matmul_case(b, "m=0 [0,3]x[3,5]", 0, 0, 3, 5, 0, 0, 0, 0);
  matmul_case(b, "[130,257]x[257,67]", 0, 130, 257, 67, 0, 0, 0, 0);
}

/* --------------------------------------------------------- conv and pool -- */

int64_t cf_out_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

int64_t cf_flip_hw(const int64_t s[4], int64_t st[4]) {
  st[3] = -1;
  st[2] = -s[3];
  st[1] = s[2] * s[3];
  st[0] = s[1] * st[1];
  return (s[2] - 1) * s[3] + s[3] - 1;
}

void cf_stepped(uint32_t rank, const int64_t *shape, int64_t step,
                int64_t *st) {
  for (uint32_t a = rank; a-- > 0; step *= shape[a] > 0 ? shape[a] : 1)
    st[a] = step;
}

/* at: stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups.
 * flags: 1 a bias, 2 x flipped (H and W reversed), 4 w permuted (O the
 * fastest axis, then C/groups, KH, KW), 8 y stepped (every element two
 * apart, offset 1), 16 the bias stepped (two apart, offset 1). */
static void conv_case(cf_builder *b, const char *name, int64_t n, int64_t c_in,
                      int64_t h, int64_t w, int64_t o, int64_t kh, int64_t kw,
                      const int64_t at[7], int flags) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  int64_t xs[4] = {n, c_in, h, w}, ws[4] = {o, c_in / at[6], kh, kw};
  int64_t ys[4] = {n, o, cf_out_extent(h, kh, at[0], at[2], at[4]),
                   cf_out_extent(w, kw, at[1], at[3], at[5])};
  int64_t xf[4], wp[4] = {1, o, o * ws[1], o * ws[1] * kh}, yst[4], bst = 2;
  const int64_t xo = flags & 2 ? cf_flip_hw(xs, xf) : 0;
  cf_stepped(4, ys, 2, yst);
  cf_in_set(b, c, 0, 4, xs, flags & 2 ? xf : NULL, xo);
  cf_in_set(b, c, 1, 4, ws, flags & 4 ? wp : NULL, 0);
  if (flags & 1)
    cf_in_set(b, c, 2, 1, &o, flags & 16 ? &bst : NULL, flags & 16 ? 1 : 0);
  cf_out_set(b, c, 0, 4, ys, flags & 8 ? yst : NULL, flags & 8 ? 1 : 0);
  c->n_iattrs = 7;
  for (int i = 0; i < 7; i++)
    c->iattrs[i] = at[i];
}

/* K below is the reduction of one output element, C/groups*KH*KW: devices
 * may compute small ones directly (the OpenCL plugin up to 32, in blocks
 * of 16 or 32 output channels) and others as GEMMs. */
static void conv_cases(cf_builder *b) {
  static const int64_t a1[7] = {1, 1, 1, 1, 1, 1, 1};
  static const int64_t a2[7] = {2, 2, 0, 0, 2, 2, 1};
  static const int64_t ag[7] = {1, 2, 1, 0, 1, 1, 2};
  static const int64_t a5[7] = {1, 1, 2, 2, 1, 1, 1};
  static const int64_t ag2[7] = {2, 1, 0, 2, 1, 2, 2};
  static const int64_t adw[7] = {1, 1, 1, 1, 1, 1, 4};
  conv_case(b, "3x3 s1 p1 +bias", 2, 3, 9, 10, 4, 3, 3, a1, 1);
  conv_case(b, "3x3 s2 d2 no bias", 2, 3, 11, 12, 5, 3, 3, a2, 0);
  conv_case(b, "groups 2, s(1,2) p(1,0)", 1, 4, 8, 9, 6, 3, 2, ag, 1);
  conv_case(b, "1x1 [1,16,7,7]", 1, 16, 7, 7, 8, 1, 1, a1, 0);
  conv_case(b, "1x5x5 o32 p2 +bias (K=25)", 3, 1, 12, 11, 32, 5, 5, a5, 1);
  conv_case(b, "flipped x, permuted w, stepped y, bias", 3, 1, 12, 11, 32, 5, 5,
            a5, 1 | 2 | 4 | 8 | 16);
  conv_case(b, "o40 g2 s(2,1) p(0,2) d(1,2) flipped x", 2, 4, 7, 9, 40, 2, 3,
            ag2, 1 | 2 | 4 | 8);
  conv_case(b, "depthwise [2,4,6,7] g4 3x3 p1 +bias", 2, 4, 6, 7, 4, 3, 3, adw,
            1);
  conv_case(b, "K=32 (2x4x4) o17 p1 +bias", 2, 2, 9, 9, 17, 4, 4, a1, 1);
  conv_case(b, "K=33 (3x1x11) o5 p1", 2, 3, 5, 13, 5, 1, 11, a1, 0);
  conv_case(b, "1x1 [1,1,1,1] o1 +bias", 1, 1, 1, 1, 1, 1, 1, a1, 1);
}

/* at: kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w. flags: 1 x
 * flipped (H and W reversed), 2 y stepped (every element two apart, offset
 * 1). */
static void pool_case(cf_builder *b, const char *name, const int64_t xs[4],
                      const int64_t at[6], int flags) {
  cf_case *c = cf_add(b, name);
  if (c == NULL)
    return;
  int64_t ys[4] = {xs[0], xs[1], cf_out_extent(xs[2], at[0], at[2], at[4], 1),
                   cf_out_extent(xs[3], at[1], at[3], at[5], 1)};
  int64_t xf[4], yst[4];
  const int64_t xo = flags & 1 ? cf_flip_hw(xs, xf) : 0;
  cf_stepped(4, ys, 2, yst);
  cf_in_set(b, c, 0, 4, xs, flags & 1 ? xf : NULL, xo);
  cf_out_set(b, c, 0, 4, ys, flags & 2 ? yst : NULL, flags & 2 ? 1 : 0);
  c->n_iattrs = 6;
  for (int i = 0; i < 6; i++)
    c->iattrs[i] = at[i];
}

/* Windows up to 4 with strides up to 4 are the ones the OpenCL plugin
 * unrolls; 5x5 and 6x6 take its general loops. */
static void pool_cases(cf_builder *b) {
  static const int64_t xs[4] = {2, 3, 9, 10}, one[4] = {1, 1, 1, 1};
  static const struct {
    const char *name;
    int64_t at[6];
    int flags;
  } cs[] = {{"3x3 s2 p1", {3, 3, 2, 2, 1, 1}, 0},
            {"2x2 s2", {2, 2, 2, 2, 0, 0}, 0},
            {"3x2 s(1,2)", {3, 2, 1, 2, 1, 0}, 0},
            {"2x2 s2 p1", {2, 2, 2, 2, 1, 1}, 0},
            {"2x2 s3 (gaps)", {2, 2, 3, 3, 0, 0}, 0},
            {"3x3 s3 p1", {3, 3, 3, 3, 1, 1}, 0},
            {"2x3 s(4,3) p(1,2)", {2, 3, 4, 3, 1, 2}, 0},
            {"4x4 s1", {4, 4, 1, 1, 0, 0}, 0},
            {"5x5 s5", {5, 5, 5, 5, 0, 0}, 0},
            {"5x5 s2 p2", {5, 5, 2, 2, 2, 2}, 0},
            {"6x6 s2 p3", {6, 6, 2, 2, 3, 3}, 0},
            {"1x1", {1, 1, 1, 1, 0, 0}, 0},
            {"flipped x, 3x3 s2 p1", {3, 3, 2, 2, 1, 1}, 1},
            {"flipped x, stepped y, 2x2 s3", {2, 2, 3, 3, 0, 0}, 3},
            {"stepped y, 5x5 s2 p2", {5, 5, 2, 2, 2, 2}, 2}};
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
    pool_case(b, cs[k].name, xs, cs[k].at, cs[k].flags);
  static const int64_t at2[6] = {2, 2, 2, 2, 1, 1};
  pool_case(b, "[1,1,1,1] 2x2 p1", one, at2, 0);
}

/* ---------------------------------------------------------------- random -- */

static void random_cases(cf_builder *b) {
  static const int64_t s1[1] = {1001}, s2[2] = {7, 13};
  const uint32_t op = b->e->op;
  const double f0 = op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 0.3 : -1.0;
  const double f1 = op == TYTO_PLUGIN_OP_RANDOM_UNIFORM ? 3.0 : 2.0;
  const uint32_t nf = op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2;
  cf_case *c;
  if ((c = cf_add(b, "[1001] seed 42")) != NULL) {
    cf_out_set(b, c, 0, 1, s1, NULL, 0);
    c->n_iattrs = 2;
    c->iattrs[0] = 42;
  }
  if ((c = cf_add(b, "[7,13] seed 7 offset 5")) != NULL) {
    cf_out_set(b, c, 0, 2, s2, NULL, 0);
    c->n_iattrs = 2;
    c->iattrs[0] = 7;
    c->iattrs[1] = 5;
  }
  for (size_t k = 0; k < b->n; k++)
    if (b->cases[k].op == op) {
      b->cases[k].n_fattrs = nf;
      b->cases[k].fattrs[0] = f0;
      b->cases[k].fattrs[1] = f1;
    }
}

/* ------------------------------------------------------------------ build --
 */

int cf_catalogue_build(uint32_t dtype, const char *only, cf_case **out,
                       size_t *n) {
  cf_builder b = {NULL, 0, 0, dtype, NULL, 0, only};
  if (cf_fmt_int(dtype))
    cf_intdt_cases(&b);
  for (size_t i = 0; i < N_OPS && !b.oom && !cf_fmt_int(dtype); i++) {
    if (only && strcmp(only, ops[i].name) != 0)
      continue;
    b.e = &ops[i];
    switch (ops[i].family) {
    case F_COPY: copy_cases(&b); break;
    case F_FILL: fill_cases(&b); break;
    case F_UNARY: cf_eltwise_cases(&b, 1, 1, finish_unary); break;
    case F_BINARY: cf_eltwise_cases(&b, 2, 1, finish_none); break;
    case F_TERNARY: cf_eltwise_cases(&b, 3, 1, finish_ternary); break;
    case F_REDUCE: reduce_cases(&b); break;
    case F_MATMUL: matmul_cases(&b); break;
    case F_SOFTMAX: softmax_cases(&b); break;
    case F_CONV: conv_cases(&b); break;
    case F_POOL: pool_cases(&b); break;
    case F_RANDOM: random_cases(&b); break;
    case F_FUSED: cf_fused_cases(&b); break;
    case F_CAST: cf_cast_cases(&b); break;
    case F_LAYOUT: cf_layout_cases(&b); break;
    case F_CONV_BWD: cf_conv_bwd_cases(&b); break;
    case F_POOL_BWD: cf_pool_bwd_cases(&b); break;
    case F_LINALG: cf_linalg_cases(&b); break;
    }
    cf_special_cases(&b);
  }
  if (b.oom) {
    free(b.cases);
    return -1;
  }
  *out = b.cases;
  *n = b.n;
  return 0;
}

int cf_dtype_16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

uint32_t cf_case_dtypes(const cf_case *c) {
  uint32_t m = TYTO_PLUGIN_DTYPE_BIT(c->dtype);
  for (uint32_t i = 0; i < c->n_in; i++)
    m |= TYTO_PLUGIN_DTYPE_BIT(c->in[i].l.dtype);
  for (uint32_t i = 0; i < c->n_out; i++)
    m |= TYTO_PLUGIN_DTYPE_BIT(c->out[i].l.dtype);
  for (uint32_t i = 0; i < c->n_instrs; i++)
    if (c->instrs[i].op == TYTO_PLUGIN_OP_CAST ||
        c->instrs[i].op == TYTO_PLUGIN_FUSED_CONST)
      m |= TYTO_PLUGIN_DTYPE_BIT(c->instrs[i].dtype);
  return m;
}

void cf_case_desc(cf_case *c, tyto_plugin_op_desc *d) {
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->op = c->op;
  d->n_inputs = c->n_in;
  d->n_outputs = c->n_out;
  for (uint32_t i = 0; i < c->n_in; i++)
    c->lin[i] = c->in[i].l;
  for (uint32_t i = 0; i < c->n_out; i++)
    c->lout[i] = c->out[i].l;
  d->inputs = c->lin;
  d->outputs = c->lout;
  d->n_iattrs = c->n_iattrs;
  d->iattrs = c->n_iattrs ? c->iattrs : NULL;
  d->n_fattrs = c->n_fattrs;
  d->fattrs = c->n_fattrs ? c->fattrs : NULL;
  if (c->n_instrs) {
    c->program.struct_size = sizeof c->program;
    c->program.n_instrs = c->n_instrs;
    c->program.instrs = c->instrs;
    d->blob = &c->program;
    d->blob_size = sizeof c->program;
  }
}
