/*
 * Device buffers, copies (host<->device, within a device, between devices)
 * and page-locked host memory. Every range is checked against the buffer
 * before CUDA sees it, so a bad offset is an INVALID_ARGUMENT with numbers,
 * not a device fault.
 */
#include <stdlib.h>

#include "cuda_plugin.h"

/* Size-0 buffers own no memory: ptr stays NULL (cudaMalloc(0) would give
 * NULL too, but only after creating a context for nothing). */
tyto_plugin_error *tcu_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_buffer *b;
  tyto_plugin_error *err;
  cudaError_t e;
  if (out == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "buffer_alloc: out is NULL");
  *out = NULL;
  if (size > SIZE_MAX)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "buffer_alloc: %llu bytes exceed the address space",
                           (unsigned long long)size);
  b = calloc(1, sizeof *b);
  if (b == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "buffer_alloc: out of host memory");
  b->size = size;
  b->device = dev->index;
  if (size > 0) {
    if ((err = tcu_use(host, dev->index)) != NULL) {
      free(b);
      return err;
    }
    e = cudaMalloc(&b->ptr, (size_t)size);
    if (e != cudaSuccess) {
      free(b);
      return tcu_cuda_error(host, e, "cuda:%d: cudaMalloc(%llu bytes)",
                            dev->index, (unsigned long long)size);
    }
  }
  *out = b;
  return NULL;
}

void tcu_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf) {
  const tyto_plugin_host *host = dev->state->host;
  if (buf == NULL)
    return;
  if (buf->ptr != NULL) {
    cudaError_t e = cudaSetDevice(buf->device);
    if (e == cudaSuccess)
      e = cudaFree(buf->ptr);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
                "cuda:%d: freeing a %llu-byte buffer failed: %s", buf->device,
                (unsigned long long)buf->size, cudaGetErrorName(e));
    }
  }
  free(buf);
}

/* Checks that [offset, offset + size) lies in `b`, owned by `dev`. */
static tyto_plugin_error *check_range(const tyto_plugin_device *dev,
                                      const char *fn, const char *which,
                                      const tyto_plugin_buffer *b,
                                      uint64_t offset, uint64_t size) {
  const tyto_plugin_host *host = dev->state->host;
  if (b == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s buffer is NULL", fn, which);
  if (b->device != dev->index)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "%s: %s buffer belongs to cuda:%d, not cuda:%d", fn,
                           which, b->device, dev->index);
  if (offset > b->size || size > b->size - offset)
    return host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: %s range out of bounds: offset %llu + size %llu > buffer size "
        "%llu bytes",
        fn, which, (unsigned long long)offset, (unsigned long long)size,
        (unsigned long long)b->size);
  return NULL;
}

static tyto_plugin_error *check_stream(const tyto_plugin_device *dev,
                                       const char *fn,
                                       const tyto_plugin_stream *s) {
  if (s != NULL && s->device != dev->index)
    return dev->state->host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "%s: the stream belongs to cuda:%d, not cuda:%d", fn, s->device,
        dev->index);
  return NULL;
}

/* One copy, enqueued on s, or complete on return when s is NULL. The
 * synchronous path syncs the legacy stream after cudaMemcpy because
 * cudaMemcpy may return before the DMA lands (pageable host->device,
 * device->device), and our non-blocking streams are not ordered after the
 * legacy stream: without the sync, later work could read stale data. */
static tyto_plugin_error *do_copy(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, const char *fn,
                                  void *dst, const void *src, uint64_t size,
                                  enum cudaMemcpyKind kind) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (size == 0)
    return NULL;
  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  if (s != NULL) {
    e = cudaMemcpyAsync(dst, src, (size_t)size, kind, s->stream);
    if (e != cudaSuccess)
      return tcu_cuda_error(host, e, "cuda:%d: %s: cudaMemcpyAsync(%llu bytes)",
                            dev->index, fn, (unsigned long long)size);
    return NULL;
  }
  e = cudaMemcpy(dst, src, (size_t)size, kind);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: %s: cudaMemcpy(%llu bytes)",
                          dev->index, fn, (unsigned long long)size);
  e = cudaStreamSynchronize(cudaStreamLegacy);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "cuda:%d: %s: cudaStreamSynchronize",
                          dev->index, fn);
  return NULL;
}

tyto_plugin_error *tcu_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size) {
  tyto_plugin_error *err;
  if ((err = check_stream(dev, "copy_h2d", s)) != NULL ||
      (err = check_range(dev, "copy_h2d", "destination", dst, dst_offset,
                         size)) != NULL)
    return err;
  if (src == NULL && size > 0)
    return dev->state->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                       "copy_h2d: source pointer is NULL");
  return do_copy(dev, s, "copy_h2d", (char *)dst->ptr + dst_offset, src, size,
                 cudaMemcpyHostToDevice);
}

tyto_plugin_error *tcu_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size) {
  tyto_plugin_error *err;
  if ((err = check_stream(dev, "copy_d2h", s)) != NULL ||
      (err = check_range(dev, "copy_d2h", "source", src, src_offset, size)) !=
          NULL)
    return err;
  if (dst == NULL && size > 0)
    return dev->state->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                       "copy_d2h: destination pointer is NULL");
  return do_copy(dev, s, "copy_d2h", dst, (const char *)src->ptr + src_offset,
                 size, cudaMemcpyDeviceToHost);
}

