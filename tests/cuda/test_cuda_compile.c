/*
 * Every op family of the CUDA plugin through prepare() on a device opened
 * compile_only (plugins/cuda/ops.h): descriptors are checked and every
 * generated kernel is compiled by NVRTC for a real architecture (sm_90 and
 * the oldest the plugin drives), so a kernel that does not compile fails
 * here, on machines without a GPU, not first on a GPU: in f32, f64, f16
 * and bf16 (bf16 convolutions on sm_75 take the f32 path), CAST between
 * every pair, fused programs that mix dtypes, and the ops of the integer
 * dtypes i32 and i64 (with the ones they do not take refused). Needs NVRTC only
 * (no driver). Linked with the plugin's objects (libtcu.la).
 *
 * Then the disk cache of compiled kernels (plugins/common/diskcache.h) in a
 * temporary cache_dir: a compiled kernel is stored under cache_dir/cuda, a
 * fresh device loads it without running NVRTC, a damaged file is rebuilt
 * and replaced whole, a FIFO at an entry's path is neither opened blocking
 * nor stops the compile, a file-size limit fails the write without
 * killing the process, and cache_dir=off writes nothing. Under valgrind
 * only this part runs.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../plugins/common/common.h"
#include "../../plugins/common/eltwise_plan.h"
#include "../../plugins/cuda/ops.h"
#include "plugin_host.h"

/* The plugin's debug lines about its disk cache ("cuda:0: kernel cache:
 * stored PATH", ...), kept for the cache test. */
static char cache_log[8192];

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  char line[1024];
  va_list ap;
  (void)ctx;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (strstr(line, "kernel cache:") != NULL) {
    size_t n = strlen(cache_log);
    snprintf(cache_log + n, sizeof cache_log - n, "%s\n", line);
  }
  if (level > TYTO_PLUGIN_LOG_WARN && getenv("TYTO_TEST_LOG") == NULL)
    return;
  fprintf(stderr, "%s\n", line);
}

/* The option cache_dir; "off" outside the cache test, so that the test
 * neither reads nor fills the user's cache. */
static const char *cache_dir_option = "off";

static const char *host_option(void *ctx, const char *key) {
  (void)ctx;
  return strcmp(key, "cache_dir") == 0 ? cache_dir_option : NULL;
}

static const tyto_plugin_host host = {
    .struct_size = sizeof(tyto_plugin_host),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .host_version = "test",
    .log = host_log,
    .option = host_option,
    .error_new = host_error_new,
    .error_free = err_free,
};

/* A dense row-major layout. */
static tyto_plugin_layout dense(uint32_t dt, uint32_t rank, ...) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dt;
  l.rank = rank;
  va_list ap;
  va_start(ap, rank);
  for (uint32_t i = 0; i < rank; i++)
    l.shape[i] = va_arg(ap, int64_t);
  va_end(ap);
  int64_t s = 1;
  for (uint32_t i = rank; i-- > 0;) {
    l.strides[i] = s;
    s *= l.shape[i];
  }
  return l;
}

static tyto_plugin_device *dev;

/* prepare() must succeed; the kernel is released again. */
static void prep(const char *what, uint32_t op, uint32_t n_in,
                 const tyto_plugin_layout *in, uint32_t n_out,
                 const tyto_plugin_layout *out, uint32_t n_i, const int64_t *ia,
                 uint32_t n_f, const double *fa, const void *blob,
                 size_t blob_size) {
  tyto_plugin_op_desc d = {sizeof d, op, n_in, n_out, in,        out,
                           n_i,      ia, n_f,  fa,    blob_size, blob};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info info = {sizeof info, 0, 0};
  char label[160];
  snprintf(label, sizeof label, "prepare %s (%s, %s)", what, dev->arch,
           tcu_dtype_name(d.outputs[0].dtype));
  ok_(tcu_prepare(dev, &d, &k, &info), label, __LINE__);
  if (k != NULL)
    tcu_kernel_release(dev, k);
}

#define L(...) dense(dt, __VA_ARGS__)

/* A fused instruction of dtype dt. */
#define FI(op, a0, a1, attr, dt)                                               \
  { sizeof(tyto_plugin_fused_instr), (op), {(a0), (a1), 0}, (attr), (dt) }

