/*
 * Elementwise ops (NEG .. ROUND, ADD .. GE, WHERE, FMA), CAST and fused
 * elementwise programs (FUSED), as generated CUDA C++.
 *
 * The generator follows the OpenCL plugin's (opencl/eltwise.c) and shares
 * its op table and program decoding (plugins/common): a program of
 * instructions (a single op is the program "load the inputs, apply the op,
 * store"; CAST "load, convert, store") becomes a kernel body with one
 * statement per live instruction, each a call of the op's helper, so every
 * value is rounded to its dtype as the op run alone would round it; NVRTC
 * runs with --fmad=false so no a*b + c becomes an FMA nobody asked for.
 * All loads of an element come before its stores: an output may be the
 * memory of an input with the same layout (in-place updates).
 *
 * Dtypes (ABI 1.5): each value has its own (tpc_fused_types), and the
 * shared generator (common/eltwise_src.c, tpc_elt_put_body_typed) writes
 * the element loop through this plugin's dialect. An f64 value is a
 * double, any other a float; an f16 or bf16 value is the float that holds
 * it exactly: loaded from its 16 bits, an instruction's f32 result rounded
 * to the format once (tyto_rf16, tyto_rbf16), stored as 16 bits, all with
 * the integer conversions of plugins/common/half.h (half_src.h). A CAST
 * rounds once from its operand's exact value (from f64 to 16 bits through
 * round-to-odd f32).
 *
 * Every single op of a dtype lives in ONE source (two kernels per op),
 * with LEAKY_RELU's and ELU's parameter passed as an argument, so the
 * family costs one compile per dtype. A fused program gets its own source,
 * constants baked in as exact bit patterns.
 *
 * Layouts: at prepare the iteration space is collapsed over all operands
 * (common/eltwise_plan.c, shared with the OpenCL plugin: dimensions
 * ordered by the output's strides, size-1 ones dropped, neighbours merged
 * where every operand steps through them as one). When
 * one dimension is left along which every operand has unit stride, the
 * "_d" kernel indexes linearly; otherwise the "_n" kernel splits the
 * linear index into coordinates and applies each operand's strides, passed
 * by value in a table sized for the operand count.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/eltwise_plan.h"
#include "../common/half.h"
#include "../common/text.h"

/* A bigger program would make a source NVRTC chews on for minutes: it is
 * refused as unsupported, so the host runs it elsewhere. */
#define ELT_MAX_INSTRS 16384

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_FUSED || op == TYTO_PLUGIN_OP_CAST ||
         tpc_eltop_find(op) != NULL;
}

/* ---- source text --------------------------------------------------------- */

/* A value of each dtype is held in its compute type (tpc_compute_type:
 * double for f64, else float); stored as itself, or as its 16 bits. */
static const char *stype(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F64   ? "double"
         : dt == TYTO_PLUGIN_DTYPE_F32 ? "float"
                                       : "unsigned short";
}

/* The CUDA dialect of the shared generator (tpc_elt_dialect), with the
 * conversions of half_src.h. */
static void dl_load(tpc_text *b, uint32_t dt, const char *ptr,
                    const char *index) {
  tpc_text_put(b, "%s(%s[%s])",
               dt == TYTO_PLUGIN_DTYPE_F16    ? "tyto_f16_f"
               : dt == TYTO_PLUGIN_DTYPE_BF16 ? "tyto_bf16_f"
                                              : "",
               ptr, index);
}

static void dl_store(tpc_text *b, uint32_t dt, const char *ptr,
                     const char *index, const char *v) {
  tpc_text_put(b, "%s[%s] = %s(%s);", ptr, index,
               dt == TYTO_PLUGIN_DTYPE_F16    ? "tyto_f_f16"
               : dt == TYTO_PLUGIN_DTYPE_BF16 ? "tyto_f_bf16"
                                              : "",
               v);
}

