/*
 * Grad mode of tyto-conform (see grad.h). libtyto loads both plugins from
 * private directories: a temporary directory holding only a link
 * tyto_plugin_NAME.so to the plugin under test, another holding only the
 * reference, each searched by its own context with the environment, the
 * config files and the installed plugins ignored, so that nothing else is
 * loaded and the plugin's file is the one given. When the two paths are
 * one file, one context serves both.
 */
#define _DEFAULT_SOURCE
#include "config.h"

#include "grad.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tyto/context.h>
#include <tyto/device.h>
#include <tyto/program.h>

#include "compare.h"

#define SEED UINT64_C(20240611)

/* Gradients pass through several kernels, each rounding: a little more
 * room than a single accumulation. */
#define RTOL_F32 2e-4
#define ATOL_F32 2e-4
#define RTOL_F64 1e-9
#define ATOL_F64 1e-9

/* Why grad mode does not run f16 and bf16. */
#define GRAD16_WHY                                                             \
  "grad mode does not run the 16-bit dtypes: every kernel of a "               \
  "differentiated graph rounds its result to the dtype, and where the "        \
  "device's and the CPU's f32 results fall on either side of a rounding "      \
  "boundary the one-ulp difference (2^-8 in bf16) grows through the "          \
  "backward pass by the graph's condition, beyond any tolerance derived "      \
  "from the format; test mode checks each of those kernels in the dtype, "     \
  "and grad mode in f32 the graphs"

typedef struct tally {
  int pass, fail, error, unsupported, noref;
} tally;

/* A context over one plugin, loaded from its own temporary directory. */
typedef struct plugin_ctx {
  char dir[PATH_MAX], link[PATH_MAX + 160];
  char name[128]; /* NAME of tyto_plugin_NAME.so */
  tyto_context *ctx;
} plugin_ctx;

/* NAME from ".../tyto_plugin_NAME.so", as libtyto's loader takes it. */
static int module_of(const char *path, char *name, size_t size) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base), pl = strlen("tyto_plugin_");
  if (n <= pl + 3 || strncmp(base, "tyto_plugin_", pl) != 0 ||
      strcmp(base + n - 3, ".so") != 0 || n - pl - 3 >= size)
    return -1;
  for (size_t i = pl; i < n - 3; i++)
    if (!(islower((unsigned char)base[i]) || isdigit((unsigned char)base[i]) ||
          base[i] == '_'))
      return -1;
  memcpy(name, base + pl, n - pl - 3);
  name[n - pl - 3] = '\0';
  return 0;
}

static void plugin_ctx_close(plugin_ctx *p) {
  tyto_context_free(p->ctx);
  p->ctx = NULL;
  if (p->link[0])
    unlink(p->link);
  if (p->dir[0])
    rmdir(p->dir);
  p->link[0] = p->dir[0] = '\0';
}

/* Opens a context on the plugin at `path` selecting `devices`. Returns 0,
 * or 2 (a usage or load error; err says why). A selection that cannot be
 * satisfied is not an error here: the context then has no device. */
