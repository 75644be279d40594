/* The machine as hwloc sees it, and the hardware offer made to plugins. */
#ifndef TYTO_RUNTIME_TOPOLOGY_H
#define TYTO_RUNTIME_TOPOLOGY_H

#include <stddef.h>

#include <tyto/context.h>
#include <tyto/plugin.h>

typedef struct topology {
  tyto_topology pub;
  tyto_pci_device *pci;         /* pub.n_pci entries */
  const char **pci_nodeset;     /* NUMA nodes near each PCI device */
  tyto_plugin_hw_device *offer; /* n_offer: the CPU entry, then each PCI */
  size_t n_offer;
  char **strings; /* everything the structs above point into */
  size_t n_strings, cap_strings;
} topology;

/* Loads the topology of this machine, or of an hwloc XML file when `xml` is
 * not NULL. On failure returns a status with tyto_errmsg() set. */
tyto_status topology_load(topology *t, const char *xml);
void topology_free(topology *t);

/* Index into pub.pci of the PCI device with this bus id, or -1. */
int topology_find_pci(const topology *t, const char *bus_id);

#endif
