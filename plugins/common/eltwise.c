/*
 * The elementwise op table and fused-program decoding (common.h), shared by
 * the plugins that generate kernels from them (OpenCL C, CUDA C++).
 */
#include "common.h"
#include "text.h"

#include <stdlib.h>
#include <string.h>

/* The smallest structs we read: the whole of ABI 1.2's. */
#define PROG_MIN                                                               \
  (offsetof(tyto_plugin_fused_program, instrs) +                               \
   sizeof(((tyto_plugin_fused_program *)0)->instrs))
#define INSTR_MIN                                                              \
  (offsetof(tyto_plugin_fused_instr, attr) +                                   \
   sizeof(((tyto_plugin_fused_instr *)0)->attr))

static const tpc_eltop ops[] = {
    {TYTO_PLUGIN_OP_NEG, 1, "-x"},
    {TYTO_PLUGIN_OP_ABS, 1, "fabs(x)"},
    {TYTO_PLUGIN_OP_SIGN, 1,
     "x != x ? x : copysign(x == (T)0 ? (T)0 : (T)1, x)"},
    {TYTO_PLUGIN_OP_EXP, 1, "exp(x)"},
    {TYTO_PLUGIN_OP_LOG, 1, "log(x)"},
    {TYTO_PLUGIN_OP_LOG1P, 1, "log1p(x)"},
    {TYTO_PLUGIN_OP_EXPM1, 1, "expm1(x)"},
    {TYTO_PLUGIN_OP_SQRT, 1, "sqrt(x)"},
    {TYTO_PLUGIN_OP_RSQRT, 1, "(T)1 / sqrt(x)"},
    {TYTO_PLUGIN_OP_SQUARE, 1, "x * x"},
    {TYTO_PLUGIN_OP_RECIPROCAL, 1, "(T)1 / x"},
    {TYTO_PLUGIN_OP_SIN, 1, "sin(x)"},
    {TYTO_PLUGIN_OP_COS, 1, "cos(x)"},
    {TYTO_PLUGIN_OP_TAN, 1, "tan(x)"},
    {TYTO_PLUGIN_OP_ASIN, 1, "asin(x)"},
    {TYTO_PLUGIN_OP_ACOS, 1, "acos(x)"},
    {TYTO_PLUGIN_OP_ATAN, 1, "atan(x)"},
    {TYTO_PLUGIN_OP_SINH, 1, "sinh(x)"},
    {TYTO_PLUGIN_OP_COSH, 1, "cosh(x)"},
    {TYTO_PLUGIN_OP_TANH, 1, "tanh(x)"},
    {TYTO_PLUGIN_OP_ASINH, 1, "asinh(x)"},
    {TYTO_PLUGIN_OP_ACOSH, 1, "acosh(x)"},
    {TYTO_PLUGIN_OP_ATANH, 1, "atanh(x)"},
    {TYTO_PLUGIN_OP_SIGMOID, 1, "(T)1 / ((T)1 + exp(-x))"},
    {TYTO_PLUGIN_OP_RELU, 1, "x < (T)0 ? (T)0 : x"},
    {TYTO_PLUGIN_OP_LEAKY_RELU, 1, "x < (T)0 ? pa * x : x"},
    {TYTO_PLUGIN_OP_ELU, 1, "x < (T)0 ? pa * expm1(x) : x"},
    /* log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, no
     * cancellation */
    {TYTO_PLUGIN_OP_SOFTPLUS, 1,
     "(x > (T)0 ? x : (T)0) + log1p(exp(-fabs(x)))"},
    {TYTO_PLUGIN_OP_ERF, 1, "erf(x)"},
    {TYTO_PLUGIN_OP_FLOOR, 1, "floor(x)"},
    {TYTO_PLUGIN_OP_CEIL, 1, "ceil(x)"},
    {TYTO_PLUGIN_OP_ROUND, 1, "round(x)"},
    {TYTO_PLUGIN_OP_ADD, 2, "x + y"},
    {TYTO_PLUGIN_OP_SUB, 2, "x - y"},
    {TYTO_PLUGIN_OP_MUL, 2, "x * y"},
    {TYTO_PLUGIN_OP_DIV, 2, "x / y"},
    {TYTO_PLUGIN_OP_POW, 2, "pow(x, y)"},
    {TYTO_PLUGIN_OP_MAX, 2, "(x > y || x != x) ? x : y"},
    {TYTO_PLUGIN_OP_MIN, 2, "(x < y || x != x) ? x : y"},
    {TYTO_PLUGIN_OP_ATAN2, 2, "atan2(x, y)"},
    {TYTO_PLUGIN_OP_EQ, 2, "x == y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_NE, 2, "x != y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_LT, 2, "x < y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_LE, 2, "x <= y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_GT, 2, "x > y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_GE, 2, "x >= y ? (T)1 : (T)0"},
    {TYTO_PLUGIN_OP_WHERE, 3, "x != (T)0 ? y : z"},
    {TYTO_PLUGIN_OP_FMA, 3, "fma(x, y, z)"},
};
#define N_OPS (sizeof ops / sizeof ops[0])

const tpc_eltop *tpc_eltops(size_t *n_out) {
  *n_out = N_OPS;
  return ops;
}

const tpc_eltop *tpc_eltop_find(uint32_t op) {
  for (size_t i = 0; i < N_OPS; i++)
    if (ops[i].op == op)
      return &ops[i];
  return NULL;
}

int tpc_eltop_has_param(uint32_t op) {
  return op == TYTO_PLUGIN_OP_LEAKY_RELU || op == TYTO_PLUGIN_OP_ELU;
}

/* Whether instruction i may read value v; 0 or an error code. */
static int check_value(const tpc_instr *fi, uint32_t i, uint32_t v, char *why,
                       size_t size) {
  if (v >= i)
    return tpc_fail(
        why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "fused: instruction %u reads value %u, which is not defined "
        "before it (operands must name earlier instructions)",
        (unsigned)i, (unsigned)v);
  if (fi[v].op == TYTO_PLUGIN_FUSED_OUTPUT)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "fused: instruction %u reads value %u, which is an OUTPUT "
                    "and defines no value",
                    (unsigned)i, (unsigned)v);
  return 0;
}

