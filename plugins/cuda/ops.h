/*
 * How op families plug into the CUDA plugin's kernels (the design of the
 * OpenCL plugin's ops.h, on CUDA).
 *
 * kernels.c owns the generic part of supports_op/prepare/launch:
 *  - it checks every layout of the descriptor (present, complete, rank <= 8,
 *    no negative extent, reach without 64-bit overflow) and that every
 *    operand has one dtype (CAST and FUSED excepted), f32, f64, f16 or
 *    bf16 (COPY moves any dtype's bits), or that a descriptor with i32 or
 *    i64 operands is one ops.md defines (tcu_int_route);
 *  - it finds the family that owns the op and lets it check the rest;
 *  - at launch it resolves every binding to a tcu_arg, the device address
 *    of the layout's origin, after checking that the elements the layout
 *    reaches lie inside the bound buffer, and makes the device current.
 *
 * Kernels compute in T (float, or double for f64; int or long long for
 * i32 and i64, with TU their unsigned type and TYTO_INT set) and store S,
 * the dtype's storage type (unsigned short for f16 and bf16): LD(s) reads
 * a stored value into T exactly, ST(t) rounds a T to the dtype once,
 * STD(d) rounds a double to it once (to an integer: as CAST converts,
 * truncated, saturated, NaN 0; tcu_dtype_defs).
 *
 * A family (copyfill.c, eltwise.c, reduce.c, blas.c, conv.c, pool.c,
 * index.c, random.c, linalg.c) checks the attributes of its ops, builds its
 * kernels at prepare through tcu_function() (NVRTC, cached in memory and on
 * disk) or sets up a library call (cuBLAS, cuDNN, cuSOLVER), and launches
 * at launch through tcu_run().
 *
 * A device opened with compile_only set (tests without a GPU) runs
 * prepare() up to NVRTC: tcu_function() compiles and returns a NULL
 * function, and families make no other CUDA call at prepare.
 */
#ifndef TYTO_PLUGINS_CUDA_OPS_H
#define TYTO_PLUGINS_CUDA_OPS_H

#include "cuda_plugin.h"

/* Inputs or outputs of one op at most: FUSED takes the most. */
#define TCU_MAX_IO TYTO_PLUGIN_FUSED_MAX_IO

/* A layout as kernels.c read it (the plugin's own struct size), with its
 * element count and the range of element indices it reaches relative to
 * its origin (the layout's offset included). */
typedef struct tcu_reach {
  tyto_plugin_layout l;
  int64_t n;      /* elements (product of the shape), may be 0 */
  int64_t lo, hi; /* lowest and highest element reached; valid when n > 0 */
} tcu_reach;

/* What a family sees of a descriptor. */
typedef struct tcu_desc {
  const tyto_plugin_op_desc *d; /* attributes; NULL after prepare */
  uint32_t op;
  uint32_t dtype; /* shared by all operands (CAST, FUSED: output 0's) */
  size_t elem;    /* bytes per element of dtype */
  size_t celem;   /* bytes of T, the type kernels compute in: 8 or 4 */
  uint32_t n_in, n_out;
  tcu_reach in[TCU_MAX_IO], out[TCU_MAX_IO];
} tcu_desc;

/* A bound operand at launch: the device address of the element at the
 * layout's origin (buffer + binding offset + layout offset * elem), so a
 * kernel reads element (i0, i1, ...) at ptr[sum i_k * strides[k]]. For the
 * workspace: its first byte. NULL for an empty binding. */
typedef struct tcu_arg {
  void *ptr;
} tcu_arg;

struct tyto_plugin_kernel {
  const struct tcu_family *fam;
  tcu_desc desc;
  uint64_t workspace_bytes; /* set by the family's prepare, default 0 */
  /* Set by the family's prepare when its launch reads device memory back
   * on the host (TYTO_PLUGIN_KERNEL_HOST_SYNC: never recorded in graphs). */
  int host_sync;
  void *impl; /* the family's own state */
};

