/*
 * Plugin loading with libltdl.
 *
 * Each directory of the search path is scanned for tyto_plugin_NAME.so (or
 * .la when no .so sits beside it), in name order. A plugin is opened with
 * local symbols, its entry point tyto_plugin_NAME_LTX_init is called with
 * the host table, its info is checked against this host's ABI, and it is
 * offered the hardware. Whatever goes wrong is recorded on that plugin's
 * record, with the path and the reason, and the next plugin is tried: one
 * broken plugin never stops the others.
 */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abicheck.h"
#include "error.h"
#include "file.h"
#include "runtime.h"

#define PREFIX ABICHECK_PREFIX

/* ---------------------------------------------------------------------- */
/* The host table handed to plugins                                       */

static void host_log(void *hctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  plugin_rec *p = hctx;
  va_list ap;
  va_start(ap, fmt);
  rt_logv(&p->ctx->log, (tyto_log_level)level, p->pub.name, fmt, ap);
  va_end(ap);
}

static const char *host_option(void *hctx, const char *key) {
  plugin_rec *p = hctx;
  return key ? conf_lookup(&p->ctx->cfg, p->pub.name, key) : NULL;
}

static void host_init(plugin_rec *p) {
  p->host.struct_size = sizeof p->host;
  p->host.abi_major = TYTO_PLUGIN_ABI_MAJOR;
  p->host.abi_minor = TYTO_PLUGIN_ABI_MINOR;
  p->host.host_version = PACKAGE_VERSION;
  p->host.ctx = p;
  p->host.log = host_log;
  p->host.option = host_option;
  p->host.error_new = rt_error_new;
  p->host.error_free = rt_error_free;
  p->host.error_message = rt_error_message;
  p->host.error_code = rt_error_code;
}

/* ---------------------------------------------------------------------- */
/* Records                                                                 */

/* Keeps a copy of a string for as long as the record lives. Text from a
 * plugin may be anything: invalid UTF-8 and control characters become '?',
 * so that what tools print (and put in JSON) stays well formed. */
static const char *own(plugin_rec *p, const char *s) {
  if (!s)
    return "";
  if (strlist_push(&p->owned, s) != 0)
    return "";
  char *kept = p->owned.items[p->owned.n - 1];
  rt_sanitize_utf8(kept);
  return kept;
}

static const char *ownf(plugin_rec *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const char *ownf(plugin_rec *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = rt_vasprintf(fmt, ap);
  va_end(ap);
  const char *kept = own(p, s ? s : "out of memory");
  free(s);
  return kept;
}

static plugin_rec *record_new(tyto_context *ctx, const char *name,
                              const char *path) {
  plugin_rec *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  size_t n = ctx->n_plugins + 1;
  plugin_rec **np = realloc(ctx->plugins, n * sizeof *np);
  if (!np) {
    free(p);
    return NULL;
  }
  ctx->plugins = np;
  ctx->plugins[ctx->n_plugins++] = p;
  p->ctx = ctx;
  p->pub.name = own(p, name);
  p->pub.path = own(p, path);
  p->pub.vendor = p->pub.version = p->pub.license = p->pub.description = "";
  host_init(p);
  return p;
}

static void give_up(plugin_rec *p, tyto_found_status status,
                    int call_shutdown) {
  p->pub.status = status;
  if (call_shutdown && p->fns.shutdown)
    p->fns.shutdown(p->state);
  if (p->handle)
    lt_dlclose(p->handle);
  if (p->pin)
    dlclose(p->pin);
  p->handle = NULL;
  p->pin = NULL;
  p->info = NULL;
  p->state = NULL;
  rt_log(&p->ctx->log, TYTO_LOG_INFO, "tyto", "plugin %s (%s): %s", p->pub.name,
         p->pub.path, p->pub.reason);
}

/* ---------------------------------------------------------------------- */
/* Probing: the plugin claims and refuses hardware                         */

typedef struct probe_sink {
  plugin_rec *p;
  int oom;
} probe_sink;

static int offer_pci_index(const tyto_context *ctx, int32_t hw_index) {
  if (hw_index < 0 || (size_t)hw_index >= ctx->topo.n_offer)
    return -1;
  if (ctx->topo.offer[hw_index].kind != TYTO_PLUGIN_HW_PCI)
    return -1;
  return hw_index - 1; /* the offer is the CPU entry, then pub.pci in order */
}

static tyto_device *sink_device(probe_sink *sink, int32_t hw_index) {
  plugin_rec *p = sink->p;
  tyto_context *ctx = p->ctx;
  char why[256];
  if (abicheck_claim(hw_index, (uint32_t)ctx->topo.n_offer, 0, 0, why,
                     sizeof why)) {
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto", "plugin %s %s; taken as none",
           p->pub.name, why);
    hw_index = -1;
  }
  tyto_device *dev = device_new(ctx, p);
  if (!dev) {
    sink->oom = 1;
    return NULL;
  }
  dev->info.pci_index = offer_pci_index(ctx, hw_index);
  if (dev->info.pci_index >= 0)
    dev->info.pci_bus_id = ctx->topo.pci[dev->info.pci_index].bus_id;
  if (hw_index >= 0)
    dev->info.numa_node = ctx->topo.offer[hw_index].numa_node;
  return dev;
}

