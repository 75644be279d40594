/*
 * Elementwise ops (NEG .. ROUND, ADD .. GE, WHERE, FMA) and fused
 * elementwise programs (FUSED), as generated CUDA C++.
 *
 * The generator follows the OpenCL plugin's (opencl/eltwise.c) and shares
 * its op table and program decoding (plugins/common): a program of
 * instructions (a single op is the program "load the inputs, apply the op,
 * store") becomes a kernel body with one statement per live instruction,
 * each a call of the op's helper returning T, so every value is rounded to
 * the dtype as the op run alone would round it; NVRTC runs with
 * --fmad=false so no a*b + c becomes an FMA nobody asked for. All loads of
 * an element come before its stores: an output may be the memory of an
 * input with the same layout (in-place updates).
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
#include "../common/text.h"

/* A bigger program would make a source NVRTC chews on for minutes: it is
 * refused as unsupported, so the host runs it elsewhere. */
#define ELT_MAX_INSTRS 16384

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_FUSED || tpc_eltop_find(op) != NULL;
}

/* ---- source text --------------------------------------------------------- */

/* The exact value v rounded to the dtype, as a bit pattern: NaN,
 * infinities and -0 come out right. */
static void put_literal(tpc_text *b, uint32_t dtype, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_F32) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    tpc_text_put(b, "tyto_bits_f(0x%08lxu)", (unsigned long)u);
  } else {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    tpc_text_put(b, "tyto_bits_d(0x%016llxull)", (unsigned long long)u);
  }
}

/* The helper of each op whose flag is set in used[] (indexed like the
 * common table). */
static void put_helpers(tpc_text *b, const unsigned char *used) {
  static const char *const params[] = {"", "T x", "T x, T y", "T x, T y, T z"};
  size_t n;
  const tpc_eltop *ops = tpc_eltops(&n);
  for (size_t i = 0; i < n; i++)
    if (used[i])
      tpc_text_put(b,
                   "__device__ __forceinline__ T te_%s(%s%s) { return %s; }\n",
                   tpc_op_name(ops[i].op), params[ops[i].arity],
                   tpc_eltop_has_param(ops[i].op) ? ", T pa" : "", ops[i].expr);
}

/* Kernels <prefix>_d and <prefix>_n of program fi. Both take, in order:
 * a pointer per input, a pointer per output, the element count, the layout
 * table (struct tm<nops>, read by _n only) and with pa_arg the parameter of
 * LEAKY_RELU / ELU (else the instructions' attr is baked in). */
static void put_kernels(tpc_text *b, const char *prefix, const tpc_instr *fi,
                        uint32_t n, uint32_t n_in, uint32_t n_out,
                        const unsigned char *live, int pa_arg, uint32_t dtype) {
  unsigned char used_in[TCU_MAX_IO] = {0};
  for (uint32_t i = 0; i < n; i++)
    if (live[i] && fi[i].op == TYTO_PLUGIN_FUSED_INPUT)
      used_in[fi[i].arg[0]] = 1;
  const unsigned nops = (unsigned)(n_in + n_out);
  for (int variant = 0; variant < 2; variant++) {
    const int dense = variant == 0;
    tpc_text_put(b, "extern \"C\" __global__ void __launch_bounds__(%d) %s_%s(",
                 TCU_BLOCK, prefix, dense ? "d" : "n");
    for (uint32_t j = 0; j < n_in; j++)
      tpc_text_put(b, "const T *in%u, ", (unsigned)j);
    for (uint32_t j = 0; j < n_out; j++)
      tpc_text_put(b, "T *out%u, ", (unsigned)j);
    tpc_text_put(b, "i64 n, const tm<%u> meta%s) {\n", nops,
                 pa_arg ? ", T pa" : "");
    tpc_text_put(b, "  TYTO_FOR(i, n) {\n");
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
    tpc_elt_put_body(b, fi, n, live, pa_arg, dtype, put_literal);
    tpc_text_put(b, "  }\n}\n");
  }
}