static int plugin_ctx_open(plugin_ctx *p, const char *path, const char *devices,
                           char *err, size_t size) {
  char real[PATH_MAX], sel[256];
  const char *tmp = getenv("TMPDIR");
  memset(p, 0, sizeof *p);
  if (module_of(path, p->name, sizeof p->name) != 0) {
    snprintf(err, size,
             "%s: grad mode loads plugins through libtyto, which takes a file "
             "named tyto_plugin_NAME.so (NAME in [a-z0-9_])",
             path);
    return 2;
  }
  if (realpath(path, real) == NULL) {
    snprintf(err, size, "%s: no such file", path);
    return 2;
  }
  snprintf(p->dir, sizeof p->dir, "%s/tyto-conform-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(p->dir) == NULL) {
    snprintf(err, size,
             "cannot make a temporary directory in %.900s: %s (set TMPDIR)",
             tmp && *tmp ? tmp : "/tmp", strerror(errno));
    p->dir[0] = '\0';
    return 2;
  }
  snprintf(p->link, sizeof p->link, "%s/tyto_plugin_%s.so", p->dir, p->name);
  if (symlink(real, p->link) != 0) {
    snprintf(err, size, "cannot link %.900s into %.900s: %s", real, p->dir,
             strerror(errno));
    p->link[0] = '\0';
    plugin_ctx_close(p);
    return 2;
  }
  tyto_context_options o;
  tyto_context_options_init(&o);
  o.plugin_path = p->dir;
  o.config_path = "";
  o.flags = TYTO_CONTEXT_IGNORE_ENV | TYTO_CONTEXT_NO_INSTALLED_PLUGINS;
  o.log_level = TYTO_LOG_ERROR;
  snprintf(sel, sizeof sel, "%s%s", p->name, devices);
  o.devices = sel;
  if (tyto_context_inspect(&o, &p->ctx) != TYTO_OK) {
    snprintf(err, size, "%s: libtyto: %s", path, tyto_errmsg());
    plugin_ctx_close(p);
    return 2;
  }
  const tyto_found_plugin *f = tyto_context_found_plugin_count(p->ctx)
                                   ? tyto_context_found_plugin(p->ctx, 0)
                                   : NULL;
  if (f == NULL || f->status != TYTO_FOUND_LOADED) {
    snprintf(err, size, "%s: libtyto could not load it: %s", path,
             f && f->reason ? f->reason : "not found");
    plugin_ctx_close(p);
    return 2;
  }
  return 0;
}

/* ------------------------------------------------------------- one case -- */

/* A compiled program and its outputs read back as doubles. */
typedef struct side {
  tyto_program *p;
  double *out[CF_GRAD_MAX_OUT];
} side;

static void side_clear(side *s, uint32_t n_out) {
  tyto_program_free(s->p);
  s->p = NULL;
  for (uint32_t i = 0; i < n_out; i++) {
    free(s->out[i]);
    s->out[i] = NULL;
  }
}

/* Compiles G on device `dev` of ctx. */
static tyto_status compile(tyto_context *ctx, size_t dev, cf_grad_graph *G,
                           side *s) {
  tyto_program_options po;
  tyto_program_options_init(&po);
  po.device = dev;
  po.n_updates = G->n_upd;
  po.update_params = G->upd_param;
  po.update_values = G->upd_value;
  return tyto_program_compile(ctx, G->g, G->n_out, G->out, &po, &s->p);
}

/* Binds the inputs (vals), runs, reads every output. On failure returns
 * the status with the call that failed in what. */
static tyto_status execute(cf_grad_graph *G, void *const *vals, side *s,
                           const char **what) {
  tyto_status st = TYTO_OK;
  const size_t es = tyto_dtype_size(G->dtype);
  for (uint32_t i = 0; i < G->n_in && st == TYTO_OK; i++) {
    tyto_tensor *t = G->in[i].t;
    size_t bytes = (size_t)tyto_tensor_numel(t) * es;
    if (!tyto_program_uses(s->p, t))
      continue; /* folded away or not needed by the outputs */
    *what = G->in[i].parameter ? "write_parameter" : "set_input";
    st = G->in[i].parameter
             ? tyto_program_write_parameter(s->p, t, vals[i], bytes)
             : tyto_program_set_input(s->p, t, vals[i], bytes);
  }
  for (int r = 0; r < (G->runs > 0 ? G->runs : 1) && st == TYTO_OK; r++) {
    *what = "run";
    st = tyto_program_run(s->p);
  }
  for (uint32_t o = 0; o < G->n_out && st == TYTO_OK; o++) {
    int64_t n = tyto_tensor_numel(G->out[o]);
    void *raw = malloc((size_t)(n ? n : 1) * es);
    s->out[o] = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (raw == NULL || s->out[o] == NULL) {
      free(raw);
      *what = "host";
      return TYTO_ERR_OUT_OF_MEMORY;
    }
    *what = "read_output";
    st = tyto_program_read_output(s->p, o, raw, (size_t)n * es);
    for (int64_t j = 0; j < n && st == TYTO_OK; j++)
      s->out[o][j] = G->dtype == TYTO_F32 ? (double)((const float *)raw)[j]
                                          : ((const double *)raw)[j];
    free(raw);
  }
  return st;
}

