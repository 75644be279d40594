/*
 * Device discovery: which CUDA devices exist, which offered hwloc PCI device
 * each one is (matched by normalised bus id), which to claim and why the
 * others are refused. probe() makes the process's first CUDA runtime call,
 * which is where cudart looks for the driver (libcuda.so.1): a missing or
 * too old driver is reported here, as a refusal of every offered NVIDIA GPU
 * and as probe's error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/pci.h"
#include "cuda_plugin.h"

#define NVIDIA_PCI_VENDOR 0x10de

/* Rewrites a PCI bus id in any of the spellings in use ("00000000:65:00.0"
 * from CUDA, "0000:65:00.0" from hwloc, "65:00.0", upper or lower case) as
 * "dddd:bb:dd.f" lower-case, so the two sides compare with strcmp. Returns
 * 0 when `in` is not a bus id. */
static int normalise_bus_id(const char *in, char *out, size_t size) {
  tpc_pci a;
  if (!tpc_pci_parse(in, &a))
    return 0;
  tpc_pci_format(&a, out, size);
  return 1;
}

/* The offered entry's fields, read only where its struct_size covers them. */
typedef struct offer_view {
  uint32_t index;
  int is_nvidia_pci;
  int32_t numa_node;
  char bus_id[24]; /* normalised, "" when absent */
} offer_view;

static offer_view view_offer(const tyto_plugin_hw_device *o) {
  offer_view v = {0, 0, -1, ""};
  uint32_t kind = UINT32_MAX;
  if (TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, index))
    v.index = o->index;
  if (TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, kind))
    kind = o->kind;
  if (TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, numa_node))
    v.numa_node = o->numa_node;
  if (kind == TYTO_PLUGIN_HW_PCI &&
      TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, pci_vendor_id))
    v.is_nvidia_pci = o->pci_vendor_id == NVIDIA_PCI_VENDOR;
  if (kind == TYTO_PLUGIN_HW_PCI &&
      TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, pci_bus_id) &&
      !normalise_bus_id(o->pci_bus_id, v.bus_id, sizeof v.bus_id))
    v.bus_id[0] = '\0';
  return v;
}

/* Why cudaGetDeviceCount() failed, in words a user can act on. */
static tyto_plugin_code explain_no_devices(cudaError_t e, char *buf,
                                           size_t size) {
  char why[256];
  int driver = 0, runtime = 0;
  tcu_describe(e, why, sizeof why);
  (void)cudaDriverGetVersion(&driver); /* 0 when no driver is installed */
  (void)cudaRuntimeGetVersion(&runtime);
  if (e == cudaSuccess) {
    snprintf(buf, size,
             "the CUDA driver lists no devices; check nvidia-smi and "
             "CUDA_VISIBLE_DEVICES");
    return TYTO_PLUGIN_ERR_NOT_FOUND;
  }
  if ((e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) &&
      driver == 0) {
    snprintf(buf, size,
             "CUDA driver not found (%s); install the NVIDIA driver "
             "(libcuda.so.1) for CUDA %d.%d or newer",
             why, runtime / 1000, runtime % 1000 / 10);
    return TYTO_PLUGIN_ERR_UNAVAILABLE;
  }
  if (e == cudaErrorInsufficientDriver) {
    snprintf(buf, size,
             "CUDA driver %d.%d is older than the CUDA runtime %d.%d this "
             "plugin uses (%s); upgrade the NVIDIA driver",
             driver / 1000, driver % 1000 / 10, runtime / 1000,
             runtime % 1000 / 10, why);
    return TYTO_PLUGIN_ERR_UNAVAILABLE;
  }
  if (e == cudaErrorNoDevice) {
    snprintf(buf, size,
             "no CUDA device found (%s); check nvidia-smi, that the NVIDIA "
             "kernel module is loaded, and CUDA_VISIBLE_DEVICES",
             why);
    return TYTO_PLUGIN_ERR_NOT_FOUND;
  }
  snprintf(buf, size,
           "cudaGetDeviceCount failed (%s); check the NVIDIA driver "
           "installation with nvidia-smi",
           why);
  return tcu_code_of(e);
}

