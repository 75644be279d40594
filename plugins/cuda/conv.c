/*
 * CONV2D, CONV2D_BACKWARD_DATA and CONV2D_BACKWARD_FILTER through cuDNN.
 *
 * The geometry is checked as the CPU plugin checks it (same order, same
 * messages as opencl/conv.c). cuDNN takes dense NCHW tensors here: an
 * operand bound with any other layout is packed into the workspace by a
 * strided-copy kernel (an output is computed there and copied out). The
 * bias of CONV2D is added by a kernel of ours after the convolution.
 *
 * Algorithms are chosen once at prepare from cuDNN's heuristics, keeping
 * only deterministic ones (the backward passes have atomics-based
 * algorithms whose sums depend on timing) that accumulate products
 * directly (no FFT or Winograd transforms, whose rounding error on long
 * reductions breaks the CPU plugin's tolerance: a weight gradient over
 * 16000 products was off by 3e-4) and whose workspace fits CONV_ALGO_WS; the
 * workspace is reported to the host, which allocates it. f32 convolutions keep
 * f32 accuracy (CUDNN_FMA_MATH: no TF32 tensor cores) unless the plugin option
 * allow_tf32 says yes.
 *
 * f16 and bf16 tensors go to cuDNN as HALF / BFLOAT16 with an f32
 * convolution type and tensor-op math: tensor cores multiply, sums are
 * f32, each result is rounded once. A bias is written into y first and
 * cuDNN adds the convolution to it (beta = 1), so the bias joins the f32
 * sum before that one rounding. cuDNN's bf16 kernels need compute
 * capability 8.0: below it bf16 operands are converted to f32 in the
 * workspace (exactly), convolved in f32 with the bias added in f32, and
 * the result rounded once ("wide").
 *
 * The weight gradient of an ungrouped convolution with a small filter
 * volume (C KH KW <= WGRAD_MAX_K, the first layers of a network) skips
 * cuDNN: the only deterministic cuDNN algorithm left for it (BWD_FILTER
 * ALGO_1) spent 0.3 ms on the 5x5 filter of one input channel of the
 * seed CNN (64 images of 28x28) on an H100. Instead each image's patches
 * are laid out as columns (im2col) and one strided-batched GEMM gives
 * each image's share, which a last kernel sums over the images in order:
 * deterministic, and a few GEMM-sized steps. For f16 and bf16 the columns
 * stay 16-bit and each image's share is f32 (cublasGemmStridedBatchedEx),
 * summed in f32 and rounded once.
 */
#include "ops.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/common.h"
#include "../common/geometry.h"

/* cuDNN's own workspace at most. */
#define CONV_ALGO_WS ((size_t)1 << 30)
/* The GEMM weight gradient: largest filter volume C KH KW, and most bytes
 * of columns plus per-image shares. */
#define WGRAD_MAX_K 256
#define WGRAD_WS_CAP ((uint64_t)256 << 20)

typedef struct conv {
  uint32_t op, dtype;
  size_t elem;  /* bytes of an element of the dtype */
  size_t celem; /* bytes of T, the compute type (the GEMM path's shares) */
  /* bf16 on a GPU below compute capability 8.0 (no bf16 tensor cores,
   * which cuDNN's bf16 kernels need): every operand converted to f32 in
   * the workspace, an f32 convolution, the result rounded once. */
  int wide;
  size_t pelem; /* bytes of a packed element: 4 when wide, else elem */
  /* f16, bf16 with a bias: y is filled with the bias and cuDNN adds the
   * convolution to it (beta = 1), so the sum is rounded once. */
  int bias_first;
  tpc_conv g; /* the geometry (../common/geometry.h) */
  /* Operands by role: x, w, y (y is dy for the backward ops); which of
   * them is the output; whether each is packed, and where. */
  tyto_plugin_layout lx, lw, ly;
  int pack[3];
  int64_t off[3]; /* byte offsets in the workspace */
  size_t algo_ws, algo_off;
  int algo;
  int empty;      /* a zero extent: the output is zeros (plus bias) */
  int gemm_wgrad; /* the weight gradient as GEMMs (see the top) */
  int64_t cols_off, part_off; /* their workspace sections, in bytes */
  cudaKernel_t im2colk, wsumk;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudaKernel_t packk, biask, zerok, bfillk;
  cudaKernel_t widenk, narrowk, biaswk; /* wide only */
} conv;

/* Reads and checks the descriptor's geometry into *c (the rules all
 * plugins share, ../common/geometry.c), then what cuDNN can take. */
