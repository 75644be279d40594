/*
 * The CPU plugin: entry point, hardware claim, device description.
 *
 * It loads through the same path as any third-party plugin: libtyto knows
 * nothing of it beyond the ABI. It claims the machine's processors as one
 * device, cpu:0, with the cores and NUMA nodes hwloc reports for this
 * process, and binds large buffers to those NUMA nodes.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "../common/hostmem.h"
#include "convert.h"
#include "cpu.h"
#include "onednn.h"
#include "pool.h"

/* [cpu] threads: a whole number from 1 to the hardware threads cpu:0 is
 * given (more would only take turns on them); unset: one per core. */
static tyto_plugin_error *parse_threads(const tyto_plugin_host *h,
                                        const char *v, uint32_t cores,
                                        uint32_t pus, uint32_t *out) {
  *out = cores;
  if (!v)
    return NULL;
  const char *s = v;
  while (*s == ' ' || *s == '\t')
    s++;
  char *end = NULL;
  errno = 0;
  long long n = *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : -1;
  while (end && (*end == ' ' || *end == '\t'))
    end++;
  if (!end || *end || errno == ERANGE || n < 1 || n > (long long)pus)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "option threads=\"%.100s\" is not valid: expected a "
                        "whole number from 1 to %u (cpu:0 has %u core%s and "
                        "%u hardware thread%s; default: one thread per core)",
                        v, pus, cores, cores == 1 ? "" : "s", pus,
                        pus == 1 ? "" : "s");
  *out = (uint32_t)n;
  return NULL;
}

static tyto_plugin_error *cpu_probe(tyto_plugin_state *st,
                                    const tyto_plugin_hw_device *offer,
                                    uint32_t n_offer,
                                    const tyto_plugin_claims *claims) {
  const tyto_plugin_host *h = st->host;
  const tyto_plugin_hw_device *cpu = NULL;
  for (uint32_t i = 0; i < n_offer && !cpu; i++) {
    const tyto_plugin_hw_device *o =
        TYTO_PLUGIN_AT(tyto_plugin_hw_device, offer, i);
    if (o->kind == TYTO_PLUGIN_HW_CPU)
      cpu = o;
  }
  if (!cpu)
    return h->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                        "the host offered no CPU entry (hwloc found no "
                        "processors?)");

  snprintf(st->name, sizeof st->name, "%s",
           cpu->name && cpu->name[0] ? cpu->name : "CPU");
  snprintf(st->nodeset, sizeof st->nodeset, "%s",
           cpu->nodeset ? cpu->nodeset : "");
  snprintf(st->cpuset, sizeof st->cpuset, "%s", cpu->cpuset ? cpu->cpuset : "");
  st->cores = cpu->cores ? cpu->cores : 1;
  st->pus = cpu->pus ? cpu->pus : st->cores;
  st->numa_nodes = cpu->numa_nodes ? cpu->numa_nodes : 1;
  st->numa_node = cpu->numa_node;
  if (st->pus < st->cores)
    st->pus = st->cores;
  tyto_plugin_error *e = parse_threads(h, h->option(h->ctx, "threads"),
                                       st->cores, st->pus, &st->threads);
  if (e)
    return e;

  /* A topology of our own, without I/O, to bind memory with. hwloc's GPU
   * components are kept out: they would initialise every GPU runtime on
   * the machine for nothing. */
  static const char *const skip[] = {"opencl", "cuda",      "nvml",
                                     "rsmi",   "levelzero", "gl"};
  int failed = hwloc_topology_init(&st->topo) != 0;
  for (size_t i = 0; !failed && i < sizeof skip / sizeof skip[0]; i++)
    hwloc_topology_set_components(
        st->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
  if (failed || hwloc_topology_load(st->topo) != 0) {
    if (st->topo)
      hwloc_topology_destroy(st->topo);
    st->topo = NULL;
    return h->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                        "hwloc could not load the topology");
  }
  /* The rule libtyto's topology uses too (plugins/common/hostmem.h). */
  st->memory_bytes =
      tpc_host_memory(hwloc_get_root_obj(st->topo)->total_memory);
  const char *vendor = NULL;
  hwloc_obj_t pkg = hwloc_get_obj_by_type(st->topo, HWLOC_OBJ_PACKAGE, 0);
  if (pkg)
    vendor = hwloc_obj_get_info_by_name(pkg, "CPUVendor");
  snprintf(st->vendor, sizeof st->vendor, "%s",
           !vendor                               ? ""
           : strcmp(vendor, "AuthenticAMD") == 0 ? "AMD"
           : strcmp(vendor, "GenuineIntel") == 0 ? "Intel"
                                                 : vendor);
  /* How bf16 and f16 GEMMs run here, for tyto-info (the description's
   * driver_version: what this device's kernels run on). */
  cpu_gemm16_describe(st->gemm16, sizeof st->gemm16);
  size_t used = strlen(st->gemm16);
  snprintf(st->gemm16 + used, sizeof st->gemm16 - used, "; %s",
           cpu_cvt_describe());
  claims->claim(claims->ctx, (int32_t)cpu->index, 0, st->name);
  return NULL;
}

static tyto_plugin_error *cpu_device_query(tyto_plugin_state *st,
                                           uint32_t ordinal,
                                           tyto_plugin_device_info *info) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "cpu has one device (cpu:0), not cpu:%u",
                               ordinal);
