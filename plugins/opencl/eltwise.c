/*
 * Elementwise ops (NEG .. ROUND, ADD .. GE, WHERE, FMA), CAST between two
 * dtypes (to its own dtype it is a COPY: copyfill.c) and fused elementwise
 * programs (FUSED), whose values may differ in dtype (ABI 1.5).
 *
 * All run generated OpenCL C. A program of instructions (plugin.h's
 * tyto_plugin_fused_program; a single op is the program "load the inputs,
 * apply the op, store", a CAST "load, cast, store") becomes a kernel body
 * with one statement per live instruction (common/eltwise_src.c, shared
 * with the CUDA plugin), each value in its dtype's compute type (float
 * for f16 and bf16) and each a call of the op's helper function, so every
 * value is rounded to its dtype as the op run alone would round it (16-bit
 * results with the prelude's integer conversions, dtype.c; a CAST from f64
 * to them once, through round-to-odd); FP_CONTRACT is off so that no
 * a*b + c becomes an FMA nobody asked for. All loads of an element come
 * before its stores: an output may be the memory of an input with the same
 * layout (in-place updates).
 *
 * Programs: every single op of a dtype lives in ONE source (two kernels per
 * op), with LEAKY_RELU's and ELU's parameter passed as an argument, so the
 * whole family costs one build per dtype. A fused program gets its own
 * source, with its constants baked in as exact bit patterns; the program
 * cache (cache.c) keeps it in memory and on disk.
 *
 * Layouts: at prepare the iteration space is collapsed over all operands
 * (common/eltwise_plan.c, shared with the CUDA plugin: dimensions ordered
 * by the output's strides, size-1 ones dropped, neighbours merged where
 * every operand steps through them as one). When
 * that leaves one dimension along which every operand has unit stride (or
 * an input stride 0: a broadcast scalar, read at its origin), the "_d"
 * kernel indexes linearly from each operand's origin; otherwise the
 * "_n" kernel splits the linear index into coordinates once per element
 * (rank - 1 divisions) and applies each operand's strides, read from a
 * small constant table built at prepare.
 *
 * Each work-item computes one element (no grid-stride loop: PoCL
 * vectorises across work-items only when each runs straight-line code, and
 * GPUs prefer it too), in work-groups of a fixed size (PoCL compiles a
 * kernel anew for each work-group size it is given).
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "../common/common.h"
#include "../common/eltwise_plan.h"
#include "../common/half.h"
#include "../common/text.h"

/* A bigger program would make a source the device compiler chews on for
 * minutes: it is refused as unsupported, so the host runs it elsewhere. */
#define ELT_MAX_INSTRS 16384
/* Work-items per work-group, and per enqueue (a multiple of it that any
 * device's size_t holds). */
#define ELT_LOCAL 64
#define ELT_CHUNK ((cl_long)1 << 30)

/* ---- the ops ------------------------------------------------------------- */

/* The ops and fused programs come from plugins/common: the op table
 * (tpc_eltops: each op as an expression of x (y, z) and pa in T, with the
 * CPU plugin's semantics, valid OpenCL C) and the program reader, which
 * the CUDA plugin shares. */
typedef tpc_eltop elt_opdef;
typedef tpc_instr elt_instr;

static int owns(uint32_t op) {
  return op == TYTO_PLUGIN_OP_FUSED || op == TYTO_PLUGIN_OP_CAST ||
         tpc_eltop_find(op) != NULL;
}

/* Reads and checks the fused program of d's blob into *out (n
 * instructions, malloc'd: the caller frees it), every value's dtype set
 * and run by the device. */