/* v of dtype `from` rounded to f16 or bf16 once, as an f32: from f64
 * through round-to-odd f32 (tyto_d_f16). */
static void dl_round(tpc_text *b, uint32_t from, uint32_t to, const char *v) {
  const int h = to == TYTO_PLUGIN_DTYPE_F16;
  if (from == TYTO_PLUGIN_DTYPE_F64)
    tpc_text_put(b, "%s(%s(%s))", h ? "tyto_f16_f" : "tyto_bf16_f",
                 h ? "tyto_d_f16" : "tyto_d_bf16", v);
  else
    tpc_text_put(b, "%s(%s)", h ? "tyto_rf16" : "tyto_rbf16", v);
}

/* The exact value v rounded to dtype (once, from the double), as a bit
 * pattern of its compute type: NaN, infinities and -0 come out right. */
static void dl_literal(tpc_text *b, uint32_t dtype, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_F64) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    tpc_text_put(b, "tyto_bits_d(0x%016llxull)", (unsigned long long)u);
    return;
  }
  float f = dtype == TYTO_PLUGIN_DTYPE_F16 ? tpc_f16_to_f32(tpc_f64_to_f16(v))
            : dtype == TYTO_PLUGIN_DTYPE_BF16
                ? tpc_bf16_to_f32(tpc_f64_to_bf16(v))
                : (float)v;
  tpc_text_put(b, "tyto_bits_f(0x%08lxu)", (unsigned long)tpc_f32_bits(f));
}

static const tpc_elt_dialect dialect = {dl_load, dl_store, dl_round,
                                        dl_literal};

#define DEVICE_FN "__device__ __forceinline__ "

/* Kernels <prefix>_d and <prefix>_n of program fi (dtypes set). Both take,
 * in order: a pointer per input, a pointer per output (of their dtypes'
 * storage types), the element count, the layout table (struct tm<nops>,
 * read by _n only) and with pa_arg the parameter of LEAKY_RELU / ELU in
 * output 0's compute type (else the instructions' attr is baked in). */