static void all_ops(uint32_t dt) {
  tyto_plugin_layout v = L(2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout t = v; /* transposed view of a [5, 3] tensor */
  t.strides[0] = 1;
  t.strides[1] = 3;
  tyto_plugin_layout ins[3] = {v, t, v};
  double slope = 0.1;
  for (uint32_t op = TYTO_PLUGIN_OP_NEG; op <= TYTO_PLUGIN_OP_FMA; op++) {
    int arity = op < TYTO_PLUGIN_OP_ADD ? 1 : op < TYTO_PLUGIN_OP_WHERE ? 2 : 3;
    if ((op > TYTO_PLUGIN_OP_ROUND && op < TYTO_PLUGIN_OP_ADD) ||
        (op > TYTO_PLUGIN_OP_GE && op < TYTO_PLUGIN_OP_WHERE))
      continue;
    prep(tcu_op_name(op), op, (uint32_t)arity, ins, 1, &v, 0, NULL, 1, &slope,
         NULL, 0);
    prep(tcu_op_name(op), op, (uint32_t)arity, ins, 1, &t, 0, NULL, 1, &slope,
         NULL, 0);
  }
  /* A fused program: out0 = exp(in0) * in1 + 0.5, out1 = -in0. */
  tyto_plugin_fused_instr fi[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_EXP, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_MUL, 2, 1, 0, dt),
      FI(TYTO_PLUGIN_FUSED_CONST, 0, 0, 0.5, dt),
      FI(TYTO_PLUGIN_OP_ADD, 3, 4, 0, dt),
      FI(TYTO_PLUGIN_OP_NEG, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 5, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 6, 1, 0, dt),
  };
  tyto_plugin_fused_program prog = {sizeof prog, 9, fi};
  tyto_plugin_layout outs2[2] = {v, t};
  prep("fused", TYTO_PLUGIN_OP_FUSED, 2, ins, 2, outs2, 0, NULL, 0, NULL, &prog,
       sizeof prog);
  /* Reductions over axis 1, softmax along it. */
  tyto_plugin_layout big = L(2, (int64_t)4, (int64_t)100000);
  tyto_plugin_layout r1 = L(2, (int64_t)4, (int64_t)1);
  int64_t ax1 = 1;
  for (uint32_t op = TYTO_PLUGIN_OP_SUM; op <= TYTO_PLUGIN_OP_NORM_L2; op++)
    prep(tcu_op_name(op), op, 1, &big, 1, &r1, 1, &ax1, 0, NULL, NULL, 0);
  prep("softmax", TYTO_PLUGIN_OP_SOFTMAX, 1, &v, 1, &v, 1, &ax1, 0, NULL, NULL,
       0);
  prep("log_softmax", TYTO_PLUGIN_OP_LOG_SOFTMAX, 1, &v, 1, &v, 1, &ax1, 0,
       NULL, NULL, 0);
  /* matmul, k = 0 too. */
  tyto_plugin_layout a = L(3, (int64_t)2, (int64_t)3, (int64_t)4),
                     b = L(2, (int64_t)4, (int64_t)5),
                     c = L(3, (int64_t)2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout ab[2] = {a, b};
  prep("matmul", TYTO_PLUGIN_OP_MATMUL, 2, ab, 1, &c, 0, NULL, 0, NULL, NULL,
       0);
  /* conv2d and its gradients, with a bias and a strided (packed) x. */
  tyto_plugin_layout x = L(4, (int64_t)2, (int64_t)3, (int64_t)8, (int64_t)8),
                     w = L(4, (int64_t)4, (int64_t)3, (int64_t)3, (int64_t)3),
                     bias = L(1, (int64_t)4),
                     y = L(4, (int64_t)2, (int64_t)4, (int64_t)8, (int64_t)8);
  int64_t conv_a[7] = {1, 1, 1, 1, 1, 1, 1};
  tyto_plugin_layout xwb[3] = {x, w, bias};
  prep("conv2d", TYTO_PLUGIN_OP_CONV2D, 3, xwb, 1, &y, 7, conv_a, 0, NULL, NULL,
       0);
  tyto_plugin_layout dyw[2] = {y, w};
  prep("conv2d_backward_data", TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 2, dyw, 1,
       &x, 7, conv_a, 0, NULL, NULL, 0);
  tyto_plugin_layout xdy[2] = {x, y};
  prep("conv2d_backward_filter", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, xdy,
       1, &w, 7, conv_a, 0, NULL, NULL, 0);
  /* Pooling 2x2 stride 2. */
  tyto_plugin_layout p = L(4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)4);
  int64_t pool_a[6] = {2, 2, 2, 2, 0, 0};
  tyto_plugin_layout px[1] = {x};
  prep("max_pool2d", TYTO_PLUGIN_OP_MAX_POOL2D, 1, px, 1, &p, 6, pool_a, 0,
       NULL, NULL, 0);
  prep("avg_pool2d", TYTO_PLUGIN_OP_AVG_POOL2D, 1, px, 1, &p, 6, pool_a, 0,
       NULL, NULL, 0);
  tyto_plugin_layout xp[2] = {x, p};
  prep("max_pool2d_backward", TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD, 2, xp, 1, &x,
       6, pool_a, 0, NULL, NULL, 0);
  tyto_plugin_layout xx[2] = {x, x};
  prep("max_pool2d_select", TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, 2, xx, 1, &p, 6,
       pool_a, 0, NULL, NULL, 0);
  prep("avg_pool2d_backward", TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, 1, &p, 1, &x,
       6, pool_a, 0, NULL, NULL, 0);
  /* Index ops. */
  tyto_plugin_layout idx = L(1, (int64_t)4);
  tyto_plugin_layout oh = L(2, (int64_t)4, (int64_t)10);
  prep("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &idx, 1, &oh, 0, NULL, 0, NULL,
       NULL, 0);
  tyto_plugin_layout padded = L(2, (int64_t)5, (int64_t)9);
  int64_t pad_a[5] = {0, 1, 1, 2, 2};
  double zero = 0;
  prep("pad", TYTO_PLUGIN_OP_PAD, 1, &v, 1, &padded, 5, pad_a, 1, &zero, NULL,
       0);
  tyto_plugin_layout gi = L(1, (int64_t)2);
  tyto_plugin_layout gd[2] = {v, gi};
  tyto_plugin_layout go = L(2, (int64_t)2, (int64_t)5);
  int64_t ax0 = 0;
  prep("gather", TYTO_PLUGIN_OP_GATHER, 2, gd, 1, &go, 1, &ax0, 0, NULL, NULL,
       0);
  tyto_plugin_layout sd[3] = {v, gi, go};
  prep("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sd, 1, &v, 1, &ax0, 0,
       NULL, NULL, 0);
  /* Random numbers. */
  int64_t seed[2] = {42, 7};
  double range[2] = {0, 1};
  for (uint32_t op = TYTO_PLUGIN_OP_RANDOM_UNIFORM;
       op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI; op++)
    prep(tcu_op_name(op), op, 0, NULL, 1, &v, 2, seed,
         op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2, range, NULL, 0);
  /* Linear algebra on [2, 4, 4]. */
  tyto_plugin_layout m = L(3, (int64_t)2, (int64_t)4, (int64_t)4),
                     m0 = L(1, (int64_t)2),
                     rhs = L(3, (int64_t)2, (int64_t)4, (int64_t)3);
  if (dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16) {
    /* Storage formats: no linear algebra (ops.md, Dtypes). */
    tyto_plugin_op_desc dinv = {
        sizeof dinv, TYTO_PLUGIN_OP_INV, 1, 1, &m, &m, 0, NULL, 0, NULL, 0,
        NULL};
    tyto_plugin_kernel *k = NULL;
    expect_err_(tcu_prepare(dev, &dinv, &k, NULL), TYTO_PLUGIN_ERR_UNSUPPORTED,
                "cast the matrices to f32", "inv in 16 bits", __LINE__);
    return;
  }
  prep("inv", TYTO_PLUGIN_OP_INV, 1, &m, 1, &m, 0, NULL, 0, NULL, NULL, 0);
  prep("det", TYTO_PLUGIN_OP_DET, 1, &m, 1, &m0, 0, NULL, 0, NULL, NULL, 0);
  prep("logdet", TYTO_PLUGIN_OP_LOGDET, 1, &m, 1, &m0, 0, NULL, 0, NULL, NULL,
       0);
  tyto_plugin_layout mr[2] = {m, rhs};
  prep("solve", TYTO_PLUGIN_OP_SOLVE, 2, mr, 1, &rhs, 0, NULL, 0, NULL, NULL,
       0);
  prep("cholesky", TYTO_PLUGIN_OP_CHOLESKY, 1, &m, 1, &m, 0, NULL, 0, NULL,
       NULL, 0);
  tyto_plugin_layout qr[2] = {m, m};
  prep("qr", TYTO_PLUGIN_OP_QR, 1, &m, 2, qr, 0, NULL, 0, NULL, NULL, 0);
  int64_t tri[3] = {1, 0, 0};
  prep("triangular_solve", TYTO_PLUGIN_OP_TRIANGULAR_SOLVE, 2, mr, 1, &rhs, 3,
       tri, 0, NULL, NULL, 0);
}

