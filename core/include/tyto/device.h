/*
 * Devices and their memory.
 *
 * A tyto_device is an opened device of some plugin, owned by its context.
 * Buffers are blocks of that device's memory; copies between host and device,
 * and between any two devices (of the same plugin or not), are synchronous
 * here: they are complete when the call returns. Compiled programs manage
 * their own memory and streams; this API is for moving data in and out and
 * for tools.
 */
#ifndef TYTO_DEVICE_H
#define TYTO_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/context.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_buffer tyto_buffer;

/* The device's description. Owned by the context. */
TYTO_API const tyto_device_info *tyto_device_get_info(const tyto_device *dev);

/* Allocates `size` bytes on dev. Free with tyto_buffer_free(); buffers
 * still alive when their context is freed are released then (with a
 * warning), and only tyto_buffer_free() may be called on them afterwards. Fails
 * with TYTO_ERR_OUT_OF_MEMORY when the device is full. */
TYTO_API tyto_status tyto_buffer_new(tyto_device *dev, size_t size,
                                     tyto_buffer **out);
/* NULL ok. */
TYTO_API void tyto_buffer_free(tyto_buffer *buf);
TYTO_API size_t tyto_buffer_size(const tyto_buffer *buf);
TYTO_API tyto_device *tyto_buffer_device(const tyto_buffer *buf);

/* Host → buffer and buffer → host. Ranges are checked. */
TYTO_API tyto_status tyto_buffer_write(tyto_buffer *dst, size_t offset,
                                       const void *src, size_t size);
TYTO_API tyto_status tyto_buffer_read(tyto_buffer *src, size_t offset,
                                      void *dst, size_t size);

/* Buffer → buffer on any two devices (two ranges of one buffer must not
 * overlap): on one device a device copy, between
 * devices of one plugin a peer copy where the plugin offers it, otherwise
 * staged through host memory. */
TYTO_API tyto_status tyto_buffer_copy(tyto_buffer *dst, size_t dst_offset,
                                      tyto_buffer *src, size_t src_offset,
                                      size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_DEVICE_H */
