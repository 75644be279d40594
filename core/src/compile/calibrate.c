/*
 * Device profiles for placement (see <tyto/placement.h>): measured by
 * running small programs through the public API, remembered per context,
 * and cached on disk as JSON (jansson) so that a machine calibrates once.
 *
 * What is measured, per device:
 *   launch:  z = x + 1 on one element, run after run: the time from the
 *            host's call to the result being ready;
 *   gemm:    [n,n] x [n,n] f32 (n = 512), its time less one launch;
 *   eltwise: y = 1.5 x over 8M f32 (64 MB moved), less one launch;
 *   links:   tyto_buffer_write / _read / _copy of 32 MB.
 * Each figure is the best of repeated runs within a time budget, so a
 * first-run compile or a page-in does not count.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tyto/device.h>
#include <tyto/graph.h>
#include <tyto/ops.h>
#include <tyto/placement.h>
#include <tyto/program.h>
#include <tyto/version.h>

#include "../runtime/error.h"
#include "../runtime/file.h"
#include "../runtime/log.h"
#include "../runtime/runtime.h"
#include "../runtime/strlist.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* The context's memory of profiles                                        */

typedef struct memo_entry {
  char *key;
  tyto_device_profile prof; /* devices */
  double bps;               /* links */
} memo_entry;

typedef struct memo {
  memo_entry *e;
  size_t n, cap;
  char *cache_path;
  int cache_path_done;
} memo;

static void memo_free(void *p) {
  memo *m = p;
  if (!m)
    return;
  for (size_t i = 0; i < m->n; i++)
    free(m->e[i].key);
  free(m->e);
  free(m->cache_path);
  free(m);
}

static memo *memo_of(tyto_context *ctx) {
  if (!ctx->profiles) {
    ctx->profiles = calloc(1, sizeof(memo));
    ctx->profiles_free = memo_free;
  }
  return ctx->profiles;
}

static memo_entry *memo_find(memo *m, const char *key) {
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->e[i].key, key) == 0)
      return &m->e[i];
  return NULL;
}

static memo_entry *memo_add(memo *m, const char *key) {
  memo_entry *e = memo_find(m, key);
  if (e)
    return e;
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 8;
    memo_entry *ne = realloc(m->e, cap * sizeof *ne);
    if (!ne)
      return NULL;
    m->e = ne;
    m->cap = cap;
  }
  e = &m->e[m->n];
  memset(e, 0, sizeof *e);
  if (!(e->key = rt_strdup(key)))
    return NULL;
  m->n++;
  return e;
}

/* ---------------------------------------------------------------------- */
/* The cache file                                                          */

const char *tyto_profile_cache_path(tyto_context *ctx) {
  memo *m = ctx ? memo_of(ctx) : NULL;
  if (!m)
    return NULL;
  if (!m->cache_path_done) {
    m->cache_path_done = 1;
    if (!ctx->ignore_env) {
      const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
      if (xdg && xdg[0] == '/')
        m->cache_path = rt_asprintf("%s/tyto/profiles.json", xdg);
      else if (home && home[0])
        m->cache_path = rt_asprintf("%s/.cache/tyto/profiles.json", home);
    }
  }
  return m->cache_path;
}

/* The cache's JSON, or a new empty one when there is none or it is
 * unreadable (then with a warning). Never NULL unless out of memory. */
static json_t *cache_load(tyto_context *ctx, const char *path) {
  json_t *root = NULL;
  const char *why = NULL;
  int fd = path ? rt_open_regular(path, &why) : -1;
  if (fd >= 0) {
    json_error_t jerr;
    FILE *f = fdopen(fd, "r");
    if (f) {
      root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
      fclose(f);
    } else {
      close(fd);
    }
    if (!root || !json_is_object(root) ||
        json_integer_value(json_object_get(root, "version")) != 1) {
      rt_log(&ctx->log, TYTO_LOG_WARN, "tyto",
             "profile cache %s is not a tyto profile cache (%s); its "
             "figures are measured again and it is rewritten",
             path, root ? "another format or version" : jerr.text);
      json_decref(root);
      root = NULL;
    }
  } else if (path && errno != ENOENT) {
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto",
           "profile cache %s cannot be read: %s; measuring", path, why);
  }
  if (!root) {
    root = json_pack("{s:i, s:{}, s:{}}", "version", 1, "devices", "links");
  }
  return root;
}