static tyto_plugin_error *read_program(tyto_plugin_device *dev,
                                       const ocl_desc *d, elt_instr **out,
                                       uint32_t *n_out) {
  char why[512];
  int code =
      tpc_fused_read(d->d->blob, d->d->blob_size, d->n_in, d->n_out,
                     ELT_MAX_INSTRS, "opencl", out, n_out, why, sizeof why);
  if (code == 0)
    code = tpc_fused_types(*out, *n_out, d->d, why, sizeof why);
  tyto_plugin_error *e =
      code != 0 ? ocl_error(OCL_HOST(dev), (tyto_plugin_code)code, "%s", why)
                : NULL;
  for (uint32_t i = 0; i < *n_out && e == NULL; i++) {
    char what[64];
    snprintf(what, sizeof what, "fused: instruction %u", (unsigned)i);
    e = ocl_dtype_check(dev, what, (*out)[i].dtype);
  }
  if (e != NULL) {
    free(*out);
    *out = NULL;
  }
  return e;
}

/* ---- source text --------------------------------------------------------- */

/* The exact value v rounded to the dtype, as a bit pattern of its compute
 * type: no decimal digits (or locale) in between, and NaN, infinities and
 * -0 come out right. */
static void put_literal(tpc_text *b, uint32_t dtype, double v) {
  if (dtype == TYTO_PLUGIN_DTYPE_F64) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    tpc_text_put(b, "as_double((ulong)0x%016llxul)", (unsigned long long)u);
    return;
  }
  float f = dtype == TYTO_PLUGIN_DTYPE_BF16
                ? tpc_bf16_to_f32(tpc_f64_to_bf16(v))
            : dtype == TYTO_PLUGIN_DTYPE_F16 ? tpc_f16_to_f32(tpc_f64_to_f16(v))
                                             : (float)v;
  tpc_text_put(b, "as_float((uint)0x%08lxu)", (unsigned long)tpc_f32_bits(f));
}

/* The type a tensor of dtype is stored as in a kernel's arguments. */
static const char *storage_type(uint32_t dtype) {
  switch (dtype) {
  case TYTO_PLUGIN_DTYPE_F64: return "double";
  case TYTO_PLUGIN_DTYPE_BF16: return "ushort";
  case TYTO_PLUGIN_DTYPE_F16: return "half";
  default: return "float";
  }
}

/* The dialect of the shared generator (common/eltwise_plan.h): the
 * prelude's 16-bit conversions (dtype.c). */
static void put_load(tpc_text *b, uint32_t dtype, const char *ptr,
                     const char *index) {
  if (dtype == TYTO_PLUGIN_DTYPE_BF16)
    tpc_text_put(b, "tyto_bf16_f32(%s[%s])", ptr, index);
  else if (dtype == TYTO_PLUGIN_DTYPE_F16)
    tpc_text_put(b, "tyto_ld_f16(%s, %s)", ptr, index);
  else
    tpc_text_put(b, "%s[%s]", ptr, index);
}

static void put_store(tpc_text *b, uint32_t dtype, const char *ptr,
                      const char *index, const char *v) {
  if (dtype == TYTO_PLUGIN_DTYPE_BF16)
    tpc_text_put(b, "%s[%s] = tyto_f32_bf16(%s);", ptr, index, v);
  else if (dtype == TYTO_PLUGIN_DTYPE_F16)
    tpc_text_put(b, "tyto_st_f16(%s, %s, %s);", ptr, index, v);
  else
    tpc_text_put(b, "%s[%s] = %s;", ptr, index, v);
}

static void put_round(tpc_text *b, uint32_t from, uint32_t to, const char *v) {
  const char *f = to == TYTO_PLUGIN_DTYPE_BF16 ? "bf16" : "f16";
  if (from == TYTO_PLUGIN_DTYPE_F64) /* once: through round-to-odd */
    tpc_text_put(b, "tyto_%s_f32(tyto_bits_%s(tyto_f64_f32odd(%s)))", f, f, v);
  else
    tpc_text_put(b, "tyto_round_%s(%s)", f, v);
}

static const tpc_elt_dialect dialect = {put_load, put_store, put_round,
                                        put_literal};

