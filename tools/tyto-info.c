/*
 * tyto-info: what tyto sees on this machine — the hwloc topology, every
 * plugin on the search path (loaded, or refused and why), every device
 * (claimed, or refused and why, with its capabilities) and the devices
 * selected, in priority order. `--json` prints the same as one object.
 *
 * Exit status: 0 when the selection is satisfied, 1 when it is not,
 * 2 for a usage or configuration error.
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <tyto/plugin.h>
#include <tyto/tyto.h>

static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16",
                                          "i32", "i64", "u8"};
#define N_DTYPES (sizeof dtype_names / sizeof dtype_names[0])

static const char *found_status_name(tyto_found_status s) {
  switch (s) {
  case TYTO_FOUND_LOADED: return "loaded";
  case TYTO_FOUND_REFUSED: return "refused";
  case TYTO_FOUND_FAILED: return "failed";
  case TYTO_FOUND_SHADOWED: return "shadowed";
  }
  return "unknown";
}

static void human_bytes(uint64_t b, char *out, size_t cap) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, u++;
  snprintf(out, cap, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void dtypes_text(uint32_t mask, char *out, size_t cap) {
  out[0] = '\0';
  for (size_t i = 0; i < N_DTYPES; i++)
    if (mask & (1u << i)) {
      size_t n = strlen(out);
      snprintf(out + n, cap - n, "%s%s", n ? " " : "", dtype_names[i]);
    }
}

static void flags_text(uint32_t flags, char *out, size_t cap) {
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {{TYTO_DEVICE_UNIFIED_MEMORY, "unified"},
               {TYTO_DEVICE_PINNED_HOST, "pinned"},
               {TYTO_DEVICE_PEER_COPY, "peer-copy"},
               {TYTO_DEVICE_ASYNC, "async"},
               {TYTO_DEVICE_GRAPHS, "graphs"}};
  out[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (flags & names[i].bit) {
      size_t n = strlen(out);
      snprintf(out + n, cap - n, "%s%s", n ? " " : "", names[i].name);
    }
}

/* ---------------------------------------------------------------------- */
/* Text                                                                    */

