/*
 * The runtime context: reads the configuration, loads the topology, loads
 * the plugins, and turns the device selection into opened devices.
 *
 * Precedence, highest first:
 *   devices:     options.devices, TYTO_DEVICES, the config's `devices`,
 *                else every usable device with the CPU first;
 *   plugin dirs: options.plugin_path, TYTO_PLUGIN_PATH, the config's
 *                `plugin_path`, then the installed plugin directory;
 *   log level:   options.log_level, TYTO_LOG_LEVEL, the config's `log_level`.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tyto/version.h>

#include "devspec.h"
#include "error.h"
#include "runtime.h"

void tyto_context_options_init(tyto_context_options *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
  opts->log_level = -1;
}

static const char *env(const tyto_context_options *o, const char *name) {
  if (o->flags & TYTO_CONTEXT_IGNORE_ENV)
    return NULL;
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* ---------------------------------------------------------------------- */
/* Configuration                                                           */

static int file_exists(const char *path) {
  return access(path, F_OK) == 0;
}

/* Chooses the config file: returns 0 and sets *path (NULL: none), or -1
 * with the message set when TYTO_CONFIG names a missing file. */
static int find_config(const tyto_context_options *o, char **path) {
  *path = NULL;
  if (o->config_path) {
    if (o->config_path[0])
      *path = rt_strdup(o->config_path);
    return 0;
  }
  const char *e = env(o, "TYTO_CONFIG");
  if (e) {
    if (!file_exists(e)) {
      rt_fail(TYTO_ERR_CONFIG,
              "TYTO_CONFIG names %s, which does not exist; fix the path or "
              "unset TYTO_CONFIG",
              e);
      return -1;
    }
    *path = rt_strdup(e);
    return 0;
  }
  char *candidates[3] = {rt_strdup("tyto.conf"), NULL, NULL};
  const char *xdg = env(o, "XDG_CONFIG_HOME"), *home = env(o, "HOME");
  if (xdg && *xdg)
    candidates[1] = rt_asprintf("%s/tyto/tyto.conf", xdg);
  else if (home && *home)
    candidates[1] = rt_asprintf("%s/.config/tyto/tyto.conf", home);
  candidates[2] = rt_strdup(TYTO_SYSCONFDIR "/tyto/tyto.conf");
  for (int i = 0; i < 3; i++) {
    if (!*path && candidates[i] && file_exists(candidates[i]))
      *path = candidates[i];
    else
      free(candidates[i]);
  }
  return 0;
}

static tyto_status read_config(tyto_context *ctx,
                               const tyto_context_options *o) {
  char *path;
  if (find_config(o, &path) != 0)
    return TYTO_ERR_CONFIG;
  if (!path)
    return TYTO_OK;
  rt_log(&ctx->log, TYTO_LOG_INFO, "tyto", "reading configuration from %s",
         path);
  int rc = conf_parse_file(&ctx->cfg, path);
  free(path);
  if (rc == 0)
    return TYTO_OK;
  char *all = strlist_join(&ctx->cfg.errors, "\n");
  rt_fail(TYTO_ERR_CONFIG, "%s", all ? all : "invalid configuration");
  free(all);
  return TYTO_ERR_CONFIG;
}