static void sink_claim(void *sctx, int32_t hw_index, uint32_t ordinal,
                       const char *name) {
  probe_sink *sink = sctx;
  plugin_rec *p = sink->p;
  tyto_context *ctx = p->ctx;
  int duplicate = 0;
  for (size_t i = 0; i < ctx->n_devices && !duplicate; i++) {
    tyto_device *d = ctx->devices[i];
    duplicate = d->plugin == p && d->info.claimed && d->info.ordinal == ordinal;
  }
  /* The hardware index is checked (and forgiven) by sink_device. */
  char why[256];
  if (abicheck_claim(-1, 0, ordinal, duplicate, why, sizeof why)) {
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto", "plugin %s %s; %s", p->pub.name,
           why, duplicate ? "the second claim is ignored" : "ignored");
    return;
  }
  tyto_device *dev = sink_device(sink, hw_index);
  if (!dev)
    return;
  dev->info.claimed = 1;
  dev->info.ordinal = ordinal;
  char *id = rt_asprintf("%s:%u", p->pub.name, ordinal);
  dev->info.id = device_keep(dev, id ? id : "?", "?");
  free(id);
  if (name)
    dev->info.name = device_keep(dev, name, "");
  p->pub.n_devices++;
}

static void sink_refuse(void *sctx, int32_t hw_index, const char *name,
                        const char *reason) {
  probe_sink *sink = sctx;
  tyto_context *ctx = sink->p->ctx;
  tyto_device *dev = sink_device(sink, hw_index);
  if (!dev)
    return;
  dev->info.claimed = 0;
  if (!name && hw_index >= 0 && (size_t)hw_index < ctx->topo.n_offer)
    name = ctx->topo.offer[hw_index].name;
  if (name)
    dev->info.name = device_keep(dev, name, "");
  dev->info.reason = device_keep(
      dev, reason && *reason ? reason : "no reason given", "no reason given");
}

/* Fills a claimed device's capabilities from device_query(). */
static void query_device(plugin_rec *p, tyto_device *dev) {
  tyto_plugin_device_info qi;
  memset(&qi, 0, sizeof qi);
  qi.struct_size = sizeof qi;
  qi.numa_node = -1;
  tyto_plugin_error *err =
      p->fns.device_query(p->state, dev->info.ordinal, &qi);
  if (err) {
    char *r = rt_asprintf("cannot query the device: %s", rt_error_message(err));
    rt_error_free(err);
    dev->info.reason = device_keep(dev, r ? r : "cannot query the device",
                                   "cannot query the device");
    free(r);
    return;
  }
  if (!dev->info.name[0] && qi.name)
    dev->info.name = device_keep(dev, qi.name, "");
  if (qi.vendor)
    dev->info.vendor = device_keep(dev, qi.vendor, "");
  if (qi.driver_version)
    dev->info.driver_version = device_keep(dev, qi.driver_version, "");
  if (dev->info.pci_index < 0 && qi.pci_bus_id && qi.pci_bus_id[0]) {
    /* The plugin knows the bus id even if it did not tie the device to an
     * offered entry: tie it here, so one card is one card in tyto-info. */
    int idx = topology_find_pci(&p->ctx->topo, qi.pci_bus_id);
    if (idx >= 0) {
      dev->info.pci_index = idx;
      dev->info.pci_bus_id = p->ctx->topo.pci[idx].bus_id;
    } else {
      dev->info.pci_bus_id = device_keep(dev, qi.pci_bus_id, "");
    }
  }
  dev->info.dtypes = qi.dtypes;
  /* The plugin's capability bits, plus graphs, which the host reads off
   * its table. */
  dev->info.flags = qi.flags & 0xfu;
  if (p->dfns.graph_begin && p->dfns.graph_end && p->dfns.graph_launch &&
      p->dfns.graph_destroy)
    dev->info.flags |= TYTO_DEVICE_GRAPHS;
  dev->info.memory_bytes = qi.memory_bytes;
  dev->info.alignment = qi.alignment;
  dev->info.max_alloc_bytes =
      qi.max_alloc_bytes ? qi.max_alloc_bytes : qi.memory_bytes;
  dev->info.compute_units = qi.compute_units;
  if (qi.numa_node >= 0)
    dev->info.numa_node = qi.numa_node;
}

