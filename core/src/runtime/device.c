/*
 * Devices and buffers: the host side of a plugin's device table. Every call
 * into a plugin goes through here, and every plugin error becomes a status
 * plus a message that names the device.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime.h"

/* Staging copies between plugins move this much at a time. */
#define STAGE_CHUNK ((size_t)8 << 20)

tyto_device *device_new(tyto_context *ctx, plugin_rec *p) {
  tyto_device *dev = calloc(1, sizeof *dev);
  if (!dev)
    return NULL;
  size_t n = ctx->n_devices + 1;
  tyto_device **nd = realloc(ctx->devices, n * sizeof *nd);
  if (!nd) {
    free(dev);
    return NULL;
  }
  ctx->devices = nd;
  ctx->devices[ctx->n_devices++] = dev;
  dev->ctx = ctx;
  dev->plugin = p;
  pthread_mutex_init(&dev->mu, NULL);
  devmem_init(dev);
  dev->info.plugin = p->pub.name;
  dev->info.name = dev->info.vendor = dev->info.driver_version = "";
  dev->info.pci_bus_id = "";
  dev->info.numa_node = -1;
  dev->info.pci_index = -1;
  dev->info.priority = -1;
  return dev;
}

const char *device_keep(tyto_device *dev, const char *s, const char *fallback) {
  if (strlist_push(&dev->owned, s) != 0)
    return fallback;
  char *kept = dev->owned.items[dev->owned.n - 1];
  rt_sanitize_utf8(kept);
  return kept;
}

void device_free(tyto_device *dev) {
  if (!dev)
    return;
  device_close(dev);
  pthread_mutex_destroy(&dev->mu);
  devmem_free(dev);
  strlist_free(&dev->owned);
  free(dev);
}

tyto_status device_open(tyto_device *dev) {
  if (dev->handle)
    return TYTO_OK;
  plugin_rec *p = dev->plugin;
  tyto_plugin_device *h = NULL;
  tyto_plugin_error *err = p->fns.device_open(p->state, dev->info.ordinal, &h);
  if (err)
    return rt_fail_plugin(err, "device %s: cannot be opened", dev->info.id);
  if (!h)
    return rt_fail(TYTO_ERR_PLUGIN,
                   "device %s: plugin %s opened it but returned no handle",
                   dev->info.id, p->pub.name);
  dev->handle = h;
  return TYTO_OK;
}

void device_close(tyto_device *dev) {
  if (!dev->handle)
    return;
  const tyto_plugin_device_fns *f = &dev->plugin->dfns;
  /* The plugin may assume every buffer is gone before its device closes:
   * release what the program left, and keep the structs so that a late
   * tyto_buffer_free() stays harmless. */
  for (tyto_buffer *b = dev->buffers, *next; b; b = next) {
    next = b->next;
    rt_log(&dev->ctx->log, TYTO_LOG_WARN, "tyto",
           "a buffer of %zu bytes on %s was still allocated when its context "
           "was freed; its memory is released now",
           b->size, dev->info.id);
    rt_buffer_free(dev, b->handle);
    b->handle = NULL;
    b->dev = NULL;
    b->prev = b->next = NULL;
  }
  dev->buffers = NULL;
  if (dev->copy_stream)
    f->stream_destroy(dev->handle, dev->copy_stream);
  dev->copy_stream = NULL;
  f->device_close(dev->handle);
  dev->handle = NULL;
}

const tyto_device_info *tyto_device_get_info(const tyto_device *dev) {
  return dev ? &dev->info : NULL;
}

/* ---------------------------------------------------------------------- */
/* Buffers                                                                 */

tyto_status tyto_buffer_new(tyto_device *dev, size_t size, tyto_buffer **out) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_buffer_new: out is NULL");
  *out = NULL;
  if (!dev || !dev->handle)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_buffer_new: expected an opened device, got %s",
                   dev ? "a device that is not open" : "NULL");
  if (dev->info.max_alloc_bytes && size > dev->info.max_alloc_bytes)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "device %s: a buffer of %zu bytes exceeds the device's "
                   "largest allocation (%llu bytes)",
                   dev->info.id, size,
                   (unsigned long long)dev->info.max_alloc_bytes);
  tyto_buffer *b = calloc(1, sizeof *b);
  if (!b)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "out of host memory");
  tyto_plugin_error *err = rt_buffer_alloc(dev, size, &b->handle);
  if (err) {
    free(b);
    return rt_fail_plugin(err, "device %s: cannot allocate %zu bytes",
                          dev->info.id, size);
  }
  if (!b->handle) {
    free(b);
    return rt_fail(TYTO_ERR_PLUGIN,
                   "device %s: plugin %s allocated %zu bytes but returned no "
                   "buffer",
                   dev->info.id, dev->plugin->pub.name, size);
  }
  b->dev = dev;
  b->size = size;
  pthread_mutex_lock(&dev->mu);
  b->next = dev->buffers;
  if (dev->buffers)
    dev->buffers->prev = b;
  dev->buffers = b;
  pthread_mutex_unlock(&dev->mu);
  *out = b;
  return TYTO_OK;
}

void tyto_buffer_free(tyto_buffer *buf) {
  if (!buf)
    return;
  tyto_device *dev = buf->dev;
  if (dev) {
    pthread_mutex_lock(&dev->mu);
    if (buf->prev)
      buf->prev->next = buf->next;
    else
      dev->buffers = buf->next;
    if (buf->next)
      buf->next->prev = buf->prev;
    pthread_mutex_unlock(&dev->mu);
    rt_buffer_free(dev, buf->handle);
  }
  free(buf);
}

size_t tyto_buffer_size(const tyto_buffer *buf) {
  return buf ? buf->size : 0;
}

