/*
 * What placement across devices knows about them: measured figures, not
 * guesses. Each selected device is profiled by a short calibration (a few
 * hundred milliseconds): its f32 GEMM rate, its elementwise bandwidth, the
 * latency of launching a program, and its links to the host; links between
 * two devices are profiled on demand. Results are kept on disk in
 * $XDG_CACHE_HOME/tyto/profiles.json (~/.cache/tyto/ without
 * XDG_CACHE_HOME), keyed by plugin, device name, driver version and tyto's
 * version, so a machine calibrates once; `tyto-info --calibrate` shows (and
 * with --remeasure, refreshes) them. docs/placement.md is the guide.
 */
#ifndef TYTO_PLACEMENT_H
#define TYTO_PLACEMENT_H

#include <stddef.h>

#include <tyto/context.h>
#include <tyto/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tyto_device_profile {
  /* sizeof(tyto_device_profile) as the caller compiled it. */
  size_t struct_size;
  /* What the cache is keyed by: "plugin|device name|driver|tyto version". */
  char key[512];
  double gemm_flops;      /* f32 matrix product, floating-point ops/s */
  double eltwise_bytes;   /* elementwise kernel, bytes read + written per s */
  double launch_seconds;  /* one-element program run, host to host */
  double h2d_bytes;       /* host to device copies, bytes/s */
  double d2h_bytes;       /* device to host copies, bytes/s */
  int cached;             /* 1: read from the cache; 0: measured now */
  double measure_seconds; /* time the calibration took (0 when cached) */
} tyto_device_profile;

/* Flags of tyto_device_profile_get() and tyto_link_profile_get(). */
enum {
  TYTO_PROFILE_REMEASURE = 1 << 0, /* measure even when cached, then store */
  TYTO_PROFILE_NO_CACHE = 1 << 1,  /* neither read nor write the cache */
  TYTO_PROFILE_QUICK = 1 << 2      /* small problems (tests, valgrind) */
};

/* The profile of selected device `device` (an index into the context's
 * selection): from this context's memory, else from the cache, else
 * measured (and stored). `out->struct_size` must be set. Errors: those of
 * compiling and running the calibration programs (with the device named),
 * TYTO_ERR_NOT_FOUND for a device index out of range. A cache that cannot
 * be read or written is not an error: it is logged as a warning and the
 * figures are measured. */
TYTO_API tyto_status tyto_device_profile_get(tyto_context *ctx, size_t device,
                                             unsigned flags,
                                             tyto_device_profile *out);

/* Bytes per second of copies from selected device src to selected device
 * dst (through a peer copy where their plugin offers one, else staged
 * through host memory), measured and cached as above. src == dst: the
 * device's own copy rate. */
TYTO_API tyto_status tyto_link_profile_get(tyto_context *ctx, size_t src,
                                           size_t dst, unsigned flags,
                                           double *bytes_per_second);

/* The cache file's path for this context's environment (NULL when neither
 * XDG_CACHE_HOME nor HOME is set, or the context ignores the environment).
 * Owned by the context. */
TYTO_API const char *tyto_profile_cache_path(tyto_context *ctx);

#ifdef __cplusplus
}
#endif

#endif /* TYTO_PLACEMENT_H */
