/*
 * The OpenCL plugin, driven directly through the plugin ABI
 * (tyto_plugin_opencl.so), for what the conformance kit does not see:
 *
 *  - PCI matching (pci.c, compiled in): a device's address as each driver
 *    extension reports it against the host's offer: with and without a
 *    domain, ambiguous across domains, larger host structs;
 *  - on the machine's OpenCL devices (PoCL on CI machines): query, buffers
 *    and copies with range errors, two streams ordered by an event;
 *  - the kernel cache on disk: a prepared kernel's program is stored under
 *    cache_dir/opencl, loaded by the next plugin instance, a damaged file is
 *    rebuilt and replaced whole, cache_dir=off writes nothing;
 *  - the descriptor and binding errors every op shares (kernels.c): unknown
 *    and unsupported ops, dtype mismatch, bindings outside their buffer,
 *    misaligned offsets, a missing workspace.
 *
 * Exits 77 when the machine has no OpenCL device (the PCI part still runs).
 * Under valgrind (TYTO_TEST_UNDER_VALGRIND) the parts that build kernels are
 * skipped: compiling OpenCL C under valgrind takes many minutes.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tyto/plugin.h>

#include "pci.h"
#include "plugin_host.h"

/* ---------------------------------------------------------------- host -- */

/* The plugin's debug lines about its kernel cache, kept for the cache test:
 * "kernel cache: loaded PATH", "kernel cache: stored PATH", ... */
static char cache_log[8192];

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  char line[1024];
  va_list ap;
  (void)ctx;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (strncmp(line, "kernel cache:", 13) == 0) {
    size_t n = strlen(cache_log);
    snprintf(cache_log + n, sizeof cache_log - n, "%s\n", line);
  }
  const char *env = getenv("TYTO_TEST_LOG");
  if ((int)level <= (env ? atoi(env) : 1))
    fprintf(stderr, "[opencl %d] %s\n", (int)level, line);
}

/* Options: cache_dir from the test, the rest from TYTO_OPENCL_<KEY>. */
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

/* ------------------------------------------------------- PCI matching -- */

/* A host struct one field longer than ours, as a newer host would pass. */
typedef struct {
  tyto_plugin_hw_device d;
  uint64_t newer_field;
} wide_hw;

static void pci_entry(wide_hw *w, uint32_t index, const char *bus, int numa) {
  memset(w, 0, sizeof *w);
  w->d.struct_size = sizeof *w;
  w->d.index = index;
  w->d.kind = TYTO_PLUGIN_HW_PCI;
  w->d.name = "GPU";
  w->d.numa_node = numa;
  w->d.pci_bus_id = bus;
  w->newer_field = 0xdeadbeef;
}

