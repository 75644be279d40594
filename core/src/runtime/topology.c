/*
 * Hardware discovery through hwloc: packages, cores, PUs and NUMA nodes of
 * this process's cpuset, and PCI GPUs, 3D controllers and accelerators with
 * their nearest NUMA node and CPUs. The result is kept as plain structs (no
 * hwloc handle survives) so plugins and tools never need hwloc themselves.
 */
#include "config.h"

#include "topology.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "file.h"
#include "strlist.h"
/* The host-memory rule shared with the CPU plugin (libc only). */
#include "../../../plugins/common/hostmem.h"

/* Keeps `s` (taking ownership) and returns it, or "" on failure so callers
 * never see NULL. */
static const char *keep(topology *t, char *s) {
  if (!s)
    return "";
  if (t->n_strings == t->cap_strings) {
    size_t cap = t->cap_strings ? 2 * t->cap_strings : 32;
    char **ns = realloc(t->strings, cap * sizeof *ns);
    if (!ns) {
      free(s);
      return "";
    }
    t->strings = ns;
    t->cap_strings = cap;
  }
  t->strings[t->n_strings++] = s;
  return s;
}

static const char *keep_bitmap(topology *t, hwloc_const_bitmap_t set) {
  char *s = NULL;
  if (!set || hwloc_bitmap_list_asprintf(&s, set) < 0)
    return "";
  return keep(t, s);
}

/* GPUs (0x03xx display), processing accelerators (0x12xx) and
 * coprocessors (0x0b40) are what device plugins may want. */
static int is_compute_class(unsigned class_id) {
  return (class_id >> 8) == 0x03 || (class_id >> 8) == 0x12 ||
         class_id == 0x0b40;
}

/* The NUMA node of a nodeset when it is exactly one node; -1 when it is
 * unknown or spans several (a device hanging off the machine, not off one
 * package): claiming locality there would mislead placement. */
static int single_numa(hwloc_const_nodeset_t nodeset) {
  return nodeset && hwloc_bitmap_weight(nodeset) == 1
             ? hwloc_bitmap_first(nodeset)
             : -1;
}

static void fill_cpu(topology *t, hwloc_topology_t topo, int from_xml) {
  tyto_topology *p = &t->pub;
  int n;
  n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  p->packages = n > 0 ? (uint32_t)n : 1;
  n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  p->cores = n > 0 ? (uint32_t)n : 1;
  n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  p->pus = n > 0 ? (uint32_t)n : 1;
  n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  p->numa_nodes = n > 0 ? (uint32_t)n : 1;
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  p->cpuset = keep_bitmap(t, root->cpuset);
  /* This machine's memory by the rule the CPU plugin uses too, so that
   * tyto-info's Topology line and cpu:0 agree; a topology from an XML file
   * describes another machine and keeps its own figure. */
  p->memory_bytes =
      from_xml ? root->total_memory : tpc_host_memory(root->total_memory);
  const char *model = NULL;
  hwloc_obj_t pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
  if (pkg)
    model = hwloc_obj_get_info_by_name(pkg, "CPUModel");
  if (!model)
    model = hwloc_obj_get_info_by_name(root, "CPUModel");
  p->cpu_model = keep(t, rt_strdup(model ? model : ""));
}

static size_t count_pci(hwloc_topology_t topo) {
  size_t n = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o;
       o = hwloc_get_next_pcidev(topo, o))
    n += is_compute_class(o->attr->pcidev.class_id);
  return n;
}

static void fill_pci(topology *t, hwloc_topology_t topo) {
  size_t i = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o;
       o = hwloc_get_next_pcidev(topo, o)) {
    const struct hwloc_pcidev_attr_s *a = &o->attr->pcidev;
    if (!is_compute_class(a->class_id))
      continue;
    tyto_pci_device *d = &t->pci[i++];
    d->bus_id = keep(t, rt_asprintf("%04x:%02x:%02x.%01x", a->domain, a->bus,
                                    a->dev, a->func));
    d->vendor_id = a->vendor_id;
    d->device_id = a->device_id;
    d->class_id = a->class_id;
    const char *v = hwloc_obj_get_info_by_name(o, "PCIVendor");
    const char *m = hwloc_obj_get_info_by_name(o, "PCIDevice");
    d->vendor = keep(t, rt_strdup(v ? v : ""));
    d->name = keep(t, rt_strdup(m ? m : ""));
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
    d->cpuset = keep_bitmap(t, anc ? anc->cpuset : NULL);
    t->pci_nodeset[i - 1] = keep_bitmap(t, anc ? anc->nodeset : NULL);
    d->numa_node = single_numa(anc ? anc->nodeset : NULL);
  }
  t->pub.n_pci = i;
  t->pub.pci = t->pci;
}