static void probe(plugin_rec *p) {
  tyto_context *ctx = p->ctx;
  probe_sink sink = {p, 0};
  tyto_plugin_claims claims = {sizeof claims, &sink, sink_claim, sink_refuse};
  size_t first = ctx->n_devices;
  tyto_plugin_error *err = p->fns.probe(p->state, ctx->topo.offer,
                                        (uint32_t)ctx->topo.n_offer, &claims);
  if (err) {
    /* An option the plugin refused (a bad value in its config section) is
     * the user's mistake: said at warning level, even when the selection
     * does not ask for its devices. */
    int bad_option = rt_error_code(err) == TYTO_PLUGIN_ERR_INVALID_ARGUMENT;
    p->pub.reason = ownf(p, "probe failed: %s", rt_error_message(err));
    rt_error_free(err);
    rt_log(&ctx->log, bad_option ? TYTO_LOG_WARN : TYTO_LOG_INFO, "tyto",
           "plugin %s: %s", p->pub.name, p->pub.reason);
    /* A failed probe leaves the plugin with no devices, whatever it
     * claimed before failing. */
    for (size_t i = first; i < ctx->n_devices; i++)
      if (ctx->devices[i]->info.claimed && !ctx->devices[i]->info.reason)
        ctx->devices[i]->info.reason = p->pub.reason;
    p->pub.n_devices = 0;
    return;
  }
  if (sink.oom)
    rt_log(&ctx->log, TYTO_LOG_ERROR, "tyto",
           "out of memory recording the devices of plugin %s", p->pub.name);
  for (size_t i = first; i < ctx->n_devices; i++)
    if (ctx->devices[i]->info.claimed)
      query_device(p, ctx->devices[i]);
}

/* ---------------------------------------------------------------------- */
/* Loading one plugin                                                      */

/* The shared object behind a plugin file: the file itself for a .so; for a
 * libtool archive, its dlname, under .libs/ when it is not installed (what
 * libltdl itself would open). A new string, or NULL. */
static char *shared_object_of(const char *path) {
  size_t len = strlen(path);
  if (len < 3 || strcmp(path + len - 3, ".la") != 0)
    return rt_strdup(path);
  const char *why;
  int fd = rt_open_regular(path, &why);
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  char line[1024], dlname[512] = "";
  int installed = 1;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "dlname='%511[^']'", dlname) == 1)
      continue;
    if (strncmp(line, "installed=no", 12) == 0)
      installed = 0;
  }
  fclose(f);
  if (!dlname[0])
    return NULL;
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path) : 1;
  return rt_asprintf("%.*s/%s%s", dir_len, slash ? path : ".",
                     installed ? "" : ".libs/", dlname);
}