/* Reads device d's properties into *hw. Returns 1, or 0 with a reason. */
static int read_device(int d, tcu_hw *hw, char *reason, size_t size) {
  struct cudaDeviceProp p;
  char bus[32], why[256];
  cudaError_t e = cudaGetDeviceProperties(&p, d);
  if (e != cudaSuccess) {
    tcu_describe(e, why, sizeof why);
    (void)cudaGetLastError();
    snprintf(reason, size,
             "cannot read the properties of CUDA device %d (%s); check "
             "nvidia-smi",
             d, why);
    return 0;
  }
  snprintf(hw->name, sizeof hw->name, "%s", p.name);
  hw->cc_major = p.major;
  hw->cc_minor = p.minor;
  /* No bf16 tensor cores before Ampere: bf16 products and convolutions
   * still run, in f32 arithmetic (blas.c, conv.c). */
  if (p.major < 8)
    snprintf(hw->label, sizeof hw->label,
             "%.255s (compute capability %d.%d: bf16 computed in f32, "
             "without tensor cores)",
             p.name, p.major, p.minor);
  else
    snprintf(hw->label, sizeof hw->label, "%s", hw->name);
  hw->memory_bytes = p.totalGlobalMem;
  hw->sm_count =
      p.multiProcessorCount > 0 ? (uint32_t)p.multiProcessorCount : 0;
  hw->numa_node = -1;
  if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, d) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(bus, sizeof bus, "%x:%x:%x.0", (unsigned)p.pciDomainID,
             (unsigned)p.pciBusID, (unsigned)p.pciDeviceID);
  }
  if (!normalise_bus_id(bus, hw->pci_bus_id, sizeof hw->pci_bus_id))
    hw->pci_bus_id[0] = '\0';
  return 1;
}

/* Fills can_peer for the claimed devices and any_peer when some pair can
 * reach each other both ways. */
static void find_peers(tyto_plugin_state *st) {
  int n = st->n_hw;
  for (int a = 0; a < n; a++) {
    for (int b = 0; b < n; b++) {
      int ok = 0;
      if (a == b || !st->hw[a].claimed || !st->hw[b].claimed)
        continue;
      if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess) {
        (void)cudaGetLastError();
        ok = 0;
      }
      st->can_peer[a * n + b] = ok != 0;
    }
  }
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++)
      if (st->can_peer[a * n + b] && st->can_peer[b * n + a])
        st->any_peer = 1;
}