int tpc_fused_read(const void *blob, size_t blob_size, uint32_t n_in,
                   uint32_t n_out, uint32_t max_instrs, const char *plugin,
                   tpc_instr **out, uint32_t *n_out_instrs, char *why,
                   size_t size) {
  *out = NULL;
  if (blob == NULL || blob_size < PROG_MIN)
    return tpc_fail(
        why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "fused: expected a tyto_plugin_fused_program of at least %zu "
        "bytes as the blob, got %s%zu bytes",
        (size_t)PROG_MIN, blob != NULL ? "" : "no blob and ", blob_size);
  const tyto_plugin_fused_program *p = blob;
  if (p->struct_size < PROG_MIN)
    return tpc_fail(
        why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "fused: the program's struct_size is %zu, expected at least "
        "%zu (a tyto_plugin_fused_program of ABI 1.2)",
        p->struct_size, (size_t)PROG_MIN);
  if (p->n_instrs == 0)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "fused: the program has no instructions (expected at least "
                    "one OUTPUT for each of the %u outputs)",
                    (unsigned)n_out);
  if (p->instrs == NULL)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "fused: the program has %u instructions but no instruction "
                    "array",
                    (unsigned)p->n_instrs);
  if (p->instrs[0].struct_size < INSTR_MIN)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "fused: the instructions' struct_size is %zu, expected at "
                    "least %zu (a tyto_plugin_fused_instr of ABI 1.2)",
                    p->instrs[0].struct_size, (size_t)INSTR_MIN);
  if (p->n_instrs > max_instrs)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_UNSUPPORTED,
                    "fused: the program has %u instructions; the %s plugin "
                    "compiles programs of at most %u",
                    (unsigned)p->n_instrs, plugin, (unsigned)max_instrs);
  if (n_out > TYTO_PLUGIN_FUSED_MAX_IO)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                    "fused: %u outputs; at most %d", (unsigned)n_out,
                    TYTO_PLUGIN_FUSED_MAX_IO);
  const uint32_t n = p->n_instrs;
  tpc_instr *fi = malloc((size_t)n * sizeof *fi);
  if (fi == NULL)
    return tpc_fail(why, size, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                    "fused: out of host memory reading a program of %u "
                    "instructions",
                    (unsigned)n);
  int32_t writer[TYTO_PLUGIN_FUSED_MAX_IO];
  for (uint32_t k = 0; k < TYTO_PLUGIN_FUSED_MAX_IO; k++)
    writer[k] = -1;
  int code = 0;
  for (uint32_t i = 0; i < n && code == 0; i++) {
    const tyto_plugin_fused_instr *in =
        TYTO_PLUGIN_AT(tyto_plugin_fused_instr, p->instrs, i);
    fi[i].op = in->op;
    memcpy(fi[i].arg, in->arg, sizeof fi[i].arg);
    fi[i].attr = in->attr;
    fi[i].dtype = TYTO_PLUGIN_HAS_FIELD(in, tyto_plugin_fused_instr, dtype)
                      ? in->dtype
                      : TPC_DTYPE_UNSET;
    const uint32_t *a = fi[i].arg;
    if (in->op == TYTO_PLUGIN_FUSED_INPUT) {
      if (a[0] >= n_in)
        code = tpc_fail(
            why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
            "fused: instruction %u reads input %u, but the op has %u "
            "input%s",
            (unsigned)i, (unsigned)a[0], (unsigned)n_in, n_in == 1 ? "" : "s");
    } else if (in->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      code = check_value(fi, i, a[0], why, size);
      if (code == 0 && a[1] >= n_out)
        code =
            tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "fused: instruction %u writes output %u, but the op has "
                     "%u output%s",
                     (unsigned)i, (unsigned)a[1], (unsigned)n_out,
                     n_out == 1 ? "" : "s");
      else if (code == 0 && writer[a[1]] >= 0)
        code = tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: instruction %u writes output %u, which "
                        "instruction %d already writes (each output is written "
                        "exactly once)",
                        (unsigned)i, (unsigned)a[1], (int)writer[a[1]]);
      else if (code == 0)
        writer[a[1]] = (int32_t)i;
    } else if (in->op == TYTO_PLUGIN_OP_CAST) {
      code = check_value(fi, i, a[0], why, size);
    } else if (in->op != TYTO_PLUGIN_FUSED_CONST) {
      const tpc_eltop *o = tpc_eltop_find(in->op);
      if (o == NULL)
        code =
            tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "fused: instruction %u has op code %u, which is neither "
                     "INPUT, CONST, OUTPUT nor an elementwise op (NEG .. "
                     "ROUND, CAST, ADD .. GE, WHERE, FMA)",
                     (unsigned)i, (unsigned)in->op);
      for (int j = 0; o != NULL && j < o->arity && code == 0; j++)
        code = check_value(fi, i, a[j], why, size);
    }
  }
  for (uint32_t k = 0; k < n_out && code == 0; k++)
    if (writer[k] < 0)
      code = tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                      "fused: output %u is never written (expected one OUTPUT "
                      "instruction for each of the %u outputs)",
                      (unsigned)k, (unsigned)n_out);
  if (code != 0) {
    free(fi);
    return code;
  }
  *out = fi;
  *n_out_instrs = n;
  return 0;
}

