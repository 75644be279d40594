/*
 * The CUDA plugin, driven directly through the plugin ABI
 * (tyto_plugin_cuda.so).
 *
 *   test_cuda_plugin [PATH/tyto_plugin_cuda.so] [--no-gpu]
 *
 * `make check` runs it on the plugin of this build tree: without a GPU it
 * checks the no-driver path, then exits 77 (the GPU part skipped) unless
 * --no-gpu says a GPU is not expected.
 *
 * Loads the plugin with dlopen and a minimal host table, offers it the
 * machine's NVIDIA PCI GPUs (read from sysfs, as hwloc would find them) plus
 * a fake NVIDIA GPU, a fake AMD GPU and the CPU, then:
 *  - without a usable driver: checks that probe refuses every NVIDIA entry
 *    with an actionable reason, returns an error saying the same, and that
 *    queries/opens fail cleanly; exit 0 (77 with --gpu: GPU part skipped);
 *  - with GPUs: runs the device path on every claimed device (query, buffers,
 *    range checks, sync and async copies across two streams with events,
 *    pinned memory, COPY with transposed/negative/broadcast/padded layouts
 *    in f32/f64/f16 against a host reference, FILL, descriptor rejection,
 *    peer copies when there are two devices); exit 0 when all pass.
 * Options come from the environment: TYTO_CUDA_ALLOW_TF32 -> allow_tf32.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <tyto/plugin.h>

#include "plugin_host.h"

/* ---------------------------------------------------------------- host -- */

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  const char *env = getenv("TYTO_TEST_LOG");
  int max = env ? atoi(env) : 2;
  va_list ap;
  (void)ctx;
  if ((int)level > max)
    return;
  fprintf(stderr, "[cuda %s] ", names[level & 3]);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* [cuda] key -> environment variable TYTO_CUDA_<KEY>. The string must stay
 * valid until shutdown: getenv's does while the variable is unchanged. */