/* Keys of a plugin's section must be options the plugin declares. */
static tyto_status check_plugin_sections(tyto_context *ctx) {
  strlist errors = {0};
  const conf *cfg = &ctx->cfg;
  for (size_t i = 0; i < cfg->n_entries; i++) {
    const conf_entry *e = &cfg->entries[i];
    plugin_rec *p = loader_find(ctx, e->section);
    if (!p) {
      int first = 1;
      for (size_t j = 0; j < i; j++)
        first &= strcmp(cfg->entries[j].section, e->section) != 0;
      if (first)
        rt_log(&ctx->log, TYTO_LOG_WARN, "tyto",
               "%s:%d: section [%s] names no loaded plugin; its keys are "
               "ignored",
               cfg->path, e->section_line, e->section);
      continue;
    }
    int known = 0;
    strlist keys = {0};
    for (uint32_t k = 0; k < p->n_options; k++) {
      const tyto_plugin_option_doc *opt =
          TYTO_PLUGIN_AT(tyto_plugin_option_doc, p->info->options, k);
      known |= strcmp(opt->key, e->key) == 0;
      strlist_push(&keys, opt->key);
    }
    if (!known) {
      char *accepted = strlist_join(&keys, ", ");
      if (keys.n)
        strlist_pushf(&errors,
                      "%s:%d: unknown key '%s' in [%s] (%s accepts: %s)",
                      cfg->path, e->line, e->key, e->section, e->section,
                      accepted ? accepted : "");
      else
        strlist_pushf(&errors,
                      "%s:%d: unknown key '%s' in [%s] (%s takes no options)",
                      cfg->path, e->line, e->key, e->section, e->section);
      free(accepted);
    }
    strlist_free(&keys);
  }
  tyto_status st = TYTO_OK;
  if (errors.n) {
    char *all = strlist_join(&errors, "\n");
    st = rt_fail(TYTO_ERR_CONFIG, "%s", all ? all : "invalid configuration");
    free(all);
  }
  strlist_free(&errors);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Device selection                                                        */

static void select_device(tyto_context *ctx, tyto_device *dev) {
  for (size_t i = 0; i < ctx->n_selected; i++)
    if (ctx->selected[i] == dev)
      return;
  ctx->selected[ctx->n_selected++] = dev;
}

static int usable(const tyto_device *d) {
  return d->info.claimed && !d->info.reason;
}

/* Why no device of plugin `name` could be had: plugin-level reasons first,
 * then each refused or unusable device. */
static void explain_plugin(tyto_context *ctx, const char *name, strlist *why) {
  plugin_rec *p = loader_find(ctx, name);
  if (!p) {
    plugin_rec *any = loader_find_any(ctx, name);
    if (any) {
      strlist_pushf(why, "plugin %s (%s) %s", name, any->pub.path,
                    any->pub.reason ? any->pub.reason : "was not loaded");
    } else {
      char *dirs = strlist_join(&ctx->dirs, ":");
      strlist_pushf(why,
                    "no plugin named '%s' was found (searched %s); install it "
                    "or add its directory to TYTO_PLUGIN_PATH",
                    name, dirs && *dirs ? dirs : "no directories");
      free(dirs);
    }
    return;
  }
  if (p->pub.reason)
    strlist_pushf(why, "plugin %s: %s", name, p->pub.reason);
  for (size_t i = 0; i < ctx->n_devices; i++) {
    tyto_device *d = ctx->devices[i];
    if (d->plugin != p || usable(d))
      continue;
    strlist_pushf(why, "%s%s%s: %s", d->info.id ? d->info.id : "refused",
                  d->info.name[0] ? " " : "", d->info.name, d->info.reason);
  }
  if (p->pub.n_devices == 0 && !p->pub.reason)
    strlist_pushf(why, "plugin %s found no device on this machine", name);
}

static void add_failure(strlist *errors, const devspec_item *it,
                        const char *what, const strlist *why) {
  char *reasons = strlist_join(why, "; ");
  char entry[160];
  if (it->index == DEVSPEC_ALL)
    snprintf(entry, sizeof entry, "%s:*", it->plugin);
  else
    snprintf(entry, sizeof entry, "%s:%d", it->plugin, (int)it->index);
  strlist_pushf(errors, "device %s%s: %s%s%s", entry, it->optional ? "?" : "",
                what, reasons && *reasons ? ": " : "", reasons ? reasons : "");
  free(reasons);
}

static void resolve_item(tyto_context *ctx, const devspec_item *it,
                         strlist *errors) {
  plugin_rec *p = loader_find(ctx, it->plugin);
  strlist why = {0};
  int matched = 0;
  if (p) {
    for (size_t i = 0; i < ctx->n_devices; i++) {
      tyto_device *d = ctx->devices[i];
      if (d->plugin != p || !d->info.claimed)
        continue;
      if (it->index != DEVSPEC_ALL && d->info.ordinal != (uint32_t)it->index)
        continue;
      if (!usable(d)) {
        strlist_pushf(&why, "%s: %s", d->info.id, d->info.reason);
        if (it->index != DEVSPEC_ALL)
          matched = -1;
        continue;
      }
      select_device(ctx, d);
      matched = 1;
    }
  }
  if (matched > 0) {
    strlist_free(&why);
    return;
  }
  const char *what = "no such device";
  if (matched < 0) {
    what = "cannot be used";
  } else if (p && it->index != DEVSPEC_ALL) {
    strlist_pushf(&why, "plugin %s has %zu device%s", it->plugin,
                  p->pub.n_devices, p->pub.n_devices == 1 ? "" : "s");
    explain_plugin(ctx, it->plugin, &why);
  } else {
    what = p ? "no usable device" : "plugin not available";
    explain_plugin(ctx, it->plugin, &why);
  }
  if (it->optional) {
    strlist msg = {0};
    add_failure(&msg, it, what, &why);
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto", "%s (optional, skipped)",
           msg.items ? msg.items[0] : "");
    strlist_free(&msg);
  } else {
    add_failure(errors, it, what, &why);
  }
  strlist_free(&why);
}

