/*
 * Buffers and copies between host memory and device buffers.
 *
 * With a stream a copy is enqueued without blocking and its event is
 * tracked on the stream, so a failure surfaces from stream_synchronize().
 * With stream == NULL the copy runs on the device's internal queue and is
 * complete (or has failed) when the call returns.
 *
 * Every range is checked against the buffer's size before OpenCL sees it:
 * an out-of-range copy is the caller's mistake and must say so plainly
 * instead of surfacing as CL_INVALID_VALUE.
 */
#include "ocl.h"

#include <stdlib.h>

#include "errors.h"

#define HOST(dev) ((dev)->state->host)

tyto_plugin_error *ocl_buffer_alloc(tyto_plugin_device *dev, uint64_t size,
                                    tyto_plugin_buffer **out) {
  if (out == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "buffer_alloc: out is NULL");
  const ocl_devinfo *d = dev->info;
  if (size > d->max_alloc_bytes || size > (uint64_t)SIZE_MAX)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "buffer_alloc: %llu bytes requested, but \"%s\" allows "
                     "at most %llu bytes in one buffer "
                     "(CL_DEVICE_MAX_MEM_ALLOC_SIZE); split the allocation",
                     (unsigned long long)size, d->name,
                     (unsigned long long)d->max_alloc_bytes);
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  if (b == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                     "buffer_alloc: out of host memory");
  b->size = size;
  /* OpenCL rejects size 0; a zero-size buffer keeps no cl_mem and every
   * copy of it has size 0, which never reaches OpenCL. */
  if (size > 0) {
    cl_int err = CL_SUCCESS;
    /* host_memory: over fine-grained SVM (ocl.h); a device that cannot
     * give it this time gets a buffer of its own, which the core copies
     * from (buffer_host_ptr: NULL). */
    if (d->host_memory)
      b->svm = clSVMAlloc(dev->context,
                          CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER,
                          (size_t)size, (cl_uint)d->alignment);
    b->mem = clCreateBuffer(
        dev->context, CL_MEM_READ_WRITE | (b->svm ? CL_MEM_USE_HOST_PTR : 0),
        (size_t)size, b->svm, &err);
    if (b->mem == NULL || err != CL_SUCCESS) {
      if (b->mem != NULL)
        clReleaseMemObject(b->mem);
      if (b->svm != NULL)
        clSVMFree(dev->context, b->svm);
      free(b);
      if (err == CL_INVALID_BUFFER_SIZE || err == CL_SUCCESS)
        err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
      return ocl_error_cl(HOST(dev), "clCreateBuffer", err,
                          "allocating %llu bytes on \"%s\" (%llu bytes of "
                          "device memory in all)",
                          (unsigned long long)size, d->name,
                          (unsigned long long)d->memory_bytes);
    }
  }
  *out = b;
  return NULL;
}

void ocl_buffer_free(tyto_plugin_device *dev, tyto_plugin_buffer *buf) {
  if (buf == NULL)
    return;
  if (buf->mem != NULL)
    clReleaseMemObject(buf->mem);
  /* No stream uses the buffer any more (the ABI's rule), so its storage
   * can go with it. */
  if (buf->svm != NULL)
    clSVMFree(dev->context, buf->svm);
  free(buf);
}

void *ocl_buffer_host_ptr(tyto_plugin_device *dev, tyto_plugin_buffer *buf) {
  (void)dev;
  return buf != NULL ? buf->svm : NULL;
}

/* NULL when [offset, offset + size) lies inside `buf`; written to avoid
 * overflow of offset + size. */
static tyto_plugin_error *check_range(tyto_plugin_device *dev, const char *what,
                                      const char *side,
                                      const tyto_plugin_buffer *buf,
                                      uint64_t offset, uint64_t size) {
  if (buf == NULL)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the %s buffer is NULL", what, side);
  if (offset > buf->size || size > buf->size - offset)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the %s range (%llu bytes at offset %llu) runs "
                     "past the end of the %llu-byte buffer",
                     what, side, (unsigned long long)size,
                     (unsigned long long)offset, (unsigned long long)buf->size);
  return NULL;
}

/* Common checks of a copy call: the stream belongs to `dev`, the host
 * pointer is set when bytes move, and the copy fits in size_t. */
