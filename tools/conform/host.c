/*
 * Host table, loader and hardware offer of tyto-conform (see host.h).
 */
#define _DEFAULT_SOURCE
#include "config.h"

#include "host.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/abicheck.h"
#include "runtime/file.h"

static int log_max(void) {
  const char *env = getenv("TYTO_CONFORM_LOG");
  return env ? atoi(env) : 0;
}

static void host_log(void *ctx, tyto_plugin_log_level level, const char *fmt,
                     ...) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  const cf_plugin *p = ctx;
  va_list ap;
  if ((int)level > log_max())
    return;
  fprintf(stderr, "[%s %s] ",
          p && p->info && p->info->name ? p->info->name : "plugin",
          names[level & 3]);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* Option `key` of plugin NAME comes from TYTO_CONFORM_<NAME>_<KEY>; getenv's
 * string stays valid while the variable is unchanged, which we never do. */
static const char *host_option(void *ctx, const char *key) {
  const cf_plugin *p = ctx;
  char name[256];
  size_t n = (size_t)snprintf(name, sizeof name, "TYTO_CONFORM_%s_",
                              p && p->info && p->info->name ? p->info->name
                                                            : "PLUGIN");
  for (size_t i = 0; i < n; i++)
    if (name[i] >= 'a' && name[i] <= 'z')
      name[i] = (char)(name[i] - 32);
  for (; *key && n + 1 < sizeof name; key++)
    name[n++] = (*key >= 'a' && *key <= 'z') ? (char)(*key - 32) : *key;
  name[n] = '\0';
  return getenv(name);
}

static tyto_plugin_error oom_error = {TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                      "out of host memory (error_new)"};

static tyto_plugin_error *host_error_new(tyto_plugin_code code, const char *fmt,
                                         ...) {
  tyto_plugin_error *e = malloc(sizeof *e);
  va_list ap;
  if (e == NULL)
    return &oom_error;
  e->code = code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return e;
}

void cf_error_free(tyto_plugin_error *e) {
  if (e != &oom_error)
    free(e);
}

static const char *host_error_message(const tyto_plugin_error *e) {
  return e ? e->msg : "";
}

static tyto_plugin_code host_error_code(const tyto_plugin_error *e) {
  return e ? e->code : TYTO_PLUGIN_OK;
}

tyto_plugin_code cf_error_take(tyto_plugin_error *e, char *buf, size_t size) {
  tyto_plugin_code c = e ? e->code : TYTO_PLUGIN_OK;
  snprintf(buf, size, "%s", e ? e->msg : "ok");
  cf_error_free(e);
  return c;
}

static tyto_plugin_host host_table(cf_plugin *p) {
  tyto_plugin_host h = {
      .struct_size = sizeof(tyto_plugin_host),
      .abi_major = TYTO_PLUGIN_ABI_MAJOR,
      .abi_minor = TYTO_PLUGIN_ABI_MINOR,
      .host_version = "tyto-conform",
      .ctx = p,
      .log = host_log,
      .option = host_option,
      .error_new = host_error_new,
      .error_free = cf_error_free,
      .error_message = host_error_message,
      .error_code = host_error_code,
  };
  return h;
}

/* The plugin keeps the host pointer until shutdown: one table per loaded
 * plugin, stored next to it. */
typedef struct loaded {
  cf_plugin *p;
  tyto_plugin_host host;
} loaded;
static loaded tables[8];

tyto_plugin_error *cf_error(tyto_plugin_code code, const char *msg) {
  return host_error_new(code, "%s", msg);
}

/* ---------------------------------------------------------------- offer -- */

#define MAX_OFFER 32

typedef struct offer_set {
  tyto_plugin_hw_device hw[MAX_OFFER];
  char bus[MAX_OFFER][32];
  char name[MAX_OFFER][64];
  char cpuset[64];
  uint32_t n;
} offer_set;

static unsigned read_hex(const char *dir, const char *file) {
  char path[512];
  unsigned v = 0;
  FILE *f;
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", dir, file);
  if ((f = fopen(path, "r")) == NULL)
    return 0;
  if (fscanf(f, "%x", &v) != 1)
    v = 0;
  fclose(f);
  return v;
}

/* The CPU, then every PCI display controller (class 0x03) or processing
 * accelerator (0x12) in sysfs, as hwloc would offer them. */
