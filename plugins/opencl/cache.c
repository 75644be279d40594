/*
 * Built programs: cached per open device in memory, and on disk across
 * runs, because clBuildProgram is slow (hundreds of milliseconds on PoCL,
 * whose compiler is LLVM, for each program).
 *
 * On disk a program is one file, <dir>/opencl/<key>.bin, where <dir> is the
 * plugin option cache_dir, else $XDG_CACHE_HOME/tyto, else
 * $HOME/.cache/tyto, and <key> is a 128-bit hash of everything the binary
 * depends on: platform and device name, device and driver version, the
 * build options and the source. The file starts with a header that repeats
 * the key and the binary's size, so a truncated or foreign file is
 * recognised and rebuilt. Files are written to a temporary name and renamed,
 * so a reader never sees half a file and two processes building the same
 * program at once both end with a whole one; anything at the path that is
 * not a regular file (a FIFO, a device) is ignored without being read. The
 * files are plugins/common/diskcache.c's, shared with the CUDA plugin's
 * cache of cubins. A binary the driver refuses (a driver update that kept
 * its version string) is rebuilt from source and the file replaced. The
 * cache is an optimisation only: any failure to read or write it is logged
 * at debug level and the program is built from source. cache_dir=off turns
 * it off.
 */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/diskcache.h"
#include "errors.h"

/* Build logs longer than this are cut in error messages. */
#define MAX_LOG 16384

/* The file format (plugins/common/diskcache.h); a new layout of what is
 * stored gets a new magic, so old files are ignored, not misread. */
#define MAGIC "TYTOCLB1"

/* Binaries larger than this are not read back (none comes close). */
#define MAX_BINARY (((size_t)1 << 31) - 1)

static tpc_cache_key program_key(const tyto_plugin_device *dev,
                                 const char *source, const char *options) {
  tpc_cache_key k = tpc_cache_key_init();
  char version[64];
  snprintf(version, sizeof version, "%d.%d", dev->info->cl_major,
           dev->info->cl_minor);
  tpc_cache_key_str(&k, dev->info->platform_name);
  tpc_cache_key_str(&k, dev->info->name);
  tpc_cache_key_str(&k, dev->info->vendor);
  tpc_cache_key_str(&k, dev->info->driver_version);
  tpc_cache_key_str(&k, version);
  tpc_cache_key_str(&k, options);
  tpc_cache_key_str(&k, ocl_prelude);
  tpc_cache_key_str(&k, ocl_prelude_16[0]);
  tpc_cache_key_str(&k, ocl_prelude_16[1]);
  tpc_cache_key_str(&k, source);
  return k;
}

static void debug(const tyto_plugin_device *dev, const char *what,
                  const char *path, const char *why) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG, "kernel cache: %s %s%s%s%s", what,
            path, why != NULL ? " (" : "", why != NULL ? why : "",
            why != NULL ? ")" : "");
}

/* Stores the binary of `prog` for `key` at `path` (whole or not at all). */
static void write_binary(const tyto_plugin_device *dev, const char *dir,
                         const char *path, tpc_cache_key key, cl_program prog) {
  size_t size = 0;
  const char *why = NULL;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size,
                       NULL) != CL_SUCCESS ||
      size == 0) {
    debug(dev, "cannot store", path, "the driver gives no binary");
    return;
  }
  unsigned char *bin = malloc(size);
  unsigned char *bins[1] = {bin};
  int ok = 0;
  if (bin == NULL)
    why = "out of host memory";
  else if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins,
                            NULL) != CL_SUCCESS)
    why = "the driver gives no binary";
  else
    ok = tpc_cache_write(dir, path, MAGIC, key, bin, size, &why);
  free(bin);
  debug(dev, ok ? "stored" : "cannot store", path, ok ? NULL : why);
}

/* ---- building ---------------------------------------------------------- */