/* The kernels <prefix>_d and <prefix>_n of program fi (n instructions,
 * dtypes set, n_in inputs, n_out outputs of dtypes in_dt[], out_dt[];
 * live[] from tpc_fused_live()). Both take, in this order: (pointer,
 * origin) per input, then per output, the element count, the index of the
 * enqueue's first element, the layout table and its rank (read by _n
 * only), and with pa_arg the parameter of LEAKY_RELU / ELU in the compute
 * type of dtype pa_dt (else the instructions' attr is baked in). Input j
 * with bit j of bcast set is one element that _d reads at its origin for
 * every i (a scalar broadcast: a learning rate, a loss scale). */
static void put_kernels(tpc_text *b, const char *prefix, const elt_instr *fi,
                        uint32_t n, uint32_t n_in, const uint32_t *in_dt,
                        uint32_t n_out, const uint32_t *out_dt,
                        const unsigned char *live, int pa_arg, uint32_t pa_dt,
                        uint32_t bcast) {
  unsigned char used_in[OCL_MAX_IO] = {0};
  for (uint32_t i = 0; i < n; i++)
    if (live[i] && fi[i].op == TYTO_PLUGIN_FUSED_INPUT)
      used_in[fi[i].arg[0]] = 1;
  for (int variant = 0; variant < 2; variant++) {
    const int dense = variant == 0;
    tpc_text_put(b, "__kernel void %s_%s(", prefix, dense ? "d" : "n");
    for (uint32_t j = 0; j < n_in; j++)
      tpc_text_put(b, "__global const %s *in%u, long io%u, ",
                   storage_type(in_dt[j]), (unsigned)j, (unsigned)j);
    for (uint32_t j = 0; j < n_out; j++)
      tpc_text_put(b, "__global %s *out%u, long oo%u, ",
                   storage_type(out_dt[j]), (unsigned)j, (unsigned)j);
    tpc_text_put(b, "long n, long base, __constant long *meta, int rank");
    if (pa_arg)
      tpc_text_put(b, ", %s pa", tpc_compute_type(pa_dt));
    tpc_text_put(b, ") {\n  long i = base + (long)get_global_id(0);\n"
                    "  if (i < n) {\n");
    /* Element offsets: a<j> of input j, b<j> of output j. */
    for (uint32_t j = 0; j < n_in + n_out; j++) {
      int in = j < n_in;
      unsigned jj = (unsigned)(in ? j : j - n_in);
      if (in && !used_in[j])
        continue;
      int step = dense && !(in && (bcast >> j & 1u));
      tpc_text_put(b, "    long %c%u = %s%u%s;\n", in ? 'a' : 'b', jj,
                   in ? "io" : "oo", jj, step ? " + i" : "");
    }
    if (!dense) {
      /* meta: the shape (8 longs, fastest dimension first), then 8
       * strides per operand, inputs then outputs. */
      tpc_text_put(b, "    long r = i;\n"
                      "    for (int k = 0; k < rank - 1; k++) {\n"
                      "      long q = r / meta[k], c = r - q * meta[k];\n");
      for (uint32_t j = 0; j < n_in + n_out; j++) {
        int in = j < n_in;
        if (!in || used_in[j])
          tpc_text_put(b, "      %c%u += c * meta[%u + k];\n", in ? 'a' : 'b',
                       (unsigned)(in ? j : j - n_in), (unsigned)(8 + 8 * j));
      }
      tpc_text_put(b, "      r = q;\n    }\n");
      for (uint32_t j = 0; j < n_in + n_out; j++) {
        int in = j < n_in;
        if (!in || used_in[j])
          tpc_text_put(b, "    %c%u += r * meta[%u + rank - 1];\n",
                       in ? 'a' : 'b', (unsigned)(in ? j : j - n_in),
                       (unsigned)(8 + 8 * j));
      }
    }
    tpc_elt_put_body_typed(b, fi, n, live, pa_arg, &dialect);
    tpc_text_put(b, "  }\n}\n");
  }
}