static tyto_plugin_error *geometry(tyto_plugin_device *dev, const tcu_desc *d,
                                   conv *c) {
  const tyto_plugin_host *h = TCU_HOST(dev);
  tpc_operands a;
  char why[1024];
  memset(c, 0, sizeof *c);
  tpc_operands_init(&a, d->d, d->n_in, &d->in[0].l, sizeof d->in[0], d->n_out,
                    &d->out[0].l, sizeof d->out[0], 0);
  int code = tpc_conv_check(&a, &c->g, why, sizeof why);
  if (code != 0)
    return h->error_new((tyto_plugin_code)code, "%s", why);
  c->op = d->op;
  c->dtype = d->dtype;
  c->elem = d->elem;
  c->celem = d->celem;
  c->wide = d->dtype == TYTO_PLUGIN_DTYPE_BF16 && dev->cc_major < 8;
  c->pelem = c->wide ? sizeof(float) : c->elem;
  const tyto_plugin_layout *x = tpc_operand(&a, c->g.x),
                           *w = tpc_operand(&a, c->g.w),
                           *y = tpc_operand(&a, c->g.y);
  if (c->g.N > INT_MAX || c->g.C > INT_MAX || c->g.H > INT_MAX ||
      c->g.W > INT_MAX || c->g.O > INT_MAX) {
    char sx[160];
    tpc_format_shape(x, sx, sizeof sx);
    return h->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                        "%s: %s %s has an extent above %d, more than cuDNN's "
                        "32-bit sizes reach",
                        tcu_op_name(d->op), c->g.xname, sx, INT_MAX);
  }
  c->lx = *x;
  c->lw = *w;
  c->ly = *y;
  c->empty =
      c->g.N == 0 || c->g.C == 0 || c->g.O == 0 || c->g.H == 0 || c->g.W == 0;
  return NULL;
}

static tyto_plugin_error *check(tyto_plugin_device *dev, const tcu_desc *d) {
  conv c;
  return geometry(dev, d, &c);
}

static const char source[] =
    "extern \"C\" __global__ void tyto_cv_pack(const S *x, tcu_dims xd, S *y,\n"
    "                                          tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = x[tyto_offset(i, xd)];\n"
    "}\n"
    "extern \"C\" __global__ void tyto_cv_zero(S *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = (S)0;\n"
    "}\n"
    "/* Channel o of row-major index i of y [N, O, OH, OW]. */\n"
    "#define CV_CHANNEL \\\n"
    "  const bool narrow = (((u64)n | (u64)hw | (u64)O) >> 32) == 0; \\\n"
    "  TYTO_FOR(i, n) { \\\n"
    "    i64 at = tyto_offset(i, yd); \\\n"
    "    i64 ch = narrow ? (i64)(((u32)i / (u32)hw) % (u32)O) : (i / hw) % O;\n"
    "/* y[n, o, h, w] += b[o]: y's dims fastest first. */\n"
    "extern \"C\" __global__ void tyto_cv_bias(S *y, tcu_dims yd, const S *b,\n"
    "                                          i64 bs, i64 hw, i64 O, i64 n) "
    "{\n"
    "  CV_CHANNEL\n"
    "    y[at] = ST(LD(y[at]) + LD(b[ch * bs]));\n"
    "  }\n"
    "}\n"
    "/* y[n, o, h, w] = b[o], for a convolution to add itself to. */\n"
    "extern \"C\" __global__ void tyto_cv_bfill(S *y, tcu_dims yd, const S "
    "*b,\n"
    "                                           i64 bs, i64 hw, i64 O, i64 n) "
    "{\n"
    "  CV_CHANNEL\n"
    "    y[at] = b[ch * bs];\n"
    "  }\n"
    "}\n";

/* The wide path (conv.wide): strided 16-bit to dense f32 and back, and the
 * bias added in f32. */
static const char wide_source[] =
    "extern \"C\" __global__ void tyto_cv_widen(const S *x, tcu_dims xd,\n"
    "                                           T *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = LD(x[tyto_offset(i, xd)]);\n"
    "}\n"
    "extern \"C\" __global__ void tyto_cv_narrow(const T *x, tcu_dims xd,\n"
    "                                            S *y, tcu_dims yd, i64 n) {\n"
    "  TYTO_FOR(i, n) y[tyto_offset(i, yd)] = ST(x[tyto_offset(i, xd)]);\n"
    "}\n"
    "extern \"C\" __global__ void tyto_cv_biasw(T *y, tcu_dims yd,\n"
    "                                           const S *b, i64 bs, i64 hw,\n"
    "                                           i64 O, i64 n) {\n"
    "  CV_CHANNEL\n"
    "    y[at] = y[at] + LD(b[ch * bs]);\n"
    "  }\n"
    "}\n";

