/*
 * The CUDA plugin's host logic for f16 and bf16 on a fake CUDA
 * (fake_cuda.h: the runtime, NVRTC, cuBLAS and cuDNN functions the plugin
 * calls, defined in this program). Two fake GPUs, an H100 (compute
 * capability 9.0) and a T4 (7.5); device memory is host memory; a kernel
 * launch, a GEMM or a convolution is recorded, not run.
 *
 * Checked, through the plugin's own ABI tables from init and probe on:
 *  - the dtypes mask lists f16, bf16, i32 and i64, and the T4's name says
 *    that bf16 computes in f32 there;
 *  - every op family prepares and launches in f16 and bf16 on both GPUs
 *    (linear algebra is refused, naming the way out), CAST between every
 *    pair of float dtypes, a fused program that mixes dtypes;
 *  - what reaches the libraries: 16-bit GEMMs are cublasGemmEx /
 *    cublasGemmStridedBatchedEx with CUDA_R_16F / CUDA_R_16BF operands,
 *    CUBLAS_COMPUTE_32F and reduced-precision reductions disallowed; a
 *    bf16 GEMM on the T4 is an f32 SGEMM between widening and narrowing
 *    kernels; 16-bit convolutions have HALF / BFLOAT16 tensors, a FLOAT
 *    convolution and tensor-op math, a bias written first and added with
 *    beta = 1; bf16 convolutions on the T4 are FLOAT with FMA math; the GEMM
 *    weight gradient takes 16-bit columns into an f32 share;
 *  - 16-bit reductions keep f32 partial states (workspace);
 *  - the generated sources read and write 16 bits through the
 *    conversions (the NVRTC compile itself is test_cuda_compile's);
 *  - the integer dtypes' families, and SCATTER_ADD's host check of i32
 *    and i64 indices.
 * Needs no GPU and no driver.
 */
#define _DEFAULT_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cudnn.h>

#include "../../plugins/cuda/ops.h"
#include "fake_cuda.h"
#include "plugin_host.h"

/* The plugin's entry point (plugins/cuda/plugin.c). */
tyto_plugin_error *tyto_plugin_cuda_LTX_init(const tyto_plugin_host *host,
                                             const tyto_plugin_info **info,
                                             tyto_plugin_state **state);