static void load_one(tyto_context *ctx, const char *name, const char *path) {
  plugin_rec *p = record_new(ctx, name, path);
  if (!p) {
    rt_log(&ctx->log, TYTO_LOG_ERROR, "tyto", "out of memory loading %s", path);
    return;
  }
  plugin_rec *earlier = loader_find(ctx, name);
  if (earlier && earlier != p) {
    p->pub.status = TYTO_FOUND_SHADOWED;
    p->pub.reason = ownf(p, "shadowed by %s, found earlier on the search path",
                         earlier->pub.path);
    return;
  }

  /* Bind every symbol now, through the dynamic linker itself: libltdl
   * opens lazily, so a plugin missing a symbol of its driver library would
   * otherwise be loaded and then end the process with "symbol lookup error"
   * at its first call; and libltdl reports any failure as "file not
   * found", where dlerror() names the missing library or symbol. libltdl
   * then finds the object already loaded. */
  /* A FIFO or a device named like a plugin would block or confuse the
   * dynamic linker, which opens whatever it is given: only regular files
   * (through symbolic links) are loaded. */
  const char *kind = NULL;
  int fd = rt_open_regular(path, &kind);
  if (fd < 0) {
    p->pub.reason = ownf(p, "cannot be loaded: %s", kind);
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }
  close(fd);
  char *so = shared_object_of(path);
  if (so && strcmp(so, path) != 0 && (fd = rt_open_regular(so, &kind)) < 0) {
    p->pub.reason = ownf(p, "cannot be loaded: %s: %s", so, kind);
    free(so);
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }
  if (so && strcmp(so, path) != 0)
    close(fd);
  p->pin = so ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!p->pin) {
    const char *why = so ? dlerror() : "cannot find the shared object it names";
    p->pub.reason =
        ownf(p, "cannot be loaded: %s", why ? why : "unknown error");
    free(so);
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }
  free(so);
  lt_dladvise advise;
  lt_dladvise_init(&advise);
  lt_dladvise_local(&advise);
  p->handle = lt_dlopenadvise(path, advise);
  lt_dladvise_destroy(&advise);
  if (!p->handle) {
    const char *why = lt_dlerror();
    p->pub.reason =
        ownf(p, "cannot be loaded: %s", why ? why : "unknown error");
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }

  char symbol[256], why[1024];
  abicheck_entry_symbol(name, symbol, sizeof symbol);
  /* lt_dlsym returns a data pointer; POSIX guarantees the conversion. */
  void *sym = lt_dlsym(p->handle, symbol);
  if (!sym) {
    abicheck_no_entry(name, why, sizeof why);
    p->pub.reason = own(p, why);
    give_up(p, TYTO_FOUND_REFUSED, 0);
    return;
  }
  tyto_plugin_init_fn init;
  memcpy(&init, &sym, sizeof init);

  const tyto_plugin_info *info = NULL;
  tyto_plugin_state *state = NULL;
  tyto_plugin_error *err = init(&p->host, &info, &state);
  if (err) {
    p->pub.reason = ownf(p, "init failed: %s", rt_error_message(err));
    rt_error_free(err);
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }
  /* The checks tyto-conform makes too, from the same code (abicheck.c). */
  abicheck_verdict verdict =
      abicheck_info(info, name, PACKAGE_VERSION, why, sizeof why);
  if (verdict == ABICHECK_FAILED) {
    p->pub.reason = own(p, why);
    give_up(p, TYTO_FOUND_FAILED, 0);
    return;
  }
  p->pub.abi_major = info->abi_major;
  p->pub.abi_minor = info->abi_minor;
  if (verdict == ABICHECK_REFUSED) {
    p->pub.reason = own(p, why);
    give_up(p, TYTO_FOUND_REFUSED, 0);
    return;
  }
  p->info = info;
  p->state = state;
  abicheck_copy_table(&p->fns, sizeof p->fns, info->fns);
  abicheck_copy_table(&p->dfns, sizeof p->dfns, info->device_fns);
  p->pub.vendor = own(p, info->vendor);
  p->pub.version = own(p, info->version);
  p->pub.license = own(p, info->license);
  p->pub.description = own(p, info->description);
  if (verdict == ABICHECK_REFUSED_SHUTDOWN) {
    p->pub.reason = own(p, why);
    give_up(p, TYTO_FOUND_REFUSED, p->fns.shutdown != NULL);
    return;
  }
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_info, n_options))
    p->n_options = info->n_options;
  if (info->abi_minor > TYTO_PLUGIN_ABI_MINOR)
    rt_log(&ctx->log, TYTO_LOG_INFO, "tyto",
           "plugin %s uses plugin ABI %u.%u, newer than this tyto's %d.%d; "
           "its newer functions are not used",
           name, info->abi_major, info->abi_minor, TYTO_PLUGIN_ABI_MAJOR,
           TYTO_PLUGIN_ABI_MINOR);

  p->pub.status = TYTO_FOUND_LOADED;
  rt_log(&ctx->log, TYTO_LOG_DEBUG, "tyto", "plugin %s %s loaded from %s", name,
         p->pub.version, path);
  probe(p);
}