tyto_plugin_error *tcu_probe(tyto_plugin_state *st,
                             const tyto_plugin_hw_device *offer,
                             uint32_t n_offer,
                             const tyto_plugin_claims *claims) {
  const tyto_plugin_host *host = st->host;
  offer_view *views = NULL;
  unsigned char *used = NULL;
  char reason[512];
  int count = 0, driver = 0;
  cudaError_t e;

  if (claims == NULL ||
      !TYTO_PLUGIN_HAS_FIELD(claims, tyto_plugin_claims, refuse) ||
      claims->claim == NULL || claims->refuse == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "probe: the claims table lacks claim/refuse");
  if (n_offer > 0 && offer == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "probe: %u offered devices but no array", n_offer);
  /* The device table below backs strings handed out by device_query(),
   * which must stay valid until shutdown: it is built once. */
  if (st->probed)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "probe: called twice; the host calls it once");
  st->probed = 1;

  if (n_offer > 0) {
    views = calloc(n_offer, sizeof *views);
    used = calloc(n_offer, 1);
    if (views == NULL || used == NULL) {
      free(views);
      free(used);
      return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                             "probe: out of host memory");
    }
    for (uint32_t i = 0; i < n_offer; i++)
      views[i] = view_offer(tcu_abi_at(offer, sizeof *offer, i));
  }

  /* The first runtime call: this is where cudart looks for libcuda.so.1. */
  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    tyto_plugin_code code = explain_no_devices(e, reason, sizeof reason);
    (void)cudaGetLastError();
    for (uint32_t i = 0; i < n_offer; i++)
      if (views[i].is_nvidia_pci)
        claims->refuse(claims->ctx, (int32_t)views[i].index, NULL, reason);
    free(views);
    free(used);
    return host->error_new(code, "%s", reason);
  }

  st->hw = calloc((size_t)count, sizeof *st->hw);
  st->can_peer = calloc((size_t)count * (size_t)count, 1);
  st->peer_enabled = calloc((size_t)count * (size_t)count, 1);
  if (st->hw == NULL || st->can_peer == NULL || st->peer_enabled == NULL) {
    free(views);
    free(used);
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "probe: out of host memory for %d devices", count);
  }
  st->n_hw = count;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    snprintf(st->driver_version, sizeof st->driver_version, "%d.%d",
             driver / 1000, driver % 1000 / 10);

  for (int d = 0; d < count; d++) {
    tcu_hw *hw = &st->hw[d];
    int32_t hw_index = -1;
    char label[300];
    if (!read_device(d, hw, reason, sizeof reason)) {
      snprintf(label, sizeof label, "CUDA device %d", d);
      claims->refuse(claims->ctx, -1, label, reason);
      continue;
    }
    for (uint32_t i = 0; i < n_offer && hw->pci_bus_id[0]; i++) {
      if (!used[i] && strcmp(views[i].bus_id, hw->pci_bus_id) == 0) {
        used[i] = 1;
        hw_index = (int32_t)views[i].index;
        hw->numa_node = views[i].numa_node;
        break;
      }
    }
    if (hw->cc_major < TCU_MIN_CC_MAJOR ||
        (hw->cc_major == TCU_MIN_CC_MAJOR && hw->cc_minor < TCU_MIN_CC_MINOR)) {
      snprintf(reason, sizeof reason,
               "compute capability %d.%d is below the %d.%d this plugin needs "
               "(Pascal or newer); use another GPU or the cpu plugin",
               hw->cc_major, hw->cc_minor, TCU_MIN_CC_MAJOR, TCU_MIN_CC_MINOR);
      claims->refuse(claims->ctx, hw_index, hw->name, reason);
      continue;
    }
    hw->claimed = 1;
    claims->claim(claims->ctx, hw_index, (uint32_t)d, hw->label);
    host->log(host->ctx, TYTO_PLUGIN_LOG_INFO,
              "cuda:%d: %s, compute capability %d.%d, bus %s%s", d, hw->name,
              hw->cc_major, hw->cc_minor,
              hw->pci_bus_id[0] ? hw->pci_bus_id : "unknown",
              hw_index < 0 ? " (not in the hwloc offer)" : "");
  }

  /* NVIDIA GPUs hwloc saw that the runtime does not list. */
  for (uint32_t i = 0; i < n_offer; i++) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (!views[i].is_nvidia_pci || used[i])
      continue;
    if (visible != NULL)
      snprintf(reason, sizeof reason,
               "the CUDA runtime does not list bus %s; CUDA_VISIBLE_DEVICES="
               "\"%s\" may hide it",
               views[i].bus_id[0] ? views[i].bus_id : "(unknown)", visible);
    else
      snprintf(reason, sizeof reason,
               "the CUDA runtime does not list bus %s; check nvidia-smi "
               "(is it a compute GPU, and is the driver bound to it?)",
               views[i].bus_id[0] ? views[i].bus_id : "(unknown)");
    claims->refuse(claims->ctx, (int32_t)views[i].index, NULL, reason);
  }

  find_peers(st);
  free(views);
  free(used);
  return NULL;
}
