/*
 * The CUDA plugin's entry point and its plugin-level functions: init (reads
 * options and makes no CUDA call, so loading the plugin never touches the
 * driver), device_query, device_open/close, shutdown, and the function
 * tables. Discovery is in probe.c; device functions in memory.c, stream.c
 * and kernels.c.
 *
 * The plugin links libcudart and libnvrtc but not libcuda: the runtime
 * dlopens the driver on first use, so on a machine without the NVIDIA driver
 * the plugin still loads and probe() says what is missing.
 */
#include <errno.h>
#include <stdlib.h>

#include "cuda_plugin.h"

tyto_plugin_error *tcu_use(const tyto_plugin_host *host, int device) {
  const char *lost = tcu_lost_reason(device);
  if (lost != NULL)
    return host->error_new(TYTO_PLUGIN_ERR_DEVICE,
                           "cuda:%d is lost since an earlier fault (%s); CUDA "
                           "cannot recover it in this process: close the "
                           "contexts that use it and run again in a new "
                           "process",
                           device, lost);
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cudaSetDevice(%d)", device);
  return NULL;
}

/* ASCII case-insensitive equality, for option values. */
static int same_word(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
    char y = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
    if (x != y)
      return 0;
  }
  return *a == *b;
}

/* ---------------------------------------------------------------------- */
/* device_query / open / close                                            */
/* ---------------------------------------------------------------------- */

static tyto_plugin_error *no_such_device(tyto_plugin_state *st,
                                         uint32_t ordinal) {
  return st->host->error_new(
      TYTO_PLUGIN_ERR_NOT_FOUND,
      "cuda:%u: no such device (probe %s %d CUDA device%s)", ordinal,
      st->probed ? "found" : "has not run;", st->n_hw,
      st->n_hw == 1 ? "" : "s");
}

static tyto_plugin_error *device_query(tyto_plugin_state *st, uint32_t ordinal,
                                       tyto_plugin_device_info *info) {
  const tcu_hw *hw;
  if (ordinal >= (uint32_t)st->n_hw || !st->hw[ordinal].claimed)
    return no_such_device(st, ordinal);
  if (info == NULL || info->struct_size < sizeof(size_t))
    return st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                               "device_query: info is NULL or has no size");
  hw = &st->hw[ordinal];

#define SET(field, value)                                                      \
  do {                                                                         \
    if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, field))           \
      info->field = (value);                                                   \
  } while (0)
  SET(name, hw->label);
  SET(vendor, "NVIDIA");
  SET(driver_version, st->driver_version);
  SET(dtypes, TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_BF16) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I32) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I64));
  SET(flags, TYTO_PLUGIN_CAP_ASYNC | TYTO_PLUGIN_CAP_PINNED_HOST |
                 (st->any_peer ? TYTO_PLUGIN_CAP_PEER_COPY : 0u));
  SET(memory_bytes, hw->memory_bytes);
  SET(alignment, 256); /* cudaMalloc guarantees at least 256 bytes */
  SET(max_alloc_bytes, 0);
  SET(compute_units, hw->sm_count);
  SET(numa_node, hw->numa_node);
  SET(pci_bus_id, hw->pci_bus_id);
#undef SET
  return NULL;
}

static tyto_plugin_error *device_open(tyto_plugin_state *st, uint32_t ordinal,
                                      tyto_plugin_device **out) {
  tyto_plugin_device *dev;
  tyto_plugin_error *err;
  if (out == NULL)
    return st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                               "device_open: out is NULL");
  *out = NULL;
  if (ordinal >= (uint32_t)st->n_hw || !st->hw[ordinal].claimed)
    return no_such_device(st, ordinal);
  /* Since CUDA 12 cudaSetDevice creates the primary context, so a device
   * that cannot be used (exclusive mode, lost) fails here, not later. */
  err = tcu_use(st->host, (int)ordinal);
  if (err != NULL)
    return err;
  dev = calloc(1, sizeof *dev);
  if (dev == NULL)
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                               "device_open: out of host memory");
  if (pthread_mutex_init(&dev->cache_lock, NULL) != 0) {
    free(dev);
    return st->host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                               "device_open: cannot create a mutex");
  }
  if (pthread_mutex_init(&dev->lib_lock, NULL) != 0) {
    pthread_mutex_destroy(&dev->cache_lock);
    free(dev);
    return st->host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                               "device_open: cannot create a mutex");
  }
  dev->state = st;
  dev->index = (int)ordinal;
  dev->sm_count = st->hw[ordinal].sm_count;
  tcu_arch_select(dev, st->hw[ordinal].cc_major, st->hw[ordinal].cc_minor);
  if (dev->arch[0] == '\0')
    st->host->log(st->host->ctx, TYTO_PLUGIN_LOG_WARN,
                  "cuda:%u: kernels unavailable: %s", ordinal, dev->arch_error);
  *out = dev;
  return NULL;
}

static void device_close(tyto_plugin_device *dev) {
  if (dev == NULL)
    return;
  if (tcu_use(dev->state->host, dev->index) == NULL)
    tcu_libs_release(dev);
  tcu_cache_clear(dev);
  pthread_mutex_destroy(&dev->cache_lock);
  pthread_mutex_destroy(&dev->lib_lock);
  free(dev);
}