static void select_default(tyto_context *ctx) {
  /* The CPU first: it is the default device; then the rest as found. */
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < ctx->n_devices; i++) {
      tyto_device *d = ctx->devices[i];
      int is_cpu = strcmp(d->plugin->pub.name, "cpu") == 0;
      if (usable(d) && is_cpu == (pass == 0))
        select_device(ctx, d);
    }
}

/* Resolves and opens the selection. In strict mode a failure fails the
 * context; otherwise it is recorded in ctx->selection_error. */
static tyto_status select_devices(tyto_context *ctx,
                                  const tyto_context_options *o, int strict) {
  const char *text = NULL, *source = NULL;
  if (o->devices)
    text = o->devices, source = o->devices_from ? o->devices_from : "options";
  else if ((text = env(o, "TYTO_DEVICES")) != NULL)
    source = "TYTO_DEVICES";
  else if (ctx->cfg.devices)
    text = ctx->cfg.devices, source = "config file";
  ctx->selected =
      calloc(ctx->n_devices ? ctx->n_devices : 1, sizeof *ctx->selected);
  if (!ctx->selected)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "out of memory selecting devices");

  strlist errors = {0};
  if (text) {
    devspec spec;
    char err[512];
    if (devspec_parse(text, &spec, err, sizeof err) != 0) {
      strlist_free(&errors);
      return rt_fail(TYTO_ERR_CONFIG, "%s='%s': %s",
                     strcmp(source, "TYTO_DEVICES") == 0 ? "TYTO_DEVICES"
                                                         : "devices",
                     text, err);
    }
    for (size_t i = 0; i < spec.n; i++)
      resolve_item(ctx, &spec.items[i], &errors);
    devspec_free(&spec);
  } else {
    source = "default";
    select_default(ctx);
  }
  ctx->selection_source = rt_strdup(source);

  /* Open what was selected, keeping priority order. */
  size_t kept = 0;
  for (size_t i = 0; i < ctx->n_selected; i++) {
    tyto_device *d = ctx->selected[i];
    if (device_open(d) != TYTO_OK) {
      const char *msg = tyto_errmsg();
      d->info.reason = device_keep(d, msg, "cannot be opened");
      if (!text) {
        /* Default selection: report and go on without it. */
        rt_log(&ctx->log, TYTO_LOG_WARN, "tyto", "%s; not selected", msg);
      } else {
        strlist_push(&errors, msg);
      }
      continue;
    }
    d->info.selected = 1;
    d->info.priority = (int32_t)kept;
    ctx->selected[kept++] = d;
  }
  ctx->n_selected = kept;

  strlist ids = {0};
  for (size_t i = 0; i < ctx->n_selected; i++)
    strlist_push(&ids, ctx->selected[i]->info.id);
  ctx->selection = strlist_join(&ids, ",");
  strlist_free(&ids);

  tyto_status st = TYTO_OK;
  if (errors.n || ctx->n_selected == 0) {
    size_t usable_n = 0;
    strlist found = {0};
    for (size_t i = 0; i < ctx->n_devices; i++)
      if (usable(ctx->devices[i])) {
        usable_n++;
        strlist_push(&found, ctx->devices[i]->info.id);
      }
    if (errors.n == 0 && text && usable_n) {
      /* Only optional entries, none of them present. */
      char *here = strlist_join(&found, ", ");
      strlist_pushf(&errors,
                    "it names no device that is present (its optional "
                    "entries, marked '?', were skipped); the devices here "
                    "are %s",
                    here ? here : "?");
      free(here);
    } else if (errors.n == 0) {
      /* Nothing usable at all: say what each plugin found instead. */
      strlist_push(&errors, "no usable device was found");
      for (size_t i = 0; i < ctx->n_plugins; i++)
        if (ctx->plugins[i]->pub.status != TYTO_FOUND_SHADOWED)
          explain_plugin(ctx, ctx->plugins[i]->pub.name, &errors);
      if (ctx->n_plugins == 0) {
        char *dirs = strlist_join(&ctx->dirs, ":");
        strlist_pushf(&errors, "no plugin was found (searched %s)",
                      dirs && *dirs ? dirs : "no directories");
        free(dirs);
      }
    }
    strlist_free(&found);
    char *all = strlist_join(&errors, "\n");
    ctx->selection_error =
        rt_asprintf("device selection '%s' (from %s) cannot be satisfied:\n%s",
                    text ? text : "default", source, all ? all : "");
    free(all);
    if (strict)
      st = rt_fail(TYTO_ERR_NOT_FOUND, "%s", ctx->selection_error);
  }
  strlist_free(&errors);
  return st;
}

