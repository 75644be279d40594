/*
 * Test-only plugins, one source built several times with different macros
 * (see tests/Makefile.am). They are never installed. Each misbehaves in one
 * way the loader must survive and explain:
 *
 *   TP_NAME          module name: the file is tyto_plugin_<TP_NAME>.so
 *   TP_ABI_MAJOR     ABI major to declare (another major must be refused)
 *   TP_INIT_FAILS    init returns an error
 *   TP_NO_ENTRY      the entry point is exported under the wrong name
 *   TP_CLAIM_NOTHING probe refuses the CPU and claims nothing
 *   TP_FAKE_GPU      claims every offered PCI device of vendor 0x10de as a
 *                    memory-only device (host memory behind it), refuses
 *                    the rest, and fails to open ordinal 1 if TP_OPEN_FAILS
 *   TP_BAD_OPTIONS   declares an option table with a NULL key
 *   TP_CLAIM_THEN_FAIL claims a device, then fails its probe
 *   TP_NULL_FN       leaves a required function, device_fns.copy_d2d, NULL
 *   TP_INFO_NAME     the name its info gives (default: TP_NAME)
 *   TP_SHORT_TABLE   device_fns.struct_size ends before copy_d2d (which is
 *                    set): a required function past the table's size
 */
#include <stdlib.h>
#include <string.h>

#include <tyto/plugin.h>

#ifndef TP_ABI_MAJOR
#define TP_ABI_MAJOR TYTO_PLUGIN_ABI_MAJOR
#endif
#ifndef TP_ABI_MINOR
#define TP_ABI_MINOR TYTO_PLUGIN_ABI_MINOR
#endif

#define CAT3(a, b, c) a##b##c
#define ENTRY(name) CAT3(tyto_plugin_, name, _LTX_init)
#define STR2(x) #x
#define STR(x) STR2(x)

struct tyto_plugin_state {
  const tyto_plugin_host *host;
  uint32_t n_claimed;
};
struct tyto_plugin_device {
  tyto_plugin_state *st;
};
struct tyto_plugin_buffer {
  unsigned char *p;
  uint64_t size;
};
struct tyto_plugin_stream {
  int unused;
};
struct tyto_plugin_event {
  int unused;
};

static tyto_plugin_error *tp_probe(tyto_plugin_state *st,
                                   const tyto_plugin_hw_device *offer,
                                   uint32_t n, const tyto_plugin_claims *c) {
  for (uint32_t i = 0; i < n; i++) {
    const tyto_plugin_hw_device *o =
        TYTO_PLUGIN_AT(tyto_plugin_hw_device, offer, i);
#if defined(TP_CLAIM_NOTHING)
    if (o->kind == TYTO_PLUGIN_HW_CPU)
      c->refuse(c->ctx, (int32_t)i, NULL,
                "this test plugin claims nothing, on purpose");
#elif defined(TP_FAKE_GPU)
    if (o->kind != TYTO_PLUGIN_HW_PCI)
      continue;
    if (o->pci_vendor_id == 0x10de)
      c->claim(c->ctx, (int32_t)i, st->n_claimed++, o->name);
    else
      c->refuse(c->ctx, (int32_t)i, NULL, "not an NVIDIA card");
#elif defined(TP_CLAIM_THEN_FAIL)
    if (o->kind == TYTO_PLUGIN_HW_CPU) {
      c->claim(c->ctx, (int32_t)i, st->n_claimed++, "half-probed");
      return st->host->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                                 "the device vanished during the probe");
    }
#else
    (void)o, (void)c, (void)st;
#endif
  }
  return NULL;
}

static tyto_plugin_error *tp_query(tyto_plugin_state *st, uint32_t ordinal,
                                   tyto_plugin_device_info *info) {
  if (ordinal >= st->n_claimed)
    return st->host->error_new(TYTO_PLUGIN_ERR_NOT_FOUND, "no device %u",
                               ordinal);
  info->vendor = "test";
  info->dtypes = TYTO_PLUGIN_DTYPE_BIT(TYTO_PLUGIN_DTYPE_F32);
  info->memory_bytes = (uint64_t)1 << 30;
  info->alignment = 256;
  info->compute_units = 1;
  return NULL;
}