/* ---- the host ---------------------------------------------------------- */

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  va_list ap;
  (void)ctx;
  if (level > TYTO_PLUGIN_LOG_WARN && getenv("TYTO_TEST_LOG") == NULL)
    return;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static const char *host_option(void *ctx, const char *key) {
  (void)ctx;
  return strcmp(key, "cache_dir") == 0 ? "off" : NULL;
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

static char claimed_names[2][512];

static void on_claim(void *ctx, int32_t hw, uint32_t ordinal,
                     const char *name) {
  (void)ctx, (void)hw;
  if (ordinal < 2)
    snprintf(claimed_names[ordinal], sizeof claimed_names[0], "%s", name);
}

static void on_refuse(void *ctx, int32_t hw, const char *name,
                      const char *reason) {
  (void)ctx;
  fprintf(stderr, "FAIL refused hw %d (%s): %s\n", hw, name ? name : "",
          reason);
  checks++;
  failures++;
}

/* ---- driving the plugin -------------------------------------------------- */

static const tyto_plugin_device_fns *D;
static tyto_plugin_device *dev; /* the device under test */
static int dev_index;
static tyto_plugin_stream stream;
static uint32_t fault_words[4];

#define F16 TYTO_PLUGIN_DTYPE_F16
#define BF16 TYTO_PLUGIN_DTYPE_BF16
#define F32 TYTO_PLUGIN_DTYPE_F32
#define F64 TYTO_PLUGIN_DTYPE_F64
#define I32 TYTO_PLUGIN_DTYPE_I32
#define I64 TYTO_PLUGIN_DTYPE_I64

static size_t dsize(uint32_t dt) {
  return dt == F64 || dt == I64 ? 8 : dt == F32 || dt == I32 ? 4 : 2;
}

/* A dense row-major layout of dtype dt. */
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

/* A zeroed buffer of the device under test holding layout l (offset 0,
 * strides >= 0), or `bytes` when l is NULL. */
static tyto_plugin_buffer *buffer(const tyto_plugin_layout *l, uint64_t bytes) {
  if (l != NULL) {
    int64_t hi = 0;
    for (uint32_t a = 0; a < l->rank; a++)
      hi += (l->shape[a] - 1) * l->strides[a];
    bytes = (uint64_t)(hi + 1) * dsize(l->dtype);
  }
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  b->ptr = calloc(1, bytes ? bytes : 1);
  b->size = bytes;
  b->device = dev_index;
  return b;
}

static void buffer_free(tyto_plugin_buffer *b) {
  free(b->ptr);
  free(b);
}

/* Prepares the op through the plugin's table and launches it once on
 * zeroed buffers (the records are reset before prepare, the launches
 * before launch).
 * Returns the workspace it asked for; *ok is 0 when prepare or launch
 * failed (a FAIL is printed). */
static uint64_t run(const char *what, uint32_t op, uint32_t n_in,
                    const tyto_plugin_layout *in, uint32_t n_out,
                    const tyto_plugin_layout *out, uint32_t n_i,
                    const int64_t *ia, uint32_t n_f, const double *fa,
                    const void *blob, size_t blob_size, int *ok) {
  tyto_plugin_op_desc d = {sizeof d, op, n_in, n_out, in,        out,
                           n_i,      ia, n_f,  fa,    blob_size, blob};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info info = {sizeof info, 0, 0};
  char label[200];
  snprintf(label, sizeof label, "%s on %s (%s)", what,
           fake_gpu_names[dev_index], tcu_dtype_name(out[0].dtype));
  fake_reset();
  *ok = ok_(D->prepare(dev, &d, &k, &info), label, __LINE__);
  if (!*ok)
    return 0;
  tyto_plugin_buffer *bufs[2 * TCU_MAX_IO + 1];
  tyto_plugin_binding bi[TCU_MAX_IO], bo[TCU_MAX_IO], bw;
  for (uint32_t i = 0; i < n_in; i++) {
    bufs[i] = buffer(&in[i], 0);
    bi[i] = (tyto_plugin_binding){sizeof bi[i], bufs[i], 0};
  }
  for (uint32_t i = 0; i < n_out; i++) {
    bufs[n_in + i] = buffer(&out[i], 0);
    bo[i] = (tyto_plugin_binding){sizeof bo[i], bufs[n_in + i], 0};
  }
  bufs[n_in + n_out] = buffer(NULL, info.workspace_bytes);
  bw = (tyto_plugin_binding){sizeof bw, bufs[n_in + n_out], 0};
  /* What prepare set up (cuDNN's descriptors) stays recorded. */
  fake_n_launched = 0;
  *ok = ok_(D->launch(dev, &stream, k, bi, n_in, bo, n_out,
                      info.workspace_bytes ? &bw : NULL),
            label, __LINE__);
  for (uint32_t i = 0; i <= n_in + n_out; i++)
    buffer_free(bufs[i]);
  D->kernel_release(dev, k);
  return info.workspace_bytes;
}

#define RUN(what, op, n_in, in, n_out, out, n_i, ia, n_f, fa)                  \
  run((what), (op), (n_in), (in), (n_out), (out), (n_i), (ia), (n_f), (fa),    \
      NULL, 0, &ok)

#define FI(op, a0, a1, attr, dt)                                               \
  { sizeof(tyto_plugin_fused_instr), (op), {(a0), (a1), 0}, (attr), (dt) }

/* Elementwise ops, CAST and fused programs in dtype dt. */
static void eltwise(uint32_t dt) {
  int ok;
  tyto_plugin_layout v = dense(dt, 2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout two[2] = {v, v};
  RUN("add", TYTO_PLUGIN_OP_ADD, 2, two, 1, &v, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_add_d", 0) == 0, "add launched %s",
        fake_n_launched ? fake_launched[0] : "nothing");
  CHECK(strstr(fake_source, "#define S unsigned short") != NULL &&
            strstr(fake_source, dt == F16 ? "#define LD(x) tyto_f16_f(x)"
                                          : "#define LD(x) tyto_bf16_f(x)") &&
            strstr(fake_source, dt == F16 ? "tyto_f16_f(in0[a0])"
                                          : "tyto_bf16_f(in0[a0])") &&
            strstr(fake_source,
                   dt == F16 ? "= tyto_f_f16(v" : "= tyto_f_bf16(v") &&
            strstr(fake_source, "float te_add_float(float x, float y)"),
        "the %s source reads, computes and stores as f32 <-> 16 bits",
        tcu_dtype_name(dt));
  double slope = 0.25;
  RUN("leaky_relu", TYTO_PLUGIN_OP_LEAKY_RELU, 1, &v, 1, &v, 0, NULL, 1,
      &slope);
  CHECK(ok, "leaky_relu");
  /* CAST from and to every float dtype. */
  static const uint32_t all[] = {F32, F64, F16, BF16};
  for (int i = 0; i < 4; i++)
    for (int dir = 0; dir < 2; dir++) {
      tyto_plugin_layout a = dense(dir ? all[i] : dt, 1, (int64_t)7);
      tyto_plugin_layout b = dense(dir ? dt : all[i], 1, (int64_t)7);
      RUN("cast", TYTO_PLUGIN_OP_CAST, 1, &a, 1, &b, 0, NULL, 0, NULL);
      CHECK(ok && fake_launch_at("tyto_fused_d", 0) == 0, "cast %s -> %s",
            tcu_dtype_name(a.dtype), tcu_dtype_name(b.dtype));
    }
  /* out0 (dt) = dt(f32(in0) * in1); out1 (f32) = in0 + in0 in dt. */
  tyto_plugin_fused_instr fi[] = {
      FI(TYTO_PLUGIN_FUSED_INPUT, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_INPUT, 1, 0, 0, F32),
      FI(TYTO_PLUGIN_OP_CAST, 0, 0, 0, F32),
      FI(TYTO_PLUGIN_OP_MUL, 2, 1, 0, F32),
      FI(TYTO_PLUGIN_OP_CAST, 3, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_ADD, 0, 0, 0, dt),
      FI(TYTO_PLUGIN_OP_CAST, 5, 0, 0, F32),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 4, 0, 0, dt),
      FI(TYTO_PLUGIN_FUSED_OUTPUT, 6, 1, 0, F32),
  };
  tyto_plugin_fused_program prog = {sizeof prog, 9, fi};
  tyto_plugin_layout ins[2] = {v, dense(F32, 2, (int64_t)3, (int64_t)5)};
  tyto_plugin_layout outs[2] = {v, ins[1]};
  run("mixed fused", TYTO_PLUGIN_OP_FUSED, 2, ins, 2, outs, 0, NULL, 0, NULL,
      &prog, sizeof prog, &ok);
  CHECK(ok && fake_launch_at("tyto_fused_d", 0) == 0 &&
            strstr(fake_source, "const float *in1") != NULL &&
            strstr(fake_source, "unsigned short *out0") != NULL &&
            strstr(fake_source, dt == F16 ? "tyto_rf16(" : "tyto_rbf16(") !=
                NULL,
        "a fused program mixing %s and f32", tcu_dtype_name(dt));
  double value = 1.5;
  RUN("fill", TYTO_PLUGIN_OP_FILL, 0, NULL, 1, &v, 0, NULL, 1, &value);
  CHECK(ok && strstr(fake_source, "STD(a.value)") != NULL, "fill");
  RUN("copy", TYTO_PLUGIN_OP_COPY, 1, &v, 1, &v, 0, NULL, 0, NULL);
  CHECK(ok, "copy");
}

/* Reductions keep f32 states: a long sum cut into chunks asks for the
 * workspace an f32 sum of the same shape does. */
static void reductions(uint32_t dt) {
  int ok;
  int64_t ax = 1;
  tyto_plugin_layout x = dense(dt, 2, (int64_t)2, (int64_t)1000000),
                     y = dense(dt, 2, (int64_t)2, (int64_t)1);
  uint64_t ws = RUN("sum", TYTO_PLUGIN_OP_SUM, 1, &x, 1, &y, 1, &ax, 0, NULL);
  tyto_plugin_layout xf = x, yf = y;
  xf.dtype = yf.dtype = F32;
  uint64_t wsf =
      RUN("sum", TYTO_PLUGIN_OP_SUM, 1, &xf, 1, &yf, 1, &ax, 0, NULL);
  CHECK(ok && ws > 0 && ws == wsf,
        "a %s sum asks for %llu workspace bytes, an f32 one %llu",
        tcu_dtype_name(dt), (unsigned long long)ws, (unsigned long long)wsf);
  for (uint32_t op = TYTO_PLUGIN_OP_MEAN; op <= TYTO_PLUGIN_OP_NORM_L2; op++) {
    RUN(tcu_op_name(op), op, 1, &x, 1, &y, 1, &ax, 0, NULL);
    CHECK(ok, "%s", tcu_op_name(op));
  }
  tyto_plugin_layout s = dense(dt, 2, (int64_t)4, (int64_t)33);
  RUN("softmax", TYTO_PLUGIN_OP_SOFTMAX, 1, &s, 1, &s, 1, &ax, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_softmax", 0) >= 0, "softmax");
  RUN("log_softmax", TYTO_PLUGIN_OP_LOG_SOFTMAX, 1, &s, 1, &s, 1, &ax, 0, NULL);
  CHECK(ok, "log_softmax");
}

static int cuda_type(uint32_t dt) {
  return dt == F16 ? CUDA_R_16F : CUDA_R_16BF;
}

static int dnn_type(uint32_t dt) {
  return dt == F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

/* MATMUL: cublasGemmEx in 16 bits with f32 sums; bf16 on the T4 as an f32
 * SGEMM between widening and narrowing kernels. */
static void matmul(uint32_t dt) {
  int ok;
  const int wide = dt == BF16 && fake_gpu_cc[dev_index][0] < 8;
  tyto_plugin_layout ab[2] = {dense(dt, 3, (int64_t)2, (int64_t)3, (int64_t)4),
                              dense(dt, 2, (int64_t)4, (int64_t)5)};
  tyto_plugin_layout c = dense(dt, 3, (int64_t)2, (int64_t)3, (int64_t)5);
  uint64_t ws =
      RUN("matmul", TYTO_PLUGIN_OP_MATMUL, 2, ab, 1, &c, 0, NULL, 0, NULL);
  if (!ok)
    return;
  if (!wide) {
    CHECK(fake_gemm.calls == 1 && fake_gemm.ex && !fake_gemm.sgemm &&
              fake_gemm.atype == cuda_type(dt) &&
              fake_gemm.btype == cuda_type(dt) &&
              fake_gemm.ctype == cuda_type(dt) &&
              fake_gemm.compute == CUBLAS_COMPUTE_32F,
          "%s matmul: %d calls, ex %d, types %d %d %d, compute %d",
          tcu_dtype_name(dt), fake_gemm.calls, fake_gemm.ex, fake_gemm.atype,
          fake_gemm.btype, fake_gemm.ctype, fake_gemm.compute);
    CHECK(fake_gemm.math == (CUBLAS_DEFAULT_MATH |
                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
          "%s matmul: math mode %d, expected reduced-precision reductions "
          "disallowed",
          tcu_dtype_name(dt), fake_gemm.math);
    CHECK(ws == 0 && fake_n_launched == 0,
          "a dense %s matmul packs nothing (%llu workspace bytes, %d "
          "kernels)",
          tcu_dtype_name(dt), (unsigned long long)ws, fake_n_launched);
  } else {
    int a = fake_launch_at("tyto_mm_widen", 0);
    int b = a >= 0 ? fake_launch_at("tyto_mm_widen", a + 1) : -1;
    CHECK(fake_gemm.calls == 1 && fake_gemm.sgemm && !fake_gemm.ex &&
              fake_gemm.math == CUBLAS_DEFAULT_MATH,
          "bf16 matmul on the T4: an f32 SGEMM (%d calls, sgemm %d, ex %d, "
          "math %d)",
          fake_gemm.calls, fake_gemm.sgemm, fake_gemm.ex, fake_gemm.math);
    CHECK(a >= 0 && b > a && fake_launch_at("tyto_mm_narrow", b) > b &&
              ws == (24 + 20 + 30) * sizeof(float),
          "bf16 matmul on the T4: A and B widened, C narrowed (%d kernels, "
          "%llu workspace bytes)",
          fake_n_launched, (unsigned long long)ws);
  }
}

/* CONV2D with a bias and its gradients. */
static void conv(uint32_t dt) {
  int ok;
  const int wide = dt == BF16 && fake_gpu_cc[dev_index][0] < 8;
  const int want_type = wide ? CUDNN_DATA_FLOAT : dnn_type(dt);
  tyto_plugin_layout x = dense(dt, 4, (int64_t)2, (int64_t)3, (int64_t)8,
                               (int64_t)8),
                     w = dense(dt, 4, (int64_t)4, (int64_t)3, (int64_t)3,
                               (int64_t)3),
                     b = dense(dt, 1, (int64_t)4),
                     y = dense(dt, 4, (int64_t)2, (int64_t)4, (int64_t)8,
                               (int64_t)8);
  int64_t ca[7] = {1, 1, 1, 1, 1, 1, 1};
  tyto_plugin_layout xwb[3] = {x, w, b};
  RUN("conv2d", TYTO_PLUGIN_OP_CONV2D, 3, xwb, 1, &y, 7, ca, 0, NULL);
  CHECK(ok && fake_dnn.calls == 1 && fake_dnn.x_type == want_type &&
            fake_dnn.w_type == want_type && fake_dnn.y_type == want_type &&
            fake_dnn.compute == CUDNN_DATA_FLOAT,
        "conv2d %s: tensors %d %d %d (want %d), compute %d", tcu_dtype_name(dt),
        fake_dnn.x_type, fake_dnn.w_type, fake_dnn.y_type, want_type,
        fake_dnn.compute);
  if (!wide) {
    CHECK(fake_dnn.math == CUDNN_TENSOR_OP_MATH && fake_dnn.beta == 1 &&
              fake_launch_at("tyto_cv_bfill", 0) >= 0 &&
              fake_launch_at("tyto_cv_bias", 0) < 0,
          "conv2d %s: tensor-op math (%d), the bias written first and added "
          "with beta 1 (beta %g)",
          tcu_dtype_name(dt), fake_dnn.math, fake_dnn.beta);
  } else {
    int a = fake_launch_at("tyto_cv_widen", 0);
    int bb = a >= 0 ? fake_launch_at("tyto_cv_widen", a + 1) : -1;
    int c = fake_launch_at("tyto_cv_biasw", 0);
    CHECK(fake_dnn.math == CUDNN_FMA_MATH && fake_dnn.beta == 0 && a >= 0 &&
              bb > a && c > bb && fake_launch_at("tyto_cv_narrow", c) > c &&
              fake_launch_at("tyto_cv_bias", 0) < 0,
          "conv2d bf16 on the T4: f32 with FMA math (%d), x and w widened, "
          "the bias added in f32, y narrowed",
          fake_dnn.math);
  }
  tyto_plugin_layout dyw[2] = {y, w};
  RUN("conv2d_backward_data", TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA, 2, dyw, 1,
      &x, 7, ca, 0, NULL);
  CHECK(ok && fake_dnn.calls == 1 && fake_dnn.x_type == want_type &&
            fake_dnn.beta == 0,
        "conv2d_backward_data %s", tcu_dtype_name(dt));
  /* C KH KW = 27: the weight gradient by GEMMs, unless wide. */
  tyto_plugin_layout xdy[2] = {x, y};
  RUN("conv2d_backward_filter", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, xdy,
      1, &w, 7, ca, 0, NULL);
  if (!wide)
    CHECK(ok && fake_dnn.calls == 0 && fake_gemm.calls == 1 && fake_gemm.ex &&
              fake_gemm.batched && fake_gemm.atype == cuda_type(dt) &&
              fake_gemm.ctype == CUDA_R_32F &&
              fake_gemm.compute == CUBLAS_COMPUTE_32F &&
              fake_launch_at("tyto_cv_im2col", 0) == 0 &&
              fake_launch_at("tyto_cv_wsum", 0) == 1,
          "conv2d_backward_filter %s: 16-bit columns, f32 shares (types %d "
          "-> %d)",
          tcu_dtype_name(dt), fake_gemm.atype, fake_gemm.ctype);
  else
    CHECK(ok && fake_dnn.calls == 1 && fake_dnn.y_type == CUDNN_DATA_FLOAT,
          "conv2d_backward_filter bf16 on the T4: cuDNN in f32");
  /* A larger filter volume: cuDNN's weight gradient. */
  tyto_plugin_layout x2 = dense(dt, 4, (int64_t)2, (int64_t)32, (int64_t)8,
                                (int64_t)8),
                     w2 = dense(dt, 4, (int64_t)4, (int64_t)32, (int64_t)3,
                                (int64_t)3);
  tyto_plugin_layout xdy2[2] = {x2, y};
  RUN("conv2d_backward_filter", TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER, 2, xdy2,
      1, &w2, 7, ca, 0, NULL);
  CHECK(ok && fake_dnn.calls == 1 && fake_dnn.w_type == want_type,
        "conv2d_backward_filter %s through cuDNN", tcu_dtype_name(dt));
}

/* Pooling, index ops, random numbers; linear algebra refused. */
static void others(uint32_t dt) {
  int ok;
  tyto_plugin_layout x = dense(dt, 4, (int64_t)2, (int64_t)3, (int64_t)8,
                               (int64_t)8),
                     p = dense(dt, 4, (int64_t)2, (int64_t)3, (int64_t)4,
                               (int64_t)4),
                     q = dense(dt, 4, (int64_t)2, (int64_t)3, (int64_t)7,
                               (int64_t)7);
  int64_t pa[6] = {2, 2, 2, 2, 0, 0}, po[6] = {2, 2, 1, 1, 0, 0};
  RUN("max_pool2d", TYTO_PLUGIN_OP_MAX_POOL2D, 1, &x, 1, &p, 6, pa, 0, NULL);
  CHECK(ok, "max_pool2d");
  RUN("avg_pool2d_backward", TYTO_PLUGIN_OP_AVG_POOL2D_BACKWARD, 1, &p, 1, &x,
      6, pa, 0, NULL);
  CHECK(ok, "avg_pool2d_backward");
  tyto_plugin_layout xq[2] = {x, q};
  uint64_t ws = RUN("max_pool2d_backward", TYTO_PLUGIN_OP_MAX_POOL2D_BACKWARD,
                    2, xq, 1, &x, 6, po, 0, NULL);
  CHECK(ok && ws > 0 && fake_launch_at("tyto_pool_argmax_i32", 0) == 0,
        "max_pool2d_backward with overlapping windows");
  tyto_plugin_layout xx[2] = {x, x};
  RUN("max_pool2d_select", TYTO_PLUGIN_OP_MAX_POOL2D_SELECT, 2, xx, 1, &p, 6,
      pa, 0, NULL);
  CHECK(ok, "max_pool2d_select");
  /* Index ops: the zeroed indices are all 0, valid. */
  tyto_plugin_layout v = dense(dt, 2, (int64_t)3, (int64_t)5),
                     gi = dense(dt, 1, (int64_t)2),
                     go = dense(dt, 2, (int64_t)2, (int64_t)5),
                     oh = dense(dt, 2, (int64_t)2, (int64_t)6),
                     padded = dense(dt, 2, (int64_t)5, (int64_t)9);
  int64_t ax0 = 0, pad[5] = {0, 1, 1, 2, 2};
  double zero = -0.0;
  RUN("pad", TYTO_PLUGIN_OP_PAD, 1, &v, 1, &padded, 5, pad, 1, &zero);
  CHECK(ok, "pad");
  tyto_plugin_layout gd[2] = {v, gi};
  RUN("gather", TYTO_PLUGIN_OP_GATHER, 2, gd, 1, &go, 1, &ax0, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_gather", 0) == 1, "gather");
  tyto_plugin_layout sd[3] = {v, gi, go};
  RUN("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sd, 1, &v, 1, &ax0, 0,
      NULL);
  CHECK(ok && fake_launch_at("tyto_scatter_add", 0) == 0, "scatter_add");
  RUN("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &gi, 1, &oh, 0, NULL, 0, NULL);
  CHECK(ok, "one_hot");
  /* Random numbers, with a step. */
  tyto_plugin_layout step = dense(dt, 0);
  int64_t seed[2] = {42, 7};
  double range[2] = {-1, 1};
  for (uint32_t op = TYTO_PLUGIN_OP_RANDOM_UNIFORM;
       op <= TYTO_PLUGIN_OP_RANDOM_BERNOULLI; op++) {
    double *fa = op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? &range[1] : range;
    RUN(tcu_op_name(op), op, 1, &step, 1, &v, 2, seed,
        op == TYTO_PLUGIN_OP_RANDOM_BERNOULLI ? 1 : 2, fa);
    CHECK(ok, "%s", tcu_op_name(op));
  }
  /* Bounds finite in the dtype: 70000 is beyond f16 (65504), not bf16. */
  double wide_range[2] = {0, 70000};
  tyto_plugin_op_desc d = {sizeof d, TYTO_PLUGIN_OP_RANDOM_UNIFORM,
                           0,        1,
                           NULL,     &v,
                           2,        seed,
                           2,        wide_range,
                           0,        NULL};
  if (dt == F16)
    EXPECT_ERR(D->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
               "finite low <= high in the output's dtype f16");
  else
    OK(D->supports_op(dev, &d));
  /* Linear algebra stays f32 and f64. */
  tyto_plugin_layout m = dense(dt, 2, (int64_t)4, (int64_t)4);
  d = (tyto_plugin_op_desc){
      sizeof d, TYTO_PLUGIN_OP_CHOLESKY, 1, 1, &m, &m, 0, NULL, 0, NULL, 0,
      NULL};
  EXPECT_ERR(D->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
             "cast the matrices to f32 first");
}

/* The integer dtypes (ABI 1.6): each family that runs them prepares and
 * launches in dt, with the kernels int.c, reduce.c and index.c generate
 * for them; a SCATTER_ADD's host check reads dt indices and names a bad
 * one. (The kernels' compile is test_cuda_compile's; their results are
 * tyto-conform's on a GPU.) */
static void ints(uint32_t dt) {
  int ok;
  const char *name = tcu_dtype_name(dt);
  tyto_plugin_layout v = dense(dt, 2, (int64_t)3, (int64_t)5),
                     r = dense(dt, 2, (int64_t)3, (int64_t)1),
                     f = dense(F32, 2, (int64_t)3, (int64_t)5),
                     h = dense(BF16, 2, (int64_t)3, (int64_t)5);
  tyto_plugin_layout vvv[3] = {v, v, v};
  int64_t ax0 = 0, ax1 = 1;
  RUN("add", TYTO_PLUGIN_OP_ADD, 2, vvv, 1, &v, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_int_elt", 0) == 0, "add in %s", name);
  RUN("where", TYTO_PLUGIN_OP_WHERE, 3, vvv, 1, &v, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_int_elt", 0) == 0, "where in %s", name);
  RUN("sum", TYTO_PLUGIN_OP_SUM, 1, &v, 1, &r, 1, &ax1, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_int_reduce", 0) == 0, "sum in %s", name);
  RUN("cast from f32", TYTO_PLUGIN_OP_CAST, 1, &f, 1, &v, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_int_cast", 0) == 0 &&
            strstr(fake_source, "tyto_int_of_d((double)v") != NULL,
        "cast f32 -> %s saturates through tyto_int_of_d", name);
  RUN("cast to bf16", TYTO_PLUGIN_OP_CAST, 1, &v, 1, &h, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_int_cast", 0) == 0 &&
            strstr(fake_source, "tyto_f_bf16(tyto_i2f_odd(") != NULL,
        "cast %s -> bf16 rounds once, through an f32 rounded to odd", name);
  double big = 3e9;
  RUN("fill", TYTO_PLUGIN_OP_FILL, 0, NULL, 1, &v, 0, NULL, 1, &big);
  CHECK(ok && fake_launch_at("tyto_fill", 0) == 0, "fill in %s", name);
  RUN("argmax", TYTO_PLUGIN_OP_ARGMAX, 1, &f, 1, &r, 1, &ax1, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_reduce", 0) == 0, "argmax f32 -> %s", name);
  tyto_plugin_layout labels = dense(dt, 1, (int64_t)4),
                     oh = dense(F32, 2, (int64_t)4, (int64_t)6);
  RUN("one_hot", TYTO_PLUGIN_OP_ONE_HOT, 1, &labels, 1, &oh, 0, NULL, 0, NULL);
  CHECK(ok && fake_launch_at("tyto_one_hot", 0) == 0, "one_hot %s -> f32",
        name);
  /* SCATTER_ADD of f32 updates at dt indices {1, 5} along an axis of 3:
   * the host's check reads them as dt and names the bad one. */
  tyto_plugin_layout gi = dense(dt, 1, (int64_t)2),
                     go = dense(F32, 2, (int64_t)2, (int64_t)5);
  tyto_plugin_layout sd[3] = {f, gi, go};
  RUN("scatter_add", TYTO_PLUGIN_OP_SCATTER_ADD, 3, sd, 1, &f, 1, &ax0, 0,
      NULL);
  CHECK(ok && fake_launch_at("tyto_scatter_add", 0) == 0,
        "scatter_add at %s indices", name);
  tyto_plugin_op_desc d = {
      sizeof d, TYTO_PLUGIN_OP_SCATTER_ADD, 3, 1, sd, &f, 1, &ax0, 0, NULL, 0,
      NULL};
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info info = {sizeof info, 0, 0};
  if (!OK(D->prepare(dev, &d, &k, &info)))
    return;
  tyto_plugin_buffer *b[4] = {buffer(&f, 0), buffer(&gi, 0), buffer(&go, 0),
                              buffer(&f, 0)};
  tyto_plugin_buffer *w = buffer(NULL, info.workspace_bytes);
  if (dt == I32)
    memcpy(b[1]->ptr, (int32_t[]){1, 5}, 8);
  else
    memcpy(b[1]->ptr, (int64_t[]){1, 5}, 16);
  tyto_plugin_binding bi[3], bo = {sizeof bo, b[3], 0}, bw = {sizeof bw, w, 0};
  for (int i = 0; i < 3; i++)
    bi[i] = (tyto_plugin_binding){sizeof bi[i], b[i], 0};
  EXPECT_ERR(D->launch(dev, &stream, k, bi, 3, &bo, 1, &bw),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "index 5 at position 1 of the indices (row-major) is out of "
             "range for axis 0 of extent 3");
  for (int i = 0; i < 4; i++)
    buffer_free(b[i]);
  buffer_free(w);
  D->kernel_release(dev, k);
}

/* f32 convolutions keep their path: FMA math, the bias added after. */
static void f32_conv(void) {
  int ok;
  tyto_plugin_layout x = dense(F32, 4, (int64_t)1, (int64_t)2, (int64_t)5,
                               (int64_t)5),
                     w = dense(F32, 4, (int64_t)3, (int64_t)2, (int64_t)3,
                               (int64_t)3),
                     b = dense(F32, 1, (int64_t)3),
                     y = dense(F32, 4, (int64_t)1, (int64_t)3, (int64_t)3,
                               (int64_t)3);
  int64_t ca[7] = {1, 1, 0, 0, 1, 1, 1};
  tyto_plugin_layout xwb[3] = {x, w, b};
  RUN("conv2d", TYTO_PLUGIN_OP_CONV2D, 3, xwb, 1, &y, 7, ca, 0, NULL);
  CHECK(ok && fake_dnn.x_type == CUDNN_DATA_FLOAT &&
            fake_dnn.math == CUDNN_FMA_MATH && fake_dnn.beta == 0 &&
            fake_launch_at("tyto_cv_bias", 0) >= 0 &&
            fake_launch_at("tyto_cv_bfill", 0) < 0,
        "f32 conv2d: FMA math (%d), beta %g, the bias after", fake_dnn.math,
        fake_dnn.beta);
}

int main(void) {
  const tyto_plugin_info *info = NULL;
  tyto_plugin_state *st = NULL;
  if (!OK(tyto_plugin_cuda_LTX_init(&host, &info, &st)))
    return 1;
  const tyto_plugin_claims claims = {sizeof claims, NULL, on_claim, on_refuse};
  if (!OK(info->fns->probe(st, NULL, 0, &claims)))
    return 1;
  D = info->device_fns;
  for (dev_index = 0; dev_index < 2; dev_index++) {
    tyto_plugin_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    OK(info->fns->device_query(st, (uint32_t)dev_index, &di));
    uint32_t want = TYTO_PLUGIN_DTYPE_BIT(F32) | TYTO_PLUGIN_DTYPE_BIT(F64) |
                    TYTO_PLUGIN_DTYPE_BIT(F16) | TYTO_PLUGIN_DTYPE_BIT(BF16) |
                    TYTO_PLUGIN_DTYPE_BIT(I32) | TYTO_PLUGIN_DTYPE_BIT(I64);
    CHECK(di.dtypes == want, "%s lists dtypes 0x%x, expected 0x%x",
          fake_gpu_names[dev_index], di.dtypes, want);
    if (dev_index == 0)
      CHECK(strcmp(di.name, fake_gpu_names[0]) == 0 &&
                strcmp(claimed_names[0], di.name) == 0,
            "the H100 is named \"%s\" (claimed as \"%s\")", di.name,
            claimed_names[0]);
    else
      CHECK(strcmp(di.name, "Tesla T4 (fake) (compute capability 7.5: bf16 "
                            "computed in f32, without tensor cores)") == 0 &&
                strcmp(claimed_names[1], di.name) == 0,
            "the T4 is named \"%s\" (claimed as \"%s\")", di.name,
            claimed_names[1]);
    if (!OK(info->fns->device_open(st, (uint32_t)dev_index, &dev)))
      continue;
    if (dev->arch[0] == '\0') {
      fprintf(stderr, "NVRTC cannot target %s (%s): skipped\n",
              fake_gpu_names[dev_index], dev->arch_error);
      D->device_close(dev);
      continue;
    }
    memset(&stream, 0, sizeof stream);
    stream.device = dev_index;
    stream.fault = fault_words;
    stream.fault_dev = fault_words;
    for (uint32_t dt = F16; dt <= BF16; dt++) {
      eltwise(dt);
      reductions(dt);
      matmul(dt);
      conv(dt);
      others(dt);
    }
    f32_conv();
    ints(I32);
    ints(I64);
    D->device_close(dev);
  }
  info->fns->shutdown(st);
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