/* mkdir -p of path's directory. */
static int make_dirs_for(const char *path) {
  char *dir = rt_strdup(path);
  if (!dir)
    return -1;
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  for (char *p = dir + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        free(dir);
        return -1;
      }
      *p = '/';
    }
  int rc = mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
  free(dir);
  return rc;
}

/* Writes root over path atomically (file.h: a temporary beside it, then
 * a rename). */
static void cache_store(tyto_context *ctx, const char *path, json_t *root) {
  if (!path)
    return;
  rt_replace r;
  const char *why = NULL, *step = NULL;
  int ok = make_dirs_for(path) == 0;
  if (!ok)
    why = strerror(errno);
  else
    ok = rt_replace_open(&r, path, &why) == 0;
  if (ok) {
    rt_xfsz_guard guard;
    rt_xfsz_block(&guard);
    FILE *f = rt_replace_stream(&r);
    int err = f ? 0 : errno;
    errno = 0;
    if (f && (json_dumpf(root, f, JSON_INDENT(2) | JSON_SORT_KEYS) != 0 ||
              fputc('\n', f) == EOF))
      err = errno ? errno : EIO;
    ok = rt_replace_commit(&r, err, &why, &step) == 0;
    rt_xfsz_restore(&guard);
  }
  if (!ok)
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto",
           "profile cache %s cannot be written: %s; the figures are kept "
           "for this run only",
           path, why);
}

static double get_real(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static int positive(double x) {
  return isfinite(x) && x > 0;
}

/* ---------------------------------------------------------------------- */
/* Measuring                                                               */

typedef struct bench {
  tyto_graph *g;
  tyto_program *p;
} bench;

static void bench_free(bench *b) {
  tyto_program_free(b->p);
  tyto_graph_free(b->g);
  memset(b, 0, sizeof *b);
}

/* Compiles out for selected device `device`, binds every input to values
 * in [-1, 1] and runs it once (the warm-up). */
static tyto_status bench_compile(tyto_context *ctx, size_t device, bench *b,
                                 tyto_tensor *out, size_t n_in,
                                 tyto_tensor *const *in) {
  tyto_program_options o;
  tyto_program_options_init(&o);
  o.device = device;
  tyto_status st = tyto_program_compile(ctx, b->g, 1, &out, &o, &b->p);
  for (size_t i = 0; st == TYTO_OK && i < n_in; i++) {
    size_t n = (size_t)tyto_tensor_numel(in[i]);
    float *v = malloc(n * sizeof *v);
    if (!v)
      return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "calibration: out of memory");
    for (size_t k = 0; k < n; k++)
      v[k] = (float)((double)(k % 2001) / 1000.0 - 1.0);
    st = tyto_program_set_input(b->p, in[i], v, n * sizeof *v);
    free(v);
  }
  if (st == TYTO_OK)
    st = tyto_program_run(b->p);
  return st;
}

/* The best seconds per run over runs made within `budget` seconds (at
 * least 3). */
static tyto_status best_run(bench *b, double budget, double *best) {
  *best = INFINITY;
  double t_end = now() + budget;
  for (int k = 0; k < 3 || now() < t_end; k++) {
    double t0 = now();
    tyto_status st = tyto_program_run(b->p);
    if (st != TYTO_OK)
      return st;
    double dt = now() - t0;
    if (dt < *best)
      *best = dt;
    if (k > 1000)
      break;
  }
  return TYTO_OK;
}

