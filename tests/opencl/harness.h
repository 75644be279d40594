/*
 * What the OpenCL plugin's dtype tests share (test_opencl_cast.c,
 * test_opencl_bf16.c): the plugin driven directly through the ABI (its
 * options from TYTO_OPENCL_<KEY>, cache_dir from the test), ops run on
 * host arrays, and a reference converter for the 16-bit formats written
 * from the definitions (frexp/ldexp and rint, no bit tricks), independent
 * of plugins/common/half.h, which the plugin's kernels port.
 */
#ifndef TYTO_TESTS_OPENCL_HARNESS_H
#define TYTO_TESTS_OPENCL_HARNESS_H

#define _DEFAULT_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tyto/plugin.h>

#include "plugin_host.h"

/* ---------------------------------------------------------------- host -- */

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  char line[1024];
  va_list ap;
  (void)ctx;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  const char *env = getenv("TYTO_TEST_LOG");
  if ((int)level <= (env ? atoi(env) : 1))
    fprintf(stderr, "[opencl %d] %s\n", (int)level, line);
}

/* cache_dir from the test, the rest from TYTO_OPENCL_<KEY>. */
static const char *cache_dir_option;

static const char *host_option(void *ctx, const char *key) {
  (void)ctx;
  if (strcmp(key, "cache_dir") == 0)
    return cache_dir_option;
  char name[128] = "TYTO_OPENCL_";
  size_t n = strlen(name);
  for (; *key && n + 1 < sizeof name; key++)
    name[n++] = (*key >= 'a' && *key <= 'z') ? (char)(*key - 32) : *key;
  name[n] = '\0';
  return getenv(name);
}

static const tyto_plugin_host host = {
    .struct_size = sizeof(tyto_plugin_host),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .host_version = "test",
    .ctx = NULL,
    .log = host_log,
    .option = host_option,
    .error_new = host_error_new,
    .error_free = err_free,
};

static void *plugin_so;
static const tyto_plugin_info *info;
static tyto_plugin_state *state;
static const tyto_plugin_device_fns *df;

static void claim_cb(void *ctx, int32_t hw, uint32_t ordinal,
                     const char *name) {
  (void)ctx;
  (void)hw;
  (void)ordinal;
  (void)name;
}

static void refuse_cb(void *ctx, int32_t hw, const char *name,
                      const char *reason) {
  (void)ctx;
  (void)hw;
  (void)name;
  (void)reason;
}

/* Loads (once) and inits the plugin, probes it with a CPU entry; the
 * number of claimed devices. */
static inline uint32_t plugin_start(const char *path) {
  if (plugin_so == NULL &&
      (plugin_so = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
    fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
    exit(1);
  }
  tyto_plugin_init_fn init = (tyto_plugin_init_fn)(uintptr_t)dlsym(
      plugin_so, "tyto_plugin_opencl_LTX_init");
  if (init == NULL || !OK(init(&host, &info, &state)))
    exit(1);
  df = info->device_fns;
  static tyto_plugin_hw_device cpu;
  memset(&cpu, 0, sizeof cpu);
  cpu.struct_size = sizeof cpu;
  cpu.kind = TYTO_PLUGIN_HW_CPU;
  cpu.name = "test CPU";
  cpu.cpuset = "0";
  cpu.nodeset = "0";
  cpu.pci_bus_id = "";
  tyto_plugin_claims claims = {sizeof claims, NULL, claim_cb, refuse_cb};
  tyto_plugin_error *e = info->fns->probe(state, &cpu, 1, &claims);
  if (e != NULL) {
    err_free(e);
    return 0;
  }
  uint32_t n = 0;
  for (;; n++) {
    tyto_plugin_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    if ((e = info->fns->device_query(state, n, &di)) != NULL) {
      err_free(e);
      return n;
    }
  }
}

static inline void plugin_stop(void) {
  info->fns->shutdown(state);
  state = NULL;
}

/* The start of a suite whose every check builds OpenCL programs: 77
 * under valgrind (PoCL there takes minutes a program), a kernel cache of
 * its own in root (a mkdtemp template), and the plugin at path started
 * without the f16 testing option. 0 when started, 77 when the plugin has
 * no device, 1 when the cache cannot be made. */
static inline int suite_begin(const char *path, char *root) {
  if (getenv("TYTO_TEST_UNDER_VALGRIND") != NULL) {
    printf("skipped under valgrind: every check builds OpenCL programs\n");
    return 77;
  }
  if (mkdtemp(root) == NULL)
    return 1;
  cache_dir_option = root;
  unsetenv("TYTO_OPENCL_FP16_WITHOUT_EXTENSION");
  if (plugin_start(path) == 0) {
    plugin_stop();
    rmdir(root);
    printf("no OpenCL device here\n");
    return 77;
  }
  return 0;
}

/* The end of such a suite (the plugin stopped): removes the cache,
 * unloads the plugin and gives the exit status of the tally. */
static inline int suite_end(const char *root) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", root);
  dlclose(plugin_so);
  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}

