/*
 * The device's library handles (cuBLAS, cuBLASLt, cuDNN, cuSOLVER), each
 * created on first use so that a program that never multiplies matrices
 * never pays for cuBLAS's start-up, and destroyed at device_close.
 */
#include "cuda_plugin.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>
#include <cusolverDn.h>

/* Each getter: returns the cached handle, or creates it; the caller holds
 * dev->lib_lock with the device current. */
#define GETTER(fn, field, type, create, lib)                                   \
  tyto_plugin_error *fn(tyto_plugin_device *dev, void **out) {                 \
    if (dev->field == NULL) {                                                  \
      type h = NULL;                                                           \
      int rc = (int)create(&h);                                                \
      if (rc != 0 || h == NULL)                                                \
        return dev->state->host->error_new(                                    \
            TYTO_PLUGIN_ERR_UNAVAILABLE,                                       \
            "cuda:%d: cannot start " lib " (status %d); check that the "       \
            "library matches the CUDA runtime and that the GPU has memory "    \
            "left",                                                            \
            dev->index, rc);                                                   \
      dev->field = h;                                                          \
    }                                                                          \
    *out = dev->field;                                                         \
    return NULL;                                                               \
  }

GETTER(tcu_cublas, cublas, cublasHandle_t, cublasCreate, "cuBLAS")
GETTER(tcu_cublaslt, cublaslt, cublasLtHandle_t, cublasLtCreate, "cuBLASLt")
GETTER(tcu_cudnn, cudnn, cudnnHandle_t, cudnnCreate, "cuDNN")
GETTER(tcu_cusolver, cusolver, cusolverDnHandle_t, cusolverDnCreate, "cuSOLVER")

void tcu_libs_release(tyto_plugin_device *dev) {
  if (dev->cublas != NULL)
    (void)cublasDestroy((cublasHandle_t)dev->cublas);
  if (dev->cublaslt != NULL)
    (void)cublasLtDestroy((cublasLtHandle_t)dev->cublaslt);
  if (dev->cudnn != NULL)
    (void)cudnnDestroy((cudnnHandle_t)dev->cudnn);
  if (dev->cusolver != NULL)
    (void)cusolverDnDestroy((cusolverDnHandle_t)dev->cusolver);
  dev->cublas = dev->cublaslt = dev->cudnn = dev->cusolver = NULL;
}