static tyto_status measure_launch(tyto_context *ctx, size_t dev, double budget,
                                  double *seconds) {
  bench b = {tyto_graph_new(), NULL};
  tyto_tensor *x = tyto_input(b.g, TYTO_F32, 1, (int64_t[]){1}, "x");
  tyto_tensor *z = tyto_add(x, tyto_scalar(b.g, TYTO_F32, 1.0));
  tyto_status st = bench_compile(ctx, dev, &b, z, 1, &x);
  if (st == TYTO_OK)
    st = best_run(&b, budget, seconds);
  bench_free(&b);
  return st;
}

static tyto_status measure_gemm(tyto_context *ctx, size_t dev, int64_t n,
                                double budget, double launch, double *flops) {
  bench b = {tyto_graph_new(), NULL};
  tyto_tensor *in[2] = {tyto_input(b.g, TYTO_F32, 2, (int64_t[]){n, n}, "a"),
                        tyto_input(b.g, TYTO_F32, 2, (int64_t[]){n, n}, "b")};
  tyto_tensor *c = tyto_matmul(in[0], in[1], 0, 0);
  tyto_status st = bench_compile(ctx, dev, &b, c, 2, in);
  double t;
  if (st == TYTO_OK && (st = best_run(&b, budget, &t)) == TYTO_OK) {
    double work = t - launch > 0.1 * t ? t - launch : t;
    *flops = 2.0 * (double)n * (double)n * (double)n / work;
  }
  bench_free(&b);
  return st;
}

static tyto_status measure_eltwise(tyto_context *ctx, size_t dev, int64_t n,
                                   double budget, double launch,
                                   double *bytes) {
  bench b = {tyto_graph_new(), NULL};
  tyto_tensor *x = tyto_input(b.g, TYTO_F32, 1, (int64_t[]){n}, "x");
  tyto_tensor *y = tyto_mul(x, tyto_scalar(b.g, TYTO_F32, 1.5));
  tyto_status st = bench_compile(ctx, dev, &b, y, 1, &x);
  double t;
  if (st == TYTO_OK && (st = best_run(&b, budget, &t)) == TYTO_OK) {
    double work = t - launch > 0.1 * t ? t - launch : t;
    *bytes = 2.0 * 4.0 * (double)n / work;
  }
  bench_free(&b);
  return st;
}

/* Best bytes/s of `what` (0 write, 1 read, 2 copy) over `size` bytes. */
static tyto_status measure_copy(tyto_device *a, tyto_device *bdev, int what,
                                size_t size, double budget, double *bps) {
  tyto_buffer *x = NULL, *y = NULL;
  unsigned char *host = calloc(size ? size : 1, 1);
  tyto_status st =
      host ? tyto_buffer_new(a, size, &x)
           : rt_fail(TYTO_ERR_OUT_OF_MEMORY, "calibration: out of memory");
  if (st == TYTO_OK && what == 2)
    st = tyto_buffer_new(bdev, size, &y);
  double best = INFINITY, t_end = now() + budget;
  for (int k = 0; st == TYTO_OK && (k < 3 || now() < t_end) && k < 1000; k++) {
    double t0 = now();
    st = what == 0   ? tyto_buffer_write(x, 0, host, size)
         : what == 1 ? tyto_buffer_read(x, 0, host, size)
                     : tyto_buffer_copy(y, 0, x, 0, size);
    double dt = now() - t0;
    if (dt < best)
      best = dt;
  }
  if (st == TYTO_OK)
    *bps = (double)size / (best > 1e-9 ? best : 1e-9);
  tyto_buffer_free(x);
  tyto_buffer_free(y);
  free(host);
  return st;
}