/* Appends ", " (unless line is empty) and a formatted part to line. */
static void part(char *line, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void part(char *line, size_t cap, const char *fmt, ...) {
  size_t n = strlen(line);
  if (n && n + 2 < cap) {
    memcpy(line + n, ", ", 3);
    n += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, cap - n, fmt, ap);
  va_end(ap);
}

static void print_text(const tyto_context *ctx) {
  const tyto_topology *t = tyto_context_topology(ctx);
  char mem[32], buf[128];
  printf("tyto %s (plugin ABI %d.%d)\n", tyto_version(), TYTO_PLUGIN_ABI_MAJOR,
         TYTO_PLUGIN_ABI_MINOR);
  const char *cfg = tyto_context_config_path(ctx);
  printf("config file: %s\n", cfg ? cfg : "(none)");

  human_bytes(t->memory_bytes, mem, sizeof mem);
  printf("\nTopology\n");
  printf("  CPU: %s\n", t->cpu_model[0] ? t->cpu_model : "(model unknown)");
  printf("       %u package%s, %u core%s, %u hardware thread%s, %u NUMA "
         "node%s, %s; usable CPUs %s\n",
         t->packages, t->packages == 1 ? "" : "s", t->cores,
         t->cores == 1 ? "" : "s", t->pus, t->pus == 1 ? "" : "s",
         t->numa_nodes, t->numa_nodes == 1 ? "" : "s", mem, t->cpuset);
  if (t->n_pci == 0)
    printf("  PCI GPUs and accelerators: none\n");
  for (size_t i = 0; i < t->n_pci; i++) {
    const tyto_pci_device *p = &t->pci[i];
    printf("  PCI %s [%04x:%04x] %s %s, NUMA node %d", p->bus_id, p->vendor_id,
           p->device_id, p->vendor, p->name, (int)p->numa_node);
    /* One card may be driven by several plugins: list them together. */
    const char *sep = "; seen as ";
    for (size_t d = 0; d < tyto_context_device_info_count(ctx); d++) {
      const tyto_device_info *di = tyto_context_device_info(ctx, d);
      if (di->pci_index == (int32_t)i && di->claimed) {
        printf("%s%s", sep, di->id);
        sep = ", ";
      }
    }
    printf("\n");
  }

  printf("\nPlugin search path\n");
  for (size_t i = 0; i < tyto_context_plugin_dir_count(ctx); i++)
    printf("  %zu. %s\n", i + 1, tyto_context_plugin_dir(ctx, i));

  /* One column for plugin names and device ids, as wide as the longest. */
  int w = 10;
  for (size_t i = 0; i < tyto_context_found_plugin_count(ctx); i++) {
    int n = (int)strlen(tyto_context_found_plugin(ctx, i)->name);
    w = n > w ? n : w;
  }
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    int n = d->claimed && d->id ? (int)strlen(d->id) : 0;
    w = n > w ? n : w;
  }
  w = w > 40 ? 40 : w;
  const int ind = w + 3; /* where the lines under a name start */

  printf("\nPlugins\n");
  if (tyto_context_found_plugin_count(ctx) == 0)
    printf("  none found\n");
  for (size_t i = 0; i < tyto_context_found_plugin_count(ctx); i++) {
    const tyto_found_plugin *p = tyto_context_found_plugin(ctx, i);
    printf("  %-*s %-8s", w, p->name, found_status_name(p->status));
    if (p->abi_major || p->abi_minor)
      printf(" ABI %u.%u", p->abi_major, p->abi_minor);
    if (p->version[0])
      printf("  version %s", p->version);
    if (p->vendor[0])
      printf("  %s", p->vendor);
    if (p->license[0])
      printf("  %s", p->license);
    printf("\n%*s%s\n", ind, "", p->path);
    if (p->description[0])
      printf("%*s%s\n", ind, "", p->description);
    if (p->reason)
      printf("%*s%s\n", ind, "", p->reason);
  }

  printf("\nDevices\n");
  if (tyto_context_device_info_count(ctx) == 0)
    printf("  none\n");
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    if (!d->claimed) {
      printf("  %-*s refused by %s: %s%s%s%s\n%*s%s\n", w, "-", d->plugin,
             d->name, d->pci_bus_id[0] ? " (" : "", d->pci_bus_id,
             d->pci_bus_id[0] ? ")" : "", ind, "", d->reason);
      continue;
    }
    if (d->selected)
      snprintf(buf, sizeof buf, "selected #%d", (int)d->priority);
    else
      snprintf(buf, sizeof buf, d->reason ? "unusable" : "available");
    printf("  %-*s %-12s %s\n", w, d->id, buf, d->name);
    if (d->reason) {
      printf("%*s%s\n", ind, "", d->reason);
      continue;
    }
    char dt[64], fl[64], line[512] = "";
    human_bytes(d->memory_bytes, mem, sizeof mem);
    dtypes_text(d->dtypes, dt, sizeof dt);
    flags_text(d->flags, fl, sizeof fl);
    /* The parts a device has, joined: no empty field, no stray comma. */
    if (d->vendor[0] || d->driver_version[0])
      part(line, sizeof line, "%s%s%s", d->vendor,
           d->vendor[0] && d->driver_version[0] ? " " : "", d->driver_version);
    part(line, sizeof line, "%s", mem);
    if (d->compute_units)
      part(line, sizeof line, "%u compute unit%s", d->compute_units,
           d->compute_units == 1 ? "" : "s");
    if (dt[0])
      part(line, sizeof line, "dtypes %s", dt);
    if (fl[0])
      part(line, sizeof line, "%s", fl);
    printf("%*s%s\n", ind, "", line);
    if (d->pci_bus_id[0])
      printf("%*sPCI %s, NUMA node %d\n", ind, "", d->pci_bus_id,
             (int)d->numa_node);
    else if (d->numa_node >= 0)
      printf("%*sNUMA node %d\n", ind, "", (int)d->numa_node);
  }

  printf("\nSelection (%s): %s\n", tyto_context_selection_source(ctx),
         tyto_context_selection(ctx)[0] ? tyto_context_selection(ctx)
                                        : "(nothing)");
  const char *err = tyto_context_selection_error(ctx);
  if (err)
    printf("\nerror: %s\n", err);
  const char *mpi = tyto_dist_library();
  printf("\nProcesses: %s\n",
         mpi ? "MPI; start tyto-train with mpirun or srun to train over "
               "several processes (docs/distributed.md)"
             : "one per run (built without MPI)");
  if (mpi)
    printf("  %s\n", mpi);
}