static void shutdown_plugin(tyto_plugin_state *st) {
  if (st == NULL)
    return;
  free(st->hw);
  free(st->can_peer);
  free(st->peer_enabled);
  pthread_mutex_destroy(&st->peer_lock);
  free(st);
}

/* ---------------------------------------------------------------------- */
/* Tables and the entry point                                             */
/* ---------------------------------------------------------------------- */

static const tyto_plugin_fns plugin_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = tcu_probe,
    .device_query = device_query,
    .device_open = device_open,
    .shutdown = shutdown_plugin,
};

static const tyto_plugin_device_fns device_fns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = device_close,
    .buffer_alloc = tcu_buffer_alloc,
    .buffer_free = tcu_buffer_free,
    .buffer_host_ptr = NULL, /* device memory is not host-addressable */
    .stream_create = tcu_stream_create,
    .stream_destroy = tcu_stream_destroy,
    .stream_synchronize = tcu_stream_synchronize,
    .event_create = tcu_event_create,
    .event_destroy = tcu_event_destroy,
    .event_record = tcu_event_record,
    .event_wait = tcu_event_wait,
    .event_synchronize = tcu_event_synchronize,
    .event_query = tcu_event_query,
    .copy_h2d = tcu_copy_h2d,
    .copy_d2h = tcu_copy_d2h,
    .copy_d2d = tcu_copy_d2d,
    .copy_peer = tcu_copy_peer,
    .host_alloc_pinned = tcu_host_alloc_pinned,
    .host_free_pinned = tcu_host_free_pinned,
    .supports_op = tcu_supports_op,
    .prepare = tcu_prepare,
    .kernel_release = tcu_kernel_release,
    .launch = tcu_launch,
    .graph_begin = tcu_graph_begin,
    .graph_end = tcu_graph_end,
    .graph_launch = tcu_graph_launch,
    .graph_destroy = tcu_graph_destroy,
};

static const tyto_plugin_option_doc options[] = {
    {sizeof(tyto_plugin_option_doc), "allow_tf32",
     "yes or no (default no): let f32 matrix products and convolutions use "
     "TF32 tensor cores (faster, ~10-bit mantissa); the default keeps "
     "f32 accuracy"},
    {sizeof(tyto_plugin_option_doc), "cache_dir",
     "Where compiled kernels are kept across runs (in a cuda/ "
     "subdirectory), or \"off\". Default: $XDG_CACHE_HOME/tyto, else "
     "~/.cache/tyto."},
};

static const tyto_plugin_info plugin_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = "cuda",
    .vendor = "tyto",
    .version = "0.1.0",
    .license = "MIT",
    .description = "NVIDIA GPUs through the CUDA runtime, kernels built "
                   "with NVRTC",
    .fns = &plugin_fns,
    .device_fns = &device_fns,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_cuda_LTX_init(const tyto_plugin_host *host,
                          const tyto_plugin_info **info,
                          tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_cuda_LTX_init(const tyto_plugin_host *host,
                          const tyto_plugin_info **info,
                          tyto_plugin_state **state) {
  tyto_plugin_state *st;
  const char *tf32;
  if (info != NULL)
    *info = NULL;
  if (state != NULL)
    *state = NULL;
  /* Without the required services there is no way even to build an
   * error value; a NULL info tells the host the init did not happen. */
  if (host == NULL ||
      !TYTO_PLUGIN_HAS_FIELD(host, tyto_plugin_host, error_new) ||
      host->error_new == NULL || host->log == NULL || host->option == NULL)
    return NULL;
  if (info == NULL || state == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "cuda plugin init: info or state is NULL");
  if (host->abi_major != TYTO_PLUGIN_ABI_MAJOR)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "cuda plugin built for plugin ABI %d, host speaks "
                           "%u; rebuild the plugin against this tyto",
                           TYTO_PLUGIN_ABI_MAJOR, (unsigned)host->abi_major);

  tf32 = host->option(host->ctx, "allow_tf32");
  if (tf32 != NULL && !same_word(tf32, "yes") && !same_word(tf32, "no"))
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "[cuda] allow_tf32 = \"%s\": expected yes or no",
                           tf32);

  st = calloc(1, sizeof *st);
  if (st == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "cuda plugin init: out of host memory");
  if (pthread_mutex_init(&st->peer_lock, NULL) != 0) {
    free(st);
    return host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                           "cuda plugin init: cannot create a mutex");
  }
  st->host = host;
  st->allow_tf32 = tf32 != NULL && same_word(tf32, "yes");
  /* A testing aid (docs/cuda.md): the N-th launch faults on purpose. */
  const char *fault_at = getenv("TYTO_CUDA_FAULT_AT");
  if (fault_at != NULL && fault_at[0] != '\0') {
    char *end;
    errno = 0;
    long long n = strtoll(fault_at, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1) {
      pthread_mutex_destroy(&st->peer_lock);
      free(st);
      return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                             "TYTO_CUDA_FAULT_AT=%.40s: expected a launch "
                             "number from 1",
                             fault_at);
    }
    st->fault_at = n;
  }
  *info = &plugin_info;
  *state = st;
  return NULL;
}