int tpc_fused_arity(uint32_t op) {
  if (op == TYTO_PLUGIN_OP_CAST)
    return 1;
  const tpc_eltop *o = tpc_eltop_find(op);
  return o != NULL ? o->arity : 0;
}

static int float_dtype(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F32 || dt == TYTO_PLUGIN_DTYPE_F64 ||
         dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16;
}

int tpc_fused_types(tpc_instr *fi, uint32_t n, const tyto_plugin_op_desc *d,
                    char *why, size_t size) {
  for (uint32_t i = 0; i < n; i++) {
    tpc_instr *x = &fi[i];
    const uint32_t *a = x->arg;
    if (x->op == TYTO_PLUGIN_FUSED_INPUT) {
      const tyto_plugin_layout *l = tpc_at(d->inputs, a[0]);
      x->dtype = l->dtype;
    } else if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      const tyto_plugin_layout *l = tpc_at(d->outputs, a[1]);
      if (fi[a[0]].dtype != l->dtype)
        return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: instruction %u writes a value of dtype %s to "
                        "output %u, whose dtype is %s",
                        (unsigned)i, tpc_dtype_name(fi[a[0]].dtype),
                        (unsigned)a[1], tpc_dtype_name(l->dtype));
      x->dtype = l->dtype;
    } else if (x->op == TYTO_PLUGIN_FUSED_CONST ||
               x->op == TYTO_PLUGIN_OP_CAST) {
      if (x->dtype == TPC_DTYPE_UNSET) {
        if (x->op == TYTO_PLUGIN_OP_CAST)
          return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "fused: instruction %u is a CAST, but the "
                          "instructions stop before their dtype field "
                          "(ABI 1.5)",
                          (unsigned)i);
        x->dtype = ((const tyto_plugin_layout *)tpc_at(d->outputs, 0))->dtype;
      }
      if (!float_dtype(x->dtype))
        return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "fused: instruction %u (%s) has dtype %s (%u); "
                        "expected f32, f64, f16 or bf16",
                        (unsigned)i,
                        x->op == TYTO_PLUGIN_OP_CAST ? "cast" : "const",
                        tpc_dtype_name(x->dtype), (unsigned)x->dtype);
    } else {
      int ar = tpc_fused_arity(x->op);
      x->dtype = fi[a[0]].dtype;
      for (int k = 1; k < ar; k++)
        if (fi[a[k]].dtype != x->dtype)
          return tpc_fail(why, size, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "fused: instruction %u (%s) reads values of dtypes "
                          "%s and %s; convert with CAST first",
                          (unsigned)i, tpc_op_name(x->op),
                          tpc_dtype_name(x->dtype),
                          tpc_dtype_name(fi[a[k]].dtype));
    }
  }
  return 0;
}