#define SET(field, value)                                                      \
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, field))             \
    info->field = (value);
  SET(name, st->name)
  SET(vendor, st->vendor)
  /* No driver: tyto-info shows this field after the vendor, so it says
   * how 16-bit GEMMs run and how 16-bit data are converted. */
  SET(driver_version, st->gemm16)
  SET(dtypes, TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F64) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F16) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_BF16) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I32) |
                  TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_I64))
  SET(flags, TYTO_PLUGIN_CAP_UNIFIED_MEMORY | TYTO_PLUGIN_CAP_ASYNC |
                 TYTO_PLUGIN_CAP_PEER_COPY)
  SET(memory_bytes, st->memory_bytes)
  SET(alignment, CPU_ALIGN)
  SET(max_alloc_bytes, st->memory_bytes)
  SET(compute_units, st->threads)
  SET(numa_node, st->numa_node)
  SET(pci_bus_id, "")
#undef SET
  return NULL;
}

static tyto_plugin_error *cpu_device_open(tyto_plugin_state *st,
                                          uint32_t ordinal,
                                          tyto_plugin_device **out) {
  if (ordinal != 0 || !st->topo)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "cpu:%u was not claimed", ordinal);
  tyto_plugin_device *dev = calloc(1, sizeof *dev);
  if (!dev)
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                               "out of memory opening cpu:0");
  dev->st = st;
  dev->nodeset = hwloc_bitmap_alloc();
  if (!dev->nodeset ||
      (st->nodeset[0] &&
       hwloc_bitmap_list_sscanf(dev->nodeset, st->nodeset) != 0)) {
    hwloc_bitmap_free(dev->nodeset);
    free(dev);
    return st->host->error_new(TYTO_PLUGIN_ERR_INTERNAL,
                               "cannot read the NUMA node set '%s'",
                               st->nodeset);
  }
  /* Our pool threads every OpenBLAS call (batches of small GEMMs, blocks
   * of a big one), so OpenBLAS runs single-threaded inside each task: its
   * own threads would spin beside our workers on the same cores (a 2-core
   * MLP step spent a third of its time in their sched_yield loops), and
   * [cpu] threads = 1 means one thread, not OpenBLAS's own count. Set
   * here, before any kernel (a GEMM, an im2col convolution, a triangular
   * solve) calls it. */
  openblas_set_num_threads(1);
  dev->pool = cpu_pool_new(st->threads, st->cpuset);
  if (!dev->pool) {
    hwloc_bitmap_free(dev->nodeset);
    free(dev);
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                               "cannot start the worker pool of cpu:0");
  }
  *out = dev;
  return NULL;
}

static void cpu_device_close(tyto_plugin_device *dev) {
  if (!dev)
    return;
  cpu_pool_free(dev->pool);
  hwloc_bitmap_free(dev->nodeset);
  free(dev);
}

static void cpu_shutdown(tyto_plugin_state *st) {
  if (!st)
    return;
  if (st->topo)
    hwloc_topology_destroy(st->topo);
  pthread_cond_destroy(&st->marker_cv);
  pthread_mutex_destroy(&st->marker_mu);
  free(st);
}

static const tyto_plugin_fns cpu_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = cpu_probe,
    .device_query = cpu_device_query,
    .device_open = cpu_device_open,
    .shutdown = cpu_shutdown,
};

static const tyto_plugin_device_fns cpu_device_fns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = cpu_device_close,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_host_ptr = cpu_buffer_host_ptr,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
    .event_synchronize = cpu_event_synchronize,
    .event_query = cpu_event_query,
    .copy_h2d = cpu_copy_h2d,
    .copy_d2h = cpu_copy_d2h,
    .copy_d2d = cpu_copy_d2d,
    .copy_peer = cpu_copy_peer,
    .supports_op = cpu_supports_op,
    .prepare = cpu_prepare,
    .kernel_release = cpu_kernel_release,
    .launch = cpu_launch,
};

static const tyto_plugin_option_doc cpu_options[] = {
    {sizeof(tyto_plugin_option_doc), "threads",
     "How many threads run cpu:0's kernels: its worker pool (the stream's "
     "thread included; each worker bound to a core of its own, then to the "
     "cores' other hardware threads), OpenBLAS and oneDNN's OpenMP team, "
     "from 1 to the hardware threads the process may use. Default: one "
     "per core."},
};

static const tyto_plugin_info cpu_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = "cpu",
    .vendor = "tyto",
    .version = PACKAGE_VERSION,
    .license = "MIT",
    .description = "host processors: NUMA-local memory, worker-thread streams",
    .fns = &cpu_fns,
    .device_fns = &cpu_device_fns,
    .options = cpu_options,
    .n_options = sizeof cpu_options / sizeof cpu_options[0],
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_cpu_LTX_init(const tyto_plugin_host *host,
                         const tyto_plugin_info **info,
                         tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_cpu_LTX_init(const tyto_plugin_host *host,
                         const tyto_plugin_info **info,
                         tyto_plugin_state **state) {
  if (!host->option)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "the host gave the cpu plugin no option() service "
                           "(required by the ABI)");
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "out of memory initialising the cpu plugin");
  st->host = host;
  st->numa_node = -1;
  pthread_mutex_init(&st->marker_mu, NULL);
  pthread_cond_init(&st->marker_cv, NULL);
  *info = &cpu_info;
  *state = st;
  return NULL;
}