static tyto_status measure_device(tyto_context *ctx, size_t dev, int quick,
                                  tyto_device_profile *p) {
  double t0 = now();
  double budget = quick ? 0.002 : 0.05;
  tyto_device *d = tyto_context_device(ctx, dev);
  tyto_status st = measure_launch(ctx, dev, budget, &p->launch_seconds);
  /* A device that runs no matrix products (or no elementwise ops) has
   * no figure for them (0): placement never gives it those. */
  if (st == TYTO_OK &&
      (st = measure_gemm(ctx, dev, quick ? 64 : 512, 2 * budget,
                         p->launch_seconds, &p->gemm_flops)) ==
          TYTO_ERR_UNSUPPORTED) {
    p->gemm_flops = 0;
    st = TYTO_OK;
  }
  if (st == TYTO_OK &&
      (st = measure_eltwise(ctx, dev, quick ? 1 << 14 : 1 << 23, 2 * budget,
                            p->launch_seconds, &p->eltwise_bytes)) ==
          TYTO_ERR_UNSUPPORTED) {
    p->eltwise_bytes = 0;
    st = TYTO_OK;
  }
  size_t link = quick ? (size_t)1 << 16 : (size_t)32 << 20;
  if (st == TYTO_OK)
    st = measure_copy(d, NULL, 0, link, budget, &p->h2d_bytes);
  if (st == TYTO_OK)
    st = measure_copy(d, NULL, 1, link, budget, &p->d2h_bytes);
  if (st != TYTO_OK) {
    char *msg = rt_strdup(tyto_errmsg());
    st = rt_fail(st, "calibrating %s: %s", tyto_device_get_info(d)->id,
                 msg ? msg : "out of memory");
    free(msg);
    return st;
  }
  p->measure_seconds = now() - t0;
  p->cached = 0;
  return TYTO_OK;
}

/* ---------------------------------------------------------------------- */
/* The API                                                                 */

static void device_key(const tyto_device_info *info, char *key, size_t n) {
  snprintf(key, n, "%s|%s|%s|%s", info->plugin, info->name,
           info->driver_version, tyto_version());
}

tyto_status tyto_device_profile_get(tyto_context *ctx, size_t device,
                                    unsigned flags, tyto_device_profile *out) {
  const char *fn = "tyto_device_profile_get";
  if (!ctx || !out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
  if (out->struct_size < offsetof(tyto_device_profile, cached))
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                   "%s: out->struct_size is %zu; set it to "
                   "sizeof(tyto_device_profile)",
                   fn, out->struct_size);
  if (device >= tyto_context_device_count(ctx))
    return rt_fail(TYTO_ERR_NOT_FOUND,
                   "%s: no selected device %zu (the context has %zu)", fn,
                   device, tyto_context_device_count(ctx));
  size_t size = out->struct_size < sizeof *out ? out->struct_size : sizeof *out;
  tyto_device_profile p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  device_key(tyto_device_get_info(tyto_context_device(ctx, device)), p.key,
             sizeof p.key);
  int quick = (flags & TYTO_PROFILE_QUICK) != 0;
  int use_cache = !quick && !(flags & TYTO_PROFILE_NO_CACHE);
  int remeasure = (flags & TYTO_PROFILE_REMEASURE) != 0;
  memo *m = memo_of(ctx);
  if (!m)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);

  memo_entry *e = quick ? NULL : memo_find(m, p.key);
  if (e && !remeasure) {
    memcpy(out, &e->prof, size);
    out->struct_size = size;
    return TYTO_OK;
  }
  const char *path = use_cache ? tyto_profile_cache_path(ctx) : NULL;
  json_t *root = path ? cache_load(ctx, path) : NULL;
  json_t *devs = root ? json_object_get(root, "devices") : NULL;
  json_t *c = devs ? json_object_get(devs, p.key) : NULL;
  int have = 0;
  if (c && !remeasure) {
    p.gemm_flops = get_real(c, "gemm_flops");
    p.eltwise_bytes = get_real(c, "eltwise_bytes");
    p.launch_seconds = get_real(c, "launch_seconds");
    p.h2d_bytes = get_real(c, "h2d_bytes");
    p.d2h_bytes = get_real(c, "d2h_bytes");
    have = positive(p.gemm_flops) && positive(p.eltwise_bytes) &&
           positive(p.launch_seconds) && positive(p.h2d_bytes) &&
           positive(p.d2h_bytes);
    p.cached = have;
  }
  tyto_status st = TYTO_OK;
  if (!have) {
    st = measure_device(ctx, device, quick, &p);
    if (st == TYTO_OK && root && json_is_object(devs)) {
      json_t *rec = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "gemm_flops",
                              p.gemm_flops, "eltwise_bytes", p.eltwise_bytes,
                              "launch_seconds", p.launch_seconds, "h2d_bytes",
                              p.h2d_bytes, "d2h_bytes", p.d2h_bytes,
                              "measure_seconds", p.measure_seconds);
      if (rec && json_object_set_new(devs, p.key, rec) == 0)
        cache_store(ctx, path, root);
    }
  }
  json_decref(root);
  if (st != TYTO_OK)
    return st;
  if (!quick && (e = memo_add(m, p.key)) != NULL)
    e->prof = p;
  memcpy(out, &p, size);
  out->struct_size = size;
  return TYTO_OK;
}

