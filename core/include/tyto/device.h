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

/* The device memory tyto holds on a device: every buffer of
 * tyto_buffer_new() and of compiled programs (arenas, parameters, inputs,
 * outputs, workspaces), at the sizes asked of the plugin. Memory a plugin
 * or its libraries take on their own (a CUDA context, cuBLAS's workspace,
 * an allocator's rounding) is not in it. */
typedef struct tyto_device_memory {
  size_t struct_size;     /* set by the caller to sizeof(tyto_device_memory) */
  uint64_t bytes_in_use;  /* allocated now */
  uint64_t peak_bytes;    /* the most allocated at once since the context
                             opened the device or the last reset */
  uint64_t n_allocations; /* buffers allocated now */
  uint64_t total_allocations; /* buffers allocated since the device opened */
} tyto_device_memory;

/* Fills *out with dev's figures (set out->struct_size first; fields past
 * it are left alone). Safe to call from any thread, while programs run.
 * TYTO_ERR_INVALID_ARGUMENT for NULL arguments or a struct_size smaller
 * than a size_t. */
TYTO_API tyto_status tyto_device_memory_get(const tyto_device *dev,
                                            tyto_device_memory *out);
/* Starts a new peak: peak_bytes becomes bytes_in_use. TYTO_ERR_INVALID_ARGUMENT
 * for NULL. */
TYTO_API tyto_status tyto_device_memory_reset_peak(tyto_device *dev);

/* Allocates `size` bytes on dev. Free with tyto_buffer_free(); buffers
 * still alive when their context closes (tyto_context_free) are released
 * then (with a warning), and only tyto_buffer_free() may be called on them
 * afterwards. Fails
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