static const char table_decl[] =
    "template <int N> struct tm { i64 v[8 + 8 * N]; int rank; int pad_; };\n";

/* The source of every single op: kernels tyto_<op>_d and tyto_<op>_n. NULL
 * when out of memory; the caller frees the text. */
static char *single_ops_source(uint32_t dtype) {
  tpc_text b = {0};
  size_t n_ops;
  const tpc_eltop *ops = tpc_eltops(&n_ops);
  unsigned char all[128];
  memset(all, 1, sizeof all);
  tpc_text_put(&b, "%s", table_decl);
  put_helpers(&b, all);
  for (size_t i = 0; i < n_ops; i++) {
    const tpc_eltop *o = &ops[i];
    tpc_instr fi[TPC_FUSED_SINGLE_MAX];
    unsigned char live[TPC_FUSED_SINGLE_MAX];
    uint32_t n = tpc_fused_single(o, fi, live);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tyto_%s", tpc_op_name(o->op));
    put_kernels(&b, prefix, fi, n, (uint32_t)o->arity, 1, live, 1, dtype);
  }
  return tpc_text_take(&b);
}

/* The source of a fused program: kernels tyto_fused_d and tyto_fused_n. */
static char *fused_source(const tpc_instr *fi, uint32_t n, uint32_t n_in,
                          uint32_t n_out, uint32_t dtype) {
  tpc_text b = {0};
  size_t n_ops;
  const tpc_eltop *ops = tpc_eltops(&n_ops);
  unsigned char used[128] = {0};
  unsigned char *live = malloc(n);
  if (live == NULL)
    return NULL;
  tpc_fused_live(fi, n, live);
  for (uint32_t i = 0; i < n; i++) {
    const tpc_eltop *o = tpc_eltop_find(fi[i].op);
    if (live[i] && o != NULL)
      used[o - ops] = 1;
  }
  tpc_text_put(&b, "%s", table_decl);
  put_helpers(&b, used);
  put_kernels(&b, "tyto_fused", fi, n, n_in, n_out, live, 0, dtype);
  free(live);
  return tpc_text_take(&b);
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
    int arity = tpc_eltop_find(d->op)->arity;
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
    code = tpc_fused_read(d->d->blob, d->d->blob_size, d->n_in, d->n_out,
                          ELT_MAX_INSTRS, "cuda", &fi, &n, why, sizeof why);
    if (code != 0)
      return host->error_new((tyto_plugin_code)code, "%s", why);
    for (uint32_t i = 0; i < n; i++)
      if (fi[i].op == TYTO_PLUGIN_OP_CAST) {
        free(fi);
        return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                               "fused: instruction %u is a CAST, which the "
                               "cuda plugin does not run inside a fused "
                               "program",
                               (unsigned)i);
      }
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
  elt_kernel *c = calloc(1, sizeof *c);
  if (c == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "%s: out of host memory preparing the kernel", op);
  k->impl = c;
  c->pa_arg = !fused;
  c->param = !fused && tpc_eltop_has_param(d->op) ? d->d->fattrs[0] : 0.0;
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
    char why[512];
    int code = tpc_fused_read(d->d->blob, d->d->blob_size, d->n_in, d->n_out,
                              ELT_MAX_INSTRS, "cuda", &fi, &n, why, sizeof why);
    if (code != 0)
      return host->error_new((tyto_plugin_code)code, "%s", why);
    source = fused_source(fi, n, d->n_in, d->n_out, d->dtype);
    free(fi);
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
    params[np++] = d->elem == 8 ? (void *)&pd : (void *)&pf;
  return tcu_run(
      dev, s, c->fn, (dim3){c->grid, 1, 1}, (dim3){TCU_BLOCK, 1, 1}, 0, params,
      d->op == TYTO_PLUGIN_OP_FUSED ? "fused kernel" : "elementwise kernel");
}

const tcu_family tcu_family_eltwise = {"eltwise", owns,   check,
                                       prepare,   launch, release};
