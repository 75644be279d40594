/*
 * CUDA runtime errors turned into tyto error values. Every message names the
 * call that failed and carries cudaGetErrorName + cudaGetErrorString, so a
 * user can search for it; sticky errors say the context is lost.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cuda_plugin.h"

tyto_plugin_code tcu_code_of(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return TYTO_PLUGIN_OK;
  case cudaErrorMemoryAllocation: return TYTO_PLUGIN_ERR_OUT_OF_MEMORY;
  case cudaErrorNoDevice:
  case cudaErrorStubLibrary: return TYTO_PLUGIN_ERR_NOT_FOUND;
  case cudaErrorInsufficientDriver:
  case cudaErrorCallRequiresNewerDriver:
  case cudaErrorDevicesUnavailable:
  case cudaErrorNotReady:
  case cudaErrorCudartUnloading:
  case cudaErrorInitializationError:
  case cudaErrorDeviceUninitialized:
  case cudaErrorSystemNotReady:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
  case cudaErrorDeviceNotLicensed: return TYTO_PLUGIN_ERR_UNAVAILABLE;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidDevicePointer:
  case cudaErrorInvalidResourceHandle:
  case cudaErrorInvalidDevice: return TYTO_PLUGIN_ERR_INVALID_ARGUMENT;
  case cudaErrorNotSupported:
  case cudaErrorNotPermitted:
  case cudaErrorNoKernelImageForDevice:
  case cudaErrorUnsupportedPtxVersion:
  case cudaErrorInvalidPtx:
  case cudaErrorJitCompilerNotFound:
  case cudaErrorJitCompilationDisabled:
  case cudaErrorPeerAccessUnsupported: return TYTO_PLUGIN_ERR_UNSUPPORTED;
  default: return TYTO_PLUGIN_ERR_DEVICE;
  }
}

/* Errors after which the CUDA context stays broken: every later call on it
 * fails the same way, so the only remedy is a new process. */
static int is_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorLaunchTimeout:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorAssert:
  case cudaErrorECCUncorrectable:
  case cudaErrorContextIsDestroyed: return 1;
  default: return 0;
  }
}

void tcu_describe(cudaError_t e, char *buf, size_t size) {
  const char *name = cudaGetErrorName(e);
  const char *text = cudaGetErrorString(e);
  snprintf(buf, size, "%s: %s", name ? name : "cudaError?",
           text ? text : "unknown error");
}

tyto_plugin_error *tcu_cuda_error(const tyto_plugin_host *host, cudaError_t e,
                                  const char *call, ...) {
  char what[256], why[256];
  va_list ap;
  va_start(ap, call);
  vsnprintf(what, sizeof what, call, ap);
  va_end(ap);
  tcu_describe(e, why, sizeof why);
  /* Reset the per-thread last-error slot so a later, unrelated
   * cudaGetLastError() does not report this failure again. */
  (void)cudaGetLastError();
  return host->error_new(
      tcu_code_of(e), "%s failed: %s%s", what, why,
      is_sticky(e) ? "; the GPU context is now unusable: restart the process"
                     " (run with compute-sanitizer to find the faulting kernel)"
                   : "");
}