/* ---------------------------------------------------------------------- */
/* Construction                                                            */

/* A plugin directory the user named that is not there is reported, from
 * whichever source named it; a missing installed directory is not. */
static void check_dir(tyto_context *ctx, const char *dir, const char *source) {
  struct stat st;
  const char *why = stat(dir, &st) != 0    ? strerror(errno)
                    : !S_ISDIR(st.st_mode) ? "not a directory"
                                           : NULL;
  if (why)
    rt_log(&ctx->log, TYTO_LOG_WARN, "tyto",
           "%s: plugin directory %s cannot be searched: %s", source, dir, why);
}

static void check_dirs(tyto_context *ctx, const char *list,
                       const char *source) {
  strlist dirs = {0};
  if (strlist_push_split_unique(&dirs, list, ':') == 0)
    for (size_t i = 0; i < dirs.n; i++)
      check_dir(ctx, dirs.items[i], source);
  strlist_free(&dirs);
}

/* The config's plugin_path, relative entries taken from the config file's
 * own directory (not from wherever the program happens to run). */
static int push_config_dirs(tyto_context *ctx) {
  strlist raw = {0};
  int rc = strlist_push_split_unique(&raw, ctx->cfg.plugin_path, ':');
  const char *cfg = ctx->cfg.path;
  const char *slash = cfg ? strrchr(cfg, '/') : NULL;
  for (size_t i = 0; rc == 0 && i < raw.n; i++) {
    const char *d = raw.items[i];
    char *abs = d[0] == '/' ? rt_strdup(d)
                : slash     ? rt_asprintf("%.*s/%s", (int)(slash - cfg), cfg, d)
                            : rt_strdup(d);
    if (!abs || (!strlist_contains(&ctx->dirs, abs) &&
                 strlist_push(&ctx->dirs, abs) != 0))
      rc = -1;
    if (abs) {
      char *where = rt_asprintf("%s:%d: plugin_path", cfg ? cfg : "(config)",
                                ctx->cfg.plugin_path_line);
      check_dir(ctx, abs, where ? where : "plugin_path");
      free(where);
    }
    free(abs);
  }
  strlist_free(&raw);
  return rc;
}

