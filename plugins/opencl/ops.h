/*
 * How op families plug into the OpenCL plugin's kernels.
 *
 * kernels.c owns the generic part of supports_op/prepare/launch:
 *  - it checks every layout of the descriptor (present, complete, rank <= 8,
 *    no negative extent, reach without 64-bit overflow), that every operand
 *    has one dtype (CAST, FUSED and integer operands excepted: int.c),
 *    f32, f64, f16, bf16, i32 or i64, that
 *    the device runs that dtype, has a compiler and 64-bit integers;
 *  - it finds the family that owns the op and lets it check the rest;
 *  - at launch it resolves every binding to an ocl_arg, after checking that
 *    the elements the layout reaches lie inside the bound buffer, and holds
 *    the kernel's lock while the family sets arguments and enqueues, so a
 *    family's cl_kernel objects need no lock of their own.
 *
 * A family (copyfill.c, eltwise.c, reduce.c, blas.c, conv.c, pool.c,
 * index.c, random.c) checks the attributes of its ops, builds its cl_kernels
 * at prepare through ocl_kernel_new() (programs are cached in memory and on
 * disk), and enqueues them at launch through ocl_enqueue().
 */
#ifndef TYTO_OPENCL_OPS_H
#define TYTO_OPENCL_OPS_H

#include "../common/common.h"
#include "ocl.h"

/* Inputs or outputs of one op at most: FUSED takes the most. */
#define OCL_MAX_IO TYTO_PLUGIN_FUSED_MAX_IO

/* A layout as kernels.c read it (the plugin's own struct size), with its
 * element count and the range of element indices it reaches relative to its
 * origin, the layout's offset included. */
typedef struct ocl_reach {
  tyto_plugin_layout l;
  int64_t n;      /* elements (product of the shape), may be 0 */
  int64_t lo, hi; /* lowest and highest element reached; valid when n > 0 */
} ocl_reach;

/* What a family sees of a descriptor. */
typedef struct ocl_desc {
  const tyto_plugin_op_desc *d; /* attributes: d->iattrs, d->fattrs, blob */
  uint32_t op;
  /* Output 0's dtype, which every operand has but CAST's input and FUSED's
   * operands, and its size in bytes (2, 4 or 8). */
  uint32_t dtype;
  size_t elem;
  /* The dtype it computes in (F32 for F16 and BF16: storage formats read
   * into f32 and rounded once, ops.md "Dtypes") and its size. Workspaces
   * hold such elements, and the workspace binding's origin counts them. */
  uint32_t cdtype;
  size_t celem;
  uint32_t n_in, n_out;
  ocl_reach in[OCL_MAX_IO], out[OCL_MAX_IO];
} ocl_desc;

/* A bound operand at launch: the buffer (NULL for a zero-size buffer) and
 * the element index of the layout's origin in it: the binding's byte offset
 * divided by the operand's element size, plus the layout's offset. A kernel
 * reads element (i0, i1, ...) at mem[origin + sum(i_k * strides[k])]; kernels.c
 * has checked that every such index lies inside the buffer. For the
 * workspace, origin is the binding's offset in elements of celem bytes (no
 * layout). */
typedef struct ocl_arg {
  cl_mem mem;
  cl_long origin;
} ocl_arg;

struct tyto_plugin_kernel {
  pthread_mutex_t lock; /* held by kernels.c around the family's launch */
  const struct ocl_family *fam;
  ocl_desc desc; /* d is NULL after prepare: the descriptor is gone */
  uint64_t workspace_bytes; /* set by the family's prepare, default 0 */
  void *impl;               /* the family's own state */
};

typedef struct ocl_family {
  const char *name;
  /* Whether this family runs op code `op`. */
  int (*owns)(uint32_t op);
  /* Checks what kernels.c did not: operand counts, shapes, attributes,
   * blob. Returns NULL when the op can run, TYTO_PLUGIN_ERR_UNSUPPORTED for
   * a valid descriptor this device cannot run, INVALID_ARGUMENT for a bad
   * one; the message names the op and says what was expected and found. */
  tyto_plugin_error *(*check)(tyto_plugin_device *dev, const ocl_desc *d);
  /* Called after check() succeeded: builds k->impl (and may set
   * k->workspace_bytes). k->desc is valid, k->desc.d too (during prepare
   * only: copy whatever attributes launch needs). */
  tyto_plugin_error *(*prepare)(tyto_plugin_device *dev, tyto_plugin_kernel *k);
  /* Enqueues the op on stream s. in/out follow the descriptor's order; ws
   * is the workspace (mem NULL when workspace_bytes is 0). Never called
   * when every output has 0 elements. Called with k->lock held. */
  tyto_plugin_error *(*launch)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               tyto_plugin_kernel *k, const ocl_arg *in,
                               const ocl_arg *out, const ocl_arg *ws);
  /* Frees k->impl (and the cl_kernels in it). k->impl may be NULL. */
  void (*release)(tyto_plugin_kernel *k);
} ocl_family;

