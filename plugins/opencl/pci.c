/*
 * Matching a device's PCI address, as its OpenCL driver reports it, to the
 * hardware entries the host offered (see pci.h). No OpenCL calls: the unit
 * tests compile this file on its own.
 */
#include "pci.h"

#include <stdio.h>

/* Offered entries are strided by the host's struct_size, which is larger
 * than ours when the host is newer. */
const tyto_plugin_hw_device *ocl_offer_at(const tyto_plugin_hw_device *offer,
                                          uint32_t i) {
  return (const tyto_plugin_hw_device *)(const void *)((const char *)offer +
                                                       (size_t)i *
                                                           offer->struct_size);
}

/* Parses an offered entry's PCI address; 0 when it is not a PCI entry or
 * carries no parseable "dddd:bb:dd.f". */
int ocl_offer_pci(const tyto_plugin_hw_device *o, pci_addr *out) {
  if (!TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, pci_bus_id) ||
      o->kind != TYTO_PLUGIN_HW_PCI || o->pci_bus_id == NULL)
    return 0;
  unsigned d, b, s, f;
  if (sscanf(o->pci_bus_id, "%x:%x:%x.%x", &d, &b, &s, &f) != 4)
    return 0;
  *out = (pci_addr){1, 1, d, b, s, f};
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
    const tyto_plugin_hw_device *o = ocl_offer_at(offer, i);
    pci_addr oa;
    if (!ocl_offer_pci(o, &oa) || !same_pci(a, &oa))
      continue;
    hits++;
    found = (int32_t)o->index;
    *numa = TYTO_PLUGIN_HAS_FIELD(o, tyto_plugin_hw_device, numa_node)
                ? o->numa_node
                : -1;
    snprintf(bus_id, bus_id_size, "%04x:%02x:%02x.%x", oa.domain, oa.bus,
             oa.device, oa.function);
  }
  if (hits == 1)
    return found;
  *numa = -1;
  return -1;
}

