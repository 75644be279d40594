/*
 * The plugin checks shared by libtyto's loader and tyto-conform (see
 * abicheck.h). Only <tyto/plugin.h> and the C library: the kit compiles
 * this file as it is.
 */
#include "abicheck.h"

#include <stdio.h>
#include <string.h>

int abicheck_plugin_name(const char *file, const char *ext, char *name,
                         size_t cap) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  const size_t pl = strlen(ABICHECK_PREFIX), fl = strlen(base),
               el = strlen(ext);
  if (fl <= pl + el || strncmp(base, ABICHECK_PREFIX, pl) != 0 ||
      strcmp(base + fl - el, ext) != 0)
    return 0;
  const size_t nl = fl - pl - el;
  if (nl + 1 > cap)
    return 0;
  for (size_t i = 0; i < nl; i++) {
    const char c = base[pl + i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  memcpy(name, base + pl, nl);
  name[nl] = '\0';
  return 1;
}

const char *abicheck_entry_symbol(const char *name, char *buf, size_t size) {
  snprintf(buf, size, ABICHECK_PREFIX "%s" TYTO_PLUGIN_ENTRY_SUFFIX, name);
  return buf;
}

void abicheck_no_entry(const char *name, char *why, size_t size) {
  char symbol[256];
  snprintf(why, size,
           "entry point %s not found (a plugin in " ABICHECK_PREFIX
           "%s.so must export it; see sdk/docs/plugin-abi.md)",
           abicheck_entry_symbol(name, symbol, sizeof symbol), name);
}

void abicheck_copy_table(void *dst, size_t dst_size, const void *src) {
  memset(dst, 0, dst_size);
  if (src) {
    size_t n;
    memcpy(&n, src, sizeof n);
    if (n > dst_size)
      n = dst_size;
    /* Tables are a size_t then function pointers: a struct_size that ends
     * inside a pointer must not leave half a pointer behind. */
    const size_t fp = sizeof(void (*)(void)), head = sizeof(size_t);
    n = n < head ? 0 : head + (n - head) / fp * fp;
    memcpy(dst, src, n);
  }
  memcpy(dst, &dst_size, sizeof dst_size);
}

/* Names the first required function the tables lack, or NULL. */
static const char *missing_required(const tyto_plugin_fns *fns,
                                    const tyto_plugin_device_fns *dfns) {
#define REQ(table, name, fn)                                                   \
  if (!table->fn)                                                              \
    return name "." #fn;
  /* clang-format off */
  REQ(fns, "fns", probe)
  REQ(fns, "fns", device_query)
  REQ(fns, "fns", device_open)
  REQ(fns, "fns", shutdown)
  REQ(dfns, "device_fns", device_close)
  REQ(dfns, "device_fns", buffer_alloc)
  REQ(dfns, "device_fns", buffer_free)
  REQ(dfns, "device_fns", stream_create)
  REQ(dfns, "device_fns", stream_destroy)
  REQ(dfns, "device_fns", stream_synchronize)
  REQ(dfns, "device_fns", event_create)
  REQ(dfns, "device_fns", event_destroy)
  REQ(dfns, "device_fns", event_record)
  REQ(dfns, "device_fns", event_wait)
  REQ(dfns, "device_fns", event_synchronize)
  REQ(dfns, "device_fns", event_query)
  REQ(dfns, "device_fns", copy_h2d)
  REQ(dfns, "device_fns", copy_d2h)
  REQ(dfns, "device_fns", copy_d2d)
  /* clang-format on */
#undef REQ
  if (dfns->prepare && !dfns->launch)
    return "device_fns.launch (required with prepare)";
  return NULL;
}

/* The option table must be readable: every key [a-z0-9_]+. Returns 0, or 1
 * with the reason in why. */
static int bad_options(const tyto_plugin_info *info, char *why, size_t size) {
  if (!TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_info, n_options) ||
      info->n_options == 0)
    return 0;
  if (!info->options) {
    snprintf(why, size, "declares %u options but no option table",
             info->n_options);
    return 1;
  }
  if (info->n_options > 1024) {
    snprintf(why, size, "declares %u options (at most 1024)", info->n_options);
    return 1;
  }
  if (info->options[0].struct_size <
      offsetof(tyto_plugin_option_doc, description) + sizeof(const char *)) {
    snprintf(why, size,
             "option table entries are smaller than struct_size allows");
    return 1;
  }
  for (uint32_t k = 0; k < info->n_options; k++) {
    const tyto_plugin_option_doc *o =
        TYTO_PLUGIN_AT(tyto_plugin_option_doc, info->options, k);
    if (!o->key || !*o->key ||
        strspn(o->key, "abcdefghijklmnopqrstuvwxyz"
                       "0123456789_") != strlen(o->key)) {
      snprintf(why, size, "option %u has an invalid key (expected [a-z0-9_]+)",
               k);
      return 1;
    }
  }
  return 0;
}