/* The weight gradient as GEMMs (wgrad_gemm()): im2col per image, then
 * the sum over images in a fixed order. Indices fit 32 bits (the
 * workspace cap WGRAD_WS_CAP keeps every column buffer below 2^31
 * elements). */
static const char wgrad_source[] =
    "/* cols[n][k][p] = x(n, c, oh sh - ph + kh dh, ow sw - pw + kw dw), 0\n"
    " * in the padding; k = (c KH + kh) KW + kw, p = oh OW + ow; x through\n"
    " * its strides xs. */\n"
    "extern \"C\" __global__ void tyto_cv_im2col(\n"
    "    const S *x, i64 xs0, i64 xs1, i64 xs2, i64 xs3, S *cols, u32 total,\n"
    "    u32 K, u32 P, u32 KH, u32 KW, u32 OW, i64 H, i64 W, i64 sh, i64 sw,\n"
    "    i64 ph, i64 pw, i64 dh, i64 dw) {\n"
    "  for (u32 t = blockIdx.x * blockDim.x + threadIdx.x; t < total;\n"
    "       t += gridDim.x * blockDim.x) {\n"
    "    const u32 p = t % P, r = t / P, k = r % K, n = r / K;\n"
    "    const u32 ow = p % OW, oh = p / OW, kw = k % KW, r2 = k / KW;\n"
    "    const u32 kh = r2 % KH, c = r2 / KH;\n"
    "    const i64 h = (i64)oh * sh - ph + (i64)kh * dh;\n"
    "    const i64 w = (i64)ow * sw - pw + (i64)kw * dw;\n"
    "    S v = (S)0;\n"
    "    if (h >= 0 && h < H && w >= 0 && w < W)\n"
    "      v = x[(i64)n * xs0 + (i64)c * xs1 + h * xs2 + w * xs3];\n"
    "    cols[t] = v;\n"
    "  }\n"
    "}\n"
    "/* dw[i] = sum over n = 0 .. N-1, in that order, of part[n][i] (in\n"
    " * T: the shares of 16-bit products are f32). */\n"
    "extern \"C\" __global__ void tyto_cv_wsum(const T *part, u32 N, u32 OK,\n"
    "                                          S *dw) {\n"
    "  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < OK;\n"
    "       i += gridDim.x * blockDim.x) {\n"
    "    T a = 0;\n"
    "    for (u32 n = 0; n < N; n++)\n"
    "      a += part[(u64)n * OK + i];\n"
    "    dw[i] = ST(a);\n"
    "  }\n"
    "}\n";

static const char *dnn_status(cudnnStatus_t st) {
  const char *s = cudnnGetErrorString(st);
  return s != NULL ? s : "unknown status";
}

static void free_descs(conv *c) {
  if (c->xd != NULL)
    cudnnDestroyTensorDescriptor(c->xd);
  if (c->yd != NULL)
    cudnnDestroyTensorDescriptor(c->yd);
  if (c->wd != NULL)
    cudnnDestroyFilterDescriptor(c->wd);
  if (c->cd != NULL)
    cudnnDestroyConvolutionDescriptor(c->cd);
  c->xd = c->yd = NULL;
  c->wd = NULL;
  c->cd = NULL;
}

