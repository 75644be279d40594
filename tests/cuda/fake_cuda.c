/*
 * The fake CUDA of fake_cuda.h: each function has the prototype of the
 * library's header and records what the plugin asked; in the executing
 * mode (fake_execute) NVRTC's programs are compiled by the host's C++
 * compiler and launches run them.
 */
#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

#include "../../plugins/common/half.h"
#include "fake_cuda.h"

/* ---- what the fakes saw ------------------------------------------------ */

char fake_launched[FAKE_MAX_REC][48];
int fake_n_launched;
char fake_source[1 << 20];
static int fake_source_whole; /* fake_source holds all of the program */
fake_gemm_rec fake_gemm;
fake_dnn_rec fake_dnn;
int fake_execute;
const char *fake_cxx = "c++", *fake_shim;
char fake_dir[256];

/* A cuDNN descriptor: what it was set to. A tensor's or filter's dims
 * (n, c, h, w or k, c, h, w), packed NCHW; a convolution's geometry. */
typedef struct fake_desc {
  int dtype;
  int dims[4];
  int pad[2], stride[2], dil[2], groups;
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
  /* Executing, the H100 alone: every test runs once. */
  *count = fake_execute ? 1 : 2;
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

/* Executing: the image NVRTC "made" (nvrtcGetCUBIN) is this magic, the
 * process's id and the dlopen handle of the program compiled for the
 * host; any other image (a kernel cache's, another process's) is refused
 * as a driver refuses a cubin it cannot load, and the plugin compiles
 * again. */
static const char image_magic[8] = "TYTOEMU";
#define IMAGE_BYTES (sizeof image_magic + sizeof(pid_t) + sizeof(void *))

cudaError_t cudaLibraryLoadData(cudaLibrary_t *lib, const void *code,
                                enum cudaJitOption *jo, void **jv,
                                unsigned int nj, enum cudaLibraryOption *lo,
                                void **lv, unsigned int nl) {
  (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
  *lib = (cudaLibrary_t)(void *)&fake_library;
  if (!fake_execute)
    return cudaSuccess;
  const char *c = code;
  pid_t pid;
  void *h;
  memcpy(&pid, c + sizeof image_magic, sizeof pid);
  memcpy(&h, c + sizeof image_magic + sizeof pid, sizeof h);
  if (memcmp(c, image_magic, sizeof image_magic) != 0 || pid != getpid() ||
      h == NULL)
    return cudaErrorInvalidKernelImage;
  *lib = (cudaLibrary_t)h;
  return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t lib) {
  (void)lib;
  return cudaSuccess;
}

/* A kernel handle is its interned record, its name first: executing,
 * its program's launcher (emu_shim.h) and its wrapper. */
typedef void emu_wrapper(void **);
typedef void emu_launcher(emu_wrapper *, void **, unsigned, unsigned, unsigned,
                          char *, size_t);
typedef struct fake_kernel {
  char name[48];
  void *lib;
  emu_wrapper *run;
  emu_launcher *launch;
} fake_kernel;
#define FAKE_MAX_KERNELS 16384
static fake_kernel kernels[FAKE_MAX_KERNELS];
static int n_kernels;

/* Launches run one at a time (emu_shim.h's state is the process's), and
 * so do lookups in the table of kernels. */
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

static cudaError_t get_kernel(cudaKernel_t *k, cudaLibrary_t lib,
                              const char *name);

cudaError_t cudaLibraryGetKernel(cudaKernel_t *k, cudaLibrary_t lib,
                                 const char *name) {
  pthread_mutex_lock(&launch_lock);
  cudaError_t e = get_kernel(k, lib, name);
  pthread_mutex_unlock(&launch_lock);
  return e;
}

static cudaError_t get_kernel(cudaKernel_t *k, cudaLibrary_t lib,
                              const char *name) {
  int i = 0;
  while (i < n_kernels &&
         (strcmp(kernels[i].name, name) != 0 || kernels[i].lib != (void *)lib))
    i++;
  if (i == n_kernels) {
    if (n_kernels == FAKE_MAX_KERNELS || strlen(name) >= 40)
      return cudaErrorInvalidValue;
    fake_kernel *r = &kernels[n_kernels];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->lib = (void *)lib;
    if (fake_execute) {
      char sym[64];
      snprintf(sym, sizeof sym, "%s__emu", name);
      *(void **)&r->run = dlsym((void *)lib, sym);
      *(void **)&r->launch = dlsym((void *)lib, "tyto_emu_launch");
      if (r->run == NULL || r->launch == NULL)
        return cudaErrorSymbolNotFound;
    }
    n_kernels++;
  }
  *k = (cudaKernel_t)(void *)&kernels[i];
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) {
  (void)f;
  memset(a, 0, sizeof *a);
  return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *f, dim3 grid, dim3 block, void **args,
                             size_t shared, cudaStream_t s) {
  (void)shared, (void)s;
  const fake_kernel *k = f;
  /* What a GPU refuses (emu_shim.h launches along x and y only). */
  if (fake_execute &&
      (grid.x == 0 || grid.y == 0 || grid.y > 65535 || grid.z != 1 ||
       block.x == 0 || block.x > 1024 || block.y != 1 || block.z != 1))
    return cudaErrorInvalidConfiguration;
  pthread_mutex_lock(&launch_lock);
  if (fake_n_launched < FAKE_MAX_REC)
    snprintf(fake_launched[fake_n_launched++], 48, "%s", k->name);
  static int trace = -1; /* TYTO_FAKE_TRACE, read once */
  if (trace < 0)
    trace = getenv("TYTO_FAKE_TRACE") != NULL;
  if (fake_execute && trace)
    fprintf(stderr, "fake launch %s: %u x %u blocks of %u\n", k->name, grid.x,
            grid.y, block.x);
  if (fake_execute && k->run != NULL) {
    size_t stack;
    char *stacks = fake_fiber_stacks(&stack);
    if (stacks == NULL) {
      pthread_mutex_unlock(&launch_lock);
      return cudaErrorMemoryAllocation;
    }
    k->launch(k->run, args, grid.x, grid.y, block.x, stacks, stack);
  }
  pthread_mutex_unlock(&launch_lock);
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

/* One program at a time, from nvrtcCreateProgram to nvrtcDestroyProgram
 * (the plugin's devices may compile from several threads at once). */
static pthread_mutex_t nvrtc_lock = PTHREAD_MUTEX_INITIALIZER;

nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src,
                               const char *name, int n, const char *const *h,
                               const char *const *hn) {
  (void)name, (void)n, (void)h, (void)hn;
  pthread_mutex_lock(&nvrtc_lock);
  snprintf(fake_source, sizeof fake_source, "%s", src);
  fake_source_whole = strlen(src) < sizeof fake_source;
  *prog = (nvrtcProgram)(void *)&fake_program;
  return NVRTC_SUCCESS;
}

/* Executing: the last program compiled for the host. */
static void *compiled;
static int n_programs;

/* Runs a shell command; 0 when it exited with 0. */
static int run_cmd(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

/* The shim, precompiled once per process into fake_dir (a C++ program's
 * time is mostly its standard headers'). "" until made; NULL when the
 * compiler cannot make it (then each program includes the shim itself). */
static const char *shim_pch(void) {
  static char path[300];
  static int tried;
  if (!tried) {
    tried = 1;
    snprintf(path, sizeof path, "%s/emu_shim.h", fake_dir);
    if (run_cmd("cp '%s' '%s' && %s -std=c++17 -O1 -w -U_FORTIFY_SOURCE -fPIC "
                "-x c++-header "
                "'%s' -o '%s.gch'",
                fake_shim, path, fake_cxx, path, path) != 0)
      path[0] = '\0';
  }
  return path[0] != '\0' ? path : fake_shim;
}

/* fake_source as a host shared object: preprocessed (with the CUDA
 * qualifiers defined away: the programs include nothing) to find its
 * kernels (extern "C" void NAME(), then compiled with the shim and a
 * TYTO_EMU_KERNEL wrapper for each, its references bound to its own
 * definitions (-Bsymbolic: a kernel named tyto_reduce must not become
 * libtyto's function of that name). NULL on a failure (the compiler says
 * why on stderr). TYTO_FAKE_TRACE prints each launch. */
static void *compile_host(void) {
  char base[400], path[420];
  if (fake_dir[0] == '\0' || !fake_source_whole) {
    fprintf(stderr, "fake NVRTC: %s\n",
            fake_dir[0] == '\0' ? "no directory for the programs"
                                : "a program longer than fake_source");
    return NULL;
  }
  const char *shim = shim_pch();
  snprintf(base, sizeof base, "%s/p%d", fake_dir, n_programs++);
  snprintf(path, sizeof path, "%s.cu.cpp", base);
  FILE *f = fopen(path, "w");
  if (f == NULL || fputs(fake_source, f) < 0 || fclose(f) != 0)
    return NULL;
  if (run_cmd("%s -std=c++17 -E -P -w -D__global__= -D__device__= "
              "-D__forceinline__= '-D__launch_bounds__(n)=' "
              "-D__shared__=static '%s' -o '%s.i'",
              fake_cxx, path, base) != 0)
    return NULL;
  snprintf(path, sizeof path, "%s.i", base);
  f = fopen(path, "r");
  static char pre[1 << 22];
  size_t n = f != NULL ? fread(pre, 1, sizeof pre - 1, f) : 0;
  if (f != NULL)
    fclose(f);
  pre[n] = '\0';
  snprintf(path, sizeof path, "%s.emu.cpp", base);
  f = fopen(path, "w");
  if (f == NULL)
    return NULL;
  fputs(fake_source, f);
  fputs("\n", f);
  for (const char *at = pre; (at = strstr(at, "extern \"C\"")) != NULL;) {
    at += strlen("extern \"C\"");
    const char *q = at + strspn(at, " \t\n");
    if (strncmp(q, "void", 4) != 0)
      continue;
    q += 4;
    q += strspn(q, " \t\n");
    size_t len =
        strspn(q, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                  "0123456789_");
    const char *paren = q + len + strspn(q + len, " \t\n");
    if (len == 0 || *paren != '(' || strncmp(q, "tyto_emu_", 9) == 0)
      continue;
    fprintf(f, "TYTO_EMU_KERNEL(%.*s)\n", (int)len, q);
  }
  if (fclose(f) != 0)
    return NULL;
  if (run_cmd("%s -std=c++17 %s -w -U_FORTIFY_SOURCE -ffp-contract=off "
              "-shared -fPIC -Wl,-Bsymbolic -include '%s' -o '%s.so' '%s'",
              fake_cxx, getenv("TYTO_FAKE_TRACE") != NULL ? "-g -O1" : "-O1",
              shim, base, path) != 0)
    return NULL;
  snprintf(path, sizeof path, "%s.so", base);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    fprintf(stderr, "fake NVRTC: %s\n", dlerror());
  return h;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n,
                                const char *const *opts) {
  (void)prog, (void)n, (void)opts;
  if (!fake_execute)
    return NVRTC_SUCCESS;
  compiled = compile_host();
  return compiled != NULL ? NVRTC_SUCCESS : NVRTC_ERROR_COMPILATION;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size) {
  (void)prog;
  *size = 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  (void)prog;
  log[0] = '\0';
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) {
  (void)prog;
  *size = fake_execute ? IMAGE_BYTES : 16;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *code) {
  (void)prog;
  if (!fake_execute) {
    memset(code, 0x7f, 16);
    return NVRTC_SUCCESS;
  }
  pid_t pid = getpid();
  memcpy(code, image_magic, sizeof image_magic);
  memcpy(code + sizeof image_magic, &pid, sizeof pid);
  memcpy(code + sizeof image_magic + sizeof pid, &compiled, sizeof compiled);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  if (*prog != NULL)
    pthread_mutex_unlock(&nvrtc_lock);
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

/* GemmEx's alpha and beta: double for 64-bit compute types, else float. */
static double scalar(const void *p, cublasComputeType_t ct) {
  return ct == CUBLAS_COMPUTE_64F || ct == CUBLAS_COMPUTE_64F_PEDANTIC
             ? *(const double *)p
             : *(const float *)p;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                            cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb,
                            const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  (void)h, (void)algo;
  gemm_ex(0, at, bt, ct, compute);
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k,
                    scalar(alpha, compute), A, at, lda, 0, B, bt, ldb, 0,
                    scalar(beta, compute), C, ct, ldc, 0, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType at, int lda,
    long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
    const void *beta, void *C, cudaDataType ct, int ldc, long long sc,
    int count, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  (void)h, (void)algo;
  gemm_ex(1, at, bt, ct, compute);
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k,
                    scalar(alpha, compute), A, at, lda, sa, B, bt, ldb, sb,
                    scalar(beta, compute), C, ct, ldc, sc, count);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                              cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  (void)h;
  fake_gemm.calls++;
  fake_gemm.sgemm = 1;
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, *alpha, A,
                    CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C,
                    CUDA_R_32F, ldc, 0, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha,
                                         const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc,
                                         long long sc, int count) {
  (void)h;
  fake_gemm.calls++;
  fake_gemm.sgemm = 1;
  fake_gemm.batched = 1;
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, *alpha, A,
                    CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, *beta, C,
                    CUDA_R_32F, ldc, sc, count);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                              cublasOperation_t tb, int m, int n, int k,
                              const double *alpha, const double *A, int lda,
                              const double *B, int ldb, const double *beta,
                              double *C, int ldc) {
  (void)h;
  fake_gemm.calls++;
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, *alpha, A,
                    CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0, *beta, C,
                    CUDA_R_64F, ldc, 0, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n,
                                         int k, const double *alpha,
                                         const double *A, int lda, long long sa,
                                         const double *B, int ldb, long long sb,
                                         const double *beta, double *C, int ldc,
                                         long long sc, int count) {
  (void)h;
  fake_gemm.calls++;
  fake_gemm.batched = 1;
  fake_gemm_compute(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, *alpha, A,
                    CUDA_R_64F, lda, sa, B, CUDA_R_64F, ldb, sb, *beta, C,
                    CUDA_R_64F, ldc, sc, count);
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
  fake_desc *fd = (fake_desc *)(void *)d;
  (void)f;
  fd->dtype = (int)t;
  fd->dims[0] = n, fd->dims[1] = c, fd->dims[2] = h, fd->dims[3] = w;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                         cudnnDataType_t t,
                                         cudnnTensorFormat_t f, int k, int c,
                                         int h, int w) {
  fake_desc *fd = (fake_desc *)(void *)d;
  (void)f;
  fd->dtype = (int)t;
  fd->dims[0] = k, fd->dims[1] = c, fd->dims[2] = h, fd->dims[3] = w;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d,
                                              int ph, int pw, int u, int v,
                                              int dh, int dw,
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  fake_desc *fd = (fake_desc *)(void *)d;
  (void)mode; /* cross-correlation, as the plugin asks */
  fd->pad[0] = ph, fd->pad[1] = pw;
  fd->stride[0] = u, fd->stride[1] = v;
  fd->dil[0] = dh, fd->dil[1] = dw;
  if (fd->groups == 0)
    fd->groups = 1;
  fake_dnn.compute = (int)compute;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d,
                                            int g) {
  ((fake_desc *)(void *)d)->groups = g;
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

/* cuDNN's data type as cudaDataType, for fake_load and fake_store. */
static int dnn_type(int t) {
  return t == CUDNN_DATA_DOUBLE     ? CUDA_R_64F
         : t == CUDNN_DATA_HALF     ? CUDA_R_16F
         : t == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF
                                    : CUDA_R_32F;
}

static double dnn_load(const void *p, int t, long long i) {
  return fake_load(p, dnn_type(t), i);
}

static void dnn_store(void *p, int t, long long i, double v) {
  fake_store(p, dnn_type(t), i, v);
}

/* Executing: the convolution `what` (0 forward into y, 1 the data's
 * gradient into x, 2 the filter's into w), with every product summed in
 * double: out = alpha * sum + beta * out. */
static int conv_compute(int what, const fake_desc *xd, void *x,
                        const fake_desc *wd, void *w, const fake_desc *yd,
                        void *y, const fake_desc *cd, double alpha,
                        double beta) {
  if (!fake_execute)
    return 0;
  const int N = xd->dims[0], C = xd->dims[1], H = xd->dims[2], W = xd->dims[3],
            K = wd->dims[0], Cg = wd->dims[1], R = wd->dims[2], S = wd->dims[3],
            OH = yd->dims[2], OW = yd->dims[3],
            G = cd->groups > 0 ? cd->groups : 1;
  const int Kg = K / G;
  /* What cuDNN would refuse: the geometry must add up. */
  int eh = (R - 1) * cd->dil[0] + 1, ew = (S - 1) * cd->dil[1] + 1;
  if (Cg * G != C || K % G != 0 || yd->dims[0] != N || yd->dims[1] != K ||
      OH != (H + 2 * cd->pad[0] - eh) / cd->stride[0] + 1 ||
      OW != (W + 2 * cd->pad[1] - ew) / cd->stride[1] + 1)
    return 1;
  /* The output's elements, each summed alone. */
  const fake_desc *od = what == 0 ? yd : what == 1 ? xd : wd;
  void *out = what == 0 ? y : what == 1 ? x : w;
  long long total =
      (long long)od->dims[0] * od->dims[1] * od->dims[2] * od->dims[3];
  double *acc = calloc((size_t)(total > 0 ? total : 1), sizeof *acc);
  if (acc == NULL)
    return 0;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++)
          for (int c = 0; c < Cg; c++)
            for (int r = 0; r < R; r++)
              for (int q = 0; q < S; q++) {
                int h = oh * cd->stride[0] - cd->pad[0] + r * cd->dil[0];
                int ww = ow * cd->stride[1] - cd->pad[1] + q * cd->dil[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W)
                  continue;
                int ci = (k / Kg) * Cg + c;
                long long xi = (((long long)n * C + ci) * H + h) * W + ww;
                long long wi = (((long long)k * Cg + c) * R + r) * S + q;
                long long yi = (((long long)n * K + k) * OH + oh) * OW + ow;
                if (what == 0)
                  acc[yi] +=
                      dnn_load(x, xd->dtype, xi) * dnn_load(w, wd->dtype, wi);
                else if (what == 1)
                  acc[xi] +=
                      dnn_load(y, yd->dtype, yi) * dnn_load(w, wd->dtype, wi);
                else
                  acc[wi] +=
                      dnn_load(x, xd->dtype, xi) * dnn_load(y, yd->dtype, yi);
              }
  for (long long i = 0; i < total; i++) {
    double v = alpha * acc[i];
    if (beta != 0)
      v += beta * dnn_load(out, od->dtype, i);
    dnn_store(out, od->dtype, i, v);
  }
  free(acc);
  return 0;
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
  (void)h, (void)algo, (void)ws, (void)wsb;
  conv_call(xd, wd, yd, alpha, beta);
  if (conv_compute(0, (const void *)xd, (void *)x, (const void *)wd, (void *)w,
                   (const void *)yd, y, (const void *)cd, fake_dnn.alpha,
                   fake_dnn.beta))
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
    const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnTensorDescriptor_t dxd,
    void *dx) {
  (void)h, (void)algo, (void)ws, (void)wsb;
  conv_call(dxd, wd, dyd, alpha, beta);
  if (conv_compute(1, (const void *)dxd, dx, (const void *)wd, (void *)w,
                   (const void *)dyd, (void *)dy, (const void *)cd,
                   fake_dnn.alpha, fake_dnn.beta))
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
    const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t algo,
    void *ws, size_t wsb, const void *beta, const cudnnFilterDescriptor_t dwd,
    void *dw) {
  (void)h, (void)algo, (void)ws, (void)wsb;
  conv_call(xd, dwd, dyd, alpha, beta);
  if (conv_compute(2, (const void *)xd, (void *)x, (const void *)dwd, dw,
                   (const void *)dyd, (void *)dy, (const void *)cd,
                   fake_dnn.alpha, fake_dnn.beta))
    return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}
