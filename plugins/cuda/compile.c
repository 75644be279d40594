/*
 * Run-time compilation: NVRTC turns generated source into a cubin for the
 * device's own architecture (or PTX when the GPU is newer than this NVRTC),
 * the runtime's library API loads it (cudaLibraryLoadData, no libcuda link
 * needed), and each open device caches its modules by source text.
 *
 * Images are also kept on disk across runs, one file per image,
 * <dir>/cuda/<key>.bin (plugins/common/diskcache.h: <dir> is the option
 * cache_dir, else $XDG_CACHE_HOME/tyto, else ~/.cache/tyto; "off" turns the
 * cache off). The 128-bit key covers everything the image depends on: the
 * file format, the source, NVRTC's options and version, the target, the
 * driver version and the GPU's name. A hit skips NVRTC; an image the driver
 * refuses is compiled again from source and its file replaced. Any failure
 * of the cache is logged at debug level and costs only a compile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "../common/diskcache.h"
#include "cuda_plugin.h"

/* The cache files' magic, also hashed into every key: a new layout of
 * what is stored gets a new one, so old files are ignored, not misread. */
#define CACHE_MAGIC "TYTOCU01"

/* Images larger than this are not read back (the largest generated
 * kernels take about a MiB). */
#define CACHE_MAX_IMAGE ((size_t)1 << 30)

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
  dev->cc_major = major;
  dev->cc_minor = minor;
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

/* NVRTC's options for a device. The compile and the cache key both read
 * this one array, so a changed option cannot reuse an old image. */
#define N_OPTS 3
typedef struct nvrtc_opts {
  char arch[64];
  const char *v[N_OPTS];
} nvrtc_opts;

static void nvrtc_options(const tyto_plugin_device *dev, nvrtc_opts *o) {
  snprintf(o->arch, sizeof o->arch, "--gpu-architecture=%s", dev->arch);
  o->v[0] = o->arch;
  /* --fmad=false: no a*b + c becomes an FMA nobody asked for, so each op
   * rounds as it does alone (and as on the CPU); division and sqrt stay
   * IEEE-rounded (NVRTC's default -prec-div/-prec-sqrt). */
  o->v[1] = "--fmad=false";
  o->v[2] = "--std=c++17";
}

/* Compiles `source` for dev->arch with options `o`. On success *code is a
 * malloc'd cubin or NUL-terminated PTX of *size bytes (the NUL
 * included). */
