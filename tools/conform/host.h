/*
 * The conformance kit's host side of the plugin ABI: loads a plugin .so by
 * path with dlopen, hands it a minimal host table, offers it the machine's
 * CPU and PCI display/accelerator devices, and records what it claims. Uses
 * only <tyto/plugin.h>, as a vendor's own host would.
 */
#ifndef TYTO_CONFORM_HOST_H
#define TYTO_CONFORM_HOST_H

#include <tyto/plugin.h>

#define CF_MAX_DEVICES 16

/* The host's error value (tyto_plugin_error is ours to define). */
struct tyto_plugin_error {
  tyto_plugin_code code;
  char msg[1024];
};

/* One loaded plugin and the devices it claimed. */
typedef struct cf_plugin {
  char path[1024];
  char name[128]; /* NAME of its file tyto_plugin_NAME.so */
  void *dl;
  const tyto_plugin_info *info;
  /* Its tables copied as libtyto copies them: a function past the
   * plugin's struct_size reads as NULL. Use these, never info's. */
  tyto_plugin_fns fns;
  tyto_plugin_device_fns dfns;
  tyto_plugin_state *state;
  int initialised;
  uint32_t n_offer; /* hardware offered to its probe */
  uint32_t n_devices;
  uint32_t ordinals[CF_MAX_DEVICES];
  char names[CF_MAX_DEVICES][128];
  char probe_error[1024]; /* "" when probe succeeded */
  char refusals[2048];    /* reasons for refused hardware, "; "-joined */
  char bad_claims[1024];  /* claims libtyto would ignore, "; "-joined */
} cf_plugin;

/* An error made as the host's error_new makes them (for the kit's own
 * failures); free it with cf_error_free(). Never returns NULL. */
tyto_plugin_error *cf_error(tyto_plugin_code code, const char *msg);

/* Frees an error the plugin returned; NULL is a no-op. */
void cf_error_free(tyto_plugin_error *e);

/* Copies e's message (or "ok") into buf and frees e. Returns e's code. */
tyto_plugin_code cf_error_take(tyto_plugin_error *e, char *buf, size_t size);

/* Loads, initialises and probes the plugin at `path`, refusing it exactly
 * where libtyto's loader would, with the loader's message (both use
 * core/src/runtime/abicheck.c); a path that is no regular file (a FIFO,
 * a directory, a device) is refused before dlopen, which would block on
 * a FIFO. On failure returns -1 with a message in
 * err (the plugin is then unloaded). p is zeroed first;
 * cf_plugin_unload() releases it. */
int cf_plugin_load(cf_plugin *p, const char *path, char *err, size_t size);

/* Shuts the plugin down (every device must be closed) and unloads it. */
void cf_plugin_unload(cf_plugin *p);

#endif