/* An error carrying the compiler's log for a failed clBuildProgram. */
static tyto_plugin_error *build_error(tyto_plugin_device *dev, cl_program prog,
                                      cl_int err, const char *options) {
  size_t size = 0;
  char *log = NULL;
  if (clGetProgramBuildInfo(prog, dev->info->id, CL_PROGRAM_BUILD_LOG, 0, NULL,
                            &size) == CL_SUCCESS &&
      size > 0 && (log = malloc(size + 1)) != NULL) {
    if (clGetProgramBuildInfo(prog, dev->info->id, CL_PROGRAM_BUILD_LOG, size,
                              log, NULL) != CL_SUCCESS)
      log[0] = '\0';
    log[size] = '\0';
  }
  const char *text = log != NULL && log[0] != '\0' ? log : "(empty)";
  size_t len = strlen(text);
  int cut = len > MAX_LOG;
  tyto_plugin_error *e = OCL_HOST(dev)->error_new(
      ocl_code_for(err),
      "clBuildProgram failed with %s (%d) on \"%s\" (driver %s, options "
      "\"%s\"); this is a plugin or driver bug, please report it with this "
      "build log%s:\n%.*s",
      ocl_code_name(err), (int)err, dev->info->name, dev->info->driver_version,
      options, cut ? " (cut to its first 16 KiB)" : "",
      (int)(cut ? MAX_LOG : len), text);
  free(log);
  return e;
}

/* The program from a cached binary, or NULL. */
static cl_program from_binary(tyto_plugin_device *dev, const char *path,
                              tpc_cache_key key, const char *options) {
  size_t size = 0;
  const char *why = NULL;
  unsigned char *bin =
      tpc_cache_read(path, MAGIC, key, MAX_BINARY, &size, &why);
  if (bin == NULL) {
    if (why != NULL)
      debug(dev, "ignoring", path, why);
    return NULL;
  }
  const unsigned char *bins[1] = {bin};
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->info->id,
                                           &size, bins, &status, &err);
  free(bin);
  if (p != NULL && (err != CL_SUCCESS || status != CL_SUCCESS ||
                    clBuildProgram(p, 1, &dev->info->id, options, NULL, NULL) !=
                        CL_SUCCESS)) {
    clReleaseProgram(p);
    p = NULL;
  }
  debug(dev, p != NULL ? "loaded" : "rebuilding (the driver refused)", path,
        NULL);
  return p;
}

static tyto_plugin_error *from_source(tyto_plugin_device *dev,
                                      const char *source, const char *options,
                                      cl_program *out) {
  const char *parts[4] = {ocl_prelude, ocl_prelude_16[0], ocl_prelude_16[1],
                          source};
  cl_int err = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(dev->context, 4, parts, NULL, &err);
  if (p == NULL || err != CL_SUCCESS)
    return ocl_error_cl(OCL_HOST(dev), "clCreateProgramWithSource",
                        err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                        "creating a program on \"%s\"", dev->info->name);
  if ((err = clBuildProgram(p, 1, &dev->info->id, options, NULL, NULL)) !=
      CL_SUCCESS) {
    tyto_plugin_error *e = build_error(dev, p, err, options);
    clReleaseProgram(p);
    return e;
  }
  *out = p;
  return NULL;
}

tyto_plugin_error *ocl_program_get(tyto_plugin_device *dev, const char *source,
                                   const char *options, cl_program *out) {
  pthread_mutex_lock(&dev->lock);
  for (ocl_program *p = dev->programs; p != NULL; p = p->next)
    if (strcmp(p->options, options) == 0 && strcmp(p->source, source) == 0) {
      *out = p->program;
      pthread_mutex_unlock(&dev->lock);
      return NULL;
    }
  tyto_plugin_error *e = NULL;
  ocl_program *p = calloc(1, sizeof *p);
  if (p == NULL || (p->source = ocl_strdup(source)) == NULL ||
      (p->options = ocl_strdup(options)) == NULL) {
    e = ocl_error(OCL_HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                  "prepare: out of host memory");
  } else {
    const tyto_plugin_host *host = OCL_HOST(dev);
    char dir[4096], path[4200];
    tpc_cache_key key = program_key(dev, source, options);
    int disk = tpc_cache_dir(host->option(host->ctx, "cache_dir"), "opencl",
                             dir, sizeof dir) &&
               tpc_cache_path(dir, key, path, sizeof path);
    if (disk)
      p->program = from_binary(dev, path, key, options);
    if (p->program == NULL &&
        (e = from_source(dev, source, options, &p->program)) == NULL && disk)
      write_binary(dev, dir, path, key, p->program);
  }
  if (e != NULL) {
    if (p != NULL) {
      free(p->source);
      free(p->options);
    }
    free(p);
  } else {
    p->next = dev->programs;
    dev->programs = p;
    *out = p->program;
  }
  pthread_mutex_unlock(&dev->lock);
  return e;
}

void ocl_programs_release(tyto_plugin_device *dev) {
  ocl_program *p = dev->programs;
  while (p != NULL) {
    ocl_program *next = p->next;
    clReleaseProgram(p->program);
    free(p->source);
    free(p->options);
    free(p);
    p = next;
  }
  dev->programs = NULL;
}