typedef struct tcu_family {
  const char *name;
  /* Whether this family runs op code `op`. */
  int (*owns)(uint32_t op);
  /* Checks what kernels.c did not: operand counts, shapes, attributes,
   * blob. NULL when the op can run, TYTO_PLUGIN_ERR_UNSUPPORTED for a valid
   * descriptor this device cannot run, INVALID_ARGUMENT for a bad one; the
   * message names the op and says what was expected and found. */
  tyto_plugin_error *(*check)(tyto_plugin_device *dev, const tcu_desc *d);
  /* After check(): builds k->impl (and may set k->workspace_bytes).
   * k->desc.d is valid during prepare only: copy what launch needs. */
  tyto_plugin_error *(*prepare)(tyto_plugin_device *dev, tyto_plugin_kernel *k);
  /* Queues the op on stream s (the device is current). in/out follow the
   * descriptor's order; ws is the workspace (ptr NULL when
   * workspace_bytes is 0). Never called when every output is empty. May be
   * called from several threads at once on different streams: state in
   * k->impl is read-only here, library handles are taken under the
   * device's lib_lock. */
  tyto_plugin_error *(*launch)(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               tyto_plugin_kernel *k, const tcu_arg *in,
                               const tcu_arg *out, const tcu_arg *ws);
  /* Frees k->impl. k->impl may be NULL. */
  void (*release)(tyto_plugin_device *dev, tyto_plugin_kernel *k);
} tcu_family;

extern const tcu_family tcu_family_copyfill; /* COPY, FILL */
extern const tcu_family tcu_family_eltwise;  /* NEG .. FMA, CAST, FUSED */
extern const tcu_family tcu_family_reduce;   /* SUM .. NORM_L2, SOFTMAX,
                                                LOG_SOFTMAX */
extern const tcu_family tcu_family_blas;     /* MATMUL (cuBLAS) */
extern const tcu_family tcu_family_conv;     /* CONV2D and its gradients
                                                (cuDNN) */
extern const tcu_family tcu_family_pool;     /* the pooling ops */
extern const tcu_family tcu_family_index;    /* PAD, GATHER, SCATTER_ADD,
                                                ONE_HOT */
extern const tcu_family tcu_family_random;   /* RANDOM_* (Philox) */
extern const tcu_family tcu_family_linalg;   /* INV .. TRIANGULAR_SOLVE
                                                (cuSOLVER, cuBLAS) */
extern const tcu_family tcu_family_int;      /* integer elementwise ops,
                                                reductions and casts */

/* For a descriptor with an i32 or i64 operand (ABI 1.6): NULL when
 * sdk/docs/ops.md ("Integer dtypes") defines the op on its operands'
 * dtypes, with *fam set to tcu_family_int where that family runs it (else
 * left as the op's own family); else UNSUPPORTED, naming the op and the
 * dtypes (int.c). */
tyto_plugin_error *tcu_int_route(tyto_plugin_device *dev, const tcu_desc *d,
                                 const tcu_family **fam);

/* ---- services (kernels.c) ---------------------------------------------- */

#define TCU_HOST(dev) ((dev)->state->host)

/* "f32", "f64", ... */
const char *tcu_dtype_name(uint32_t dtype);
/* The op's name as in sdk/docs/ops.md ("add", "conv2d", ...). */
const char *tcu_op_name(uint32_t op);
/* "[2,3,4]" into buf (always terminated); returns buf. */
const char *tcu_shape_str(const tyto_plugin_layout *l, char *buf, size_t size);

/* Dimensions of a layout as the prelude's tyto_offset() wants them:
 * index 0 is the layout's LAST (fastest) dimension; unused entries are 1
 * (shape) and 0 (strides). Passed to kernels by value. */
typedef struct tcu_dims {
  int64_t shape[TYTO_PLUGIN_MAX_RANK];
  int64_t str[TYTO_PLUGIN_MAX_RANK];
  int32_t rank;
  int32_t pad_;
} tcu_dims;
tcu_dims tcu_dims_of(const tyto_plugin_layout *l);