static tyto_plugin_error *run_nvrtc(tyto_plugin_device *dev, const char *source,
                                    const nvrtc_opts *o, char **code,
                                    size_t *size) {
  const tyto_plugin_host *host = dev->state->host;
  nvrtcProgram prog = NULL;
  nvrtcResult r;
  tyto_plugin_error *err = NULL;

  *code = NULL;
  *size = 0;
  dev->nvrtc_compiles++;
  r = nvrtcCreateProgram(&prog, source, "tyto.cu", 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return host->error_new(
        r == NVRTC_ERROR_OUT_OF_MEMORY ? TYTO_PLUGIN_ERR_OUT_OF_MEMORY
                                       : TYTO_PLUGIN_ERR_INTERNAL,
        "nvrtcCreateProgram failed: %s", nvrtcGetErrorString(r));
  r = nvrtcCompileProgram(prog, N_OPTS, o->v);
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
  r = dev->arch_is_ptx ? nvrtcGetPTXSize(prog, size)
                       : nvrtcGetCUBINSize(prog, size);
  if (r == NVRTC_SUCCESS && *size > 0) {
    *code = malloc(*size);
    if (*code == NULL) {
      nvrtcDestroyProgram(&prog);
      return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                             "cuda:%d: out of host memory for a %zu-byte "
                             "kernel image",
                             dev->index, *size);
    }
    r = dev->arch_is_ptx ? nvrtcGetPTX(prog, *code)
                         : nvrtcGetCUBIN(prog, *code);
  }
  if (r != NVRTC_SUCCESS || *size == 0) {
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

/* ---- the disk cache ---------------------------------------------------- */

/* The key of the image of `source` for `dev` compiled with `o`. */
static tpc_cache_key image_key(const tyto_plugin_device *dev,
                               const char *source, const nvrtc_opts *o) {
  const tyto_plugin_state *st = dev->state;
  tpc_cache_key k = tpc_cache_key_init();
  int nv_major = 0, nv_minor = 0, driver = 0;
  char what[160];
  (void)nvrtcVersion(&nv_major, &nv_minor);
  /* A compile_only device makes no CUDA call but NVRTC's (ops.h). */
  if (!dev->compile_only && cudaDriverGetVersion(&driver) != cudaSuccess) {
    (void)cudaGetLastError();
    driver = 0;
  }
  snprintf(what, sizeof what, "%s nvrtc %d.%d driver %d %s %s", CACHE_MAGIC,
           nv_major, nv_minor, driver, dev->arch_is_ptx ? "ptx" : "cubin",
           dev->arch);
  tpc_cache_key_str(&k, what);
  tpc_cache_key_str(&k,
                    st->hw != NULL && dev->index >= 0 && dev->index < st->n_hw
                        ? st->hw[dev->index].name
                        : "");
  for (int i = 0; i < N_OPTS; i++)
    tpc_cache_key_str(&k, o->v[i]);
  tpc_cache_key_str(&k, source);
  return k;
}

static void cache_debug(const tyto_plugin_device *dev, const char *what,
                        const char *path, const char *why) {
  const tyto_plugin_host *host = dev->state->host;
  host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG,
            "cuda:%d: kernel cache: %s %s%s%s%s", dev->index, what, path,
            why != NULL ? " (" : "", why != NULL ? why : "",
            why != NULL ? ")" : "");
}

/* The image stored at `path` for `key`, malloc'd, or NULL. */
static char *cache_read(const tyto_plugin_device *dev, const char *path,
                        tpc_cache_key key) {
  size_t size = 0;
  const char *why = NULL;
  char *code = (char *)tpc_cache_read(path, CACHE_MAGIC, key, CACHE_MAX_IMAGE,
                                      &size, &why);
  /* The driver reads PTX up to its NUL and has no size to stop it. */
  if (code != NULL && dev->arch_is_ptx && code[size - 1] != '\0') {
    why = "holds PTX without its terminating NUL";
    free(code);
    code = NULL;
  }
  if (code == NULL && why != NULL)
    cache_debug(dev, "ignoring", path, why);
  return code;
}

/* Fills m (its library; nothing on a compile_only device) with the image
 * of `source`: from the disk cache when it holds one the driver accepts,
 * else compiled by NVRTC and then stored. */
static tyto_plugin_error *build_module(tyto_plugin_device *dev,
                                       const char *source, tcu_module *m) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  nvrtc_opts o;
  tpc_cache_key key;
  char dir[4096], path[4200];
  char *code = NULL;
  size_t size = 0;
  int disk;

  nvrtc_options(dev, &o);
  key = image_key(dev, source, &o);
  disk = tpc_cache_dir(host->option(host->ctx, "cache_dir"), "cuda", dir,
                       sizeof dir) &&
         tpc_cache_path(dir, key, path, sizeof path);
  if (disk && (code = cache_read(dev, path, key)) != NULL) {
    err = dev->compile_only ? NULL : load_module(dev, code, m);
    free(code);
    if (err == NULL) {
      cache_debug(dev, "loaded", path, NULL);
      return NULL;
    }
    /* A driver that cannot load what an identical setup compiled (a
     * driver update that kept its version, a damaged file with an intact
     * header): compile again and replace the file. */
    cache_debug(dev, "rebuilding (the driver refused)", path,
                TYTO_PLUGIN_HAS_FIELD(host, tyto_plugin_host, error_message) &&
                        host->error_message != NULL
                    ? host->error_message(err)
                    : NULL);
    host->error_free(err);
  }
  if ((err = run_nvrtc(dev, source, &o, &code, &size)) == NULL &&
      !dev->compile_only)
    err = load_module(dev, code, m);
  if (err == NULL) {
    host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG,
              "cuda:%d: compiled a kernel for %s", dev->index, dev->arch);
    if (disk) {
      const char *why = NULL;
      int ok = tpc_cache_write(dir, path, CACHE_MAGIC, key, code, size, &why);
      cache_debug(dev, ok ? "stored" : "cannot store", path, why);
    }
  }
  free(code);
  return err;
}

tyto_plugin_error *tcu_module_get(tyto_plugin_device *dev, const char *source,
                                  tcu_module **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err = NULL;
  tcu_module *m;

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
      err = build_module(dev, source, m);
    }
    if (err != NULL) {
      if (m != NULL)
        free(m->source);
      free(m);
      m = NULL;
    } else {
      m->next = dev->cache;
      dev->cache = m;
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
