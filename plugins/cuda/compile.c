/*
 * Run-time compilation: NVRTC turns generated source into a cubin for the
 * device's own architecture (or PTX when the GPU is newer than this NVRTC),
 * the runtime's library API loads it (cudaLibraryLoadData, no libcuda link
 * needed), and each open device caches its modules by source text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "cuda_plugin.h"

/* A cubin for sm_X.y runs on sm_X.z for z >= y, so the best target is the
 * device's own architecture, else the newest NVRTC knows with the same
 * major below it; a GPU newer than every NVRTC target gets PTX for the
 * newest one, which the driver compiles on load. */
void tcu_arch_select(tyto_plugin_device *dev, int major, int minor) {
  int want = major * 10 + minor, n = 0, same_major = -1, lo = 0, hi = 0;
  int nv_major = 0, nv_minor = 0;
  int *archs = NULL;
  dev->arch[0] = '\0';
  dev->arch_is_ptx = 0;
  (void)nvrtcVersion(&nv_major, &nv_minor);
  if (nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0)
    archs = calloc((size_t)n, sizeof *archs);
  if (archs == NULL || nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) {
    snprintf(dev->arch_error, sizeof dev->arch_error,
             "cannot ask NVRTC %d.%d which GPU architectures it supports",
             nv_major, nv_minor);
    free(archs);
    return;
  }
  for (int i = 0; i < n; i++) {
    int a = archs[i];
    if (i == 0 || a < lo)
      lo = a;
    if (i == 0 || a > hi)
      hi = a;
    if (a / 10 == major && a <= want && a > same_major)
      same_major = a;
  }
  free(archs);
  if (same_major >= 0) {
    snprintf(dev->arch, sizeof dev->arch, "sm_%d", same_major);
  } else if (want > hi) {
    snprintf(dev->arch, sizeof dev->arch, "compute_%d", hi);
    dev->arch_is_ptx = 1;
  } else {
    snprintf(dev->arch_error, sizeof dev->arch_error,
             "NVRTC %d.%d cannot generate code for compute capability %d.%d "
             "(it targets sm_%d to sm_%d); build tyto against a CUDA Toolkit "
             "that still supports this GPU",
             nv_major, nv_minor, major, minor, lo, hi);
  }
}

/* Compiles `source` for dev->arch. On success *code is a malloc'd cubin or
 * NUL-terminated PTX. */
