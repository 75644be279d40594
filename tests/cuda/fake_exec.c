/*
 * The rest of the fake CUDA runtime (fake_cuda.h), for the executing mode:
 * device memory, pinned memory, streams and events, all on the host and
 * synchronous (a launch has run when cudaLaunchKernel returns, so every
 * stream and event is always complete). Graph capture is refused, as a
 * driver without it would: the plugin's own graph test is for GPUs. And
 * the GEMMs of cuBLAS, computed here in double from the operands' own
 * dtypes and rounded once to C's.
 */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../../plugins/common/half.h"
#include "fake_cuda.h"

cudaError_t cudaMalloc(void **p, size_t n) {
  /* 256-byte aligned, as cudaMalloc's allocations are. */
  *p = aligned_alloc(256, (n + 255) / 256 * 256);
  return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  (void)flags;
  *p = calloc(1, n ? n : 1);
  return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags) {
  (void)flags;
  *d = h;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                       enum cudaMemcpyKind kind) {
  (void)kind;
  if (n > 0)
    memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd,
                                size_t n, cudaStream_t s) {
  (void)dd, (void)sd, (void)s;
  if (n > 0)
    memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d) {
  *d = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  (void)peer, (void)flags;
  return cudaSuccess;
}

static char fake_stream_object, fake_event_object;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)(void *)&fake_stream_object;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  (void)s;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
  (void)s, (void)e, (void)f;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
  (void)flags;
  *e = (cudaEvent_t)(void *)&fake_event_object;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  (void)e, (void)s;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s,
                                   enum cudaStreamCaptureMode mode) {
  (void)s, (void)mode;
  return cudaErrorStreamCaptureUnsupported;
}

/* ---- GEMM ---------------------------------------------------------------- */

double fake_load(const void *p, int t, long long i) {
  switch (t) {
  case CUDA_R_64F: return ((const double *)p)[i];
  case CUDA_R_16F: return tpc_f16_to_f32(((const uint16_t *)p)[i]);
  case CUDA_R_16BF: return tpc_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

void fake_store(void *p, int t, long long i, double v) {
  switch (t) {
  case CUDA_R_64F: ((double *)p)[i] = v; break;
  case CUDA_R_16F: ((uint16_t *)p)[i] = tpc_f64_to_f16((float)v); break;
  case CUDA_R_16BF: ((uint16_t *)p)[i] = tpc_f64_to_bf16((float)v); break;
  default: ((float *)p)[i] = (float)v;
  }
}

void fake_gemm_compute(int ta, int tb, int m, int n, int k, double alpha,
                       const void *A, int at, int lda, long long sa,
                       const void *B, int bt, int ldb, long long sb,
                       double beta, void *C, int ct, int ldc, long long sc,
                       int count) {
  if (!fake_execute)
    return;
  /* Column-major, as cuBLAS: op(A) is m x k, op(B) k x n, C m x n. */
  for (int b = 0; b < count; b++)
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int p = 0; p < k; p++) {
          long long ai = ta ? (long long)p + (long long)i * lda
                            : (long long)i + (long long)p * lda;
          long long bi = tb ? (long long)j + (long long)p * ldb
                            : (long long)p + (long long)j * ldb;
          acc += fake_load(A, at, b * sa + ai) * fake_load(B, bt, b * sb + bi);
        }
        long long ci = b * sc + (long long)i + (long long)j * ldc;
        double v = alpha * acc;
        if (beta != 0)
          v += beta * fake_load(C, ct, ci);
        fake_store(C, ct, ci, v);
      }
}

/* ---- fiber stacks ---------------------------------------------------------
 */

char *fake_fiber_stacks(size_t *stack) {
  /* 1024 threads (a block's most) of 64 KiB, mapped once and touched only
   * as used: every program's launches share them. */
  static char *pool;
  *stack = 64 * 1024;
  if (pool == NULL) {
    void *p = mmap(NULL, 1024 * *stack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pool = p == MAP_FAILED ? NULL : p;
  }
  return pool;
}
