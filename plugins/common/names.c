/*
 * Op and dtype names, for messages and kernel names, and the plugins'
 * on/off environment variables (common.h).
 */
#include "common.h"

#include <ctype.h>
#include <stdlib.h>

/* a equals b ignoring case (ASCII). */
static int same_word(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return 0;
  return *a == *b;
}

int tpc_env_on(const char *name) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return 0;
  static const char *const off[] = {"0", "off", "no", "false"};
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
    if (same_word(v, off[i]))
      return 0;
  return 1;
}

const char *tpc_dtype_name(uint32_t d) {
  static const char *names[] = {"f32", "f64", "f16", "bf16",
                                "i32", "i64", "u8"};
  return d < sizeof names / sizeof names[0] ? names[d] : "unknown dtype";
}

const char *tpc_op_name(uint32_t op) {
  static const struct {
    uint32_t op;
    const char *name;
  } names[] = {
#define N(o, s) {TYTO_PLUGIN_OP_##o, s}
      N(COPY, "copy"),
      N(FILL, "fill"),
      N(NEG, "neg"),
      N(ABS, "abs"),
      N(SIGN, "sign"),
      N(EXP, "exp"),
      N(LOG, "log"),
      N(LOG1P, "log1p"),
      N(EXPM1, "expm1"),
      N(SQRT, "sqrt"),
      N(RSQRT, "rsqrt"),
      N(SQUARE, "square"),
      N(RECIPROCAL, "reciprocal"),
      N(SIN, "sin"),
      N(COS, "cos"),
      N(TAN, "tan"),
      N(ASIN, "asin"),
      N(ACOS, "acos"),
      N(ATAN, "atan"),
      N(SINH, "sinh"),
      N(COSH, "cosh"),
      N(TANH, "tanh"),
      N(ASINH, "asinh"),
      N(ACOSH, "acosh"),
      N(ATANH, "atanh"),
      N(SIGMOID, "sigmoid"),
      N(RELU, "relu"),
      N(LEAKY_RELU, "leaky_relu"),
      N(ELU, "elu"),
      N(SOFTPLUS, "softplus"),
      N(ERF, "erf"),
      N(FLOOR, "floor"),
      N(CEIL, "ceil"),
      N(ROUND, "round"),
      N(CAST, "cast"),
      N(ADD, "add"),
      N(SUB, "sub"),
      N(MUL, "mul"),
      N(DIV, "div"),
      N(POW, "pow"),
      N(MAX, "max"),
      N(MIN, "min"),
      N(ATAN2, "atan2"),
      N(EQ, "eq"),
      N(NE, "ne"),
      N(LT, "lt"),
      N(LE, "le"),
      N(GT, "gt"),
      N(GE, "ge"),
      N(WHERE, "where"),
      N(FMA, "fma"),
      N(SUM, "sum"),
      N(MEAN, "mean"),
      N(MAX_REDUCE, "max_reduce"),
      N(MIN_REDUCE, "min_reduce"),
      N(PROD, "prod"),
      N(ARGMAX, "argmax"),
      N(ARGMIN, "argmin"),
      N(LOG_SUM_EXP, "log_sum_exp"),
      N(NORM_L1, "norm_l1"),
      N(NORM_L2, "norm_l2"),
      N(MATMUL, "matmul"),
      N(PAD, "pad"),
      N(GATHER, "gather"),
      N(SCATTER_ADD, "scatter_add"),
      N(ONE_HOT, "one_hot"),
      N(SOFTMAX, "softmax"),
      N(LOG_SOFTMAX, "log_softmax"),
      N(CONV2D, "conv2d"),
      N(MAX_POOL2D, "max_pool2d"),
      N(AVG_POOL2D, "avg_pool2d"),
      N(CONV2D_BACKWARD_DATA, "conv2d_backward_data"),
      N(CONV2D_BACKWARD_FILTER, "conv2d_backward_filter"),
      N(MAX_POOL2D_BACKWARD, "max_pool2d_backward"),
      N(MAX_POOL2D_SELECT, "max_pool2d_select"),
      N(AVG_POOL2D_BACKWARD, "avg_pool2d_backward"),
      N(RANDOM_UNIFORM, "random_uniform"),
      N(RANDOM_NORMAL, "random_normal"),
      N(RANDOM_BERNOULLI, "random_bernoulli"),
      N(INV, "inv"),
      N(DET, "det"),
      N(LOGDET, "logdet"),
      N(SOLVE, "solve"),
      N(CHOLESKY, "cholesky"),
      N(QR, "qr"),
      N(TRIANGULAR_SOLVE, "triangular_solve"),
      N(FUSED, "fused"),
#undef N
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].op == op)
      return names[i].name;
  return "unknown op";
}

size_t tpc_dtype_size(uint32_t d) {
  switch (d) {
  case TYTO_PLUGIN_DTYPE_F32:
  case TYTO_PLUGIN_DTYPE_I32: return 4;
  case TYTO_PLUGIN_DTYPE_F64:
  case TYTO_PLUGIN_DTYPE_I64: return 8;
  case TYTO_PLUGIN_DTYPE_F16:
  case TYTO_PLUGIN_DTYPE_BF16: return 2;
  case TYTO_PLUGIN_DTYPE_U8: return 1;
  default: return 0;
  }
}