/* Descriptors, the algorithm and its workspace (needs the GPU). */
static tyto_plugin_error *setup_dnn(tyto_plugin_device *dev, conv *c) {
  /* The tensors' type; the convolution's (its sums) is f32 for the 16-bit
   * dtypes, as cuDNN's PSEUDO_HALF and BFLOAT16 configurations have it. */
  cudnnDataType_t t = c->wide                              ? CUDNN_DATA_FLOAT
                      : c->dtype == TYTO_PLUGIN_DTYPE_F64  ? CUDNN_DATA_DOUBLE
                      : c->dtype == TYTO_PLUGIN_DTYPE_F16  ? CUDNN_DATA_HALF
                      : c->dtype == TYTO_PLUGIN_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16
                                                           : CUDNN_DATA_FLOAT;
  cudnnDataType_t ct = t == CUDNN_DATA_DOUBLE ? t : CUDNN_DATA_FLOAT;
  /* f32 keeps f32 accuracy (FMA) unless allow_tf32; f16 and bf16 use
   * tensor cores, summing in f32. */
  cudnnMathType_t math =
      tcu_is16(c->dtype) && !c->wide ? CUDNN_TENSOR_OP_MATH
      : dev->state->allow_tf32 && c->dtype == TYTO_PLUGIN_DTYPE_F32
          ? CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
          : CUDNN_FMA_MATH;
  const char *name = tcu_op_name(c->op);
  cudnnStatus_t st;
  const char *call = "cudnnCreate*Descriptor";
  if ((st = cudnnCreateTensorDescriptor(&c->xd)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnCreateTensorDescriptor(&c->yd)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnCreateFilterDescriptor(&c->wd)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnCreateConvolutionDescriptor(&c->cd)) != CUDNN_STATUS_SUCCESS)
    goto fail;
  call = "cudnnSet*Descriptor";
  if ((st = cudnnSetTensor4dDescriptor(c->xd, CUDNN_TENSOR_NCHW, t, (int)c->g.N,
                                       (int)c->g.C, (int)c->g.H,
                                       (int)c->g.W)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnSetTensor4dDescriptor(c->yd, CUDNN_TENSOR_NCHW, t, (int)c->g.N,
                                       (int)c->g.O, (int)c->g.OH,
                                       (int)c->g.OW)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnSetFilter4dDescriptor(c->wd, t, CUDNN_TENSOR_NCHW, (int)c->g.O,
                                       (int)(c->g.C / c->g.G), (int)c->g.KH,
                                       (int)c->g.KW)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnSetConvolution2dDescriptor(
           c->cd, (int)c->g.ph, (int)c->g.pw, (int)c->g.sh, (int)c->g.sw,
           (int)c->g.dh, (int)c->g.dw, CUDNN_CROSS_CORRELATION, ct)) !=
          CUDNN_STATUS_SUCCESS ||
      (st = cudnnSetConvolutionGroupCount(c->cd, (int)c->g.G)) !=
          CUDNN_STATUS_SUCCESS ||
      (st = cudnnSetConvolutionMathType(c->cd, math)) != CUDNN_STATUS_SUCCESS)
    goto fail;
  pthread_mutex_lock(&dev->lib_lock);
  void *hv = NULL;
  tyto_plugin_error *e = tcu_cudnn(dev, &hv);
  cudnnHandle_t h = hv;
  int found = 0;
  call = "cudnnGetConvolution*Algorithm_v7";
  if (e == NULL && c->op == TYTO_PLUGIN_OP_CONV2D) {
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    int n = 0;
    st = cudnnGetConvolutionForwardAlgorithm_v7(h, c->xd, c->wd, c->cd, c->yd,
                                                16, &n, perf);
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n && !found; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS &&
          perf[i].determinism == CUDNN_DETERMINISTIC &&
          perf[i].memory <= CONV_ALGO_WS &&
          perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT &&
          perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
          perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD &&
          perf[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED) {
        c->algo = (int)perf[i].algo;
        c->algo_ws = perf[i].memory;
        found = 1;
      }
  } else if (e == NULL && c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[16];
    int n = 0;
    st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->wd, c->yd, c->cd,
                                                     c->xd, 16, &n, perf);
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n && !found; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS &&
          perf[i].determinism == CUDNN_DETERMINISTIC &&
          perf[i].memory <= CONV_ALGO_WS &&
          (perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ||
           perf[i].algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)) {
        c->algo = (int)perf[i].algo;
        c->algo_ws = perf[i].memory;
        found = 1;
      }
  } else if (e == NULL) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
    int n = 0;
    st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->xd, c->yd, c->cd,
                                                       c->wd, 16, &n, perf);
    for (int i = 0; st == CUDNN_STATUS_SUCCESS && i < n && !found; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS &&
          perf[i].determinism == CUDNN_DETERMINISTIC &&
          perf[i].memory <= CONV_ALGO_WS &&
          (perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
           perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           perf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)) {
        c->algo = (int)perf[i].algo;
        c->algo_ws = perf[i].memory;
        found = 1;
      }
  }
  pthread_mutex_unlock(&dev->lib_lock);
  if (e != NULL)
    return e;
  if (st != CUDNN_STATUS_SUCCESS)
    goto fail;
  if (!found)
    return TCU_HOST(dev)->error_new(
        TYTO_PLUGIN_ERR_UNSUPPORTED,
        "%s on cuda:%d: cuDNN offers no deterministic algorithm for "
        "[%lld,%lld,%lld,%lld] with w [%lld,%lld,%lld,%lld] within %zu MiB "
        "of workspace",
        name, dev->index, (long long)c->g.N, (long long)c->g.C,
        (long long)c->g.H, (long long)c->g.W, (long long)c->g.O,
        (long long)(c->g.C / c->g.G), (long long)c->g.KH, (long long)c->g.KW,
        CONV_ALGO_WS >> 20);
  return NULL;