static void test_pci(void) {
  wide_hw o[4];
  memset(&o[0], 0, sizeof o[0]);
  o[0].d.struct_size = sizeof o[0];
  o[0].d.index = 0;
  o[0].d.kind = TYTO_PLUGIN_HW_CPU;
  o[0].d.pci_bus_id = "";
  pci_entry(&o[1], 1, "0000:65:00.0", 0);
  pci_entry(&o[2], 2, "0001:65:00.0", 1); /* same b:d.f, other domain */
  pci_entry(&o[3], 3, "0000:b3:00.1", 1);
  int32_t numa = 7;
  char bus[32] = "";

  /* cl_khr_pci_bus_info: the domain is known, so the match is exact. */
  pci_addr khr = {1, 1, 1, 0x65, 0, 0};
  CHECK(ocl_match_offer(&khr, &o[0].d, 4, &numa, bus, sizeof bus) == 2,
        "a full address matches its domain's entry");
  CHECK(numa == 1 && strcmp(bus, "0001:65:00.0") == 0, "numa %d bus %s",
        (int)numa, bus);
  /* NVIDIA's older query or AMD's topology: no domain. Unique -> match;
   * present in two domains -> no guess. */
  pci_addr nodomain = {1, 0, 0, 0xb3, 0, 1};
  CHECK(ocl_match_offer(&nodomain, &o[0].d, 4, &numa, bus, sizeof bus) == 3,
        "a unique bus:device.function matches without a domain");
  CHECK(numa == 1 && strcmp(bus, "0000:b3:00.1") == 0, "numa %d bus %s",
        (int)numa, bus);
  pci_addr ambiguous = {1, 0, 0, 0x65, 0, 0};
  CHECK(ocl_match_offer(&ambiguous, &o[0].d, 4, &numa, bus, sizeof bus) == -1,
        "an address in two domains is not guessed");
  CHECK(numa == -1, "no NUMA node for an ambiguous match, got %d", (int)numa);
  pci_addr unknown = {0, 0, 0, 0, 0, 0};
  CHECK(ocl_match_offer(&unknown, &o[0].d, 4, &numa, bus, sizeof bus) == -1,
        "a device without an address matches nothing");
  pci_addr absent = {1, 1, 0, 0x17, 0, 0};
  CHECK(ocl_match_offer(&absent, &o[0].d, 4, &numa, bus, sizeof bus) == -1,
        "an address nobody offered matches nothing");
  /* Parsing: the CPU entry and a malformed bus id are not PCI entries. */
  pci_addr a;
  CHECK(!ocl_offer_pci(&o[0].d, &a), "the CPU entry is not a PCI device");
  o[3].d.pci_bus_id = "b3:00.1";
  CHECK(!ocl_offer_pci(&o[3].d, &a), "a bus id without a domain is refused");
  o[3].d.pci_bus_id = "0000:b3:00.1";
  CHECK(ocl_offer_pci(&o[3].d, &a) && a.domain == 0 && a.bus == 0xb3 &&
            a.device == 0 && a.function == 1,
        "0000:b3:00.1 parses");
}

/* ------------------------------------------------------------- plugin -- */

static void claim_cb(void *ctx, int32_t hw_index, uint32_t ordinal,
                     const char *name) {
  (void)ctx;
  (void)hw_index;
  (void)ordinal;
  (void)name;
}

static void refuse_cb(void *ctx, int32_t hw_index, const char *name,
                      const char *reason) {
  (void)ctx;
  if (getenv("TYTO_TEST_LOG") != NULL)
    fprintf(stderr, "refused %d %s: %s\n", (int)hw_index, name ? name : "",
            reason);
}

static void *so;
static const tyto_plugin_info *info;
static tyto_plugin_state *state;
static const tyto_plugin_device_fns *df;

/* Loads and inits the plugin, probes it with the CPU entry. Returns the
 * number of claimed devices. */
static uint32_t plugin_start(const char *path) {
  if (so == NULL) {
    so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (so == NULL) {
      fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
      exit(1);
    }
  }
  tyto_plugin_init_fn init =
      (tyto_plugin_init_fn)(uintptr_t)dlsym(so, "tyto_plugin_opencl_LTX_init");
  if (init == NULL) {
    fprintf(stderr, "%s has no tyto_plugin_opencl_LTX_init\n", path);
    exit(1);
  }
  if (!OK(init(&host, &info, &state)))
    exit(1);
  df = info->device_fns;
  static tyto_plugin_hw_device cpu;
  memset(&cpu, 0, sizeof cpu);
  cpu.struct_size = sizeof cpu;
  cpu.kind = TYTO_PLUGIN_HW_CPU;
  cpu.name = "test CPU";
  cpu.numa_node = 0;
  cpu.cpuset = "0-1";
  cpu.nodeset = "0";
  cpu.pci_bus_id = "";
  cpu.packages = 1;
  cpu.cores = cpu.pus = 2;
  cpu.numa_nodes = 1;
  tyto_plugin_claims claims;
  memset(&claims, 0, sizeof claims);
  claims.struct_size = sizeof claims;
  claims.claim = claim_cb;
  claims.refuse = refuse_cb;
  tyto_plugin_error *e = info->fns->probe(state, &cpu, 1, &claims);
  if (e != NULL) {
    fprintf(stderr, "probe: %s\n", e->msg);
    err_free(e);
    return 0;
  }
  uint32_t n = 0;
  tyto_plugin_device_info di;
  for (;; n++) {
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    e = info->fns->device_query(state, n, &di);
    if (e != NULL) {
      err_free(e);
      break;
    }
  }
  return n;
}