/* -------------------------------------------------------------- layouts -- */

static inline const char *dt_name(uint32_t dt) {
  switch (dt) {
  case TYTO_PLUGIN_DTYPE_F32: return "f32";
  case TYTO_PLUGIN_DTYPE_F64: return "f64";
  case TYTO_PLUGIN_DTYPE_F16: return "f16";
  case TYTO_PLUGIN_DTYPE_BF16: return "bf16";
  case TYTO_PLUGIN_DTYPE_I32: return "i32";
  case TYTO_PLUGIN_DTYPE_I64: return "i64";
  default: return "?";
  }
}

static inline size_t dsize(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F64 || dt == TYTO_PLUGIN_DTYPE_I64   ? 8
         : dt == TYTO_PLUGIN_DTYPE_F32 || dt == TYTO_PLUGIN_DTYPE_I32 ? 4
                                                                      : 2;
}

/* Dense row-major. */
static inline tyto_plugin_layout layout(uint32_t dtype, uint32_t rank,
                                        const int64_t *shape) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dtype;
  l.rank = rank;
  int64_t st = 1;
  for (uint32_t k = rank; k-- > 0;) {
    l.shape[k] = shape[k];
    l.strides[k] = st;
    st *= shape[k];
  }
  return l;
}

static inline int64_t count_of(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t k = 0; k < l->rank; k++)
    n *= l->shape[k];
  return n;
}

/* Elements a layout of non-negative strides reaches from its buffer's
 * start (0 when empty). */
static inline int64_t span_of(const tyto_plugin_layout *l) {
  int64_t hi = l->offset;
  for (uint32_t k = 0; k < l->rank; k++) {
    if (l->shape[k] == 0)
      return 0;
    hi += (l->shape[k] - 1) * l->strides[k];
  }
  return hi + 1;
}

/* Element offset of row-major index i. */
static inline int64_t at_of(const tyto_plugin_layout *l, int64_t i) {
  int64_t o = l->offset;
  for (uint32_t k = l->rank; k-- > 0;) {
    o += (i % l->shape[k]) * l->strides[k];
    i /= l->shape[k];
  }
  return o;
}

static inline tyto_plugin_op_desc desc_of(uint32_t op, uint32_t n_in,
                                          const tyto_plugin_layout *in,
                                          uint32_t n_out,
                                          const tyto_plugin_layout *out) {
  tyto_plugin_op_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.op = op;
  d.n_inputs = n_in;
  d.n_outputs = n_out;
  d.inputs = n_in ? in : NULL;
  d.outputs = out;
  return d;
}

/* Runs d on dev: inputs from host[0 .. n_in), outputs uploaded from and
 * read back into host[n_in ..), each as span_of(layout) elements. Returns
 * the first error (prepare's included). */
static inline tyto_plugin_error *run_op(tyto_plugin_device *dev,
                                        const tyto_plugin_op_desc *d,
                                        void *const *host_arrays) {
  uint32_t n = d->n_inputs + d->n_outputs;
  tyto_plugin_buffer *buf[2 * TYTO_PLUGIN_FUSED_MAX_IO] = {0}, *ws = NULL;
  tyto_plugin_binding b[2 * TYTO_PLUGIN_FUSED_MAX_IO], wb;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_stream *s = NULL;
  tyto_plugin_error *e = df->prepare(dev, d, &k, &ki);
  for (uint32_t i = 0; i < n && e == NULL; i++) {
    const tyto_plugin_layout *l =
        i < d->n_inputs ? &d->inputs[i] : &d->outputs[i - d->n_inputs];
    uint64_t bytes = (uint64_t)span_of(l) * dsize(l->dtype);
    e = df->buffer_alloc(dev, bytes, &buf[i]);
    if (e == NULL && bytes > 0)
      e = df->copy_h2d(dev, NULL, buf[i], 0, host_arrays[i], bytes);
    b[i] = (tyto_plugin_binding){sizeof b[i], buf[i], 0};
  }
  if (e == NULL && ki.workspace_bytes > 0)
    e = df->buffer_alloc(dev, ki.workspace_bytes, &ws);
  wb = (tyto_plugin_binding){sizeof wb, ws, 0};
  if (e == NULL)
    e = df->stream_create(dev, &s);
  if (e == NULL)
    e = df->launch(dev, s, k, b, d->n_inputs, b + d->n_inputs, d->n_outputs,
                   ws != NULL ? &wb : NULL);
  if (e == NULL)
    e = df->stream_synchronize(dev, s);
  for (uint32_t i = d->n_inputs; i < n && e == NULL; i++) {
    const tyto_plugin_layout *l = &d->outputs[i - d->n_inputs];
    uint64_t bytes = (uint64_t)span_of(l) * dsize(l->dtype);
    if (bytes > 0)
      e = df->copy_d2h(dev, NULL, host_arrays[i], buf[i], 0, bytes);
  }
  if (s != NULL)
    df->stream_destroy(dev, s);
  for (uint32_t i = 0; i < n; i++)
    df->buffer_free(dev, buf[i]);
  df->buffer_free(dev, ws);
  if (k != NULL)
    df->kernel_release(dev, k);
  return e;
}