/* ---------------------------------------------------------------------- */
/* JSON                                                                    */

/* A JSON string; bytes that are not UTF-8 (a path from the environment
 * can be anything) become '?' rather than making the value vanish. */
static json_t *jstr(const char *s) {
  json_t *j = json_string(s);
  if (j)
    return j;
  size_t n = strlen(s);
  char *copy = malloc(n + 1);
  if (!copy)
    return json_null();
  for (size_t i = 0; i <= n; i++)
    copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
  j = json_string(copy);
  free(copy);
  return j ? j : json_null();
}

static json_t *str_or_null(const char *s) {
  return s ? jstr(s) : json_null();
}

static json_t *json_report(const tyto_context *ctx) {
  const tyto_topology *t = tyto_context_topology(ctx);
  json_t *root = json_object();
  json_object_set_new(root, "version", jstr(tyto_version()));
  json_object_set_new(root, "abi_major", json_integer(TYTO_PLUGIN_ABI_MAJOR));
  json_object_set_new(root, "abi_minor", json_integer(TYTO_PLUGIN_ABI_MINOR));
  json_object_set_new(root, "config",
                      str_or_null(tyto_context_config_path(ctx)));

  json_t *path = json_array();
  for (size_t i = 0; i < tyto_context_plugin_dir_count(ctx); i++)
    json_array_append_new(path, jstr(tyto_context_plugin_dir(ctx, i)));
  json_object_set_new(root, "plugin_path", path);

  json_t *topo = json_object();
  json_object_set_new(topo, "cpu_model", jstr(t->cpu_model));
  json_object_set_new(topo, "packages", json_integer(t->packages));
  json_object_set_new(topo, "cores", json_integer(t->cores));
  json_object_set_new(topo, "pus", json_integer(t->pus));
  json_object_set_new(topo, "numa_nodes", json_integer(t->numa_nodes));
  json_object_set_new(topo, "cpuset", jstr(t->cpuset));
  json_object_set_new(topo, "memory_bytes",
                      json_integer((json_int_t)t->memory_bytes));
  json_t *pci = json_array();
  for (size_t i = 0; i < t->n_pci; i++) {
    const tyto_pci_device *p = &t->pci[i];
    json_t *o = json_object();
    json_object_set_new(o, "bus_id", jstr(p->bus_id));
    json_object_set_new(o, "vendor_id", json_integer(p->vendor_id));
    json_object_set_new(o, "device_id", json_integer(p->device_id));
    json_object_set_new(o, "class_id", json_integer(p->class_id));
    json_object_set_new(o, "vendor", jstr(p->vendor));
    json_object_set_new(o, "name", jstr(p->name));
    json_object_set_new(o, "numa_node", json_integer(p->numa_node));
    json_object_set_new(o, "cpuset", jstr(p->cpuset));
    json_t *seen = json_array();
    for (size_t d = 0; d < tyto_context_device_info_count(ctx); d++) {
      const tyto_device_info *di = tyto_context_device_info(ctx, d);
      if (di->pci_index == (int32_t)i && di->claimed)
        json_array_append_new(seen, jstr(di->id));
    }
    json_object_set_new(o, "devices", seen);
    json_array_append_new(pci, o);
  }
  json_object_set_new(topo, "pci", pci);
  json_object_set_new(root, "topology", topo);

  json_t *plugins = json_array();
  for (size_t i = 0; i < tyto_context_found_plugin_count(ctx); i++) {
    const tyto_found_plugin *p = tyto_context_found_plugin(ctx, i);
    json_t *o = json_object();
    json_object_set_new(o, "name", jstr(p->name));
    json_object_set_new(o, "path", jstr(p->path));
    json_object_set_new(o, "abi_major", json_integer(p->abi_major));
    json_object_set_new(o, "abi_minor", json_integer(p->abi_minor));
    json_object_set_new(o, "status", jstr(found_status_name(p->status)));
    json_object_set_new(o, "reason", str_or_null(p->reason));
    json_object_set_new(o, "version", jstr(p->version));
    json_object_set_new(o, "vendor", jstr(p->vendor));
    json_object_set_new(o, "license", jstr(p->license));
    json_object_set_new(o, "description", jstr(p->description));
    json_object_set_new(o, "devices", json_integer((json_int_t)p->n_devices));
    json_array_append_new(plugins, o);
  }
  json_object_set_new(root, "plugins", plugins);

  json_t *devices = json_array();
  for (size_t i = 0; i < tyto_context_device_info_count(ctx); i++) {
    const tyto_device_info *d = tyto_context_device_info(ctx, i);
    json_t *o = json_object();
    json_object_set_new(o, "id", str_or_null(d->id));
    json_object_set_new(o, "plugin", jstr(d->plugin));
    json_object_set_new(o, "status", jstr(d->claimed ? "claimed" : "refused"));
    json_object_set_new(o, "reason", str_or_null(d->reason));
    json_object_set_new(o, "name", jstr(d->name));
    json_object_set_new(o, "vendor", jstr(d->vendor));
    json_object_set_new(o, "driver_version", jstr(d->driver_version));
    json_object_set_new(o, "selected", json_boolean(d->selected));
    json_object_set_new(o, "priority",
                        d->selected ? json_integer(d->priority) : json_null());
    json_object_set_new(o, "memory_bytes",
                        json_integer((json_int_t)d->memory_bytes));
    json_object_set_new(o, "alignment", json_integer((json_int_t)d->alignment));
    json_object_set_new(o, "max_alloc_bytes",
                        json_integer((json_int_t)d->max_alloc_bytes));
    json_object_set_new(o, "compute_units", json_integer(d->compute_units));
    json_t *dt = json_array();
    for (size_t k = 0; k < N_DTYPES; k++)
      if (d->dtypes & (1u << k))
        json_array_append_new(dt, jstr(dtype_names[k]));
    json_object_set_new(o, "dtypes", dt);
    json_object_set_new(o, "unified_memory",
                        json_boolean(d->flags & TYTO_DEVICE_UNIFIED_MEMORY));
    json_object_set_new(o, "pinned_host",
                        json_boolean(d->flags & TYTO_DEVICE_PINNED_HOST));
    json_object_set_new(o, "peer_copy",
                        json_boolean(d->flags & TYTO_DEVICE_PEER_COPY));
    json_object_set_new(o, "async", json_boolean(d->flags & TYTO_DEVICE_ASYNC));
    json_object_set_new(o, "graphs",
                        json_boolean(d->flags & TYTO_DEVICE_GRAPHS));
    json_object_set_new(o, "numa_node", json_integer(d->numa_node));
    json_object_set_new(o, "pci_bus_id",
                        d->pci_bus_id[0] ? jstr(d->pci_bus_id) : json_null());
    json_array_append_new(devices, o);
  }
  json_object_set_new(root, "devices", devices);

  json_t *sel = json_object();
  json_t *ids = json_array();
  for (size_t i = 0; i < tyto_context_device_count(ctx); i++)
    json_array_append_new(
        ids, jstr(tyto_device_get_info(tyto_context_device(ctx, i))->id));
  json_object_set_new(sel, "devices", ids);
  json_object_set_new(sel, "source", jstr(tyto_context_selection_source(ctx)));
  json_object_set_new(sel, "error",
                      str_or_null(tyto_context_selection_error(ctx)));
  json_object_set_new(root, "selection", sel);
  json_object_set_new(root, "mpi",
                      tyto_dist_library() ? jstr(tyto_dist_library())
                                          : json_null());
  return root;
}

