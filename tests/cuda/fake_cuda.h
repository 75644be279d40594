/*
 * A fake CUDA for tests of the CUDA plugin's host logic (fake_cuda.c):
 * the CUDA runtime, NVRTC, cuBLAS and cuDNN functions the plugin calls,
 * defined in the test program so that the plugin's objects (libtcu.la,
 * linked in) reach them instead of the libraries'. Two GPUs: 0 an H100
 * (compute capability 9.0), 1 a T4 (7.5). Device memory is host memory
 * (copies and fills are memcpy and memset); kernel launches, GEMMs and
 * convolutions are recorded here, and computed only in the executing
 * mode below; NVRTC keeps the last source it was given.
 */
#ifndef TYTO_TESTS_CUDA_FAKE_CUDA_H
#define TYTO_TESTS_CUDA_FAKE_CUDA_H

#include <stddef.h>

extern const char *const fake_gpu_names[2];
extern const int fake_gpu_cc[2][2];

/* Kernel names in launch order (the first FAKE_MAX_REC since the last
 * fake_reset), and the last program given to NVRTC. */
#define FAKE_MAX_REC 512
extern char fake_launched[FAKE_MAX_REC][48];
extern int fake_n_launched;
extern char fake_source[1 << 20];

/* The GEMMs since the last fake_reset: the last one's routine and types
 * (cudaDataType_t, cublasComputeType_t values) and the math mode last set
 * (-1: none). */
typedef struct fake_gemm_rec {
  int calls;
  int ex, batched, sgemm;
  int atype, btype, ctype, compute;
  int math;
} fake_gemm_rec;
extern fake_gemm_rec fake_gemm;

/* cuDNN since the last fake_reset: the convolution descriptor's compute
 * type and math type as last set, the last convolution's tensor types
 * (cudnnDataType_t: x, w, y as the call names them), and its alpha and
 * beta (beta -1: none yet). */
typedef struct fake_dnn_rec {
  int compute, math;
  int x_type, w_type, y_type;
  int calls;
  double alpha, beta;
} fake_dnn_rec;
extern fake_dnn_rec fake_dnn;

/* The executing mode (set before the plugin's init): NVRTC's programs
 * are compiled by fake_cxx (a C++ compiler) with fake_shim
 * (tests/cuda/emu_shim.h) into shared objects in fake_dir, and
 * cudaLaunchKernel runs their kernels on the host, blocks in turn and
 * each block's threads as fibers. Device memory stays host memory. */
extern int fake_execute;
extern const char *fake_cxx, *fake_shim;
extern char fake_dir[256];

/* Executing: C = alpha op(A) op(B) + beta C, column-major as cuBLAS,
 * each of count products at its stride; types are cudaDataType values
 * (fake_exec.c). A no-op otherwise. */
void fake_gemm_compute(int ta, int tb, int m, int n, int k, double alpha,
                       const void *A, int at, int lda, long long sa,
                       const void *B, int bt, int ldb, long long sb,
                       double beta, void *C, int ct, int ldc, long long sc,
                       int count);

/* Element i of p, of cudaDataType t (32F, 64F, 16F or 16BF), as a
 * double; and v stored there, rounded once (through f32 for 16 bits, as
 * an f32 accumulator would be) (fake_exec.c). */
double fake_load(const void *p, int t, long long i);
void fake_store(void *p, int t, long long i, double v);

/* Executing: the fibers' stacks, 1024 of *stack bytes, for every launch
 * (fake_exec.c); NULL when they cannot be mapped. */
char *fake_fiber_stacks(size_t *stack);

void fake_reset(void);
/* The index of the first launch of kernel `name` at or after `from`, or
 * -1. */
int fake_launch_at(const char *name, int from);

#endif /* TYTO_TESTS_CUDA_FAKE_CUDA_H */