static tyto_status build_search_path(tyto_context *ctx,
                                     const tyto_context_options *o) {
  check_dirs(ctx, o->plugin_path, "tyto_context_options.plugin_path");
  check_dirs(ctx, env(o, "TYTO_PLUGIN_PATH"), "TYTO_PLUGIN_PATH");
  int rc = 0;
  rc |= strlist_push_split_unique(&ctx->dirs, o->plugin_path, ':');
  rc |= strlist_push_split_unique(&ctx->dirs, env(o, "TYTO_PLUGIN_PATH"), ':');
  rc |= push_config_dirs(ctx);
  if (!(o->flags & TYTO_CONTEXT_NO_INSTALLED_PLUGINS))
    rc |= strlist_push_split_unique(&ctx->dirs, TYTO_PLUGIN_DIR, ':');
  return rc ? rt_fail(TYTO_ERR_OUT_OF_MEMORY, "out of memory") : TYTO_OK;
}

static tyto_status set_log_level(tyto_context *ctx,
                                 const tyto_context_options *o) {
  ctx->log.level = TYTO_LOG_WARN;
  if (ctx->cfg.log_level >= 0)
    ctx->log.level = (tyto_log_level)ctx->cfg.log_level;
  const char *e = o->log_level >= 0 ? NULL : env(o, "TYTO_LOG_LEVEL");
  if (e) {
    int lv = rt_log_level_parse(e);
    if (lv < 0)
      return rt_fail(TYTO_ERR_CONFIG,
                     "TYTO_LOG_LEVEL: expected error, warn, info or debug, "
                     "found '%s'",
                     e);
    ctx->log.level = (tyto_log_level)lv;
  }
  if (o->log_level >= 0)
    ctx->log.level =
        (tyto_log_level)(o->log_level > TYTO_LOG_DEBUG ? TYTO_LOG_DEBUG
                                                       : o->log_level);
  return TYTO_OK;
}

static tyto_status context_create(const tyto_context_options *opts,
                                  tyto_context **out, int strict) {
  if (!out)
    return rt_fail(TYTO_ERR_INVALID_ARGUMENT, "tyto_context_new: out is NULL");
  *out = NULL;
  /* Take what the caller's (possibly older, smaller) struct holds; the
   * rest keeps its default. */
  tyto_context_options merged;
  tyto_context_options_init(&merged);
  if (opts) {
    if (opts->struct_size < sizeof(size_t))
      return rt_fail(TYTO_ERR_INVALID_ARGUMENT,
                     "tyto_context_options.struct_size is %zu; initialise "
                     "the options with tyto_context_options_init()",
                     opts->struct_size);
    size_t n =
        opts->struct_size < sizeof merged ? opts->struct_size : sizeof merged;
    memcpy(&merged, opts, n);
    merged.struct_size = sizeof merged;
  }
  const tyto_context_options *o = &merged;

  tyto_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx)
    return rt_fail(TYTO_ERR_OUT_OF_MEMORY, "out of memory");
  atomic_init(&ctx->refs, 1);
  conf_init(&ctx->cfg);
  ctx->ignore_env = (o->flags & TYTO_CONTEXT_IGNORE_ENV) != 0;
  ctx->log.level = TYTO_LOG_WARN;
  ctx->log.fn = o->log_fn;
  ctx->log.user = o->log_user;

  tyto_status st = read_config(ctx, o);
  if (st == TYTO_OK)
    st = set_log_level(ctx, o);
  if (st == TYTO_OK && !ctx->ignore_env)
    st = rt_env_check();
  if (st == TYTO_OK)
    st = build_search_path(ctx, o);
  if (st == TYTO_OK)
    st = topology_load(&ctx->topo, o->topology_xml);
  if (st == TYTO_OK)
    st = loader_load_all(ctx);
  if (st == TYTO_OK)
    st = check_plugin_sections(ctx);
  if (st == TYTO_OK)
    st = select_devices(ctx, o, strict);
  if (st != TYTO_OK) {
    /* Keep the message across the teardown's own calls. */
    char *msg = rt_strdup(tyto_errmsg());
    tyto_context_free(ctx);
    rt_fail(st, "%s", msg ? msg : "out of memory");
    free(msg);
    return st;
  }
  *out = ctx;
  return TYTO_OK;
}

