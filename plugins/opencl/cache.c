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
 * program at once both end with a whole one. A binary the driver refuses
 * (a driver update that kept its version string) is rebuilt from source and
 * the file replaced. The cache is an optimisation only: any failure to read
 * or write it is logged at debug level and the program is built from
 * source. cache_dir=off turns it off.
 */
#include "ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

/* Build logs longer than this are cut in error messages. */
#define MAX_LOG 16384

#define MAGIC "TYTOCLB1"

/* ---- the key ----------------------------------------------------------- */

typedef struct {
  uint64_t a, b; /* two FNV-1a 64 hashes with different bases */
} key128;

static void hash_str(key128 *k, const char *s) {
  /* The terminating NUL is hashed too, so ("ab", "c") and ("a", "bc")
   * differ. */
  const unsigned char *p = (const unsigned char *)s;
  do {
    k->a = (k->a ^ *p) * UINT64_C(0x100000001b3);
    k->b = (k->b ^ *p) * UINT64_C(0x100000001b3);
    k->b ^= k->b >> 29;
  } while (*p++ != '\0');
}

static key128 program_key(const tyto_plugin_device *dev, const char *source,
                          const char *options) {
  key128 k = {UINT64_C(0xcbf29ce484222325), UINT64_C(0x84222325cbf29ce4)};
  char version[64];
  snprintf(version, sizeof version, "%d.%d", dev->info->cl_major,
           dev->info->cl_minor);
  hash_str(&k, dev->info->platform_name);
  hash_str(&k, dev->info->name);
  hash_str(&k, dev->info->vendor);
  hash_str(&k, dev->info->driver_version);
  hash_str(&k, version);
  hash_str(&k, options);
  hash_str(&k, ocl_prelude);
  hash_str(&k, source);
  return k;
}

/* ---- the directory -------------------------------------------------------
 */

/* <dir>/opencl into buf, or 0 when the cache is off or no directory can be
 * named. */
static int cache_dir(const tyto_plugin_device *dev, char *buf, size_t size) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  const char *opt = host->option(host->ctx, "cache_dir");
  int n;
  if (opt != NULL && opt[0] != '\0') {
    if (strcmp(opt, "off") == 0)
      return 0;
    n = snprintf(buf, size, "%s/opencl", opt);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    /* The XDG spec: a relative $XDG_CACHE_HOME is invalid, ignore it. */
    if (xdg != NULL && xdg[0] == '/')
      n = snprintf(buf, size, "%s/tyto/opencl", xdg);
    else if (home != NULL && home[0] == '/')
      n = snprintf(buf, size, "%s/.cache/tyto/opencl", home);
    else
      return 0;
  }
  return n > 0 && (size_t)n < size;
}

/* mkdir -p for the cache directory (mode 0700 as the XDG spec asks). */
static int make_dirs(char *path) {
  for (char *p = path + 1; *p != '\0'; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    int rc = mkdir(path, 0700);
    *p = '/';
    if (rc != 0 && errno != EEXIST)
      return 0;
  }
  return mkdir(path, 0700) == 0 || errno == EEXIST;
}

static void debug(const tyto_plugin_device *dev, const char *what,
                  const char *path) {
  const tyto_plugin_host *host = OCL_HOST(dev);
  host->log(host->ctx, TYTO_PLUGIN_LOG_DEBUG, "kernel cache: %s %s", what,
            path);
}

/* ---- reading and writing binaries ------------------------------------- */

typedef struct {
  char magic[8];
  uint64_t key_a, key_b;
  uint64_t size;
} file_header;

/* The binary stored for `key`, malloc'd, or NULL. */
static unsigned char *read_binary(const char *path, key128 key, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return NULL;
  file_header h;
  unsigned char *bin = NULL;
  if (fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, MAGIC, 8) == 0 &&
      h.key_a == key.a && h.key_b == key.b && h.size > 0 &&
      h.size < ((uint64_t)1 << 31) && (bin = malloc((size_t)h.size)) != NULL) {
    if (fread(bin, 1, (size_t)h.size, f) != (size_t)h.size ||
        fgetc(f) != EOF) {
      free(bin);
      bin = NULL;
    } else {
      *size = (size_t)h.size;
    }
  }
  fclose(f);
  return bin;
}

/* Stores the binary of `prog` for `key` at `path` (whole or not at all). */
static void write_binary(const tyto_plugin_device *dev, const char *dir,
                         const char *path, key128 key, cl_program prog) {
  size_t size = 0;
  if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size,
                       NULL) != CL_SUCCESS ||
      size == 0)
    return;
  unsigned char *bin = malloc(size);
  if (bin == NULL)
    return;
  unsigned char *bins[1] = {bin};
  char tmp[4300];
  int ok = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins,
                            NULL) == CL_SUCCESS;
  char dir_copy[4096];
  snprintf(dir_copy, sizeof dir_copy, "%s", dir);
  ok = ok && make_dirs(dir_copy);
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  ok = ok && n > 0 && (size_t)n < sizeof tmp;
  FILE *f = ok ? fopen(tmp, "wb") : NULL;
  if (f != NULL) {
    file_header h;
    memcpy(h.magic, MAGIC, 8);
    h.key_a = key.a;
    h.key_b = key.b;
    h.size = size;
    ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(bin, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
      remove(tmp);
      ok = 0;
    }
  } else {
    ok = 0;
  }
  free(bin);
  debug(dev, ok ? "stored" : "cannot store", path);
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
                              key128 key, const char *options) {
  size_t size = 0;
  unsigned char *bin = read_binary(path, key, &size);
  if (bin == NULL)
    return NULL;
  const unsigned char *bins[1] = {bin};
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(dev->context, 1, &dev->info->id,
                                           &size, bins, &status, &err);
  free(bin);
  if (p != NULL && (err != CL_SUCCESS || status != CL_SUCCESS ||
                    clBuildProgram(p, 1, &dev->info->id, options, NULL,
                                   NULL) != CL_SUCCESS)) {
    clReleaseProgram(p);
    p = NULL;
  }
  debug(dev, p != NULL ? "loaded" : "rebuilding (the driver refused)",
        path);
  return p;
}

static tyto_plugin_error *from_source(tyto_plugin_device *dev,
                                      const char *source, const char *options,
                                      cl_program *out) {
  const char *parts[2] = {ocl_prelude, source};
  cl_int err = CL_SUCCESS;
  cl_program p =
      clCreateProgramWithSource(dev->context, 2, parts, NULL, &err);
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
    char dir[4096], path[4200];
    key128 key = program_key(dev, source, options);
    int disk = cache_dir(dev, dir, sizeof dir);
    if (disk) {
      int n = snprintf(path, sizeof path, "%s/%016llx%016llx.bin", dir,
                       (unsigned long long)key.a, (unsigned long long)key.b);
      disk = n > 0 && (size_t)n < sizeof path;
    }
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
