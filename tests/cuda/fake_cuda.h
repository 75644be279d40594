/*
 * A fake CUDA for tests of the CUDA plugin's host logic (fake_cuda.c):
 * the CUDA runtime, NVRTC, cuBLAS and cuDNN functions the plugin calls,
 * defined in the test program so that the plugin's objects (libtcu.la,
 * linked in) reach them instead of the libraries'. Two GPUs: 0 an H100
 * (compute capability 9.0), 1 a T4 (7.5). Device memory is host memory
 * (copies and fills are memcpy and memset); kernel launches, GEMMs and
 * convolutions are recorded here, not run; NVRTC compiles nothing and
 * keeps the last source it was given.
 */
#ifndef TYTO_TESTS_CUDA_FAKE_CUDA_H
#define TYTO_TESTS_CUDA_FAKE_CUDA_H

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

void fake_reset(void);
/* The index of the first launch of kernel `name` at or after `from`, or
 * -1. */
int fake_launch_at(const char *name, int from);

#endif /* TYTO_TESTS_CUDA_FAKE_CUDA_H */