fail:
  return tcu_lib_error(dev,
                       st == CUDNN_STATUS_ALLOC_FAILED
                           ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                           : TYTO_PLUGIN_ERR_INTERNAL,
                       name, call, dnn_status(st));
}

/* Whether the weight gradient c computes goes through GEMMs (see the
 * top): ungrouped, a small filter volume, and buffers within the cap
 * (which also keeps every index of the kernels in 32 bits). */
static int wgrad_by_gemm(const conv *c) {
  if (c->op != TYTO_PLUGIN_OP_CONV2D_BACKWARD_FILTER || c->g.G != 1 ||
      c->empty || c->wide)
    return 0;
  const uint64_t K = (uint64_t)(c->g.C * c->g.KH * c->g.KW),
                 P = (uint64_t)(c->g.OH * c->g.OW), N = (uint64_t)c->g.N,
                 O = (uint64_t)c->g.O;
  if (K > WGRAD_MAX_K || P > WGRAD_WS_CAP || N > WGRAD_WS_CAP ||
      O > WGRAD_WS_CAP)
    return 0;
  uint64_t cols = N * K * P, part = N * O * K;
  return cols <= WGRAD_WS_CAP / c->elem && part <= WGRAD_WS_CAP / c->celem &&
         cols * c->elem + part * c->celem <= WGRAD_WS_CAP;
}

/* The weight gradient as GEMMs: columns of x's patches per image, one
 * strided-batched GEMM for every image's share dy[n] cols[n]^T (col-major:
 * part[n] (K x O) = cols[n]^T (K x P) dy[n] (P x O)), then the sum over
 * images in order into dw (dense, in use[1]). */