static void offer_build(offer_set *o) {
  long pus = sysconf(_SC_NPROCESSORS_ONLN);
  tyto_plugin_hw_device *c = &o->hw[0];
  memset(o, 0, sizeof *o);
  if (pus < 1)
    pus = 1;
  snprintf(o->cpuset, sizeof o->cpuset, "0-%ld", pus - 1);
  c->struct_size = sizeof *c;
  c->kind = TYTO_PLUGIN_HW_CPU;
  c->name = "CPU";
  c->numa_node = -1;
  c->cpuset = o->cpuset;
  c->nodeset = "0";
  c->pci_bus_id = "";
  c->packages = 1;
  c->cores = (uint32_t)pus;
  c->pus = (uint32_t)pus;
  c->numa_nodes = 1;
  o->n = 1;
  DIR *d = opendir("/sys/bus/pci/devices");
  struct dirent *ent;
  while (d && (ent = readdir(d)) != NULL && o->n < MAX_OFFER) {
    if (ent->d_name[0] == '.')
      continue;
    unsigned cls = read_hex(ent->d_name, "class") >> 8;
    if ((cls >> 8) != 0x03 && (cls >> 8) != 0x12)
      continue;
    tyto_plugin_hw_device *g = &o->hw[o->n];
    snprintf(o->bus[o->n], sizeof o->bus[0], "%.31s", ent->d_name);
    snprintf(o->name[o->n], sizeof o->name[0], "PCI %.40s", ent->d_name);
    g->struct_size = sizeof *g;
    g->index = o->n;
    g->kind = TYTO_PLUGIN_HW_PCI;
    g->name = o->name[o->n];
    g->numa_node = -1;
    g->cpuset = o->cpuset;
    g->nodeset = "0";
    g->pci_vendor_id = (uint16_t)read_hex(ent->d_name, "vendor");
    g->pci_device_id = (uint16_t)read_hex(ent->d_name, "device");
    g->pci_class_id = cls;
    g->pci_bus_id = o->bus[o->n];
    o->n++;
  }
  if (d)
    closedir(d);
}

static void on_claim(void *ctx, int32_t hw_index, uint32_t ordinal,
                     const char *name) {
  cf_plugin *p = ctx;
  char why[256];
  int duplicate = 0;
  for (uint32_t i = 0; i < p->n_devices; i++)
    duplicate |= p->ordinals[i] == ordinal;
  /* A claim libtyto ignores, or whose hardware index it takes as none, is
   * a fault of the plugin's probe: the same check, reported. */
  if (abicheck_claim(hw_index, p->n_offer, ordinal, duplicate, why,
                     sizeof why)) {
    size_t n = strlen(p->bad_claims);
    snprintf(p->bad_claims + n, sizeof p->bad_claims - n, "%s%s", n ? "; " : "",
             why);
    if (duplicate || ordinal > ABICHECK_MAX_ORDINAL)
      return; /* libtyto ignores the claim */
  }
  if (p->n_devices >= CF_MAX_DEVICES)
    return;
  p->ordinals[p->n_devices] = ordinal;
  snprintf(p->names[p->n_devices], sizeof p->names[0], "%s", name ? name : "?");
  p->n_devices++;
}

static void on_refuse(void *ctx, int32_t hw_index, const char *name,
                      const char *reason) {
  cf_plugin *p = ctx;
  size_t n = strlen(p->refusals);
  char why[256];
  snprintf(p->refusals + n, sizeof p->refusals - n, "%s%s: %s", n ? "; " : "",
           name ? name : "offered device", reason ? reason : "");
  /* A refusal names offered hardware as a claim does (libtyto takes a bad
   * index as none). */
  if (abicheck_claim(hw_index, p->n_offer, 0, 0, why, sizeof why)) {
    n = strlen(p->bad_claims);
    snprintf(p->bad_claims + n, sizeof p->bad_claims - n, "%srefusal: %s",
             n ? "; " : "", why);
  }
}

/* --------------------------------------------------------------- loader -- */

/* What is wrong with `path` as a plugin file when it exists but is no
 * regular file (through symbolic links), or NULL. dlopen opens whatever
 * it is given and would wait forever for a FIFO's writer: libtyto's
 * loader refuses these first, and so does the kit, with the loader's
 * rt_open_regular(); a file that cannot be opened is left for dlopen to
 * report. */
