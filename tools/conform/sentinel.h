/*
 * Guarded device buffers: every buffer the kit binds has a sentinel region
 * before and after the tensor's bytes, written with a known pattern by a
 * host->device copy, so that a kernel writing out of bounds is caught when
 * the buffer is read back.
 */
#ifndef TYTO_CONFORM_SENTINEL_H
#define TYTO_CONFORM_SENTINEL_H

#include <tyto/plugin.h>

typedef struct cf_device cf_device;

typedef struct cf_gbuf {
  tyto_plugin_buffer *buf;
  uint64_t guard;      /* bytes of each sentinel region; the body starts here */
  uint64_t body;       /* bytes of the tensor storage */
  unsigned char *host; /* guard + body + guard bytes, staging both ways */
} cf_gbuf;

/* Allocates a guarded buffer for `body` bytes and uploads the sentinels
 * and `init` (body bytes; NULL: zeros). Returns the plugin's error. */
tyto_plugin_error *cf_gbuf_alloc(cf_device *d, cf_gbuf *g, uint64_t body,
                                 const void *init);

/* Reads the whole buffer back into g->host (stream synchronised first). */
tyto_plugin_error *cf_gbuf_read(cf_device *d, cf_gbuf *g);

/* Checks the sentinels of g->host. Returns 0 when intact; otherwise 1 and
 * *side (-1 before, +1 after) and *offset (the first bad byte, from the
 * start of that region). */
int cf_gbuf_check(const cf_gbuf *g, int *side, uint64_t *offset);

/* The body as read back. */
static inline const unsigned char *cf_gbuf_body(const cf_gbuf *g) {
  return g->host + g->guard;
}

void cf_gbuf_free(cf_device *d, cf_gbuf *g);

#endif