/* CAST between every pair of the float dtypes, dense and strided; fused
 * programs that mix dtypes through CAST (ABI 1.5). */
static void mixed_ops(void) {
  static const uint32_t dts[] = {TYTO_PLUGIN_DTYPE_F32, TYTO_PLUGIN_DTYPE_F64,
                                 TYTO_PLUGIN_DTYPE_F16, TYTO_PLUGIN_DTYPE_BF16};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      tyto_plugin_layout a = dense(dts[i], 2, (int64_t)3, (int64_t)5);
      tyto_plugin_layout b = dense(dts[j], 2, (int64_t)3, (int64_t)5);
      b.strides[0] = 1; /* transposed: the strided kernel */
      b.strides[1] = 3;
      char what[64];
      snprintf(what, sizeof what, "cast %s -> %s", tcu_dtype_name(dts[i]),
               tcu_dtype_name(dts[j]));
      prep(what, TYTO_PLUGIN_OP_CAST, 1, &a, 1, &b, 0, NULL, 0, NULL, NULL, 0);
    }
  /* out0 (bf16) = bf16(f32(in0) * in1 + 0.5); out1 (f64) = in0;
   * out2 (f16) = exp(f16(in1)); out3 (bf16) = leaky_relu(in0, 0.1) - in0:
   * bf16 arithmetic with a baked-in parameter; out4 (f32) = f32(f64 2/3). */
  const uint32_t f32 = TYTO_PLUGIN_DTYPE_F32, f64 = TYTO_PLUGIN_DTYPE_F64,
                 f16 = TYTO_PLUGIN_DTYPE_F16, bf16 = TYTO_PLUGIN_DTYPE_BF16;
  tyto_plugin_fused_instr fi[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, bf16),      /* 0 */
      FI(TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, f32),       /* 1 */
      FI(TYTO_PLUGIN_OP_CAST, 0, 0, 0, f32),           /* 2 */
      FI(TYTO_PLUGIN_OP_MUL, 2, 1, 0, f32),            /* 3 */
      FI(TYTO_PLUGIN_FUSED_CONST, 0, 0, 0.5, f32),     /* 4 */
      FI(TYTO_PLUGIN_OP_ADD, 3, 4, 0, f32),            /* 5 */
      FI(TYTO_PLUGIN_OP_CAST, 5, 0, 0, bf16),          /* 6 */
      FI(TYTO_PLUGIN_OP_CAST, 0, 0, 0, f64),           /* 7 */
      FI(TYTO_PLUGIN_OP_CAST, 1, 0, 0, f16),           /* 8 */
      FI(TYTO_PLUGIN_OP_EXP, 8, 0, 0, f16),            /* 9 */
      FI(TYTO_PLUGIN_OP_LEAKY_RELU, 0, 0, 0.1, bf16),  /* 10 */
      FI(TYTO_PLUGIN_OP_SUB, 10, 0, 0, bf16),          /* 11 */
      FI(TYTO_PLUGIN_FUSED_CONST, 0, 0, 2.0 / 3, f64), /* 12 */
      FI(TYTO_PLUGIN_OP_CAST, 12, 0, 0, f32),          /* 13 */
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 6, 0, 0, bf16),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 7, 1, 0, f64),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 9, 2, 0, f16),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 11, 3, 0, bf16),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 13, 4, 0, f32),
  };
  tyto_plugin_fused_program prog = {sizeof prog, sizeof fi / sizeof fi[0], fi};
  tyto_plugin_layout ins[2] = {dense(bf16, 2, (int64_t)3, (int64_t)5),
                               dense(f32, 2, (int64_t)3, (int64_t)5)};
  ins[1].strides[0] = 1; /* the strided kernel too */
  ins[1].strides[1] = 3;
  tyto_plugin_layout outs[5] = {dense(bf16, 2, (int64_t)3, (int64_t)5),
                                dense(f64, 2, (int64_t)3, (int64_t)5),
                                dense(f16, 2, (int64_t)3, (int64_t)5),
                                dense(bf16, 2, (int64_t)3, (int64_t)5),
                                dense(f32, 2, (int64_t)3, (int64_t)5)};
  prep("mixed fused", TYTO_PLUGIN_OP_FUSED, 2, ins, 5, outs, 0, NULL, 0, NULL,
       &prog, sizeof prog);
  /* A program whose operands disagree is refused, naming the instruction. */
  tyto_plugin_fused_instr bad[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, bf16),
      FI(TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, f32),
      FI(TYTO_PLUGIN_OP_ADD, 0, 1, 0, bf16),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 2, 0, 0, bf16),
  };
  tyto_plugin_fused_program bp = {sizeof bp, 4, bad};
  tyto_plugin_op_desc d = {sizeof d,  TYTO_PLUGIN_OP_FUSED,
                           2,         1,
                           ins,       outs,
                           0,         NULL,
                           0,         NULL,
                           sizeof bp, &bp};
  tyto_plugin_kernel *k = NULL;
  expect_err_(tcu_prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
              "instruction 2 (add) reads values of dtypes bf16 and f32",
              "fused add of bf16 and f32", __LINE__);
}