/* The source of every single op of dtype: kernels tyto_<op>_d and
 * tyto_<op>_n, each the program "inputs, op, output" with the parameter
 * as an argument. Returns NULL when out of memory; the caller frees the
 * text. */
static char *single_ops_source(uint32_t dtype) {
  tpc_text b = {0};
  size_t n_ops;
  const elt_opdef *ops = tpc_eltops(&n_ops);
  tpc_text_put(&b, "#pragma OPENCL FP_CONTRACT OFF\n");
  for (size_t i = 0; i < n_ops; i++)
    tpc_elt_put_helper(&b, ops[i].op, dtype, "");
  const uint32_t dts[3] = {dtype, dtype, dtype};
  for (size_t i = 0; i < n_ops; i++) {
    const elt_opdef *o = &ops[i];
    elt_instr fi[TPC_FUSED_SINGLE_MAX];
    unsigned char live[TPC_FUSED_SINGLE_MAX];
    uint32_t n = tpc_fused_single(o, fi, live);
    for (uint32_t k = 0; k < n; k++)
      fi[k].dtype = dtype;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tyto_%s", ocl_op_name(o->op));
    put_kernels(&b, prefix, fi, n, (uint32_t)o->arity, dts, 1, dts, live, 1,
                dtype, 0);
  }
  return tpc_text_take(&b);
}

/* The source of a fused program (dtypes set): kernels <prefix>_d and
 * <prefix>_n, _d reading the inputs of bcast at their origin. With pa_arg
 * (a single op's program) the parameter is an argument. Returns NULL when
 * out of memory; the caller frees the text. */
static char *fused_source(const char *prefix, const elt_instr *fi, uint32_t n,
                          const ocl_desc *d, int pa_arg, uint32_t bcast) {
  tpc_text b = {0};
  unsigned char *live = malloc(n);
  if (live == NULL)
    return NULL;
  tpc_fused_live(fi, n, live);
  uint32_t in_dt[OCL_MAX_IO], out_dt[OCL_MAX_IO];
  for (uint32_t j = 0; j < d->n_in; j++)
    in_dt[j] = d->in[j].l.dtype;
  for (uint32_t j = 0; j < d->n_out; j++)
    out_dt[j] = d->out[j].l.dtype;
  tpc_text_put(&b, "#pragma OPENCL FP_CONTRACT OFF\n");
  tpc_elt_put_helpers(&b, fi, n, live, "");
  put_kernels(&b, prefix, fi, n, d->n_in, in_dt, d->n_out, out_dt, live, pa_arg,
              d->dtype, bcast);
  free(live);
  return tpc_text_take(&b);
}

/* CAST as the program "input 0, cast, output 0". */
static uint32_t cast_program(const ocl_desc *d, elt_instr *fi) {
  fi[0] = (elt_instr){TYTO_PLUGIN_FUSED_INPUT, {0, 0, 0}, 0, d->in[0].l.dtype};
  fi[1] = (elt_instr){TYTO_PLUGIN_OP_CAST, {0, 0, 0}, 0, d->dtype};
  fi[2] = (elt_instr){TYTO_PLUGIN_FUSED_OUTPUT, {1, 0, 0}, 0, d->dtype};
  return 3;
}

/* ---- the family ---------------------------------------------------------- */