abicheck_verdict abicheck_info(const tyto_plugin_info *info, const char *name,
                               const char *host_version, char *why,
                               size_t size) {
  if (!info || info->struct_size < offsetof(tyto_plugin_info, abi_minor) +
                                       sizeof info->abi_minor) {
    snprintf(why, size, "%s",
             info ? "init returned plugin info whose struct_size is too small "
                    "to hold a version"
                  : "init succeeded but returned no plugin info");
    return ABICHECK_FAILED;
  }
  /* struct_size, abi_major and abi_minor sit at the same offsets in every
   * ABI major; nothing else may be read from a plugin of another major. */
  if (info->abi_major != TYTO_PLUGIN_ABI_MAJOR) {
    snprintf(why, size,
             "built for plugin ABI %u.%u, but this tyto (%s) speaks plugin "
             "ABI %d.%d; rebuild the plugin against tyto-plugin %d.x",
             info->abi_major, info->abi_minor, host_version,
             TYTO_PLUGIN_ABI_MAJOR, TYTO_PLUGIN_ABI_MINOR,
             TYTO_PLUGIN_ABI_MAJOR);
    return ABICHECK_REFUSED;
  }
  if (!TYTO_PLUGIN_HAS_FIELD(info, tyto_plugin_info, device_fns) ||
      !info->fns || !info->device_fns) {
    snprintf(why, size, "plugin info lacks its function tables");
    return ABICHECK_REFUSED;
  }
  if (!info->name || strcmp(info->name, name) != 0) {
    snprintf(why, size,
             "calls itself '%s' but its file is named for '%s'; rename the "
             "file " ABICHECK_PREFIX "%s.so",
             info->name ? info->name : "(null)", name,
             info->name ? info->name : "NAME");
    return ABICHECK_REFUSED_SHUTDOWN;
  }
  if (bad_options(info, why, size))
    return ABICHECK_REFUSED_SHUTDOWN;
  tyto_plugin_fns fns;
  tyto_plugin_device_fns dfns;
  abicheck_copy_table(&fns, sizeof fns, info->fns);
  abicheck_copy_table(&dfns, sizeof dfns, info->device_fns);
  const char *missing = missing_required(&fns, &dfns);
  if (missing) {
    snprintf(why, size, "required function %s is missing (NULL)", missing);
    return ABICHECK_REFUSED_SHUTDOWN;
  }
  return ABICHECK_OK;
}

int abicheck_claim(int32_t hw_index, uint32_t n_offer, uint32_t ordinal,
                   int duplicate, char *why, size_t size) {
  if (ordinal > ABICHECK_MAX_ORDINAL) {
    snprintf(why, size, "claimed device number %u, above %u", ordinal,
             ABICHECK_MAX_ORDINAL);
    return 1;
  }
  if (duplicate) {
    snprintf(why, size, "claimed device number %u twice", ordinal);
    return 1;
  }
  if (hw_index < -1 || (hw_index >= 0 && (uint32_t)hw_index >= n_offer)) {
    if (n_offer == 0)
      snprintf(why, size, "named hardware #%d, but none was offered",
               (int)hw_index);
    else
      snprintf(why, size, "named hardware #%d, but only #0 to #%u were offered",
               (int)hw_index, n_offer - 1);
    return 1;
  }
  return 0;
}
