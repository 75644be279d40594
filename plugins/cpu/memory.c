/*
 * CPU buffers and copies. Large buffers are bound to the device's NUMA
 * nodes through hwloc (first touch would otherwise place pages wherever the
 * first writer runs); small ones come from aligned_alloc. A copy with a
 * stream is queued on the stream's thread; without one it is a memcpy here.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu.h"

tyto_plugin_error *cpu_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out) {
  const tyto_plugin_host *h = dev->st->host;
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  if (!b)
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "out of host memory");
  b->size = size;
  if (size >= CPU_NUMA_MIN && size <= SIZE_MAX) {
    b->ptr = hwloc_alloc_membind(dev->st->topo, (size_t)size, dev->nodeset,
                                 HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET);
    if (!b->ptr) /* binding refused (e.g. in a container): plain pages */
      b->ptr = hwloc_alloc(dev->st->topo, (size_t)size);
    b->bound = b->ptr != NULL;
  } else if (size > 0) {
    size_t rounded = ((size_t)size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    b->ptr = aligned_alloc(CPU_ALIGN, rounded);
  }
  if (size > 0 && !b->ptr) {
    free(b);
    return h->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                        "cannot allocate %llu bytes of host memory",
                        (unsigned long long)size);
  }
  *out = b;
  return NULL;
}

void cpu_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf) {
  if (!buf)
    return;
  if (buf->bound)
    hwloc_free(dev->st->topo, buf->ptr, (size_t)buf->size);
  else
    free(buf->ptr);
  free(buf);
}

void *cpu_buffer_host_ptr(tyto_plugin_device *dev, tyto_plugin_buffer *buf) {
  (void)dev;
  return buf ? buf->ptr : NULL;
}

static tyto_plugin_error *check_range(const tyto_plugin_host *h,
                                      const char *what,
                                      const tyto_plugin_buffer *b,
                                      uint64_t offset, uint64_t size) {
  if (!b)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT, "%s: NULL buffer",
                        what);
  if (offset > b->size || size > b->size - offset)
    return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                        "%s: offset %llu + size %llu lies outside the buffer "
                        "of %llu bytes",
                        what, (unsigned long long)offset,
                        (unsigned long long)size, (unsigned long long)b->size);
  return NULL;
}

/* Copies now, or queues the copy on s. */
static tyto_plugin_error *do_copy(tyto_plugin_device *dev,
                                  tyto_plugin_stream *s, void *dst,
                                  const void *src, uint64_t size) {
  if (size == 0)
    return NULL;
  if (!s) {
    memmove(dst, src, (size_t)size);
    return NULL;
  }
  cpu_cmd *c = calloc(1, sizeof *c);
  if (!c)
    return dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "out of host memory queueing a copy");
  c->kind = CPU_CMD_COPY;
  c->u.copy.dst = dst;
  c->u.copy.src = src;
  c->u.copy.size = size;
  return cpu_stream_enqueue(s, c);
}

tyto_plugin_error *cpu_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size) {
  tyto_plugin_error *e =
      check_range(dev->st->host, "copy_h2d", dst, dst_offset, size);
  return e ? e : do_copy(dev, s, dst->ptr + dst_offset, src, size);
}

tyto_plugin_error *cpu_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size) {
  tyto_plugin_error *e =
      check_range(dev->st->host, "copy_d2h", src, src_offset, size);
  return e ? e : do_copy(dev, s, dst, src->ptr + src_offset, size);
}

tyto_plugin_error *cpu_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size) {
  const tyto_plugin_host *h = dev->st->host;
  tyto_plugin_error *e =
      check_range(h, "copy_d2d (destination)", dst, dst_offset, size);
  if (!e)
    e = check_range(h, "copy_d2d (source)", src, src_offset, size);
  return e ? e
           : do_copy(dev, s, dst->ptr + dst_offset, src->ptr + src_offset,
                     size);
}

/* Every CPU device shares one address space, so a peer copy is a copy. */
tyto_plugin_error *cpu_copy_peer(tyto_plugin_device *dst_dev,
                                 tyto_plugin_stream *s, tyto_plugin_buffer *dst,
                                 uint64_t dst_offset,
                                 tyto_plugin_device *src_dev,
                                 tyto_plugin_buffer *src, uint64_t src_offset,
                                 uint64_t size) {
  (void)src_dev;
  return cpu_copy_d2d(dst_dev, s, dst, dst_offset, src, src_offset, size);
}
