/*
 * The fake CUDA of fake_cuda.h: each function has the prototype of the
 * library's header and records what the plugin asked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

#include "fake_cuda.h"

/* ---- what the fakes saw ------------------------------------------------ */

char fake_launched[FAKE_MAX_REC][48];
int fake_n_launched;
char fake_source[1 << 20];
fake_gemm_rec fake_gemm;
fake_dnn_rec fake_dnn;

/* A cuDNN descriptor: what it was set to. */
typedef struct fake_desc {
  int dtype;
} fake_desc;

void fake_reset(void) {
  fake_n_launched = 0;
  memset(&fake_gemm, 0, sizeof fake_gemm);
  fake_gemm.math = -1;
  memset(&fake_dnn, 0, sizeof fake_dnn);
  fake_dnn.beta = -1;
}

int fake_launch_at(const char *name, int from) {
  for (int i = from; i < fake_n_launched; i++)
    if (strcmp(fake_launched[i], name) == 0)
      return i;
  return -1;
}

/* ---- the CUDA runtime ---------------------------------------------------- */

const char *const fake_gpu_names[2] = {"NVIDIA H100 (fake)", "Tesla T4 (fake)"};
const int fake_gpu_cc[2][2] = {{9, 0}, {7, 5}};

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 2;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", fake_gpu_names[d]);
  p->major = fake_gpu_cc[d][0];
  p->minor = fake_gpu_cc[d][1];
  p->totalGlobalMem = (size_t)16 << 30;
  p->multiProcessorCount = d == 0 ? 132 : 40;
  p->pciBusID = 0x41 + d;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d) {
  snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x41 + d);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int a, int b) {
  (void)a;
  (void)b;
  *can = 0;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  (void)d;
  return cudaSuccess;
}

static char fake_library;

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code,
                                enum cudaJitOption *jo, void **jv,
                                unsigned int nj, enum cudaLibraryOption *lo,
                                void **lv, unsigned int nl) {
  (void)code, (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
  *lib = (cudaLibrary_t)(void *)&fake_library;
  return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib) {
  (void)lib;
  return cudaSuccess;
}

/* A kernel handle is its interned name. */
static char kernel_names[256][48];
static int n_kernel_names;

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib,
                                 const char *name) {
  (void)lib;
  int i = 0;
  while (i < n_kernel_names && strcmp(kernel_names[i], name) != 0)
    i++;
  if (i == n_kernel_names) {
    if (n_kernel_names == 256)
      return cudaErrorInvalidValue;
    snprintf(kernel_names[n_kernel_names++], 48, "%s", name);
  }
  *k = (cudaKernel_t)(void *)kernel_names[i];
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) {
  (void)f;
  memset(a, 0, sizeof *a);
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args,
                             size_t shared, cudaStream_t s) {
  (void)grid, (void)block, (void)args, (void)shared, (void)s;
  if (fake_n_launched < FAKE_MAX_REC)
    snprintf(fake_launched[fake_n_launched++], 48, "%s", (const char *)f);
  return cudaSuccess;
}

/* Device memory is host memory here: copies and fills are memcpy and
 * memset (gather reads its flag, scatter_add its indices, back). */
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            enum cudaMemcpyKind kind, cudaStream_t s) {
  (void)kind, (void)s;
  memcpy(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  (void)s;
  memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}

/* ---- NVRTC ------------------------------------------------------------- */

static char fake_program;

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src,
                               const char *name, int n, const char *const *h,
                               const char *const *hn) {
  (void)name, (void)n, (void)h, (void)hn;
  snprintf(fake_source, sizeof fake_source, "%s", src);
  *prog = (nvrtcProgram)(void *)&fake_program;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n,
                                const char *const *opts) {
  (void)prog, (void)n, (void)opts;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) {
  (void)prog;
  *size = 16;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *code) {
  (void)prog;
  memset(code, 0x7f, 16);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  *prog = NULL;
  return NVRTC_SUCCESS;
}

/* ---- cuBLAS ------------------------------------------------------------ */

static char fake_handle;

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
  *h = (cublasHandle_t)(void *)&fake_handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  (void)h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  (void)h, (void)s;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  (void)h;
  fake_gemm.math = (int)m;
  return CUBLAS_STATUS_SUCCESS;
}