/* Draws the values of G's inputs; NULL entries when out of memory. */
static int draw(cf_grad_graph *G, uint64_t seed, void **vals) {
  uint64_t s = seed;
  int bad = 0;
  for (uint32_t i = 0; i < G->n_in; i++) {
    cf_tensor t;
    tyto_tensor *x = G->in[i].t;
    cf_tensor_set(&t, (uint32_t)G->dtype, (uint32_t)tyto_tensor_rank(x),
                  tyto_tensor_shape(x), NULL, 0);
    t.values = G->in[i].values;
    t.lo = G->in[i].lo;
    t.hi = G->in[i].hi;
    vals[i] =
        malloc((size_t)(t.storage ? t.storage : 1) * tyto_dtype_size(G->dtype));
    s = s * UINT64_C(6364136223846793005) + 1442695040888963407u;
    if (vals[i] == NULL)
      bad = 1;
    else
      cf_values_fill(&t, (uint32_t)G->dtype, vals[i], s);
  }
  return bad ? -1 : 0;
}

typedef struct run_ctx {
  int json;
  json_t *rows;
  tally *t;
} run_ctx;

static void report(run_ctx *rc, const char *group, tyto_dtype dt,
                   const char *name, const char *result, double err,
                   const char *msg) {
  if (!rc->json) {
    printf("%-22s %-5s %-34s %s%s%s\n", group, tyto_dtype_name(dt), name,
           result, msg && msg[0] ? ": " : "", msg ? msg : "");
    return;
  }
  json_t *r = json_pack("{s:s, s:s, s:s, s:s}", "op", group, "dtype",
                        tyto_dtype_name(dt), "case", name, "result", result);
  if (err >= 0)
    json_object_set_new(r, "max_normalised_error", json_real(err));
  if (msg && msg[0])
    json_object_set_new(r, "message", json_string(msg));
  json_array_append_new(rc->rows, r);
}