static const char *host_option(void *ctx, const char *key) {
  char name[128] = "TYTO_CUDA_";
  size_t n = strlen(name);
  (void)ctx;
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

/* --------------------------------------------------------------- offer -- */

#define MAX_OFFER 32
static tyto_plugin_hw_device offer[MAX_OFFER];
static char bus_ids[MAX_OFFER][32];
static uint32_t n_offer;
static int n_real_nvidia;

static unsigned read_hex_file(const char *dir, const char *file) {
  char path[512];
  unsigned v = 0;
  FILE *f;
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", dir, file);
  if ((f = fopen(path, "r")) == NULL)
    return 0;
  if (fscanf(f, "%x", &v) != 1)
    v = 0;
  fclose(f);
  return v;
}

static int read_int_file(const char *dir, const char *file) {
  char path[512];
  int v = -1;
  FILE *f;
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", dir, file);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  if (fscanf(f, "%d", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

static void add_offer(uint32_t kind, const char *name, uint16_t vendor,
                      uint32_t class_id, const char *bus, int numa) {
  tyto_plugin_hw_device *o = &offer[n_offer];
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->index = n_offer;
  o->kind = kind;
  o->name = name;
  o->numa_node = numa;
  o->cpuset = "0-1";
  o->nodeset = "0";
  if (kind == TYTO_PLUGIN_HW_PCI) {
    snprintf(bus_ids[n_offer], sizeof bus_ids[0], "%s", bus);
    o->pci_vendor_id = vendor;
    o->pci_class_id = class_id;
    o->pci_bus_id = bus_ids[n_offer];
  } else {
    o->pci_bus_id = "";
    o->packages = 1;
    o->cores = 2;
    o->pus = 2;
    o->numa_nodes = 1;
  }
  n_offer++;
}

/* The CPU, the machine's NVIDIA display/3D controllers from sysfs, then a
 * fake NVIDIA GPU (on a bus no real one uses here) and a fake AMD GPU. */
static void build_offer(void) {
  DIR *d = opendir("/sys/bus/pci/devices");
  struct dirent *de;
  add_offer(TYTO_PLUGIN_HW_CPU, "test CPU", 0, 0, "", 0);
  while (d != NULL && (de = readdir(d)) != NULL && n_offer < MAX_OFFER - 2) {
    unsigned vendor, cls;
    if (de->d_name[0] == '.')
      continue;
    vendor = read_hex_file(de->d_name, "vendor");
    cls = read_hex_file(de->d_name, "class") >> 8;
    if (vendor != 0x10de || (cls >> 8) != 0x03)
      continue;
    add_offer(TYTO_PLUGIN_HW_PCI, "NVIDIA GPU (sysfs)", 0x10de, cls, de->d_name,
              read_int_file(de->d_name, "numa_node"));
    n_real_nvidia++;
  }
  if (d != NULL)
    closedir(d);
  /* TYTO_TEST_OFFER_BUS="0000:65:00.0,..." offers more NVIDIA GPUs, as if
   * hwloc had found them (for runs against a fake runtime). */
  if (getenv("TYTO_TEST_OFFER_BUS")) {
    char list[256], *tok, *save = NULL;
    snprintf(list, sizeof list, "%s", getenv("TYTO_TEST_OFFER_BUS"));
    for (tok = strtok_r(list, ",", &save); tok && n_offer < MAX_OFFER - 2;
         tok = strtok_r(NULL, ",", &save)) {
      add_offer(TYTO_PLUGIN_HW_PCI, "NVIDIA GPU (env)", 0x10de, 0x0302, tok,
                (int)n_offer);
      n_real_nvidia++;
    }
  }
  add_offer(TYTO_PLUGIN_HW_PCI, "fake NVIDIA", 0x10de, 0x0302, "00ff:fe:1f.7",
            0);
  add_offer(TYTO_PLUGIN_HW_PCI, "fake AMD", 0x1002, 0x0300, "0000:03:00.0", -1);
}

/* -------------------------------------------------------------- claims -- */

static struct {
  int32_t hw_index;
  uint32_t ordinal;
  char name[256];
} claimed[64];
static int n_claimed;
static struct {
  int32_t hw_index;
  char name[256];
  char reason[512];
} refused[64];
static int n_refused;

static void on_claim(void *ctx, int32_t hw_index, uint32_t ordinal,
                     const char *name) {
  (void)ctx;
  if (n_claimed < 64) {
    claimed[n_claimed].hw_index = hw_index;
    claimed[n_claimed].ordinal = ordinal;
    snprintf(claimed[n_claimed].name, 256, "%s", name ? name : "(null)");
    n_claimed++;
  }
  fprintf(stderr, "  claim cuda:%u hw %d \"%s\"\n", ordinal, hw_index,
          name ? name : "(null)");
}

static void on_refuse(void *ctx, int32_t hw_index, const char *name,
                      const char *reason) {
  (void)ctx;
  if (n_refused < 64) {
    refused[n_refused].hw_index = hw_index;
    snprintf(refused[n_refused].name, 256, "%s", name ? name : "(null)");
    snprintf(refused[n_refused].reason, 512, "%s", reason ? reason : "");
    n_refused++;
  }
  fprintf(stderr, "  refuse hw %d \"%s\": %s\n", hw_index,
          name ? name : "(null)", reason ? reason : "(null)");
}

static const tyto_plugin_claims claims = {sizeof(tyto_plugin_claims), NULL,
                                          on_claim, on_refuse};

static int refused_index(int32_t hw) {
  for (int i = 0; i < n_refused; i++)
    if (refused[i].hw_index == hw)
      return i;
  return -1;
}

/* ------------------------------------------------------- plugin handle -- */

static const tyto_plugin_info *info;
static const tyto_plugin_fns *F;
static const tyto_plugin_device_fns *D;

/* ---------------------------------------------------- reference copies -- */

static size_t dsize(uint32_t dt) {
  return dt == TYTO_PLUGIN_DTYPE_F64 || dt == TYTO_PLUGIN_DTYPE_I64    ? 8
         : dt == TYTO_PLUGIN_DTYPE_F16 || dt == TYTO_PLUGIN_DTYPE_BF16 ? 2
         : dt == TYTO_PLUGIN_DTYPE_U8                                  ? 1
                                                                       : 4;
}

static tyto_plugin_layout mk_layout(uint32_t dt, uint32_t rank,
                                    const int64_t *shape,
                                    const int64_t *strides, int64_t offset) {
  tyto_plugin_layout l;
  memset(&l, 0, sizeof l);
  l.struct_size = sizeof l;
  l.dtype = dt;
  l.rank = rank;
  for (uint32_t k = 0; k < rank; k++) {
    l.shape[k] = shape[k];
    l.strides[k] = strides[k];
  }
  l.offset = offset;
  return l;
}

static void row_major(uint32_t rank, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (uint32_t k = rank; k-- > 0;) {
    strides[k] = s;
    s *= shape[k];
  }
}

static int64_t count(const tyto_plugin_layout *l) {
  int64_t n = 1;
  for (uint32_t k = 0; k < l->rank; k++)
    n *= l->shape[k];
  return n;
}

/* Host reference: walks coordinates with an odometer (a different method
 * from the kernel's division), byte offsets relative to base pointers. */
static void ref_apply(const tyto_plugin_layout *in,
                      const tyto_plugin_layout *out, const char *src, char *dst,
                      const void *fill_value) {
  size_t es = dsize(out->dtype);
  int64_t idx[TYTO_PLUGIN_MAX_RANK] = {0};
  int64_t n = count(out);
  for (int64_t i = 0; i < n; i++) {
    int64_t so = in ? in->offset : 0, doff = out->offset;
    for (uint32_t k = 0; k < out->rank; k++) {
      if (in)
        so += idx[k] * in->strides[k];
      doff += idx[k] * out->strides[k];
    }
    memcpy(dst + doff * (int64_t)es, in ? src + so * (int64_t)es : fill_value,
           es);
    for (uint32_t k = out->rank; k-- > 0;) {
      if (++idx[k] < out->shape[k])
        break;
      idx[k] = 0;
    }
  }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void fill_random(void *p, size_t bytes) {
  unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    b[i] = (unsigned char)(next_rand() >> 24);
}

/* Runs one COPY (in != NULL) or FILL on device `dev` through stream s:
 * input buffer of in_bytes random bytes bound at in_bind bytes, output of
 * out_bytes random bytes (so untouched bytes are checked too) bound at
 * out_bind; compares the whole output buffer with the host reference. */
static void run_op(tyto_plugin_device *dev, tyto_plugin_stream *s,
                   const char *label, const tyto_plugin_layout *in,
                   uint64_t in_bytes, uint64_t in_bind,
                   const tyto_plugin_layout *out, uint64_t out_bytes,
                   uint64_t out_bind, double value) {
  tyto_plugin_op_desc d;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_kernel_info ki = {sizeof ki, 123, 0};
  tyto_plugin_buffer *bin = NULL, *bout = NULL;
  char *hin = malloc(in_bytes ? in_bytes : 1);
  char *hout = malloc(out_bytes), *expect = malloc(out_bytes);
  char *hback = malloc(out_bytes);
  tyto_plugin_binding bi, bo;
  float f32 = (float)value;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.op = in ? TYTO_PLUGIN_OP_COPY : TYTO_PLUGIN_OP_FILL;
  d.n_inputs = in ? 1 : 0;
  d.n_outputs = 1;
  d.inputs = in;
  d.outputs = out;
  d.n_fattrs = 1;
  d.fattrs = &value;
  fill_random(hin, in_bytes);
  fill_random(expect, out_bytes);
  memcpy(hout, expect, out_bytes);
  ref_apply(in, out, hin + in_bind, expect + out_bind,
            out->dtype == TYTO_PLUGIN_DTYPE_F32 ? (const void *)&f32
                                                : (const void *)&value);

  if (!OK(D->supports_op(dev, &d)) || !OK(D->prepare(dev, &d, &k, &ki)))
    goto done;
  CHECK(ki.workspace_bytes == 0, "%s: workspace %llu", label,
        (unsigned long long)ki.workspace_bytes);
  if (!OK(D->buffer_alloc(dev, out_bytes, &bout)) ||
      !OK(D->copy_h2d(dev, s, bout, 0, hout, out_bytes)))
    goto done;
  if (in && (!OK(D->buffer_alloc(dev, in_bytes, &bin)) ||
             !OK(D->copy_h2d(dev, s, bin, 0, hin, in_bytes))))
    goto done;
  bi.struct_size = bo.struct_size = sizeof bi;
  bi.buffer = bin;
  bi.offset = in_bind;
  bo.buffer = bout;
  bo.offset = out_bind;
  if (!OK(D->launch(dev, s, k, in ? &bi : NULL, in ? 1 : 0, &bo, 1, NULL)))
    goto done;
  /* hout is still the source of the queued upload: read back elsewhere */
  memset(hback, 0, out_bytes);
  if (!OK(D->copy_d2h(dev, s, hback, bout, 0, out_bytes)) ||
      !OK(D->stream_synchronize(dev, s)))
    goto done;
  {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < out_bytes; i++)
      if (hback[i] != expect[i] && bad++ == 0)
        first = i;
    CHECK(bad == 0, "%s: %zu bytes differ, first at byte %zu", label, bad,
          first);
    if (bad == 0 && getenv("TYTO_TEST_VERBOSE"))
      fprintf(stderr, "  ok %s\n", label);
  }
done:
  D->buffer_free(dev, bin);
  D->buffer_free(dev, bout);
  if (k)
    D->kernel_release(dev, k);
  free(hin);
  free(hout);
  free(hback);
  free(expect);
}

/* Copy tests for one dtype. */
static void copy_tests(tyto_plugin_device *dev, tyto_plugin_stream *s,
                       uint32_t dt) {
  size_t es = dsize(dt);
  char label[128];
  const char *dn = dt == TYTO_PLUGIN_DTYPE_F32   ? "f32"
                   : dt == TYTO_PLUGIN_DTYPE_F64 ? "f64"
                                                 : "f16";
  /* contiguous 1-D, larger than one grid pass */
  {
    int64_t sh[1] = {1 << 20}, st[1] = {1};
    tyto_plugin_layout l = mk_layout(dt, 1, sh, st, 0);
    snprintf(label, sizeof label, "%s contiguous 1-D", dn);
    run_op(dev, s, label, &l, sh[0] * es, 0, &l, sh[0] * es, 0, 0);
  }
  /* 2-D transpose: out[i][j] = in[j][i], in is [N][M] row-major */
  {
    int64_t M = 67, N = 129;
    int64_t sh[2] = {M, N}, ist[2] = {1, M}, ost[2];
    row_major(2, sh, ost);
    tyto_plugin_layout li = mk_layout(dt, 2, sh, ist, 0);
    tyto_plugin_layout lo = mk_layout(dt, 2, sh, ost, 0);
    snprintf(label, sizeof label, "%s transpose 67x129", dn);
    run_op(dev, s, label, &li, M * N * es, 0, &lo, M * N * es, 0, 0);
  }
  /* negative strides: flip both dimensions, binding offsets non-zero */
  {
    int64_t M = 33, N = 65;
    int64_t sh[2] = {M, N}, ist[2] = {-N, -1}, ost[2];
    row_major(2, sh, ost);
    tyto_plugin_layout li = mk_layout(dt, 2, sh, ist, M * N - 1);
    tyto_plugin_layout lo = mk_layout(dt, 2, sh, ost, 3);
    snprintf(label, sizeof label, "%s flipped 33x65", dn);
    run_op(dev, s, label, &li, (M * N + 8) * es, 4 * es, &lo, (M * N + 16) * es,
           8 * es, 0);
  }
  /* negative offset within the binding: reads before the bound position */
  {
    int64_t sh[1] = {100}, ist[1] = {-1}, ost[1] = {1};
    tyto_plugin_layout li = mk_layout(dt, 1, sh, ist, 0);
    tyto_plugin_layout lo = mk_layout(dt, 1, sh, ost, 0);
    snprintf(label, sizeof label, "%s reversed before binding", dn);
    run_op(dev, s, label, &li, 100 * es, 99 * es, &lo, 100 * es, 0, 0);
  }
  /* broadcast: a row of N (stride 0 over rows) and a column (stride 0
   * over columns) into [M][N] */
  {
    int64_t M = 40, N = 300;
    int64_t sh[2] = {M, N}, row[2] = {0, 1}, col[2] = {1, 0}, ost[2];
    row_major(2, sh, ost);
    tyto_plugin_layout lr = mk_layout(dt, 2, sh, row, 0);
    tyto_plugin_layout lc = mk_layout(dt, 2, sh, col, 0);
    tyto_plugin_layout lo = mk_layout(dt, 2, sh, ost, 0);
    snprintf(label, sizeof label, "%s broadcast row", dn);
    run_op(dev, s, label, &lr, N * es, 0, &lo, M * N * es, 0, 0);
    snprintf(label, sizeof label, "%s broadcast column", dn);
    run_op(dev, s, label, &lc, M * es, 0, &lo, M * N * es, 0, 0);
  }
  /* rank 4 permutation (NCHW -> NHWC) into a padded, offset output */
  {
    int64_t n = 3, c = 5, h = 7, w = 9;
    int64_t sh[4] = {n, h, w, c};
    int64_t ist[4] = {c * h * w, w, 1, h * w}; /* reading NCHW */
    int64_t pc = c + 3, pw = w * pc + 2, ph = h * pw + 1;
    int64_t ost[4] = {ph, pw, pc, 1}; /* padded NHWC */
    tyto_plugin_layout li = mk_layout(dt, 4, sh, ist, 0);
    tyto_plugin_layout lo = mk_layout(dt, 4, sh, ost, 5);
    snprintf(label, sizeof label, "%s nchw->padded nhwc", dn);
    run_op(dev, s, label, &li, n * c * h * w * es, 0, &lo,
           (n * ph + 5 + 16) * es, 2 * es, 0);
  }
  /* rank 0: one element, offsets in elements and bytes */
  {
    tyto_plugin_layout li = mk_layout(dt, 0, NULL, NULL, 2);
    tyto_plugin_layout lo = mk_layout(dt, 0, NULL, NULL, 1);
    snprintf(label, sizeof label, "%s scalar", dn);
    run_op(dev, s, label, &li, 8 * es, es, &lo, 8 * es, 3 * es, 0);
  }
  /* rank 8, extents 2..3, input dims reversed and one broadcast dim */
  {
    int64_t sh[8] = {2, 3, 2, 1, 3, 2, 2, 3}, ist[8], ost[8], tmp[8];
    int64_t rs[8];
    for (int k = 0; k < 8; k++)
      rs[k] = sh[7 - k];
    row_major(8, rs, tmp);
    for (int k = 0; k < 8; k++)
      ist[k] = tmp[7 - k];
    ist[4] = 0;
    row_major(8, sh, ost);
    tyto_plugin_layout li = mk_layout(dt, 8, sh, ist, 0);
    tyto_plugin_layout lo = mk_layout(dt, 8, sh, ost, 0);
    snprintf(label, sizeof label, "%s rank 8 reversed+broadcast", dn);
    run_op(dev, s, label, &li, count(&lo) * es, 0, &lo, count(&lo) * es, 0, 0);
  }
  /* empty tensor: nothing written, no kernel run */
  {
    int64_t sh[2] = {0, 5}, st[2] = {5, 1};
    tyto_plugin_layout l = mk_layout(dt, 2, sh, st, 0);
    snprintf(label, sizeof label, "%s empty", dn);
    run_op(dev, s, label, &l, 16, 0, &l, 16, 0, 0);
  }
}

static void fill_tests(tyto_plugin_device *dev, tyto_plugin_stream *s,
                       uint32_t dt) {
  size_t es = dsize(dt);
  char label[128];
  const char *dn = dt == TYTO_PLUGIN_DTYPE_F32 ? "f32" : "f64";
  {
    int64_t sh[1] = {1000003}, st[1] = {1};
    tyto_plugin_layout l = mk_layout(dt, 1, sh, st, 0);
    snprintf(label, sizeof label, "%s fill 1/3 contiguous", dn);
    run_op(dev, s, label, NULL, 0, 0, &l, sh[0] * es, 0, 1.0 / 3.0);
  }
  {
    /* every other column of a [50][64] matrix, reversed rows */
    int64_t sh[2] = {50, 32}, st[2] = {-64, 2};
    tyto_plugin_layout l = mk_layout(dt, 2, sh, st, 49 * 64 + 1);
    snprintf(label, sizeof label, "%s fill -2.5 strided", dn);
    run_op(dev, s, label, NULL, 0, 0, &l, 50 * 64 * es + 64, 64, -2.5);
  }
  {
    tyto_plugin_layout l = mk_layout(dt, 0, NULL, NULL, 0);
    snprintf(label, sizeof label, "%s fill scalar 1e300", dn);
    run_op(dev, s, label, NULL, 0, 0, &l, 4 * es, es, 1e300);
  }
}

/* Descriptors and launches the plugin must reject. */
static void rejection_tests(tyto_plugin_device *dev, tyto_plugin_stream *s) {
  int64_t sh[2] = {4, 4}, st[2] = {4, 1}, sh2[2] = {4, 5}, zero[2] = {0, 1};
  tyto_plugin_layout f32 = mk_layout(TYTO_PLUGIN_DTYPE_F32, 2, sh, st, 0);
  tyto_plugin_layout f64 = mk_layout(TYTO_PLUGIN_DTYPE_F64, 2, sh, st, 0);
  tyto_plugin_layout r1 = mk_layout(TYTO_PLUGIN_DTYPE_F32, 1, sh, st + 1, 0);
  tyto_plugin_layout other = mk_layout(TYTO_PLUGIN_DTYPE_F32, 2, sh2, st, 0);
  tyto_plugin_layout alias = mk_layout(TYTO_PLUGIN_DTYPE_F32, 2, sh, zero, 0);
  tyto_plugin_layout f16 = mk_layout(TYTO_PLUGIN_DTYPE_F16, 2, sh, st, 0);
  tyto_plugin_layout bad = f32;
  double v = 1;
  tyto_plugin_op_desc d;
  tyto_plugin_kernel *k = NULL;
  tyto_plugin_buffer *small = NULL, *big = NULL;
  tyto_plugin_binding bi = {sizeof bi, NULL, 0}, bo = {sizeof bo, NULL, 0};

  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.op = TYTO_PLUGIN_OP_COPY;
  d.n_inputs = 1;
  d.n_outputs = 1;
  d.inputs = &f32;
  d.outputs = &f64;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "f32");
  d.outputs = &r1;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "shape");
  d.outputs = &other;
  EXPECT_ERR(D->supports_op(dev, &d), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "[4, 5]");
  d.outputs = &alias;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "overlap");
  bad.rank = 9;
  d.outputs = &bad;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "rank");
  bad.rank = 2;
  bad.shape[1] = -1;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "negative");
  bad = f32;
  bad.strides[0] = INT64_MAX / 2;
  d.inputs = &bad;
  d.outputs = &f32;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "overflow");
  d.inputs = &f32;
  d.n_inputs = 2;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "input");
  d.n_inputs = 1;
  d.op = 99;
  EXPECT_ERR(D->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED, "99");
  d.op = TYTO_PLUGIN_OP_FILL;
  d.n_inputs = 0;
  d.inputs = NULL;
  d.outputs = &f16;
  d.n_fattrs = 1;
  d.fattrs = &v;
  EXPECT_ERR(D->supports_op(dev, &d), TYTO_PLUGIN_ERR_UNSUPPORTED, "f16");
  d.outputs = &f32;
  d.n_fattrs = 0;
  EXPECT_ERR(D->prepare(dev, &d, &k, NULL), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "fattrs");
  CHECK(k == NULL, "failed prepare left a kernel");

  /* launch-time checks: a 4x4 f32 copy needs 64 bytes per binding */
  d.op = TYTO_PLUGIN_OP_COPY;
  d.n_inputs = 1;
  d.inputs = &f32;
  d.outputs = &f32;
  if (!OK(D->prepare(dev, &d, &k, NULL)))
    return;
  if (OK(D->buffer_alloc(dev, 60, &small)) &&
      OK(D->buffer_alloc(dev, 128, &big))) {
    bi.buffer = big;
    bo.buffer = small;
    EXPECT_ERR(D->launch(dev, s, k, &bi, 1, &bo, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "60-byte buffer");
    bo.buffer = big;
    bi.offset = 68; /* 68 + 64 > 128 */
    EXPECT_ERR(D->launch(dev, s, k, &bi, 1, &bo, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "128-byte buffer");
    bi.offset = 2;
    EXPECT_ERR(D->launch(dev, s, k, &bi, 1, &bo, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "multiple");
    bi.offset = 0;
    EXPECT_ERR(D->launch(dev, s, k, &bi, 1, &bo, 0, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "output");
    EXPECT_ERR(D->launch(dev, NULL, k, &bi, 1, &bo, 1, NULL),
               TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "stream");
    OK(D->launch(dev, s, k, &bi, 1, &bo, 1, NULL));
    OK(D->stream_synchronize(dev, s));
  }
  D->buffer_free(dev, small);
  D->buffer_free(dev, big);
  D->kernel_release(dev, k);
}

/* Buffers, sync and async copies, range checks, streams and events. */
static void memory_tests(tyto_plugin_device *dev) {
  enum { N = 1 << 22 }; /* 4 MiB */
  tyto_plugin_buffer *a = NULL, *b = NULL, *z = NULL;
  tyto_plugin_stream *s1 = NULL, *s2 = NULL;
  tyto_plugin_event *e1 = NULL, *e2 = NULL;
  unsigned char *pin_in = NULL, *pin_out = NULL, *h = malloc(N);
  int done;

  if (!OK(D->buffer_alloc(dev, 0, &z)))
    goto done;
  CHECK(z != NULL, "size-0 buffer handle is NULL");
  OK(D->copy_h2d(dev, NULL, z, 0, NULL, 0));
  EXPECT_ERR(D->copy_h2d(dev, NULL, z, 0, h, 1),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "buffer size 0");
  if (!OK(D->buffer_alloc(dev, N, &a)) || !OK(D->buffer_alloc(dev, N, &b)))
    goto done;

  /* synchronous round trip with offsets */
  fill_random(h, N);
  OK(D->copy_h2d(dev, NULL, a, 0, h, N));
  OK(D->copy_d2d(dev, NULL, b, 100, a, 50, N - 100));
  {
    unsigned char *back = calloc(1, N);
    OK(D->copy_d2h(dev, NULL, back, b, 100, N - 100));
    CHECK(memcmp(back, h + 50, N - 100) == 0, "sync d2d round trip differs");
    free(back);
  }

  /* range checks name offset, size and buffer size */
  EXPECT_ERR(D->copy_h2d(dev, NULL, a, N - 10, h, 11),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "offset 4194294 + size 11");
  EXPECT_ERR(D->copy_d2h(dev, NULL, h, a, UINT64_MAX, 1),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "buffer size 4194304");
  EXPECT_ERR(D->copy_d2d(dev, NULL, a, 0, b, 1, N),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "source");
  EXPECT_ERR(D->copy_h2d(dev, NULL, NULL, 0, h, 1),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "NULL");

  /* two streams: s1 uploads, s2 waits on e1, copies and downloads */
  if (!OK(D->stream_create(dev, &s1)) || !OK(D->stream_create(dev, &s2)) ||
      !OK(D->event_create(dev, &e1)) || !OK(D->event_create(dev, &e2)))
    goto done;
  done = -1;
  OK(D->event_query(dev, e1, &done)); /* a new event is complete */
  CHECK(done == 1, "new event: complete = %d", done);
  OK(D->event_synchronize(dev, e1));
  OK(D->event_wait(dev, s2, e1)); /* and waiting on it is a no-op */
  if (!OK(D->host_alloc_pinned(dev, N, (void **)&pin_in)) ||
      !OK(D->host_alloc_pinned(dev, N, (void **)&pin_out)))
    goto done;
  {
    void *p0 = (void *)1;
    OK(D->host_alloc_pinned(dev, 0, &p0));
    CHECK(p0 == NULL, "pinned size 0 should give NULL");
  }
  fill_random(pin_in, N);
  memset(pin_out, 0, N);
  for (int round = 0; round < 3; round++) {
    pin_in[round] ^= 0x5a;
    OK(D->copy_h2d(dev, s1, a, 0, pin_in, N));
    OK(D->event_record(dev, e1, s1));
    OK(D->event_wait(dev, s2, e1));
    OK(D->copy_d2d(dev, s2, b, 0, a, 0, N));
    OK(D->copy_d2h(dev, s2, pin_out, b, 0, N));
    OK(D->event_record(dev, e2, s2));
    done = -1;
    OK(D->event_query(dev, e2, &done)); /* pending or not: no error */
    CHECK(done == 0 || done == 1, "event_query: complete = %d", done);
    OK(D->event_synchronize(dev, e2));
    done = -1;
    OK(D->event_query(dev, e2, &done));
    CHECK(done == 1, "synchronized event: complete = %d", done);
    CHECK(memcmp(pin_in, pin_out, N) == 0, "async 2-stream round %d differs",
          round);
  }
  /* recording on the NULL stream (the plugin's synchronous work) works */
  OK(D->event_record(dev, e1, NULL));
  OK(D->event_synchronize(dev, e1));
  OK(D->stream_synchronize(dev, s1));
  OK(D->stream_synchronize(dev, s2));
done:
  D->host_free_pinned(dev, pin_in);
  D->host_free_pinned(dev, pin_out);
  D->event_destroy(dev, e1);
  D->event_destroy(dev, e2);
  D->stream_destroy(dev, s1);
  D->stream_destroy(dev, s2);
  D->buffer_free(dev, a);
  D->buffer_free(dev, b);
  D->buffer_free(dev, z);
  free(h);
}

static void peer_tests(tyto_plugin_state *st, uint32_t o0, uint32_t o1) {
  enum { N = 1 << 20 };
  tyto_plugin_device *d0 = NULL, *d1 = NULL;
  tyto_plugin_buffer *a = NULL, *b = NULL;
  tyto_plugin_stream *s1 = NULL;
  tyto_plugin_event *e0 = NULL;
  unsigned char *h = malloc(N), *back = calloc(1, N);
  if (!OK(F->device_open(st, o0, &d0)) || !OK(F->device_open(st, o1, &d1)))
    goto done;
  if (!OK(D->buffer_alloc(d0, N, &a)) || !OK(D->buffer_alloc(d1, N, &b)) ||
      !OK(D->stream_create(d1, &s1)) || !OK(D->event_create(d0, &e0)))
    goto done;
  fill_random(h, N);
  OK(D->copy_h2d(d0, NULL, a, 0, h, N));
  OK(D->event_record(d0, e0, NULL));
  OK(D->event_wait(d1, s1, e0)); /* cross-device wait */
  if (D->copy_peer)
    OK(D->copy_peer(d1, s1, b, 0, d0, a, 0, N));
  OK(D->copy_d2h(d1, s1, back, b, 0, N));
  OK(D->stream_synchronize(d1, s1));
  CHECK(memcmp(h, back, N) == 0, "peer copy cuda:%u -> cuda:%u differs", o0,
        o1);
  EXPECT_ERR(D->copy_d2d(d1, NULL, b, 0, a, 0, 16),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "belongs to");
done:
  D->event_destroy(d0, e0);
  D->stream_destroy(d1, s1);
  D->buffer_free(d0, a);
  D->buffer_free(d1, b);
  if (d0)
    D->device_close(d0);
  if (d1)
    D->device_close(d1);
  free(h);
  free(back);
}

static void gpu_tests(tyto_plugin_state *st) {
  for (int c = 0; c < n_claimed; c++) {
    uint32_t ord = claimed[c].ordinal;
    tyto_plugin_device_info di;
    tyto_plugin_device *dev = NULL;
    tyto_plugin_stream *s = NULL;
    unsigned maj = 0, min = 0;

    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    if (!OK(F->device_query(st, ord, &di)))
      continue;
    fprintf(stderr,
            "cuda:%u: %s / %s / driver %s / %llu MiB / %u SMs / numa %d / "
            "bus %s / flags 0x%x\n",
            ord, di.name, di.vendor, di.driver_version,
            (unsigned long long)(di.memory_bytes >> 20), di.compute_units,
            di.numa_node, di.pci_bus_id, di.flags);
    CHECK(strcmp(di.vendor, "NVIDIA") == 0, "vendor %s", di.vendor);
    CHECK(di.name[0] != '\0', "empty name");
    CHECK(sscanf(di.driver_version, "%u.%u", &maj, &min) == 2 && maj >= 13,
          "driver_version \"%s\"", di.driver_version);
    CHECK(di.alignment == 256 && di.max_alloc_bytes == 0, "alignment");
    CHECK(di.memory_bytes > 0 && di.compute_units > 0, "memory/SMs");
    CHECK((di.flags & TYTO_PLUGIN_CAP_ASYNC) &&
              (di.flags & TYTO_PLUGIN_CAP_PINNED_HOST) &&
              !(di.flags & TYTO_PLUGIN_CAP_UNIFIED_MEMORY),
          "flags 0x%x", di.flags);
    CHECK(di.dtypes == 0xf, "dtypes 0x%x", di.dtypes);
    CHECK(strlen(di.pci_bus_id) == 12 && di.pci_bus_id[4] == ':' &&
              di.pci_bus_id[7] == ':' && di.pci_bus_id[10] == '.',
          "bus id \"%s\"", di.pci_bus_id);
    if (claimed[c].hw_index >= 0) {
      CHECK(strcasecmp(di.pci_bus_id, offer[claimed[c].hw_index].pci_bus_id) ==
                0,
            "matched offer %d has bus %s, device says %s", claimed[c].hw_index,
            offer[claimed[c].hw_index].pci_bus_id, di.pci_bus_id);
      CHECK(di.numa_node == offer[claimed[c].hw_index].numa_node, "numa");
    } else {
      CHECK(n_real_nvidia == 0, "cuda:%u matched no sysfs GPU", ord);
    }
    /* an older host's smaller struct: fields past it stay untouched */
    {
      tyto_plugin_device_info small;
      memset(&small, 0xab, sizeof small);
      small.struct_size = offsetof(tyto_plugin_device_info, dtypes);
      OK(F->device_query(st, ord, &small));
      CHECK(small.dtypes == 0xabababab &&
                small.memory_bytes == 0xababababababababull,
            "device_query wrote past struct_size");
    }

    if (!OK(F->device_open(st, ord, &dev)))
      continue;
    memory_tests(dev);
    if (OK(D->stream_create(dev, &s))) {
      copy_tests(dev, s, TYTO_PLUGIN_DTYPE_F32);
      copy_tests(dev, s, TYTO_PLUGIN_DTYPE_F64);
      copy_tests(dev, s, TYTO_PLUGIN_DTYPE_F16);
      fill_tests(dev, s, TYTO_PLUGIN_DTYPE_F32);
      fill_tests(dev, s, TYTO_PLUGIN_DTYPE_F64);
      rejection_tests(dev, s);
      D->stream_destroy(dev, s);
    }
    D->device_close(dev);
  }
  if (n_claimed >= 2) {
    peer_tests(st, claimed[0].ordinal, claimed[1].ordinal);
    peer_tests(st, claimed[1].ordinal, claimed[0].ordinal);
  }
}

/* ---------------------------------------------------------------- main -- */

int main(int argc, char **argv) {
  const char *path = TEST_CUDA_PLUGIN;
  int want_gpu = 1; /* no GPU claimed: exit 77 once the rest has passed */
  void *so;
  tyto_plugin_init_fn init;
  tyto_plugin_state *st = NULL;
  tyto_plugin_error *perr;
  int fake_nv = -1, fake_amd = -1;

  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--gpu") == 0)
      want_gpu = 1;
    else if (strcmp(argv[i], "--no-gpu") == 0)
      want_gpu = 0;
    else
      path = argv[i];
  }
  so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
    return 1;
  }
  *(void **)&init = dlsym(so, "tyto_plugin_cuda_LTX_init");
  if (init == NULL) {
    fprintf(stderr, "FAIL: no entry point: %s\n", dlerror());
    return 1;
  }

  /* invalid option: init fails naming key, value and allowed values */
  setenv("TYTO_CUDA_ALLOW_TF32", "maybe", 1);
  EXPECT_ERR(init(&host, &info, &st), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
             "allow_tf32 = \"maybe\": expected yes or no");
  CHECK(info == NULL && st == NULL, "failed init left info/state");
  setenv("TYTO_CUDA_ALLOW_TF32", "YES", 1);

  if (!OK(init(&host, &info, &st)))
    return 1;
  CHECK(info->struct_size == sizeof *info && info->abi_major == 1,
        "info header");
  CHECK(strcmp(info->name, "cuda") == 0, "name %s", info->name);
  CHECK(info->n_options == 2 &&
            strcmp(info->options[0].key, "allow_tf32") == 0 &&
            strcmp(info->options[1].key, "cache_dir") == 0,
        "options");
  F = info->fns;
  D = info->device_fns;
  CHECK(F && F->probe && F->device_query && F->device_open && F->shutdown,
        "fns");
  CHECK(D && D->device_close && D->buffer_alloc && D->launch && D->prepare,
        "device fns");

  build_offer();
  fake_nv = (int)n_offer - 2;
  fake_amd = (int)n_offer - 1;
  fprintf(stderr, "offer: %u entries (%d NVIDIA from sysfs)\n", n_offer,
          n_real_nvidia);
  perr = F->probe(st, offer, n_offer, &claims);
  EXPECT_ERR(F->probe(st, offer, n_offer, &claims),
             TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "twice");

  CHECK(refused_index(fake_amd) < 0, "AMD entry refused");
  CHECK(refused_index(0) < 0, "CPU entry refused");
  CHECK(refused_index(fake_nv) >= 0, "fake NVIDIA entry not refused");

  if (perr != NULL) {
    /* No usable driver/device: everything NVIDIA refused, with the reason. */
    fprintf(stderr, "probe error %d: %s\n", perr->code, perr->msg);
    CHECK(perr->code == TYTO_PLUGIN_ERR_UNAVAILABLE ||
              perr->code == TYTO_PLUGIN_ERR_NOT_FOUND,
          "probe error code %d", perr->code);
    CHECK(strstr(perr->msg, "cudaError") != NULL,
          "message lacks the error "
          "name: %s",
          perr->msg);
    if (strstr(perr->msg, "cudaErrorInsufficientDriver"))
      CHECK(strstr(perr->msg, "NVIDIA driver") != NULL, "no advice: %s",
            perr->msg);
    CHECK(n_claimed == 0, "claimed %d devices without a driver", n_claimed);
    for (uint32_t i = 0; i < n_offer; i++)
      if (offer[i].kind == TYTO_PLUGIN_HW_PCI &&
          offer[i].pci_vendor_id == 0x10de) {
        int r = refused_index((int32_t)i);
        CHECK(r >= 0 && strcmp(refused[r].reason, perr->msg) == 0,
              "entry %u: refusal reason differs from probe error", i);
      }
    {
      tyto_plugin_device_info di;
      tyto_plugin_device *dev = (tyto_plugin_device *)&di;
      memset(&di, 0, sizeof di);
      di.struct_size = sizeof di;
      EXPECT_ERR(F->device_query(st, 0, &di), TYTO_PLUGIN_ERR_NOT_FOUND,
                 "cuda:0");
      EXPECT_ERR(F->device_open(st, 0, &dev), TYTO_PLUGIN_ERR_NOT_FOUND,
                 "no such device");
      CHECK(dev == NULL, "device_open left a handle");
    }
    err_free(perr);
  } else {
    CHECK(n_claimed > 0 || n_refused > 0, "probe succeeded but said nothing");
    tyto_plugin_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    EXPECT_ERR(F->device_query(st, 1000, &di), TYTO_PLUGIN_ERR_NOT_FOUND,
               "cuda:1000");
    gpu_tests(st);
  }

  F->shutdown(st);
  dlclose(so);
  fprintf(stderr, "%d checks, %d failures\n", checks, failures);
  if (failures)
    return 1;
  if (want_gpu && n_claimed == 0) {
    fprintf(stderr, "SKIP: no GPU claimed; GPU tests not run\n");
    return 77;
  }
  return 0;
}