static tyto_plugin_error *wgrad_gemm(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, const conv *c,
                                     void *const *use, void *ws) {
  const int64_t K = c->g.C * c->g.KH * c->g.KW, P = c->g.OH * c->g.OW;
  int64_t xs[4];
  if (c->pack[0]) {
    xs[3] = 1, xs[2] = c->g.W, xs[1] = c->g.H * c->g.W,
    xs[0] = c->g.C * c->g.H * c->g.W;
  } else {
    for (int a = 0; a < 4; a++)
      xs[a] = c->lx.strides[a];
  }
  void *x = use[0], *dy = use[2], *dw = use[1];
  void *cols = (char *)ws + c->cols_off, *part = (char *)ws + c->part_off;
  unsigned total = (unsigned)(c->g.N * K * P), uk = (unsigned)K,
           up = (unsigned)P, ukh = (unsigned)c->g.KH, ukw = (unsigned)c->g.KW,
           uow = (unsigned)c->g.OW;
  long long H = c->g.H, W = c->g.W, sh = c->g.sh, sw = c->g.sw, ph = c->g.ph,
            pw = c->g.pw, dh = c->g.dh, dw_ = c->g.dw;
  void *p1[] = {&x,  &xs[0], &xs[1], &xs[2], &xs[3], &cols, &total,
                &uk, &up,    &ukh,   &ukw,   &uow,   &H,    &W,
                &sh, &sw,    &ph,    &pw,    &dh,    &dw_};
  tyto_plugin_error *e =
      tcu_run(dev, s, c->im2colk, (dim3){tcu_blocks(dev, total), 1, 1},
              (dim3){TCU_BLOCK, 1, 1}, 0, p1, "conv im2col kernel");
  if (e != NULL)
    return e;
  const int f64 = c->dtype == TYTO_PLUGIN_DTYPE_F64;
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const int m = (int)K, n = (int)c->g.O, kk = (int)P;
  const cudaDataType_t t16 =
      c->dtype == TYTO_PLUGIN_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  pthread_mutex_lock(&dev->lib_lock);
  void *hv = NULL;
  e = tcu_cublas(dev, &hv);
  cublasHandle_t h = hv;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const char *call = "cublasSetStream";
  if (e == NULL)
    st = cublasSetStream(h, s->stream);
  if (e == NULL && st == CUBLAS_STATUS_SUCCESS) {
    call = "cublasSetMathMode";
    st = cublasSetMathMode(h, (cublasMath_t)tcu_blas_math(dev, c->dtype));
  }
  if (e == NULL && st == CUBLAS_STATUS_SUCCESS && tcu_is16(c->dtype)) {
    /* 16-bit columns and dy, each image's share in f32. */
    call = "cublasGemmStridedBatchedEx";
    st = cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &one_f, cols, t16, kk,
        (long long)K * P, dy, t16, kk, (long long)c->g.O * P, &zero_f, part,
        CUDA_R_32F, m, (long long)K * c->g.O, (int)c->g.N, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
  } else if (e == NULL && st == CUBLAS_STATUS_SUCCESS) {
    call = f64 ? "cublasDgemmStridedBatched" : "cublasSgemmStridedBatched";
    st = f64 ? cublasDgemmStridedBatched(
                   h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &one_d, cols, kk,
                   (long long)K * P, dy, kk, (long long)c->g.O * P, &zero_d,
                   part, m, (long long)K * c->g.O, (int)c->g.N)
             : cublasSgemmStridedBatched(
                   h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, kk, &one_f, cols, kk,
                   (long long)K * P, dy, kk, (long long)c->g.O * P, &zero_f,
                   part, m, (long long)K * c->g.O, (int)c->g.N);
  }
  pthread_mutex_unlock(&dev->lib_lock);
  if (e != NULL)
    return e;
  if (st != CUBLAS_STATUS_SUCCESS)
    return tcu_lib_error(dev,
                         st == CUBLAS_STATUS_ALLOC_FAILED
                             ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                             : TYTO_PLUGIN_ERR_INTERNAL,
                         tcu_op_name(c->op), call, cublasGetStatusString(st));
  unsigned un = (unsigned)c->g.N, ok = (unsigned)(c->g.O * K);
  void *p2[] = {&part, &un, &ok, &dw};
  return tcu_run(dev, s, c->wsumk, (dim3){tcu_blocks(dev, ok), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, p2, "conv weight-gradient sum");
}

static tyto_plugin_error *prepare(tyto_plugin_device *dev,
                                  tyto_plugin_kernel *k) {
  conv *c = calloc(1, sizeof *c);
  if (c == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "prepare: out of host memory");
  k->impl = c;
  tyto_plugin_error *e = geometry(dev, &k->desc, c);
  if (e != NULL)
    return e;
  if (k->desc.out[0].n == 0)
    return NULL;
  c->bias_first = c->g.has_bias && tcu_is16(c->dtype) && !c->wide;
  /* One module: the wide path's kernels join the others. */
  const char *parts[] = {source, wide_source};
  char *text = tcu_source_join(parts, c->wide ? 2 : 1);
  if (text == NULL)
    return TCU_HOST(dev)->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "prepare: out of host memory");
  static const char *const names[] = {
      "tyto_cv_pack",  "tyto_cv_bias",   "tyto_cv_zero", "tyto_cv_bfill",
      "tyto_cv_widen", "tyto_cv_narrow", "tyto_cv_biasw"};
  cudaKernel_t *fns[] = {&c->packk,  &c->biask,   &c->zerok, &c->bfillk,
                         &c->widenk, &c->narrowk, &c->biaswk};
  for (int i = 0; i < (c->wide ? 7 : 4) && e == NULL; i++)
    e = tcu_function(dev, c->dtype, text, names[i], fns[i]);
  free(text);
  if (e != NULL || c->empty)
    return e;
  /* Workspace: packed copies of the operands that are not dense NCHW
   * (every operand, in f32, when wide), each 256-byte aligned, then
   * cuDNN's. */
  const tyto_plugin_layout *ls[3] = {&c->lx, &c->lw, &c->ly};
  uint64_t at = 0;
  for (int i = 0; i < 3; i++) {
    if (tpc_dense(ls[i]) && !c->wide)
      continue;
    int64_t n = 1;
    for (uint32_t a = 0; a < 4; a++)
      n *= ls[i]->shape[a];
    c->pack[i] = 1;
    c->off[i] = (int64_t)at;
    at += ((uint64_t)n * c->pelem + 255) / 256 * 256;
  }
  c->algo_off = (size_t)at;
  if (wgrad_by_gemm(c)) {
    const uint64_t K = (uint64_t)(c->g.C * c->g.KH * c->g.KW),
                   P = (uint64_t)(c->g.OH * c->g.OW), N = (uint64_t)c->g.N,
                   O = (uint64_t)c->g.O;
    e = tcu_function(dev, c->dtype, wgrad_source, "tyto_cv_im2col",
                     &c->im2colk);
    if (e == NULL)
      e = tcu_function(dev, c->dtype, wgrad_source, "tyto_cv_wsum", &c->wsumk);
    if (e != NULL)
      return e;
    c->gemm_wgrad = 1;
    c->cols_off = (int64_t)at;
    at += (N * K * P * c->elem + 255) / 256 * 256;
    c->part_off = (int64_t)at;
    at += (N * O * K * c->celem + 255) / 256 * 256;
    k->workspace_bytes = at;
    return NULL;
  }
  if (!dev->compile_only && (e = setup_dnn(dev, c)) != NULL)
    return e;
  k->workspace_bytes = at + c->algo_ws;
  return NULL;
}