/* Builds, compiles on both devices, runs and compares one case. */
static void run_case(run_ctx *rc, const cf_grad_case *gc, uint64_t seed,
                     tyto_dtype dt, tyto_context *dctx, size_t dev,
                     tyto_context *rctx) {
  cf_grad_graph G;
  side d = {0}, r = {0};
  void *vals[CF_GRAD_MAX_IN] = {0};
  char msg[1600];
  const char *what = "";
  memset(&G, 0, sizeof G);
  G.dtype = dt;
  G.g = tyto_graph_new();
  if (G.g == NULL) {
    report(rc, gc->group, dt, gc->name, "error", -1, "out of host memory");
    rc->t->error++;
    return;
  }
  gc->build(&G);
  if (tyto_graph_status(G.g) != TYTO_OK) {
    snprintf(msg, sizeof msg, "the kit's graph is in error (a kit bug): %s",
             tyto_graph_error_message(G.g));
    report(rc, gc->group, dt, gc->name, "error", -1, msg);
    rc->t->error++;
    goto done;
  }
  tyto_status st = compile(dctx, dev, &G, &d);
  if (st == TYTO_ERR_UNSUPPORTED) {
    report(rc, gc->group, dt, gc->name, "unsupported", -1, tyto_errmsg());
    rc->t->unsupported++;
    goto done;
  }
  if (st != TYTO_OK) {
    snprintf(msg, sizeof msg, "compile: %s: %s", tyto_status_name(st),
             tyto_errmsg());
    report(rc, gc->group, dt, gc->name, "FAIL", -1, msg);
    rc->t->fail++;
    goto done;
  }
  if ((st = compile(rctx, 0, &G, &r)) != TYTO_OK) {
    snprintf(msg, sizeof msg, "the reference cannot compile it: %s: %s",
             tyto_status_name(st), tyto_errmsg());
    report(rc, gc->group, dt, gc->name, "no-reference", -1, msg);
    rc->t->noref++;
    goto done;
  }
  if (draw(&G, seed, vals)) {
    report(rc, gc->group, dt, gc->name, "error", -1, "out of host memory");
    rc->t->error++;
    goto done;
  }
  if ((st = execute(&G, vals, &d, &what)) != TYTO_OK) {
    snprintf(msg, sizeof msg, "%s: %s: %s", what, tyto_status_name(st),
             tyto_errmsg());
    report(rc, gc->group, dt, gc->name, "FAIL", -1, msg);
    rc->t->fail++;
    goto done;
  }
  if ((st = execute(&G, vals, &r, &what)) != TYTO_OK) {
    snprintf(msg, sizeof msg, "the reference failed: %s: %s: %s", what,
             tyto_status_name(st), tyto_errmsg());
    report(rc, gc->group, dt, gc->name, "no-reference", -1, msg);
    rc->t->noref++;
    goto done;
  }
  int64_t count[CF_GRAD_MAX_OUT];
  for (uint32_t o = 0; o < G.n_out; o++)
    count[o] = tyto_tensor_numel(G.out[o]);
  const double rtol = dt == TYTO_F32 ? RTOL_F32 : RTOL_F64;
  const double atol = dt == TYTO_F32 ? ATOL_F32 : ATOL_F64;
  cf_cmp cmp;
  cf_compare_n(G.n_out, count, d.out, r.out, rtol, atol, &cmp);
  if (cf_cmp_pass(&cmp)) {
    report(rc, gc->group, dt, gc->name, "pass", cmp.max_err, NULL);
    rc->t->pass++;
  } else {
    if (cmp.specials)
      snprintf(msg, sizeof msg,
               "%lld NaN/Inf positions differ, first output '%s' element "
               "%lld: got %.9g, want %.9g",
               (long long)cmp.specials, G.out_name[cmp.sp_out],
               (long long)cmp.sp_at, cmp.sp_got, cmp.sp_want);
    else
      snprintf(msg, sizeof msg,
               "max normalised error %.3g at output '%s' element %lld: got "
               "%.9g, want %.9g (rtol %g, atol %g)",
               cmp.max_err, G.out_name[cmp.out], (long long)cmp.at, cmp.got,
               cmp.want, rtol, atol);
    report(rc, gc->group, dt, gc->name, "FAIL", cmp.max_err, msg);
    rc->t->fail++;
  }
done:
  side_clear(&d, G.n_out);
  side_clear(&r, G.n_out);
  for (uint32_t i = 0; i < CF_GRAD_MAX_IN; i++)
    free(vals[i]);
  tyto_graph_free(G.g);
}

/* ----------------------------------------------------------------- main -- */

