/*
 * The OpenCL plugin's entry point and device lifetime: init, the function
 * tables, device_query, device_open/close and shutdown. Discovery lives in
 * probe.c, buffers in memory.c, streams and events in stream.c, kernels in
 * kernels.c.
 *
 * The plugin talks only to the OpenCL ICD loader (libOpenCL), never to a
 * vendor library, so whichever vendor drivers are registered under
 * /etc/OpenCL/vendors are usable.
 */
#include "ocl.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

/* The project's licence, as an SPDX identifier for tyto-info. */
#define OCL_PLUGIN_LICENSE "MIT"
#define OCL_PLUGIN_VERSION "0.1.0"

static tyto_plugin_error *fn_probe(tyto_plugin_state *state,
                                   const tyto_plugin_hw_device *offer,
                                   uint32_t n_offer,
                                   const tyto_plugin_claims *claims) {
  return ocl_probe(state, offer, n_offer, claims);
}

/* Writes one field of *info only if the host's struct has room for it. */
#define SET_FIELD(info, field, value)                                          \
  do {                                                                         \
    if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, field))           \
      (info)->field = (value);                                                 \
  } while (0)

static tyto_plugin_error *fn_device_query(tyto_plugin_state *state,
                                          uint32_t ordinal,
                                          tyto_plugin_device_info *info) {
  if (info == NULL)
    return ocl_error(state->host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "device_query: info is NULL");
  if (ordinal >= state->n_devs)
    return ocl_error(state->host, TYTO_PLUGIN_ERR_NOT_FOUND,
                     "device_query: no device opencl:%u (%u claimed)",
                     (unsigned)ordinal, (unsigned)state->n_devs);
  const ocl_devinfo *d = &state->devs[ordinal];
  SET_FIELD(info, name, d->name);
  SET_FIELD(info, vendor, d->vendor);
  SET_FIELD(info, driver_version,
            d->driver_text != NULL ? d->driver_text : d->driver_version);
  SET_FIELD(info, dtypes, d->dtypes);
  SET_FIELD(
      info, flags,
      (uint32_t)TYTO_PLUGIN_CAP_ASYNC |
          (d->host_memory ? (uint32_t)TYTO_PLUGIN_CAP_UNIFIED_MEMORY : 0u));
  SET_FIELD(info, memory_bytes, d->memory_bytes);
  SET_FIELD(info, alignment, d->alignment);
  SET_FIELD(info, max_alloc_bytes, d->max_alloc_bytes);
  SET_FIELD(info, compute_units, d->compute_units);
  SET_FIELD(info, numa_node, d->numa_node);
  SET_FIELD(info, pci_bus_id, d->pci_bus_id);
  return NULL;
}

tyto_plugin_error *ocl_queue_create(tyto_plugin_device *dev,
                                    cl_command_queue *out) {
  cl_int err = CL_SUCCESS;
  cl_command_queue q;
  /* clCreateCommandQueue is deprecated from 2.0 on but is the only
   * constructor a 1.2 device has; properties 0 is an in-order queue. */
  if (dev->info->cl_major >= 2)
    q = clCreateCommandQueueWithProperties(dev->context, dev->info->id, NULL,
                                           &err);
  else
    q = clCreateCommandQueue(dev->context, dev->info->id, 0, &err);
  if (q == NULL || err != CL_SUCCESS)
    return ocl_error_cl(dev->state->host,
                        dev->info->cl_major >= 2
                            ? "clCreateCommandQueueWithProperties"
                            : "clCreateCommandQueue",
                        err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                        "creating a command queue on \"%s\"", dev->info->name);
  *out = q;
  return NULL;
}

/* Asynchronous context errors (driver crashes, lost devices) reach only this
 * callback, from a driver thread; the host's log is thread-safe. */
static void CL_CALLBACK context_notify(const char *errinfo,
                                       const void *private_info, size_t cb,
                                       void *user_data) {
  (void)private_info;
  (void)cb;
  const tyto_plugin_host *host = user_data;
  host->log(host->ctx, TYTO_PLUGIN_LOG_WARN, "OpenCL context: %s",
            errinfo != NULL ? errinfo : "(no message)");
}

static tyto_plugin_error *fn_device_open(tyto_plugin_state *state,
                                         uint32_t ordinal,
                                         tyto_plugin_device **out) {
  const tyto_plugin_host *host = state->host;
  if (out == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "device_open: out is NULL");
  if (ordinal >= state->n_devs)
    return ocl_error(host, TYTO_PLUGIN_ERR_NOT_FOUND,
                     "device_open: no device opencl:%u (%u claimed)",
                     (unsigned)ordinal, (unsigned)state->n_devs);
  const ocl_devinfo *d = &state->devs[ordinal];
  tyto_plugin_device *dev = calloc(1, sizeof *dev);
  if (dev == NULL)
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "device_open: out of host memory");
  dev->state = state;
  dev->info = d;
  if (pthread_mutex_init(&dev->lock, NULL) != 0) {
    free(dev);
    return ocl_error(host, TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "device_open: cannot create a mutex");
  }

  /* One context per open device: contexts are the unit OpenCL shares
   * memory and events within, and a per-open context keeps independent
   * opens from seeing each other's objects. */
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   (cl_context_properties)d->platform, 0};
  cl_int err = CL_SUCCESS;
  dev->context =
      clCreateContext(props, 1, &d->id, context_notify, (void *)host, &err);
  tyto_plugin_error *e = NULL;
  if (dev->context == NULL || err != CL_SUCCESS) {
    e = ocl_error_cl(host, "clCreateContext",
                     err == CL_SUCCESS ? CL_OUT_OF_HOST_MEMORY : err,
                     "opening opencl:%u \"%s\" (platform \"%s\")",
                     (unsigned)ordinal, d->name, d->platform_name);
    dev->context = NULL;
  } else {
    e = ocl_queue_create(dev, &dev->sync_queue);
  }
  if (e != NULL) {
    if (dev->context != NULL)
      clReleaseContext(dev->context);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
    return e;
  }
  *out = dev;
  return NULL;
}

