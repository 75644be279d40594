/*
 * PCI addresses of OpenCL devices and their match to the host's offer.
 *
 * Drivers report an address through cl_khr_pci_bus_info (domain included),
 * NVIDIA's attribute query (domain only on newer drivers) or AMD's topology
 * query (no domain); probe.c asks them. Matching it to an offered hwloc PCI
 * entry is what lets tyto know that one card seen through two plugins (CUDA
 * and OpenCL) is one card.
 */
#ifndef TYTO_OPENCL_PCI_H
#define TYTO_OPENCL_PCI_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

typedef struct {
  int known;        /* the driver reported an address */
  int domain_known; /* ... including the PCI domain */
  unsigned domain, bus, device, function;
} pci_addr;

/* Parses an offered entry's PCI address into *out; 0 when it is not a PCI
 * entry or carries no parseable "dddd:bb:dd.f". */
int ocl_offer_pci(const tyto_plugin_hw_device *o, pci_addr *out);

/* The `index` of the offered PCI entry at address *a, or -1. Without a
 * domain the match must be unique: guessing on a multi-domain server would
 * attach the device to the wrong NUMA node. On a match *numa is the entry's
 * NUMA node and bus_id its "dddd:bb:dd.f"; otherwise *numa is -1. */
int32_t ocl_match_offer(const pci_addr *a, const tyto_plugin_hw_device *offer,
                        uint32_t n_offer, int32_t *numa, char *bus_id,
                        size_t bus_id_size);

#endif /* TYTO_OPENCL_PCI_H */