/* d's layouts as the shared checks and planner see them. */
static void operands(const ocl_desc *d, tpc_operands *a) {
  tpc_operands_init(a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
}

typedef struct elt_kernel {
  cl_kernel kernel;
  cl_mem meta;  /* the _n kernel's layout table, else NULL */
  cl_int rank;  /* the _n kernel's collapsed rank, 0 for _d */
  size_t local; /* work-group size */
  int pa_arg;   /* a single op: the kernel takes the parameter */
  double param; /* LEAKY_RELU's slope, ELU's alpha */
} elt_kernel;

static tyto_plugin_error *check(tyto_plugin_device *dev, const ocl_desc *d) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *op = ocl_op_name(d->op);
  const int fused = d->op == TYTO_PLUGIN_OP_FUSED;
  if (fused) {
    if (d->n_in < 1 || d->n_in > OCL_MAX_IO || d->n_out < 1 ||
        d->n_out > OCL_MAX_IO)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "fused: expected 1 to %d inputs and 1 to %d outputs, "
                       "got %u and %u",
                       OCL_MAX_IO, OCL_MAX_IO, (unsigned)d->n_in,
                       (unsigned)d->n_out);
  } else {
    int arity = tpc_fused_arity(d->op);
    if (d->n_in != (uint32_t)arity || d->n_out != 1)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: expected %d input%s and 1 output, got %u and %u",
                       op, arity, arity > 1 ? "s" : "", (unsigned)d->n_in,
                       (unsigned)d->n_out);
    if (tpc_eltop_has_param(d->op) && d->d->n_fattrs < 1)
      return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "%s: expected the %s as real attribute 0, got %u real "
                       "attributes",
                       op,
                       d->op == TYTO_PLUGIN_OP_ELU ? "alpha" : "negative slope",
                       (unsigned)d->d->n_fattrs);
  }
  tpc_operands opnds;
  operands(d, &opnds);
  char why[512];
  int code = tpc_elt_check_shapes(&opnds, why, sizeof why);
  if (code != 0)
    return ocl_error(host, (tyto_plugin_code)code, "%s", why);
  for (uint32_t j = 0; j < d->n_out && d->out[0].n > 0; j++) {
    const tyto_plugin_layout *l = &d->out[j].l;
    for (uint32_t a = 0; a < l->rank; a++)
      if (l->strides[a] == 0 && l->shape[a] > 1) {
        char which[32] = "the output";
        if (d->n_out > 1)
          snprintf(which, sizeof which, "output %u", (unsigned)j);
        return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                         "%s: %s has stride 0 on axis %u of extent %lld; "
                         "each output element must have its own place",
                         op, which, (unsigned)a, (long long)l->shape[a]);
      }
  }
  if (fused) {
    elt_instr *fi;
    uint32_t n;
    tyto_plugin_error *e = read_program(dev, d, &fi, &n);
    if (e != NULL)
      return e;
    free(fi);
    /* The kernel's arguments: (pointer, origin) per operand, n, base, the
     * layout table and the rank. */
    size_t most = 0;
    cl_uint bits = 64;
    size_t ptr = sizeof(cl_long);
    if (clGetDeviceInfo(dev->info->id, CL_DEVICE_ADDRESS_BITS, sizeof bits,
                        &bits, NULL) == CL_SUCCESS)
      ptr = bits / 8;
    size_t need = (d->n_in + d->n_out) * (ptr + sizeof(cl_long)) +
                  2 * sizeof(cl_long) + ptr + sizeof(cl_int);
    if (clGetDeviceInfo(dev->info->id, CL_DEVICE_MAX_PARAMETER_SIZE,
                        sizeof most, &most, NULL) == CL_SUCCESS &&
        need > most)
      return ocl_error(host, TYTO_PLUGIN_ERR_UNSUPPORTED,
                       "fused: %u inputs and %u outputs need %zu bytes of "
                       "kernel arguments, device \"%s\" takes at most %zu",
                       (unsigned)d->n_in, (unsigned)d->n_out, need,
                       dev->info->name, most);
  }
  return NULL;
}

/* The build options: correctly rounded f32 division and sqrt where the
 * device offers them, so DIV, RECIPROCAL, SQRT and RSQRT match the CPU's,
 * for programs that compute in f32 (f32, f16, bf16 values). */