/* ------------------------------------------------ reference conversion -- */

/* The formats: significand bits p (the leading one included), the
 * exponent of the smallest normal as frexp gives it (2^(emin - 1)), the
 * largest finite value. */
typedef struct fmt {
  uint32_t dtype;
  int p, emin;
  double max;
} fmt;

static const fmt F_BF16 = {TYTO_PLUGIN_DTYPE_BF16, 8, -125, 0x1.fep127};
static const fmt F_F16 = {TYTO_PLUGIN_DTYPE_F16, 11, -13, 65504.0};
static const fmt F_F32 = {TYTO_PLUGIN_DTYPE_F32, 24, -125, 0x1.fffffep127};

/* x (finite or infinite, not NaN) rounded to f: to nearest, ties to even
 * (rint in the default mode), subnormals by the fixed quantum below the
 * smallest normal, beyond the largest finite value an infinity. */
static inline double ref_round(double x, const fmt *f) {
  if (isinf(x) || x == 0)
    return x;
  int e;
  frexp(x, &e);
  int q = (e > f->emin ? e : f->emin) - f->p;
  double r = ldexp(rint(ldexp(x, -q)), q);
  if (fabs(r) > f->max)
    return copysign(INFINITY, x);
  return r;
}

/* Bits of r, a value f16 holds (or an infinity). */
static inline uint16_t ref_f16_bits(double r) {
  uint16_t sign = signbit(r) ? 0x8000u : 0;
  double a = fabs(r);
  if (isinf(a))
    return sign | 0x7c00u;
  if (a == 0)
    return sign;
  if (a < 0x1p-14)
    return sign | (uint16_t)(a * 0x1p24);
  int e;
  double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((m * 2 - 1) * 1024);
}

static inline double ref_f16_value(uint16_t h) {
  double s = (h & 0x8000u) ? -1 : 1;
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f)
    return m ? NAN : s * INFINITY;
  return e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
}

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static inline double bits_f64(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* Element i of an array of dtype as a double (16-bit NaNs as NaN). */
static inline double get_value(uint32_t dt, const void *p, int64_t i) {
  switch (dt) {
  case TYTO_PLUGIN_DTYPE_F64: return ((const double *)p)[i];
  case TYTO_PLUGIN_DTYPE_F32: return ((const float *)p)[i];
  case TYTO_PLUGIN_DTYPE_BF16:
    return bits_f32((uint32_t)((const uint16_t *)p)[i] << 16);
  default: return ref_f16_value(((const uint16_t *)p)[i]);
  }
}

/* v rounded to dt stored as element i (v not NaN, or NaN as a quiet NaN
 * of the format). */
static inline void put_value(uint32_t dt, void *p, int64_t i, double v) {
  switch (dt) {
  case TYTO_PLUGIN_DTYPE_F64: ((double *)p)[i] = v; return;
  case TYTO_PLUGIN_DTYPE_F32:
    ((float *)p)[i] = isnan(v) ? NAN : (float)ref_round(v, &F_F32);
    return;
  case TYTO_PLUGIN_DTYPE_BF16:
    ((uint16_t *)p)[i] =
        isnan(v) ? 0x7fc0u
                 : (uint16_t)(f32_bits((float)ref_round(v, &F_BF16)) >> 16);
    return;
  default:
    ((uint16_t *)p)[i] =
        isnan(v) ? 0x7e00u : ref_f16_bits(ref_round(v, &F_F16));
  }
}

/* Deterministic uniform numbers in [0, 1). */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static inline uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static inline double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53;
}

#endif /* TYTO_TESTS_OPENCL_HARNESS_H */