static tyto_plugin_error *tp_open(tyto_plugin_state *st, uint32_t ordinal,
                                  tyto_plugin_device **out) {
#ifdef TP_OPEN_FAILS
  if (ordinal == 1)
    return st->host->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                               "device %u is busy (test)", ordinal);
#endif
  tyto_plugin_device *d = calloc(1, sizeof *d);
  if (!d)
    return st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "oom");
  d->st = st;
  *out = d;
  return NULL;
}

static void tp_shutdown(tyto_plugin_state *st) {
  free(st);
}
static void tp_close(tyto_plugin_device *d) {
  free(d);
}

static tyto_plugin_error *tp_alloc(tyto_plugin_device *d, uint64_t size,
                                   tyto_plugin_buffer **out) {
  tyto_plugin_buffer *b = calloc(1, sizeof *b);
  if (b)
    b->p = malloc(size ? size : 1);
  if (!b || !b->p) {
    if (b)
      free(b);
    return d->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "oom");
  }
  b->size = size;
  *out = b;
  return NULL;
}
static void tp_free(tyto_plugin_device *d, tyto_plugin_buffer *b) {
  (void)d;
  if (b)
    free(b->p);
  free(b);
}
static tyto_plugin_error *tp_stream_create(tyto_plugin_device *d,
                                           tyto_plugin_stream **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL
              : d->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "oom");
}
static void tp_stream_destroy(tyto_plugin_device *d, tyto_plugin_stream *s) {
  (void)d;
  free(s);
}
static tyto_plugin_error *tp_sync(tyto_plugin_device *d,
                                  tyto_plugin_stream *s) {
  (void)d, (void)s;
  return NULL;
}
static tyto_plugin_error *tp_event_create(tyto_plugin_device *d,
                                          tyto_plugin_event **out) {
  *out = calloc(1, sizeof **out);
  return *out ? NULL
              : d->st->host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "oom");
}
static void tp_event_destroy(tyto_plugin_device *d, tyto_plugin_event *e) {
  (void)d;
  free(e);
}
static tyto_plugin_error *tp_event_record(tyto_plugin_device *d,
                                          tyto_plugin_event *e,
                                          tyto_plugin_stream *s) {
  (void)d, (void)e, (void)s;
  return NULL;
}
static tyto_plugin_error *tp_event_wait(tyto_plugin_device *d,
                                        tyto_plugin_stream *s,
                                        tyto_plugin_event *e) {
  (void)d, (void)e, (void)s;
  return NULL;
}
static tyto_plugin_error *tp_event_sync(tyto_plugin_device *d,
                                        tyto_plugin_event *e) {
  (void)d, (void)e;
  return NULL;
}
static tyto_plugin_error *tp_event_query(tyto_plugin_device *d,
                                         tyto_plugin_event *e, int *complete) {
  (void)d, (void)e;
  *complete = 1;
  return NULL;
}
static tyto_plugin_error *range(tyto_plugin_device *d, tyto_plugin_buffer *b,
                                uint64_t off, uint64_t size) {
  if (off > b->size || size > b->size - off)
    return d->st->host->error_new(TYTO_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "out of range");
  return NULL;
}
static tyto_plugin_error *tp_h2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t off,
                                 const void *src, uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, dst, off, size);
  if (!e && size)
    memcpy(dst->p + off, src, size);
  return e;
}
static tyto_plugin_error *tp_d2h(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 void *dst, tyto_plugin_buffer *src,
                                 uint64_t off, uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, src, off, size);
  if (!e && size)
    memcpy(dst, src->p + off, size);
  return e;
}
#ifndef TP_NULL_FN
static tyto_plugin_error *tp_d2d(tyto_plugin_device *d, tyto_plugin_stream *s,
                                 tyto_plugin_buffer *dst, uint64_t doff,
                                 tyto_plugin_buffer *src, uint64_t soff,
                                 uint64_t size) {
  (void)s;
  tyto_plugin_error *e = range(d, dst, doff, size);
  if (!e)
    e = range(d, src, soff, size);
  if (!e && size)
    memmove(dst->p + doff, src->p + soff, size);
  return e;
}
#endif