/* The families, each in its own file. */
extern const ocl_family ocl_family_copyfill; /* copyfill.c: COPY, FILL */
extern const ocl_family ocl_family_eltwise;  /* eltwise.c: NEG..FMA, FUSED */
extern const ocl_family ocl_family_reduce;   /* reduce.c: SUM..NORM_L2,
                                                SOFTMAX, LOG_SOFTMAX */
extern const ocl_family ocl_family_blas;     /* blas.c: MATMUL (CLBlast) */
extern const ocl_family ocl_family_conv;     /* conv.c: CONV2D and its two
                                                backward ops */
extern const ocl_family ocl_family_pool;     /* pool.c: the pooling ops */
extern const ocl_family ocl_family_index;    /* index.c: PAD, GATHER,
                                                SCATTER_ADD, ONE_HOT */
extern const ocl_family ocl_family_random;   /* random.c: RANDOM_* */
extern const ocl_family ocl_family_linalg;   /* linalg.c: INV ..
                                                TRIANGULAR_SOLVE */
extern const ocl_family ocl_family_int;      /* int.c: elementwise ops,
                                                CAST and reductions on
                                                i32 and i64 */

/* ---- services of kernels.c and cache.c ----------------------------------
 */

#define OCL_HOST(dev) ((dev)->state->host)

/* "f32", "f64", ... */
const char *ocl_dtype_name(uint32_t dtype);
/* The op's name as in sdk/docs/ops.md ("add", "conv2d", ...). */
const char *ocl_op_name(uint32_t op);

/* The 16-bit dtypes. */
static inline int ocl_is16(uint32_t dtype) {
  return dtype == TYTO_PLUGIN_DTYPE_F16 || dtype == TYTO_PLUGIN_DTYPE_BF16;
}

/* int.c: called by kernels.c for a descriptor with an integer operand
 * (d's layouts read, *fam the op's family). NULL when the op is one
 * sdk/docs/ops.md runs on integers with these dtypes, *fam then the family
 * that runs it (ocl_family_int for the elementwise ops, CAST and the
 * reductions SUM, MAX_REDUCE, MIN_REDUCE); else UNSUPPORTED (an op not
 * defined on integers, FUSED) or INVALID_ARGUMENT (dtypes that do not go
 * together), naming the op and the dtypes. */
tyto_plugin_error *ocl_int_route(tyto_plugin_device *dev, const ocl_desc *d,
                                 const struct ocl_family **fam);

/* "-DTYTO_IDX=int" or "-DTYTO_IDX=long" for an integer dtype, else "". */
const char *ocl_idx_option(uint32_t dtype);

/* A dtype for ocl_kernel_new that only moves 16-bit elements (T and TS
 * ushort): COPY and FILL of f16 and bf16, bit for bit. */
#define OCL_DTYPE_RAW16 0x100u

/* NULL when device dev runs dtype (F32, F64 with cl_khr_fp64, BF16, F16
 * with cl_khr_fp16 or the option fp16_without_extension); else
 * UNSUPPORTED with the reason, beginning with `op`. */
tyto_plugin_error *ocl_dtype_check(tyto_plugin_device *dev, const char *op,
                                   uint32_t dtype);

/* The cl_kernel `name` of OpenCL C `source`, built for `dtype` on `dev`.
 * The program is ocl_prelude followed by `source`, built with the dtype's
 * options (f32: -DT=float; f64: -DT=double -DTYTO_FP64; bf16: -DT=float
 * -DTYTO_BF16; f16: -DT=float -DTYTO_F16; OCL_DTYPE_RAW16: -DT=ushort;
 * i32: -DT=int -DTU=uint -DTYTO_INT; i64: -DT=long -DTU=ulong -DTYTO_INT)
 * then `options` (may be NULL or ""). Programs are cached per open device in
 * memory and on disk (cache.c), so asking again for another kernel of one
 * (source, options) pair costs no build. A failed build returns an error with
 * the build log. The caller owns the kernel (clReleaseKernel). */
tyto_plugin_error *ocl_kernel_new(tyto_plugin_device *dev, uint32_t dtype,
                                  const char *source, const char *options,
                                  const char *name, cl_kernel *out);

