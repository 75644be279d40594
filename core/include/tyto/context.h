/*
 * The runtime context: configuration, hardware topology, plugins, devices.
 *
 * tyto_context_new() reads the configuration, loads the hwloc topology,
 * loads every plugin on the search path with libltdl, offers each plugin
 * the hardware, and opens the selected devices. Everything it found —
 * including what it refused and why — stays queryable for tools such as
 * tyto-info. See docs/configuration.md for every setting.
 */
#ifndef TYTO_CONTEXT_H
#define TYTO_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_context tyto_context;
typedef struct tyto_device tyto_device;

typedef enum tyto_log_level {
  TYTO_LOG_ERROR = 0,
  TYTO_LOG_WARN = 1,
  TYTO_LOG_INFO = 2,
  TYTO_LOG_DEBUG = 3
} tyto_log_level;

/* A log sink. `origin` is "tyto" or the plugin's name. Called from any
 * thread; must be thread-safe. */
typedef void (*tyto_log_fn)(void *user, tyto_log_level level,
                            const char *origin, const char *message);

/* Flags for tyto_context_options.flags. */
enum {
  /* Read no environment variable: TYTO_CONFIG, TYTO_DEVICES,
   * TYTO_PLUGIN_PATH, TYTO_LOG_LEVEL, and XDG_CONFIG_HOME/HOME for the
   * config search (which then tries ./tyto.conf and SYSCONFDIR only). */
  TYTO_CONTEXT_IGNORE_ENV = 1u << 0,
  /* Do not search the installed plugin directory. */
  TYTO_CONTEXT_NO_INSTALLED_PLUGINS = 1u << 1
};

/* How to build a context. Initialise with tyto_context_options_init(); every
 * field then holds "decide as documented" and may be overridden. */
typedef struct tyto_context_options {
  /* sizeof(tyto_context_options) as the caller compiled it; set by
   * tyto_context_options_init(). Fields past it are taken as defaults, so
   * a program built against an older tyto keeps working with a newer one. */
  size_t struct_size;
  /* Config file to read. NULL: $TYTO_CONFIG, ./tyto.conf,
   * $XDG_CONFIG_HOME/tyto/tyto.conf, then SYSCONFDIR/tyto/tyto.conf, the
   * first that exists. "": read no config file. */
  const char *config_path;
  /* Device selection ("cuda:0,opencl:*,cpu"); overrides TYTO_DEVICES and the
   * config's `devices`. NULL: decide from those. */
  const char *devices;
  /* Colon-separated plugin directories searched before all others. */
  const char *plugin_path;
  /* Load the hwloc topology from this XML file instead of the machine
   * (for tests and for reproducing a user's machine). NULL: the machine. */
  const char *topology_xml;
  /* Log level; -1: from TYTO_LOG_LEVEL, the config, else TYTO_LOG_WARN. */
  int log_level;
  /* Log sink; NULL: lines on stderr ("tyto: warning: ..."). */
  tyto_log_fn log_fn;
  void *log_user;
  unsigned flags; /* TYTO_CONTEXT_* */
  /* Where `devices` came from, as messages name it (a tool's "--devices",
   * say); NULL: "options". */
  const char *devices_from;
} tyto_context_options;

TYTO_API void tyto_context_options_init(tyto_context_options *opts);

/* Creates a context. opts may be NULL for the defaults. Contexts are
 * independent; one context and its devices and buffers may be used from
 * several threads, but calls that take the same buffer must not overlap. On
 * success *out is a context to free with tyto_context_free(). On failure *out
 * is NULL, the status says what kind of failure, and tyto_errmsg() tells the
 * whole story (every config error as file:line: message; every device that
 * could not be opened with the reason). */
TYTO_API tyto_status tyto_context_new(const tyto_context_options *opts,
                                      tyto_context **out);

/* Like tyto_context_new(), but a device selection that cannot be satisfied
 * is not fatal: the context is returned with the failure recorded (see
 * tyto_context_selection_error()) so tools can still show what was found. */
TYTO_API tyto_status tyto_context_inspect(const tyto_context_options *opts,
                                          tyto_context **out);

/* Drops the caller's hold on ctx. Programs, evaluation caches and
 * data-parallel runs made on it hold it too, and go on working: the last
 * of them to be freed (or this call, when none is left) closes every
 * device, shuts every plugin down and unloads it. Device buffers do not
 * hold it (tyto_buffer_new). After this call, ctx itself must not be
 * used. NULL ok. */
TYTO_API void tyto_context_free(tyto_context *ctx);

/* The config file that was read, or NULL when none was. Owned by ctx. */
TYTO_API const char *tyto_context_config_path(const tyto_context *ctx);

/* The directories searched for plugins, in order. Owned by ctx. */
TYTO_API size_t tyto_context_plugin_dir_count(const tyto_context *ctx);
TYTO_API const char *tyto_context_plugin_dir(const tyto_context *ctx, size_t i);

/* The device selection in effect, as text, and where it came from
 * ("TYTO_DEVICES", "config file", "options", "default"). Owned by ctx. */