static const char *not_a_plugin_file(const char *path) {
  const char *why = NULL;
  int fd = rt_open_regular(path, &why);
  if (fd >= 0)
    close(fd);
  return fd < 0 && errno == EINVAL ? why : NULL;
}

static void release_slot(cf_plugin *p) {
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
    if (tables[i].p == p)
      tables[i].p = NULL;
}

int cf_plugin_load(cf_plugin *p, const char *path, char *err, size_t size) {
  char sym[512], msg[1024];
  loaded *slot = NULL;
  memset(p, 0, sizeof *p);
  snprintf(p->path, sizeof p->path, "%s", path);
  for (size_t i = 0; i < sizeof tables / sizeof tables[0] && !slot; i++)
    if (tables[i].p == NULL)
      slot = &tables[i];
  if (slot == NULL) {
    snprintf(err, size, "%s: too many plugins loaded at once", path);
    return -1;
  }
  /* libtyto loads tyto_plugin_NAME.so and nothing else, and looks for the
   * entry point named after NAME. */
  if (!abicheck_plugin_name(path, ".so", p->name, sizeof p->name)) {
    snprintf(err, size,
             "%s: libtyto loads only files named " ABICHECK_PREFIX
             "NAME.so, NAME of [a-z0-9_]+, and finds the entry point by "
             "that NAME; rename the file",
             path);
    return -1;
  }
  const char *kind = not_a_plugin_file(path);
  if (kind) {
    snprintf(err, size, "%s: cannot be loaded: %s", path, kind);
    return -1;
  }
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (p->dl == NULL) {
    const char *why = dlerror();
    snprintf(err, size,
             "cannot load %s: %s; give the path of a plugin .so built "
             "against <tyto/plugin.h>",
             path, why ? why : "unknown error");
    return -1;
  }
  abicheck_entry_symbol(p->name, sym, sizeof sym);
  void *entry = dlsym(p->dl, sym);
  if (entry == NULL) {
    abicheck_no_entry(p->name, msg, sizeof msg);
    snprintf(err, size, "%s: %s", path, msg);
    dlclose(p->dl);
    return -1;
  }
  tyto_plugin_init_fn init;
  /* POSIX guarantees a data pointer from dlsym converts to a function. */
  memcpy(&init, &entry, sizeof init);
  slot->p = p;
  slot->host = host_table(p);
  tyto_plugin_error *e = init(&slot->host, &p->info, &p->state);
  if (e != NULL) {
    cf_error_take(e, msg, sizeof msg);
    snprintf(err, size, "%s: init failed: %s", path, msg);
    release_slot(p);
    dlclose(p->dl);
    return -1;
  }
  abicheck_verdict v =
      abicheck_info(p->info, p->name, PACKAGE_VERSION, msg, sizeof msg);
  if (v != ABICHECK_OK) {
    snprintf(err, size, "%s: refused as libtyto refuses it: %s", path, msg);
    if (v == ABICHECK_REFUSED_SHUTDOWN) {
      abicheck_copy_table(&p->fns, sizeof p->fns, p->info->fns);
      if (p->fns.shutdown)
        p->fns.shutdown(p->state);
    }
    release_slot(p);
    dlclose(p->dl);
    return -1;
  }
  abicheck_copy_table(&p->fns, sizeof p->fns, p->info->fns);
  abicheck_copy_table(&p->dfns, sizeof p->dfns, p->info->device_fns);
  p->initialised = 1;
  offer_set *o = calloc(1, sizeof *o);
  if (o == NULL) {
    snprintf(err, size, "out of host memory");
    cf_plugin_unload(p);
    return -1;
  }
  offer_build(o);
  p->n_offer = o->n;
  tyto_plugin_claims claims = {sizeof claims, p, on_claim, on_refuse};
  e = p->fns.probe(p->state, o->hw, o->n, &claims);
  free(o);
  if (e != NULL) {
    cf_error_take(e, p->probe_error, sizeof p->probe_error);
    /* As libtyto: a failed probe leaves the plugin with no devices. */
    p->n_devices = 0;
  }
  return 0;
}

void cf_plugin_unload(cf_plugin *p) {
  if (p->initialised && p->fns.shutdown)
    p->fns.shutdown(p->state);
  release_slot(p);
  if (p->dl)
    dlclose(p->dl);
  p->dl = NULL;
  p->initialised = 0;
}