static void put_kernels(tpc_text *b, const char *prefix, const tpc_instr *fi,
                        uint32_t n, uint32_t n_in, uint32_t n_out,
                        const unsigned char *live, int pa_arg) {
  unsigned char used_in[TCU_MAX_IO] = {0};
  uint32_t in_dt[TCU_MAX_IO] = {0}, out_dt[TCU_MAX_IO] = {0};
  for (uint32_t i = 0; i < n; i++) {
    if (fi[i].op == TYTO_PLUGIN_FUSED_INPUT) {
      in_dt[fi[i].arg[0]] = fi[i].dtype;
      used_in[fi[i].arg[0]] |= live[i];
    } else if (fi[i].op == TYTO_PLUGIN_FUSED_OUTPUT) {
      out_dt[fi[i].arg[1]] = fi[i].dtype;
    }
  }
  const unsigned nops = (unsigned)(n_in + n_out);
  for (int variant = 0; variant < 2; variant++) {
    const int dense = variant == 0;
    tpc_text_put(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s_%s(",
                 TCU_BLOCK, prefix, dense ? "d" : "n");
    for (uint32_t j = 0; j < n_in; j++)
      tpc_text_put(b, "const %s *in%u, ", stype(in_dt[j]), (unsigned)j);
    for (uint32_t j = 0; j < n_out; j++)
      tpc_text_put(b, "%s *out%u, ", stype(out_dt[j]), (unsigned)j);
    tpc_text_put(b, "i64 n, const tm<%u> meta", nops);
    if (pa_arg)
      tpc_text_put(b, ", %s pa", tpc_compute_type(out_dt[0]));
    tpc_text_put(b, ") {\n  TYTO_FOR(i, n) {\n");
    for (uint32_t j = 0; j < nops; j++) {
      int in = j < n_in;
      unsigned jj = (unsigned)(in ? j : j - n_in);
      if (in && !used_in[j])
        continue;
      tpc_text_put(b, "    i64 %c%u = %s;\n", in ? 'a' : 'b', jj,
                   dense ? "i" : "0");
    }
    if (!dense) {
      /* meta: the shape (8, fastest first), then 8 strides per operand,
       * inputs then outputs. */
      tpc_text_put(b, "    i64 r = i;\n"
                      "    for (int k = 0; k < meta.rank - 1; k++) {\n"
                      "      i64 q = r / meta.v[k], c = r - q * meta.v[k];\n");
      for (uint32_t j = 0; j < nops; j++) {
        int in = j < n_in;
        if (!in || used_in[j])
          tpc_text_put(b, "      %c%u += c * meta.v[%u + k];\n", in ? 'a' : 'b',
                       (unsigned)(in ? j : j - n_in), (unsigned)(8 + 8 * j));
      }
      tpc_text_put(b, "      r = q;\n    }\n");
      for (uint32_t j = 0; j < nops; j++) {
        int in = j < n_in;
        if (!in || used_in[j])
          tpc_text_put(b, "    %c%u += r * meta.v[%u + meta.rank - 1];\n",
                       in ? 'a' : 'b', (unsigned)(in ? j : j - n_in),
                       (unsigned)(8 + 8 * j));
      }
    }
    tpc_elt_put_body_typed(b, fi, n, live, pa_arg, &dialect);
    tpc_text_put(b, "  }\n}\n");
  }
}

static const char table_decl[] =
    "template <int N> struct tm { i64 v[8 + 8 * N]; int rank; int pad_; };\n";

/* The source of every single op of `dtype`: kernels tyto_<op>_d and
 * tyto_<op>_n. NULL when out of memory; the caller frees the text. */
static char *single_ops_source(uint32_t dtype) {
  tpc_text b = {0};
  size_t n_ops;
  const tpc_eltop *ops = tpc_eltops(&n_ops);
  tpc_text_put(&b, "%s", table_decl);
  for (size_t i = 0; i < n_ops; i++)
    tpc_elt_put_helper(&b, ops[i].op, dtype, DEVICE_FN);
  for (size_t i = 0; i < n_ops; i++) {
    const tpc_eltop *o = &ops[i];
    tpc_instr fi[TPC_FUSED_SINGLE_MAX];
    unsigned char live[TPC_FUSED_SINGLE_MAX];
    uint32_t n = tpc_fused_single(o, fi, live);
    for (uint32_t j = 0; j < n; j++)
      fi[j].dtype = dtype;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tyto_%s", tpc_op_name(o->op));
    put_kernels(&b, prefix, fi, n, (uint32_t)o->arity, 1, live, 1);
  }
  return tpc_text_take(&b);
}

/* The source of a fused program (dtypes set): kernels tyto_fused_d and
 * tyto_fused_n. */
static char *fused_source(const tpc_instr *fi, uint32_t n, uint32_t n_in,
                          uint32_t n_out) {
  tpc_text b = {0};
  unsigned char *live = malloc(n);
  if (live == NULL)
    return NULL;
  tpc_fused_live(fi, n, live);
  tpc_text_put(&b, "%s", table_decl);
  tpc_elt_put_helpers(&b, fi, n, live, DEVICE_FN);
  put_kernels(&b, "tyto_fused", fi, n, n_in, n_out, live, 0);
  free(live);
  return tpc_text_take(&b);
}

/* The program of CAST run alone: load input 0, convert, store output 0. */
static uint32_t cast_program(const tcu_desc *d, tpc_instr *fi) {
  fi[0] = (tpc_instr){TYTO_PLUGIN_FUSED_INPUT, {0, 0, 0}, 0, d->in[0].l.dtype};
  fi[1] = (tpc_instr){TYTO_PLUGIN_OP_CAST, {0, 0, 0}, 0, d->out[0].l.dtype};
  fi[2] =
      (tpc_instr){TYTO_PLUGIN_FUSED_OUTPUT, {1, 0, 0}, 0, d->out[0].l.dtype};
  return 3;
}

/* Reads FUSED's program into *fi (malloc'd) and gives every value its
 * dtype, checked against the layouts; NULL or the error. */
static tyto_plugin_error *read_program(tyto_plugin_device *dev,
                                       const tcu_desc *d, tpc_instr **fi,
                                       uint32_t *n) {
  char why[512];
  int code = tpc_fused_read(d->d->blob, d->d->blob_size, d->n_in, d->n_out,
                            ELT_MAX_INSTRS, "cuda", fi, n, why, sizeof why);
  if (code == 0 && (code = tpc_fused_types(*fi, *n, d->d, why, sizeof why)))
    free(*fi);
  if (code != 0) {
    *fi = NULL;
    return TCU_HOST(dev)->error_new((tyto_plugin_code)code, "%s", why);
  }
  return NULL;
}

/* ---- the family ---------------------------------------------------------- */

/* d's layouts as the shared checks and planner see them. */
static void operands(const tcu_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

typedef struct elt_kernel {
  cudaKernel_t fn;
  int pa_arg;   /* a single op: the kernel takes the parameter */
  double param; /* LEAKY_RELU's slope, ELU's alpha */
  unsigned grid;
  /* The layout table passed by value: v[8 + 8 * nops], then rank. */
  size_t meta_bytes;
  unsigned char meta[(8 + 8 * TPC_ELT_MAX_OPERANDS) * 8 + 8];
} elt_kernel;

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const char *op = tcu_op_name(d->op);
  const int fused = d->op == TYTO_PLUGIN_OP_FUSED;
  if (fused) {
    if (d->n_in < 1 || d->n_out < 1)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "fused: expected 1 to %d inputs and 1 to %d "
                             "outputs, got %u and %u",
                             TCU_MAX_IO, TCU_MAX_IO, (unsigned)d->n_in,
                             (unsigned)d->n_out);
  } else {
    int arity = tpc_fused_arity(d->op);
    if (d->n_in != (uint32_t)arity || d->n_out != 1)
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "%s: expected %d input%s and 1 output, got %u "
                             "and %u",
                             op, arity, arity > 1 ? "s" : "", (unsigned)d->n_in,
                             (unsigned)d->n_out);
    if (tpc_eltop_has_param(d->op) && d->d->n_fattrs < 1)
      return host->error_new(
          TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
          "%s: expected the %s as real attribute 0, got %u "
          "real attributes",
          op, d->op == TYTO_PLUGIN_OP_ELU ? "alpha" : "negative slope",
          (unsigned)d->d->n_fattrs);
  }
  tpc_operands opnds;
  operands(d, &opnds);
  char why[512];
  int code = tpc_elt_check_shapes(&opnds, why, sizeof why);
  if (code != 0)
    return host->error_new((tyto_plugin_code)code, "%s", why);
  for (uint32_t j = 0; j < d->n_out && d->out[0].n > 0; j++) {
    const tyto_plugin_layout *l = &d->out[j].l;
    for (uint32_t a = 0; a < l->rank; a++)
      if (l->strides[a] == 0 && l->shape[a] > 1)
        return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                               "%s: output %u has stride 0 on axis %u of "
                               "extent %lld; each output element must have "
                               "its own place",
                               op, (unsigned)j, (unsigned)a,
                               (long long)l->shape[a]);
  }
  if (fused) {
    tpc_instr *fi;
    uint32_t n;
    tyto_plugin_error *e = read_program(dev, d, &fi, &n);
    if (e != NULL)
      return e;
    free(fi);
  }
  return NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tyto_plugin_host *host = TCU_HOST(dev);
  const tcu_desc *d = &k->desc;
  const char *op = tcu_op_name(d->op);
  const int fused = d->op == TYTO_PLUGIN_OP_FUSED;
  const int single = !fused && d->op != TYTO_PLUGIN_OP_CAST;
  elt_kernel *c = calloc(1, sizeof *c);
  if (c == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "%s: out of host memory preparing the kernel", op);
  k->impl = c;
  c->pa_arg = single;
  c->param = single && tpc_eltop_has_param(d->op) ? d->d->fattrs[0] : 0.0;
  if (d->out[0].n == 0)
    return NULL; /* never launched */

  tpc_operands opnds;
  operands(d, &opnds);
  tpc_elt_plan plan;
  tpc_elt_plan_make(&opnds, &plan);
  char name[64];
  char *source;
  if (fused) {
    tpc_instr *fi;
    uint32_t n;
    tyto_plugin_error *e = read_program(dev, d, &fi, &n);
    if (e != NULL)
      return e;
    source = fused_source(fi, n, d->n_in, d->n_out);
    free(fi);
    snprintf(name, sizeof name, "tyto_fused_%s", plan.dense ? "d" : "n");
  } else if (d->op == TYTO_PLUGIN_OP_CAST) {
    tpc_instr fi[3];
    source = fused_source(fi, cast_program(d, fi), 1, 1);
    snprintf(name, sizeof name, "tyto_fused_%s", plan.dense ? "d" : "n");
  } else {
    source = single_ops_source(d->dtype);
    snprintf(name, sizeof name, "tyto_%s_%s", op, plan.dense ? "d" : "n");
  }
  if (source == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "%s: out of host memory writing the kernel source",
                           op);
  tyto_plugin_error *e = tcu_function(dev, d->dtype, source, name, &c->fn);
  free(source);
  if (e != NULL)
    return e;
  c->grid = tcu_blocks(dev, d->out[0].n);
  /* The table: shape, then each operand's strides, then the rank. */
  const uint32_t nops = d->n_in + d->n_out;
  int64_t v[8 + 8 * TPC_ELT_MAX_OPERANDS];
  tpc_elt_plan_table(&plan, nops, v);
  size_t vb = (8 + 8 * (size_t)nops) * sizeof v[0];
  int32_t rank[2] = {plan.dense ? 1 : (int32_t)(plan.rank > 0 ? plan.rank : 1),
                     0};
  memcpy(c->meta, v, vb);
  memcpy(c->meta + vb, rank, sizeof rank);
  c->meta_bytes = vb + sizeof rank;
  return NULL;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  free(k->impl);
  k->impl = NULL;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  (void)ws;
  const elt_kernel *c = k->impl;
  const tcu_desc *d = &k->desc;
  void *params[2 * TCU_MAX_IO + 3];
  void *ptrs[2 * TCU_MAX_IO];
  uint32_t np = 0;
  for (uint32_t j = 0; j < d->n_in; j++) {
    ptrs[j] = in[j].ptr;
    params[np++] = &ptrs[j];
  }
  for (uint32_t j = 0; j < d->n_out; j++) {
    ptrs[d->n_in + j] = out[j].ptr;
    params[np++] = &ptrs[d->n_in + j];
  }
  int64_t n = d->out[0].n;
  float pf = (float)c->param;
  double pd = c->param;
  params[np++] = &n;
  params[np++] = (void *)c->meta;
  if (c->pa_arg)
    params[np++] =
        d->dtype == TYTO_PLUGIN_DTYPE_F64 ? (void *)&pd : (void *)&pf;
  return tcu_run(dev, s, c->fn, (dim3){c->grid, 1, 1}, (dim3){TCU_BLOCK, 1, 1},
                 0, params,
                 d->op == TYTO_PLUGIN_OP_FUSED  ? "fused kernel"
                 : d->op == TYTO_PLUGIN_OP_CAST ? "cast kernel"
                                                : "elementwise kernel");
}

const tcu_family tcu_family_eltwise = {"eltwise", owns,   check,
                                       prepare,   launch, release};
