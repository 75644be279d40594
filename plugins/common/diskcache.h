/*
 * A disk cache of compiled kernels shared by the plugins that build code at
 * run time (OpenCL programs, CUDA cubins): one file per entry,
 * <dir>/<sub>/<key>.bin, where <dir> is the plugin option cache_dir, else
 * $XDG_CACHE_HOME/tyto, else $HOME/.cache/tyto, and <key> is a 128-bit hash
 * of everything the entry depends on. A file is a 32-byte header (an
 * 8-byte magic naming the plugin and its format, the key, the payload's
 * size, native byte order) followed by the payload, so a truncated, foreign
 * or misplaced file is recognised and ignored.
 *
 * Readers refuse anything but a regular file without blocking on it (a
 * FIFO or a device at an entry's path never hangs the caller). Writers put
 * a whole file under a temporary name beside the entry and rename it over
 * the entry, so a reader never sees half a file, a good file is never
 * replaced by a partial one, and two processes storing one entry at once
 * both end with a whole one. The cache is an optimisation: the functions
 * report failure with a phrase for a debug log and never abort or raise a
 * signal that ends the process (SIGXFSZ is held back while writing).
 *
 * Depends on the C library and POSIX only; names carry the prefix tpc_.
 */
#ifndef TYTO_PLUGINS_DISKCACHE_H
#define TYTO_PLUGINS_DISKCACHE_H

#include <stddef.h>
#include <stdint.h>

/* ---- keys ----------------------------------------------------------------
 * Two 64-bit FNV-1a-style hashes with different bases, fed the same bytes.
 * Not cryptographic: it tells apart the inputs one machine produces. */

typedef struct tpc_cache_key {
  uint64_t a, b;
} tpc_cache_key;

/* The key of nothing, to feed with the functions below. */
tpc_cache_key tpc_cache_key_init(void);
/* Adds `s` and its terminating NUL, so ("ab", "c") and ("a", "bc") give
 * different keys. A NULL `s` is hashed as "". */
void tpc_cache_key_str(tpc_cache_key *k, const char *s);
/* Adds `size` (as 8 bytes) and then the bytes at `p`. */
void tpc_cache_key_bytes(tpc_cache_key *k, const void *p, size_t size);

/* ---- paths --------------------------------------------------------------- */

/* Writes the cache folder <base>/<sub> into buf, where <base> is `option`
 * (the plugin's cache_dir; NULL or "" when not set), else
 * $XDG_CACHE_HOME/tyto (an absolute one, as the XDG spec asks), else
 * $HOME/.cache/tyto. Returns 0 when `option` is "off", when no folder can
 * be named, or when it does not fit in buf; 1 otherwise. Creates nothing. */
int tpc_cache_dir(const char *option, const char *sub, char *buf, size_t size);

/* Writes <dir>/<32 hex digits of key>.bin into buf; 0 when it does not
 * fit. */
int tpc_cache_path(const char *dir, tpc_cache_key key, char *buf, size_t size);

/* ---- entries ------------------------------------------------------------- */

/* The payload stored at `path` for `magic` (8 bytes) and `key`, malloc'd
 * (the caller frees it), with its size in *size; payloads are never empty.
 * NULL when there is none: *why is then NULL for an ordinary miss (no such
 * file) and a phrase for the debug log otherwise ("is a FIFO, not a regular
 * file", "is cut short", ...). A file whose payload exceeds `max_size` is
 * not read. Never blocks on a FIFO or device and never follows a symbolic
 * link at `path`. */
unsigned char *tpc_cache_read(const char *path, const char *magic,
                              tpc_cache_key key, size_t max_size, size_t *size,
                              const char **why);

/* Stores `size` bytes (size > 0) at `path` for `magic` and `key`: creates
 * `dir` (the folder of `path`, with its parents, mode 0700) as needed,
 * writes a temporary file beside `path`, syncs it to disk and renames it
 * over `path`. Returns 1 on success; 0 with *why set (a phrase for the
 * debug log) on failure, when `path` is left as it was (never a partial
 * file) and the temporary is gone. A file-size limit (ulimit -f) fails the
 * write with EFBIG: SIGXFSZ is blocked on the calling thread while writing
 * and one the write raised is discarded. */
int tpc_cache_write(const char *dir, const char *path, const char *magic,
                    tpc_cache_key key, const void *data, size_t size,
                    const char **why);

#endif /* TYTO_PLUGINS_DISKCACHE_H */