/* ---------------------------------------------------------------------- */

/* ---------------------------------------------------------------------- */
/* Device profiles (--calibrate)                                           */

/* Every selected device's profile and every link between two of them, as
 * JSON; NULL with the message set when one cannot be measured. */
static json_t *profile_all(tyto_context *ctx, int remeasure) {
  unsigned flags = remeasure ? TYTO_PROFILE_REMEASURE : 0;
  size_t n = tyto_context_device_count(ctx);
  json_t *devs = json_array(), *links = json_array();
  json_t *root = json_pack("{s:o, s:o, s:s?}", "devices", devs, "links", links,
                           "cache", tyto_profile_cache_path(ctx));
  for (size_t i = 0; root && i < n; i++) {
    tyto_device_profile p = {.struct_size = sizeof p};
    if (tyto_device_profile_get(ctx, i, flags, &p) != TYTO_OK) {
      json_decref(root);
      return NULL;
    }
    json_array_append_new(
        devs,
        json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:f}", "id",
                  tyto_device_get_info(tyto_context_device(ctx, i))->id,
                  "gemm_flops", p.gemm_flops, "eltwise_bytes", p.eltwise_bytes,
                  "launch_seconds", p.launch_seconds, "h2d_bytes", p.h2d_bytes,
                  "d2h_bytes", p.d2h_bytes, "cached", p.cached,
                  "measure_seconds", p.measure_seconds));
  }
  for (size_t i = 0; root && i < n; i++)
    for (size_t j = 0; j < n; j++) {
      if (i == j)
        continue;
      double bps;
      if (tyto_link_profile_get(ctx, i, j, flags, &bps) != TYTO_OK) {
        json_decref(root);
        return NULL;
      }
      json_array_append_new(
          links,
          json_pack("{s:s, s:s, s:f}", "from",
                    tyto_device_get_info(tyto_context_device(ctx, i))->id, "to",
                    tyto_device_get_info(tyto_context_device(ctx, j))->id,
                    "bytes_per_second", bps));
    }
  return root;
}

