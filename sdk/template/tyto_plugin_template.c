/*
 * tyto_plugin_template.c — the smallest complete tyto plugin, to copy.
 *
 * It drives one memory-only device, "template:0", backed by host memory.
 * Every required function of the ABI is here, with the conventions a real
 * plugin must keep: errors are values made by host->error_new, nothing
 * aborts, and every struct is read and written within its struct_size.
 *
 * To start your own: replace "template" with your plugin's name everywhere
 * (the file name, the entry point and info.name must agree), then replace
 * the host-memory parts with calls into your driver. Build:
 *
 *   cc -std=c11 -O2 -fPIC -fvisibility=hidden -shared \
 *      $(pkg-config --cflags tyto-plugin) \
 *      tyto_plugin_template.c -o tyto_plugin_template.so
 *
 * and copy it into $(pkg-config --variable=plugindir tyto-plugin), or any
 * directory on TYTO_PLUGIN_PATH. `tyto-info` then lists it.
 */
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

/* Your private state. The ABI only ever passes pointers to these. */
struct tyto_plugin_state {
  const tyto_plugin_host *host; /* valid until shutdown() */
  uint64_t memory_bytes;        /* from the `memory_mib` option */
  int claimed;
};
struct tyto_plugin_device {
  tyto_plugin_state *st;
};
struct tyto_plugin_buffer {
  unsigned char *bytes;
  uint64_t size;
};
/* Work on this device runs at once on the calling thread, which is a
 * valid in-order stream: everything enqueued is complete on return. A real
 * GPU plugin wraps its driver's queue here. */
struct tyto_plugin_stream {
  int unused;
};
struct tyto_plugin_event {
  int unused;
};

static const tyto_plugin_option_doc template_options[] = {
    {sizeof(tyto_plugin_option_doc), "memory_mib",
     "memory the device reports, in MiB (default 1024)"},
};

/* ---- discovery -------------------------------------------------------- */

static tyto_plugin_error *template_probe(tyto_plugin_state *st,
                                         const tyto_plugin_hw_device *offer,
                                         uint32_t n_offer,
                                         const tyto_plugin_claims *claims) {
  (void)offer, (void)n_offer;
  const tyto_plugin_host *h = st->host;
  st->memory_bytes = (uint64_t)1024 << 20;
  const char *mib = h->option(h->ctx, "memory_mib");
  if (mib) {
    char *end;
    unsigned long long v = strtoull(mib, &end, 10);
    if (*mib == '\0' || *end != '\0' || v == 0)
      return h->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                          "option memory_mib: expected a positive whole "
                          "number of MiB, found '%s'",
                          mib);
    st->memory_bytes = (uint64_t)v << 20;
  }
  /* A GPU plugin would walk `offer` for PCI entries of its vendor, claim
   * the ones its driver sees (matching bus ids), and refuse the others
   * with a reason a user can act on. This device is not hardware, so it
   * ties itself to no offered entry (-1). */
  claims->claim(claims->ctx, -1, 0, "template host-memory device");
  st->claimed = 1;
  return NULL;
}

static tyto_plugin_error *template_query(tyto_plugin_state *st,
                                         uint32_t ordinal,
                                         tyto_plugin_device_info *info) {
  if (!st->claimed || ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "template has one device (template:0)");
  /* Write only what the host's struct has room for. */
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, name))
    info->name = "template host-memory device";
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, vendor))
    info->vendor = "Example Corp.";
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, dtypes))
    info->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32);
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, memory_bytes))
    info->memory_bytes = st->memory_bytes;
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, alignment))
    info->alignment = 64;
  if (TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_device_info, compute_units))
    info->compute_units = 1;
  return NULL;
}

static tyto_plugin_error *template_open(tyto_plugin_state *st, uint32_t ordinal,
                                        tyto_plugin_device **out) {
  if (ordinal != 0)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND,
                               "template has no device %u", ordinal);
  tyto_plugin_device *dev = calloc(1, sizeof *dev);
  if (!dev)
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                               "out of memory opening template:0");
  dev->st = st;
  *out = dev;
  return NULL;
}

static void template_close(tyto_plugin_device *dev) {
  free(dev);
}

static void template_shutdown(tyto_plugin_state *st) {
  free(st);
}

/* ---- memory ----------------------------------------------------------- */

static tyto_plugin_error *template_alloc(tyto_plugin_device *dev, uint64_t size,
                                         tyto_plugin_buffer **out) {
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  if (b && size)
    b->bytes = aligned_alloc(64, (size + 63) / 64 * 64);
  if (!b || (size && !b->bytes)) {
    free(b);
    return dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                    "cannot allocate %llu bytes",
                                    (unsigned long long)size);
  }
  b->size = size;
  *out = b;
  return NULL;
}

static void template_free(tyto_plugin_device *dev, tyto_plugin_buffer *b) {
  (void)dev;
  if (b)
    free(b->bytes);
  free(b);
}

/* Every copy checks its range: a caller's mistake is an error value. */
static tyto_plugin_error *in_range(tyto_plugin_device *dev,
                                   const tyto_plugin_buffer *b, uint64_t off,
                                   uint64_t size) {
  if (off > b->size || size > b->size - off)
    return dev->st->host->error_new(
        TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
        "bytes [%llu, %llu) lie outside a buffer of %llu bytes",
        (unsigned long long)off, (unsigned long long)(off + size),
        (unsigned long long)b->size);
  return NULL;
}