static void fn_device_close(tyto_plugin_device *dev) {
  if (dev == NULL)
    return;
  /* The host destroyed every stream and kernel first; the internal queue
   * holds no work across calls, but finish it in case a failed call left
   * something behind. */
  clFinish(dev->sync_queue);
  ocl_programs_release(dev);
  clReleaseCommandQueue(dev->sync_queue);
  clReleaseContext(dev->context);
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

static void fn_shutdown(tyto_plugin_state *state) {
  if (state == NULL)
    return;
  ocl_probe_release(state);
  free(state);
}

static const tyto_plugin_fns plugin_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = fn_probe,
    .device_query = fn_device_query,
    .device_open = fn_device_open,
    .shutdown = fn_shutdown,
};

static const tyto_plugin_device_fns device_fns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = fn_device_close,
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_free = ocl_buffer_free,
    .buffer_host_ptr = ocl_buffer_host_ptr,
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_synchronize = ocl_stream_synchronize,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .event_wait = ocl_event_wait,
    .event_synchronize = ocl_event_synchronize,
    .event_query = ocl_event_query,
    .copy_h2d = ocl_copy_h2d,
    .copy_d2h = ocl_copy_d2h,
    .copy_d2d = ocl_copy_d2d,
    /* Each open device has its own context, so no two devices share
     * buffers: the host stages peer copies through host memory. */
    .copy_peer = NULL,
    .host_alloc_pinned = NULL,
    .host_free_pinned = NULL,
    .supports_op = ocl_supports_op,
    .prepare = ocl_prepare,
    .kernel_release = ocl_kernel_release,
    .launch = ocl_launch,
};

static const tyto_plugin_option_doc plugin_options[] = {
    {sizeof(tyto_plugin_option_doc), "platform",
     "Use only OpenCL platforms whose name contains this text (case "
     "insensitive), e.g. \"NVIDIA\" or \"Portable Computing Language\". "
     "Default: every platform."},
    {sizeof(tyto_plugin_option_doc), "device_type",
     "Which OpenCL device types to claim: all, gpu, cpu or accelerator. "
     "Default: all (CPU devices such as PoCL included)."},
    {sizeof(tyto_plugin_option_doc), "cache_dir",
     "Where built kernel programs are kept across runs (in an opencl/ "
     "subdirectory), or \"off\". Default: $XDG_CACHE_HOME/tyto, else "
     "~/.cache/tyto."},
    {sizeof(tyto_plugin_option_doc), "gemm",
     "Who computes matrix products (MATMUL and the convolutions' GEMMs): "
     "clblast (CLBlast, tuned for GPUs), tyto (tyto's register-blocked "
     "kernels, made for CPU devices) or auto: tyto on CPU devices such as "
     "PoCL, CLBlast elsewhere. Batches whose strides do not collapse into "
     "one (CLBlast's batched call with a list of offsets) stay with "
     "CLBlast. Default: auto."},
    {sizeof(tyto_plugin_option_doc), "fp16_without_extension",
     "For testing: 1 runs f16 on devices without cl_khr_fp16 (through "
     "vload_half/vstore_half_rte, which every OpenCL device has), so the "
     "f16 kernels can be checked on PoCL. Default 0: such devices refuse "
     "f16."},
};

static const tyto_plugin_info plugin_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = "opencl",
    .vendor = "tyto",
    .version = OCL_PLUGIN_VERSION,
    .license = OCL_PLUGIN_LICENSE,
    .description = "OpenCL 1.2+ devices of any vendor through the ICD loader, "
                   "with kernels built at run time",
    .fns = &plugin_fns,
    .device_fns = &device_fns,
    .options = plugin_options,
    .n_options = sizeof plugin_options / sizeof plugin_options[0],
};

/* The entry point: checks the host table and allocates the (empty) state.
 * No OpenCL call happens here, so loading the plugin stays cheap even when
 * a vendor driver is slow to initialise; that work is done by probe(). */
TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_opencl_LTX_init(const tyto_plugin_host *host,
                            const tyto_plugin_info **info,
                            tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_opencl_LTX_init(const tyto_plugin_host *host,
                            const tyto_plugin_info **info,
                            tyto_plugin_state **state) {
  if (info != NULL)
    *info = NULL;
  if (state != NULL)
    *state = NULL;
  /* Without error_new no error can be made: leaving *info NULL is the only
   * signal left. A host built from plugin.h always has it. */
  if (host == NULL ||
      !TYTO_PLUGIN_HAS_FIELD(host, tyto_plugin_host, error_new) ||
      host->error_new == NULL)
    return NULL;
  if (host->log == NULL || host->option == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "opencl plugin: the host table lacks the required "
                           "log() or option() service");
  if (host->abi_major != TYTO_PLUGIN_ABI_MAJOR)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "opencl plugin: built for plugin ABI %d.%d, the "
                           "host speaks %u.%u; rebuild the plugin against "
                           "this tyto",
                           TYTO_PLUGIN_ABI_MAJOR, TYTO_PLUGIN_ABI_MINOR,
                           (unsigned)host->abi_major,
                           (unsigned)host->abi_minor);
  if (info == NULL || state == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "opencl plugin: init called with NULL info or "
                           "state");
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (st == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "opencl plugin: out of host memory at init");
  st->host = host;
  *info = &plugin_info;
  *state = st;
  return NULL;
}
