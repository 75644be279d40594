/*
 * The host memory a process can use, as one rule shared by libtyto's
 * topology (tyto-info's Topology line) and the CPU plugin (cpu:0's memory),
 * so that the two never disagree. Header-only and libc-only: core includes
 * it as well as plugins.
 *
 * hwloc sums the NUMA nodes' memory, which some kernels and virtual
 * machines under-report (memory added later is not always counted in a
 * node's meminfo); the kernel's MemTotal (sysconf) is what can be
 * allocated, so the larger of the two counts. A cgroup memory limit
 * (v2 memory.max, v1 memory.limit_in_bytes, on this process's cgroup and
 * its ancestors) lowers it: that is all this process may use.
 */
#ifndef TYTO_PLUGINS_COMMON_HOSTMEM_H
#define TYTO_PLUGINS_COMMON_HOSTMEM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The number in file `path` (a cgroup limit), or 0 for "max", a missing
 * file or anything unreadable. */
static inline uint64_t tpc_read_limit(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  char buf[64] = "";
  char *got = fgets(buf, sizeof buf, f);
  fclose(f);
  if (!got || strncmp(buf, "max", 3) == 0)
    return 0;
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  return end != buf ? (uint64_t)v : 0;
}

/* The lowest cgroup memory limit on this process, 0 when there is none. */
static inline uint64_t tpc_cgroup_limit(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f)
    return 0;
  uint64_t lowest = 0;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *path = NULL, *root = NULL, *file = NULL;
    if (strncmp(line, "0::", 3) == 0) {
      path = line + 3, root = "/sys/fs/cgroup", file = "memory.max";
    } else {
      char *m = strstr(line, ":memory:");
      if (m)
        path = m + 8, root = "/sys/fs/cgroup/memory",
        file = "memory.limit_in_bytes";
    }
    if (!path || path[0] != '/')
      continue;
    /* The cgroup and each ancestor up to the root. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (;;) {
      char p[8192];
      snprintf(p, sizeof p, "%s%s/%s", root, strcmp(dir, "/") ? dir : "", file);
      uint64_t v = tpc_read_limit(p);
      /* cgroup v1 writes "no limit" as a page-rounded LLONG_MAX */
      if (v && v < ((uint64_t)1 << 62) && (!lowest || v < lowest))
        lowest = v;
      char *slash = strrchr(dir, '/');
      if (!slash || slash == dir)
        break;
      *slash = '\0';
    }
  }
  fclose(f);
  return lowest;
}

/* What the host offers this process, from hwloc's total (see above). */
static inline uint64_t tpc_host_memory(uint64_t hwloc_total) {
  uint64_t total = hwloc_total;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && (uint64_t)pages * (uint64_t)page > total)
    total = (uint64_t)pages * (uint64_t)page;
  uint64_t limit = tpc_cgroup_limit();
  return limit && limit < total ? limit : total;
}

#endif