static tyto_plugin_error *template_h2d(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s,
                                       tyto_plugin_buffer *dst, uint64_t off,
                                       const void *src, uint64_t size) {
  (void)s;
  tyto_plugin_error *e = in_range(dev, dst, off, size);
  if (!e && size)
    memcpy(dst->bytes + off, src, size);
  return e;
}

static tyto_plugin_error *template_d2h(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s, void *dst,
                                       tyto_plugin_buffer *src, uint64_t off,
                                       uint64_t size) {
  (void)s;
  tyto_plugin_error *e = in_range(dev, src, off, size);
  if (!e && size)
    memcpy(dst, src->bytes + off, size);
  return e;
}

static tyto_plugin_error *template_d2d(tyto_plugin_device *dev,
                                       tyto_plugin_stream *s,
                                       tyto_plugin_buffer *dst, uint64_t doff,
                                       tyto_plugin_buffer *src, uint64_t soff,
                                       uint64_t size) {
  (void)s;
  tyto_plugin_error *e = in_range(dev, dst, doff, size);
  if (!e)
    e = in_range(dev, src, soff, size);
  if (!e && size)
    memmove(dst->bytes + doff, src->bytes + soff, size);
  return e;
}

/* ---- streams and events ----------------------------------------------- */

static tyto_plugin_error *template_stream_create(tyto_plugin_device *dev,
                                                 tyto_plugin_stream **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL
              : dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                         "out of memory creating a stream");
}

static void template_stream_destroy(tyto_plugin_device *dev,
                                    tyto_plugin_stream *s) {
  (void)dev;
  free(s);
}

static tyto_plugin_error *template_stream_sync(tyto_plugin_device *dev,
                                               tyto_plugin_stream *s) {
  (void)dev, (void)s;
  return NULL; /* nothing is ever pending */
}

static tyto_plugin_error *template_event_create(tyto_plugin_device *dev,
                                                tyto_plugin_event **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL
              : dev->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                                         "out of memory creating an event");
}

static void template_event_destroy(tyto_plugin_device *dev,
                                   tyto_plugin_event *e) {
  (void)dev;
  free(e);
}

static tyto_plugin_error *template_event_record(tyto_plugin_device *dev,
                                                tyto_plugin_event *e,
                                                tyto_plugin_stream *s) {
  (void)dev, (void)e, (void)s;
  return NULL;
}

static tyto_plugin_error *template_event_wait(tyto_plugin_device *dev,
                                              tyto_plugin_stream *s,
                                              tyto_plugin_event *e) {
  (void)dev, (void)s, (void)e;
  return NULL;
}

static tyto_plugin_error *template_event_sync(tyto_plugin_device *dev,
                                              tyto_plugin_event *e) {
  (void)dev, (void)e;
  return NULL;
}

static tyto_plugin_error *template_event_query(tyto_plugin_device *dev,
                                               tyto_plugin_event *e,
                                               int *complete) {
  (void)dev, (void)e;
  *complete = 1;
  return NULL;
}

/* ---- tables and the entry point --------------------------------------- */

static const tyto_plugin_fns template_fns = {
    .struct_size = sizeof(tyto_plugin_fns),
    .probe = template_probe,
    .device_query = template_query,
    .device_open = template_open,
    .shutdown = template_shutdown,
};

/* Functions left out (prepare, launch, copy_peer, ...) are NULL: the host
 * treats the device as memory-only and never calls them. */
static const tyto_plugin_device_fns template_device_fns = {
    .struct_size = sizeof(tyto_plugin_device_fns),
    .device_close = template_close,
    .buffer_alloc = template_alloc,
    .buffer_free = template_free,
    .stream_create = template_stream_create,
    .stream_destroy = template_stream_destroy,
    .stream_synchronize = template_stream_sync,
    .event_create = template_event_create,
    .event_destroy = template_event_destroy,
    .event_record = template_event_record,
    .event_wait = template_event_wait,
    .event_synchronize = template_event_sync,
    .event_query = template_event_query,
    .copy_h2d = template_h2d,
    .copy_d2h = template_d2h,
    .copy_d2d = template_d2d,
};

static const tyto_plugin_info template_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TYTO_PLUGIN_ABI_MAJOR,
    .abi_minor = TYTO_PLUGIN_ABI_MINOR,
    .name = "template",
    .vendor = "Example Corp.",
    .version = "1.0.0",
    .license = "MIT",
    .description = "a host-memory device showing the plugin ABI",
    .fns = &template_fns,
    .device_fns = &template_device_fns,
    .options = template_options,
    .n_options = sizeof template_options / sizeof template_options[0],
};

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_template_LTX_init(const tyto_plugin_host *host,
                              const tyto_plugin_info **info,
                              tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
tyto_plugin_template_LTX_init(const tyto_plugin_host *host,
                              const tyto_plugin_info **info,
                              tyto_plugin_state **state) {
  /* A host of another ABI major will refuse us anyway; say why early. */
  if (host->abi_major != TYTO_PLUGIN_ABI_MAJOR)
    return host->error_new(TYTO_PLUGIN_ERR_UNSUPPORTED,
                           "built for plugin ABI %d, host speaks %u",
                           TYTO_PLUGIN_ABI_MAJOR, host->abi_major);
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY,
                           "out of memory initialising the template plugin");
  st->host = host;
  *info = &template_info;
  *state = st;
  return NULL;
}