/* A descriptor prepare() must refuse with `code`, its message holding
 * `needle`. */
static void refuse(const char *what, uint32_t op, uint32_t n_in,
                   const tyto_plugin_layout *in, uint32_t n_out,
                   const tyto_plugin_layout *out, uint32_t n_i,
                   const int64_t *ia, const void *blob, size_t blob_size,
                   tyto_plugin_code code, const char *needle) {
  tyto_plugin_op_desc d = {sizeof d, op, n_in, n_out, in,        out,
                           n_i,      ia, 0,    NULL,  blob_size, blob};
  tyto_plugin_kernel *k = NULL;
  expect_err_(tcu_prepare(dev, &d, &k, NULL), code, needle, what, __LINE__);
  if (k != NULL)
    tcu_kernel_release(dev, k);
}

/* The integer dtypes (ABI 1.6, ops.md "Integer dtypes"): every op ops.md
 * defines on them, in dtype dt, dense and strided; CAST between dt and
 * each other dtype; the combinations and ops it does not define refused
 * as unsupported, naming the dtypes. */
static void int_ops(uint32_t dt) {
  tyto_plugin_layout v = L(2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout t = v; /* transposed view of a [5, 3] tensor */
  t.strides[0] = 1;
  t.strides[1] = 3;
  tyto_plugin_layout ins[3] = {v, t, v};
  for (uint32_t op = TYTO_PLUGIN_OP_NEG; op <= TYTO_PLUGIN_OP_WHERE; op++) {
    if (!tpc_int_eltwise(op))
      continue;
    uint32_t arity = (uint32_t)tpc_fused_arity(op);
    prep(tcu_op_name(op), op, arity, ins, 1, &v, 0, NULL, 0, NULL, NULL, 0);
    prep(tcu_op_name(op), op, arity, ins, 1, &t, 0, NULL, 0, NULL, NULL, 0);
  }
  tyto_plugin_layout big = L(3, (int64_t)4, (int64_t)7, (int64_t)9);
  tyto_plugin_layout r = L(3, (int64_t)4, (int64_t)1, (int64_t)1);
  int64_t axes[2] = {1, 2};
  prep("sum", TYTO_PLUGIN_OP_SUM, 1, &big, 1, &r, 2, axes, 0, NULL, NULL, 0);
  prep("max_reduce", TYTO_PLUGIN_OP_MAX_REDUCE, 1, &big, 1, &r, 2, axes, 0,
       NULL, NULL, 0);
  prep("min_reduce", TYTO_PLUGIN_OP_MIN_REDUCE, 1, &big, 1, &r, 2, axes, 0,
       NULL, NULL, 0);
  /* CAST to and from every other dtype, strided on one side. */
  static const uint32_t all[] = {TYTO_PLUGIN_DTYPE_F32, TYTO_PLUGIN_DTYPE_F64,
                                 TYTO_PLUGIN_DTYPE_F16, TYTO_PLUGIN_DTYPE_BF16,
                                 TYTO_PLUGIN_DTYPE_I32, TYTO_PLUGIN_DTYPE_I64};
  for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) {
    tyto_plugin_layout a = dense(dt, 2, (int64_t)3, (int64_t)5);
    tyto_plugin_layout b = dense(all[j], 2, (int64_t)3, (int64_t)5);
    b.strides[0] = 1;
    b.strides[1] = 3;
    char what[64];
    snprintf(what, sizeof what, "cast %s -> %s", tcu_dtype_name(dt),
             tcu_dtype_name(all[j]));
    prep(what, TYTO_PLUGIN_OP_CAST, 1, &a, 1, &b, 0, NULL, 0, NULL, NULL, 0);
    snprintf(what, sizeof what, "cast %s -> %s", tcu_dtype_name(all[j]),
             tcu_dtype_name(dt));
    prep(what, TYTO_PLUGIN_OP_CAST, 1, &b, 1, &a, 0, NULL, 0, NULL, NULL, 0);
  }
  /* COPY, FILL (a value beyond i32's range saturates), PAD. */
  prep("copy", TYTO_PLUGIN_OP_COPY, 1, &t, 1, &v, 0, NULL, 0, NULL, NULL, 0);
  double big_value = 1e10;
  prep("fill", TYTO_PLUGIN_OP_FILL, 0, NULL, 1, &t, 0, NULL, 1, &big_value,
       NULL, 0);
  tyto_plugin_layout padded = L(2, (int64_t)5, (int64_t)9);
  int64_t pad_a[5] = {0, 1, 1, 2, 2};
  double seven = 7;
  prep("pad", TYTO_PLUGIN_OP_PAD, 1, &v, 1, &padded, 5, pad_a, 1, &seven, NULL,
       0);
  /* ARGMAX and ARGMIN of f32 and f16 into dt. */
  int64_t ax1 = 1;
  tyto_plugin_layout idx_out = L(2, (int64_t)3, (int64_t)1);
  static const uint32_t fl[] = {TYTO_PLUGIN_DTYPE_F32, TYTO_PLUGIN_DTYPE_F16};
  for (size_t j = 0; j < 2; j++) {
    tyto_plugin_layout x = dense(fl[j], 2, (int64_t)3, (int64_t)5);
    prep("argmax", TYTO_PLUGIN_OP_ARGMAX, 1, &x, 1, &idx_out, 1, &ax1, 0, NULL,
         NULL, 0);
    prep("argmin", TYTO_PLUGIN_OP_ARGMIN, 1, &x, 1, &idx_out, 1, &ax1, 0, NULL,
         NULL, 0);
  }
  /* GATHER and SCATTER_ADD with dt indices, of f32 data and of dt data;
   * ONE_HOT of dt indices into f32, bf16 and dt. */
  tyto_plugin_layout gi = L(1, (int64_t)2);
  int64_t ax0 = 0;
  for (size_t j = 0; j < 2; j++) {
    uint32_t ddt = j == 0 ? TYTO_PLUGIN_DTYPE_F32 : dt;
    tyto_plugin_layout data = dense(ddt, 2, (int64_t)3, (int64_t)5);
    tyto_plugin_layout go = dense(ddt, 2, (int64_t)2, (int64_t)5);
    tyto_plugin_layout gd[2] = {data, gi};
    prep("gather", TYTO_PLUGIN_OP_GATHER, 2, gd, 1, &go, 1, &ax0, 0, NULL, NULL,
         0);
    tyto_plugin_layout sd[3] = {data, gi, go};
    prep("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sd, 1, &data, 1, &ax0, 0,
         NULL, NULL, 0);
  }
  tyto_plugin_layout labels = L(1, (int64_t)4);
  static const uint32_t oh_dts[] = {TYTO_PLUGIN_DTYPE_F32,
                                    TYTO_PLUGIN_DTYPE_BF16, 0};
  for (size_t j = 0; j < 3; j++) {
    tyto_plugin_layout oh =
        dense(j < 2 ? oh_dts[j] : dt, 2, (int64_t)4, (int64_t)10);
    prep("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &labels, 1, &oh, 0, NULL, 0,
         NULL, NULL, 0);
  }
  /* Refused: an op ops.md leaves to the floating dtypes, a mix of dtypes
   * an op does not take, ARGMAX of integers, a fused program. */
  tyto_plugin_layout x32 =
      dense(TYTO_PLUGIN_DTYPE_F32, 2, (int64_t)3, (int64_t)5);
  refuse("exp of an integer", TYTO_PLUGIN_OP_EXP, 1, &v, 1, &v, 0, NULL, NULL,
         0, TYTO_PLUGIN_ERR_UNSUPPORTED, "not defined on the integer dtypes");
  tyto_plugin_layout mixed[2] = {v, x32};
  refuse("add of an integer and f32", TYTO_PLUGIN_OP_ADD, 2, mixed, 1, &v, 0,
         NULL, NULL, 0, TYTO_PLUGIN_ERR_UNSUPPORTED, "are not a combination");
  refuse("argmax of integers", TYTO_PLUGIN_OP_ARGMAX, 1, &v, 1, &idx_out, 1,
         &ax1, NULL, 0, TYTO_PLUGIN_ERR_UNSUPPORTED, "argmax: operand dtypes");
  tyto_plugin_fused_instr fi[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_NEG, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 1, 0, 0, dt),
  };
  tyto_plugin_fused_program prog = {sizeof prog, 3, fi};
  refuse("fused integers", TYTO_PLUGIN_OP_FUSED, 1, &v, 1, &v, 0, NULL, &prog,
         sizeof prog, TYTO_PLUGIN_ERR_UNSUPPORTED,
         "never appear in a fused program");
}