static tyto_plugin_error *check_call(tyto_plugin_device *dev,
                                     tyto_plugin_stream *s, const char *what,
                                     const void *host_ptr, int has_host_ptr,
                                     uint64_t size) {
  tyto_plugin_error *e;
  if (s != NULL && (e = ocl_stream_check(dev, s, what)) != NULL)
    return e;
  if (has_host_ptr && host_ptr == NULL && size > 0)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: the host pointer is NULL for a %llu-byte copy", what,
                     (unsigned long long)size);
  if (size > (uint64_t)SIZE_MAX)
    return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                     "%s: %llu bytes do not fit in this host's size_t", what,
                     (unsigned long long)size);
  return NULL;
}

/* After an enqueue: track the event on `s`, or wait for it on the NULL
 * stream; turn an enqueue failure into an error. */
static tyto_plugin_error *finish(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                 cl_int err, cl_event ev, const char *call,
                                 const char *what, uint64_t size) {
  if (err != CL_SUCCESS) {
    if (ev != NULL)
      clReleaseEvent(ev);
    return ocl_error_cl(HOST(dev), call, err, "%s of %llu bytes on \"%s\"",
                        what, (unsigned long long)size, dev->info->name);
  }
  if (s != NULL) {
    ocl_stream_track(s, ev, what);
    return NULL;
  }
  return ocl_wait_sync(dev, ev, what);
}

tyto_plugin_error *ocl_copy_h2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                const void *src, uint64_t size) {
  static const char what[] = "copy_h2d";
  tyto_plugin_error *e;
  if ((e = check_call(dev, s, what, src, 1, size)) != NULL ||
      (e = check_range(dev, what, "destination", dst, dst_offset, size)) !=
          NULL)
    return e;
  if (size == 0)
    return NULL;
  if (s != NULL && (e = ocl_stream_reserve(s)) != NULL)
    return e;
  cl_event ev = NULL;
  cl_int err =
      clEnqueueWriteBuffer(s ? s->queue : dev->sync_queue, dst->mem, CL_FALSE,
                           (size_t)dst_offset, (size_t)size, src, 0, NULL, &ev);
  return finish(dev, s, err, ev, "clEnqueueWriteBuffer", what, size);
}

tyto_plugin_error *ocl_copy_d2h(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                void *dst, tyto_plugin_buffer *src,
                                uint64_t src_offset, uint64_t size) {
  static const char what[] = "copy_d2h";
  tyto_plugin_error *e;
  if ((e = check_call(dev, s, what, dst, 1, size)) != NULL ||
      (e = check_range(dev, what, "source", src, src_offset, size)) != NULL)
    return e;
  if (size == 0)
    return NULL;
  if (s != NULL && (e = ocl_stream_reserve(s)) != NULL)
    return e;
  cl_event ev = NULL;
  cl_int err =
      clEnqueueReadBuffer(s ? s->queue : dev->sync_queue, src->mem, CL_FALSE,
                          (size_t)src_offset, (size_t)size, dst, 0, NULL, &ev);
  return finish(dev, s, err, ev, "clEnqueueReadBuffer", what, size);
}

tyto_plugin_error *ocl_copy_d2d(tyto_plugin_device *dev, tyto_plugin_stream *s,
                                tyto_plugin_buffer *dst, uint64_t dst_offset,
                                tyto_plugin_buffer *src, uint64_t src_offset,
                                uint64_t size) {
  static const char what[] = "copy_d2d";
  tyto_plugin_error *e;
  if ((e = check_call(dev, s, what, NULL, 0, size)) != NULL ||
      (e = check_range(dev, what, "source", src, src_offset, size)) != NULL ||
      (e = check_range(dev, what, "destination", dst, dst_offset, size)) !=
          NULL)
    return e;
  if (size == 0)
    return NULL;
  if (src == dst) {
    /* A copy onto itself changes nothing; a partial overlap has no defined
     * result in OpenCL (CL_MEM_COPY_OVERLAP). */
    if (src_offset == dst_offset)
      return NULL;
    if (src_offset < dst_offset + size && dst_offset < src_offset + size)
      return ocl_error(HOST(dev), TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                       "copy_d2d: source [%llu, +%llu) and destination "
                       "[%llu, +%llu) overlap in one buffer; copy through "
                       "a temporary buffer",
                       (unsigned long long)src_offset, (unsigned long long)size,
                       (unsigned long long)dst_offset,
                       (unsigned long long)size);
  }
  if (s != NULL && (e = ocl_stream_reserve(s)) != NULL)
    return e;
  cl_event ev = NULL;
  cl_int err = clEnqueueCopyBuffer(
      s ? s->queue : dev->sync_queue, src->mem, dst->mem, (size_t)src_offset,
      (size_t)dst_offset, (size_t)size, 0, NULL, &ev);
  return finish(dev, s, err, ev, "clEnqueueCopyBuffer", what, size);
}