TYTO_API const char *tyto_context_selection(const tyto_context *ctx);
TYTO_API const char *tyto_context_selection_source(const tyto_context *ctx);

/* NULL when the selection was satisfied; otherwise why not (contexts made
 * by tyto_context_inspect() only). Owned by ctx. */
TYTO_API const char *tyto_context_selection_error(const tyto_context *ctx);

/* ---------------------------------------------------------------------- */
/* Topology                                                                */

typedef struct tyto_pci_device {
  const char *bus_id; /* "dddd:bb:dd.f" */
  uint16_t vendor_id;
  uint16_t device_id;
  uint32_t class_id;
  const char *vendor; /* hwloc's vendor name, may be "" */
  const char *name;   /* hwloc's device name, may be "" */
  int32_t numa_node;  /* nearest NUMA node, -1 if unknown */
  const char *cpuset; /* CPUs near it, hwloc list syntax */
} tyto_pci_device;

typedef struct tyto_topology {
  const char *cpu_model; /* may be "" */
  uint32_t packages, cores, pus, numa_nodes;
  const char *cpuset;    /* the CPUs this process may use */
  uint64_t memory_bytes; /* total memory of the NUMA nodes */
  size_t n_pci;          /* GPUs, 3D controllers, accelerators */
  const tyto_pci_device *pci;
} tyto_topology;

/* What hwloc reported. Owned by ctx. */
TYTO_API const tyto_topology *tyto_context_topology(const tyto_context *ctx);

/* ---------------------------------------------------------------------- */
/* Plugins found on the search path                                        */

typedef enum tyto_found_status {
  TYTO_FOUND_LOADED = 0,  /* loaded, initialised and probed */
  TYTO_FOUND_REFUSED = 1, /* loaded but refused (ABI, no entry point) */
  TYTO_FOUND_FAILED = 2,  /* could not be loaded or its init failed */
  TYTO_FOUND_SHADOWED = 3 /* a plugin of the same name came earlier */
} tyto_found_status;

typedef struct tyto_found_plugin {
  const char *name; /* from the file name: tyto_plugin_NAME.so */
  const char *path; /* the file that was opened */
  tyto_found_status status;
  const char *reason; /* why not loaded, or the probe's error; NULL if none */
  uint32_t abi_major, abi_minor;                        /* 0 when unknown */
  const char *vendor, *version, *license, *description; /* "" when unknown */
  size_t n_devices;                                     /* devices it claimed */
} tyto_found_plugin;

TYTO_API size_t tyto_context_found_plugin_count(const tyto_context *ctx);
/* The i-th plugin found, in search order. Owned by ctx. */
TYTO_API const tyto_found_plugin *
tyto_context_found_plugin(const tyto_context *ctx, size_t i);

/* ---------------------------------------------------------------------- */
/* Devices                                                                 */

enum {
  TYTO_DEVICE_UNIFIED_MEMORY = 1u << 0,
  TYTO_DEVICE_PINNED_HOST = 1u << 1,
  TYTO_DEVICE_PEER_COPY = 1u << 2,
  TYTO_DEVICE_ASYNC = 1u << 3,
  /* Its plugin records a program's launches once and replays them (CUDA
   * Graphs: tyto_program_device_stats.graph_replays). */
  TYTO_DEVICE_GRAPHS = 1u << 4
};

typedef struct tyto_device_info {
  const char *id;     /* "cuda:0"; NULL for a refused device */
  const char *plugin; /* plugin name */
  uint32_t ordinal;   /* the plugin's device number */
  int claimed;        /* 1 claimed, 0 refused */
  const char *reason; /* why refused, or why the query failed; else NULL */
  const char *name, *vendor, *driver_version; /* "" when unknown */
  uint64_t memory_bytes, alignment, max_alloc_bytes;
  uint32_t compute_units;
  uint32_t dtypes; /* bit i set: dtype i of the plugin ABI */
  uint32_t flags;  /* TYTO_DEVICE_* */
  int32_t numa_node;
  const char *pci_bus_id; /* "" when not a PCI device */
  int32_t pci_index;      /* index into tyto_topology.pci, or -1 */
  int selected;           /* 1 when in the selection */
  int32_t priority;       /* position in the selection, -1 if not selected */
} tyto_device_info;

/* Every device claimed or refused by any plugin, in discovery order. */
TYTO_API size_t tyto_context_device_info_count(const tyto_context *ctx);
TYTO_API const tyto_device_info *
tyto_context_device_info(const tyto_context *ctx, size_t i);

/* The selected devices, opened, in priority order (0 is the default). */
TYTO_API size_t tyto_context_device_count(const tyto_context *ctx);
TYTO_API tyto_device *tyto_context_device(const tyto_context *ctx, size_t i);
/* The selected device with this id ("cpu:0"), or NULL. */
TYTO_API tyto_device *tyto_context_find_device(const tyto_context *ctx,
                                               const char *id);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_CONTEXT_H */