tyto_status tyto_link_profile_get(tyto_context *ctx, size_t src, size_t dst,
                                  unsigned flags, double *bytes_per_second) {
  const char *fn = "tyto_link_profile_get";
  if (!ctx || !bytes_per_second)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
  size_t n = tyto_context_device_count(ctx);
  if (src >= n || dst >= n)
    return rt_fail(TYTO_ERR_NOT_FOUND,
                   "%s: no selected device %zu (the context has %zu)", fn,
                   src >= n ? src : dst, n);
  tyto_device *a = tyto_context_device(ctx, src);
  tyto_device *b = tyto_context_device(ctx, dst);
  char ka[512], kb[512], key[1100];
  device_key(tyto_device_get_info(a), ka, sizeof ka);
  device_key(tyto_device_get_info(b), kb, sizeof kb);
  snprintf(key, sizeof key, "%s -> %s", ka, kb);
  int quick = (flags & TYTO_PROFILE_QUICK) != 0;
  int use_cache = !quick && !(flags & TYTO_PROFILE_NO_CACHE);
  int remeasure = (flags & TYTO_PROFILE_REMEASURE) != 0;
  memo *m = memo_of(ctx);
  if (!m)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
  memo_entry *e = quick ? NULL : memo_find(m, key);
  if (e && !remeasure) {
    *bytes_per_second = e->bps;
    return TYTO_OK;
  }
  const char *path = use_cache ? tyto_profile_cache_path(ctx) : NULL;
  json_t *root = path ? cache_load(ctx, path) : NULL;
  json_t *links = root ? json_object_get(root, "links") : NULL;
  double bps = remeasure || !links ? NAN : get_real(links, key);
  tyto_status st = TYTO_OK;
  if (!positive(bps)) {
    size_t size = quick ? (size_t)1 << 16 : (size_t)32 << 20;
    st = measure_copy(a, b, 2, size, quick ? 0.002 : 0.05, &bps);
    if (st != TYTO_OK) {
      char *msg = rt_strdup(tyto_errmsg());
      st = rt_fail(st, "calibrating the link %s -> %s: %s",
                   tyto_device_get_info(a)->id, tyto_device_get_info(b)->id,
                   msg ? msg : "out of memory");
      free(msg);
    } else if (json_is_object(links) &&
               json_object_set_new(links, key, json_real(bps)) == 0) {
      cache_store(ctx, path, root);
    }
  }
  json_decref(root);
  if (st != TYTO_OK)
    return st;
  if (!quick && (e = memo_add(m, key)) != NULL)
    e->bps = bps;
  *bytes_per_second = bps;
  return TYTO_OK;
}