tyto_plugin_error *tcu_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size) {
  tyto_plugin_error *err;
  if ((err = check_stream(dev, "copy_d2d", s)) != NULL ||
      (err = check_range(dev, "copy_d2d", "destination", dst, dst_offset,
                         size)) != NULL ||
      (err = check_range(dev, "copy_d2d", "source", src, src_offset, size)) !=
          NULL)
    return err;
  return do_copy(dev, s, "copy_d2d", (char *)dst->ptr + dst_offset,
                 (const char *)src->ptr + src_offset, size,
                 cudaMemcpyDeviceToDevice);
}

/* Turns on direct access from `from` to `to` the first time a copy needs
 * it. cudaMemcpyPeer works without it (the driver stages through the host),
 * so a failure only costs speed and is logged, not returned. Leaves the
 * current device unspecified: callers set theirs afterwards. */
static void enable_peer(tyto_plugin_state *st, int from, int to) {
  size_t slot = (size_t)from * (size_t)st->n_hw + (size_t)to;
  if (!st->can_peer[slot])
    return;
  pthread_mutex_lock(&st->peer_lock);
  if (!st->peer_enabled[slot]) {
    cudaError_t e = cudaSetDevice(from);
    if (e == cudaSuccess)
      e = cudaDeviceEnablePeerAccess(to, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
      st->host->log(st->host->ctx, TYTO_PLUGIN_LOG_WARN,
                    "cuda:%d: peer access to cuda:%d not enabled (%s); "
                    "copies between them go through host memory",
                    from, to, cudaGetErrorName(e));
    (void)cudaGetLastError();
    st->peer_enabled[slot] = 1; /* tried: do not retry on every copy */
  }
  pthread_mutex_unlock(&st->peer_lock);
}

tyto_plugin_error *tcu_copy_peer(tyto_plugin_device *dst_dev,
                                 tyto_plugin_stream *s, tyto_plugin_buffer *dst,
                                 uint64_t dst_offset,
                                 tyto_plugin_device *src_dev,
                                 tyto_plugin_buffer *src, uint64_t src_offset,
                                 uint64_t size) {
  const tyto_plugin_host *host = dst_dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  void *d;
  const void *sp;
  if (src_dev == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "copy_peer: source device is NULL");
  if ((err = check_stream(dst_dev, "copy_peer", s)) != NULL ||
      (err = check_range(dst_dev, "copy_peer", "destination", dst, dst_offset,
                         size)) != NULL ||
      (err = check_range(src_dev, "copy_peer", "source", src, src_offset,
                         size)) != NULL)
    return err;
  if (size == 0)
    return NULL;
  if (src_dev->index == dst_dev->index)
    return tcu_copy_d2d(dst_dev, s, dst, dst_offset, src, src_offset, size);
  enable_peer(dst_dev->state, dst_dev->index, src_dev->index);
  enable_peer(dst_dev->state, src_dev->index, dst_dev->index);
  if ((err = tcu_use(host, dst_dev->index)) != NULL)
    return err;
  d = (char *)dst->ptr + dst_offset;
  sp = (const char *)src->ptr + src_offset;
  /* Without a stream: enqueue on the legacy stream and wait for it, since
   * cudaMemcpyPeer itself may return before the copy lands. */
  e = cudaMemcpyPeerAsync(d, dst_dev->index, sp, src_dev->index, (size_t)size,
                          s != NULL ? s->stream : cudaStreamLegacy);
  if (e == cudaSuccess && s == NULL)
    e = cudaStreamSynchronize(cudaStreamLegacy);
  if (e != cudaSuccess)
    return tcu_cuda_error(host, e, "copy_peer cuda:%d -> cuda:%d (%llu bytes)",
                          src_dev->index, dst_dev->index,
                          (unsigned long long)size);
  return NULL;
}

/* Portable: the staging memory serves copies to and from every device of
 * the plugin, not only the one that allocated it. */
tyto_plugin_error *tcu_host_alloc_pinned(tyto_plugin_device *dev, uint64_t size,
                                         void **out) {
  const tyto_plugin_host *host = dev->state->host;
  tyto_plugin_error *err;
  cudaError_t e;
  if (out == NULL)
    return host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                           "host_alloc_pinned: out is NULL");
  *out = NULL;
  if (size == 0)
    return NULL;
  if (size > SIZE_MAX)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "host_alloc_pinned: %llu bytes exceed the address "
                           "space",
                           (unsigned long long)size);
  if ((err = tcu_use(host, dev->index)) != NULL)
    return err;
  e = cudaHostAlloc(out, (size_t)size, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    *out = NULL;
    return tcu_cuda_error(host, e, "cuda:%d: cudaHostAlloc(%llu bytes)",
                          dev->index, (unsigned long long)size);
  }
  return NULL;
}

void tcu_host_free_pinned(tyto_plugin_device *dev, void *ptr) {
  const tyto_plugin_host *host = dev->state->host;
  cudaError_t e;
  if (ptr == NULL)
    return;
  e = cudaFreeHost(ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    host->log(host->ctx, TYTO_PLUGIN_LOG_WARN,
              "cuda:%d: cudaFreeHost failed: %s", dev->index,
              cudaGetErrorName(e));
  }
}