static void plugin_stop(void) {
  info->fns->shutdown(state);
  state = NULL;
}

static tyto_plugin_layout layout(uint32_t dtype, uint32_t rank,
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

static tyto_plugin_op_desc desc_of(uint32_t op, uint32_t n_in,
                                   const tyto_plugin_layout *in,
                                   const tyto_plugin_layout *out,
                                   const double *fattrs, uint32_t n_fattrs) {
  tyto_plugin_op_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.op = op;
  d.n_inputs = n_in;
  d.n_outputs = 1;
  d.inputs = n_in ? in : NULL;
  d.outputs = out;
  d.n_fattrs = n_fattrs;
  d.fattrs = fattrs;
  return d;
}

static tyto_plugin_binding bound(tyto_plugin_buffer *b, uint64_t offset) {
  tyto_plugin_binding x;
  memset(&x, 0, sizeof x);
  x.struct_size = sizeof x;
  x.buffer = b;
  x.offset = offset;
  return x;
}

/* Buffers, copies and two streams ordered by an event. */
static void test_memory(tyto_plugin_device *dev) {
  enum { N = 1000 };
  float host_a[N], back[N];
  for (int i = 0; i < N; i++)
    host_a[i] = (float)i * 0.5f;
  tyto_plugin_buffer *a = NULL, *b = NULL, *empty = NULL;
  if (!OK(df->buffer_alloc(dev, sizeof host_a, &a)) ||
      !OK(df->buffer_alloc(dev, sizeof host_a, &b)))
    return;
  OK(df->buffer_alloc(dev, 0, &empty));
  EXPECT_ERR(df->copy_h2d(dev, NULL, a, 8, host_a, sizeof host_a),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "runs past the end");
  EXPECT_ERR(df->copy_d2d(dev, NULL, a, 0, a, 4, 16),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "overlap");
  OK(df->copy_h2d(dev, NULL, empty, 0, host_a, 0));

  tyto_plugin_stream *s1 = NULL, *s2 = NULL;
  tyto_plugin_event *ev = NULL;
  if (OK(df->stream_create(dev, &s1)) && OK(df->stream_create(dev, &s2)) &&
      OK(df->event_create(dev, &ev))) {
    OK(df->copy_h2d(dev, s1, a, 0, host_a, sizeof host_a));
    OK(df->copy_d2d(dev, s1, b, 0, a, 0, sizeof host_a));
    OK(df->event_record(dev, ev, s1));
    OK(df->event_wait(dev, s2, ev));
    memset(back, 0, sizeof back);
    OK(df->copy_d2h(dev, s2, back, b, 0, sizeof back));
    OK(df->stream_synchronize(dev, s2));
    CHECK(memcmp(back, host_a, sizeof back) == 0,
          "the copy on stream 2 saw stream 1's work (back[999] = %g)",
          (double)back[N - 1]);
    int done = 0;
    OK(df->event_query(dev, ev, &done));
    CHECK(done == 1, "the event is complete after its stream's work");
  }
  if (ev != NULL)
    df->event_destroy(dev, ev);
  if (s1 != NULL)
    df->stream_destroy(dev, s1);
  if (s2 != NULL)
    df->stream_destroy(dev, s2);
  df->buffer_free(dev, empty);
  df->buffer_free(dev, a);
  df->buffer_free(dev, b);
}

/* A CPU device with fine-grained SVM keeps its buffers in host memory
 * (TYTO_PLUGIN_CAP_UNIFIED_MEMORY): the host's writes through
 * buffer_host_ptr reach a kernel, and a kernel's writes are read in place
 * once an event after it has completed. PoCL's device is one. */
static void test_host_memory(tyto_plugin_device *dev, uint32_t ordinal) {
  tyto_plugin_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  if (!OK(info->fns->device_query(state, ordinal, &di)))
    return;
  int unified = (di.flags & TYTO_PLUGIN_CAP_UNIFIED_MEMORY) != 0;
  CHECK(!strstr(di.name, "pthread") || unified,
        "PoCL's CPU device \"%s\" keeps its buffers in host memory", di.name);
  CHECK(unified == (strstr(di.driver_version, "buffers: host memory") != NULL),
        "the driver text says where buffers are: %s", di.driver_version);
  enum { N = 64 };
  int64_t shape[1] = {N};
  tyto_plugin_layout f32 = layout(TYTO_PLUGIN_DTYPE_F32, 1, shape);
  tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_COPY, 1, &f32, &f32, NULL, 0);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  tyto_plugin_buffer *a = NULL, *b = NULL;
  tyto_plugin_stream *s = NULL;
  tyto_plugin_event *ev = NULL;
  if (OK(df->buffer_alloc(dev, N * sizeof(float), &a)) &&
      OK(df->buffer_alloc(dev, N * sizeof(float), &b))) {
    float *pa = df->buffer_host_ptr(dev, a), *pb = df->buffer_host_ptr(dev, b);
    CHECK((pa != NULL && pb != NULL) == unified,
          "buffer_host_ptr gives an address exactly when memory is unified");
    if (pa && pb && OK(df->prepare(dev, &d, &k, &ki)) &&
        OK(df->stream_create(dev, &s)) && OK(df->event_create(dev, &ev))) {
      CHECK((uintptr_t)pa % di.alignment == 0, "aligned to %llu bytes",
            (unsigned long long)di.alignment);
      for (int i = 0; i < N; i++) {
        pa[i] = 1.5f * (float)i;
        pb[i] = -1;
      }
      tyto_plugin_binding in = bound(a, 0), out = bound(b, 0);
      OK(df->launch(dev, s, k, &in, 1, &out, 1, NULL));
      OK(df->event_record(dev, ev, s));
      OK(df->event_synchronize(dev, ev));
      int same = 1;
      for (int i = 0; i < N; i++)
        same &= pb[i] == 1.5f * (float)i;
      CHECK(same, "the host reads the kernel's output in place (pb[63] %g)",
            (double)pb[N - 1]);
      /* As each step does: the host rewrites an input a kernel read
       * before, and the next kernel sees the new values. */
      for (int i = 0; i < N; i++)
        pa[i] = -2.0f * (float)i;
      OK(df->launch(dev, s, k, &in, 1, &out, 1, NULL));
      OK(df->event_record(dev, ev, s));
      OK(df->event_synchronize(dev, ev));
      same = 1;
      for (int i = 0; i < N; i++)
        same &= pb[i] == -2.0f * (float)i;
      CHECK(same, "a kernel sees the host's second writes (pb[63] %g)",
            (double)pb[N - 1]);
    }
  }
  if (ev != NULL)
    df->event_destroy(dev, ev);
  if (s != NULL)
    df->stream_destroy(dev, s);
  df->kernel_release(dev, k);
  df->buffer_free(dev, a);
  df->buffer_free(dev, b);
}