/* Whether dtype is f16 or bf16, the storage formats. */
int tcu_is16(uint32_t dtype);

/* "#define TYTO_IDX int\n" (i32) or "... long long\n" (i64): the type of
 * integer indices, which index.c's kernels read and reduce.c's ARGMAX and
 * ARGMIN store; "" for any other dtype. */
const char *tcu_idx_define(uint32_t dtype);

/* The definitions of T, S, LD, ST and STD for `dtype` (above), and
 * TYTO_FP64 or TYTO_16 for f64 and the 16-bit dtypes. */
const char *tcu_dtype_defs(uint32_t dtype);

/* Function `name` (extern "C") of CUDA C++ `source` compiled for `dtype`:
 * the program is tcu_prelude, the 16-bit conversions (half_src.h), the
 * definitions of tcu_dtype_defs(dtype), then source.
 * Modules are cached per open device in memory and on disk, so asking for
 * another function of one source costs no compile. On a compile_only
 * device *out is NULL after a successful compile. */
tyto_plugin_error *tcu_function(tyto_plugin_device *dev, uint32_t dtype,
                                const char *source, const char *name,
                                cudaKernel_t *out);

/* Launches fn on s with `params` (cudaLaunchKernel's array of pointers to
 * each argument). `what` (static) names the work in error messages, which
 * also name the device. */
tyto_plugin_error *tcu_run(tyto_plugin_device *dev, tyto_plugin_stream *s,
                           cudaKernel_t fn, dim3 grid, dim3 block,
                           size_t shared_bytes, void **params,
                           const char *what);

/* tcu_run of a grid-stride kernel over n items: tcu_blocks(dev, n) blocks
 * of TCU_BLOCK threads, no shared memory. */
tyto_plugin_error *tcu_run_n(tyto_plugin_device *dev, tyto_plugin_stream *s,
                             cudaKernel_t fn, int64_t n, void **params,
                             const char *what);

/* The cuBLAS math mode (a cublasMath_t) for products of dtype (blas.c):
 * TF32 tensor cores for f32 only with the option allow_tf32; for f16 and
 * bf16 tensor cores with f32 sums (no reduced-precision reductions). */
int tcu_blas_math(const tyto_plugin_device *dev, uint32_t dtype);

/* Blocks of TCU_BLOCK threads for a grid-stride loop over n items: enough
 * to fill every SM several times, at least 1. */
unsigned tcu_blocks(const tyto_plugin_device *dev, int64_t n);

/* A failed library call (cuBLAS, cuDNN, cuSOLVER): "<op> on cuda:N: <call>
 * failed: <status>". */
tyto_plugin_error *tcu_lib_error(tyto_plugin_device *dev, tyto_plugin_code code,
                                 const char *op, const char *call,
                                 const char *status);

/* CUDA C++ put in front of every program:
 *   - i64 (long long), u32, u64 typedefs;
 *   - TYTO_FOR(i, n): a grid-stride loop `for (i64 i = ...; i < n; ...)`;
 *   - struct tcu_dims as above, and
 *     i64 tyto_offset(i64 i, const tcu_dims &d): the element offset of
 *     row-major linear index i;
 *   - T tyto_bits_f(u32) / tyto_bits_d(u64): a float / double from its bit
 *     pattern.
 * tcu_function() adds the 16-bit conversions of half_src.h (tyto_f16_f,
 * tyto_f_f16, tyto_bf16_f, tyto_f_bf16, tyto_d_f16, tyto_d_bf16) and
 * tyto_rf16(x), tyto_rbf16(x): f32 x rounded to the format, as an f32. */
extern const char tcu_prelude[];

/* parts[0 .. n) joined into one string; NULL when out of host memory; the
 * caller frees it. */
char *tcu_source_join(const char *const *parts, size_t n);

#endif /* TYTO_PLUGINS_CUDA_OPS_H */