tyto_device *tyto_buffer_device(const tyto_buffer *buf) {
  return buf ? buf->dev : NULL;
}

static tyto_status check_range(const char *fn, const tyto_buffer *b,
                               size_t offset, size_t size) {
  if (!b)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: buffer is NULL", fn);
  if (!b->dev)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: the buffer's context was freed", fn);
  if (offset > b->size || size > b->size - offset)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: range [%zu, %zu + %zu) lies outside the buffer of %zu "
                   "bytes on %s",
                   fn, offset, offset, size, b->size, b->dev->info.id);
  return TYTO_OK;
}

tyto_status tyto_buffer_write(tyto_buffer *dst, size_t offset, const void *src,
                              size_t size) {
  tyto_status st = check_range("tyto_buffer_write", dst, offset, size);
  if (st != TYTO_OK || size == 0)
    return st;
  if (!src)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_buffer_write: src is NULL");
  tyto_device *d = dst->dev;
  tyto_plugin_error *err =
      d->plugin->dfns.copy_h2d(d->handle, NULL, dst->handle, offset, src, size);
  return err ? rt_fail_plugin(err, "device %s: write of %zu bytes failed",
                              d->info.id, size)
             : TYTO_OK;
}

tyto_status tyto_buffer_read(tyto_buffer *src, size_t offset, void *dst,
                             size_t size) {
  tyto_status st = check_range("tyto_buffer_read", src, offset, size);
  if (st != TYTO_OK || size == 0)
    return st;
  if (!dst)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_buffer_read: dst is NULL");
  tyto_device *d = src->dev;
  tyto_plugin_error *err =
      d->plugin->dfns.copy_d2h(d->handle, NULL, dst, src->handle, offset, size);
  return err ? rt_fail_plugin(err, "device %s: read of %zu bytes failed",
                              d->info.id, size)
             : TYTO_OK;
}

/* Copies directly between two devices of one plugin. *done stays 0 when
 * the plugin cannot (the caller then stages through host memory). */
static tyto_status try_peer(tyto_buffer *dst, size_t doff, tyto_buffer *src,
                            size_t soff, size_t size, int *done) {
  tyto_device *dd = dst->dev, *sd = src->dev;
  const tyto_plugin_device_fns *f = &dd->plugin->dfns;
  if (dd->plugin != sd->plugin || !f->copy_peer ||
      !(dd->info.flags & TYTO_DEVICE_PEER_COPY))
    return TYTO_OK;
  tyto_plugin_error *err = NULL;
  /* One copy stream per device, used by one caller at a time: the ABI
   * never lets two threads use a stream at once. */
  pthread_mutex_lock(&dd->mu);
  if (!dd->copy_stream &&
      (err = f->stream_create(dd->handle, &dd->copy_stream)) != NULL) {
    pthread_mutex_unlock(&dd->mu);
    return rt_fail_plugin(err, "device %s: cannot create a copy stream",
                          dd->info.id);
  }
  err = f->copy_peer(dd->handle, dd->copy_stream, dst->handle, doff, sd->handle,
                     src->handle, soff, size);
  if (err && err->code == TYTO_PLUGIN_ERR_UNSUPPORTED) {
    pthread_mutex_unlock(&dd->mu);
    rt_error_free(err);
    return TYTO_OK;
  }
  if (!err)
    err = f->stream_synchronize(dd->handle, dd->copy_stream);
  pthread_mutex_unlock(&dd->mu);
  if (err)
    return rt_fail_plugin(err, "peer copy %s -> %s failed", sd->info.id,
                          dd->info.id);
  *done = 1;
  return TYTO_OK;
}

static tyto_status staged_copy(tyto_buffer *dst, size_t doff, tyto_buffer *src,
                               size_t soff, size_t size) {
  size_t chunk = size < STAGE_CHUNK ? size : STAGE_CHUNK;
  void *stage = malloc(chunk);
  if (!stage)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY,
                   "out of host memory staging a copy of %zu bytes", chunk);
  tyto_status st = TYTO_OK;
  for (size_t done = 0; done < size && st == TYTO_OK; done += chunk) {
    size_t n = size - done < chunk ? size - done : chunk;
    st = tyto_buffer_read(src, soff + done, stage, n);
    if (st == TYTO_OK)
      st = tyto_buffer_write(dst, doff + done, stage, n);
  }
  free(stage);
  return st;
}

tyto_status tyto_buffer_copy(tyto_buffer *dst, size_t dst_offset,
                             tyto_buffer *src, size_t src_offset, size_t size) {
  tyto_status st =
      check_range("tyto_buffer_copy (destination)", dst, dst_offset, size);
  if (st == TYTO_OK)
    st = check_range("tyto_buffer_copy (source)", src, src_offset, size);
  if (st != TYTO_OK || size == 0)
    return st;
  if (dst == src && dst_offset < src_offset + size &&
      src_offset < dst_offset + size)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "tyto_buffer_copy: source [%zu, +%zu) and destination "
                   "[%zu, +%zu) overlap in one buffer",
                   src_offset, size, dst_offset, size);
  if (dst->dev == src->dev) {
    tyto_device *d = dst->dev;
    tyto_plugin_error *err =
        d->plugin->dfns.copy_d2d(d->handle, NULL, dst->handle, dst_offset,
                                 src->handle, src_offset, size);
    return err ? rt_fail_plugin(err, "device %s: copy of %zu bytes failed",
                                d->info.id, size)
               : TYTO_OK;
  }
  int done = 0;
  st = try_peer(dst, dst_offset, src, src_offset, size, &done);
  if (st != TYTO_OK || done)
    return st;
  return staged_copy(dst, dst_offset, src, src_offset, size);
}