/* ---------------------------------------------------------------------- */
/* Scanning the search path                                                */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_dir(tyto_context *ctx, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    rt_log(&ctx->log, TYTO_LOG_DEBUG, "tyto",
           "plugin directory %s cannot be read; skipped", dir);
    return;
  }
  strlist so = {0}, la = {0};
  char name[128];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (abicheck_plugin_name(e->d_name, ".so", name, sizeof name))
      strlist_push(&so, name);
    else if (abicheck_plugin_name(e->d_name, ".la", name, sizeof name))
      strlist_push(&la, name);
  }
  closedir(d);
  /* A libtool archive is used only when no shared object sits beside it
   * (uninstalled builds keep the .so under .libs/). */
  strlist all = {0};
  for (size_t i = 0; i < so.n; i++)
    strlist_pushf(&all, "%s\t.so", so.items[i]);
  for (size_t i = 0; i < la.n; i++)
    if (!strlist_contains(&so, la.items[i]))
      strlist_pushf(&all, "%s\t.la", la.items[i]);
  if (all.n > 1)
    qsort(all.items, all.n, sizeof *all.items, cmp_str);
  for (size_t i = 0; i < all.n; i++) {
    char *tab = strchr(all.items[i], '\t');
    *tab = '\0';
    char *path = rt_asprintf("%s/" PREFIX "%s%s", dir, all.items[i], tab + 1);
    if (path)
      load_one(ctx, all.items[i], path);
    free(path);
  }
  strlist_free(&all);
  strlist_free(&so);
  strlist_free(&la);
}

tyto_status loader_load_all(tyto_context *ctx) {
  if (lt_dlinit() != 0)
    return rt_fail(TYTO_ERR_PLUGIN, "libltdl could not be initialised: %s",
                   lt_dlerror());
  ctx->ltdl_ready = 1;
  /* Plugins share the cores between their own thread pools, BLAS threads
   * and OpenMP runtimes (oneDNN's, in the CPU plugin). An OpenMP worker
   * left in its default wait policy spins after every parallel region and
   * starves the others: a CNN training step on 2 cores took 64 ms so and
   * 27 ms with PASSIVE. OpenMP reads the policy once, when its runtime is
   * loaded -- for a plugin's dependency, at the dlopen below -- so ask for
   * PASSIVE now unless the user chose (docs/configuration.md). */
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  for (size_t i = 0; i < ctx->dirs.n; i++)
    scan_dir(ctx, ctx->dirs.items[i]);
  return TYTO_OK;
}

void loader_unload_all(tyto_context *ctx) {
  for (size_t i = ctx->n_plugins; i-- > 0;) {
    plugin_rec *p = ctx->plugins[i];
    if (p->pub.status == TYTO_FOUND_LOADED && p->fns.shutdown)
      p->fns.shutdown(p->state);
    if (p->handle)
      lt_dlclose(p->handle);
    if (p->pin)
      dlclose(p->pin);
    strlist_free(&p->owned);
    free(p);
  }
  free(ctx->plugins);
  ctx->plugins = NULL;
  ctx->n_plugins = 0;
  if (ctx->ltdl_ready)
    lt_dlexit();
  ctx->ltdl_ready = 0;
}

plugin_rec *loader_find(const tyto_context *ctx, const char *name) {
  for (size_t i = 0; i < ctx->n_plugins; i++)
    if (ctx->plugins[i]->pub.status == TYTO_FOUND_LOADED &&
        strcmp(ctx->plugins[i]->pub.name, name) == 0)
      return ctx->plugins[i];
  return NULL;
}

plugin_rec *loader_find_any(const tyto_context *ctx, const char *name) {
  for (size_t i = 0; i < ctx->n_plugins; i++)
    if (strcmp(ctx->plugins[i]->pub.name, name) == 0)
      return ctx->plugins[i];
  return NULL;
}