static void fill_offer(topology *t, hwloc_topology_t topo) {
  tyto_plugin_hw_device *cpu = &t->offer[0];
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  cpu->struct_size = sizeof *cpu;
  cpu->index = 0;
  cpu->kind = TYTO_PLUGIN_HW_CPU;
  cpu->name = t->pub.cpu_model;
  cpu->numa_node = single_numa(root->nodeset);
  cpu->cpuset = t->pub.cpuset;
  cpu->nodeset = keep_bitmap(t, root->nodeset);
  cpu->pci_bus_id = "";
  cpu->packages = t->pub.packages;
  cpu->cores = t->pub.cores;
  cpu->pus = t->pub.pus;
  cpu->numa_nodes = t->pub.numa_nodes;
  for (size_t i = 0; i < t->pub.n_pci; i++) {
    const tyto_pci_device *d = &t->pci[i];
    tyto_plugin_hw_device *o = &t->offer[i + 1];
    o->struct_size = sizeof *o;
    o->index = (uint32_t)(i + 1);
    o->kind = TYTO_PLUGIN_HW_PCI;
    o->name = d->name;
    o->numa_node = d->numa_node;
    o->cpuset = d->cpuset;
    o->nodeset = t->pci_nodeset[i];
    o->pci_vendor_id = d->vendor_id;
    o->pci_device_id = d->device_id;
    o->pci_class_id = d->class_id;
    o->pci_bus_id = d->bus_id;
  }
  t->n_offer = t->pub.n_pci + 1;
}

tyto_status topology_load(topology *t, const char *xml) {
  memset(t, 0, sizeof *t);
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "hwloc: cannot initialise a topology");
  /* PCI devices are filtered out by default; keep the important ones. */
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  /* hwloc's own GPU components would initialise every OpenCL, CUDA, ROCm
   * and Level Zero runtime on the machine just to name OS devices: slow,
   * and the device plugins do that job. The PCI tree is all we need. */
  static const char *const skip[] = {"opencl", "cuda",      "nvml",
                                     "rsmi",   "levelzero", "gl"};
  for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
    hwloc_topology_set_components(
        topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
  const char *why = NULL;
  int fd = xml ? rt_open_regular(xml, &why) : -1;
  if (xml && fd < 0) {
    hwloc_topology_destroy(topo);
    return rt_fail(TYTO_ERR_IO, "hwloc: cannot use topology file '%s': %s", xml,
                   why);
  }
  if (fd >= 0)
    close(fd);
  if (xml && hwloc_topology_set_xml(topo, xml) != 0) {
    hwloc_topology_destroy(topo);
    return rt_fail(TYTO_ERR_IO,
                   "hwloc: cannot use topology file '%s' (is it hwloc XML, "
                   "as written by 'lstopo --of xml'?)",
                   xml);
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    if (xml)
      return rt_fail(TYTO_ERR_IO,
                     "hwloc: cannot use topology file '%s' (is it hwloc XML, "
                     "as written by 'lstopo --of xml'?)",
                     xml);
    return rt_fail(TYTO_ERR_IO, "hwloc: cannot load this machine's topology");
  }
  size_t n_pci = count_pci(topo);
  t->pci = calloc(n_pci ? n_pci : 1, sizeof *t->pci);
  t->pci_nodeset = calloc(n_pci ? n_pci : 1, sizeof *t->pci_nodeset);
  t->offer = calloc(n_pci + 1, sizeof *t->offer);
  if (!t->pci || !t->pci_nodeset || !t->offer) {
    hwloc_topology_destroy(topo);
    topology_free(t);
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "out of memory reading the topology");
  }
  fill_cpu(t, topo, xml != NULL);
  fill_pci(t, topo);
  fill_offer(t, topo);
  hwloc_topology_destroy(topo);
  return TYTO_OK;
}

void topology_free(topology *t) {
  for (size_t i = 0; i < t->n_strings; i++)
    free(t->strings[i]);
  free(t->strings);
  free(t->pci);
  free(t->pci_nodeset);
  free(t->offer);
  memset(t, 0, sizeof *t);
}

int topology_find_pci(const topology *t, const char *bus_id) {
  if (!bus_id || !*bus_id)
    return -1;
  for (size_t i = 0; i < t->pub.n_pci; i++)
    if (strcmp(t->pci[i].bus_id, bus_id) == 0)
      return (int)i;
  return -1;
}