/* The errors kernels.c gives for every op. */
static void test_errors(tyto_plugin_device *dev) {
  int64_t shape[2] = {4, 8};
  tyto_plugin_layout f32 = layout(TYTO_PLUGIN_DTYPE_F32, 2, shape);
  tyto_plugin_layout f64 = layout(TYTO_PLUGIN_DTYPE_F64, 2, shape);
  tyto_plugin_layout f16 = layout(TYTO_PLUGIN_DTYPE_F16, 2, shape);
  tyto_plugin_op_desc d = desc_of(9999, 1, &f32, &f32, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
             "not supported by the opencl plugin");
  d = desc_of(TYTO_PLUGIN_OP_COPY, 1, &f64, &f32, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "input 0 has dtype f64, output 0 has f32");
  d = desc_of(TYTO_PLUGIN_OP_COPY, 1, &f16, &f16, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED,
             "dtype f16");
  tyto_plugin_layout neg = f32;
  neg.shape[1] = -2;
  d = desc_of(TYTO_PLUGIN_OP_COPY, 1, &f32, &neg, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "negative size");
  /* A family's own check: inv of a [4, 8] matrix. */
  d = desc_of(TYTO_PLUGIN_OP_INV, 1, &f32, &f32, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "square");
  d = desc_of(TYTO_PLUGIN_OP_FILL, 0, NULL, &f32, NULL, 0);
  EXPECT_ERR(df->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "fattrs[0]");

  /* Bindings: the copy's layouts reach 32 floats = 128 bytes. */
  d = desc_of(TYTO_PLUGIN_OP_COPY, 1, &f32, &f32, NULL, 0);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  if (!OK(df->prepare(dev, &d, &k, &ki)))
    return;
  tyto_plugin_buffer *big = NULL, *small = NULL;
  tyto_plugin_stream *s = NULL;
  if (OK(df->buffer_alloc(dev, 256, &big)) &&
      OK(df->buffer_alloc(dev, 64, &small)) && OK(df->stream_create(dev, &s))) {
    tyto_plugin_binding in = bound(big, 0), out = bound(small, 0);
    EXPECT_ERR(df->launch(dev, s, k, &in, 1, &out, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "outside its 64-byte buffer");
    out = bound(big, 132);
    EXPECT_ERR(df->launch(dev, s, k, &in, 1, &out, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "outside its 256-byte");
    out = bound(big, 130);
    EXPECT_ERR(df->launch(dev, s, k, &in, 1, &out, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "not a multiple");
    out = bound(NULL, 0);
    EXPECT_ERR(df->launch(dev, s, k, &in, 1, &out, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "has no buffer");
    EXPECT_ERR(df->launch(dev, s, k, &in, 1, &in, 2, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "prepared for 1 and 1");
    EXPECT_ERR(df->launch(dev, NULL, k, &in, 1, &in, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "stream is NULL");
    /* A good launch after the refused ones: nothing was left behind. */
    float src[64], dst[32];
    for (int i = 0; i < 64; i++)
      src[i] = (float)i;
    OK(df->copy_h2d(dev, NULL, big, 0, src, sizeof src));
    in = bound(big, 0);
    out = bound(big, 128);
    OK(df->launch(dev, s, k, &in, 1, &out, 1, NULL));
    OK(df->copy_d2h(dev, s, dst, big, 128, sizeof dst));
    OK(df->stream_synchronize(dev, s));
    CHECK(memcmp(dst, src, sizeof dst) == 0, "the copy moved 32 floats");
  }
  if (s != NULL)
    df->stream_destroy(dev, s);
  df->buffer_free(dev, big);
  df->buffer_free(dev, small);
  df->kernel_release(dev, k);
}

/* Files in dir (0 when it does not exist); the first one's path. */
static int count_files(const char *dir, char *first, size_t size) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    if (n++ == 0 && first != NULL)
      snprintf(first, size, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return n;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Opens device 0, prepares a fill kernel (f32), releases everything. */
static void prepare_fill(void) {
  tyto_plugin_device *dev = NULL;
  if (!OK(info->fns->device_open(state, 0, &dev)))
    return;
  int64_t shape[1] = {8};
  tyto_plugin_layout l = layout(TYTO_PLUGIN_DTYPE_F32, 1, shape);
  l.strides[0] = 2; /* strided: the fill kernel, not clEnqueueFillBuffer */
  double v = 3.0;
  tyto_plugin_op_desc d = desc_of(TYTO_PLUGIN_OP_FILL, 0, NULL, &l, &v, 1);
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 0, 0};
  if (OK(df->prepare(dev, &d, &k, &ki)))
    df->kernel_release(dev, k);
  df->device_close(dev);
}

static void test_cache(const char *path) {
  char root[] = "/tmp/tyto-ocl-cache-XXXXXX";
  if (mkdtemp(root) == NULL) {
    CHECK(0, "mkdtemp failed");
    return;
  }
  char dir[256], file[512];
  snprintf(dir, sizeof dir, "%s/opencl", root);
  cache_dir_option = root;

  cache_log[0] = '\0';
  plugin_start(path);
  prepare_fill();
  plugin_stop();
  CHECK(count_files(dir, file, sizeof file) == 1,
        "one program stored in %s, found %d", dir, count_files(dir, NULL, 0));
  CHECK(strstr(cache_log, "kernel cache: stored") != NULL, "log: %s",
        cache_log);
  long size = file_size(file);
  CHECK(size > 32, "the stored program has %ld bytes", size);

  /* A new plugin instance (as the next process) loads it. */
  cache_log[0] = '\0';
  plugin_start(path);
  prepare_fill();
  plugin_stop();
  CHECK(strstr(cache_log, "kernel cache: loaded") != NULL &&
            strstr(cache_log, "stored") == NULL,
        "the second instance loads the stored program; log: %s", cache_log);

  /* A damaged file (cut short) is rebuilt and replaced whole. */
  CHECK(truncate(file, size / 2) == 0, "truncate");
  cache_log[0] = '\0';
  plugin_start(path);
  prepare_fill();
  plugin_stop();
  CHECK(strstr(cache_log, "kernel cache: stored") != NULL,
        "a cut file is rebuilt; log: %s", cache_log);
  CHECK(file_size(file) == size, "the rebuilt file has %ld bytes, not %ld",
        file_size(file), size);
  CHECK(count_files(dir, NULL, 0) == 1, "no temporary file is left behind");
  remove(file);
  rmdir(dir);

  /* cache_dir=off: nothing is written. */
  cache_dir_option = "off";
  cache_log[0] = '\0';
  plugin_start(path);
  prepare_fill();
  plugin_stop();
  CHECK(count_files(dir, NULL, 0) == 0 && cache_log[0] == '\0',
        "cache_dir=off wrote %d files; log: %s", count_files(dir, NULL, 0),
        cache_log);
  rmdir(root);
  cache_dir_option = NULL;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : TEST_OPENCL_PLUGIN;
  int valgrind = getenv("TYTO_TEST_UNDER_VALGRIND") != NULL;
  test_pci();

  /* Device parts use a private cache so they never read the user's. */
  char root[] = "/tmp/tyto-ocl-test-XXXXXX";
  if (mkdtemp(root) == NULL)
    return 1;
  cache_dir_option = root;
  uint32_t n = plugin_start(path);
  if (n == 0) {
    plugin_stop();
    printf("PCI checks: %d, %d failed; no OpenCL device here, the device "
           "part is skipped\n",
           checks, failures);
    rmdir(root);
    return failures ? 1 : 77;
  }
  for (uint32_t i = 0; i < n; i++) {
    tyto_plugin_device *dev = NULL;
    if (!OK(info->fns->device_open(state, i, &dev)))
      continue;
    test_memory(dev);
    test_host_memory(dev, i);
    if (!valgrind)
      test_errors(dev);
    df->device_close(dev);
  }
  plugin_stop();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", root);
  cache_dir_option = NULL;
  if (!valgrind)
    test_cache(path);
  dlclose(so);
  printf("%d checks, %d failed (%u device%s)\n", checks, failures, (unsigned)n,
         n == 1 ? "" : "s");
  return failures ? 1 : 0;
}