/* ---- the disk cache ---------------------------------------------------- */

/* Sets up *d as a fresh compile_only device (as the next process would
 * open it) for compute capability major.minor; 0 when NVRTC cannot target
 * it. */
static int open_device(tyto_plugin_device *d, tyto_plugin_state *st, int major,
                       int minor) {
  memset(d, 0, sizeof *d);
  d->state = st;
  d->sm_count = 132;
  d->compile_only = 1;
  pthread_mutex_init(&d->cache_lock, NULL);
  pthread_mutex_init(&d->lib_lock, NULL);
  tcu_arch_select(d, major, minor);
  return d->arch[0] != '\0';
}

static void close_device(tyto_plugin_device *d) {
  tcu_cache_clear(d);
  pthread_mutex_destroy(&d->cache_lock);
  pthread_mutex_destroy(&d->lib_lock);
}

/* Entries of `dir` (temporaries included), the first one's path in
 * `first`. */
static int count_files(const char *dir, char *first, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  if (d == NULL)
    return 0;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (n++ == 0 && first != NULL)
      snprintf(first, size, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return n;
}

/* Size of the regular file at `path`, -1 for anything else. */
static long file_size(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? (long)st.st_size : -1;
}

/* On a fresh device: prepares fill (f32), which compiles one small kernel,
 * and returns how many times NVRTC ran. The log is cleared first. */
static unsigned prepare_fill(tyto_plugin_state *st, int major, int minor) {
  tyto_plugin_device d;
  tyto_plugin_layout v =
      dense(TYTO_PLUGIN_DTYPE_F32, 2, (int64_t)3, (int64_t)5);
  double value = 0.5;
  cache_log[0] = '\0';
  if (!open_device(&d, st, major, minor))
    return 0;
  dev = &d;
  prep("fill", TYTO_PLUGIN_OP_FILL, 0, NULL, 1, &v, 0, NULL, 1, &value, NULL,
       0);
  close_device(&d);
  dev = NULL;
  return d.nvrtc_compiles;
}

/* Returns 0 when NVRTC cannot target major.minor (nothing tested). */
static int test_disk_cache(tyto_plugin_state *st, int major, int minor) {
  char root[] = "/tmp/tyto-cuda-cache-XXXXXX";
  char dir[64], file[512], cmd[128];
  tyto_plugin_device d;
  unsigned n;
  long size;
  int can = open_device(&d, st, major, minor);
  close_device(&d);
  if (!can)
    return 0;
  /* A prepare that hangs (a FIFO opened blocking) fails the test instead
   * of stalling make check; NVRTC under valgrind needs its minutes. */
  unsigned limit = getenv("TYTO_TEST_UNDER_VALGRIND") != NULL ? 1200 : 300;
  if (mkdtemp(root) == NULL) {
    CHECK(0, "mkdtemp failed");
    return 1;
  }
  snprintf(dir, sizeof dir, "%s/cuda", root);
  cache_dir_option = root;
  alarm(limit);

  /* The first compile is stored. */
  n = prepare_fill(st, major, minor);
  CHECK(n == 1, "NVRTC ran %u times for one kernel", n);
  CHECK(count_files(dir, file, sizeof file) == 1,
        "one kernel stored in %s, found %d", dir, count_files(dir, NULL, 0));
  CHECK(strstr(cache_log, "kernel cache: stored") != NULL, "log: %s",
        cache_log);
  size = file_size(file);
  CHECK(size > 32 && strcmp(file + strlen(file) - 4, ".bin") == 0,
        "%s has %ld bytes", file, size);

  /* A fresh device (as the next process) loads it without NVRTC. */
  n = prepare_fill(st, major, minor);
  CHECK(n == 0, "NVRTC ran %u times with the kernel on disk", n);
  CHECK(strstr(cache_log, "kernel cache: loaded") != NULL &&
            strstr(cache_log, "stored") == NULL,
        "the second device loads the stored kernel; log: %s", cache_log);

  /* A file cut short is rebuilt and replaced whole. */
  CHECK(truncate(file, size / 2) == 0, "truncate");
  n = prepare_fill(st, major, minor);
  CHECK(n == 1 && strstr(cache_log, "cut short") != NULL &&
            strstr(cache_log, "kernel cache: stored") != NULL,
        "a cut file is rebuilt (NVRTC ran %u times); log: %s", n, cache_log);
  CHECK(file_size(file) == size, "the rebuilt file has %ld bytes, not %ld",
        file_size(file), size);
  CHECK(count_files(dir, NULL, 0) == 1, "no temporary file is left behind");

  /* So is a file with a damaged header. */
  FILE *f = fopen(file, "r+b");
  CHECK(f != NULL && fputc('X', f) != EOF && fclose(f) == 0, "damage %s", file);
  n = prepare_fill(st, major, minor);
  CHECK(n == 1 && strstr(cache_log, "not a cache file") != NULL &&
            strstr(cache_log, "kernel cache: stored") != NULL,
        "a damaged file is rebuilt (NVRTC ran %u times); log: %s", n,
        cache_log);
  n = prepare_fill(st, major, minor);
  CHECK(n == 0, "the rebuilt file is loaded (NVRTC ran %u times)", n);

  /* A FIFO at the entry's path: not opened blocking (no writer would ever
   * come), the kernel compiles, and the entry replaces the FIFO. */
  CHECK(remove(file) == 0 && mkfifo(file, 0600) == 0, "mkfifo %s", file);
  n = prepare_fill(st, major, minor);
  CHECK(n == 1 && strstr(cache_log, "FIFO") != NULL,
        "a FIFO is ignored (NVRTC ran %u times); log: %s", n, cache_log);
  CHECK(file_size(file) == size, "the FIFO was replaced by a %ld-byte file",
        file_size(file));

  /* A file-size limit (ulimit -f) below the entry's size: the write fails
   * with EFBIG instead of SIGXFSZ ending the process, nothing is left
   * behind, and the kernel still compiles. In a child, because the limit
   * would stop the test's own log too. */
  CHECK(remove(file) == 0, "remove %s", file);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit rl;
    int ok = getrlimit(RLIMIT_FSIZE, &rl) == 0;
    rl.rlim_cur = 64;
    ok = ok && setrlimit(RLIMIT_FSIZE, &rl) == 0;
    n = prepare_fill(st, major, minor);
    ok = ok && n == 1 && failures == 0 &&
         strstr(cache_log, "file-size limit") != NULL &&
         count_files(dir, NULL, 0) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0,
        "past the file-size limit: the child %s %d",
        WIFSIGNALED(status) ? "was killed by signal" : "exited with",
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  CHECK(count_files(dir, NULL, 0) == 0,
        "past the file-size limit: %d files left in %s",
        count_files(dir, NULL, 0), dir);

  /* A folder at the entry's path cannot be replaced: the kernel still
   * compiles, and the temporary is removed. */
  CHECK(mkdir(file, 0700) == 0, "mkdir %s", file);
  n = prepare_fill(st, major, minor);
  CHECK(n == 1 && strstr(cache_log, "cannot store") != NULL,
        "a folder in the way (NVRTC ran %u times); log: %s", n, cache_log);
  CHECK(count_files(dir, NULL, 0) == 1, "%d entries in %s, expected 1",
        count_files(dir, NULL, 0), dir);
  rmdir(file);
  rmdir(dir);

  /* cache_dir=off: nothing is read or written. */
  cache_dir_option = "off";
  n = prepare_fill(st, major, minor);
  CHECK(n == 1 && count_files(root, NULL, 0) == 0 && cache_log[0] == '\0',
        "cache_dir=off: NVRTC ran %u times, %d files written; log: %s", n,
        count_files(root, NULL, 0), cache_log);
  alarm(0);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  CHECK(system(cmd) == 0, "%s", cmd);
  return 1;
}

int main(void) {
  /* NVRTC is an LLVM: compiling some 500 kernels under valgrind takes the
   * better part of an hour and reports only on NVRTC's own allocator, so
   * under valgrind only the disk cache's few compiles run. The plain and
   * sanitizer runs cover the rest. */
  if (getenv("TYTO_TEST_UNDER_VALGRIND") != NULL) {
    tyto_plugin_state st;
    memset(&st, 0, sizeof st);
    st.host = &host;
    if (!test_disk_cache(&st, 9, 0)) {
      fprintf(stderr, "NVRTC cannot target sm_90\n");
      return 77;
    }
    printf("%d checks, %d failed (disk cache only)\n", checks, failures);
    return failures ? 1 : 0;
  }
  tyto_plugin_state st;
  memset(&st, 0, sizeof st);
  st.host = &host;
  tyto_plugin_device d;
  memset(&d, 0, sizeof d);
  d.state = &st;
  d.sm_count = 132;
  d.compile_only = 1;
  pthread_mutex_init(&d.cache_lock, NULL);
  pthread_mutex_init(&d.lib_lock, NULL);
  dev = &d;
  /* Turing (the oldest NVRTC 13 targets) and Hopper. */
  const int archs[][2] = {{7, 5}, {9, 0}};
  int compiled = 0, last = 0;
  for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
    tcu_arch_select(&d, archs[i][0], archs[i][1]);
    if (d.arch[0] == '\0') {
      fprintf(stderr, "compute capability %d.%d: %s (skipped)\n", archs[i][0],
              archs[i][1], d.arch_error);
      continue;
    }
    all_ops(TYTO_PLUGIN_DTYPE_F32);
    all_ops(TYTO_PLUGIN_DTYPE_F64);
    all_ops(TYTO_PLUGIN_DTYPE_F16);
    all_ops(TYTO_PLUGIN_DTYPE_BF16);
    mixed_ops();
    int_ops(TYTO_PLUGIN_DTYPE_I32);
    int_ops(TYTO_PLUGIN_DTYPE_I64);
    tcu_cache_clear(&d);
    compiled++;
    last = (int)i;
  }
  pthread_mutex_destroy(&d.cache_lock);
  pthread_mutex_destroy(&d.lib_lock);
  if (compiled > 0)
    test_disk_cache(&st, archs[last][0], archs[last][1]);
  dev = &d;
  /* A descriptor the plugin refuses names what it expected. */
  tyto_plugin_layout bad =
      dense(TYTO_PLUGIN_DTYPE_F32, 2, (int64_t)2, (int64_t)3);
  tyto_plugin_op_desc d1 = {
      sizeof d1, TYTO_PLUGIN_OP_ADD, 1, 1, &bad, &bad, 0, NULL, 0, NULL, 0,
      NULL};
  tyto_plugin_kernel *k = NULL;
  if (compiled > 0)
    expect_err_(tcu_prepare(dev, &d1, &k, NULL),
                TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "expected 2 inputs",
                "add with one input", __LINE__);
  if (compiled == 0) {
    fprintf(stderr, "NVRTC targets none of the architectures tried\n");
    return 77;
  }
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