static void print_profiles(const tyto_context *ctx, json_t *profiles) {
  json_t *devs = json_object_get(profiles, "devices");
  json_t *links = json_object_get(profiles, "links");
  const char *cache = json_string_value(json_object_get(profiles, "cache"));
  printf("\nDevice profiles (cache: %s)\n", cache ? cache : "none");
  printf("  %-12s %10s %11s %10s %9s %9s  %s\n", "device", "GEMM", "eltwise",
         "launch", "h2d", "d2h", "source");
  printf("  %-12s %10s %11s %10s %9s %9s\n", "", "GFLOP/s", "GB/s", "us",
         "GB/s", "GB/s");
  size_t i;
  json_t *d;
  json_array_foreach(devs, i, d) {
    char src[64];
    if (json_is_true(json_object_get(d, "cached")))
      snprintf(src, sizeof src, "cache");
    else
      snprintf(src, sizeof src, "measured in %.2f s",
               json_real_value(json_object_get(d, "measure_seconds")));
    printf("  %-12s %10.1f %11.2f %10.1f %9.2f %9.2f  %s\n",
           json_string_value(json_object_get(d, "id")),
           1e-9 * json_real_value(json_object_get(d, "gemm_flops")),
           1e-9 * json_real_value(json_object_get(d, "eltwise_bytes")),
           1e6 * json_real_value(json_object_get(d, "launch_seconds")),
           1e-9 * json_real_value(json_object_get(d, "h2d_bytes")),
           1e-9 * json_real_value(json_object_get(d, "d2h_bytes")), src);
  }
  if (json_array_size(links))
    printf("  links between devices:\n");
  json_array_foreach(links, i, d) {
    printf("    %s -> %s: %.2f GB/s\n",
           json_string_value(json_object_get(d, "from")),
           json_string_value(json_object_get(d, "to")),
           1e-9 * json_real_value(json_object_get(d, "bytes_per_second")));
  }
  (void)ctx;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: tyto-info [--json] [--devices LIST] [--config FILE]\n"
      "                 [--topology FILE.xml] [--log-level LEVEL]\n"
      "                 [--calibrate [--remeasure]] [--version]\n"
      "\n"
      "Shows the hardware tyto sees, every plugin found on the search path\n"
      "(loaded or refused, and why), every device, and the selection.\n"
      "\n"
      "  --json             one JSON object instead of text\n"
      "  --devices LIST     select devices, as TYTO_DEVICES does\n"
      "                     (e.g. 'cuda:0,opencl:*,cpu')\n"
      "  --config FILE      read this config file ('' for none)\n"
      "  --topology FILE    use an hwloc XML topology instead of the machine\n"
      "  --log-level LEVEL  error, warn, info or debug\n"
      "  --calibrate        also profile each selected device and the links\n"
      "                     between them, as placement sees them (from the\n"
      "                     cache, measured once per machine)\n"
      "  --remeasure        with --calibrate: measure again, refresh the\n"
      "                     cache\n"
      "  --version          print the version and exit\n"
      "\n"
      "Exit status: 0 selection satisfied, 1 not satisfied, 2 usage or\n"
      "configuration error.\n");
}

