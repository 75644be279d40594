/*
 * The checks a host makes of a plugin before it uses it: the plugin's file
 * name, the info its entry point returns (ABI version, function tables,
 * name, option table, required functions) and the devices it claims. One
 * implementation, compiled into libtyto (runtime/loader.c) and into the
 * conformance kit (tools/tyto-conform), so that the kit refuses exactly
 * what libtyto refuses, with the same message. It depends on
 * <tyto/plugin.h> and the C library only.
 */
#ifndef TYTO_RUNTIME_ABICHECK_H
#define TYTO_RUNTIME_ABICHECK_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/plugin.h>

#define ABICHECK_PREFIX "tyto_plugin_"

/* Device numbers must be writable in a selection ("cuda:N", 9 digits). */
#define ABICHECK_MAX_ORDINAL 999999999u

/* The NAME of a file "[DIR/]tyto_plugin_NAME<ext>" (ext ".so" or ".la"),
 * when NAME is [a-z0-9_]+ and fits name[cap]: returns 1 and writes it;
 * otherwise returns 0. */
int abicheck_plugin_name(const char *file, const char *ext, char *name,
                         size_t cap);

/* The entry point of plugin NAME, tyto_plugin_NAME_LTX_init, in buf[size];
 * returns buf. */
const char *abicheck_entry_symbol(const char *name, char *buf, size_t size);

/* The reason to refuse plugin NAME whose file exports no entry point, in
 * why[size]. */
void abicheck_no_entry(const char *name, char *why, size_t size);

/* Copies a function table of the plugin's struct_size into one of
 * dst_size bytes (a tyto_plugin_fns or tyto_plugin_device_fns), zero past
 * what the plugin knows and never half a pointer; dst's struct_size
 * becomes dst_size. src NULL gives an all-NULL table. */
void abicheck_copy_table(void *dst, size_t dst_size, const void *src);

typedef enum abicheck_verdict {
  ABICHECK_OK = 0,
  /* init succeeded without usable info: the plugin failed. Call nothing
   * more of it. */
  ABICHECK_FAILED = 1,
  /* Refused before its tables could be trusted (another ABI major, no
   * tables): call nothing more of it, not even shutdown. */
  ABICHECK_REFUSED = 2,
  /* Refused after reading its tables: call its shutdown (when it has one)
   * before unloading it. */
  ABICHECK_REFUSED_SHUTDOWN = 3
} abicheck_verdict;

/* Checks the info that the entry point of the plugin in file
 * tyto_plugin_NAME.so returned: a version this host reads, the ABI major
 * host_major (the host's TYTO_PLUGIN_ABI_MAJOR), both function tables,
 * info->name equal to `name`, a readable option table and every required
 * function. host_version names the host in the message of a version
 * mismatch. On anything but ABICHECK_OK, why[size] holds the reason, the
 * message users see ("required function device_fns.copy_d2d is missing
 * (NULL)"). */
abicheck_verdict abicheck_info(const tyto_plugin_info *info, const char *name,
                               const char *host_version, char *why,
                               size_t size);

/* Checks one claims->claim() call of a probe: hw_index must be -1 or an
 * offered index below n_offer, the ordinal at most ABICHECK_MAX_ORDINAL
 * and not one the plugin claimed before (`duplicate`). Returns 0 when the
 * claim is sound; otherwise 1 with the problem in why[size] ("claimed
 * device number 0 twice"), which the host reports against the plugin. */
int abicheck_claim(int32_t hw_index, uint32_t n_offer, uint32_t ordinal,
                   int duplicate, char *why, size_t size);

#endif