static void release(tyto_plugin_device *dev, tyto_plugin_kernel *k) {
  (void)dev;
  conv *c = k->impl;
  if (c == NULL)
    return;
  free_descs(c);
  free(c);
  k->impl = NULL;
}

/* Element count of a 4-d layout. */
static int64_t count4(const tyto_plugin_layout *l) {
  return l->shape[0] * l->shape[1] * l->shape[2] * l->shape[3];
}

/* The dims of the dense NCHW copy of 4-d layout l. */
static tcu_dims packed_dims(const tyto_plugin_layout *l) {
  tyto_plugin_layout dl = *l;
  int64_t st = 1;
  for (uint32_t a = 4; a-- > 0;) {
    dl.strides[a] = st;
    st *= l->shape[a];
  }
  return tcu_dims_of(&dl);
}

/* Copies between the bound layout l at p and its dense copy at q, which
 * holds f32 when c is wide. */
static tyto_plugin_error *copy(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const conv *c, const tyto_plugin_layout *l,
                               void *bound, void *packed, int to_packed) {
  tcu_dims bd = tcu_dims_of(l), pd = packed_dims(l);
  int64_t n = count4(l);
  void *src = to_packed ? bound : packed, *dst = to_packed ? packed : bound;
  void *params[] = {&src, to_packed ? &bd : &pd, &dst, to_packed ? &pd : &bd,
                    &n};
  cudaKernel_t fn = !c->wide ? c->packk : to_packed ? c->widenk : c->narrowk;
  return tcu_run(dev, s, fn, (dim3){tcu_blocks(dev, n), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, params, "conv packing kernel");
}

/* Runs bias kernel fn (tyto_cv_bias, _bfill or _biasw) over CONV2D's
 * output at y, laid out as yd, with its bias (input 2). */
static tyto_plugin_error *bias(tyto_plugin_device *dev, tyto_plugin_stream *s,
                               const tyto_plugin_kernel *k, cudaKernel_t fn,
                               void *y, tcu_dims yd, const tcu_arg *in) {
  const conv *c = k->impl;
  int64_t n = count4(&c->ly), hw = c->g.OH * c->g.OW, O = c->g.O;
  int64_t bs = k->desc.in[2].l.strides[0];
  void *b = in[2].ptr;
  void *params[] = {&y, &yd, &b, &bs, &hw, &O, &n};
  return tcu_run(dev, s, fn, (dim3){tcu_blocks(dev, n), 1, 1},
                 (dim3){TCU_BLOCK, 1, 1}, 0, params, "conv bias kernel");
}

static tyto_plugin_error *launch(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 tyto_plugin_kernel *k, const tcu_arg *in,
                                 const tcu_arg *out, const tcu_arg *ws) {
  const conv *c = k->impl;
  const char *name = tcu_op_name(c->op);
  tyto_plugin_error *e = NULL;
  /* Bound addresses by role: x, w, y; the output's role. */
  void *bound[3];
  int out_role;
  if (c->op == TYTO_PLUGIN_OP_CONV2D) {
    bound[0] = in[0].ptr, bound[1] = in[1].ptr, bound[2] = out[0].ptr;
    out_role = 2;
  } else if (c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA) {
    bound[2] = in[0].ptr, bound[1] = in[1].ptr, bound[0] = out[0].ptr;
    out_role = 0;
  } else {
    bound[0] = in[0].ptr, bound[2] = in[1].ptr, bound[1] = out[0].ptr;
    out_role = 1;
  }
  const tyto_plugin_layout *ls[3] = {&c->lx, &c->lw, &c->ly};
  if (c->empty) {
    tcu_dims od = tcu_dims_of(ls[out_role]);
    int64_t n = count4(ls[out_role]);
    void *params[] = {&bound[out_role], &od, &n};
    e = tcu_run(dev, s, c->zerok, (dim3){tcu_blocks(dev, n), 1, 1},
                (dim3){TCU_BLOCK, 1, 1}, 0, params, "conv zero fill");
  } else {
    void *use[3];
    for (int i = 0; i < 3 && e == NULL; i++) {
      use[i] = c->pack[i] ? (char *)ws->ptr + c->off[i] : bound[i];
      if (c->pack[i] && i != out_role)
        e = copy(dev, s, c, ls[i], bound[i], use[i], 1);
    }
    if (e != NULL)
      return e;
    if (c->gemm_wgrad) {
      e = wgrad_gemm(dev, s, c, use, ws->ptr);
      if (e == NULL && c->pack[out_role])
        e = copy(dev, s, c, ls[out_role], bound[out_role], use[out_role], 0);
      return e;
    }
    if (c->bias_first &&
        (e = bias(dev, s, k, c->bfillk, use[2],
                  c->pack[2] ? packed_dims(&c->ly) : tcu_dims_of(&c->ly),
                  in)) != NULL)
      return e;
    void *algo_ws = c->algo_ws > 0 ? (char *)ws->ptr + c->algo_off : NULL;
    /* cuDNN's scaling factors are double for f64, else float. */
    const double one_d = 1, zero_d = 0;
    const float one_f = 1, zero_f = 0;
    const int f64 = c->dtype == TYTO_PLUGIN_DTYPE_F64;
    const void *one = f64 ? (const void *)&one_d : (const void *)&one_f;
    const void *zero = c->bias_first ? one
                       : f64         ? (const void *)&zero_d
                                     : (const void *)&zero_f;
    pthread_mutex_lock(&dev->lib_lock);
    void *hv = NULL;
    e = tcu_cudnn(dev, &hv);
    cudnnHandle_t h = hv;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    const char *call = "cudnnSetStream";
    if (e == NULL)
      st = cudnnSetStream(h, s->stream);
    if (e == NULL && st == CUDNN_STATUS_SUCCESS) {
      if (c->op == TYTO_PLUGIN_OP_CONV2D) {
        call = "cudnnConvolutionForward";
        st = cudnnConvolutionForward(h, one, c->xd, use[0], c->wd, use[1],
                                     c->cd, (cudnnConvolutionFwdAlgo_t)c->algo,
                                     algo_ws, c->algo_ws, zero, c->yd, use[2]);
      } else if (c->op == TYTO_PLUGIN_OP_CONV2D_BACKWARD_DATA) {
        call = "cudnnConvolutionBackwardData";
        st = cudnnConvolutionBackwardData(
            h, one, c->wd, use[1], c->yd, use[2], c->cd,
            (cudnnConvolutionBwdDataAlgo_t)c->algo, algo_ws, c->algo_ws, zero,
            c->xd, use[0]);
      } else {
        call = "cudnnConvolutionBackwardFilter";
        st = cudnnConvolutionBackwardFilter(
            h, one, c->xd, use[0], c->yd, use[2], c->cd,
            (cudnnConvolutionBwdFilterAlgo_t)c->algo, algo_ws, c->algo_ws, zero,
            c->wd, use[1]);
      }
    }
    pthread_mutex_unlock(&dev->lib_lock);
    if (e != NULL)
      return e;
    if (st != CUDNN_STATUS_SUCCESS)
      return tcu_lib_error(dev,
                           st == CUDNN_STATUS_ALLOC_FAILED
                               ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                               : TYTO_PLUGIN_ERR_INTERNAL,
                           name, call, dnn_status(st));
    if (c->wide && c->g.has_bias)
      e = bias(dev, s, k, c->biaswk, use[2], packed_dims(&c->ly), in);
    if (e == NULL && c->pack[out_role])
      e = copy(dev, s, c, ls[out_role], bound[out_role], use[out_role], 0);
    if (c->bias_first || c->wide)
      return e; /* the bias is in */
  }
  if (e == NULL && c->g.has_bias)
    e = bias(dev, s, k, c->biask, bound[2], tcu_dims_of(&c->ly), in);
  return e;
}

const tcu_family tcu_family_conv = {"conv",  tpc_conv_op, check,
                                    prepare, launch,      release};