tyto_status tyto_context_new(const tyto_context_options *opts,
                             tyto_context **out) {
  return context_create(opts, out, 1);
}

tyto_status tyto_context_inspect(const tyto_context_options *opts,
                                 tyto_context **out) {
  return context_create(opts, out, 0);
}

void rt_context_hold(tyto_context *ctx) {
  if (ctx)
    atomic_fetch_add_explicit(&ctx->refs, 1, memory_order_relaxed);
}

static void context_destroy(tyto_context *ctx);

void rt_context_release(tyto_context *ctx) {
  if (ctx &&
      atomic_fetch_sub_explicit(&ctx->refs, 1, memory_order_acq_rel) == 1)
    context_destroy(ctx);
}

/* The caller's reference goes; the context with it unless a program, an
 * evaluation cache or a data-parallel run still holds it (they keep
 * working, and the last of them to be freed closes the devices). */
void tyto_context_free(tyto_context *ctx) {
  rt_context_release(ctx);
}

static void context_destroy(tyto_context *ctx) {
  if (ctx->profiles_free)
    ctx->profiles_free(ctx->profiles);
  for (size_t i = 0; i < ctx->n_devices; i++)
    device_free(ctx->devices[i]);
  free(ctx->devices);
  free(ctx->selected);
  loader_unload_all(ctx);
  topology_free(&ctx->topo);
  conf_free(&ctx->cfg);
  strlist_free(&ctx->dirs);
  free(ctx->selection);
  free(ctx->selection_source);
  free(ctx->selection_error);
  free(ctx);
}

/* ---------------------------------------------------------------------- */
/* Queries                                                                 */

const char *tyto_version(void) {
  return PACKAGE_VERSION;
}

const char *tyto_context_config_path(const tyto_context *ctx) {
  return ctx ? ctx->cfg.path : NULL;
}

size_t tyto_context_plugin_dir_count(const tyto_context *ctx) {
  return ctx ? ctx->dirs.n : 0;
}

const char *tyto_context_plugin_dir(const tyto_context *ctx, size_t i) {
  return ctx && i < ctx->dirs.n ? ctx->dirs.items[i] : NULL;
}

const char *tyto_context_selection(const tyto_context *ctx) {
  return ctx && ctx->selection ? ctx->selection : "";
}

const char *tyto_context_selection_source(const tyto_context *ctx) {
  return ctx && ctx->selection_source ? ctx->selection_source : "";
}

const char *tyto_context_selection_error(const tyto_context *ctx) {
  return ctx ? ctx->selection_error : NULL;
}

const tyto_topology *tyto_context_topology(const tyto_context *ctx) {
  return ctx ? &ctx->topo.pub : NULL;
}

size_t tyto_context_found_plugin_count(const tyto_context *ctx) {
  return ctx ? ctx->n_plugins : 0;
}

const tyto_found_plugin *tyto_context_found_plugin(const tyto_context *ctx,
                                                   size_t i) {
  return ctx && i < ctx->n_plugins ? &ctx->plugins[i]->pub : NULL;
}

size_t tyto_context_device_info_count(const tyto_context *ctx) {
  return ctx ? ctx->n_devices : 0;
}

const tyto_device_info *tyto_context_device_info(const tyto_context *ctx,
                                                 size_t i) {
  return ctx && i < ctx->n_devices ? &ctx->devices[i]->info : NULL;
}

size_t tyto_context_device_count(const tyto_context *ctx) {
  return ctx ? ctx->n_selected : 0;
}

tyto_device *tyto_context_device(const tyto_context *ctx, size_t i) {
  return ctx && i < ctx->n_selected ? ctx->selected[i] : NULL;
}

tyto_device *tyto_context_find_device(const tyto_context *ctx, const char *id) {
  for (size_t i = 0; ctx && id && i < ctx->n_selected; i++)
    if (strcmp(ctx->selected[i]->info.id, id) == 0)
      return ctx->selected[i];
  return NULL;
}