static const char *build_options(tyto_plugin_device *dev, int f32) {
  cl_device_fp_config fp = 0;
  if (f32 &&
      clGetDeviceInfo(dev->info->id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp,
                      NULL) == CL_SUCCESS &&
      (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT))
    return "-cl-fp32-correctly-rounded-divide-sqrt";
  return NULL;
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const ocl_desc *d = &k->desc;
  const char *op = ocl_op_name(d->op);
  const int fused = d->op == TYTO_PLUGIN_OP_FUSED;
  elt_kernel *c = calloc(1, sizeof *c);
  if (c == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory preparing the kernel", op);
  k->impl = c;
  c->pa_arg = !fused && d->op != TYTO_PLUGIN_OP_CAST;
  c->param = !fused && tpc_eltop_has_param(d->op) ? d->d->fattrs[0] : 0.0;
  if (d->out[0].n == 0)
    return NULL; /* never launched */

  tpc_operands opnds;
  operands(d, &opnds);
  tpc_elt_plan plan;
  tpc_elt_plan_make(&opnds, &plan);
  /* One dimension along which every input steps by 1 or not at all (a
   * scalar broadcast) and every output by 1: the _d kernel, with those
   * inputs read at their origin. PoCL vectorises it; the table-driven _n
   * kernel it does not (Adam's update of the seed CNN's 6.4M dense
   * weights, whose learning rate is such a scalar: 48 ms a step with
   * PoCL on one core, 9 in the _d kernel). */
  uint32_t bcast;
  int dense = tpc_elt_plan_linear(&plan, d->n_in, d->n_in + d->n_out, &bcast);
  c->rank = dense ? 0 : (cl_int)plan.rank;
  char name[64];
  char *source;
  /* The program's dtype for the build: f64 when a value is f64 (the
   * pragma), and whether a value computes in f32. */
  uint32_t dt = d->dtype;
  int f32 = d->cdtype == TYTO_PLUGIN_DTYPE_F32;
  if (fused || d->op == TYTO_PLUGIN_OP_CAST) {
    elt_instr *fi, cast[3];
    uint32_t n;
    if (fused) {
      tyto_plugin_error *e = read_program(dev, d, &fi, &n);
      if (e != NULL)
        return e;
    } else {
      n = cast_program(d, cast);
      fi = cast;
    }
    dt = TYTO_PLUGIN_DTYPE_F32;
    f32 = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (fi[i].dtype == TYTO_PLUGIN_DTYPE_F64)
        dt = TYTO_PLUGIN_DTYPE_F64;
      else
        f32 = 1;
    }
    source =
        fused_source(fused ? "tyto_fused" : "tyto_cast", fi, n, d, 0, bcast);
    if (fused)
      free(fi);
    snprintf(name, sizeof name, "tyto_%s_%s", fused ? "fused" : "cast",
             dense ? "d" : "n");
  } else if (bcast != 0) {
    /* A single op with a broadcast input: its own small program, so that
     * the shared source of every op stays one build per dtype. */
    const elt_opdef *o = tpc_eltop_find(d->op);
    if (o == NULL) /* owns() took only the table's ops */
      return ocl_error(host, TYTO_PLUGIN_ERR_INTERNAL,
                       "%s: not an elementwise op of the table", op);
    elt_instr fi[TPC_FUSED_SINGLE_MAX];
    unsigned char live[TPC_FUSED_SINGLE_MAX];
    uint32_t n = tpc_fused_single(o, fi, live);
    for (uint32_t q = 0; q < n; q++)
      fi[q].dtype = d->dtype;
    source = fused_source("tyto_single", fi, n, d, 1, bcast);
    snprintf(name, sizeof name, "tyto_single_d");
  } else {
    source = single_ops_source(d->dtype);
    snprintf(name, sizeof name, "tyto_%s_%s", op, dense ? "d" : "n");
  }
  if (source == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "%s: out of host memory writing the kernel source", op);
  tyto_plugin_error *e = ocl_kernel_new(
      dev, dt, source, build_options(dev, f32), name, &c->kernel);
  free(source);
  if (e != NULL)
    return e;
  /* A fixed work-group size: left to the driver, PoCL compiles the kernel
   * anew for every global size it sees. */
  size_t most = 0;
  cl_int err = clGetKernelWorkGroupInfo(c->kernel, dev->info->id,
                                        CL_KERNEL_WORK_GROUP_SIZE, sizeof most,
                                        &most, NULL);
  if (err != CL_SUCCESS)
    return ocl_error_cl(host, "clGetKernelWorkGroupInfo", err,
                        "work-group size of %s (%s) on \"%s\"", name,
                        ocl_dtype_name(dt), dev->info->name);
  for (c->local = ELT_LOCAL; c->local > 1 && c->local > most;)
    c->local /= 2;
  if (dense)
    return NULL;

  /* The _n kernel's table: shape, then each operand's strides. */
  cl_long meta[8 + 8 * TPC_ELT_MAX_OPERANDS];
  const uint32_t nops = d->n_in + d->n_out;
  tpc_elt_plan_table(&plan, nops, meta);
  size_t bytes = (8 + 8 * (size_t)nops) * sizeof meta[0];
  c->meta = clCreateBuffer(
      dev->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, meta, &err);
  if (c->meta == NULL || err != CL_SUCCESS)
    return ocl_error_cl(host, "clCreateBuffer",
                        err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                        "creating the %zu-byte layout table of %s on \"%s\"",
                        bytes, op, dev->info->name);
  return NULL;
}