static void gemm_ex(int batched, cudaDataType a, cudaDataType b, cudaDataType c,
                    cublasComputeType_t ct) {
  fake_gemm.calls++;
  fake_gemm.ex = 1;
  fake_gemm.batched = batched;
  fake_gemm.atype = (int)a;
  fake_gemm.btype = (int)b;
  fake_gemm.ctype = (int)c;
  fake_gemm.compute = (int)ct;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb,
                            const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha;
  (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
  (void)algo;
  gemm_ex(0, at, bt, ct, compute);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType at, int lda,
    long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
    const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
    int count, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha;
  (void)A, (void)lda, (void)sa, (void)B, (void)ldb, (void)sb, (void)beta;
  (void)C, (void)ldc, (void)sc, (void)count, (void)algo;
  gemm_ex(1, at, bt, ct, compute);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                              cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha;
  (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
  fake_gemm.calls++;
  fake_gemm.sgemm = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha,
                                         const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc,
                                         long long sc, int count) {
  (void)h, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha;
  (void)A, (void)lda, (void)sa, (void)B, (void)ldb, (void)sb, (void)beta;
  (void)C, (void)ldc, (void)sc, (void)count;
  fake_gemm.calls++;
  fake_gemm.sgemm = 1;
  fake_gemm.batched = 1;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuDNN ------------------------------------------------------------- */

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  *h = (cudnnHandle_t)(void *)&fake_handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  (void)h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  (void)h, (void)s;
  return CUDNN_STATUS_SUCCESS;
}

#define NEW_DESC(type, out)                                                    \
  do {                                                                         \
    fake_desc *d_ = calloc(1, sizeof *d_);                                     \
    if (d_ == NULL)                                                            \
      return CUDNN_STATUS_ALLOC_FAILED;                                        \
    *(out) = (type)(void *)d_;                                                 \
    return CUDNN_STATUS_SUCCESS;                                               \
  } while (0)

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
  NEW_DESC(cudnnTensorDescriptor_t, d);
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
  NEW_DESC(cudnnFilterDescriptor_t, d);
}
cudnnStatus_t
cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
  NEW_DESC(cudnnConvolutionDescriptor_t, d);
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  free((void *)d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  free((void *)d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t
cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  free((void *)d);
  return CUDNN_STATUS_SUCCESS;
}

static int type_of(const void *d) {
  return ((const fake_desc *)d)->dtype;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                         cudnnTensorFormat_t f,
                                         cudnnDataType_t t, int n, int c, int h,
                                         int w) {
  (void)f, (void)n, (void)c, (void)h, (void)w;
  ((fake_desc *)(void *)d)->dtype = (int)t;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                         cudnnDataType_t t,
                                         cudnnTensorFormat_t f, int k, int c,
                                         int h, int w) {
  (void)f, (void)k, (void)c, (void)h, (void)w;
  ((fake_desc *)(void *)d)->dtype = (int)t;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d,
                                              int ph, int pw, int u, int v,
                                              int dh, int dw,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  (void)d, (void)ph, (void)pw, (void)u, (void)v, (void)dh, (void)dw;
  (void)mode;
  fake_dnn.compute = (int)compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d,
                                            int g) {
  (void)d, (void)g;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                          cudnnMathType_t m) {
  (void)d;
  fake_dnn.math = (int)m;
  return CUDNN_STATUS_SUCCESS;
}

/* Each heuristic offers one deterministic algorithm that needs no
 * workspace. */
#define ONE_ALGO(perf, n, a)                                                   \
  do {                                                                         \
    memset(&(perf)[0], 0, sizeof(perf)[0]);                                    \
    (perf)[0].algo = (a);                                                      \
    (perf)[0].status = CUDNN_STATUS_SUCCESS;                                   \
    (perf)[0].determinism = CUDNN_DETERMINISTIC;                               \
    *(n) = 1;                                                                  \
  } while (0)

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t y, const int want, int *n,
    cudnnConvolutionFwdAlgoPerf_t *perf) {
  (void)h, (void)x, (void)w, (void)c, (void)y, (void)want;
  ONE_ALGO(perf, n, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnTensorDescriptor_t dx, const int want, int *n,
    cudnnConvolutionBwdDataAlgoPerf_t *perf) {
  (void)h, (void)w, (void)dy, (void)c, (void)dx, (void)want;
  ONE_ALGO(perf, n, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x,
    const cudnnTensorDescriptor_t dy, const cudnnConvolutionDescriptor_t c,
    const cudnnFilterDescriptor_t dw, const int want, int *n,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
  (void)h, (void)x, (void)dy, (void)c, (void)dw, (void)want;
  ONE_ALGO(perf, n, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  return CUDNN_STATUS_SUCCESS;
}

/* alpha and beta are double for DOUBLE tensors, else float. */
static void conv_call(const void *x, const void *w, const void *y,
                      const void *alpha, const void *beta) {
  fake_dnn.calls++;
  fake_dnn.x_type = type_of(x);
  fake_dnn.w_type = type_of(w);
  fake_dnn.y_type = type_of(y);
  if (fake_dnn.y_type == CUDNN_DATA_DOUBLE) {
    fake_dnn.alpha = *(const double *)alpha;
    fake_dnn.beta = *(const double *)beta;
  } else {
    fake_dnn.alpha = *(const float *)alpha;
    fake_dnn.beta = *(const float *)beta;
  }
}

cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t yd,
    void *y) {
  (void)h, (void)x, (void)w, (void)cd, (void)algo, (void)ws, (void)wsb;
  (void)y;
  conv_call(xd, wd, yd, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
    const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t dxd,
    void *dx) {
  (void)h, (void)w, (void)dy, (void)cd, (void)algo, (void)ws, (void)wsb;
  (void)dx;
  conv_call(dxd, wd, dyd, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnFilterDescriptor_t dwd,
    void *dw) {
  (void)h, (void)x, (void)dy, (void)cd, (void)algo, (void)ws, (void)wsb;
  (void)dw;
  conv_call(xd, dwd, dyd, alpha, beta);
  return CUDNN_STATUS_SUCCESS;
}