/* Sets argument `index` of `kernel`; on failure returns an error naming the
 * kernel and the argument. */
tyto_plugin_error *ocl_set_arg(tyto_plugin_device *dev, cl_kernel kernel,
                               cl_uint index, size_t size, const void *value);

/* Enqueues `kernel` on stream s over `dims` dimensions and tracks its
 * event, so a failure surfaces from stream_synchronize. local may be NULL:
 * a 1-d launch whose global size is a multiple of 64 then gets work-groups
 * of 64 (when the kernel allows as many), so that drivers need not compile
 * it again for each global size.
 * `what` (static storage) names the work in error messages. */
tyto_plugin_error *ocl_enqueue(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               cl_kernel kernel, cl_uint dims,
                               const size_t *global, const size_t *local,
                               const char *what);

/* Whether every offset l reaches from its origin is below `limit` in
 * magnitude: kernels index such a layout with 32-bit integers. */
int ocl_reach_below(const tyto_plugin_layout *l, int64_t limit);

/* A global size for a grid-stride loop over n items: n rounded up to a
 * multiple of 64, at most 2^20 (each work-item loops over the rest). */
size_t ocl_global_size(int64_t n);

/* Shape and strides of a layout as the prelude's tyto_offset() wants them:
 * dimension 0 of the long8s is the layout's LAST (fastest) dimension;
 * unused entries are 1 (shape) and 0 (strides). */
void ocl_dims(const tyto_plugin_layout *l, cl_long8 *shape, cl_long8 *strides,
              cl_int *rank);

/* A 1-d ocl_enqueue over ocl_global_size(n) work-items: for kernels that
 * loop over n items with TYTO_FOR. */
tyto_plugin_error *ocl_enqueue_n(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 cl_kernel kernel, int64_t n, const char *what);

/* Sets a kernel's arguments in order from `next`, stopping at the first
 * failure, which stays in e (later calls still advance `next`):
 *   ocl_args a = OCL_ARGS(dev, kernel);
 *   ocl_args_put(&a, sizeof n, &n);
 *   ocl_args_mem(&a, &in[0]);
 *   if (a.e != NULL) return a.e; */
typedef struct ocl_args {
  tyto_plugin_device *dev;
  cl_kernel kernel;
  cl_uint next;
  tyto_plugin_error *e;
} ocl_args;
#define OCL_ARGS(dev, kernel) ((ocl_args){(dev), (kernel), 0, NULL})
void ocl_args_put(ocl_args *a, size_t size, const void *value);
/* A cl_int, a cl_long. */
void ocl_args_int(ocl_args *a, int v);
void ocl_args_long(ocl_args *a, int64_t v);
/* An operand's buffer, then its origin (a long). */
void ocl_args_mem(ocl_args *a, const ocl_arg *v);
/* Shape, strides and rank of layout l, as ocl_dims() gives them. */
void ocl_args_dims(ocl_args *a, const tyto_plugin_layout *l);

/* Arguments as a list: ocl_karg args[] = {OCL_KARG(x), OCL_KARG(n)}. */
typedef struct ocl_karg {
  size_t size;
  const void *value;
} ocl_karg;
#define OCL_KARG(v)                                                            \
  { sizeof(v), &(v) }
/* Sets arguments 0 .. n - 1 of kernel from args, then ocl_enqueue()s it. */
tyto_plugin_error *ocl_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                           cl_kernel kernel, const ocl_karg *args, cl_uint n,
                           cl_uint dims, const size_t *global,
                           const char *what);

/* v[rank - 1], ..., v[0], then `fill`: dims slowest first as the long8 the
 * kernels take (fastest first). v may be NULL when rank is 0. */
cl_long8 ocl_long8_rev(const int64_t *v, uint32_t rank, int64_t fill);

/* parts[0 .. n) joined into one string (ISO C caps one string literal at
 * 4095 characters, so long programs come in parts). NULL when out of host
 * memory; the caller frees it. */
char *ocl_source_join(const char *const *parts, size_t n);

/* Blocking read of `bytes` at byte `at` of mem into host, after the work
 * queued on s; a failure says "OP: reading WHAT on DEVICE". */
tyto_plugin_error *ocl_read(tyto_plugin_device *dev, tyto_plugin_stream *s,
                            cl_mem mem, size_t at, size_t bytes, void *host,
                            const char *op, const char *what);

/* Enqueues zeros (cl_int pattern) over `bytes` at byte `at` of mem on s and
 * tracks the event (`track`, static storage, names it); a failure says
 * "OP: clearing WHAT on DEVICE". bytes is a multiple of 4. */