int main(int argc, char **argv) {
  /* A closed pipe or the file-size limit is a write error we report, not
   * a signal that kills the tool (SIGPIPE, SIGXFSZ). */
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN);
  static const struct option longopts[] = {
      {"json", no_argument, NULL, 'j'},
      {"devices", required_argument, NULL, 'd'},
      {"config", required_argument, NULL, 'c'},
      {"topology", required_argument, NULL, 't'},
      {"log-level", required_argument, NULL, 'l'},
      {"calibrate", no_argument, NULL, 'C'},
      {"remeasure", no_argument, NULL, 'R'},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  tyto_context_options opts;
  tyto_context_options_init(&opts);
  int json = 0, calibrate = 0, remeasure = 0;
  for (int c;
       (c = getopt_long(argc, argv, "jd:c:t:l:Vh", longopts, NULL)) != -1;) {
    switch (c) {
    case 'j': json = 1; break;
    case 'C': calibrate = 1; break;
    case 'R': remeasure = 1; break;
    case 'd':
      opts.devices = optarg;
      opts.devices_from = "--devices";
      break;
    case 'c': opts.config_path = optarg; break;
    case 't': opts.topology_xml = optarg; break;
    case 'l':
      if (strcasecmp(optarg, "error") == 0)
        opts.log_level = TYTO_LOG_ERROR;
      else if (strcasecmp(optarg, "warn") == 0 ||
               strcasecmp(optarg, "warning") == 0)
        opts.log_level = TYTO_LOG_WARN;
      else if (strcasecmp(optarg, "info") == 0)
        opts.log_level = TYTO_LOG_INFO;
      else if (strcasecmp(optarg, "debug") == 0)
        opts.log_level = TYTO_LOG_DEBUG;
      else {
        fprintf(stderr,
                "tyto-info: --log-level: expected error, warn, info "
                "or debug, found '%s'\n",
                optarg);
        return 2;
      }
      break;
    case 'V': printf("tyto-info %s\n", tyto_version()); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "tyto-info: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (remeasure && !calibrate) {
    fprintf(stderr, "tyto-info: --remeasure applies to --calibrate only\n");
    return 2;
  }

  tyto_context *ctx = NULL;
  tyto_status st = tyto_context_inspect(&opts, &ctx);
  if (st != TYTO_OK) {
    fprintf(stderr, "tyto-info: %s\n", tyto_errmsg());
    return 2;
  }
  json_t *profiles = NULL;
  int rc = tyto_context_selection_error(ctx) ? 1 : 0;
  if (calibrate && !(profiles = profile_all(ctx, remeasure))) {
    fprintf(stderr, "tyto-info: --calibrate: %s\n", tyto_errmsg());
    rc = 1;
  }
  if (json) {
    json_t *root = json_report(ctx);
    if (profiles)
      json_object_set(root, "profiles", profiles);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (text)
      printf("%s\n", text);
    free(text);
    json_decref(root);
  } else {
    print_text(ctx);
    if (profiles)
      print_profiles(ctx, profiles);
  }
  json_decref(profiles);
  tyto_context_free(ctx);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "tyto-info: cannot write to stdout: %s\n", strerror(errno));
    rc = 1;
  }
  return rc;
}
