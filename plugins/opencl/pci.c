/*
 * Matching a device's PCI address, as its OpenCL driver reports it, to the
 * hardware entries the host offered (see pci.h). No OpenCL calls: the unit
 * tests compile this file on its own.
 */
#include "pci.h"

#include "../common/common.h"
#include "../common/pci.h"

/* Parses an offered entry's PCI address; 0 when it is not a PCI entry or
 * carries no parseable "dddd:bb:dd.f" (hwloc always gives the domain). */
int ocl_offer_pci(const tyto_plugin_hw_device *o, pci_addr *out) {
  tpc_pci p;
  if (!TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, pci_bus_id) ||
      o->kind != TYTO_PLUGIN_HW_PCI || !tpc_pci_parse(o->pci_bus_id, &p) ||
      !p.domain_known)
    return 0;
  *out = (pci_addr){1, 1, p.domain, p.bus, p.device, p.function};
  return 1;
}

static int same_pci(const pci_addr *dev, const pci_addr *offered) {
  return dev->bus == offered->bus && dev->device == offered->device &&
         dev->function == offered->function &&
         (!dev->domain_known || dev->domain == offered->domain);
}

/* The offered entry at the device's address, or -1. Without a domain the
 * match must be unique: guessing on a multi-domain server would attach the
 * device to the wrong NUMA node. */
int32_t ocl_match_offer(const pci_addr *a, const tyto_plugin_hw_device *offer,
                        uint32_t n_offer, int32_t *numa, char *bus_id,
                        size_t bus_id_size) {
  int32_t found = -1;
  int hits = 0;
  if (!a->known)
    return -1;
  for (uint32_t i = 0; i < n_offer; i++) {
    const tyto_plugin_hw_device *o = tpc_at(offer, i);
    pci_addr oa;
    if (!ocl_offer_pci(o, &oa) || !same_pci(a, &oa))
      continue;
    hits++;
    found = (int32_t)o->index;
    *numa = TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, numa_node)
                ? o->numa_node
                : -1;
    tpc_pci_format(&(tpc_pci){1, oa.domain, oa.bus, oa.device, oa.function},
                   bus_id, bus_id_size);
  }
  if (hits == 1)
    return found;
  *numa = -1;
  return -1;
}
