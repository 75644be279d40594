/* The INI configuration file (tyto.conf), parsed with inih. */
#ifndef TYTO_RUNTIME_CONF_H
#define TYTO_RUNTIME_CONF_H

#include <stdio.h>

#include "nameidx.h"
#include "strlist.h"

/* A key of a plugin's section, kept for the plugin's option() lookups. */
typedef struct conf_entry {
  char *section, *key, *value;
  int line;         /* of the key */
  int section_line; /* of the [section] header */
} conf_entry;

typedef struct conf {
  char *path;        /* the file read, NULL when none */
  char *devices;     /* NULL when unset */
  char *plugin_path; /* NULL when unset */
  int log_level;     /* -1 when unset */
  conf_entry *entries;
  size_t n_entries, cap_entries;
  nameidx by_key;       /* "section\nkey" -> position in entries */
  int plugin_path_line; /* of `plugin_path`, 0 when unset */
  strlist errors;       /* "path:line: message", in file order */
  strlist warnings;     /* same form; reported, not fatal */
} conf;

void conf_init(conf *cfg);

/* Reads `path` (shown in messages as `name`). Returns 0 when the file was
 * valid, -1 when errors were recorded in cfg->errors (the valid parts are
 * still kept). A file that cannot be opened is an error too. */
int conf_parse_file(conf *cfg, const char *path);
int conf_parse_stream(conf *cfg, FILE *f, const char *name);

/* The value of `key` in [section], or NULL. */
const char *conf_lookup(const conf *cfg, const char *section, const char *key);

void conf_free(conf *cfg);

#endif