static void release(tyto_plugin_kernel *k) {
  elt_kernel *c = k->impl;
  if (c == NULL)
    return;
  if (c->kernel != NULL)
    clReleaseKernel(c->kernel);
  if (c->meta != NULL)
    clReleaseMemObject(c->meta);
  free(c);
  k->impl = NULL;
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const ocl_arg *in,
                                 const ocl_arg *out, const ocl_arg *ws) {
  (void)ws;
  elt_kernel *c = k->impl;
  const ocl_desc *d = &k->desc;
  cl_long n = d->out[0].n;
  /* The parameter in the compute type (f32 for f16 and bf16). */
  cl_float pf = (cl_float)c->param;
  cl_double pd = c->param;
  ocl_args a = OCL_ARGS(dev, c->kernel);
  for (uint32_t j = 0; j < d->n_in; j++)
    ocl_args_mem(&a, &in[j]);
  for (uint32_t j = 0; j < d->n_out; j++)
    ocl_args_mem(&a, &out[j]);
  ocl_args_put(&a, sizeof n, &n);
  cl_uint base_arg = a.next++;
  ocl_args_put(&a, sizeof c->meta, &c->meta);
  ocl_args_put(&a, sizeof c->rank, &c->rank);
  if (c->pa_arg)
    ocl_args_put(&a, d->celem,
                 d->celem == 8 ? (const void *)&pd : (const void *)&pf);
  tyto_plugin_error *e = a.e;
  /* One element per work-item, in chunks of at most ELT_CHUNK. */
  const char *what = d->op == TYTO_PLUGIN_OP_FUSED  ? "fused kernel"
                     : d->op == TYTO_PLUGIN_OP_CAST ? "cast kernel"
                                                    : "elementwise kernel";
  for (cl_long base = 0; base < n && e == NULL; base += ELT_CHUNK) {
    cl_long m = n - base < ELT_CHUNK ? n - base : ELT_CHUNK;
    size_t local = c->local;
    size_t global = (size_t)((m + (cl_long)local - 1) / (cl_long)local) * local;
    e = ocl_set_arg(dev, c->kernel, base_arg, sizeof base, &base);
    if (e == NULL)
      e = ocl_enqueue(dev, s, c->kernel, 1, &global, &local, what);
  }
  return e;
}

const ocl_family ocl_family_eltwise = {"eltwise", owns,   check,
                                       prepare,   launch, release};
