/*
 * The runtime context's internals, shared by context.c (set-up and
 * selection), loader.c (plugins) and device.c (devices and buffers).
 */
#ifndef TYTO_RUNTIME_RUNTIME_H
#define TYTO_RUNTIME_RUNTIME_H

#include <ltdl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include <tyto/context.h>
#include <tyto/device.h>
#include <tyto/plugin.h>
#include <tyto/program.h>

#include "conf.h"
#include "log.h"
#include "strlist.h"
#include "topology.h"

typedef struct plugin_rec {
  tyto_found_plugin pub;
  struct tyto_context *ctx;
  lt_dlhandle handle;
  void *pin; /* our own RTLD_NOW handle on the same object */
  const tyto_plugin_info *info;
  uint32_t n_options; /* validated entries of info->options */
  tyto_plugin_state *state;
  /* The plugin's tables copied into structs of the host's size, zero past
   * the plugin's struct_size: a field the plugin lacks reads as NULL. */
  tyto_plugin_fns fns;
  tyto_plugin_device_fns dfns;
  tyto_plugin_host host; /* handed to the plugin; ctx points to this rec */
  strlist owned;         /* strings pub points into */
} plugin_rec;

/* A live plugin buffer and its size, as devmem.c counts them (a uthash
 * table keyed by the handle). */
struct devmem_entry;

struct tyto_device {
  tyto_device_info info;
  struct tyto_context *ctx;
  plugin_rec *plugin;
  tyto_plugin_device *handle;      /* NULL until opened */
  pthread_mutex_t mu;              /* guards copy_stream and buffers */
  tyto_plugin_stream *copy_stream; /* for peer copies */
  struct tyto_buffer *buffers;     /* live buffers, released at close */
  strlist owned;
  /* Device memory accounting (devmem.c), guarded by mem_mu: every buffer
   * rt_buffer_alloc() made and rt_buffer_free() has not freed yet, in an
   * open-addressing table keyed by handle. */
  pthread_mutex_t mem_mu;
  struct devmem_entry *mem_tab;
  uint64_t mem_in_use, mem_peak, mem_live, mem_total;
};

struct tyto_buffer {
  tyto_device *dev; /* NULL once the context was freed under it */
  tyto_plugin_buffer *handle;
  size_t size;
  struct tyto_buffer *prev, *next;
};

struct tyto_context {
  /* The caller's reference (tyto_context_free drops it) and one per
   * program, evaluation cache and data-parallel run made on it: the
   * devices and plugins stay until the last goes (rt_context_hold). */
  atomic_size_t refs;
  rt_logger log;
  conf cfg;
  topology topo;
  strlist dirs;
  plugin_rec **plugins;
  size_t n_plugins;
  tyto_device **devices; /* claimed and refused, in discovery order */
  size_t n_devices;
  tyto_device **selected; /* opened, in priority order */
  size_t n_selected;
  char *selection, *selection_source, *selection_error;
  int ltdl_ready;
  int ignore_env; /* TYTO_CONTEXT_IGNORE_ENV: no environment lookups */
  /* Device profiles measured or read this far (compile/calibrate.c owns
   * them; the runtime only frees them with the context). */
  void *profiles;
  void (*profiles_free)(void *);
};

/* context.c: a reference that keeps ctx (its devices, plugins and
 * everything their kernels and buffers need) until released; the last
 * release, the caller's tyto_context_free or an object's, frees it. */
void rt_context_hold(struct tyto_context *ctx);
void rt_context_release(struct tyto_context *ctx);

/* loader.c: scans ctx->dirs, loads every plugin, probes each with the
 * topology's offer and records their devices. Fails only when out of
 * memory; every per-plugin problem is recorded in that plugin's record. */
tyto_status loader_load_all(struct tyto_context *ctx);
/* Closes nothing; shuts every loaded plugin down and unloads it. */
void loader_unload_all(struct tyto_context *ctx);
/* The loaded plugin with this name, or NULL. */
plugin_rec *loader_find(const struct tyto_context *ctx, const char *name);
/* The first record (of any status) with this name, or NULL. */
plugin_rec *loader_find_any(const struct tyto_context *ctx, const char *name);

/* device.c */
tyto_device *device_new(struct tyto_context *ctx, plugin_rec *p);
/* Keeps a sanitised copy of `s` with the device; returns it, or `fallback`
 * when out of memory. */
const char *device_keep(tyto_device *dev, const char *s, const char *fallback);
void device_free(tyto_device *dev);
/* Opens dev through its plugin; on failure returns a status with the
 * message set and leaves dev closed. */
tyto_status device_open(tyto_device *dev);
void device_close(tyto_device *dev);

/* devmem.c: every device buffer the library allocates goes through these,
 * so that tyto_device_memory_get() sees it. rt_buffer_alloc() allocates
 * `size` bytes on opened device dev through its plugin and counts them;
 * it returns the plugin's error (or one of its own when the host is out of
 * memory), NULL on success. rt_buffer_free() frees buf (NULL ok, as the
 * plugin's buffer_free) and uncounts it. */
tyto_plugin_error *rt_buffer_alloc(tyto_device *dev, uint64_t size,
                                   tyto_plugin_buffer **out);
void rt_buffer_free(tyto_device *dev, tyto_plugin_buffer *buf);
/* Initialises and releases dev's accounting (device_new, device_free). */
void devmem_init(tyto_device *dev);
void devmem_free(tyto_device *dev);

/* runtime/env.c: an on/off environment variable: 1 on ("1", "on", "yes",
 * "true", in any case), 0 off ("0", "off", "no", "false"), -1 unset or
 * empty; -2 anything else, with the message set. */
int rt_env_switch(const char *name);
/* TYTO_PLACEMENT's words (pinned, auto, strict) into a policy left at
 * TYTO_PLACE_DEFAULT and *strict; INVALID_ARGUMENT on any other word. */
tyto_status rt_env_placement(tyto_place_policy *policy, int *strict);
/* Both read of TYTO_GRAPHS, TYTO_PROFILE and TYTO_PLACEMENT at once:
 * TYTO_ERR_CONFIG, the message naming the first bad one, or TYTO_OK. */
tyto_status rt_env_check(void);

#endif