static int same_file(const char *a, const char *b) {
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int cf_grad_main(const char *plugin, const char *reference,
                 const char *only_group, int json, const int dtypes[4],
                 int listed) {
  plugin_ctx ref, dut;
  char err[2048];
  int rc;
  tally t = {0, 0, 0, 0, 0};
  const int same = same_file(plugin, reference);

  memset(&dut, 0, sizeof dut);
  if ((rc = plugin_ctx_open(&ref, reference, ":0", err, sizeof err)) != 0) {
    fprintf(stderr, "tyto-conform: reference: %s\n", err);
    return rc;
  }
  if (tyto_context_device_count(ref.ctx) == 0) {
    const char *why = tyto_context_selection_error(ref.ctx);
    fprintf(stderr, "tyto-conform: reference %s: %s\n", reference,
            why ? why : "no device");
    plugin_ctx_close(&ref);
    return 2;
  }
  plugin_ctx *dp = &ref;
  if (!same) {
    if ((rc = plugin_ctx_open(&dut, plugin, "", err, sizeof err)) != 0) {
      fprintf(stderr, "tyto-conform: %s\n", err);
      plugin_ctx_close(&ref);
      return rc;
    }
    dp = &dut;
  }
  const tyto_found_plugin *f = tyto_context_found_plugin(dp->ctx, 0);
  const char *ref_id =
      tyto_device_get_info(tyto_context_device(ref.ctx, 0))->id;
  json_t *root = json_object(), *jdevs = json_array();
  json_object_set_new(root, "plugin",
                      json_pack("{s:s, s:s, s:s, s:s, s:i, s:i}", "path",
                                plugin, "name", f->name, "vendor", f->vendor,
                                "version", f->version, "abi_major",
                                (int)f->abi_major, "abi_minor",
                                (int)f->abi_minor));
  json_object_set_new(
      root, "reference",
      json_pack("{s:s, s:s}", "path", reference, "device", ref_id));
  json_object_set_new(root, "mode", json_string("grad"));
  if (!json)
    printf("tyto-conform: plugin %s %s (%s, ABI %u.%u), reference %s, "
           "grad mode\n",
           f->name, f->version, f->vendor, f->abi_major, f->abi_minor, ref_id);

  size_t n_dev = tyto_context_device_count(dp->ctx), n_cases = 0;
  const cf_grad_case *cases = cf_grad_cases(&n_cases);
  if (n_dev == 0) {
    /* libtyto's explanation spans lines: one line here. */
    const char *sel = tyto_context_selection_error(dp->ctx);
    char why[2048];
    snprintf(why, sizeof why, "%s", sel ? sel : "it claimed no device");
    for (char *c = why; (c = strchr(c, '\n')) != NULL;)
      *c = ' ';
    if (!json)
      printf("no device: %s\n", why);
    json_object_set_new(root, "no_device", json_string(why));
  }
  for (size_t i = 0; i < n_dev; i++) {
    tyto_device *dev = tyto_context_device(dp->ctx, i);
    const tyto_device_info *info = tyto_device_get_info(dev);
    json_t *jdev = json_object();
    run_ctx rcx = {json, json_array(), &t};
    json_object_set_new(jdev, "id", json_string(info->id));
    json_object_set_new(jdev, "name", json_string(info->name));
    if (!json)
      printf("\ndevice %s \"%s\"\n%-22s %-5s %-34s %s\n", info->id, info->name,
             "op", "dtype", "case", "result");
    for (int dt = 0; dt < 4; dt++) {
      if (!dtypes[dt] || (listed && !(info->dtypes & (1u << dt))))
        continue;
      if (dt == TYTO_F16 || dt == TYTO_BF16) {
        report(&rcx, only_group ? only_group : "(every group)", (tyto_dtype)dt,
               "(all cases)", "skipped", -1, GRAD16_WHY);
        continue;
      }
      for (size_t k = 0; k < n_cases; k++) {
        if (only_group && strcmp(only_group, cases[k].group) != 0)
          continue;
        if (!(info->dtypes & (1u << dt))) {
          report(&rcx, cases[k].group, (tyto_dtype)dt, cases[k].name,
                 "unsupported", -1, "the device does not list this dtype");
          t.unsupported++;
          continue;
        }
        run_case(&rcx, &cases[k], SEED ^ ((uint64_t)k << 32), (tyto_dtype)dt,
                 dp->ctx, i, ref.ctx);
        fflush(stdout);
      }
    }
    json_object_set_new(jdev, "cases", rcx.rows);
    json_array_append_new(jdevs, jdev);
  }
  json_object_set_new(root, "devices", jdevs);
  rc = n_dev == 0 ? 3 : t.fail || t.error ? 1 : 0;
  json_object_set_new(root, "summary",
                      json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "pass",
                                t.pass, "fail", t.fail, "out_of_bounds", 0,
                                "error", t.error, "unsupported", t.unsupported,
                                "no_reference", t.noref));
  json_object_set_new(root, "exit", json_integer(rc));
  if (!json) {
    printf("\nsummary: %d pass, %d FAIL, %d out-of-bounds, %d error, %d "
           "unsupported, %d without reference -- %s\n",
           t.pass, t.fail, 0, t.error, t.unsupported, t.noref,
           rc == 0   ? "CONFORMS"
           : rc == 3 ? "NOTHING TESTED (no device could be opened)"
                     : "DOES NOT CONFORM");
  } else {
    json_dumpf(root, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
  }
  json_decref(root);
  if (!same)
    plugin_ctx_close(&dut);
  plugin_ctx_close(&ref);
  return rc;
}