static tyto_plugin_error *run_nvrtc(tyto_plugin_device *dev, const char *source,
                                    char **code) {
  const tyto_plugin_host *host = dev->state->host;
  nvrtcProgram prog = NULL;
  nvrtcResult r;
  char arch_opt[64];
  /* --fmad=false: no a*b + c becomes an FMA nobody asked for, so each op
   * rounds as it does alone (and as on the CPU); division and sqrt stay
   * IEEE-rounded (NVRTC's default -prec-div/-prec-sqrt). */
  const char *opts[3] = {arch_opt, "--fmad=false", "--std=c++17"};
  size_t size = 0;
  tyto_plugin_error *err = NULL;

  *code = NULL;
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", dev->arch);
  r = nvrtcCreateProgram(&prog, source, "tyto.cu", 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return host->error_new(
        r == NVRTC_ERROR_OUT_OF_MEMORY ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                       : TYTO_PLUGIN_ERR_INTERNAL,
        "nvrtcCreateProgram failed: %s", nvrtcGetErrorString(r));
  r = nvrtcCompileProgram(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS &&
        log_size > 0 && (log = malloc(log_size)) != NULL &&
        nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
      log[0] = '\0';
    host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG,
              "cuda:%d: source that failed to compile:\n%s", dev->index,
              source);
    /* BUILTIN_OPERATION_FAILURE is NVRTC's way of saying its helper
     * library libnvrtc-builtins could not be loaded. */
    err = host->error_new(
        r == NVRTC_ERROR_COMPILATION ? TYTO_PLUGIN_ERR_INTERNAL
                                     : TYTO_PLUGIN_ERR_UNAVAILABLE,
        "cuda:%d: NVRTC could not compile a kernel for %s (%s)%s%s%s",
        dev->index, dev->arch, nvrtcGetErrorString(r),
        log != NULL && log[0] ? ":\n" : "", log != NULL ? log : "",
        r == NVRTC_ERROR_BUILTIN_OPERATION_FAILURE
            ? "; check that libnvrtc-builtins.so is installed next to "
              "libnvrtc.so"
            : "");
    free(log);
    nvrtcDestroyProgram(&prog);
    return err;
  }
  r = dev->arch_is_ptx ? nvrtcGetPTXSize(prog, &size)
                       : nvrtcGetCUBINSize(prog, &size);
  if (r == NVRTC_SUCCESS && size > 0) {
    *code = malloc(size);
    if (*code == NULL) {
      nvrtcDestroyProgram(&prog);
      return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                             "cuda:%d: out of host memory for a %zu-byte "
                             "kernel image",
                             dev->index, size);
    }
    r = dev->arch_is_ptx ? nvrtcGetPTX(prog, *code)
                         : nvrtcGetCUBIN(prog, *code);
  }
  if (r != NVRTC_SUCCESS || size == 0) {
    free(*code);
    *code = NULL;
    err = host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                          "cuda:%d: NVRTC produced no %s for %s (%s)",
                          dev->index, dev->arch_is_ptx ? "PTX" : "cubin",
                          dev->arch, nvrtcGetErrorString(r));
  }
  nvrtcDestroyProgram(&prog);
  return err;
}

/* Loads a compiled image as a module of `dev`. */
static tyto_plugin_error *load_module(tyto_plugin_device *dev, const char *code,
                                      tcu_module *m) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  /* The runtime copies the image (cudaLibraryBinaryIsPreserved is not
   * set), so the caller may free `code` afterwards. */
  e = cudaLibraryLoadData(&m->library, code, NULL, NULL, 0, NULL, NULL, 0);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: cudaLibraryLoadData (%s %s)",
                          dev->index, dev->arch_is_ptx ? "PTX" : "cubin",
                          dev->arch);
  return NULL;
}

tyto_plugin_error *tcu_module_get(tyto_plugin_device *dev, const char *source,
                                  tcu_module **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err = NULL;
  tcu_module *m;
  char *code = NULL;

  *out = NULL;
  if (dev->arch[0] == '\0')
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED, "cuda:%d: %s",
                           dev->index, dev->arch_error);
  pthread_mutex_lock(&dev->cache_lock);
  for (m = dev->cache; m != NULL; m = m->next)
    if (strcmp(m->source, source) == 0)
      break;
  if (m == NULL) {
    m = calloc(1, sizeof *m);
    if (m == NULL || (m->source = malloc(strlen(source) + 1)) == NULL) {
      err = host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                            "cuda:%d: out of host memory", dev->index);
    } else {
      memcpy(m->source, source, strlen(source) + 1);
      if ((err = run_nvrtc(dev, source, &code)) == NULL && !dev->compile_only)
        err = load_module(dev, code, m);
      free(code);
    }
    if (err != NULL) {
      if (m != NULL)
        free(m->source);
      free(m);
      m = NULL;
    } else {
      m->next = dev->cache;
      dev->cache = m;
      host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG,
                "cuda:%d: compiled a kernel for %s", dev->index, dev->arch);
    }
  }
  pthread_mutex_unlock(&dev->cache_lock);
  *out = m;
  return err;
}

void tcu_cache_clear(tyto_plugin_device *dev) {
  tcu_module *m = dev->cache, *next;
  for (; m != NULL; m = next) {
    next = m->next;
    if (m->library != NULL && cudaLibraryUnload(m->library) != cudaSuccess)
      (void)cudaGetLastError();
    free(m->source);
    free(m);
  }
  dev->cache = NULL;
}