int tpc_fused_mixed(const tpc_instr *fi, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (fi[i].op == TYTO_PLUGIN_OP_CAST || fi[i].dtype != fi[0].dtype)
      return 1;
  return 0;
}

void tpc_fused_live(const tpc_instr *fi, uint32_t n, unsigned char *live) {
  memset(live, 0, n);
  for (uint32_t i = n; i-- > 0;) {
    const tpc_instr *x = &fi[i];
    if (x->op == TYTO_PLUGIN_FUSED_OUTPUT) {
      live[i] = 1;
      live[x->arg[0]] = 1;
      continue;
    }
    if (!live[i] || x->op == TYTO_PLUGIN_FUSED_INPUT ||
        x->op == TYTO_PLUGIN_FUSED_CONST)
      continue;
    for (int k = 0; k < tpc_fused_arity(x->op); k++)
      live[x->arg[k]] = 1;
  }
}

uint32_t tpc_fused_single(const tpc_eltop *o, tpc_instr *fi,
                          unsigned char *live) {
  uint32_t n = 0;
  for (int k = 0; k < o->arity; k++)
    fi[n++] = (tpc_instr){
        TYTO_PLUGIN_FUSED_INPUT, {(uint32_t)k, 0, 0}, 0, TPC_DTYPE_UNSET};
  fi[n++] = (tpc_instr){o->op, {0, 1, 2}, 0, TPC_DTYPE_UNSET};
  fi[n] =
      (tpc_instr){TYTO_PLUGIN_FUSED_OUTPUT, {n - 1, 0, 0}, 0, TPC_DTYPE_UNSET};
  n++;
  tpc_fused_live(fi, n, live);
  return n;
}
