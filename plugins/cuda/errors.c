/*
 * CUDA runtime errors turned into tyto error values. Every message names the
 * call that failed and carries cudaGetErrorName + cudaGetErrorString, so a
 * user can search for it; sticky errors say the context is lost.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "cuda_plugin.h"

/* ---- lost devices ----------------------------------------------------------
 * A sticky error breaks the device's primary context for the rest of the
 * process, and every later call on it fails with the same error, far from
 * its cause. So the first one marks the device lost, process-wide (the
 * context is process-wide too), with what happened; tcu_use() then refuses
 * the device with that story. Other devices are untouched. */

#define MAX_DEVICES 64

/* 0: fine; 1: being marked; 2: lost, lost_why[] is complete. */
static atomic_int lost_state[MAX_DEVICES];
static char lost_why[MAX_DEVICES][544];

void tcu_mark_lost(int device, const char *why) {
  int expect = 0;
  if (device < 0 || device >= MAX_DEVICES ||
      !atomic_compare_exchange_strong(&lost_state[device], &expect, 1))
    return;
  snprintf(lost_why[device], sizeof lost_why[device], "%s", why);
  atomic_store(&lost_state[device], 2);
}

const char *tcu_lost_reason(int device) {
  if (device < 0 || device >= MAX_DEVICES ||
      atomic_load(&lost_state[device]) != 2)
    return NULL;
  return lost_why[device];
}

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
  if (!is_sticky(e))
    return host->error_new(tcu_code_of(e), "%s failed: %s", what, why);
  /* Every call goes through tcu_use() first, so the current device is the
   * one that faulted. */
  int device = -1;
  char story[544];
  snprintf(story, sizeof story, "%s failed: %s", what, why);
  if (cudaGetDevice(&device) == cudaSuccess)
    tcu_mark_lost(device, story);
  (void)cudaGetLastError();
  return host->error_new(
      TYTO_PLUGIN_ERR_DEVICE,
      "%s; cuda:%d is lost: CUDA cannot recover a GPU context after a fault, "
      "so it stays unusable until the process ends (other devices keep "
      "working; compute-sanitizer names the faulting kernel)",
      story, device);
}
