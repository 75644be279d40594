/*
 * Device memory accounting: every device buffer the library allocates
 * (tyto_buffer_new, and a compiled program's arenas, owned buffers,
 * workspaces and scratch) goes through rt_buffer_alloc() and
 * rt_buffer_free(), which count the bytes each device holds now and at
 * most. A plugin buffer's handle does not tell its size, so each device
 * keeps a table from handle to size (uthash); it is touched only when a
 * buffer is allocated or freed, which compiling does, not running.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime.h"

/* A failed add leaves the table as it was and sets `oom` on this thread
 * (as in nameidx.c). */
static _Thread_local int oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (oom = 1)
#include <uthash.h>

struct devmem_entry {
  const tyto_plugin_buffer *buf; /* the key */
  uint64_t size;
  UT_hash_handle hh;
};

void devmem_init(tyto_device *dev) {
  pthread_mutex_init(&dev->mem_mu, NULL);
}

void devmem_free(tyto_device *dev) {
  struct devmem_entry *e, *tmp;
  HASH_ITER(hh, dev->mem_tab, e, tmp) {
    HASH_DEL(dev->mem_tab, e);
    free(e);
  }
  pthread_mutex_destroy(&dev->mem_mu);
}

tyto_plugin_error *rt_buffer_alloc(tyto_device *dev, uint64_t size,
                                   tyto_plugin_buffer **out) {
  *out = NULL;
  tyto_plugin_error *err =
      dev->plugin->dfns.buffer_alloc(dev->handle, size, out);
  if (err || !*out)
    return err;
  struct devmem_entry *e = malloc(sizeof *e);
  pthread_mutex_lock(&dev->mem_mu);
  oom = 0;
  if (e) {
    e->buf = *out;
    e->size = size;
    HASH_ADD_PTR(dev->mem_tab, buf, e);
  }
  if (!e || oom) {
    pthread_mutex_unlock(&dev->mem_mu);
    free(e);
    dev->plugin->dfns.buffer_free(dev->handle, *out);
    *out = NULL;
    return rt_error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "out of host memory recording a buffer of %llu bytes",
                        (unsigned long long)size);
  }
  dev->mem_live++;
  dev->mem_total++;
  dev->mem_in_use += size;
  if (dev->mem_in_use > dev->mem_peak)
    dev->mem_peak = dev->mem_in_use;
  pthread_mutex_unlock(&dev->mem_mu);
  return NULL;
}

void rt_buffer_free(tyto_device *dev, tyto_plugin_buffer *buf) {
  if (buf) {
    struct devmem_entry *e = NULL;
    pthread_mutex_lock(&dev->mem_mu);
    HASH_FIND_PTR(dev->mem_tab, &buf, e);
    if (e) {
      HASH_DEL(dev->mem_tab, e);
      dev->mem_live--;
      dev->mem_in_use -= e->size;
    }
    pthread_mutex_unlock(&dev->mem_mu);
    free(e);
  }
  dev->plugin->dfns.buffer_free(dev->handle, buf);
}

tyto_status tyto_device_memory_get(const tyto_device *dev,
                                   tyto_device_memory *out) {
  static const char fn[] = "tyto_device_memory_get";
  if (!dev || !out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                   dev ? "out" : "device");
  size_t n = out->struct_size;
  if (n < sizeof n)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: out->struct_size %zu is too small; set it to "
                   "sizeof(tyto_device_memory)",
                   fn, n);
  tyto_device_memory m;
  memset(&m, 0, sizeof m);
  /* The lock is the device's, not part of its value. */
  tyto_device *d = (tyto_device *)dev;
  pthread_mutex_lock(&d->mem_mu);
  m.bytes_in_use = d->mem_in_use;
  m.peak_bytes = d->mem_peak;
  m.n_allocations = d->mem_live;
  m.total_allocations = d->mem_total;
  pthread_mutex_unlock(&d->mem_mu);
  if (n > sizeof m)
    n = sizeof m;
  memcpy((char *)out + sizeof n, (const char *)&m + sizeof n, n - sizeof n);
  return TYTO_OK;
}

tyto_status tyto_device_memory_reset_peak(tyto_device *dev) {
  if (!dev)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_device_memory_reset_peak: device is NULL");
  pthread_mutex_lock(&dev->mem_mu);
  dev->mem_peak = dev->mem_in_use;
  pthread_mutex_unlock(&dev->mem_mu);
  return TYTO_OK;
}
