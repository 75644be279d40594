/*
 * Guarded device buffers (see sentinel.h).
 */
#include "sentinel.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"

#define MIN_GUARD 256

static unsigned char pattern(uint64_t i) {
  return (unsigned char)(0xA5u ^ (unsigned)(i * 29u));
}

tyto_plugin_error *cf_gbuf_alloc(cf_device *d, cf_gbuf *g, uint64_t body,
                                 const void *init) {
  uint64_t a = d->info.alignment;
  tyto_plugin_error *e;
  memset(g, 0, sizeof *g);
  /* The body must keep the device's alignment: bindings are offset by the
   * guard. */
  g->guard = MIN_GUARD;
  if (a > MIN_GUARD && a <= (1u << 20) && (a & (a - 1)) == 0)
    g->guard = a;
  g->body = body;
  const uint64_t total = 2 * g->guard + body;
  g->host = malloc(total);
  if (g->host == NULL)
    return cf_error(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                    "out of host memory for a staging buffer");
  for (uint64_t i = 0; i < g->guard; i++) {
    g->host[i] = pattern(i);
    g->host[g->guard + body + i] = pattern(i + 7);
  }
  if (init)
    memcpy(g->host + g->guard, init, body);
  else
    memset(g->host + g->guard, 0, body);
  e = d->fns->buffer_alloc(d->dev, total, &g->buf);
  if (e != NULL) {
    g->buf = NULL;
    return e;
  }
  return d->fns->copy_h2d(d->dev, NULL, g->buf, 0, g->host, total);
}

tyto_plugin_error *cf_gbuf_read(cf_device *d, cf_gbuf *g) {
  tyto_plugin_error *e = d->fns->stream_synchronize(d->dev, d->stream);
  if (e != NULL)
    return e;
  return d->fns->copy_d2h(d->dev, NULL, g->host, g->buf, 0,
                          2 * g->guard + g->body);
}

int cf_gbuf_check(const cf_gbuf *g, int *side, uint64_t *offset) {
  for (uint64_t i = 0; i < g->guard; i++)
    if (g->host[i] != pattern(i)) {
      *side = -1;
      *offset = i;
      return 1;
    }
  for (uint64_t i = 0; i < g->guard; i++)
    if (g->host[g->guard + g->body + i] != pattern(i + 7)) {
      *side = 1;
      *offset = i;
      return 1;
    }
  return 0;
}

void cf_gbuf_free(cf_device *d, cf_gbuf *g) {
  if (g->buf)
    d->fns->buffer_free(d->dev, g->buf);
  free(g->host);
  memset(g, 0, sizeof *g);
}