static const tyto_plugin_fns tp_fns = {sizeof(tyto_plugin_fns), tp_probe,
                                       tp_query, tp_open, tp_shutdown};

static const tyto_plugin_device_fns tp_dfns = {
#ifdef TP_SHORT_TABLE
    .struct_size = offsetof(tyto_plugin_device_fns, copy_d2d),
#else
    .struct_size = sizeof(tyto_plugin_device_fns),
#endif
    .device_close = tp_close,
    .buffer_alloc = tp_alloc,
    .buffer_free = tp_free,
    .stream_create = tp_stream_create,
    .stream_destroy = tp_stream_destroy,
    .stream_synchronize = tp_sync,
    .event_create = tp_event_create,
    .event_destroy = tp_event_destroy,
    .event_record = tp_event_record,
    .event_wait = tp_event_wait,
    .event_synchronize = tp_event_sync,
    .event_query = tp_event_query,
    .copy_h2d = tp_h2d,
    .copy_d2h = tp_d2h,
#ifndef TP_NULL_FN
    .copy_d2d = tp_d2d,
#endif
};

#ifdef TP_BAD_OPTIONS
static const tyto_plugin_option_doc tp_options[] = {
    {sizeof(tyto_plugin_option_doc), "good_key", "fine"},
    {sizeof(tyto_plugin_option_doc), NULL, "a key missing"},
};
#endif

static const tyto_plugin_info tp_info = {
    .struct_size = sizeof(tyto_plugin_info),
    .abi_major = TP_ABI_MAJOR,
    .abi_minor = TP_ABI_MINOR,
#ifdef TP_INFO_NAME
    .name = STR(TP_INFO_NAME),
#else
    .name = STR(TP_NAME),
#endif
    .vendor = "tyto tests",
    .version = "0.0.1",
    .license = "MIT",
    .description = "a test plugin",
    .fns = &tp_fns,
    .device_fns = &tp_dfns,
#ifdef TP_BAD_OPTIONS
    .options = tp_options,
    .n_options = 2,
#endif
};

#ifdef TP_NO_ENTRY
#define EXPORTED_NAME tyto_plugin_misnamed_init
#else
#define EXPORTED_NAME ENTRY(TP_NAME)
#endif

TYTO_PLUGIN_EXPORT tyto_plugin_error *
EXPORTED_NAME(const tyto_plugin_host *host, const tyto_plugin_info **info,
              tyto_plugin_state **state);

TYTO_PLUGIN_EXPORT tyto_plugin_error *
EXPORTED_NAME(const tyto_plugin_host *host, const tyto_plugin_info **info,
              tyto_plugin_state **state) {
#ifdef TP_INIT_FAILS
  (void)info, (void)state, (void)&tp_info;
  return host->error_new(TYTO_PLUGIN_ERR_UNAVAILABLE,
                         "the frobnicator is not plugged in");
#elif TP_ABI_MAJOR != TYTO_PLUGIN_ABI_MAJOR
  /* A host of another major never calls this plugin again (not even
   * shutdown), so keep nothing that would need freeing. */
  static tyto_plugin_state st_static;
  st_static.host = host;
  *info = &tp_info;
  *state = &st_static;
  return NULL;
#else
  tyto_plugin_state *st = calloc(1, sizeof *st);
  if (!st)
    return host->error_new(TYTO_PLUGIN_ERR_OUT_OF_MEMORY, "oom");
  st->host = host;
  *info = &tp_info;
  *state = st;
  return NULL;
#endif
}