tyto_plugin_error *ocl_clear(tyto_plugin_device *dev, tyto_plugin_stream *s,
                             cl_mem mem, size_t at, size_t bytes,
                             const char *op, const char *what,
                             const char *track);

/* copyfill.c's program: tyto_copy (in, in_base, istr, out, out_base, ostr,
 * shape, rank, n) and tyto_fill (out, out_base, ostr, shape, rank, n,
 * value), over dims as ocl_dims() gives them. Other families (blas.c) use
 * it as it is, so the program cache builds one program for all. */
extern const char ocl_copy_source[];

/* OpenCL C put in front of every program (kernels.c, then dtype.c):
 *   - enables cl_khr_fp64 when TYTO_FP64 is defined; T is the type values
 *     are computed in, TS the type tensors are stored in (T but for f16,
 *     half, and bf16, ushort): a kernel reads element i of a
 *     `__global const TS *p` as TLD(p, i), of type T, and writes v (a T)
 *     rounded to the dtype with TST(p, i, v); workspaces hold T;
 *   - the 16-bit conversions, bit for bit as plugins/common/half.h and
 *     with integer operations only: tyto_f32_bf16, tyto_bf16_f32,
 *     tyto_f32_f16, tyto_f16_f32 (ushort bits <-> float),
 *     tyto_round_bf16, tyto_round_f16 (float rounded to the format, as a
 *     float), with TYTO_FP64 tyto_f64_f32odd (double to f32 bits by
 *     round-to-odd, from which one more rounding to a 16-bit format is
 *     the correct single one), and tyto_ld_f16, tyto_st_f16
 *     (vload_half, vstore_half_rte, NaN kept as half.h keeps it);
 *   - long tyto_offset(long i, long8 shape, long8 str, int rank): the
 *     element offset (without origin) of row-major linear index i of a
 *     tensor whose dims come from ocl_dims();
 *   - TYTO_FOR(i, n): a grid-stride loop `for (long i = ...; i < n; ...)`. */
extern const char ocl_prelude[];
/* Put after ocl_prelude (dtype.c): the 16-bit conversions and TS, TLD,
 * TST, in two parts. */
extern const char *const ocl_prelude_16[2];

/* ---- gemm.c -------------------------------------------------------------
 * GEMM by tyto's own kernels (register-blocked, for CPU devices: see
 * gemm.c), used instead of CLBlast where the device's gemm_own is set. */

/* Whether tyto's kernels compute in `dtype` (f32 and f64; 16-bit operands
 * reach them packed as f32). */
int ocl_gemm_own_dtype(uint32_t dtype);

/* The two kernels, built for one dtype and a blocking chosen for the
 * products shaped as `like` (its m, n, ta and tb; NULL: any). */
typedef struct ocl_gemm_kernels {
  cl_kernel j, k;
  int rows, vecs, width; /* tyto_gemm_j's block: rows x vecs x width */
} ocl_gemm_kernels;
struct ocl_gemm;
tyto_plugin_error *ocl_gemm_prepare(tyto_plugin_device *dev, uint32_t dtype,
                                    const struct ocl_gemm *like,
                                    ocl_gemm_kernels *out);
void ocl_gemm_release(ocl_gemm_kernels *g);

/* C = op(A) op(B) + beta C, row-major, as BLAS's GEMM names them: op(A) is
 * m x k (A stored k x m when ta), op(B) k x n (stored n x k when tb);
 * offsets, leading dimensions and batch strides in elements; `batch`
 * products, operand b of product i at its offset + i * its batch stride. */
typedef struct ocl_gemm {
  int ta, tb;
  int64_t m, n, k;
  cl_mem a, b, c;
  int64_t a_off, lda, a_str, b_off, ldb, b_str, c_off, ldc, c_str;
  double beta;
  int64_t batch;
  size_t elem; /* 4 (f32) or 8 (f64) */
} ocl_gemm;
/* Enqueues the product on s; `what` (static storage) names it in errors. */
tyto_plugin_error *ocl_gemm_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                const ocl_gemm_kernels *kern, const ocl_gemm *g,
                                const char *what);

/* ---- cache.c ------------------------------------------------------------
 */

/* The program of (ocl_prelude + source, options) on dev, from the memory
 * cache, the disk cache or built now. The device's cache owns it (do not
 * release). Thread-safe (takes dev->lock). */
tyto_plugin_error *ocl_program_get(tyto_plugin_device *dev, const char *source,
                                   const char *options, cl_program *out);

#endif /* TYTO_OPENCL_OPS_H */
